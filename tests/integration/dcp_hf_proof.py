#!/usr/bin/python3
# ctest-cost: 4
"""dcp_hf_proof.py - torch DCP's HuggingFaceStorageWriter steps are judged
by what their files prove (issues 20 and 21), from the committed fixtures
tests/fixtures/dcp-v2.14/hf_sharded and hf_consolidated (torch 2.14.1):

- a shard missing from the middle of a tensor (the chunks leave a gap,
  what `ckpt unshard` refuses) is `incomplete`, naming the tensor; before,
  `complete`: `clean --keep-last 1` pruned the older good step and
  `process --drop-sharded` dropped it;
- whole, consistent shards are `unknown` (nothing written records the
  world size: a missing last rank cannot be seen, by torch either); so is
  a set whose last rank's shards are gone; before, `complete` (keep-last
  pruned the older good step);
- an interrupted consolidation (enable_consolidation: a top-level
  model-KKKKK-of-NNNNN.safetensors cut short, or the index missing) over
  whole shards in sharded/ is `unknown`; before, `unsharded incomplete`:
  `clean` deleted the run and `process --drop-incomplete` the step, the
  shards being its only whole copy. `unshard` of it reads sharded/ (the
  bytes of torch's own consolidation); `--delete-sharded` keeps what is
  not judged complete.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import error_in, st_tensors  # noqa: E402
from s3test import Checker, ckpt, listing, scratch  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures", "dcp-v2.14")
SHARDS = os.path.join(FIX, "hf_sharded", "ckpt")
CONS = os.path.join(FIX, "hf_consolidated", "ckpt")
GAP = ("incomplete: tensor 'model.embed.weight': chunks cover 12 of 28 "
       "elements (a shard file is missing)")
WHOLE = ("unknown: shards consistent, but nothing written records the "
         "world size: a missing last rank cannot be seen (torch's reader "
         "cannot tell either)")
NOINDEX = ("consolidation cut short (split safetensors without their "
           "*.safetensors.index.json); sharded/ holds the whole shards")
CUT = ("consolidation cut short (model-00002-of-00002.safetensors: data "
       "section is 25 bytes, the header describes 128); sharded/ holds the "
       "whole shards")


def step(run, name, kind):
    """Step `name` of run, built from the fixtures as `kind` says."""
    d = os.path.join(run, name)
    shutil.copytree(CONS if kind in ("cons", "noindex", "cut") else SHARDS,
                    d)
    if kind == "gap":
        os.remove(os.path.join(d, "shard-00001-model-00001-of-00002"
                                  ".safetensors"))
    elif kind == "tail":
        for f in os.listdir(d):
            if f.startswith("shard-00002-"):
                os.remove(os.path.join(d, f))
    elif kind == "noindex":
        os.remove(os.path.join(d, "model.safetensors.index.json"))
    elif kind == "cut":
        with open(os.path.join(d, "model-00002-of-00002.safetensors"),
                  "r+b") as f:
            f.truncate(200)
    elif kind == "copy":
        # an unsharded copy (torch's own consolidation of these shards)
        shutil.rmtree(d)
        shutil.copytree(os.path.join(FIX, "hf_sharded", "reference"), d)


def make(root, name, steps):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "wandb"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("run_name: %s\n" % name)
    for s, kind in steps:
        step(d, s, kind)
    return d


def ls_rows(c, tmp):
    run = make(tmp, "ls", [("step1", "cons"), ("step2", "whole"),
                           ("step3", "gap"), ("step4", "noindex"),
                           ("step5", "cut"), ("step6", "tail")])
    rc, out, err = ckpt("ls", "-l", run)
    c.eq("ls -l rows", (rc, [l.split("\t")[1:5] for l in out.splitlines()]),
         (0, [["step1", "1", "unsharded", "complete"],
              ["step2", "2", "dcp-hf", WHOLE],
              ["step3", "3", "dcp-hf", GAP],
              ["step4", "4", "dcp-hf", "unknown: " + NOINDEX],
              ["step5", "5", "dcp-hf", "unknown: " + CUT],
              ["step6", "6", "dcp-hf", WHOLE]]))
    # A plain tar is read in place (member offsets): the same verdicts.
    tar = os.path.join(tmp, "ls.tar")
    subprocess.run(["tar", "cf", tar, "-C", tmp, "ls"], check=True)
    rc, out2, err = ckpt("ls", "-l", tar)
    c.eq("ls -l rows of a plain tar",
         [l.split("\t")[1:5] for l in out2.splitlines()],
         [l.split("\t")[1:5] for l in out.splitlines()])
    # The judge and unshard agree: the gap is refused naming the tensor.
    out_dir = os.path.join(tmp, "gap-out")
    rc, out, err = ckpt("unshard", "--no-progress",
                        os.path.join(run, "step3"), out_dir)
    c.eq("unshard of the gap: exit 1, its error row names the tensor",
         (rc, "tensor 'model.embed.weight': chunks cover 12 of 28 elements"
          in error_in(out, err)), (1, True))


def keep_last(c, tmp):
    for kind in ("gap", "whole", "tail"):
        run = make(tmp, "prune-" + kind, [("step1", "cons"),
                                          ("step2", kind)])
        files = listing(run)
        for dry in (["-n"], []):
            rc, out, err = ckpt("clean", "--keep-last", "1", "--min-age",
                                "0", *dry, run)
            c.eq("clean --keep-last 1 %s %s" % (kind, dry), (rc, out),
                 (0, "keep\t%s\tcomplete checkpoint step1 (unsharded)\n"
                  % run))
            c.eq("clean --keep-last 1 %s %s: nothing pruned" % (kind, dry),
                 listing(run), files)


def clean_cut(c, tmp):
    for kind, why in (("noindex", NOINDEX), ("cut", CUT)):
        run = make(tmp, "clean-" + kind, [("step1", kind)])
        files = listing(run)
        for dry in (["-n"], []):
            rc, out, err = ckpt("clean", "--min-age", "0", *dry, run)
            c.eq("clean %s %s" % (kind, dry), (rc, out),
                 (1, "error\t%s\tcannot judge checkpoint step1 (%s); not "
                  "deleted\n" % (run, why)))
            c.eq("clean %s %s: nothing deleted" % (kind, dry), listing(run),
                 files)


def process(c, tmp):
    # --drop-sharded: the gapped step is no complete sharded step: kept,
    # uploaded (before: dropped and deleted)
    run = make(tmp, "p-gap", [("step1", "gap"), ("step1-unsharded", "copy")])
    files = listing(run)
    dest = os.path.join(tmp, "D-p-gap")
    args = ["process", "--drop-sharded", "--no-wandb", "--min-age", "0", run,
            "--dest", dest]
    rc, out, err = ckpt(*args[:1] + ["-n"] + args[1:])
    c.eq("p-gap -n: every file", (rc, out.split("\t")[:4]),
         (0, ["would-process", run, dest + "/p-gap", str(len(files))]))
    rc, out, err = ckpt(*args)
    c.eq("p-gap: every file", (rc, out.split("\t")[:4]),
         (0, ["process", run, dest + "/p-gap", str(len(files))]))
    c.eq("p-gap: step1 at DEST", [f for f in listing(os.path.join(
        dest, "p-gap")) if f.startswith("step1/")],
         [f for f in files if f.startswith("step1/")])
    # --drop-incomplete: the interrupted consolidation is not proven
    # incomplete: the run fails, nothing deleted (before: step1 dropped)
    for kind, why in (("cut", CUT), ("noindex", NOINDEX)):
        name = "p-" + kind
        run = make(tmp, name, [("step1", kind)])
        files = listing(run)
        dest = os.path.join(tmp, "D-" + name)
        args = ["process", "--drop-incomplete", "--no-wandb", "--min-age",
                "0", run, "--dest", dest]
        for dry in (["-n"], []):
            rc, out, err = ckpt(*args[:1] + dry + args[1:])
            c.eq("%s %s: failed, not deleted" % (name, dry),
                 (rc, out.split("\t")[:3]),
                 (1, ["error", run, "judge: cannot judge checkpoint step1 "
                      "(%s); not deleted\ntotal" % why]))
            c.eq("%s %s: source kept" % (name, dry), listing(run), files)


def unshard_cut(c, tmp):
    want = {}
    for f in sorted(os.listdir(CONS)):
        if f.endswith(".safetensors"):
            want.update(st_tensors(os.path.join(CONS, f)))
    for kind, why in (("noindex", NOINDEX), ("cut", CUT),
                      ("whole", WHOLE[len("unknown: "):])):
        run = make(tmp, "u-" + kind, [("step1", kind)])
        files = listing(run)
        dest = os.path.join(tmp, "U-" + kind)
        rc, out, err = ckpt("unshard", "--no-progress", "--format",
                            "safetensors", "--delete-sharded", run, dest)
        c.eq("unshard --delete-sharded %s" % kind, (rc, out),
             (0, "unshard\tstep1\t%s/step1-unsharded: 2 files, 4 tensors; "
              "step1 kept (not judged complete: %s)\n" % (dest, why)))
        c.eq("unshard %s: step1 kept" % kind, listing(run), files)
        out = os.path.join(dest, "step1-unsharded", "model.safetensors")
        got = st_tensors(out) if os.path.isfile(out) else {}
        c.eq("unshard %s: torch's consolidation, byte for byte" % kind,
             got == want, True)


def main():
    c = Checker()
    with scratch("ckpt-dcp-hf-proof-") as tmp:
        ls_rows(c, tmp)
        keep_last(c, tmp)
        clean_cut(c, tmp)
        process(c, tmp)
        unshard_cut(c, tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
