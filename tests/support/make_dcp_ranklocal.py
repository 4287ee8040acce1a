#!/usr/bin/python3
"""make_dcp_ranklocal.py: rank-local DCP checkpoints written by torch 1.13,
each rank on its own, as torch >= 2.9 writes them with
dcp.save(use_collectives=False), plus the state dicts an unsharder must
produce from them.

    /usr/bin/python3 tests/support/make_dcp_ranklocal.py OUTDIR [--timeout S]

How: torchranks.py starts 3 ranks (fork, gloo on 127.0.0.1). Each builds
its state dict (its row shard of a ShardedTensor, and plain values) and
calls torch 1.13's own
torch.distributed._shard.checkpoint.save_state_dict(sd, writer,
no_dist=True): every rank plans alone, so its metadata lists only its own
chunks and every plain tensor and byte item it holds, nothing
deduplicated across ranks, exactly what use_collectives=False does. The
writer is torch 1.13's FileSystemWriter with two names changed to torch
2.9's rank-local ones: data files `__R_N.distcp` (1.13 names a lone plan
`__0_`), metadata `__R.metadata` instead of `.metadata`. Every byte, and
the metadata pickle, is torch 1.13's.

Writes (OUTDIR is created):
  agree/ckpt/     every rank saved the same plain values:
                  weight  ShardedTensor 6x4 float32, rows 2R..2R+1 on rank R
                  bias    float32 [4], the same tensor on every rank
                  step    int 100 on every rank (byte item)
                  loader  {"epoch": 3, "offset": 0} on every rank
  bytes/ckpt/     as agree, but loader's offset is 0, 10, 20 on ranks 0,
                  1, 2 (ranks 1 and 2 differ from rank 0)
  tensor/ckpt/    as agree plus rng: a uint8 [16] tensor, each rank its own
                  (torch.Generator seeded 7 + R), stored whole by every rank
  olmo/ckpt/      an OLMo torch_new step: model_and_optim/ holds the
                  rank-local save of model.weight (sharded), model.bias and
                  optim.step; train/rank{R}.pt torch.save'd by each rank
  CASE/expected.pt          {key: value} every rank agrees on; where ranks
                            differ, rank 0's (what --rank-values rank0
                            gives)
  CASE/expected_per_rank.pt where ranks differ, KEY.rank0, KEY.rank1,
                            KEY.rank2 instead of KEY (--rank-values
                            per-rank)
  olmo/expected.pt          {"model": {...}, "optim": {...}}
"""
import argparse
import dataclasses
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402
from torch.distributed._shard.sharded_tensor import (  # noqa: E402
    Shard, ShardMetadata, init_from_local_shards)
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
from torch.distributed._shard.checkpoint.filesystem import (  # noqa: E402
    _StoragePrefix)
import torchranks  # noqa: E402

WORLD = 3
CASES = ("agree", "bytes", "tensor", "olmo")


class RankLocalWriter(dcp.FileSystemWriter):
    """torch 1.13's FileSystemWriter under torch 2.9's rank-local names."""

    def __init__(self, path, rank):
        super().__init__(path)
        self.rank = rank

    def prepare_global_plan(self, global_plan):
        self.path.mkdir(parents=True, exist_ok=True)
        return [dataclasses.replace(p, storage_data=_StoragePrefix(
            f"__{self.rank}_")) for p in global_plan]

    def finish(self, metadata, results):
        storage_md = {}
        for wr_list in results:
            storage_md.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage_md
        with (self.path / f"__{self.rank}.metadata").open("wb") as f:
            pickle.dump(metadata, f)


def full_weight():
    return torch.arange(24, dtype=torch.float32).reshape(6, 4) / 8


def bias():
    return torch.tensor([0.5, -1.25, 3.0, float("inf")])


def rng(rank):
    g = torch.Generator().manual_seed(7 + rank)
    return torch.randint(0, 256, (16,), generator=g, dtype=torch.uint8)


def loader(case, rank):
    return {"epoch": 3, "offset": 10 * rank if case == "bytes" else 0}


def weight_shard(rank):
    rows = full_weight()[2 * rank:2 * rank + 2].clone()
    return init_from_local_shards(
        [Shard(rows, ShardMetadata([2 * rank, 0], [2, 4],
                                   f"rank:{rank}/cpu"))], 6, 4)


def state(case, rank):
    if case == "olmo":
        return {"model.weight": weight_shard(rank), "model.bias": bias(),
                "optim.step": 100}
    sd = {"weight": weight_shard(rank), "bias": bias(), "step": 100,
          "loader": loader(case, rank)}
    if case == "tensor":
        sd["rng"] = rng(rank)
    return sd


def worker(rank, world, out):
    for case in CASES:
        d = os.path.join(out, case, "ckpt")
        if case == "olmo":
            os.makedirs(os.path.join(d, "train"), exist_ok=True)
            torch.save({"rank": rank, "rng": rng(rank)},
                       os.path.join(d, "train", f"rank{rank}.pt"))
            d = os.path.join(d, "model_and_optim")
        dcp.save_state_dict(state(case, rank), RankLocalWriter(d, rank),
                            no_dist=True)


def expected(out):
    for case in CASES:
        d = os.path.join(out, case)
        if case == "olmo":
            torch.save({"model": {"weight": full_weight(), "bias": bias()},
                        "optim": {"step": 100}},
                       os.path.join(d, "expected.pt"))
            continue
        sd = {"weight": full_weight(), "bias": bias(), "step": 100,
              "loader": loader(case, 0)}
        differ = {}
        if case == "bytes":
            differ["loader"] = [loader(case, r) for r in range(WORLD)]
        if case == "tensor":
            sd["rng"] = rng(0)
            differ["rng"] = [rng(r) for r in range(WORLD)]
        torch.save(sd, os.path.join(d, "expected.pt"))
        for k, vals in differ.items():
            del sd[k]
            for r, v in enumerate(vals):
                sd[f"{k}.rank{r}"] = v
        torch.save(sd, os.path.join(d, "expected_per_rank.pt"))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args(argv)
    os.makedirs(a.outdir, exist_ok=True)
    torchranks.run(worker, WORLD, args=(a.outdir,), timeout=a.timeout,
                   what="rank-local saves")
    expected(a.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
