#!/usr/bin/python3
"""make_olmo_legacy_many.py: an OLMo `torch_legacy` sharded checkpoint of
many ranks (1,024 by default), the rank files byte-for-byte what
make_olmo_legacy.py's real gloo ranks write, but written in ONE process.

    /usr/bin/python3 tests/support/make_olmo_legacy_many.py OUTDIR [--ranks N] [--verify]

Starting 1,024 gloo ranks takes about 37 minutes, so each rank's state is
built here, rank after rank, by the same code make_olmo_legacy.py's
_worker runs (_create_chunk_sharded_tensor, ShardedTensor.cpu(),
init_from_local_shards, torch.save), inside a world-size-1 gloo group
with torch.distributed's get_rank / get_world_size answering "rank R of N"
(torch.distributed and torch.distributed.distributed_c10d, which torch's
sharded-tensor code calls). What that changes against N real processes:
  * nothing in the files: ShardedTensor.__getstate__ pickles
    (local shards, global metadata, ProcessGroupState(R, R, N, N),
    sharding spec, init_rrefs), and every one of those is computed by
    torch from the patched rank and world size;
  * init_from_local_shards (the 2-D block-sharded tensor) would
    all_gather_object every rank's local ShardedTensorMetadata; here each
    rank's local metadata is built by torch's build_metadata_from_local_shards
    under that rank, sent through pickle (as all_gather_object does), and
    the gathered list handed to torch's own code (built once per tensor
    and shared by the ranks: torch reads it, never writes it). Only used
    at 2..4 ranks, see below.
With --ranks 2..4 the output is make_olmo_legacy.py's, 2-D block-sharded
tensor included; tests/integration/unshard_many_ranks.py checks that
--ranks 4 gives the same bytes as 4 real ranks. With more ranks,
"transformer.extra_2d.weight" is (64, 48) and FSDP chunk-sharded like the
other parameters: a block-sharded tensor must have one block per rank
(shards_metadata[i] on rank i), and pickling 1,024-entry metadata into
every one of 1,024 files, after torch's O(n^2) overlap check per rank,
took 480 s and 453 MB. All tensors have at most 64 rows, so ranks 64 and
up hold no shard of anything (no local shards and no metadata entry, as
_create_chunk_sharded_tensor leaves them). The 1,024-rank files are not
compared with a real 1,024-rank run (that is the ~37 minutes avoided); the
byte identity at 4 ranks, where every code path above runs, stands for it.
1,024 ranks: ~25 s on an idle core, 145 MB.

Writes OUTDIR/ckpt/rank{R}.pt and config.yaml, OUTDIR/expected/{model,optim,
train}.pt and config.yaml exactly as make_olmo_legacy.py documents (no
manifest.json). --verify runs make_olmo_legacy.py's OLMo-style unshard over
all rank files against expected/ (slow at 1,024 ranks).
"""
import argparse
import contextlib
import os
import pickle
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import distributed_c10d  # noqa: E402
from torch.distributed._shard.sharded_tensor import (  # noqa: E402
    Shard, ShardMetadata, init_from_local_shards)
from torch.distributed._shard.sharded_tensor.utils import (  # noqa: E402
    build_metadata_from_local_shards)

import make_olmo_legacy as leg  # noqa: E402


class Ranks:
    """torch.distributed's rank and world size, as rank R of N sees them."""

    def __init__(self, world):
        self.world, self.rank, self.gathered = world, 0, None

    def get_rank(self, group=None):
        return self.rank

    def get_world_size(self, group=None):
        return self.world

    def all_gather_object(self, out, obj, group=None):
        out[:] = self.gathered     # what every rank sent, in rank order

    @contextlib.contextmanager
    def patched(self):
        names = ("get_rank", "get_world_size", "all_gather_object")
        saved = [(m, n, getattr(m, n)) for m in (dist, distributed_c10d) for n in names]
        for m, n, _ in saved:
            setattr(m, n, getattr(self, n))
        try:
            yield self
        finally:
            for m, n, f in saved:
                setattr(m, n, f)


def block_local(full, box, rank):
    o, s = box
    loc = full[o[0]:o[0] + s[0], o[1]:o[1] + s[1]].clone()
    return [Shard(loc, ShardMetadata(list(o), list(s), f"rank:{rank}/cpu"))]


