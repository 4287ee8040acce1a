#!/usr/bin/python3
# ctest-cost: 20
"""dest_partial.py - a step is dropped only when its unsharded output
holds everything it held (issue 27, class 7). A DeepSpeed step
(tests/fixtures/real-writers/deepspeed_zero2_bf16: ZeRO-2, bf16, two
ranks) unshards to zero_to_fp32's fp32 weights alone; its optimizer
states, scheduler and client state are only in the step, and DeepSpeed's
`latest` names it.

  unshard  `unshard --delete-sharded RUN RUN` (and -n) writes
           global_step2-unsharded/ and keeps global_step2/, the row
           saying why; a rerun finds the copy and keeps the step again.
           Before, global_step2/ was deleted with what only it held.
  process  `process --drop-sharded` (and -n, the same row) uploads
           global_step2/ whole beside its unsharded copy (the row's note
           says why it was not dropped), so DEST's `latest` names a step
           that is there. Before, the step was dropped: DEST's `latest`
           named a missing step and the optimizer state was gone.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (CKPT, Checker, age_tree, contents,  # noqa: E402
                    old_ctime, scratch)

RW = os.path.join(HERE, "..", "fixtures", "real-writers")
WHY = ("its unsharded output holds the fp32 weights only, not the "
       "optimizer states, scheduler and client state it holds")


def make_run(root):
    run = os.path.join(root, "ds")
    shutil.copytree(os.path.join(RW, "deepspeed_zero2_bf16", "checkpoints"),
                    run)
    with open(os.path.join(run, "latest"), "w") as f:
        f.write("global_step2")
    age_tree(root)
    return run


def ckpt(*args):
    p = subprocess.run([CKPT] + list(args), capture_output=True, text=True,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr


def rows(out):
    res = []
    for x in out.splitlines():
        f = x.split("\t")
        if f[0] in ("process", "would-process"):
            res.append(["process"] + f[1:6])
        elif f[0] != "total":
            res.append(f)
    return res


def unshard(c, tmp):
    run = make_run(os.path.join(tmp, "u"))
    step = contents(os.path.join(run, "global_step2"))
    rc, out, err = ckpt("unshard", "-n", "--delete-sharded", run, run)
    c.eq("unshard -n: exit (%s)" % err, rc, 0)
    c.true("unshard -n: keeps the step, says why (%r)" % out,
           out.startswith("would-unshard\tglobal_step2\t") and
           out.rstrip("\n").endswith("; global_step2 kept (%s)" % WHY))
    rc, out, err = ckpt("unshard", "--delete-sharded", run, run)
    c.eq("unshard: exit (%s)" % err, rc, 0)
    c.true("unshard: keeps the step, says why (%r)" % out,
           out.startswith("unshard\tglobal_step2\t") and
           out.rstrip("\n").endswith("; global_step2 kept (%s)" % WHY))
    c.eq("unshard: the step is still there, whole",
         contents(os.path.join(run, "global_step2")), step)
    c.true("unshard: its copy beside it", os.path.isfile(os.path.join(
        run, "global_step2-unsharded", "checkpoint.pt")))
    rc, out, err = ckpt("unshard", "--delete-sharded", run, run)
    c.eq("unshard rerun: exit (%s)" % err, rc, 0)
    c.eq("unshard rerun: the copy found, the step kept again", out,
         "skip\tglobal_step2\talready unsharded: global_step2-unsharded in "
         "the run exists; global_step2 kept (%s)\n" % WHY)
    c.eq("unshard rerun: the step whole", contents(os.path.join(
        run, "global_step2")), step)


def process(c, tmp):
    run = make_run(os.path.join(tmp, "p"))
    want = contents(run)
    dest = os.path.join(tmp, "D")
    args = ["--drop-sharded", "--no-wandb", "--min-age", "0", run,
            "--dest", dest]
    rc_n, out_n, _ = ckpt("process", "-n", *args)
    rc, out, err = ckpt("process", *args)
    c.eq("process: exit (%s)" % err[-300:], (rc, rc_n), (0, 0))
    c.eq("process: -n predicts the row", rows(out_n), rows(out))
    row = out.splitlines()[0].split("\t")
    c.eq("process: processed, the note says why the step stayed", (
        row[0], row[-1]), ("process", "not dropped: global_step2: " + WHY))
    at = contents(os.path.join(dest, "ds"))
    c.eq("process: the step at DEST whole", {k: v for k, v in at.items()
                                             if k.startswith("global_step2/")},
         {k: v for k, v in want.items() if k.startswith("global_step2/")})
    with open(os.path.join(dest, "ds", "latest")) as f:
        latest = f.read().strip()
    c.true("process: DEST's latest names a step there (%s)" % latest,
           os.path.isdir(os.path.join(dest, "ds", latest)))
    c.true("process: the unsharded copy there too", os.path.isfile(
        os.path.join(dest, "ds", "global_step2-unsharded", "checkpoint.pt")))
    c.eq("process: source deleted (all of it verified at DEST)",
         os.path.exists(run), False)


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-partial-") as tmp:
        unshard(c, tmp)
        process(c, tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
