#!/usr/bin/python3
"""make_zarr.py: write a zarr v2 pytree checkpoint the way seqax's
training_io.py does (one array per leaf at its keypath, chunks = shards,
root attribute write_completed), with Debian's python3-zarr and
python3-numcodecs, plus the expected unsharded state dict.

    /usr/bin/python3 tests/support/make_zarr.py OUTDIR [--incomplete]

Writes OUTDIR/ckpt/ (the zarr group) and OUTDIR/expected.pt
({array path: full tensor}, written with torch 1.13). Arrays cover: edge
chunks (shape not a multiple of chunks), C and F order, big-endian
dtype, a 0-d array, chunks never written (fill_value), bitshuffle,
zstd and uncompressed arrays, dot- and bracket-named leaves.
--incomplete leaves out the write_completed attribute.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import numcodecs  # noqa: E402
import zarr  # noqa: E402


def build(root):
    rng = np.random.default_rng(7)
    out = {}

    def arr(name, data, chunks, **kw):
        a = root.create_dataset(name, shape=data.shape, chunks=chunks,
                                dtype=data.dtype, **kw)
        a[...] = data
        out[name] = data

    lz4 = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1)
    arr(".params.w", rng.standard_normal((10, 7)).astype("<f4"), (4, 3),
        compressor=lz4)
    arr(".params.b", rng.standard_normal((300,)).astype("<f4"), (128,),
        compressor=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2))
    arr("['opt'].mu", rng.standard_normal((5, 6)), (2, 4), order="F",
        compressor=numcodecs.Blosc(cname="blosclz", shuffle=0))
    arr("step", np.array(1234, dtype="<i4"), (), compressor=lz4)
    arr("emb", np.arange(9, dtype=">i2") * 300, (4,), compressor=lz4)
    arr("tokens", rng.integers(0, 255, (33,)).astype("u1"), (8,),
        compressor=numcodecs.Zstd(level=1))
    arr("raw", rng.standard_normal((4, 4)).astype("<f8"), (3, 3),
        compressor=None)
    arr("mask", rng.integers(0, 2, (17,)).astype("?"), (5,), compressor=lz4)
    # Compressible, so its frames hold real lz4 blocks (tests corrupt them).
    arr("ramp", np.arange(4096, dtype="<f4"), (2048,), compressor=lz4)
    # Only one chunk of this one is written: the rest read as fill_value.
    a = root.create_dataset("sparse", shape=(6, 6), chunks=(3, 3),
                            dtype="<f4", fill_value=1.5, compressor=lz4)
    a[0:3, 3:6] = np.arange(9, dtype="<f4").reshape(3, 3)
    out["sparse"] = a[...]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--incomplete", action="store_true")
    ap.add_argument("--no-expected", action="store_true")
    a = ap.parse_args(argv)
    path = os.path.join(a.outdir, "ckpt")
    root = zarr.group(store=zarr.DirectoryStore(path), overwrite=True)
    data = build(root)
    if not a.incomplete:
        root.attrs["write_completed"] = True
    if a.no_expected:
        return
    import torchshim  # noqa: F401  (must precede torch)
    import torch
    exp = {}
    for k, v in data.items():
        v = v.astype(v.dtype.newbyteorder("="), order="C")
        exp[k] = torch.from_numpy(v.copy())
    torch.save(exp, os.path.join(a.outdir, "expected.pt"))
    print("make_zarr: %d arrays -> %s" % (len(data), path))


if __name__ == "__main__":
    main()
