#!/usr/bin/python3
# ctest-cost: 30
"""process_slurm.py - scripts/deploy/process-slurm.sbatch under a real
Slurm: a one-node cluster started here (tests/support/slurmenv.py:
munged, slurmctld, slurmd from Debian's slurm-wlm, private directory),
then exactly the command docs/deploy.md shows,

    sbatch --wait --array=0-2 scripts/deploy/process-slurm.sbatch \\
        RUNS s3://ckpt-test/slurm --no-wandb -q

submitted from a fresh directory, over the queue of process_workers.py
(6 good runs, 3 bad, one non-run) against s3rver behind the signing
proxy. Checks: sbatch exits 0; Slurm says each of the 3 tasks COMPLETED
with exit code 0; each task's log is where the #SBATCH --output line puts
it (ckpt-process-JOBID_TASK.log in the submit directory) and holds its
rows; every run appears in exactly one task's rows (processed once, or
deleted once, or the non-run skipped once); every good run is at DEST
byte for byte, its sharded step unsharded bit-exact; no source is left
but the non-run; no lease held.

Exits 77 (ctest: skipped, not passed) with the reason only when the
machine cannot run a private Slurm (not root); missing packages or a
daemon that does not start (a broken generated slurm.conf) fail it."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import Checker, S3Env, old_ctime  # noqa: E402
from slurmenv import SlurmEnv, StartFailed, Unavailable  # noqa: E402
import process_workers as pw  # noqa: E402

SBATCH = os.path.join(ROOT, "scripts", "deploy", "process-slurm.sbatch")
ROW = re.compile(r"^(processed|done|deleted|skipped|failed)\t")


def task_states(sl, job):
    """{task: (state, exit code)} from `scontrol show job` (no accounting
    daemon: finished jobs stay in slurmctld for MinJobAge, 300 s)."""
    r = subprocess.run(["scontrol", "-o", "show", "job", job],
                       env=sl.env(), capture_output=True, text=True,
                       timeout=30)
    out = {}
    for line in r.stdout.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        out[int(f["ArrayTaskId"])] = (f["JobState"], f["ExitCode"])
    return out


def run(c, s3, sl, tmp):
    runs = os.path.join(tmp, "runs")
    pw.make_runs(runs)
    snaps = {n: pw.snapshot(os.path.join(runs, n)) for n in pw.GOOD}
    submit = os.path.join(tmp, "submit")
    os.makedirs(submit)
    env = sl.env(s3.env())
    env["CKPT"] = pw.CKPT
    env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
    env["TMPDIR"] = tmp
    env["PATH"] = os.path.dirname(pw.CKPT) + ":" + env["PATH"]
    cmd = ["sbatch", "--parsable", "--wait", "--array=0-2", SBATCH, runs,
           "s3://%s/slurm" % pw.B, "--no-wandb", "-q"]
    r = subprocess.run(cmd, env=env, cwd=submit, capture_output=True,
                       text=True, timeout=600)
    c.eq("sbatch --wait exits 0 (%s)" % r.stderr.strip(), r.returncode, 0)
    job = r.stdout.strip().split(";")[0]
    c.eq("every task COMPLETED, exit 0", task_states(sl, job),
         {i: ("COMPLETED", "0:0") for i in range(3)})
    logs = sorted(os.listdir(submit))
    c.eq("logs where #SBATCH --output says", logs,
         ["ckpt-process-%s_%d.log" % (job, i) for i in range(3)])
    rows, per_task = [], []
    for name in logs:
        with open(os.path.join(submit, name)) as f:
            mine = [line.rstrip("\n").split("\t") for line in f
                    if ROW.match(line)]
        per_task.append(len(mine))
        rows += mine
    c.eq("rows split 4/3/3 over the tasks (every 3rd run of the listing)",
         per_task, [4, 3, 3])
    pw.once_each(c, "slurm", rows)
    c.eq("each run in one task only",
         sorted(os.path.basename(r[1]) for r in rows),
         sorted(pw.GOOD + pw.BADR + ["notes"]))
    pw.check_final(c, "slurm", s3.env(), runs, "slurm", snaps, tmp)


def main():
    # Trees are aged with utime(): ctimes aged too (s3test.old_ctime).
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-slurm-")
    try:
        try:
            sl = SlurmEnv(tmp).__enter__()
        except Unavailable as e:
            print("SKIP: process_slurm (%s)" % e, flush=True)
            return 77
        except StartFailed as e:
            print("FAIL a one-node Slurm did not start: %s" % e)
            return 1
        try:
            with S3Env() as s3:
                run(c, s3, sl, tmp)
        finally:
            sl.__exit__(None, None, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