def gathered_2d(ranks, full, boxes, shape, pg):
    """Every rank's local metadata for the 2-D tensor, as all_gather_object
    delivers it (pickled and loaded)."""
    out = []
    for r, box in enumerate(boxes):
        ranks.rank = r
        md = build_metadata_from_local_shards(block_local(full, box, r), torch.Size(shape),
                                              r, pg)
        out.append(pickle.loads(pickle.dumps(md)))
    return out


def write_ranks(world, ckpt_dir):
    """make_olmo_legacy._worker for every rank, in this process."""
    full = leg.full_tensors()
    fqn2d, shape = leg.EXTRA_2D
    blocks = world <= 4    # else chunk-sharded like the others (see docstring)
    boxes = leg.blocks_2d(shape, world) if blocks else None
    ranks = Ranks(world)
    pg = dist.distributed_c10d._get_default_group()
    with ranks.patched():
        gathered = {k: gathered_2d(ranks, full[fqn2d][k], boxes, shape, pg)
                    for k in ("param", "exp_avg", "exp_avg_sq")} if blocks else {}
        for rank in range(world):
            ranks.rank = rank

            def block(k):
                ranks.gathered = gathered[k]
                return init_from_local_shards(block_local(full[fqn2d][k], boxes[rank], rank),
                                              *shape)
            model = leg.collections.OrderedDict()
            ostate = leg.collections.OrderedDict()
            chunked = leg.PARAMS if blocks else leg.PARAMS + [leg.EXTRA_2D]
            for fqn, _ in chunked:
                model[fqn] = leg._create_chunk_sharded_tensor(
                    full[fqn]["param"], rank, world, 1, pg).cpu()
            if blocks:
                model[fqn2d] = block("param")
            for fqn, _ in leg.PARAMS + [leg.EXTRA_2D]:
                st = {"step": torch.tensor(3.0)}
                for k in ("exp_avg", "exp_avg_sq"):
                    if blocks and fqn == fqn2d:
                        st[k] = block(k)
                    else:
                        st[k] = leg._create_chunk_sharded_tensor(full[fqn][k], rank, world,
                                                                 1, pg)
                ostate[fqn] = st
            group = dict(leg.PARAM_GROUP)
            group["params"] = [fqn for fqn, _ in leg.PARAMS + [leg.EXTRA_2D]]
            sd = leg.collections.OrderedDict(
                [("model", model), ("optim", {"state": ostate, "param_groups": [group]})])
            sd.update(leg.trainer_state(rank, world))
            torch.save(sd, os.path.join(ckpt_dir, f"rank{rank}.pt"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args(argv)
    if args.ranks < 2:
        ap.error("--ranks must be at least 2")
    if args.ranks > 4:
        leg.EXTRA_2D = (leg.EXTRA_2D[0], (64, 48))
    t0 = time.monotonic()
    torch.set_num_threads(1)
    out = os.path.abspath(args.outdir)
    ckpt = os.path.join(out, "ckpt")
    if os.path.exists(ckpt):
        sys.exit(f"make_olmo_legacy_many: {ckpt} already exists")
    os.makedirs(ckpt)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        write_ranks(args.ranks, ckpt)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(ckpt, "config.yaml"), "w") as f:
        f.write("run_name: olmo-legacy-tiny\nsave_folder: /runs/olmo-legacy-tiny\n"
                "sharded_checkpointer: torch_legacy\n"
                "wandb:\n  entity: ckpt-tests\n  project: olmo-legacy-tiny\n")
    exp = os.path.join(out, "expected")
    os.makedirs(exp, exist_ok=True)
    model, optim, train = leg.expected_parts(args.ranks)
    torch.save(model, os.path.join(exp, "model.pt"))
    torch.save(optim, os.path.join(exp, "optim.pt"))
    torch.save(train, os.path.join(exp, "train.pt"))
    shutil.copyfile(os.path.join(ckpt, "config.yaml"), os.path.join(exp, "config.yaml"))
    msg = ""
    if args.verify:
        n = leg.verify(ckpt, exp, args.ranks)
        msg = f", verified by an OLMo-style unshard ({n} tensors)"
    print(f"make_olmo_legacy_many: {args.ranks} ranks -> {ckpt}{msg} "
          f"({time.monotonic() - t0:.1f}s)")


if __name__ == "__main__":
    main()
