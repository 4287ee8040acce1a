#!/usr/bin/python3
# ctest-cost: 120
# ctest-labels: slow
"""unshard_sink_chunks.py - `ckpt unshard SRC s3://…` of zarr and Orbax
arrays whose stored chunks are not whole rows (chunked along the last
dimension, 2-D and 3-D chunk grids, edge chunks partial in every
dimension, F order, big-endian, a chunk never written), to s3rver behind
the signing proxy.

Such a tensor goes to a remote DEST band by band, a band being one chunk
row decoded and laid out in memory, or, when a chunk row would not fit
--memory, decoded first into a scratch file in --tmp-dir (engine.c
uns_engine_remote_plan). Checked, for torch and safetensors outputs:
- local -> s3 and s3 -> s3 outputs, downloaded with aws-cli, are
  byte-identical to a local unshard of the same SRC (whose values
  check_unshard.py compares bit for bit with the zarr arrays themselves,
  read back through zarr-python), and torch.equal holds for one tensor
  loaded from the downloaded checkpoint.pt;
- --memory 16M sends the 12 MiB array whose chunk rows are the whole
  array through scratch (a --tmp-dir that cannot be created fails it,
  while with the default --memory the same run needs no scratch at all),
  with the same bytes; --verify and --threads 1 too;
- a corrupt chunk (either way): exit 1 naming it, no output, the marker
  left;
- Orbax OCDBT steps (zarr v2 and zarr3, big-endian) with grid and column
  chunks; the make_zarr.py group that a remote DEST used to refuse.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUP = os.path.join(HERE, "..", "support")
sys.path.insert(0, SUP)
from s3test import (BUILD, S3Env, digests, download, sh,  # noqa: E402
                    unshard)
import harness  # noqa: E402
from harness import check, compare, generate  # noqa: E402
import make_orbax  # noqa: E402

import numpy as np  # noqa: E402
import numcodecs  # noqa: E402
import torch  # noqa: E402
import zarr  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ck"

ckpt = unshard          # ckpt(env, ARGS...): `ckpt unshard ARGS`


def make_group(d):
    """A zarr v2 group (Debian's zarr-python) of arrays whose chunks are
    not whole rows, and expected.pt of the arrays as zarr reads them."""
    rng = np.random.default_rng(12)
    f = rng.standard_normal
    root = zarr.open_group(os.path.join(d, "ckpt"), mode="w")
    lz4 = numcodecs.Blosc(cname="lz4", clevel=1, shuffle=1)
    arrays = [
        # chunked along the last dimension, edge column chunk
        ("cols", f((64, 1000)).astype("<f4"), (64, 128), {}),
        # a 2-D grid, the last chunk partial in both dimensions
        ("grid_f16", f((300, 500)).astype("<f2"), (128, 192), {}),
        ("grid_i64", rng.integers(-2**62, 2**62, (10, 12)).astype("<i8"),
         (5, 6), {}),
        ("mask", rng.integers(0, 2, (33, 17)).astype("?"), (8, 5), {}),
        ("bf16", rng.integers(0, 65535, (40, 70)).astype("<u2"), (16, 32),
         {}),
        ("vec", f((1000,)).astype("<f4"), (300,), {}),
        # 3-D: chunk rows along dim 0; and along dim 1 (dim 0 one per chunk)
        ("cube", f((6, 20, 30)).astype("<f4"), (2, 8, 30), {}),
        ("cube1", f((4, 10, 12)).astype("<f8"), (1, 4, 5), {}),
        ("fgrid", f((50, 40)).astype("<f4"), (20, 16), {"order": "F"}),
        ("big_endian", rng.integers(-2**31, 2**31, (30, 50)).astype(">i4"),
         (30, 16), {}),
        # bands of 1 MiB of four chunks each
        ("wide", f((1024, 1024)).astype("<f4"), (256, 300), {}),
        # chunk rows = the whole 12 MiB array: scratch under --memory 16M
        ("tall", f((2048, 1536)).astype("<f4"), (2048, 256), {}),
    ]
    for name, a, chunks, kw in arrays:
        z = root.create_dataset(name, shape=a.shape, chunks=chunks,
                                dtype=a.dtype, compressor=lz4, **kw)
        z[...] = a
    sparse = root.create_dataset("sparse", shape=(12, 12), chunks=(6, 6),
                                 dtype="<f4", fill_value=2.5, compressor=lz4)
    sparse[6:12, 0:6] = f((6, 6)).astype("<f4")
    root.attrs["write_completed"] = True
    want = {}
    back = zarr.open_group(os.path.join(d, "ckpt"), mode="r")
    for name in [a[0] for a in arrays] + ["sparse"]:
        a = back[name][...]
        if name == "bf16":
            t = torch.from_numpy(a.view("<i2").copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.ascontiguousarray(a).astype(
                a.dtype.newbyteorder("<")))
        want[name] = t
    # bfloat16: the same 2-byte chunks, named so in .zarray.
    p = os.path.join(d, "ckpt", "bf16", ".zarray")
    with open(p) as fh:
        meta = json.load(fh)
    meta["dtype"] = "bfloat16"
    with open(p, "w") as fh:
        json.dump(meta, fh)
    torch.save(want, os.path.join(d, "expected.pt"))
    return back


def orbax_items():
    rng = np.random.default_rng(3)
    f = rng.standard_normal
    return [
        (("grid",), f((600, 500)).astype("<f4"), (256, 192), 0),
        # "i32": make_orbax writes this name big-endian in zarr3
        (("cols", "i32"), f((700, 400)).astype("<f8"), (700, 150), 0),
        (("small",), rng.integers(-9, 9, (9, 7)).astype("<i8"), (4, 3), 0),
        # chunk rows = the whole 9 MiB array: scratch under --memory 16M
        (("tall",), f((1536, 1536)).astype("<f4"), (1536, 400), 0),
    ]


def make_orbax_step(d):
    items = orbax_items()
    for v3 in (False, True):
        step = os.path.join(d, "v%d" % (3 if v3 else 2), "5")
        make_orbax.build_ocdbt(os.path.join(step, "state"), items, v3)
        make_orbax.step_meta(step, "state")


def objects(env, prefix):
    p = subprocess.run(["aws", "s3", "ls", "--recursive",
                        "s3://%s/%s" % (B, prefix)], env=env,
                       capture_output=True, text=True)
    return sorted(ln.split()[-1] for ln in p.stdout.splitlines())


class Case:
    def __init__(self, env, tmp):
        self.env, self.tmp = env, tmp

    def local(self, name, src, fmt, expected=None):
        loc = os.path.join(self.tmp, "loc", name + "-" + fmt)
        p = ckpt(self.env, "--format", fmt, src, loc)
        check("%s %s: local exit 0" % (name, fmt), p.returncode == 0,
              p.stderr)
        if expected:
            f = "checkpoint.pt" if fmt == "torch" else "model.safetensors"
            compare("%s %s: local values equal the zarr arrays" % (name, fmt),
                    os.path.join(loc, f), expected)
        return loc

    def remote(self, what, src, prefix, loc, *opts):
        """src unsharded to s3://B/prefix: the same bytes as loc."""
        p = ckpt(self.env, *opts, src, "s3://%s/%s" % (B, prefix))
        check(what + ": exit 0", p.returncode == 0, p.stderr)
        got = download(self.env, B, prefix, os.path.join(self.tmp, "dl",
                                                      prefix))
        same = digests(got) == digests(loc)
        check(what + ": bytes equal a local unshard", same,
              "%s != %s" % (sorted(digests(got)), sorted(digests(loc))))
        check(what + ": no marker left",
              objects(self.env, prefix + "-unfinished") == [])
        return got


def case_zarr(c, env, tmp, fx):
    src = os.path.join(fx, "g", "ckpt")
    exp = os.path.join(fx, "g", "expected.pt")
    sh("aws", "s3", "cp", "--quiet", "--recursive", src,
       "s3://%s/src/g/" % B, env=env)
    for fmt in ("torch", "safetensors"):
        loc = c.local("zarr", src, fmt, exp)
        for how, s in (("local->s3", src), ("s3->s3", "s3://%s/src/g" % B)):
            got = c.remote("zarr %s %s" % (how, fmt), s,
                           "out/%s-%s" % (how[:2], fmt), loc, "--format", fmt)
        pt = os.path.join(got, "checkpoint.pt")
        if fmt == "torch":
            pt = torch.load(pt)
            z = zarr.open_group(src, mode="r")
            check("zarr s3: torch.equal(grid_f16, the zarr array)",
                  torch.equal(pt["grid_f16"],
                              torch.from_numpy(z["grid_f16"][...])))
        # Chunk rows bigger than half of --memory 16M: through scratch.
        c.remote("zarr --memory 16M %s" % fmt, src, "out/mem-" + fmt, loc,
                 "--format", fmt, "--memory", "16M")
        c.remote("zarr --memory 16M --threads 1 --verify %s" % fmt, src,
                 "out/memv-" + fmt, loc, "--format", fmt, "--memory", "16M",
                 "--threads", "1", "--verify")
        c.remote("zarr --verify %s" % fmt, src, "out/v-" + fmt, loc,
                 "--format", fmt, "--verify")
    # Which path: scratch only under --memory 16M.
    nodir = os.path.join(tmp, "no", "such", "dir")
    p = ckpt(env, "--tmp-dir", nodir, "--memory", "16M", src,
             "s3://%s/out/nodir" % B)
    check("--memory 16M: the 12 MiB chunk row goes through scratch",
          p.returncode == 1 and "create temporary file in '%s'" % nodir
          in harness.error_of(p) and not p.stderr, harness.error_of(p))
    c.remote("default --memory: no scratch", src, "out/nodir2",
             os.path.join(tmp, "loc", "zarr-torch"), "--tmp-dir", nodir)
    # A corrupt chunk, by chunk rows and through scratch: exit 1 naming
    # it, no output completed, the marker left.
    bad = os.path.join(tmp, "bad")
    shutil.copytree(src, bad)
    for arr, chunk in (("cols", "0.3"), ("tall", "0.2")):
        with open(os.path.join(bad, arr, chunk), "r+b") as fh:
            fh.truncate(os.path.getsize(fh.name) - 1)
    for what, opts in (("chunk rows", ()), ("scratch", ("--memory", "16M"))):
        prefix = "out/bad-" + what.replace(" ", "")
        p = ckpt(env, *opts, bad, "s3://%s/%s" % (B, prefix))
        why = harness.error_of(p)
        check("corrupt chunk, %s: exit 1 naming it" % what,
              p.returncode == 1 and not p.stderr and (
                  "%s/cols/0.3: corrupt blosc frame" % bad in why or
                  "%s/tall/0.2: corrupt blosc frame" % bad in why), why)
        check("corrupt chunk, %s: nothing complete, marker left" % what,
              objects(env, prefix + "/") == [] and
              objects(env, prefix + "-unfinished") == [prefix +
                                                       "-unfinished"],
              str(objects(env, prefix)))


def case_orbax(c, env, fx):
    for v in ("v2", "v3"):
        step = os.path.join(fx, "orbax", v, "5")
        for fmt in ("torch", "safetensors"):
            loc = c.local("orbax " + v, step, fmt)
            c.remote("orbax %s %s" % (v, fmt), step,
                     "out/orbax-%s-%s" % (v, fmt), loc, "--format", fmt)
            c.remote("orbax %s %s --memory 16M" % (v, fmt), step,
                     "out/orbaxm-%s-%s" % (v, fmt), loc, "--format", fmt,
                     "--memory", "16M")
        pt = os.path.join(c.tmp, "dl", "out", "orbax-%s-torch" % v,
                          "checkpoint.pt")
        pt = torch.load(pt) if os.path.exists(pt) else {}
        arrs = {make_orbax.name_of(p): a for p, a, _, _ in orbax_items()}
        got = sorted(pt) == sorted(arrs)
        for k, a in arrs.items():
            got = got and torch.equal(pt[k], torch.from_numpy(a))
        check("orbax %s s3: torch.equal with the arrays" % v, got)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-chunks-")
    try:
        fx = os.path.join(tmp, "fx")
        make_group(os.path.join(fx, "g"))
        make_orbax_step(os.path.join(fx, "orbax"))
        generate(["make_zarr.py", os.path.join(fx, "mz")])
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            c = Case(env, tmp)
            case_zarr(c, env, tmp, fx)
            case_orbax(c, env, fx)
            # The make_zarr.py group (a remote DEST refused it before).
            src = os.path.join(fx, "mz", "ckpt")
            loc = c.local("make_zarr", src, "torch",
                          os.path.join(fx, "mz", "expected.pt"))
            c.remote("make_zarr torch", src, "out/mz", loc)
            check("every request signed correctly",
                  s3.stats()["sig_fail"] == 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
