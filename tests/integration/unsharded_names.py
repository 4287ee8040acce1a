#!/usr/bin/python3
# ctest-cost: 10
"""unsharded_names.py: the copy run mode writes next to a step is
NAME-unsharded for every checkpoint name, and every command knows it as
that step's unsharded checkpoint.

Data loss this reproduces: Orbax steps are bare integers (1/, 2/, ...) and
HF/Megatron steps are checkpoint-N/, iter_N/; `ckpt unshard --delete-sharded
RUN RUN` left 1-unsharded/ ... and only stepN-unsharded was known as a
checkpoint name, so `ckpt ls RUN` listed nothing and `ckpt clean --force`
deleted the run as "no checkpoint".
- An Orbax run (make_orbax.py: OCDBT, per-array zarr, msgpack steps) and a
  DCP run whose step is checkpoint-7/ (the torch 2.14 fixture) unshard into
  themselves with --delete-sharded.
- `ckpt ls` lists each NAME-unsharded as a complete unsharded checkpoint
  of its step; `ckpt clean --force --min-age 0` keeps the run, every byte.
- A rerun of the unshard finds no sharded checkpoint left (exit 0)."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUP = os.path.join(HERE, "..", "support")
sys.path.insert(0, SUP)
from s3test import CKPT, Checker, digests  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures", "dcp-v2.14", "row")


def run(*args):
    p = subprocess.run([CKPT] + list(args), capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def case(c, label, runs, steps):
    rc, out, err = run("unshard", "--no-progress", "--delete-sharded",
                       runs, runs)
    c.eq(label + ": unshard --delete-sharded exit", (rc, err), (0, ""))
    c.eq(label + ": only the unsharded copies are left",
         sorted(os.listdir(runs)), sorted(s + "-unsharded" for s in steps))
    rc, out, err = run("ls", runs)
    rows = [ln.split("\t") for ln in out.splitlines()]
    c.eq(label + ": ls exit", rc, 0)
    c.eq(label + ": ls lists each copy, complete and unsharded",
         [(r[1], r[3], r[4]) for r in rows],
         [(s + "-unsharded", "unsharded", "complete") for s in steps])
    before = digests(runs)
    rc, out, err = run("clean", "--force", "--min-age", "0", runs)
    c.eq(label + ": clean --force keeps the run", (rc, out.split("\t")[:2]),
         (0, ["keep", runs]))
    c.eq(label + ": every byte kept", digests(runs), before)
    rc, out, err = run("unshard", "--no-progress", runs, runs)
    c.eq(label + ": a rerun unshards nothing", (rc, out),
         (0, "skip\t-\tno sharded checkpoint\n"))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-unsnames-")
    try:
        subprocess.run(["/usr/bin/python3", os.path.join(SUP, "make_orbax.py"),
                        os.path.join(tmp, "o")], check=True,
                       capture_output=True)
        case(c, "orbax", os.path.join(tmp, "o", "run"), ["1", "2", "3", "4"])
        dcp = os.path.join(tmp, "d")
        os.mkdir(dcp)
        shutil.copytree(os.path.join(FIX, "ckpt"),
                        os.path.join(dcp, "checkpoint-7"))
        case(c, "dcp checkpoint-7", dcp, ["checkpoint-7"])
    finally:
        shutil.rmtree(tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
