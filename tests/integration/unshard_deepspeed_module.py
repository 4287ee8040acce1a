#!/usr/bin/python3
# ctest-cost: 8
"""unshard_deepspeed_module.py - issue 21: `ckpt unshard --weights module`
of a DeepSpeed step writes the module's state dict as trained (bf16 in a
bf16 run), checked against DeepSpeed's own files, loaded by torch (1.13):
- ZeRO-1/2 (bf16 and fp32, 2 ranks; two groups, 3 ranks): what
  torch.load(mp_rank_00_model_states.pt)['module'] gives (also what
  save_16bit_model writes for these stages: engine.module_state_dict());
- ZeRO-3 (bf16 and fp32, 2 ranks): what DeepSpeed's save_16bit_model
  (_zero3_consolidated_16bit_state_dict) wrote after the same step; ckpt
  casts the fp32 master partitions to the module's bf16.
The same keys in the same order, and per tensor the same dtype, shape,
requires_grad and bytes; a tied weight (embed/head) one tensor, as in
DeepSpeed's file. Fixtures: tests/fixtures/real-writers/deepspeed_*
(README and provenance.txt beside them); DeepSpeed is never run here.

Also: --format safetensors (the same tensors, the tied one copied);
--verify; a dry run (a row, nothing written); run mode; a ZeRO-3 step
missing a rank's optimizer file refused naming it, nothing at DEST; the
bf16 step's fp32 master is not bf16-exact (the cast matters);
--weights of another format and an unknown --weights value refused.

Before: `--weights` was an unknown option (exit 2)."""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import error_in  # noqa: E402
from s3test import Checker, scratch  # noqa: E402
from dstest import (RW, read_safetensors, same_tensors, ties,  # noqa: E402
                    unshard, unshard_to)

CASES = ("zero1_bf16", "zero1_fp32", "zero2_bf16", "zero2_fp32",
         "zero2_groups")
ZERO3 = ("zero3_bf16", "zero3_fp32_16bit")


def step(case):
    return os.path.join(RW, "deepspeed_" + case, "checkpoints",
                        "global_step4" if case in ZERO3 else "global_step2")


def saved16(case):
    """DeepSpeed's own save_16bit_model file of that step (ZeRO-3)."""
    return torch.load(os.path.join(RW, "deepspeed_" + case,
                                   "save_16bit_model", "pytorch_model.bin"),
                      weights_only=True)


def module(case):
    """DeepSpeed's own file, as torch loads it (our committed fixture:
    not weights_only, it pickles DeepSpeed's config objects)."""
    sd = torch.load(os.path.join(step(case), "mp_rank_00_model_states.pt"),
                    map_location="cpu")
    return sd["module"]


def each_case(c, tmp):
    for case in CASES + ZERO3:
        want = saved16(case) if case in ZERO3 else module(case)
        out = os.path.join(tmp, "out-" + case)
        if unshard_to(c, case, out, "checkpoint.pt", "--weights", "module",
                      "--verify", step(case), row=True) == 0:
            got = torch.load(os.path.join(out, "checkpoint.pt"),
                             weights_only=True)
            same_tensors(c, case, got, want)
            c.eq(case + ": the tied weight is one tensor", ties(got),
                 ties(want))
        st = os.path.join(tmp, "st-" + case)
        if unshard_to(c, case + " safetensors", st, "model.safetensors",
                      "--weights", "module", "--format", "safetensors",
                      step(case)) == 0:
            got = read_safetensors(os.path.join(st, "model.safetensors"))
            for t in want.values():
                t.requires_grad_(False)
            same_tensors(c, case + " safetensors", got, want)
    # The 16-bit run's weights are bf16 (the fp32 master is another
    # thing: --weights master, unshard_deepspeed.py).
    c.eq("zero1_bf16: module dtypes", sorted({str(t.dtype) for t in
                                              module("zero1_bf16")
                                              .values()}),
         ["torch.bfloat16", "torch.float32"])
    dry = os.path.join(tmp, "dry")
    rc, so, _ = unshard("-n", "--weights", "module", step("zero2_bf16"), dry)
    c.eq("dry run: row", (rc, so.split("\t")[0], os.path.exists(dry)),
         (0, "would-unshard", False))


