#!/usr/bin/python3
# ctest-cost: 90
"""process_slurm_signal.py - Slurm's time limit on the Slurm recipe, under
a real one-node Slurm (tests/support/slurmenv.py, KillWait=10) with ckpt
installed in a scratch prefix: a 2-task array of the installed
process-slurm.sbatch works on the queue of process_workers.py against a
slowed S3 server; once its tasks upload, `scancel` does what the time
limit does (SIGTERM to the tasks, SIGKILL KillWait seconds later). Then:

- every task logged `ckpt: interrupted: rerun to resume (SIGTERM)` last
  and ended by itself, exit code 143:0 (not killed: 0:9);
- no lease is left at DEST, and no claim of an unfinished run (every
  claim left is done);
- the same sbatch line right after (`--wait`) exits 0 with every task
  COMPLETED 0:0, no run skipped as leased, every good run processed and
  every bad one deleted once over the two arrays (the second finishing
  what the first left), every good run at DEST byte for byte.

Exits 77 (ctest: skipped) only where a private Slurm cannot run at all
(not root); a daemon that does not start fails the test."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import Checker, S3Env, old_ctime, tool  # noqa: E402
from slurmenv import SlurmEnv, Unavailable  # noqa: E402
from installed import install, script  # noqa: E402
import process_workers as pw  # noqa: E402
from process_slurm import task_info  # noqa: E402

ROW = re.compile(r"^(process|delete|skip|error)\t")
LAST = "ckpt: interrupted: rerun to resume (SIGTERM)"


def logs_of(submit, job):
    out = {}
    for name in sorted(os.listdir(submit)):
        if name.startswith("ckpt-process-%s_" % job):
            with open(os.path.join(submit, name)) as f:
                out[name] = f.read().splitlines()
    return out


def wait(cond, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def run(c, s3, sl, tmp, env, sbatch):
    runs = os.path.join(tmp, "runs")
    pw.make_runs(runs)
    snaps = {n: pw.snapshot(os.path.join(runs, n)) for n in pw.GOOD}
    submit = os.path.join(tmp, "submit")
    os.makedirs(submit)
    dest = "s3://%s/t" % pw.B
    s3.configure(slow_ms=300)
    r = subprocess.run(["sbatch", "--parsable", "--array=0-1", sbatch, runs,
                        dest, "--no-wandb"], env=env, cwd=submit,
                       capture_output=True, text=True, timeout=60)
    c.eq("sbatch: submitted (%s)" % r.stderr.strip(), r.returncode, 0)
    job = r.stdout.strip().split(";")[0]
    busy = wait(lambda: sum(any(re.search(r": (unshard|upload) ok", ln)
                                for ln in lines)
                            for lines in logs_of(submit, job).values()) == 2,
                90)
    c.true("both tasks reached an upload", busy)
    t0 = time.time()
    subprocess.run(["scancel", job], env=env, check=True, timeout=30)
    done = wait(lambda: all(f["JobState"] not in ("RUNNING", "PENDING",
                                                  "COMPLETING")
                            for f in task_info(sl, job).values()), 60)
    took = time.time() - t0
    s3.configure(slow_ms=0)
    print("scancel: tasks ended %.1f s after it" % took)
    c.true("tasks ended after scancel", done)
    info = task_info(sl, job)
    c.eq("each task ended by itself: exit 143",
         {t: (f["JobState"], f["ExitCode"]) for t, f in info.items()},
         {0: ("CANCELLED", "143:0"), 1: ("CANCELLED", "143:0")})
    c.true("before KillWait (%.1f s)" % took, took < 10)
    first = []
    for name, lines in logs_of(submit, job).items():
        c.eq("%s: last line" % name,
             lines[-1].split(" ", 1)[1] if lines else "", LAST)
        first += [ln.split("\t") for ln in lines if ROW.match(ln)]
    failed = [x for x in first if x[0] == "error"]
    c.true("runs in flight failed 'interrupted' (%s)" % failed, failed and
           all(x[2].endswith(": interrupted") for x in failed))
    _, ls, _ = tool(s3.env(), "ls", "s3://%s/t/.ckpt-process" % pw.B)
    names = [x.split("\t")[2] for x in ls.decode().splitlines()]
    c.eq("no lease left", [n for n in names if n.endswith(".lease")], [])
    undone = []
    for n in names:
        if n.endswith(".claim"):
            _, data, _ = tool(s3.env(), "cat", "s3://%s/t/.ckpt-process/%s"
                              % (pw.B, n))
            if not json.loads(data)["done"]:
                undone.append(n)
    c.eq("no claim of an unfinished run", undone, [])
    c.eq("no claim of a run that failed", sorted(
        n[:-len(".claim")] for n in names if n.endswith(".claim") and
        pw.rid(os.path.basename(n)) in
        [pw.rid(os.path.basename(x[1])) for x in failed]), [])

    resubmit = os.path.join(tmp, "resubmit")
    os.makedirs(resubmit)
    t0 = time.time()
    r = subprocess.run(["sbatch", "--parsable", "--wait", "--array=0-1",
                        sbatch, runs, dest, "--no-wandb", "-q"], env=env,
                       cwd=resubmit, capture_output=True, text=True,
                       timeout=300)
    print("resubmitted array: %.1f s" % (time.time() - t0))
    c.eq("resubmitted: sbatch exits 0", r.returncode, 0)
    job2 = r.stdout.strip().split(";")[0]
    c.eq("resubmitted: every task COMPLETED 0:0",
         {t: (f["JobState"], f["ExitCode"])
          for t, f in task_info(sl, job2).items()},
         {0: ("COMPLETED", "0:0"), 1: ("COMPLETED", "0:0")})
    second = [ln.split("\t") for lines in logs_of(resubmit, job2).values()
              for ln in lines if ROW.match(ln)]
    c.eq("resubmitted: nothing leased",
         [x for x in second if "leased by" in "\t".join(x)], [])
    rows = [x for x in first if x[0] != "error"] + second
    pw.once_each(c, "both arrays", rows)
    pw.check_final(c, "resubmitted", s3.env(), runs, "t", snaps, tmp)


def main():
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-slurm-signal-")
    try:
        try:
            sl = SlurmEnv(tmp).__enter__()
        except Unavailable as e:
            print("SKIP: process_slurm_signal (%s)" % e, flush=True)
            return 77
        try:
            prefix = install(tmp)
            with S3Env() as s3:
                env = sl.env(s3.env())
                env.pop("CKPT", None)
                env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
                env["TMPDIR"] = tmp
                env["PATH"] = os.path.join(prefix, "bin") + ":" + \
                    env["PATH"]
                run(c, s3, sl, tmp, env, script(prefix,
                                                "process-slurm.sbatch"))
        finally:
            sl.__exit__(None, None, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
