#!/usr/bin/python3
# ctest-cost: 10
"""judge_pins.py - what the writer pins is never pruned (issue 27 class
12). `clean --keep-last 1` on an HF Trainer run with
load_best_model_at_end pruned the checkpoint trainer_state.json records
as best_model_checkpoint, which HF's own rotation keeps; the same for
the tag DeepSpeed's `latest` names and the iteration Megatron's
latest_checkpointed_iteration.txt names. `-n` says why each is kept,
and the real run prunes exactly what `-n` said. The checkpoints are the
writers' own files (tests/fixtures/real-writers), copied under more
steps."""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, age, ckpt  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures", "real-writers")


def copies(src, run, sub, names):
    for n in names:
        shutil.copytree(src, os.path.join(run, sub, n))


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        hf = os.path.join(tmp, "hf")
        copies(os.path.join(FIX, "hf_trainer_fsdp2_sharded", "checkpoint-2"),
               hf, "", ["checkpoint-2", "checkpoint-4", "checkpoint-6"])
        ts = os.path.join(hf, "checkpoint-6", "trainer_state.json")
        with open(ts) as f:
            state = json.load(f)
        state["best_model_checkpoint"] = "/scratch/out/checkpoint-2"
        with open(ts, "w") as f:
            json.dump(state, f)

        ds = os.path.join(tmp, "ds")
        copies(os.path.join(FIX, "deepspeed_zero1_fp32", "checkpoints",
                            "global_step2"), ds, "checkpoints",
               ["global_step2", "global_step4", "global_step6"])
        with open(os.path.join(ds, "checkpoints", "latest"), "w") as f:
            f.write("global_step4")     # (a rollback: not the newest)

        mg = os.path.join(tmp, "mg")
        copies(os.path.join(FIX, "megatron_legacy_torch", "checkpoints",
                            "iter_0000010"), mg, "checkpoints",
               ["iter_0000010", "iter_0000020", "iter_0000030"])
        with open(os.path.join(mg, "checkpoints",
                               "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("20\n")
        age(tmp)

        want = {
            hf: ("checkpoint-4", "checkpoint-2 (best_model_checkpoint in "
                 "checkpoint-6/trainer_state.json)"),
            ds: ("global_step2", "global_step4 (named by checkpoints/latest)"),
            mg: ("iter_0000010", "iter_0000020 (named by checkpoints/"
                 "latest_checkpointed_iteration.txt)"),
        }
        for run, (pruned, kept) in want.items():
            name = os.path.basename(run)
            rc, out, err = ckpt("clean", "-n", "--keep-last", "1",
                                "--min-age", "0", run)
            c.eq("%s: -n says what is pruned and why the pin is kept" % name,
                 (rc, out[0][0], out[0][2].split("; ", 1)[-1]),
                 (0, "keep", "kept %s; would prune %s" % (kept, pruned)))
            before = sorted(os.listdir(os.path.dirname(
                os.path.join(run, "checkpoints" if name != "hf" else "",
                             pruned))))
            rc, out, err = ckpt("clean", "--keep-last", "1", "--min-age",
                                "0", run)
            after = sorted(os.listdir(os.path.dirname(
                os.path.join(run, "checkpoints" if name != "hf" else "",
                             pruned))))
            c.eq("%s: the real run prunes exactly that" % name,
                 (rc, sorted(set(before) - set(after))), (0, [pruned]))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
