#!/usr/bin/python3
"""make_olmo_legacy.py: write a REAL OLMo `torch_legacy` sharded checkpoint
(per-rank torch.save files holding ShardedTensors) with torch 1.13, plus the
files OLMo's own scripts/unshard.py would write from it.

Runs at test time with Debian bookworm's torch 1.13 (Python 3.11):

    /usr/bin/python3 tests/support/make_olmo_legacy.py OUTDIR [--ranks N] [--no-verify] [--timeout S]

    --ranks N     world size, 2..4 (default 4)
    --no-verify   skip the round trip described below
    --timeout S   kill the ranks after S seconds (default 120)

Writes (OUTDIR must not contain ckpt/ already):
    OUTDIR/ckpt/rank{R}.pt     R = 0..N-1: torch.save(state, path) from rank R,
                               so the zip prefix is "rank{R}". state =
                               {"model": {fqn: ShardedTensor},
                                "optim": {"state": {fqn: {"step": 0-d tensor,
                                                          "exp_avg": ShardedTensor,
                                                          "exp_avg_sq": ShardedTensor}},
                                          "param_groups": [{..., "params": [fqn, ...]}]},
                                **trainer_state}
                               trainer_state as OLMo's trainer_state_dict():
                               epoch, global_step,
                               global_train_examples_seen_this_epoch,
                               global_train_tokens_seen, world_size,
                               checkpoints / unsharded_checkpoints /
                               ephemeral_checkpoints (lists of pathlib.PosixPath),
                               rng {python, numpy (ndarray inside), torch, cuda,
                               mps}: rng differs per rank, the rest is equal.
    OUTDIR/ckpt/config.yaml    minimal OLMo config (sharded_checkpointer: torch_legacy)
    OUTDIR/expected/model.pt   {fqn: full tensor}                  \\ what OLMo's
    OUTDIR/expected/optim.pt   {"state": {fqn: {...full...}},       | scripts/unshard.py
                                "param_groups": rank 0's}          | writes (torch.save;
    OUTDIR/expected/train.pt   trainer_state minus "rng" (rank 0's) | train.pt holds
    OUTDIR/expected/config.yaml  copy of ckpt/config.yaml          /  PosixPath objects)
    OUTDIR/manifest.json       world size, keys, per ShardedTensor its shape and
                               shards [[rank, offsets, sizes, placement], ...]

How the ShardedTensors are made (FSDP itself needs CUDA in 1.13): with the
function FSDP's SHARDED_STATE_DICT uses, torch.distributed.fsdp._shard_utils.
_create_chunk_sharded_tensor (tensor.chunk(world) along dim 0: uneven, and
ranks past the last chunk own nothing and have NO entry in shards_metadata),
over a gloo group on 127.0.0.1 (torchranks.py, fork).
  * model tensors then go through ShardedTensor.cpu(), as OLMo's
    offload_to_cpu=True does: every placement "rank:R/cpu";
  * optimizer exp_avg / exp_avg_sq keep FSDP's global placements
    "rank:R/cuda:0" (shards_metadata) while the local Shard says
    "rank:R/cpu": the unsharder must use the rank and ignore the device;
  * one extra model tensor "transformer.extra_2d.weight" is 2-D block sharded
    (init_from_local_shards, one uneven block per rank, in rank order, as
    OLMo's unsharder requires) to cover non-FSDP layouts;
  * all tensors fp32 (OLMo's legacy unsharder assumes fp32).

Verification (default): the parent loads every rank file the way OLMo does
(no process group; torch._tensor._rebuild_from_type_v2 patched so a
ShardedTensor only gets its state), rebuilds the full state dict with an
independent implementation of OLMo's TorchLegacyShardedCheckpointer._unshard
(shards_metadata[i] must be on rank i; non-tensor leaves equal on all ranks;
"rng" skipped), and checks it equals expected/*.pt exactly.
"""
import argparse
import collections
import contextlib
import json
import os
import pathlib
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed._shard.sharded_tensor import (  # noqa: E402
    Shard, ShardedTensor, ShardMetadata, init_from_local_shards)
