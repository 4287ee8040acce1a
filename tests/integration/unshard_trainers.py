#!/usr/bin/python3
# ctest-cost: 15
"""unshard_trainers.py - issue 29, item 2: the rest of the trainers, on
files the real writers wrote (tests/fixtures/real-writers/):

- a DCP directory without its .metadata (accelerate's
  pytorch_model_fsdp_0/ with the file removed, as a save killed before
  its end leaves it), given directly: `ckpt ls` judges it incomplete
  (before: nothing), `ckpt unshard` says `skip NAME incomplete: .metadata
  missing`, exit 0, nothing written, as for such a step in a run (before:
  `error - no checkpoint`, exit 1);
- a DeepSpeed run saved with a custom tag (checkpoints/best-model/,
  `latest` naming it): judged a run, the tag a DeepSpeed step, unsharded
  to best-model-unsharded/ with zero_to_fp32's tensors;
- `--weights module` of a ZeRO-1 and a ZeRO-2 step with a rank's
  optimizer file missing (an interrupted save): exit 1 naming the file,
  nothing written (before: it succeeded, from the model states alone);
  the complete steps still succeed;
- accelerate's own save_state folders (checkpoints/checkpoint_0/): with
  FSDP SHARDED_STATE_DICT judged a complete hf step (before: "incomplete:
  trainer_state.json missing", the HF Trainer's rule, which save_state
  never meets), unsharded to model.pt with merge-weights' tensors, and
  --format hf merge-weights' model.safetensors byte for byte; without
  random_states_0.pkl (written last) incomplete; with FULL_STATE_DICT
  (pytorch_model_fsdp.bin) unsharded and complete (before: unknown),
  nothing to merge."""
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import (CKPT, SRC, check, error_of, finish, run,  # noqa: E402
                     st_tensors, unshard)

RW = os.path.join(SRC, "tests", "fixtures", "real-writers")


