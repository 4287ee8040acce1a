#!/usr/bin/python3
# ctest-cost: 10
"""path_habits.py - the paths users give that ckpt took otherwise
(issue 30):

1. `ckpt unshard STEP out/model.pt` made a directory named model.pt: a
   DEST named like a file is refused (exit 2) with the command that
   does it; an existing directory of that name is still taken.
2. `ckpt unshard RUN.tar/RUN/step1000 DEST` said "Not a directory": it
   points at `ckpt unshard --step 1000 RUN.tar DEST`, which works.
3. Step 0: unshard's run mode leaves it out by default, as process does
   (a skip row says how to have it); --unshard-step0 or --step 0 takes
   it; process the same with --unshard-step0.
4. `map-wandb DIR` of runs maps the runs one level down (as ls and
   process look); `map-wandb DIR/*` skips the non-runs among them with a
   message and exits 0; a single non-run still fails.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import offline  # noqa: E402
from s3test import Checker, ckpt, gen_runs  # noqa: E402

offline.apply(os.environ)


def lines(err):
    return [ln.split(" ", 1)[1] if ln[:4].isdigit() else ln
            for ln in err.splitlines()]


def file_dest(c, s, tmp):
    step = s + "/2871001/step1000"
    for dest, shown in ((tmp + "/out/model.pt", tmp + "/out/"),
                        ("model.safetensors", "./")):
        rc, out, err = ckpt("unshard", step, dest)
        c.eq("unshard to %s: refused, the command that does it" % dest,
             (rc, out, err), (2, "", (
                 "ckpt unshard: error: DEST '%s' names a file: DEST is the "
                 "directory the checkpoint's files are written into "
                 "(checkpoint.pt, or model.pt, optim.pt and train.pt of an "
                 "OLMo step; *.safetensors with --format safetensors)\n"
                 "hint: ckpt unshard SRC %s\n" % (dest, shown))))
    c.true("nothing made", not os.path.exists(tmp + "/out"))
    os.makedirs(tmp + "/d/model.pt")
    rc, out, err = ckpt("unshard", step, tmp + "/d/model.pt")
    c.eq("an existing directory named model.pt: taken", (rc, [
        f for f in sorted(os.listdir(tmp + "/d/model.pt"))
        if f.endswith(".pt")]), (0, ["model.pt", "optim.pt", "train.pt"]))


def in_archive(c, s, tmp):
    arc = s + "/2871101.tar"
    rc, out, err = ckpt("unshard", arc + "/2871101/step1000", tmp + "/a1")
    c.eq("a step inside an archive: the --step command", (rc, out, err), (
        2, "", "ckpt unshard: error: SRC '%s/2871101/step1000' is inside "
        "the archive '%s', which unshard reads as a run\nhint: ckpt unshard "
        "--step 1000 %s DEST\n" % (arc, arc, arc)))
    rc, out, err = ckpt("unshard", arc + "/2871101/config.yaml",
                        tmp + "/a1")
    c.eq("another path inside an archive: the run command", (rc, err), (
        2, "ckpt unshard: error: SRC '%s/2871101/config.yaml' is inside the "
        "archive '%s', which unshard reads as a run\nhint: ckpt unshard %s "
        "DEST (each complete sharded step), or --step N for one\n"
        % (arc, arc, arc)))
    rc, out, err = ckpt("unshard", "-n", "--step", "1000", arc,
                        tmp + "/a1")
    c.eq("the hinted command works", (rc, out.split("\t")[:2]),
         (0, ["skip", "step1000"]))


def step0(c, s, tmp):
    run = s + "/2871001"
    rc, out, err = ckpt("unshard", "-n", run, tmp + "/z0")
    c.eq("run mode: step 0 left out, its row says how", (rc, [
        ln.split("\t")[:3] for ln in out.splitlines()][:1]), (0, [[
            "skip", "step0", "step 0, the initial weights: --unshard-step0 "
            "unshards it"]]))
    for opt in (["--unshard-step0"], ["--step", "0"]):
        rc, out, err = ckpt("unshard", "-n", *opt, run, tmp + "/z0")
        c.eq("run mode %s: step 0 unsharded" % opt[0],
             (rc, out.splitlines()[0].split("\t")[:2]),
             (0, ["would-unshard", "step0"]))
    for opt, want in (([], []), (["--unshard-step0"], ["step0"])):
        dst = tmp + "/p%d" % len(opt)
        rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                            "--keep-source", *opt, run, "--dest", dst)
        c.eq("process %s: step 0 unsharded only when asked" % opt,
             (rc, sorted(x[:-len("-unsharded")]
                         for x in os.listdir(dst + "/2871001")
                         if x.endswith("-unsharded") and x != "step1000-"
                         "unsharded")), (0, want))


def map_wandb(c, s):
    runs = sorted(n for n in os.listdir(s) if n not in ("logs", "notes"))
    ids = sorted(n.split(".")[0] for n in runs)
    rc, out, err = ckpt("map-wandb", "--offline", s)
    c.eq("map-wandb DIR: its runs, one level down",
         (rc, sorted(ln.split("\t")[0] for ln in out.splitlines())),
         (0, ids))
    rc, out2, err = ckpt("map-wandb", "--offline",
                         *[os.path.join(s, n) for n in sorted(os.listdir(s))])
    c.eq("map-wandb DIR/*: the same rows, non-runs skipped, exit 0",
         (rc, sorted(out2.splitlines()), lines(err)),
         (0, sorted(out.splitlines()), [
             "ckpt: %s/logs: not a run: skipped" % s,
             "ckpt: %s/notes: not a run: skipped" % s]))
    rc, out, err = ckpt("map-wandb", "--offline", s + "/notes")
    c.eq("a single non-run: still an unknown row, exit 1",
         (rc, out.split("\t")[:2]), (1, ["notes", "-"]))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="paths-")
    cwd = os.getcwd()
    try:
        s = os.path.join(tmp, "s")
        gen_runs(s, archives=True)
        os.chdir(tmp)
        file_dest(c, s, tmp)
        in_archive(c, s, tmp)
        step0(c, s, tmp)
        map_wandb(c, s)
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
