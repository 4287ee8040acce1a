#!/usr/bin/python3
# ctest-cost: 110
"""process_slurm.py - the Slurm recipe under a real Slurm: a one-node
cluster started here (tests/support/slurmenv.py: munged, slurmctld,
slurmd from Debian's slurm-wlm, private directory; 3 task slots), ckpt
installed with `cmake --install` into a scratch prefix and on PATH, and
the installed PREFIX/share/ckpt/process-slurm.sbatch submitted from a
fresh directory exactly as docs/deploy.md shows it,

    sbatch --wait --array=0-7 PREFIX/share/ckpt/process-slurm.sbatch \\
        RUNS s3://ckpt-test/a --no-wandb -q
    sbatch --wait --array=1-4%2 ... RUNS2 s3://ckpt-test/b --no-wandb -q

over the queue of process_workers.py (6 good runs, 3 bad, one non-run)
against s3rver behind the signing proxy. The first array has more tasks
than slots (5 wait in the queue and start after others finished, when
the listing has shrunk); the second is 1-based and throttled. For each:
sbatch exits 0; Slurm says every task COMPLETED with exit code 0; each
task's log is where #SBATCH --output puts it and ends with its total row;
every run appears in exactly one task's rows (processed, deleted, or the
non-run skipped) and has one claim at DEST, of this array, done; every
good run is at DEST byte for byte, its sharded step unsharded bit-exact,
every bad one deleted, no lease held; the grand total of docs/deploy.md's
one-liner over the logs is the queue's. Tasks started after others had
ended (queued, throttled).

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
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import Checker, S3Env, old_ctime, tool  # noqa: E402
from slurmenv import SlurmEnv, Unavailable  # noqa: E402
from installed import install, script  # noqa: E402
import process_workers as pw  # noqa: E402

ROW = re.compile(r"^(process|delete|skip|error)\t")
DOC = os.path.join(ROOT, "docs", "deploy.md")


def task_info(sl, job):
    """{task: {JobState, ExitCode, StartTime, EndTime}} from `scontrol
    show job` (no accounting daemon: finished jobs stay in slurmctld for
    MinJobAge, 300 s)."""
    r = subprocess.run(["scontrol", "-o", "show", "job", job],
                       env=sl.env(), capture_output=True, text=True,
                       timeout=30)
    out = {}
    for line in r.stdout.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        out[int(f["ArrayTaskId"])] = f
    return out


def grand_total_cmd():
    """The one-liner of docs/deploy.md that sums the total rows of an
    array's logs (its last argument, the logs' glob, is the test's)."""
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"^(awk -F'\\t' '\$1 == \"total\".*') "
                  r"ckpt-process-JOBID_\*\.log$", text, re.M)
    if not m:
        raise AssertionError("docs/deploy.md: no grand-total one-liner")
    return m.group(1)


def claims(env, prefix):
    """{run id: claim} of DEST/.ckpt-process."""
    _, ls, _ = tool(env, "ls", "s3://%s/%s/.ckpt-process" % (pw.B, prefix))
    out = {}
    for line in ls.decode().splitlines():
        name = line.split("\t")[2]
        if name.endswith(".claim"):
            _, data, _ = tool(env, "cat", "s3://%s/%s/.ckpt-process/%s"
                              % (pw.B, prefix, name))
            out[name[:-len(".claim")]] = json.loads(data)
    return out


def states(env, prefix):
    _, ls, _ = tool(env, "ls", "s3://%s/%s/.ckpt-process" % (pw.B, prefix))
    out = {}
    for line in ls.decode().splitlines():
        name = line.split("\t")[2]
        if name.endswith(".json"):
            _, data, _ = tool(env, "cat", "s3://%s/%s/.ckpt-process/%s"
                              % (pw.B, prefix, name))
            out[name[:-len(".json")]] = json.loads(data)["phase"]
    return out


