#!/usr/bin/python3
# ctest-cost: 120
"""process_workers.py - many `ckpt process` workers on one queue, and
crashes, against s3rver behind the signing proxy (conditional writes
enforced), through the deployment scripts of scripts/deploy/ (the ones
docs/deploy.md shows):
  * two copies of process-parallel.sh (GNU parallel, 3 jobs each) plus two
    whole-directory workers at once: every good run is processed exactly
    once and every bad run deleted exactly once (the other workers say
    done or leased), everything exits 0, every good run is at DEST byte for
    byte, its sharded step unsharded bit-exact (check_unshard.py);
  * process-slurm.sbatch's body as a 3-task array (SLURM_ARRAY_JOB_ID
    set, as Slurm does): the same, and each run in one task's rows only
    (the claims of the batch);
  * process-cron.sh: exit 75 while a pass holds the lock, then a pass;
  * with -n nothing changes and the plan is exact;
  * SIGKILL at random points of `process` workers (lease TTL 3 s), in
    rounds of 8 on a fresh queue (PROCESS_KILLS in all, default 24;
    PROCESS_SEED): after each kill every file of every good run is still
    at the source or, byte for byte, at DEST; a pass after the leases
    lapse converges to the same final state, with no lease held."""
import fcntl
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (BUILD, Checker, S3Env, age_tree,  # noqa: E402
                    gen_runs, remote_contents, snapshot, tool)
from s3test import old_ctime  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
CHECK = os.path.join(HERE, "..", "support", "check_unshard.py")
FIX = os.path.join(HERE, "..", "fixtures", "runs", "olmo-torch-new-1.13")
DEPLOY = os.path.join(ROOT, "scripts", "deploy")
B = "ckpt-test"
KILLS = int(os.environ.get("PROCESS_KILLS", "24"))


def make_runs(root):
    """Good runs: 2871001 (its step1000 sharded only: unshard work),
    2871005 and three copies, 2871101.tar.gz (2871001 again); bad:
    2871002, 2871004, 2871102.tar.gz; not runs: notes, logs."""
    gen_runs(root)
    shutil.rmtree(os.path.join(root, "2871003"))
    shutil.rmtree(os.path.join(root, "2871006"))
    shutil.rmtree(os.path.join(root, "2871001", "step1000-unsharded"))
    for i in range(1, 4):
        shutil.copytree(os.path.join(root, "2871005"),
                        os.path.join(root, "300000%d" % i), symlinks=True)
    for rid, name in (("2871001", "2871101"), ("2871002", "2871102")):
        with tarfile.open(os.path.join(root, name + ".tar.gz"), "w:gz") as t:
            t.add(os.path.join(root, rid), arcname=name)
    shutil.rmtree(os.path.join(root, "logs"))
    age_tree(root)


GOOD = ["2871001", "2871005", "3000001", "3000002", "3000003",
        "2871101.tar.gz"]
BADR = ["2871002", "2871004", "2871102.tar.gz"]


def rid(name):
    return name.split(".")[0]


def s3_tree(env, prefix, names=None):
    return remote_contents(env, B, prefix, names)


def rows_of(out):
    return [line.split("\t") for line in out.splitlines()
            if line and not line.startswith("total\t")]


def check_final(c, what, env, runs, prefix, snaps, tmp, state=None,
                leased_ok=()):
    """Runs at DEST below prefix; DEST's .ckpt-process below state (the
    prefix, unless runs went to their W&B paths below it). leased_ok:
    leases a killed worker may have left on runs no pass queues any more
    (docs/reliability.md, lapsed-lease)."""
    for name in GOOD:
        got = s3_tree(env, "%s/%s" % (prefix, rid(name)))
        uns = {k: v for k, v in got.items()
               if k.startswith("step1000-unsharded/")}
        rest = {k: v for k, v in got.items() if k not in uns}
        c.eq("%s: %s at DEST byte for byte" % (what, name), rest,
             snaps[name])
        if name.startswith(("2871001", "2871101")):
            c.eq("%s: %s step1000 unsharded" % (what, name), sorted(uns),
                 ["step1000-unsharded/config.yaml",
                  "step1000-unsharded/model.pt",
                  "step1000-unsharded/optim.pt",
                  "step1000-unsharded/train.pt"])
            d = os.path.join(tmp, "uns-" + rid(name))
            os.makedirs(d, exist_ok=True)
            for k, v in uns.items():
                with open(os.path.join(d, k.split("/")[1]), "wb") as f:
                    f.write(v)
            r = subprocess.run(["/usr/bin/python3", CHECK, d, FIX],
                               capture_output=True)
            c.eq("%s: %s unsharded bit-exact (%s)" % (
                what, name, r.stdout.decode().strip()), r.returncode, 0)
        else:
            c.eq("%s: %s nothing unsharded" % (what, name), uns, {})
    for name in BADR:
        c.eq("%s: bad %s not at DEST" % (what, name),
             s3_tree(env, "%s/%s" % (prefix, rid(name))), {})
    c.eq("%s: sources left" % what, sorted(os.listdir(runs)), ["notes"])
    _, ls, _ = tool(env, "ls", "s3://%s/%s/.ckpt-process"
                    % (B, state or prefix))
    names = [line.split("\t")[2] for line in ls.decode().splitlines()]
    # A worker killed after its run was done leaves its lease to lapse;
    # none may be held past its expiry.
    held = []
    for n in names:
        if n.endswith(".lease"):
            _, data, _ = tool(env, "cat", "s3://%s/%s/.ckpt-process/%s"
                              % (B, state or prefix, n))
            if json.loads(data)["expires"] > time.time() and \
                    n not in leased_ok:
                held.append(n)
    c.eq("%s: no lease held" % what, held, [])


