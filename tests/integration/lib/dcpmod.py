"""dcpmod.py: edit torch 1.13 DCP checkpoints for the unshard tests.

Not a test itself (no main). Loads .metadata with torch 1.13's own
classes (through tests/support/torchshim.py), and rewrites items: every
helper writes new bytes into a new data file and points the metadata at it,
so the checkpoint stays valid except for the defect a test wants.
"""
import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile

SRC = os.environ.get("CKPT_SRC", os.getcwd())
sys.path.insert(0, os.path.join(SRC, "tests", "support"))
import torchshim  # noqa: E402,F401
import torch  # noqa: E402,F401
import torch.distributed._shard.checkpoint as dcp  # noqa: E402,F401


def load_meta(d):
    with open(os.path.join(d, ".metadata"), "rb") as f:
        return pickle.load(f)


def save_meta(d, m, name=".metadata"):
    with open(os.path.join(d, name), "wb") as f:
        pickle.dump(m, f)


def item_bytes(d, info):
    with open(os.path.join(d, info.relative_path), "rb") as f:
        f.seek(info.offset)
        return f.read(info.length)


def put_item(d, info, data, name):
    """Store data as a new file `name` and point info at it."""
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    info.relative_path = name
    info.offset = 0
    info.length = len(data)


def find(m, fqn, offsets=None):
    """(MetadataIndex, _StorageInfo) of fqn's chunk at offsets (or the
    byte item)."""
    for k, v in m.storage_data.items():
        if k.fqn == fqn and (offsets is None or
                             tuple(k.offset) == tuple(offsets)):
            return k, v
    raise KeyError(fqn)


def zip_records(data):
    """{name: bytes} of a torch.save zip, in order."""
    z = zipfile.ZipFile(io.BytesIO(data))
    return {n: z.read(n) for n in z.namelist()}


def make_zip(records):
    """A torch.save-like zip (stored) from {name: bytes}."""
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED) as z:
        for n, v in records.items():
            z.writestr(n, v)
    return b.getvalue()


def zstd(data, frames=1):
    """zstd CLI from a pipe: no content size in the frame header, like
    torch's writer; frames > 1 concatenates independently compressed
    pieces."""
    out = b""
    step = (len(data) + frames - 1) // frames
    for i in range(frames):
        out += subprocess.run(["zstd", "-q", "-c"], input=data[i * step:
                              (i + 1) * step], capture_output=True,
                              check=True).stdout
    return out


def byteswap_item(data, itemsize):
    """Rewrite a tensor item as a big-endian writer would have saved it:
    storage bytes swapped per element, byteorder record 'big'."""
    recs = zip_records(data)
    prefix = next(iter(recs)).split("/")[0]
    out = {}
    for n, v in recs.items():
        if n.startswith(prefix + "/data/"):
            v = b"".join(v[i:i + itemsize][::-1]
                         for i in range(0, len(v), itemsize))
        out[n] = v
    out[prefix + "/byteorder"] = b"big"
    return make_zip(out)


__all__ = ["load_meta", "save_meta", "item_bytes", "put_item", "find",
           "zip_records", "make_zip", "zstd", "byteswap_item", "struct",
           "pickle"]
