#!/usr/bin/python3
# ctest-cost: 20
"""unshard_deepspeed.py - issue 21: `ckpt unshard` of DeepSpeed ZeRO-1/2/3
steps (global_stepN/) against DeepSpeed's own zero_to_fp32.py output.

Fixtures (tests/fixtures/real-writers/deepspeed_*, provenance beside them)
were written by DeepSpeed 0.19.6's engine.save_checkpoint on CPU, 2 ranks:
ZeRO-1 bf16 and fp32, ZeRO-2 bf16 and fp32, ZeRO-3 fp32, a model with a
tied embedding (shared_params), a frozen parameter, a buffer and an odd
number of trainable elements (padding); and, 3 ranks, ZeRO-2 and ZeRO-3
with two parameter groups and bfloat16 and int64 buffers (zero_to_fp32
turns buffers float32). The references are zero_to_fp32's
pytorch_model.bin of each step, committed; zero_to_fp32 is never run here.

Compared exactly (torch 1.13, weights_only=True): the same keys in the
same order (buffers, frozen parameters, trainable ones, tied names last;
ZeRO-1 records no frozen parameters, so they are absent as in the
reference), and per tensor the same dtype, shape, requires_grad and
bytes; a tied name is the same tensor as its source in both. Where
zero_to_fp32's tensors are views of one flat storage (ZeRO-1/2), ckpt's
are each their own (documented in docs/formats/deepspeed.md).

Also: --format safetensors (the same tensors, tied ones copied: safetensors
cannot share, and zero_to_fp32's own --safe_serialization fails there);
--verify; a dry run; run mode on a run directory, a .tar (read in place)
and a .tar.gz (one step extracted at a time), and from S3 (a step to a
local directory, the run to S3), byte for byte the local output; a damaged step (a rank's optimizer file missing, as an
interrupted save leaves it; a ZeRO-3 rank's model states missing): exit 1,
one error row naming the missing file, nothing at DEST, while run mode
unshards the complete step beside it and skips the damaged one as
incomplete; `ckpt process` of a DeepSpeed run unshards its step
(before: 'unsupported checkpoint format', and `unshard STEP` said "no
checkpoint")."""
import os
import shutil
import subprocess
import sys
import tarfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import error_in  # noqa: E402
from s3test import CKPT, Checker, S3Env, contents, sh  # noqa: E402
from s3test import scratch  # noqa: E402
from dstest import (RW, raw, read_safetensors, same_tensors,  # noqa: E402
                    ties, unshard, unshard_to)

CASES = ("zero1_bf16", "zero1_fp32", "zero2_bf16", "zero2_fp32",
         "zero3_fp32", "zero2_groups", "zero3_groups")
MISSING = ("'%s/zero_pp_rank_1_mp_rank_00_optim_states.pt' is missing "
           "(partition_count 2 in zero_pp_rank_0_mp_rank_00_optim_states.pt)")


def step(case):
    return os.path.join(RW, "deepspeed_" + case, "checkpoints",
                        "global_step2")


def ref(case):
    return os.path.join(RW, "deepspeed_" + case, "zero_to_fp32_out",
                        "global_step2", "pytorch_model.bin")


def shared_storage(sd):
    ks = list(sd)
    return sorted((a, b) for i, a in enumerate(ks) for b in ks[i + 1:]
                  if sd[a].storage().data_ptr() ==
                  sd[b].storage().data_ptr())


def same_state(c, what, path, reference):
    """ckpt's output at path against zero_to_fp32's reference: the same
    tensors (dstest.same_tensors), a tied name the same tensor as its
    source, and no other storage shared. (bench/deepspeed.sh uses it.)"""
    got = torch.load(path, weights_only=True)
    want = torch.load(reference, weights_only=True)
    c.eq(what + ": type", type(got).__name__, type(want).__name__)
    same_tensors(c, what, got, want)
    c.eq(what + ": tied names share their tensor", ties(got), ties(want))
    c.eq(what + ": no other storage shared", shared_storage(got),
         ties(want))


def same_tensors_st(c, what, path, reference):
    got = read_safetensors(path)
    want = torch.load(reference, weights_only=True)
    c.eq(what + ": names in order", list(got), list(want))
    for k in want:
        if k in got:
            c.eq("%s: %s dtype, shape" % (what, k),
                 (got[k].dtype, tuple(got[k].shape)),
                 (want[k].dtype, tuple(want[k].shape)))
            c.true("%s: %s bytes" % (what, k), raw(got[k]) == raw(want[k]))


def each_case(c, tmp):
    for case in CASES:
        out = os.path.join(tmp, "out-" + case)
        if unshard_to(c, case, out, "checkpoint.pt", "--verify", step(case),
                      row=True) == 0:
            same_state(c, case, os.path.join(out, "checkpoint.pt"),
                       ref(case))
        st = os.path.join(tmp, "st-" + case)
        if unshard_to(c, case + " safetensors", st, "model.safetensors",
                      "--format", "safetensors", step(case)) == 0:
            same_tensors_st(c, case + " safetensors",
                            os.path.join(st, "model.safetensors"), ref(case))
    dry = os.path.join(tmp, "dry")
    rc, so, _ = unshard("-n", step("zero3_fp32"), dry)
    c.eq("dry run: row", (rc, so.split("\t")[0], os.path.exists(dry)),
         (0, "would-unshard", False))


def make_run(root, case, drop=()):
    """A run directory: the case's checkpoints/ (global_step2, latest),
    and a damaged global_step4 (a copy of step 2 without the files in
    drop, as an interrupted save leaves it)."""
    run = os.path.join(root, "ds-" + case)
    shutil.copytree(os.path.join(RW, "deepspeed_" + case, "checkpoints"), run)
    with open(os.path.join(run, "latest"), "w") as f:
        f.write("global_step2")
    if drop:
        s4 = os.path.join(run, "global_step4")
        shutil.copytree(os.path.join(run, "global_step2"), s4)
        for n in drop:
            os.remove(os.path.join(s4, n))
    return run