def array(c, s3, sl, tmp, env, sbatch, spec, tasks, prefix, queued):
    what = "--array=%s" % spec
    runs = os.path.join(tmp, prefix + "-runs")
    pw.make_runs(runs)
    snaps = {n: pw.snapshot(os.path.join(runs, n)) for n in pw.GOOD}
    submit = os.path.join(tmp, prefix + "-submit")
    os.makedirs(submit)
    cmd = ["sbatch", "--parsable", "--wait", "--array=" + spec, sbatch,
           runs, "s3://%s/%s" % (pw.B, prefix), "--no-wandb", "-q"]
    t0 = time.time()
    r = subprocess.run(cmd, env=env, cwd=submit, capture_output=True,
                       text=True, timeout=600)
    print("%s: %d tasks in %.1f s" % (what, len(tasks), time.time() - t0))
    c.eq("%s: sbatch --wait exits 0 (%s)" % (what, r.stderr.strip()),
         r.returncode, 0)
    job = r.stdout.strip().split(";")[0]
    info = task_info(sl, job)
    c.eq("%s: every task COMPLETED, exit 0" % what,
         {t: (f["JobState"], f["ExitCode"]) for t, f in info.items()},
         {t: ("COMPLETED", "0:0") for t in tasks})
    starts = sorted(f["StartTime"] for f in info.values())
    first_end = min(f["EndTime"] for f in info.values())
    late = sum(s >= first_end for s in starts)
    print("%s: %d task(s) started after another had ended" % (what, late))
    c.true("%s: %d tasks waited for a slot (%d)" % (what, queued, late),
           late >= queued)
    logs = sorted(os.listdir(submit))
    c.eq("%s: logs where #SBATCH --output says" % what, logs,
         sorted("ckpt-process-%s_%d.log" % (job, t) for t in tasks))
    rows, totals = [], 0
    for name in logs:
        with open(os.path.join(submit, name)) as f:
            lines = f.read().splitlines()
        rows += [line.split("\t") for line in lines if ROW.match(line)]
        totals += sum(line.startswith("total\t") for line in lines)
        c.true("%s: %s ends with its total row" % (what, name),
               lines and lines[-1].startswith("total\t"))
    c.eq("%s: one total row per task" % what, totals, len(tasks))
    pw.once_each(c, what, rows)
    c.eq("%s: each run in one task's rows only" % what,
         sorted(os.path.basename(r[1]) for r in rows),
         sorted(pw.GOOD + pw.BADR + ["notes"]))
    c.eq("%s: nothing skipped but the non-run" % what,
         [r for r in rows if r[0] == "skip"
          and os.path.basename(r[1]) != "notes"], [])
    cl = claims(s3.env(), prefix)
    c.eq("%s: one claim per run, of this array, done" % what,
         {k: (v["batch"], v["done"]) for k, v in cl.items()},
         {pw.rid(n): (job, True) for n in pw.GOOD + pw.BADR + ["notes"]})
    c.eq("%s: states" % what, states(s3.env(), prefix),
         dict([(pw.rid(n), "done") for n in pw.GOOD] +
              [(pw.rid(n), "deleted") for n in pw.BADR]))
    grand = subprocess.run("%s ckpt-process-%s_*.log" % (grand_total_cmd(),
                                                         job),
                           shell=True, cwd=submit, capture_output=True,
                           text=True, timeout=60)
    c.eq("%s: the grand total" % what,
         grand.stdout.split("\t")[:5],
         ["total", "process=6", "delete=3", "skip=1", "error=0"])
    pw.check_final(c, what, s3.env(), runs, prefix, snaps, tmp)


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
        try:
            prefix = install(tmp)
            sbatch = script(prefix, "process-slurm.sbatch")
            with S3Env() as s3:
                env = sl.env(s3.env())
                env.pop("CKPT", None)
                env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
                env["TMPDIR"] = tmp
                env["PATH"] = os.path.join(prefix, "bin") + ":" + \
                    env["PATH"]
                array(c, s3, sl, tmp, env, sbatch, "0-7", range(8), "a", 5)
                array(c, s3, sl, tmp, env, sbatch, "1-4%2", range(1, 5),
                      "b", 2)
        finally:
            sl.__exit__(None, None, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