def once_each(c, what, rows):
    for name in GOOD + BADR:
        acts = [r[0] for r in rows if os.path.basename(r[1]) == name]
        want = "process" if name in GOOD else "delete"
        c.eq("%s: %s %s exactly once" % (what, name, want),
             acts.count(want), 1)
        other = [a for a in acts if a != want and a != "skip"]
        c.eq("%s: %s otherwise done or skipped" % (what, name), other, [])
    for r in rows:
        if r[0] == "skip" and os.path.basename(r[1]) != "notes":
            c.true("%s: skip is a lease or done earlier: %r" % (what, r),
                   r[2].startswith(("leased by ", "already processed: ",
                                    "deleted earlier: ")))


def workers(c, env, tmp, opts):
    runs = os.path.join(tmp, "w-runs")
    make_runs(runs)
    snaps = {n: snapshot(os.path.join(runs, n)) for n in GOOD}
    dest = "s3://%s/w" % B
    par = os.path.join(DEPLOY, "process-parallel.sh")
    t0 = time.time()
    procs = [subprocess.Popen([par, "3", runs, dest] + opts, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    procs += [subprocess.Popen([CKPT, "process"] + opts +
                               [runs, "--dest", dest], env=env,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    print("4 workers (2 x parallel -j 3, 2 whole-dir): %.1f s"
          % (time.time() - t0))
    c.eq("workers: every worker exits 0",
         [p.returncode for p in procs], [0, 0, 0, 0])
    for p, (o, e) in zip(procs, outs):
        if p.returncode:
            print(e.decode()[-3000:], file=sys.stderr)
    rows = sum((rows_of(o.decode()) for o, _ in outs), [])
    once_each(c, "workers", rows)
    check_final(c, "workers", env, runs, "w", snaps, tmp)


def slurm(c, env, tmp, opts):
    runs = os.path.join(tmp, "s-runs")
    make_runs(runs)
    snaps = {n: snapshot(os.path.join(runs, n)) for n in GOOD}
    body = os.path.join(DEPLOY, "process-slurm.sbatch")
    procs = []
    for i in range(3):
        e = dict(env, SLURM_ARRAY_JOB_ID="4242", SLURM_ARRAY_TASK_ID=str(i),
                 SLURM_ARRAY_TASK_COUNT="3")
        procs.append(subprocess.Popen(["bash", body, runs,
                                       "s3://%s/s" % B] + opts, env=e,
                                      stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=600) for p in procs]
    c.eq("slurm: every task exits 0", [p.returncode for p in procs],
         [0, 0, 0])
    rows = sum((rows_of(o.decode()) for o, _ in outs), [])
    once_each(c, "slurm", rows)
    c.eq("slurm: each run in one task only", len(rows), len(GOOD) +
         len(BADR) + 1)
    check_final(c, "slurm", env, runs, "s", snaps, tmp)


def cron(c, env, tmp, opts):
    runs = os.path.join(tmp, "c-runs")
    make_runs(runs)
    script = os.path.join(DEPLOY, "process-cron.sh")
    lock = os.path.join(tmp, "cron.lock")
    e = dict(env, CKPT_LOCK=lock)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a pass still running
        r = subprocess.run([script, runs, "s3://%s/c" % B] + opts, env=e,
                           capture_output=True, timeout=60)
    c.eq("cron: a pass running: exit 75, nothing done",
         (r.returncode, r.stdout, len(os.listdir(runs))), (75, b"", 10))
    r = subprocess.run([script, runs, "s3://%s/c" % B] + opts, env=e,
                       capture_output=True, timeout=600)
    c.eq("cron: exit 0", r.returncode, 0)
    c.eq("cron: total row", r.stdout.decode().splitlines()[-1].split(
        "\t")[1:5], ["process=6", "delete=3", "skip=1", "error=0"])
    r = subprocess.run([script, "/nonexistent-runs", "s3://%s/c" % B],
                       env=e, capture_output=True, timeout=60)
    c.eq("cron: a failed run: exit 1", r.returncode, 1)


def digest(files):
    return {k: hashlib.md5(v).hexdigest() for k, v in files.items()}


def safe_after_kill(c, env, runs, snaps, prefix, k):
    """Every file of every good run is at the source, unchanged, or at
    DEST byte for byte; a bad run is whole or gone."""
    bad = []
    for name in GOOD:
        p = os.path.join(runs, name)
        if name.endswith(".tar.gz"):
            if os.path.exists(p):
                if os.path.getsize(p) != snaps[name + "#size"]:
                    bad.append(name + ": archive changed")
                continue
            missing = set(snaps[name])
        else:
            here = snapshot(p) if os.path.isdir(p) else {}
            missing = {f for f in snaps[name] if f not in here}
            bad += ["%s/%s changed at the source" % (name, f)
                    for f, v in here.items()
                    if f in snaps[name] and snaps[name][f] != v]
        if not missing:
            continue
        at = s3_tree(env, "%s/%s" % (prefix, rid(name)), missing)
        bad += ["%s/%s gone from the source, not at DEST" % (name, f)
                for f in sorted(missing)
                if at.get(f) != snaps[name][f]]
    c.eq("kill %d: no file lost" % k, bad, [])


def dry_run(c, env, tmp, opts):
    runs = os.path.join(tmp, "n-runs")
    make_runs(runs)
    before = {n: snapshot(os.path.join(runs, n)) for n in os.listdir(runs)}
    r = subprocess.run([CKPT, "process", "-n"] + opts +
                       [runs, "--dest", "s3://%s/n" % B],
                       env=env, capture_output=True, timeout=300)
    c.eq("dry run: exit 0, nothing changed, nothing at DEST",
         (r.returncode, {n: snapshot(os.path.join(runs, n))
                         for n in os.listdir(runs)}, s3_tree(env, "n")),
         (0, before, {}))
    acts = sorted(line.split("\t")[0] for line in
                  r.stdout.decode().splitlines())
    c.eq("dry run: the plan", acts, ["skip", "total"] +
         ["would-delete"] * 3 + ["would-process"] * 6)


def crash_round(c, env, tmp, opts, rng, rnd, kills):
    """A fresh queue, `kills` workers each SIGKILLed after a random time
    (so kills land in every phase, from the lease to the delete), then a
    pass once the dead workers' leases lapsed. Returns how many were
    killed before they finished."""
    runs = os.path.join(tmp, "k%d-runs" % rnd)
    make_runs(runs)
    snaps = {n: snapshot(os.path.join(runs, n)) for n in GOOD}
    for n in GOOD:
        if n.endswith(".tar.gz"):
            snaps[n + "#size"] = os.path.getsize(os.path.join(runs, n))
    prefix = "k%d" % rnd
    dest = "s3://%s/%s" % (B, prefix)
    killed = 0
    for k in range(kills):
        p = subprocess.Popen([CKPT, "process"] + opts + ["--lease-ttl", "3",
                             runs, "--dest", dest], env=env,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.6))
        if p.poll() is None:
            p.kill()
            killed += 1
        p.wait()
        safe_after_kill(c, env, runs, snaps, prefix, k)
        if k % 4 == 3:
            time.sleep(3.5)  # leases of the dead lapse: others go on
    time.sleep(3.5)
    r = subprocess.run([CKPT, "process"] + opts + [runs, "--dest", dest],
                       env=env, capture_output=True, timeout=600)
    c.eq("round %d converges: exit 0" % rnd, r.returncode, 0)
    if r.returncode:
        print(r.stdout.decode(), r.stderr.decode()[-3000:], file=sys.stderr)
    check_final(c, "round %d" % rnd, env, runs, prefix,
                {n: snaps[n] for n in GOOD}, tmp)
    return killed


def crashes(c, env, tmp, opts):
    rng = random.Random(int(os.environ.get("PROCESS_SEED", "13")))
    killed, t0 = 0, time.time()
    rounds = max(1, KILLS // 8)
    for rnd in range(rounds):
        killed += crash_round(c, env, tmp, opts, rng, rnd, KILLS // rounds)
    print("%d of %d workers killed with SIGKILL mid-run, %d rounds "
          "(%.1f s)" % (killed, KILLS, rounds, time.time() - t0))
    c.true("most workers were killed mid-run (%d)" % killed,
           killed >= KILLS // 2)


def main():
    # Trees are aged with utime(): ctimes aged too (s3test.old_ctime).
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-workers-")
    try:
        with S3Env() as s3:
            env = s3.env()
            env["CKPT"] = CKPT
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            env["TMPDIR"] = tmp
            env["PATH"] = os.path.dirname(CKPT) + ":" + env["PATH"]
            opts = ["--no-wandb", "-q"]
            workers(c, env, tmp, opts)
            slurm(c, env, tmp, opts)
            cron(c, env, tmp, opts)
            dry_run(c, env, tmp, opts)
            crashes(c, env, tmp, opts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