def runs(c, tmp):
    run = make_run(os.path.join(tmp, "runs"), "zero3_fp32",
                   drop=("zero_pp_rank_1_mp_rank_00_optim_states.pt",))
    local = os.path.join(tmp, "run-out")
    rc, so, se = unshard(run, local)
    rows = sorted(tuple(x.split("\t")[:2]) for x in so.splitlines())
    c.eq("run: exit (%s)" % se.strip(), rc, 0)
    c.eq("run: step 2 unsharded, step 4 skipped", rows,
         [("skip", "global_step4"), ("unshard", "global_step2")])
    c.true("run: skip says why", "incomplete: " in so and
           "zero_pp_rank_1_mp_rank_00_optim_states.pt" in so)
    got = os.path.join(local, "global_step2-unsharded", "checkpoint.pt")
    c.eq("run: outputs", sorted(os.listdir(local)) if os.path.isdir(local)
         else None, ["global_step2-unsharded"])
    c.true("run: output at " + got, os.path.exists(got))
    if os.path.exists(got):
        same_state(c, "run", got, ref("zero3_fp32"))
    want = contents(local)
    remote(c, tmp, run, want)
    for ext, mode in ((".tar", "w"), (".tar.gz", "w:gz")):
        arc = os.path.join(tmp, "ds-run" + ext)
        with tarfile.open(arc, mode) as t:
            t.add(run, arcname="ds-zero3_fp32")
        out = os.path.join(tmp, "arc-out" + ext)
        rc, so, se = unshard(arc, out)
        c.eq("%s: exit (%s)" % (ext, se.strip()), rc, 0)
        c.eq("%s: byte for byte the directory's output" % ext,
             contents(out) if os.path.isdir(out) else None, want)


def remote(c, tmp, run, want):
    """The run in S3 (s3rver behind the signing proxy): the step alone
    into a local directory, and the run into S3, byte for byte the local
    outputs; the damaged step skipped there too."""
    with S3Env() as s3:
        env = s3.env()
        sh("aws", "s3", "cp", "--quiet", "--recursive", run,
           "s3://ckpt-test/src/ds-run", env=env)
        out = os.path.join(tmp, "s3-step")
        rc, _, se = unshard("s3://ckpt-test/src/ds-run/global_step2", out,
                            env=env)
        c.eq("s3 step: exit (%s)" % se.strip(), rc, 0)
        c.eq("s3 step: the local output",
             {"global_step2-unsharded/" + k: v
              for k, v in contents(out).items()}, want)
        rc, so, se = unshard("s3://ckpt-test/src/ds-run",
                             "s3://ckpt-test/out", env=env)
        c.eq("s3 run: exit (%s)" % se.strip(), rc, 0)
        c.eq("s3 run: rows", sorted(tuple(x.split("\t")[:2])
                                    for x in so.splitlines()),
             [("skip", "global_step4"), ("unshard", "global_step2")])
        dl = os.path.join(tmp, "s3-dl")
        sh("aws", "s3", "cp", "--quiet", "--recursive", "s3://ckpt-test/out",
           dl, env=env)
        c.eq("s3 run: the local outputs", contents(dl), want)


def damaged(c, tmp):
    for case, rm, want in (
            ("zero2_fp32", "zero_pp_rank_1_mp_rank_00_optim_states.pt",
             MISSING),
            ("zero3_fp32", "zero_pp_rank_1_mp_rank_00_model_states.pt",
             "'%s/zero_pp_rank_1_mp_rank_00_model_states.pt' is missing "
             "(ZeRO-3 saves every rank's model states; partition_count 2)"),
            ("zero1_bf16",
             "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
             "'%s/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt' is "
             "missing")):
        s = os.path.join(tmp, "bad-" + case)
        shutil.copytree(step(case), s)
        os.remove(os.path.join(s, rm))
        before = sorted(os.listdir(s))
        out = os.path.join(tmp, "bad-out-" + case)
        rc, so, se = unshard(s, out)
        c.eq("damaged %s: exit" % case, rc, 1)
        c.eq("damaged %s: one error row naming the file" % case,
             error_in(so, se), want % s)
        c.eq("damaged %s: nothing at DEST, source kept" % case,
             (os.path.exists(out), sorted(os.listdir(s))), (False, before))


def process(c, tmp):
    root = os.path.join(tmp, "queue")
    run = make_run(root, "zero2_bf16")
    dest = os.path.join(tmp, "D")
    p = subprocess.run([CKPT, "process", "--no-wandb", "-q", "--min-age",
                        "0", run, "--dest", dest], capture_output=True,
                       text=True, timeout=600)
    f = p.stdout.split("\t")
    c.eq("process: exit (%s)" % p.stderr.strip(), p.returncode, 0)
    c.eq("process: processed, 1 step unsharded", (f[0], f[5]) if
         len(f) > 5 else p.stdout, ("process", "1"))
    got = os.path.join(dest, "ds-zero2_bf16", "global_step2-unsharded",
                       "checkpoint.pt")
    c.true("process: output at DEST", os.path.exists(got))
    if os.path.exists(got):
        same_state(c, "process", got, ref("zero2_bf16"))
    c.eq("process: source gone", os.path.exists(run), False)


def main():
    c = Checker()
    with scratch("ckpt-ds-") as tmp:
        each_case(c, tmp)
        runs(c, tmp)
        damaged(c, tmp)
        process(c, tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
