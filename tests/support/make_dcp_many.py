#!/usr/bin/python3
"""make_dcp_many.py: a REAL torch 1.13 DCP checkpoint of many ranks (1,024
by default), written by torch's own DCP code in ONE process.

    /usr/bin/python3 tests/support/make_dcp_many.py OUTDIR [--ranks N]

Starting 1,024 gloo ranks takes far too long for a test, so this runs what
save_state_dict runs on every rank, rank by rank, in one process: a local
SavePlan per rank (ShardedTensor shards as SHARD write items, built with
torch's own planner_helpers), the coordinator's
create_default_global_save_plan, FileSystemWriter.prepare_global_plan
(the __R_ prefixes), write_data of each rank's plan through a
DefaultSavePlanner that resolves the rank's local chunk, and
FileSystemWriter.finish. The files are byte-for-byte what N real ranks
would write (single_file_per_rank=True: one __R_0.distcp per rank).

Writes OUTDIR/ckpt/ (.metadata + __R_0.distcp) and OUTDIR/expected.pt:
{"w": [2N, 3] float32 split by rows, "u": [3, N] bfloat16 split by
columns, "bias": a plain tensor of the coordinator, "step": 7}.
"""
import argparse
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchshim  # noqa: F401,E402  (before torch)
import torch  # noqa: E402
from torch.distributed._shard.checkpoint import FileSystemWriter  # noqa
from torch.distributed._shard.checkpoint.default_planner import (  # noqa
    DefaultSavePlanner, create_default_global_save_plan)
from torch.distributed._shard.checkpoint.metadata import (  # noqa: E402
    ChunkStorageMetadata, MetadataIndex)
from torch.distributed._shard.checkpoint.planner import (  # noqa: E402
    SavePlan, TensorWriteData, WriteItem, WriteItemType)
from torch.distributed._shard.checkpoint.planner_helpers import (  # noqa
    _create_write_item_for_bytesio, _create_write_item_for_tensor)
from torch.distributed._shard.sharded_tensor.metadata import (  # noqa
    TensorProperties)


class RankPlanner(DefaultSavePlanner):
    """DefaultSavePlanner of one rank: its chunks by index."""

    def __init__(self, objects):
        super().__init__()
        self.objects = objects

    def lookup_object(self, index):
        return self.objects[(index.fqn, tuple(index.offset or ()))]


def shard_item(fqn, full, offsets, sizes):
    return WriteItem(
        index=MetadataIndex(fqn, torch.Size(offsets)),
        type=WriteItemType.SHARD,
        tensor_data=TensorWriteData(
            chunk=ChunkStorageMetadata(offsets=torch.Size(offsets),
                                       sizes=torch.Size(sizes)),
            properties=TensorProperties.create_from_tensor(full),
            size=full.size()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--ranks", type=int, default=1024)
    a = ap.parse_args()
    n = a.ranks
    g = torch.Generator().manual_seed(5)
    w = torch.randn(2 * n, 3, generator=g)
    u = torch.randn(3, n, generator=g).to(torch.bfloat16)
    bias = torch.arange(5, dtype=torch.float64)
    path = os.path.join(a.outdir, "ckpt")
    os.makedirs(path)
    writer = FileSystemWriter(path, single_file_per_rank=True)
    writer.init(True)
    plans, planners = [], []
    for r in range(n):
        objs = {("w", (2 * r, 0)): w[2 * r:2 * r + 2].clone(),
                ("u", (0, r)): u[:, r:r + 1].clone()}
        items = [shard_item("w", w, [2 * r, 0], [2, 3]),
                 shard_item("u", u, [0, r], [3, 1])]
        if r == 0:      # the coordinator writes plain tensors and bytes
            items.append(_create_write_item_for_tensor("bias", bias))
            objs[("bias", (0,))] = bias
            buf = io.BytesIO()
            torch.save(7, buf)
            items.append(_create_write_item_for_bytesio("step", buf))
            objs[("step", ())] = 7
        p = RankPlanner(objs)
        p.init({}, r == 0)
        planners.append(p)
        plans.append(writer.prepare_local_plan(SavePlan(items)))
    global_plan, metadata = create_default_global_save_plan(plans)
    global_plan = writer.prepare_global_plan(global_plan)
    results = []
    for r in range(n):
        plan = planners[r].finish_plan(global_plan[r])
        results.append(writer.write_data(plan, planners[r]).wait())
    writer.finish(metadata, results)
    torch.save({"w": w, "u": u, "bias": bias, "step": 7},
               os.path.join(a.outdir, "expected.pt"))


if __name__ == "__main__":
    main()
