#!/usr/bin/python3
# ctest-cost: 3
"""judge_unknown.py - issue 20 class 1: what ckpt cannot judge is never
"incomplete".

A run holding a step of a layout ckpt does not know (files no trainer
ckpt judges writes: `weights.npz`, `notes.txt`) and a rank-local DCP step
whose `__R.metadata` ckpt cannot read are `error` rows naming the step,
with exit 1, under `clean -n`, `clean` and `process`; nothing is deleted.
Before issue 20, each step was `unknown, incomplete: no model file`, the
run bad, and `clean`/`process` deleted it with exit 0.

DeepSpeed `global_stepN/` and Megatron `iter_NNNNNNN/`, written by the
libraries themselves (tests/fixtures/real-writers/), were unknown here
until issue 21 gave them their writers' rules: now complete and kept
(tests/integration/layouts.py has every layout and their damaged forms).

Also: an HF Trainer step split into model-0000K-of-00003.safetensors + its
index is complete (before: no model file, deleted); torchtune's
`dist_epoch_N/` is a checkpoint name (before: `no checkpoint`, deleted);
and what is provably bad stays bad: the same HF step with one shard gone
(its index names it) is deleted.

`process --drop-incomplete` of a good run (an OLMo step1000) that also
holds an unknown step3 uploads step3 like any other file;
before, it was dropped as incomplete and deleted with the source."""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, ckpt, listing, scratch  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures")
RW = os.path.join(FIX, "real-writers")
UNJUDGED = "no file ckpt recognises (model.pt, *.safetensors, .metadata, ...)"


def run_dir(root, name, pieces):
    """A run: config.yaml + wandb/ and pieces [(src, rel)] copied in."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "wandb"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("run_name: %s\n" % name)
    for src, rel in pieces:
        dst = os.path.join(d, rel)
        if os.path.isdir(src):
            shutil.copytree(src, dst)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(src, dst)
    for dp, ds, fs in os.walk(d):
        for n in ds + fs:
            os.chmod(os.path.join(dp, n), 0o755 if n in ds else 0o644)
    return d


def madeup(run):
    """step3/: files of a layout no table entry knows."""
    os.makedirs(os.path.join(run, "step3"))
    for n in ("weights.npz", "notes.txt"):
        with open(os.path.join(run, "step3", n), "w") as f:
            f.write("a layout ckpt does not know\n")
    for dp, ds, fs in os.walk(os.path.join(run, "step3")):
        for n in fs:
            os.chmod(os.path.join(dp, n), 0o644)


def make_runs(root):
    hf = os.path.join(RW, "hf_trainer_llama_sharded", "checkpoint-2")
    run_dir(root, "ds", [(os.path.join(RW, "deepspeed_zero2_fp32",
                                       "checkpoints"), "checkpoints")])
    madeup(run_dir(root, "madeup", []))
    run_dir(root, "megatron", [(os.path.join(RW, "megatron_legacy_torch",
                                             "checkpoints"), "checkpoints")])
    rl = run_dir(root, "ranklocal", [])
    os.makedirs(os.path.join(rl, "step5"))
    for n in ("__0.metadata", "__1.metadata", "__0_0.distcp",
              "__1_0.distcp"):
        with open(os.path.join(rl, "step5", n), "wb") as f:
            f.write(b"rank-local bytes ckpt does not read to judge\n")
    run_dir(root, "hf", [(hf, "checkpoint-2")])
    gone = run_dir(root, "hf-gone", [(hf, "checkpoint-2")])
    os.remove(os.path.join(gone, "checkpoint-2",
                           "model-00002-of-00003.safetensors"))
    run_dir(root, "torchtune", [(os.path.join(FIX, "dcp-v2.6", "row",
                                              "ckpt"), "dist_epoch_1")])


ROWS = [
    ("keep", "ds", "complete checkpoint global_step2 (deepspeed)"),
    ("keep", "hf", "complete checkpoint checkpoint-2 (unsharded)"),
    ("DEL", "hf-gone", "no complete checkpoint with step > 0 (checkpoint-2: "
     "model-00002-of-00003.safetensors (named by "
     "model.safetensors.index.json) missing)"),
    ("error", "madeup", "cannot judge checkpoint step3 (%s); not deleted"
     % UNJUDGED),
    ("keep", "megatron", "complete checkpoint iter_0000010 (megatron)"),
    ("error", "ranklocal", "ranklocal: step5/__0.metadata: .metadata: "
     "stack underflow at offset 0"),
    ("keep", "torchtune", "complete checkpoint dist_epoch_1 (dcp)"),
]


def rows(dry):
    word = "would-delete" if dry else "delete"
    return "".join("%s\t%s\t%s\n" % (word if a == "DEL" else a, r, why)
                   for a, r, why in ROWS)


def main():
    c = Checker()
    with scratch("ckpt-judge-unknown-") as tmp:
        root = os.path.join(tmp, "runs")
        make_runs(root)
        names = [r for _, r, _ in ROWS]
        before = {n: listing(os.path.join(root, n)) for n in names}
        rc, out, err = ckpt("ls", os.path.join(root, "madeup"))
        c.eq("ls: unknown with the reason", (rc, out), (0,
             "%s/madeup\tstep3\t3\tunknown\tunknown: %s\t56\t2\n"
             % (root, UNJUDGED)))

        os.chdir(root)
        rc, out, err = ckpt("clean", "-n", "--min-age", "0", *names)
        c.eq("clean -n: rows", out, rows(True))
        c.eq("clean -n: exit 1 (errors)", rc, 1)
        c.eq("clean -n: nothing deleted",
             {n: listing(n) for n in names}, before)

        # process (local DEST): the unknown runs fail at judge, source kept
        dest = os.path.join(tmp, "D")
        for n, why in (("madeup", "judge: cannot judge"),
                       ("ranklocal", "judge: ranklocal: step5/__0.metadata")):
            for dry in (["-n"], []):
                rc, out, err = ckpt("process", *dry, "--no-wandb",
                                    "--min-age", "0", n, "--dest", dest)
                first = out.splitlines()[0].split("\t") if out else []
                c.eq("process %s %s: failed at judge, exit 1" % (dry, n),
                     (rc, first[:2], first[2][:len(why)]
                      if len(first) > 2 else ""),
                     (1, ["error", n], why))
                c.eq("process %s %s: source kept" % (dry, n), listing(n),
                     before[n])
        c.eq("process: nothing at DEST", listing(dest), [])

        # --drop-incomplete never drops an unknown step
        mixed = run_dir(root, "mixed", [
            (os.path.join(FIX, "runs", "olmo-torch-new-1.13", "step"),
             "step1000"),
            ])
        madeup(mixed)
        files = listing(mixed)
        rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                            "--unshard", "none", "--drop-incomplete", "mixed",
                            "--dest", dest)
        c.eq("drop-incomplete: processed, every file at DEST",
             (rc, out.split("\t")[:4], listing(os.path.join(dest, "mixed"))),
             (0, ["process", "mixed", dest + "/mixed", str(len(files))],
              files))

        rc, out, err = ckpt("clean", "--min-age", "0", *names)
        c.eq("clean: rows as predicted", out, rows(False))
        c.eq("clean: exit 1 (errors)", rc, 1)
        after = {n: listing(n) for n in names if os.path.exists(n)}
        want = dict(before)
        del want["hf-gone"]
        c.eq("clean: only the provably bad run is gone", after, want)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
