#!/usr/bin/python3
# ctest-cost: 3
"""process_vanish.py - a run named on the command line that another
worker deletes while this `ckpt process` is still looking at it (GNU
parallel listed the directory, then a whole-directory worker deleted the
bad run): between process's stat of the run and its listing the run is
gone. The run is then what the state at DEST says - deleted earlier by
the other worker: `done`, exit 0 - never an error; and a run that nobody
processed is still reported missing. The moment is made exact with an
LD_PRELOAD shim (tests/support/vanish_preload.c) that renames the
directory away as it is opened."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import BUILD, Checker  # noqa: E402
from s3test import old_ctime  # noqa: E402
from process_s3 import BAD, gen, rows  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
SHIM = os.path.join(BUILD, "libvanish_preload.so")


def process(env, run, dest, vanish=False):
    e = dict(env)
    if vanish:
        # ASan wants its runtime first; the shim only wraps open(). (The
        # age shim, already preloaded, stays: see s3test.old_ctime.)
        e.update(LD_PRELOAD=SHIM + " " + e["LD_PRELOAD"],
                 CKPT_TEST_VANISH=run,
                 ASAN_OPTIONS=(e.get("ASAN_OPTIONS", "") +
                               ":verify_asan_link_order=0").lstrip(":"))
    r = subprocess.run([CKPT, "process", "--no-wandb", "--no-progress", run,
                        "--dest", dest], env=e, capture_output=True,
                       timeout=300)
    return r.returncode, rows(r.stdout.decode()), r.stderr.decode()


def main():
    # Trees are aged with utime(): ctimes aged too (s3test.old_ctime).
    os.environ.update(old_ctime())
    c = Checker()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        runs, dest = os.path.join(tmp, "runs"), os.path.join(tmp, "dest")
        gen(runs)
        run = os.path.join(runs, "2871002")
        twin = os.path.join(tmp, "twin")
        shutil.copytree(run, twin, symlinks=True)
        # The other worker: deletes the bad run and records it at DEST.
        rc, out, err = process(env, run, dest)
        c.eq("other worker: deleted", (rc, out[0][:2]), (0, ["delete", run]))
        # This worker was handed the run before that delete: the run is
        # there when it looks (stat) and gone when it lists it.
        os.rename(twin, run)
        rc, out, err = process(env, run, dest, vanish=True)
        c.eq("vanished between stat and listing: done, exit 0 (%s)"
             % err.strip()[-300:], (rc, out[0]),
             (0, ["skip", run, "deleted earlier: %s" % BAD["2871002"]]))
        c.true("the shim did make it vanish",
               os.path.isdir(run + ".vanished") and not os.path.exists(run))
        # A run nobody processed that vanishes the same way: missing.
        run = os.path.join(runs, "2871004")
        rc, out, err = process(env, run, dest, vanish=True)
        c.eq("unprocessed run vanished: exit 1, failed judge",
             (rc, out[0][:2], out[0][2].startswith("judge: ")),
             (1, ["error", run], True))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
