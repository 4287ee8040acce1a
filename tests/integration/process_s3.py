#!/usr/bin/python3
# ctest-cost: 60
"""process_s3.py - `ckpt process` end to end on the sample runs of
tests/support/gen_runs.py (directories and every archive kind), to a
local DEST and to s3rver behind the signing proxy (conditional writes
enforced): exact rows and exit codes; every good run at
DEST/[ENTITY/PROJECT/]RUN_ID/ uncompressed, byte for byte, with its logs
and without OLMo's `latest` link; bad runs and processed sources gone;
an unmapped run, a live run and a run leased by another worker untouched
and reported; --keep-bad and --keep-source change nothing they should
not; a rerun says `done`; a run whose state says uploaded (a crash before
its delete) is verified again and deleted, never judged again."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (BUILD, Checker, S3Env, contents,  # noqa: E402
                    gen_runs, remote_contents, snapshot, tool)
from s3test import old_ctime  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
LEASE_TOOL = os.path.join(BUILD, "lease_tool")
GEN = os.path.join(HERE, "..", "support", "gen_runs.py")
B = "ckpt-test"

BAD = {
    "2871002": "no complete checkpoint with step > 0 (step0: step 0)",
    "2871003": "no complete checkpoint with step > 0 (step0: step 0; "
               "step500: model_and_optim/.metadata missing)",
    "2871004": "no checkpoint",
    "2871006": "no complete checkpoint with step > 0 (step1500: "
               "model_and_optim/__1_0.distcp truncated)",
}
ARCH = {"2871101.tar": "2871001", "2871102.tar.gz": "2871002",
        "2871103.tar.zst": "2871003", "2871105.zip": "2871005",
        "2871106.tar.xz": "2871006", "2871107.tar.bz2": "2871004"}
NOT_RUN = ("does not look like a run (no config.yaml with wandb/ or "
           "train_data/, and no checkpoint directory)")


def ckpt(env, *args):
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       timeout=600)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def rows(out):
    """Rows without the seconds column (processed rows) and the total's
    seconds field."""
    res = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "process":
            f = f[:-1]
        if f[0] == "total":
            f = [x for x in f if not x.startswith("seconds=")]
        res.append(f)
    return res


def in_order(rs, runs):
    """Run rows in the order of runs (several runs are worked on at once,
    so rows come as runs finish); rows of other runs last, by name."""
    return sorted(rs, key=lambda r: (runs.index(r[1]) if r[1] in runs
                                     else len(runs), r[1]))


def gen(root):
    """The sample runs and archives, old enough for the default
    --min-age 1d."""
    gen_runs(root, archives=True)


local_tree = contents


def s3_tree(env, prefix):
    return remote_contents(env, B, prefix, check=True)


def expected_with_logs(runs, src, run_id):
    want = dict(snapshot(os.path.join(runs, src)))
    for n in sorted(os.listdir(os.path.join(runs, "logs"))):
        if run_id in n:
            with open(os.path.join(runs, "logs", n), "rb") as f:
                want["logs/" + n] = f.read()
    return want


def local_dest(c, env, tmp):
    """--no-wandb to a local DEST, the whole sample in one SRC."""
    runs, dest = os.path.join(tmp, "runs"), os.path.join(tmp, "dest")
    gen(runs)
    good = {"2871001": "2871001", "2871005": "2871005",
            "2871101.tar": "2871101", "2871105.zip": "2871105"}
    want = {rid: expected_with_logs(runs, src, rid)
            for src, rid in good.items()}
    rc, out, err = ckpt(env, "process", "--no-wandb", "--logs",
                        os.path.join(runs, "logs"), runs, "--dest", dest)
    c.eq("local: exit 0", rc, 0)
    size = {s: sum(len(v) for v in want[r].values())
            for s, r in good.items()}
    got = rows(out)
    exp = []
    for name in sorted(list(good) + list(BAD) + [a for a in ARCH
                       if ARCH[a] in BAD] + ["notes"]):
        p = os.path.join(runs, name)
        if name in good:
            rid = good[name]
            exp.append(["process", p, os.path.join(dest, rid),
                        str(len(want[rid])), str(size[name]), "0"])
        elif name == "notes":
            exp.append(["skip", p, NOT_RUN])
        else:
            exp.append(["delete", p, BAD[ARCH.get(name, name)]])
    got_cmp = in_order([g[:6] if g[0] == "process" else g
                        for g in got[:-1]], [e[1] for e in exp])
    c.eq("local: rows", got_cmp, exp)
    c.eq("local: freed of the directory runs", sorted(
         (os.path.basename(g[1]), g[6]) for g in got
         if g[0] == "process" and not g[1].endswith((".tar", ".zip"))),
         [("2871001", "468352"), ("2871005", "27908")])
    c.eq("local: total", got[-1],
         ["total", "process=4", "delete=8", "skip=1", "error=0",
          "files=%d" % sum(len(w) for w in want.values()),
          "bytes=%d" % sum(size.values()), "steps=0",
          "freed=%s" % got[-1][8].split("=")[1]])
    c.eq("local: notes reported once, by its row",
         ([g[0] for g in got if g[1] == runs + "/notes"],
          [line for line in err.splitlines() if "warning" in line]),
         (["skip"], []))
    for rid, w in want.items():
        c.eq("local: %s at DEST byte for byte" % rid,
             local_tree(os.path.join(dest, rid)), w)
    c.eq("local: sources left", sorted(os.listdir(runs)), ["logs", "notes"])
    c.eq("local: logs kept", sorted(os.listdir(os.path.join(runs, "logs"))),
         ["slurm-2871001.err", "slurm-2871001.out", "slurm-2871005.out"])
    st = json.load(open(os.path.join(dest, ".ckpt-process", "2871001.json")))
    c.eq("local: state", (st["phase"], st["dest"], st["files"]),
         ("done", "2871001", len(want["2871001"])))
    c.true("local: no lease left", not [n for n in os.listdir(os.path.join(
        dest, ".ckpt-process")) if n.endswith(".lease")])
    # A rerun naming runs that are gone (a stale glob): done, exit 0.
    again = [os.path.join(runs, n) for n in
             ("2871001", "2871002", "2871105.zip")]
    rc, out, _ = ckpt(env, "process", "--no-wandb", *again, "--dest", dest)
    c.eq("local rerun: exit 0", rc, 0)
    c.eq("local rerun: rows", in_order(rows(out)[:-1], again), [
        ["skip", os.path.join(runs, "2871001"),
         "already processed: " + os.path.join(dest, "2871001")],
        ["skip", os.path.join(runs, "2871002"),
         "deleted earlier: " + BAD["2871002"]],
        ["skip", os.path.join(runs, "2871105.zip"),
         "already processed: " + os.path.join(dest, "2871105")]])
    # A run never seen that does not exist is a failure.
    rc, out, _ = ckpt(env, "process", "--no-wandb",
                      os.path.join(runs, "9999999"), "--dest", dest)
    c.eq("missing run: exit 1", rc, 1)
    c.eq("missing run: row", rows(out)[0],
         ["error", os.path.join(runs, "9999999"), "judge: stat '%s': No "
          "such file or directory" % os.path.join(runs, "9999999")])
    # An empty queue: exit 0, the total only.
    os.makedirs(os.path.join(tmp, "empty"))
    rc, out, _ = ckpt(env, "process", "--no-wandb",
                      os.path.join(tmp, "empty"), "--dest", dest)
    c.eq("empty queue: exit 0", (rc, [r[0] for r in rows(out)]),
         (0, ["total"]))


def live_and_keep(c, env, tmp):
    """Fresh runs are live (default --min-age 1d); --keep-bad reports a
    bad run; --keep-source uploads and verifies but keeps the source, and
    a later run without it deletes the source."""
    runs, dest = os.path.join(tmp, "runs2"), os.path.join(tmp, "dest2")
    subprocess.run([sys.executable, GEN, runs], check=True,
                   capture_output=True)
    r1, r2 = os.path.join(runs, "2871001"), os.path.join(runs, "2871002")
    rc, out, _ = ckpt(env, "process", "--no-wandb", r1, "--dest", dest)
    c.eq("live: exit 0", rc, 0)
    c.eq("live: row", rows(out)[0][:2] + [rows(out)[0][2][:25]],
         ["skip", r1, "live: newest file written"])
    c.true("live: untouched, nothing at DEST", os.path.isdir(r1) and
           not os.path.exists(os.path.join(dest, "2871001")))
    # A bad run's delete that a killed worker left renamed aside (a dead
    # pid of this host): a pass over the directory finishes it.
    r3 = os.path.join(runs, "2871003")
    dead = subprocess.Popen(["true"])
    dead.wait()
    aside = ".2871003.ckpt-del-%s-%d" % (os.uname().nodename, dead.pid)
    os.rename(r3, os.path.join(runs, aside))
    # The renamed run is judged again before its delete is finished: it
    # must still be bad and not live, so its files are given the age of a
    # run that a clean judged bad (older than --min-age).
    old = time.time() - 3 * 86400
    for d, _, names in os.walk(os.path.join(runs, aside)):
        for n in names:
            os.utime(os.path.join(d, n), (old, old), follow_symlinks=False)
    rc, out, _ = ckpt(env, "process", "--no-wandb", runs, "--dest", dest)
    c.eq("interrupted delete: finished (the rest is live), exit 0",
         (rc, [r for r in rows(out) if "2871003" in r[1]]),
         (0, [["delete", r3, "finished an interrupted delete (%s)" % aside]]))
    c.true("interrupted delete: gone",
           not os.path.exists(os.path.join(runs, aside)))
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--min-age", "0",
                      "--keep-bad", r2, "--dest", dest)
    c.eq("keep-bad: exit 0 and row", (rc, rows(out)[0]),
         (0, ["skip", r2, "bad: %s (--keep-bad)" % BAD["2871002"]]))
    c.true("keep-bad: kept", os.path.isdir(os.path.join(r2, "step0")))
    want = snapshot(r1)
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--min-age", "0",
                      "--keep-source", r1, "--dest", dest)
    c.eq("keep-source: exit 0, processed, nothing freed",
         (rc, rows(out)[0][0], rows(out)[0][6]), (0, "process", "0"))
    c.eq("keep-source: source intact", snapshot(r1), want)
    c.true("keep-source: latest link intact",
           os.path.islink(os.path.join(r1, "latest")))
    c.eq("keep-source: at DEST", local_tree(os.path.join(dest, "2871001")),
         want)
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--min-age", "0",
                      "--keep-source", r1, "--dest", dest)
    c.eq("keep-source rerun: done", (rc, rows(out)[0][:1],
                                     rows(out)[0][2][:18]),
         (0, ["skip"], "already processed:"))
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--min-age", "0", r1,
                      "--dest", dest)
    c.eq("then without it: processed, source freed",
         (rc, rows(out)[0][0], rows(out)[0][6]), (0, "process", "468352"))
    c.true("then without it: source and latest link gone",
           not os.path.lexists(r1))


def many_runs(c, env, tmp):
    """-j 4 to s3:// (--transfers 3: fewer files in flight than runs): each
    queued run gets exactly one row and is worked on exactly once (one
    lease, one state object), every good run arrives byte for byte, and
    the totals are the exact sums of the rows."""
    runs = os.path.join(tmp, "runs4")
    gen(runs)
    good = {"2871001": "2871001", "2871005": "2871005",
            "2871101.tar": "2871101", "2871105.zip": "2871105"}
    want = {rid: expected_with_logs(runs, src, rid)
            for src, rid in good.items()}
    queued = sorted(list(good) + list(BAD) + [a for a in ARCH
                    if ARCH[a] in BAD] + ["notes"])
    rc, out, err = ckpt(env, "process", "--no-wandb", "-j", "4",
                        "--transfers", "3", "--logs",
                        os.path.join(runs, "logs"), runs,
                        "--dest", "s3://%s/many" % B)
    c.eq("runs 4: exit 0", rc, 0)
    got = rows(out)
    c.eq("runs 4: one row per queued run",
         sorted(os.path.basename(g[1]) for g in got[:-1]), queued)
    c.eq("runs 4: actions", sorted((os.path.basename(g[1]), g[0])
                                   for g in got[:-1]),
         sorted([(n, "process") for n in good] +
                [(n, "skip") for n in ["notes"]] +
                [(n, "delete") for n in queued
                 if n not in good and n != "notes"]))
    files = sum(len(w) for w in want.values())
    size = sum(len(v) for w in want.values() for v in w.values())
    proc = [g for g in got if g[0] == "process"]
    c.eq("runs 4: rows add up", (sum(int(g[3]) for g in proc),
                                 sum(int(g[4]) for g in proc)),
         (files, size))
    freed = sum(int(g[6]) for g in proc)
    c.eq("runs 4: total", got[-1],
         ["total", "process=4", "delete=8", "skip=1", "error=0",
          "files=%d" % files, "bytes=%d" % size, "steps=0",
          "freed=%s" % got[-1][8].split("=")[1]])
    c.true("runs 4: freed total >= the processed rows' freed",
           int(got[-1][8].split("=")[1]) >= freed > 0)
    for rid, w in want.items():
        c.eq("runs 4: %s at DEST byte for byte" % rid,
             s3_tree(env, "many/" + rid), w)
    _, ls, _ = tool(env, "ls", "-r", "s3://%s/many/.ckpt-process" % B)
    names = sorted(line.split("\t")[2] for line in
                   ls.decode().splitlines())
    c.eq("runs 4: one state object per run, no lease left", names,
         sorted("%s.json" % n.split(".")[0] for n in queued
                if n != "notes"))
    c.eq("runs 4: sources left", sorted(os.listdir(runs)),
         ["logs", "notes"])
    # -j 1: one run after the other, rows in the queue's order.
    runs1 = os.path.join(tmp, "runs1")
    gen(runs1)
    rc, out, _ = ckpt(env, "process", "--no-wandb", "-j", "1", "--logs",
                      os.path.join(runs1, "logs"), runs1,
                      "--dest", os.path.join(tmp, "dest1"))
    c.eq("runs 1: exit 0, rows in queue order",
         (rc, [os.path.basename(g[1]) for g in rows(out)[:-1]]),
         (0, queued))


def s3_dest(c, s3, env, tmp):
    """--wandb-map to s3://: runs under ENTITY/PROJECT/RUN_ID; an
    unmapped run and a leased run are untouched; a crash after the upload
    (state "uploaded", source half deleted) finishes with verify and
    delete, without judging the rest of the run again."""
    runs = os.path.join(tmp, "runs3")
    gen(runs)
    dest = "s3://%s/arch" % B
    mp = os.path.join(tmp, "map.tsv")
    with open(mp, "w") as f:
        f.write("# RUN_ID\tPATH\tEVIDENCE\n"
                "2871001\tai2/olmo-tiny/a1b2c3d4\tlocal-id\n"
                "2871005\t-\tno W&B run fits\n"
                "2871101\tai2/olmo-tiny/a1b2c3d4-tar\tlocal-id\n")
    want1 = expected_with_logs(runs, "2871001", "2871001")
    want101 = snapshot(os.path.join(runs, "2871101.tar"))
    # Another worker holds 2871105's lease.
    r = subprocess.run([LEASE_TOOL, "acquire",
                        dest + "/.ckpt-process/2871105.lease", "--host",
                        "other-node"], env=env, capture_output=True)
    c.true("lease planted: %r" % r.stdout, r.stdout.startswith(b"acquired"))
    srcs = [os.path.join(runs, n) for n in
            ("2871001", "2871005", "2871101.tar", "2871105.zip", "2871002")]
    rc, out, err = ckpt(env, "process", "--wandb-map", mp, "--logs",
                        os.path.join(runs, "logs"), *srcs, "--dest", dest)
    got = rows(out)
    got = in_order(got[:-1], srcs) + got[-1:]
    c.eq("s3: exit 1 (one unmapped)", rc, 1)
    c.eq("s3: rows", [g[:3] for g in got[:-1]], [
        ["process", srcs[0], dest + "/ai2/olmo-tiny/a1b2c3d4"],
        ["error", srcs[1], "map: no W&B run path for run '2871005' "
         "(no W&B run fits)"],
        ["process", srcs[2], dest + "/ai2/olmo-tiny/a1b2c3d4-tar"],
        ["skip", srcs[3], got[3][2] if got[3][2].startswith(
            "leased by other-node:") else "leased by other-node:..."],
        ["delete", srcs[4], BAD["2871002"]]])
    c.true("s3: leased row names the expiry", " until 20" in got[3][2])
    c.eq("s3: 2871001 at DEST", s3_tree(env, "arch/ai2/olmo-tiny/a1b2c3d4"),
         want1)
    c.eq("s3: 2871101.tar at DEST, extracted",
         s3_tree(env, "arch/ai2/olmo-tiny/a1b2c3d4-tar"), want101)
    c.eq("s3: sources", sorted(os.listdir(runs)), sorted(
        ["2871003", "2871004", "2871005", "2871006", "2871102.tar.gz",
         "2871103.tar.zst", "2871105.zip", "2871106.tar.xz",
         "2871107.tar.bz2", "logs", "notes"]))
    _, ls, _ = tool(env, "ls", "s3://%s/arch/.ckpt-process" % B)
    names = sorted(line.split("\t")[2] for line in
                   ls.decode().splitlines())
    c.eq("s3: state objects; only the other worker's lease left", names,
         ["2871001.json", "2871002.json", "2871101.json", "2871105.lease"])
    # Crash between upload and delete: state "uploaded", half the source
    # deleted (its complete checkpoint among it). A rerun must verify and
    # delete, not judge the remains as a bad run.
    r5 = os.path.join(runs, "2871005")
    with open(mp, "a") as f:
        f.write("2871005\tai2/olmo-tiny/e7f8a9b0\tlocal-id\n")
    rc, out, _ = ckpt(env, "process", "--wandb-map", mp, "--keep-source",
                      r5, "--dest", dest)
    c.eq("s3 keep-source: processed", (rc, rows(out)[0][0]),
         (0, "process"))
    state = {"run": "2871005", "phase": "uploaded",
             "dest": "ai2/olmo-tiny/e7f8a9b0", "files": 8, "bytes": 0}
    p = os.path.join(tmp, "state.json")
    with open(p, "w") as f:
        json.dump(state, f)
    tool(env, "put", p, dest + "/.ckpt-process/2871005.json")
    shutil.rmtree(os.path.join(r5, "step3000-unsharded"))
    rc, out, err = ckpt(env, "process", "--wandb-map", mp, r5, "--dest",
                        dest)
    c.eq("s3 crash rerun: processed, not deleted as bad",
         (rc, rows(out)[0][:3]),
         (0, ["process", r5, dest + "/ai2/olmo-tiny/e7f8a9b0"]))
    c.true("s3 crash rerun: not judged again", "judge" not in err)
    c.true("s3 crash rerun: source gone", not os.path.exists(r5))
    c.true("s3 crash rerun: checkpoint still at DEST",
           "step3000-unsharded/model.pt" in
           s3_tree(env, "arch/ai2/olmo-tiny/e7f8a9b0"))


def json_events(c, env, tmp):
    """--json: one event per phase, then the run's row, then the total."""
    runs, dest = os.path.join(tmp, "runs4"), os.path.join(tmp, "dest4")
    gen(runs)
    r1 = os.path.join(runs, "2871005")
    rc, out, _ = ckpt(env, "process", "--json", "--no-wandb", r1, "--dest",
                      dest)
    ev = [json.loads(line) for line in out.splitlines()]
    c.eq("json: exit 0", rc, 0)
    c.eq("json: phases", [(e.get("phase", e["type"]),
                           e.get("status", e.get("action")))
                          for e in ev[:-1]], [
        ("lease", "ok"), ("judge", "ok"), ("unshard", "ok"),
        ("upload", "ok"), ("verify", "ok"), ("delete", "ok"),
        ("run", "process")])
    c.eq("json: the run", {k: ev[-2][k] for k in ("run", "id", "dest",
                                                  "files", "freed")},
         {"run": r1, "id": "2871005", "dest": os.path.join(dest, "2871005"),
          "files": 7, "freed": 27908})
    c.eq("json: total", (ev[-1]["type"], ev[-1]["process"],
                         ev[-1]["error"]), ("total", 1, 0))
    # --keep-archive: the archive as it is, beside the run's directory.
    a = os.path.join(runs, "2871101.tar")
    with open(a, "rb") as f:
        data = f.read()
    rc, out, _ = ckpt(env, "process", "--keep-archive", "--no-wandb", a,
                      "--dest", dest)
    c.eq("keep-archive: exit 0, one file, freed the archive",
         (rc, rows(out)[0][:5], rows(out)[0][6]),
         (0, ["process", a, os.path.join(dest, "2871101"), "1",
              str(len(data))], str(len(data))))
    with open(os.path.join(dest, "2871101.tar"), "rb") as f:
        c.eq("keep-archive: stored as it was", f.read() == data, True)
    c.eq("keep-archive: source gone, nothing extracted",
         (os.path.exists(a), os.path.exists(os.path.join(dest, "2871101"))),
         (False, False))


def usage(c, env):
    for args, what in ((["process", "x"], "no --dest"),
                       (["process", "--dest", "d"], "no SRC"),
                       (["process", "--no-wandb", "--wandb-map", "m", "x",
                         "--dest", "d"], "both map options"),
                       (["process", "--unshard", "some", "x", "--dest", "d"],
                        "bad --unshard"),
                       (["process", "--min-age", "soon", "x", "--dest", "d"],
                        "bad --min-age"),
                       (["process", "--runs", "65", "x", "--dest", "d"],
                        "bad --runs")):
        rc, out, err = ckpt(env, *args)
        c.eq("usage: %s: exit 2, no rows" % what, (rc, out), (2, ""))


def main():
    # Trees are aged with utime(): ctimes aged too (s3test.old_ctime).
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-")
    try:
        with S3Env() as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            usage(c, env)
            local_dest(c, env, tmp)
            live_and_keep(c, env, tmp)
            s3_dest(c, s3, env, tmp)
            many_runs(c, env, tmp)
            json_events(c, env, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
