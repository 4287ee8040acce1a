#!/usr/bin/python3
"""torch_unshard.py: the torch 1.13 way to consolidate a DCP checkpoint,
for comparison: read .metadata, allocate every tensor at full size, load
with torch's own DCP reader (no process group), torch.save the result.

    /usr/bin/python3 bench/torch_unshard.py CKPT_DIR OUT.pt
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "support"))
import torchshim  # noqa: E402,F401
import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402


def main():
    src, out = sys.argv[1], sys.argv[2]
    reader = dcp.FileSystemReader(src)
    md = reader.read_metadata()
    target = {}
    for fqn, m in md.state_dict_metadata.items():
        if hasattr(m, "chunks"):
            target[fqn] = torch.empty(m.size, dtype=m.properties.dtype)
        else:
            target[fqn] = None
    dcp.load_state_dict(target, reader, no_dist=True)
    torch.save(target, out)


if __name__ == "__main__":
    main()
