#!/usr/bin/python3
# ctest-cost: 40
"""unshard_hf_part_slurm.py - issue 29: scripts/deploy/hf-export-slurm.sbatch
under a real one-node Slurm (tests/support/slurmenv.py):

    sbatch --wait --array=0-3 scripts/deploy/hf-export-slurm.sbatch \\
        STEP DEST --max-shard-size 60000 --threads 2

exports one OLMo step (make_olmo_hf.py olmo1-untied, local format; five
shards) as four array tasks, each `ckpt unshard --format hf --part
$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT`. Checks: sbatch exits 0;
Slurm says each task COMPLETED with exit 0; each task's log (where
#SBATCH --output says) has its one row, and exactly one of them says it
wrote the index; every shard was written by one task (the rows' file
counts add up to five); DEST is then, byte for byte, what one process
writes (no record left)."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import CKPT, SRC, check, finish, generate, unshard  # noqa: E402
from slurmenv import SlurmEnv, Unavailable  # noqa: E402

SBATCH = os.path.join(SRC, "scripts", "deploy", "hf-export-slurm.sbatch")
OPTS = ["--max-shard-size", "60000", "--threads", "2"]


def tree(d):
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as x:
            out[f] = x.read()
    return out


def task_states(sl, job):
    r = subprocess.run(["scontrol", "-o", "show", "job", job], env=sl.env(),
                       capture_output=True, text=True, timeout=30)
    out = {}
    for line in r.stdout.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        out[int(f["ArrayTaskId"])] = (f["JobState"], f["ExitCode"])
    return out


def run(sl, tmp):
    gen = os.path.join(tmp, "gen")
    generate(["make_olmo_hf.py", "sharded", gen, "--case", "olmo1-untied",
              "--format", "local", "--ranks", "3"])
    step = os.path.join(gen, "ckpt")
    one = os.path.join(tmp, "single")
    p = unshard("--format", "hf", *OPTS, step, one)
    check("one process: exit 0", p.returncode == 0, p.stderr)
    dest = os.path.join(tmp, "dest")
    submit = os.path.join(tmp, "submit")
    os.makedirs(submit)
    env = sl.env()
    env["CKPT"] = CKPT
    env["TMPDIR"] = tmp
    r = subprocess.run(["sbatch", "--parsable", "--wait", "--array=0-3",
                        SBATCH, step, dest] + OPTS, env=env, cwd=submit,
                       capture_output=True, text=True, timeout=600)
    check("sbatch --wait exits 0", r.returncode == 0, r.stderr)
    job = r.stdout.strip().split(";")[0]
    check("every task COMPLETED, exit 0", task_states(sl, job) ==
          {i: ("COMPLETED", "0:0") for i in range(4)},
          str(task_states(sl, job)))
    logs = sorted(os.listdir(submit))
    check("logs where #SBATCH --output says", logs ==
          ["ckpt-hf-export-%s_%d.log" % (job, i) for i in range(4)],
          str(logs))
    rows = []
    for name in logs:
        with open(os.path.join(submit, name)) as f:
            rows += [l.rstrip("\n").split("\t") for l in f
                     if l.startswith("unshard\t")]
    check("one row per task", len(rows) == 4, str(rows))
    last = [r for r in rows if r[3].endswith("every part done: index written")]
    check("one task wrote the index", len(last) == 1, str(rows))
    files = sum(int(r[3].split(" files, ")[0].rsplit(" ", 1)[1]) for r in rows)
    check("each of the five shards written by one task", files == 5,
          str(rows))
    check("DEST is one process's output, byte for byte",
          tree(dest) == tree(one), "%s vs %s" % (sorted(tree(dest)),
                                                 sorted(tree(one))))


def main():
    tmp = tempfile.mkdtemp(prefix="hf-part-slurm-")
    try:
        try:
            sl = SlurmEnv(tmp, cpus=64, mem_mb=4 * 8192 + 1024).__enter__()
        except Unavailable as e:
            print("SKIP: a one-node Slurm cannot start here: %s" % e)
            return 77
        try:
            run(sl, tmp)
        finally:
            sl.__exit__(None, None, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
