#!/usr/bin/python3
"""gen_olmo_legacy_big.py: a large OLMo torch_legacy step for benchmarks.

    /usr/bin/python3 bench/gen_olmo_legacy_big.py OUTDIR [--ranks 64] [--size-mb 2048]

Writes OUTDIR/rank{R}.pt (+ config.yaml) in one process, without a process
group: each ShardedTensor is pickled with exactly the reduce tuple that
ShardedTensor.__reduce_ex__ produces (torch._tensor._rebuild_from_type_v2,
local Shards, ShardedTensorMetadata with every rank's ShardMetadata,
ProcessGroupState), so the files have the layout of the real ones that
tests/support/make_olmo_legacy.py writes with torch 1.13 FSDP helpers.
Model: square fp32 matrices chunked along dim 0 across ranks (FSDP's
tensor.chunk), optimizer exp_avg / exp_avg_sq the same, 0-d step tensors,
param_groups, trainer state with pathlib paths and per-rank rng. About
size-mb MiB in all (3 x the model).
"""
import argparse
import os
import pathlib
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "support"))
import torchshim  # noqa: E402,F401
import torch  # noqa: E402
from torch.distributed._shard.metadata import ShardMetadata  # noqa: E402
from torch.distributed._shard.sharded_tensor import (  # noqa: E402
    Shard, ShardedTensor)
from torch.distributed._shard.sharded_tensor.metadata import (  # noqa: E402
    ShardedTensorMetadata, TensorProperties)


class FakeST:
    """Pickles like a ShardedTensor owned by `rank` of `world`."""

    def __init__(self, shape, rank, world, local, smeta):
        self.shape, self.rank, self.world = shape, rank, world
        self.local, self.smeta = local, smeta

    def __reduce_ex__(self, proto):
        md = ShardedTensorMetadata(self.smeta, torch.Size(self.shape),
                                   TensorProperties(dtype=torch.float32))
        pg = ShardedTensor.ProcessGroupState(self.rank, self.rank,
                                             self.world, self.world)
        stride = torch.empty(self.shape, device="meta").stride()
        args = (ShardedTensor, torch.float32, torch.Size(self.shape), stride,
                0, torch.strided, torch.device("cpu"), False)
        return (torch._tensor._rebuild_from_type_v2,
                (torch._utils._rebuild_wrapper_subclass, ShardedTensor, args,
                 (self.local, md, pg, None, False)))


def chunks(rows, world):
    """FSDP's tensor.chunk(world) along dim 0: (offset, size) per rank."""
    step = -(-rows // world)
    out = []
    for r in range(world):
        o = min(r * step, rows)
        out.append((o, max(0, min(step, rows - o))))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--size-mb", type=int, default=2048)
    a = ap.parse_args()
    world, dim = a.ranks, 2048
    nparams = max(1, a.size_mb // 3 // 16)        # 16 MiB per matrix
    os.makedirs(a.outdir, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    fqns = ["transformer.blocks.%d.ff_proj.weight" % i for i in range(nparams)]
    full = {f: {k: torch.randn(dim, dim, generator=g)
                for k in ("param", "exp_avg", "exp_avg_sq")} for f in fqns}
    ch = chunks(dim, world)
    smeta = [ShardMetadata([o, 0], [s, dim], "rank:%d/cpu" % r)
             for r, (o, s) in enumerate(ch) if s]
    run = pathlib.PosixPath("/runs/bench")
    for r in range(world):
        o, s = ch[r]

        def st(t):
            local = [Shard(t[o:o + s].clone(), smeta[r])] if s else []
            return FakeST((dim, dim), r, world, local, smeta)
        sd = {
            "model": {f: st(full[f]["param"]) for f in fqns},
            "optim": {
                "state": {f: {"step": torch.tensor(3.0),
                              "exp_avg": st(full[f]["exp_avg"]),
                              "exp_avg_sq": st(full[f]["exp_avg_sq"])}
                          for f in fqns},
                "param_groups": [{"lr": 4e-4, "betas": (0.9, 0.95),
                                  "eps": 1e-5, "weight_decay": 0.1,
                                  "params": fqns}],
            },
            "epoch": 1, "global_step": 3, "world_size": world,
            "checkpoints": [run / "step3"],
            "rng": {"torch": torch.Generator().manual_seed(r).get_state()},
        }
        torch.save(sd, os.path.join(a.outdir, "rank%d.pt" % r))
    with open(os.path.join(a.outdir, "config.yaml"), "w") as f:
        f.write("sharded_checkpointer: torch_legacy\n")
    print("gen_olmo_legacy_big: %d ranks, %d params -> %s"
          % (world, nparams, a.outdir))


if __name__ == "__main__":
    main()