from torch.distributed.fsdp._shard_utils import _create_chunk_sharded_tensor  # noqa: E402

from check_unshard import compare  # noqa: E402
from make_dcp import SEED, f32  # noqa: E402
import torchranks  # noqa: E402

PARAMS = [  # fqn, shape (FSDP use_orig_params names)
    ("transformer.wte.weight", (50, 16)),
    ("transformer.blocks.0.att_proj.weight", (48, 16)),
    ("transformer.blocks.0.attn_out.weight", (16, 16)),
    ("transformer.blocks.0.ff_proj.weight", (40, 16)),
    ("transformer.blocks.0.ff_out.weight", (16, 20)),
    ("transformer.blocks.0.attn_norm.weight", (16,)),
    ("transformer.blocks.0.attn_norm.bias", (2,)),     # fewer rows than ranks
    ("transformer.blocks.1.att_proj.weight", (48, 16)),
    ("transformer.blocks.1.ff_out.weight", (16, 20)),
    ("transformer.ln_f.weight", (5,)),
]
EXTRA_2D = ("transformer.extra_2d.weight", (5, 7))
PARAM_GROUP = {"lr": 4e-4, "betas": (0.9, 0.95), "eps": 1e-5, "weight_decay": 0.1,
               "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
               "differentiable": False, "fused": None, "initial_lr": 4e-4,
               "max_grad_norm": 1.0, "max_grad_norm_ratio": None}


def full_tensors():
    """Deterministic full values: {fqn: {"param", "exp_avg", "exp_avg_sq"}}."""
    out = collections.OrderedDict()
    for fqn, shape in PARAMS + [EXTRA_2D]:
        out[fqn] = {"param": f32(shape, "legacy.p." + fqn),
                    "exp_avg": f32(shape, "legacy.m." + fqn) * 1e-3,
                    "exp_avg_sq": f32(shape, "legacy.v." + fqn).abs() * 1e-6}
    return out


def blocks_2d(shape, world):
    """One uneven block per rank, in rank order."""
    rows, cols = shape
    if world == 4:
        r0, c0 = 3, 4
        return [((0, 0), (r0, c0)), ((0, c0), (r0, cols - c0)),
                ((r0, 0), (rows - r0, c0)), ((r0, c0), (rows - r0, cols - c0))]
    if world == 3:
        return [((0, 0), (3, 4)), ((0, 4), (3, 3)), ((3, 0), (2, 7))]
    return [((0, 0), (5, 3)), ((0, 3), (5, 4))]


def trainer_state(rank, world):
    import numpy as np
    random.seed(SEED + rank)
    np.random.seed(SEED + rank)
    gen = torch.Generator().manual_seed(SEED + rank)
    run = pathlib.PosixPath("/runs/olmo-legacy-tiny")
    return collections.OrderedDict([
        ("epoch", 1),
        ("global_step", 3),
        ("global_train_examples_seen_this_epoch", 3 * 16),
        ("global_train_tokens_seen", 3 * 16 * 128),
        ("world_size", world),
        ("checkpoints", [run / "step1", run / "step3"]),
        ("unsharded_checkpoints", [run / "step1-unsharded"]),
        ("ephemeral_checkpoints", []),
        ("rng", {"python": random.getstate(), "numpy": np.random.get_state(),
                 "torch": gen.get_state(), "cuda": gen.get_state().clone(),
                 "mps": None}),
    ])


