#!/usr/bin/python3
# ctest-cost: 5
"""judge_own_outputs.py - issue 20 class 2: every layout `ckpt unshard`
writes judges complete, under every step name it accepts.

`ckpt unshard --delete-sharded RUN RUN/checkpoint` of runs whose sharded
steps are named step-N, checkpoint-N, global_stepN, iter_NNNNNNN, epoch_N,
dist_epoch_N, step_N, stepN and bare N (under checkpoint/ or at the top),
with --format safetensors split into model-0000K-of-0000N.safetensors +
model.safetensors.index.json, unsplit (model.safetensors + extra.json),
--format torch (checkpoint.pt), and an OLMo step's --layout olmo in both
formats (model.pt, optim.pt, train.pt; model.safetensors,
optim.safetensors, train.pt, extra.json): `ckpt ls` judges every output
complete and `ckpt clean` keeps every run with its files. Before, the
split output was `unknown, incomplete: no model file`, and clean deleted
the run: the only copy, the sharded step being gone."""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, ckpt, listing, scratch  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures")
# torch 2.6 DCP saves: 6 tensors (split by --max-shard-size 200), and one
# tensor with non-tensor values (extra.json)
ROWS = os.path.join(FIX, "dcp-v2.6", "row", "ckpt")
DCP = os.path.join(FIX, "dcp-v2.6", "objects", "ckpt")
OLMO = os.path.join(FIX, "runs", "olmo-torch-new-1.13", "step")

# run: (sharded step dirs (relative), source, unshard options)
RUNS = {
    "titan-split": (["checkpoint/step-5"], ROWS,
                    ["--format", "safetensors", "--max-shard-size", "200"]),
    "names-split": (["checkpoint-5", "global_step6", "iter_0000007",
                     "epoch_8", "dist_epoch_9", "step_10", "step11", "12"],
                    ROWS, ["--format", "safetensors", "--max-shard-size",
                          "200"]),
    "names-st": (["checkpoint-5", "dist_epoch_9", "12"], DCP,
                 ["--format", "safetensors"]),
    "names-torch": (["checkpoint/step-5", "checkpoint/iter_0000007"], DCP,
                    ["--format", "torch"]),
    "olmo-torch": (["step1000"], OLMO, ["--format", "torch"]),
    "olmo-st": (["step1000"], OLMO, ["--format", "safetensors"]),
}


def make(root, name, steps, src):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "wandb"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("run_name: %s\n" % name)
    for s in steps:
        shutil.copytree(src, os.path.join(d, s))
    for dp, ds, fs in os.walk(d):
        for n in ds + fs:
            os.chmod(os.path.join(dp, n), 0o755 if n in ds else 0o644)
    return d


def main():
    c = Checker()
    with scratch("ckpt-judge-own-") as tmp:
        for name, (steps, src, opts) in sorted(RUNS.items()):
            run = make(tmp, name, steps, src)
            # each step's copy beside it, as unshard's run mode names it
            parents = sorted({os.path.dirname(s) for s in steps})
            for p in parents:
                rc, out, err = ckpt("unshard", "--no-progress",
                                    "--delete-sharded", *opts, run,
                                    os.path.join(run, p) if p else run)
                c.eq("%s/%s: unshard exit" % (name, p), (rc, err), (0, ""))
            files = listing(run)
            c.true("%s: sharded steps gone" % name,
                   not any(f.startswith(s + "/") for s in steps
                           for f in files))
            rc, out, err = ckpt("ls", run)
            states = sorted((r.split("\t")[1], r.split("\t")[4])
                            for r in out.splitlines())
            c.eq("%s: every copy complete" % name, (rc, states),
                 (0, sorted((os.path.basename(s) + "-unsharded", "complete")
                            for s in steps)))
            copy = os.path.basename(steps[-1]) + "-unsharded"
            rc, out, err = ckpt("clean", "--min-age", "0", run)
            c.eq("%s: clean keeps it" % name, (rc, out.split("\t")[0]),
                 (0, "keep"))
            c.eq("%s: nothing deleted" % name, listing(run), files)
            c.true("%s: %s holds the layout's files" % (name, copy),
                   [f for f in files if "/" + copy + "/" in "/" + f])
        # what each layout wrote (the judge was shown every one of them)
        def names(run, step):
            d = os.path.join(tmp, run, step)
            return sorted(os.listdir(d)) if os.path.isdir(d) else None
        c.eq("split layout", names("titan-split", "checkpoint/step-5-unsharded"),
             ["config.yaml"] + ["model-%05d-of-00004.safetensors" % k
                                for k in range(1, 5)] +
             ["model.safetensors.index.json"])
        c.eq("safetensors layout", names("names-st", "12-unsharded"),
             ["config.yaml", "extra.json", "model.safetensors"])
        c.eq("torch layout", names("names-torch",
                                   "checkpoint/iter_0000007-unsharded"),
             ["checkpoint.pt", "config.yaml"])
        c.eq("olmo torch layout", names("olmo-torch", "step1000-unsharded"),
             ["config.yaml", "model.pt", "optim.pt", "train.pt"])
        c.eq("olmo safetensors layout", names("olmo-st",
                                              "step1000-unsharded"),
             ["config.yaml", "extra.json", "model.safetensors",
              "optim.safetensors", "train.pt"])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
