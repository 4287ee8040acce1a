"""dstest.py - what the DeepSpeed unshard tests (unshard_deepspeed.py,
unshard_deepspeed_module.py, issue 21) share: the committed fixtures,
ckpt unshard, and exact tensor comparison under torch 1.13."""
import json
import os
import struct
import subprocess

import torch

from s3test import CKPT

HERE = os.path.dirname(os.path.abspath(__file__))
RW = os.path.join(HERE, "..", "fixtures", "real-writers")

ST_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16,
             "F16": torch.float16, "I64": torch.int64}


def unshard(*args, env=None):
    """`ckpt unshard --no-progress ARGS`: (rc, stdout, stderr)."""
    p = subprocess.run([CKPT, "unshard", "--no-progress"] + list(args),
                       capture_output=True, text=True, env=env, timeout=600)
    return p.returncode, p.stdout, p.stderr


def unshard_to(c, what, out, name, *args, row=False):
    """`ckpt unshard ARGS OUT`, checked on Checker c: exit 0, OUT holding
    just the file name; with row, one `unshard` row. Returns the exit
    status."""
    rc, so, se = unshard(*args, out)
    c.eq(what + ": exit (%s)" % se.strip(), rc, 0)
    if row:
        c.true(what + ": one unshard row", so.startswith("unshard\t") and
               so.count("\n") == 1)
    c.eq(what + ": files", sorted(os.listdir(out))
         if os.path.isdir(out) else None, [name])
    return rc


def raw(t):
    """The bytes of tensor t (bf16 as its 16-bit pattern)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def ties(sd):
    """Pairs of keys that are views of one storage at one offset, shape
    and stride (a tied weight)."""
    ks = list(sd)
    return sorted((a, b) for i, a in enumerate(ks) for b in ks[i + 1:]
                  if sd[a].data_ptr() == sd[b].data_ptr() and
                  sd[a].shape == sd[b].shape and
                  sd[a].stride() == sd[b].stride())


def same_tensors(c, what, got, want):
    """Checks on Checker c: got has want's keys in want's order, and per
    tensor the same dtype, shape, requires_grad and bytes."""
    c.eq(what + ": keys in order", list(got), list(want))
    for k in want:
        if k in got:
            a, b = got[k], want[k]
            c.eq("%s: %s dtype, shape, requires_grad" % (what, k),
                 (a.dtype, tuple(a.shape), a.requires_grad),
                 (b.dtype, tuple(b.shape), b.requires_grad))
            c.true("%s: %s bytes" % (what, k), raw(a) == raw(b))


def read_safetensors(path):
    """{name: tensor} of a .safetensors file, in file order, read without
    the safetensors package."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for k, v in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = v["data_offsets"]
        buf = bytearray(data[8 + n + b:8 + n + e])
        t = torch.frombuffer(buf, dtype=ST_DTYPES[v["dtype"]]) if buf \
            else torch.empty(0, dtype=ST_DTYPES[v["dtype"]])
        out[k] = t.reshape(v["shape"])
    return out
