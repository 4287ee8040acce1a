#!/usr/bin/python3
# ctest-cost: 3
"""judge_verified.py - issue 20 class 3: complete means verified, not
non-empty.

An OLMo run (torch_new step1000, the sharded step, complete) beside a
step1000-unsharded copy whose model.pt is cut to 100 bytes and whose
train.pt is missing, or whose model.pt and optim.pt are whole but
train.pt is missing (ckpt's unshard, like OLMo's, writes train.pt with
optim.pt for an OLMo step):
- `process --drop-sharded` (and -n) keeps step1000: it is uploaded to
  DEST; before, it was dropped and deleted with the source, DEST holding
  only the broken copy;
- `unshard --delete-sharded` refuses (error row, exit 1) and keeps
  step1000; before: `deleted step1000 already unsharded: ... is complete`;
- `clean --keep-last 1` (and -n) of a run with step1000 and a broken
  step2000-unsharded keeps step1000, the newest complete checkpoint;
  before: `complete checkpoint step2000-unsharded; pruned step1000`."""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, ckpt, listing, scratch  # noqa: E402

OLMO = os.path.join(HERE, "..", "fixtures", "runs", "olmo-torch-new-1.13")
CUT = "model.pt: cut short (no end of central directory)"
NOTRAIN = ("train.pt missing (an OLMo step's unsharded copy with optim.pt "
           "has train.pt)")


def make(root, name, copy, broken):
    """A run: step1000 (sharded) and `copy`, broken as `broken` says:
    "cut" (model.pt cut to 100 bytes, no train.pt) or "notrain"
    (model.pt and optim.pt whole, no train.pt)."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "wandb"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("run_name: %s\n" % name)
    shutil.copytree(os.path.join(OLMO, "step"), os.path.join(d, "step1000"))
    c = os.path.join(d, copy)
    os.makedirs(c)
    with open(os.path.join(OLMO, "model.pt"), "rb") as f:
        model = f.read()
    with open(os.path.join(c, "model.pt"), "wb") as f:
        f.write(model[:100] if broken == "cut" else model)
    if broken == "notrain":
        shutil.copy(os.path.join(OLMO, "model.pt"),
                    os.path.join(c, "optim.pt"))
    for dp, ds, fs in os.walk(d):
        for n in ds + fs:
            os.chmod(os.path.join(dp, n), 0o755 if n in ds else 0o644)
    return d


def sharded(files):
    return [f for f in files if f.startswith("step1000/")]


def main():
    c = Checker()
    with scratch("ckpt-judge-verified-") as tmp:
        for broken, why in (("cut", CUT), ("notrain", NOTRAIN)):
            # --drop-sharded keeps (uploads) the sharded step
            run = make(tmp, "drop-" + broken, "step1000-unsharded", broken)
            files = listing(run)
            dest = os.path.join(tmp, "D-" + broken)
            args = ["process", "--drop-sharded", "--no-wandb", "--min-age",
                    "0", run, "--dest", dest]
            rc, dry, err = ckpt(*args[:1] + ["-n"] + args[1:])
            c.eq("%s: process -n keeps step1000 (files)" % broken,
                 (rc, dry.split("\t")[:4]),
                 (0, ["would-process", run, dest + "/drop-" + broken,
                      str(len(files))]))
            rc, out, err = ckpt(*args)
            c.eq("%s: process exit, row" % broken,
                 (rc, out.split("\t")[:4]),
                 (0, ["process", run, dest + "/drop-" + broken,
                      str(len(files))]))
            c.eq("%s: step1000 is at DEST" % broken,
                 sharded(listing(os.path.join(dest, "drop-" + broken))),
                 sharded(files))

            # unshard --delete-sharded refuses to delete step1000
            run = make(tmp, "uns-" + broken, "step1000-unsharded", broken)
            files = listing(run)
            for dry in (["-n"], []):
                rc, out, err = ckpt("unshard", "--no-progress",
                                    "--delete-sharded", *dry, run, run)
                c.eq("%s: unshard --delete-sharded %s" % (broken, dry),
                     (rc, out),
                     (1, "error\tstep1000\talready unsharded: "
                      "step1000-unsharded in the run exists, but it is not "
                      "complete (%s); step1000 not deleted\n" % why))
                c.eq("%s: step1000 kept %s" % (broken, dry), listing(run),
                     files)

        # clean --keep-last 1 keeps the newest complete checkpoint
        run = make(tmp, "prune", "step2000-unsharded", "cut")
        files = listing(run)
        for dry in (["-n"], []):
            rc, out, err = ckpt("clean", "--keep-last", "1", "--min-age",
                                "0", *dry, run)
            c.eq("clean --keep-last 1 %s" % dry, (rc, out),
                 (0, "keep\t%s\tcomplete checkpoint step1000 (dcp)\n" % run))
            c.eq("clean --keep-last 1 %s: nothing pruned" % dry,
                 listing(run), files)
        rc, out, err = ckpt("ls", run)
        c.eq("ls: the copy is incomplete", out.splitlines()[-1].split("\t")
             [1:5], ["step2000-unsharded", "2000", "unsharded",
                     "incomplete: " + CUT])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