def _worker(rank, world, ckpt_dir):
    pg = dist.distributed_c10d._get_default_group()
    full = full_tensors()
    model = collections.OrderedDict()
    ostate = collections.OrderedDict()
    for fqn, _ in PARAMS:
        model[fqn] = _create_chunk_sharded_tensor(full[fqn]["param"], rank, world, 1, pg).cpu()
    fqn, shape = EXTRA_2D
    boxes = blocks_2d(shape, world)
    o, s = boxes[rank]
    local = full[fqn]["param"][o[0]:o[0] + s[0], o[1]:o[1] + s[1]].clone()
    model[fqn] = init_from_local_shards(
        [Shard(local, ShardMetadata(list(o), list(s), f"rank:{rank}/cpu"))], *shape)
    for fqn, _ in PARAMS + [EXTRA_2D]:
        st = {"step": torch.tensor(3.0)}
        for k in ("exp_avg", "exp_avg_sq"):
            if fqn == EXTRA_2D[0]:
                o, s = boxes[rank]
                loc = full[fqn][k][o[0]:o[0] + s[0], o[1]:o[1] + s[1]].clone()
                st[k] = init_from_local_shards(
                    [Shard(loc, ShardMetadata(list(o), list(s), f"rank:{rank}/cpu"))],
                    *EXTRA_2D[1])
            else:
                st[k] = _create_chunk_sharded_tensor(full[fqn][k], rank, world, 1, pg)
        ostate[fqn] = st
    group = dict(PARAM_GROUP)
    group["params"] = [fqn for fqn, _ in PARAMS + [EXTRA_2D]]
    sd = collections.OrderedDict([("model", model),
                                  ("optim", {"state": ostate, "param_groups": [group]})])
    sd.update(trainer_state(rank, world))
    torch.save(sd, os.path.join(ckpt_dir, f"rank{rank}.pt"))


def run_ranks(world, ckpt_dir, timeout):
    os.makedirs(ckpt_dir, exist_ok=True)
    torchranks.run(_worker, world, args=(ckpt_dir,), timeout=timeout)


def expected_parts(world):
    full = full_tensors()
    model = {fqn: v["param"].clone() for fqn, v in full.items()}
    state = {fqn: {"step": torch.tensor(3.0), "exp_avg": v["exp_avg"].clone(),
                   "exp_avg_sq": v["exp_avg_sq"].clone()} for fqn, v in full.items()}
    group = dict(PARAM_GROUP)
    group["params"] = [fqn for fqn, _ in PARAMS + [EXTRA_2D]]
    optim = {"state": state, "param_groups": [group]}
    train = trainer_state(0, world)
    del train["rng"]
    train = dict(train)
    return model, optim, train


# --------------------------------------------------------------------------
# Independent re-implementation of OLMo's legacy unshard, for verification

@contextlib.contextmanager
def _sharded_tensor_unpickle_without_pg():
    orig = torch._tensor._rebuild_from_type_v2

    def rebuild(func, new_type, args, state):
        ret = func(*args)
        if type(ret) is not new_type:
            ret = ret.as_subclass(new_type)
        if isinstance(ret, ShardedTensor):
            ret._local_shards, ret._metadata, _, ret._sharding_spec, ret._init_rrefs = state
            return ret
        return orig(func, new_type, args, state)
    torch._tensor._rebuild_from_type_v2 = rebuild
    try:
        yield
    finally:
        torch._tensor._rebuild_from_type_v2 = orig


def _gather(sts):
    md = sts[0].metadata()
    for rank, smd in enumerate(md.shards_metadata):
        assert smd.placement.rank() == rank, (rank, str(smd.placement))
    for st in sts:
        assert [(m.shard_offsets, m.shard_sizes, m.placement.rank())
                for m in st.metadata().shards_metadata] == \
               [(m.shard_offsets, m.shard_sizes, m.placement.rank()) for m in md.shards_metadata]
    out = torch.full(tuple(md.size), float("nan"), dtype=md.tensor_properties.dtype)
    seen = torch.zeros(tuple(md.size), dtype=torch.bool)
    for rank, st in enumerate(sts):
        for sh in st.local_shards():
            assert sh.metadata.placement.rank() == rank
            view, sv = out, seen
            for d, (o, s) in enumerate(zip(sh.metadata.shard_offsets, sh.metadata.shard_sizes)):
                view, sv = view.narrow(d, o, s), sv.narrow(d, o, s)
            assert not sv.any(), "overlapping shards"
            view.copy_(sh.tensor)
            sv.fill_(True)
    assert seen.all(), "shards do not cover the tensor"
    return out