def main():
    tmp = tempfile.mkdtemp(prefix="trainers-")
    try:
        bare = os.path.join(tmp, "fsdp_model")
        shutil.copytree(os.path.join(RW, "hf_trainer_fsdp2_sharded",
                                     "checkpoint-2", "pytorch_model_fsdp_0"),
                        bare)
        os.remove(os.path.join(bare, ".metadata"))
        p = run(CKPT, "ls", bare)
        check("DCP without .metadata: ls judges it incomplete",
              p.stdout.split("\t")[3:5] == ["dcp",
                                            "incomplete: .metadata missing"],
              p.stdout)
        out = os.path.join(tmp, "bare-out")
        p = unshard(bare, out)
        check("DCP without .metadata: a skip row, exit 0, nothing written",
              p.returncode == 0 and p.stdout ==
              "skip\tfsdp_model\tincomplete: .metadata missing\n" and
              not os.path.exists(out), p.stdout + p.stderr)

        runs = os.path.join(tmp, "tagged")
        shutil.copytree(os.path.join(RW, "deepspeed_zero2_fp32",
                                     "checkpoints"), runs)
        os.rename(os.path.join(runs, "global_step2"),
                  os.path.join(runs, "best-model"))
        with open(os.path.join(runs, "latest"), "w") as f:
            f.write("best-model")
        p = run(CKPT, "ls", runs)
        check("custom tag: a DeepSpeed step of the run",
              p.stdout.split("\t")[1:5] == ["best-model", "-", "deepspeed",
                                             "complete"], p.stdout)
        out = os.path.join(tmp, "tagged-out")
        p = unshard(runs, out)
        check("custom tag: unsharded", p.returncode == 0 and
              p.stdout.startswith("unshard\tbest-model\t"), p.stdout +
              p.stderr)
        got = torch.load(os.path.join(out, "best-model-unsharded",
                                      "checkpoint.pt"), weights_only=True)
        want = torch.load(os.path.join(RW, "deepspeed_zero2_fp32",
                                       "zero_to_fp32_out", "global_step2",
                                       "pytorch_model.bin"),
                          weights_only=True)
        check("custom tag: zero_to_fp32's tensors", list(got) == list(want)
              and all(torch.equal(got[k], want[k]) for k in want))

        for case, prefix in (("zero1_bf16", "bf16_"), ("zero2_bf16", "bf16_"),
                             ("zero2_fp32", "")):
            step = os.path.join(tmp, case)
            shutil.copytree(os.path.join(RW, "deepspeed_" + case,
                                         "checkpoints", "global_step2"), step)
            p = unshard("--weights", "module", step, os.path.join(tmp, "ok-" +
                                                                  case))
            check("%s --weights module: complete step, exit 0" % case,
                  p.returncode == 0, p.stdout + p.stderr)
            gone = "%szero_pp_rank_1_mp_rank_00_optim_states.pt" % prefix
            os.remove(os.path.join(step, gone))
            out = os.path.join(tmp, "module-" + case)
            p = unshard("--weights", "module", step, out)
            want = ("'%s/%s' is missing (dp_world_size 2 in "
                    "mp_rank_00_model_states.pt): the step's save did not "
                    "finish" % (step, gone))
            check("%s --weights module, a rank's optimizer file missing: "
                  "refused" % case, p.returncode == 1 and
                  error_of(p).endswith(want) and not os.path.exists(out),
                  error_of(p) + "\nwanted: " + want)

        # accelerate save_state folders.
        acc = os.path.join(RW, "acc_save_state_sharded")
        merged = os.path.join(acc, "reference_accelerate_merge_weights",
                              "model.safetensors")
        p = run(CKPT, "ls", os.path.join(acc, "run"))
        check("save_state, FSDP sharded: an hf step, complete (was "
              "incomplete: trainer_state.json missing)",
              p.stdout.split("\t")[1:5] == ["checkpoint_0", "0", "hf",
                                             "complete"], p.stdout)
        out = os.path.join(tmp, "acc-out")
        # accelerate numbers its saves from 0: step 0 to ckpt, taken
        # when asked (as process takes it)
        p = unshard("--unshard-step0", os.path.join(acc, "run"), out)
        check("save_state, FSDP sharded: unsharded", p.returncode == 0 and
              p.stdout.startswith("unshard\tcheckpoint_0\t"),
              p.stdout + p.stderr)
        got = torch.load(os.path.join(out, "checkpoint_0-unsharded",
                                      "model.pt"), weights_only=True)
        want = st_tensors(merged)
        check("save_state, FSDP sharded: model.pt holds merge-weights' "
              "tensors", sorted(got) == sorted(want) and
              all(got[k].numpy().tobytes() == want[k][2] for k in want))
        out = os.path.join(tmp, "acc-hf")
        p = unshard("--format", "hf", "--unshard-step0", "--config-dir",
                    os.path.join(acc, "model_config"),
                    os.path.join(acc, "run"), out)
        with open(os.path.join(out, "checkpoint_0-hf", "model.safetensors"),
                  "rb") as x, open(merged, "rb") as y:
            check("save_state, FSDP sharded --format hf: merge-weights' "
                  "model.safetensors byte for byte", x.read() == y.read())
        bad = os.path.join(tmp, "acc-killed")
        shutil.copytree(os.path.join(acc, "run"), bad)
        os.remove(os.path.join(bad, "checkpoints", "checkpoint_0",
                               "random_states_0.pkl"))
        p = run(CKPT, "ls", bad)
        check("save_state without random_states_0.pkl: incomplete",
              p.stdout.split("\t")[4:5] == [
                  "incomplete: random_states_0.pkl missing (accelerate's "
                  "save_state writes it last)"], p.stdout)
        full = os.path.join(RW, "acc_save_state_full", "run")
        p = run(CKPT, "ls", full)
        check("save_state, FSDP full: unsharded, complete (was unknown)",
              p.stdout.split("\t")[1:5] == ["checkpoint_0", "0",
                                             "unsharded", "complete"],
              p.stdout)
        p = unshard("--unshard-step0", full, os.path.join(tmp, "full-out"))
        check("save_state, FSDP full: nothing to merge",
              p.returncode == 0 and p.stdout ==
              "skip\tcheckpoint_0\tnot sharded\n", p.stdout + p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
