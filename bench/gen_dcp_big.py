#!/usr/bin/python3
"""gen_dcp_big.py: a large torch 1.13 DCP checkpoint for benchmarks.

    /usr/bin/python3 bench/gen_dcp_big.py OUTDIR --size-mb N [--ranks 8]

~300 tensors (bf16 and fp32) totalling N MiB, mixed sharding (rows,
columns, 2-D grids, several shards per rank, replicated plain tensors,
uneven rows), written by --ranks real processes (gloo on 127.0.0.1,
ShardedTensor via init_from_local_shards, save_state_dict with
single_file_per_rank=True). Unlike tests/support/make_dcp.py --case big,
each rank only ever materialises its own shards (seeded per shard), so an
8-rank multi-GB checkpoint fits in memory on a small machine.
"""
import argparse
import os
import random
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "support"))
import torchshim  # noqa: E402,F401
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed._shard.sharded_tensor import (  # noqa: E402
    Shard, ShardMetadata, init_from_local_shards)
import torch.distributed._shard.checkpoint as dcp  # noqa: E402

SEED = 4242


def split(n, k):
    q, r = divmod(n, k)
    return [q + (1 if i < r else 0) for i in range(k)]


def boxes(kind, rows, cols, world):
    """[(rank, offsets, sizes)] tiling rows x cols."""
    out = []
    if kind in ("row", "uneven", "rr"):
        k = 2 * world if kind == "rr" else world
        sizes = split(rows, k)
        if kind == "uneven":
            sizes = sizes[::-1]
        o = 0
        for i, s in enumerate(sizes):
            out.append((i % world, (o, 0), (s, cols)))
            o += s
    elif kind == "col":
        o = 0
        for i, s in enumerate(split(cols, world)):
            out.append((i, (0, o), (rows, s)))
            o += s
    else:  # grid
        a = 2 if world % 2 == 0 else 1
        b = world // a
        ro = 0
        for x, rs in enumerate(split(rows, a)):
            co = 0
            for y, cs in enumerate(split(cols, b)):
                out.append(((x * b + y) % world, (ro, co), (rs, cs)))
                co += cs
            ro += rs
    return out


def plan(size_mb, world):
    rng = random.Random(SEED)
    n = 300
    w = [rng.uniform(0.2, 2.0) for _ in range(n)]
    scale = size_mb * 2**20 / sum(w)
    kinds = ["row", "col", "grid", "rr", "rep", "uneven"]
    specs = []
    for i in range(n):
        dt = torch.bfloat16 if i % 2 == 0 else torch.float32
        cols = rng.choice([256, 512, 1024, 2048])
        rows = max(world * 2, int(w[i] * scale) // (cols * (2 if dt == torch.bfloat16 else 4)))
        specs.append((f"layers.{i // 6}.{kinds[i % 6]}_{i}", dt, rows, cols,
                      kinds[i % 6]))
    return specs


def fill(shape, dt, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dt)


def worker(rank, world, out, size_mb, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sd = {}
    for i, (fqn, dt, rows, cols, kind) in enumerate(plan(size_mb, world)):
        if kind == "rep":
            sd[fqn] = fill((rows, cols), dt, SEED + i)
            continue
        bx = boxes(kind, rows, cols, world)
        md = [ShardMetadata(list(o), list(s), f"rank:{r}/cpu")
              for r, o, s in bx]
        local = [Shard(fill(s, dt, SEED * 7 + i * 1000 + j), md[j])
                 for j, (r, o, s) in enumerate(bx) if r == rank]
        sd[fqn] = init_from_local_shards(local, [rows, cols])
    sd["step"] = 1000
    sd["config"] = {"lr": 1e-4, "name": "bench"}
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out,
                                                 single_file_per_rank=True))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size-mb", type=int, required=True)
    ap.add_argument("--ranks", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    torch.set_num_threads(1)
    mp.start_processes(worker, args=(a.ranks, a.out, a.size_mb, port),
                       nprocs=a.ranks, start_method="fork")


if __name__ == "__main__":
    main()
