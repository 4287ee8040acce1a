#!/usr/bin/python3
"""torch_unshard_legacy.py: OLMo's own way to unshard a torch_legacy step
(olmo/checkpoint.py TorchLegacyShardedCheckpointer.unshard_checkpoint),
for comparison: load every rank file into memory (ShardedTensors rebuilt
without a process group), gather each ShardedTensor into a full tensor,
check plain values agree, drop rng, torch.save model/optim/train.pt.
The gather/unshard code is tests/support/make_olmo_legacy.py's
independent reimplementation of OLMo's algorithm.

    /usr/bin/python3 bench/torch_unshard_legacy.py STEP_DIR OUT_DIR
"""
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "support"))
import make_olmo_legacy as m  # noqa: E402
import torch  # noqa: E402


def main():
    src, out = sys.argv[1], sys.argv[2]
    world = len(glob.glob(os.path.join(src, "rank*.pt")))
    with m._sharded_tensor_unpickle_without_pg():
        shards = [torch.load(os.path.join(src, "rank%d.pt" % r),
                             map_location="cpu") for r in range(world)]
    for s in shards:
        s.pop("rng", None)
    full = m._unshard(shards)
    os.makedirs(out, exist_ok=True)
    torch.save(full.pop("model"), os.path.join(out, "model.pt"))
    torch.save(full.pop("optim"), os.path.join(out, "optim.pt"))
    torch.save(full, os.path.join(out, "train.pt"))


if __name__ == "__main__":
    main()