def zero3(c, tmp):
    """What the cast does to a ZeRO-3 bf16 step: every trainable weight
    of DeepSpeed's 16-bit file is bf16, and its fp32 master (--weights
    master) differs from it (the cast is not a no-op here)."""
    want = saved16("zero3_bf16")
    c.eq("zero3_bf16: 16-bit file dtypes", sorted({str(t.dtype) for t in
                                                   want.values()}),
         ["torch.bfloat16", "torch.float32"])
    out = os.path.join(tmp, "z3-master")
    rc, _, se = unshard(step("zero3_bf16"), out)
    c.eq("zero3_bf16 master: exit (%s)" % se.strip(), rc, 0)
    if rc == 0:
        m = torch.load(os.path.join(out, "checkpoint.pt"), weights_only=True)
        c.eq("zero3_bf16 master: fp32", m["fc1.weight"].dtype, torch.float32)
        c.true("zero3_bf16 master: not already bf16-exact",
               not torch.equal(m["fc1.weight"],
                               m["fc1.weight"].to(torch.bfloat16).float()))
    # A missing rank's optimizer file: the partitions are needed.
    bad = os.path.join(tmp, "z3-bad")
    shutil.copytree(step("zero3_bf16"), bad)
    os.remove(os.path.join(bad,
                           "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"))
    out = os.path.join(tmp, "z3-bad-out")
    rc, so, se = unshard("--weights", "module", bad, out)
    c.eq("zero3 missing optim file: one error row naming it",
         (rc, error_in(so, se)),
         (1, "'%s/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt' "
             "is missing (partition_count 2 in bf16_zero_pp_rank_0_mp_"
             "rank_00_optim_states.pt)" % bad))
    c.eq("zero3 missing optim file: nothing at DEST", os.path.exists(out),
         False)


def run_mode(c, tmp):
    run = os.path.join(tmp, "runs", "ds-zero2_bf16")
    shutil.copytree(os.path.join(RW, "deepspeed_zero2_bf16", "checkpoints"),
                    run)
    out = os.path.join(tmp, "run-out")
    rc, so, se = unshard("--weights", "module", run, out)
    c.eq("run: exit (%s)" % se.strip(), rc, 0)
    c.eq("run: rows", [tuple(x.split("\t")[:2]) for x in so.splitlines()],
         [("unshard", "global_step2")])
    got = os.path.join(out, "global_step2-unsharded", "checkpoint.pt")
    if os.path.exists(got):
        same_tensors(c, "run", torch.load(got, weights_only=True),
                   module("zero2_bf16"))
    else:
        c.true("run: output at " + got, False)


def refusals(c, tmp):
    rc, _, se = unshard("--weights", "fp16", step("zero2_bf16"),
                        os.path.join(tmp, "x"))
    c.eq("unknown --weights: usage error", (rc, se.splitlines()[0]),
         (2, "ckpt unshard: error: unknown --weights 'fp16' (master or "
             "module)"))
    dcp = os.path.join(RW, "hf_trainer_fsdp2_sharded", "checkpoint-2",
                       "pytorch_model_fsdp_0")
    out = os.path.join(tmp, "dcp")
    rc, so, se = unshard("--weights", "module", dcp, out)
    c.eq("DCP: --weights module refused", (rc, error_in(so, se)),
         (1, "'%s': --weights module reads a DeepSpeed step's "
             "model-states file; this is dcp" % dcp))
    c.eq("DCP: nothing at DEST", os.path.exists(out), False)


def main():
    c = Checker()
    with scratch("ckpt-dsmod-") as tmp:
        each_case(c, tmp)
        zero3(c, tmp)
        run_mode(c, tmp)
        refusals(c, tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