def _unshard(objs):
    a = objs[0]
    assert all(type(o) is type(a) for o in objs)
    if isinstance(a, ShardedTensor):
        return _gather(objs)
    if isinstance(a, dict):
        assert all(list(o.keys()) == list(a.keys()) for o in objs)
        return {k: _unshard([o[k] for o in objs]) for k in a}
    if isinstance(a, (list, tuple)):
        assert all(len(o) == len(a) for o in objs)
        return type(a)(_unshard(list(x)) for x in zip(*objs))
    if torch.is_tensor(a):
        assert all(torch.equal(o, a) for o in objs)
        return a
    assert all(o == a for o in objs), a
    return a


def verify(ckpt_dir, expected_dir, world):
    with _sharded_tensor_unpickle_without_pg():
        shards = [torch.load(os.path.join(ckpt_dir, f"rank{r}.pt"), map_location="cpu")
                  for r in range(world)]
    for s in shards:
        s.pop("rng", None)
    full = _unshard(shards)
    parts = {"model": full.pop("model"), "optim": full.pop("optim"), "train": full}
    n = 0
    for name, got in parts.items():
        want = torch.load(os.path.join(expected_dir, f"{name}.pt"))
        r = compare(got, want)
        if not r.ok:
            raise AssertionError(f"OLMo-style unshard differs from expected/{name}.pt at "
                                 f"{r.path}: {r.msg}")
        n += r.tensors
    return n


def manifest(world, ckpt_dir):
    with _sharded_tensor_unpickle_without_pg():
        sd = torch.load(os.path.join(ckpt_dir, "rank0.pt"), map_location="cpu")
    keys = collections.OrderedDict()

    def walk(x, path):
        if isinstance(x, ShardedTensor):
            md = x.metadata()
            keys[path] = {"shape": list(md.size),
                          "dtype": str(md.tensor_properties.dtype).replace("torch.", ""),
                          "shards": [[m.placement.rank(), list(m.shard_offsets),
                                      list(m.shard_sizes), str(m.placement)]
                                     for m in md.shards_metadata]}
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k))
    walk(sd, "")
    return {"generator": "tests/support/make_olmo_legacy.py", "torch": torch.__version__,
            "python": sys.version.split()[0], "world_size": world,
            "files": [f"rank{r}.pt" for r in range(world)],
            "top_level_keys": list(sd.keys()), "sharded_tensors": keys}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args(argv)
    if not 2 <= args.ranks <= 4:
        ap.error("--ranks must be 2..4")
    t0 = time.monotonic()
    torch.set_num_threads(1)
    out = os.path.abspath(args.outdir)
    ckpt = os.path.join(out, "ckpt")
    if os.path.exists(ckpt):
        sys.exit(f"make_olmo_legacy: {ckpt} already exists")
    os.makedirs(out, exist_ok=True)
    run_ranks(args.ranks, ckpt, args.timeout)
    with open(os.path.join(ckpt, "config.yaml"), "w") as f:
        f.write("run_name: olmo-legacy-tiny\nsave_folder: /runs/olmo-legacy-tiny\n"
                "sharded_checkpointer: torch_legacy\n"
                "wandb:\n  entity: ckpt-tests\n  project: olmo-legacy-tiny\n")
    exp = os.path.join(out, "expected")
    os.makedirs(exp, exist_ok=True)
    model, optim, train = expected_parts(args.ranks)
    torch.save(model, os.path.join(exp, "model.pt"))
    torch.save(optim, os.path.join(exp, "optim.pt"))
    torch.save(train, os.path.join(exp, "train.pt"))
    shutil.copyfile(os.path.join(ckpt, "config.yaml"), os.path.join(exp, "config.yaml"))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest(args.ranks, ckpt), f, indent=1)
        f.write("\n")
    msg = ""
    if not args.no_verify:
        n = verify(ckpt, exp, args.ranks)
        msg = f", verified by an OLMo-style unshard ({n} tensors)"
    print(f"make_olmo_legacy: {args.ranks} ranks -> {ckpt}{msg} "
          f"({time.monotonic() - t0:.1f}s)")


if __name__ == "__main__":
    main()
