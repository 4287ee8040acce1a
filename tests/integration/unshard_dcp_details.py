#!/usr/bin/python3
# ctest-cost: 8
"""unshard_dcp_details.py: DCP details of issue 21, on checkpoints torch
1.13 writes (save_state_dict, no_dist) with what 1.13 cannot write added
by hand:

  conj/neg views  torch >= 2.x saves c.conj() / x._neg_view() with its
                  storage as it is and {'conj_bit': True} / {'neg_bit':
                  True} as _rebuild_tensor_v2's 7th argument
                  (torch._utils.get_tensor_metadata); DCP's writer does not
                  resolve them (it clones only views smaller than their
                  storage). torch 1.13's torch.save drops the bit, so the
                  test writes the item's data.pkl with it by hand. The
                  output holds the values the view means (what torch's
                  dcp_to_torch_save copies into its plain tensors): the
                  imaginary parts' or every component's sign bit flipped,
                  computed here on the integer bits (NaN payloads, -0.0,
                  inf). complex64 conj, complex128 conj+neg, float32 and
                  bfloat16 neg; an int64 neg view is refused, naming it.
  complex values  Python complex values in byte items round-trip exactly
                  (torch; safetensors: extra.json {"__complex__": [re, im]}).
  empty           an empty state dict with --format safetensors writes a
                  valid model.safetensors holding its header only.
  whole step      SRC holding only model.pt (and optim.pt, config.yaml):
                  `skip - not sharded: model.pt, optim.pt are already
                  whole, nothing to merge`, exit 0, no DEST.

Before: "tensor with the 'conj_bit' bit set is not supported", "pickle
global '__builtin__.complex' is not allowed", an empty DEST, and "error -
no checkpoint" (exit 1).
"""
import json
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "lib"))
import dcpmod as M  # noqa: E402  (imports torch 1.13 through torchshim)
from harness import CKPT, check, compare, error_of, finish, run  # noqa: E402

torch = M.torch
dcp = M.dcp


def unshard(*args):
    return run(CKPT, "unshard", "--no-progress", *args, ok=False)


def save(d, sd):
    dcp.save_state_dict(sd, dcp.FileSystemWriter(d), no_dist=True)


def bits(dtype, ints):
    """A tensor of dtype from its elements' bit patterns."""
    ity = {torch.float32: torch.int32, torch.bfloat16: torch.int16,
           torch.complex64: torch.int32, torch.complex128: torch.int64,
           torch.int64: torch.int64}[dtype]
    n = {torch.int16: 16, torch.int32: 32, torch.int64: 64}[ity]
    ints = [x - (1 << n) if x >= 1 << (n - 1) else x for x in ints]
    return torch.tensor(ints, dtype=ity).view(dtype).clone()


def flip(t, parts):
    """t with the sign bit of the chosen components flipped: parts is
    'all', 'imag' or 'real' (complex: real and imaginary halves)."""
    it = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    cplx = t.dtype.is_complex
    half = t.element_size() // 2 if cplx else t.element_size()
    v = t.clone().contiguous().view(it[half]).reshape(-1)
    sign = -(1 << (8 * half - 1))
    idx = range(v.numel())
    if cplx and parts == "imag":
        idx = range(1, v.numel(), 2)
    elif cplx and parts == "real":
        idx = range(0, v.numel(), 2)
    for i in idx:
        v[i] = int(v[i]) ^ sign
    return v.view(t.dtype).reshape(t.shape)


def with_flags(pkl, flags):
    """data.pkl of a tensor (torch 1.13, protocol 2) with a metadata dict
    of flags as _rebuild_tensor_v2's 7th argument, as torch 2.x writes
    it: after the backward hooks' OrderedDict() and its BINPUT."""
    i = pkl.index(b"ccollections\nOrderedDict\n")
    j = pkl.index(b")R", i) + 2
    if pkl[j:j + 1] == b"q":
        j += 2
    d = b"}"
    for f in flags:
        d += b"X" + struct.pack("<I", len(f)) + f.encode() + b"\x88s"
    return pkl[:j] + d + pkl[j:]


def flagged(tmp, name, sd, flags):
    d = os.path.join(tmp, name)
    save(d, sd)
    m = M.load_meta(d)
    for fqn, fl in flags.items():
        _, info = M.find(m, fqn, (0,))
        recs = M.zip_records(M.item_bytes(d, info))
        pk = next(n for n in recs if n.endswith("data.pkl"))
        recs[pk] = with_flags(recs[pk], fl)
        M.put_item(d, info, M.make_zip(recs), "__flag_%s.distcp" % fqn)
    M.save_meta(d, m)
    return d


NAN = 0x7fc00123            # float32 NaN with a payload
NAN16 = 0x7fc1              # bfloat16 NaN with a payload


def views(tmp):
    c = bits(torch.complex64, [0x3f800000, 0x40000000, 0x40400000, NAN,
                               0x80000000, 0x7f800000, 0, 0xbf000000])
    z = bits(torch.complex128, [0x3ff8000000000000, 0xc000000000000000,
                                0x7ff8000000000001, 0])
    r = bits(torch.float32, [0x3fc00000, 0, 0x80000000, 0x7f800000,
                             NAN, 0xc0000000])
    h = bits(torch.bfloat16, [0x3f80, NAN16, 0x8000, 0])
    d = flagged(tmp, "views", {"c": c, "z": z, "r": r, "h": h, "plain": c},
                {"c": ["conj_bit"], "z": ["conj_bit", "neg_bit"],
                 "r": ["neg_bit"], "h": ["neg_bit"]})
    want = {"c": flip(c, "imag"), "z": flip(z, "real"), "r": flip(r, "all"),
            "h": flip(h, "all"), "plain": c}
    exp = os.path.join(tmp, "views.pt")
    torch.save(want, exp)
    for extra in ([], ["--verify"], ["--threads", "1"]):
        out = os.path.join(tmp, "views-out%d" % len(extra))
        p = unshard(*extra, d, out)
        check("views %s: exit 0" % extra, p.returncode == 0, p.stderr)
        if p.returncode == 0:
            compare("views %s: values" % extra,
                    os.path.join(out, "checkpoint.pt"), exp)
    d = flagged(tmp, "intneg", {"k": torch.arange(3)}, {"k": ["neg_bit"]})
    out = os.path.join(tmp, "intneg-out")
    p = unshard(d, out)
    check("int64 neg view: exit 1", p.returncode == 1, p.stderr)
    check("int64 neg view: message", error_of(p) ==
          "tensor 'k' chunk [0:3]: %s: data.pkl: int64 tensor "
          "with the 'neg_bit' bit set is not supported"
          % os.path.join(d, "__flag_k.distcp"), error_of(p))
    check("int64 neg view: nothing at DEST", not os.path.exists(out))


def complex_values(tmp):
    d = os.path.join(tmp, "cplx")
    sd = {"z": complex(1.5, -2.0),
          "l": [1j, complex(float("nan"), -0.0), complex(-0.0, float("inf"))],
          "w": torch.ones(2)}
    save(d, sd)
    exp = os.path.join(tmp, "cplx.pt")
    torch.save(sd, exp)
    out = os.path.join(tmp, "cplx-out")
    p = unshard("--verify", d, out)
    check("complex values: exit 0", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        compare("complex values: equal", os.path.join(out, "checkpoint.pt"),
                exp)
    out = os.path.join(tmp, "cplx-st")
    p = unshard("--format", "safetensors", d, out)
    check("complex values safetensors: exit 0", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        with open(os.path.join(out, "extra.json")) as f:
            text = f.read()
        check("complex values safetensors: extra.json",
              json.loads(text.replace("NaN", '"NaN"').replace(
                  "Infinity", '"Infinity"')) ==
              {"z": {"__complex__": [1.5, -2.0]},
               "l": [{"__complex__": [0.0, 1.0]},
                     {"__complex__": ["NaN", -0.0]},
                     {"__complex__": [-0.0, "Infinity"]}]}, text)


def empty(tmp):
    d = os.path.join(tmp, "empty")
    save(d, {})
    out = os.path.join(tmp, "empty-st")
    p = unshard("--format", "safetensors", "--verify", d, out)
    check("empty safetensors: exit 0", p.returncode == 0, p.stderr)
    check("empty safetensors: only model.safetensors",
          os.path.isdir(out) and os.listdir(out) == ["model.safetensors"],
          str(os.listdir(out) if os.path.isdir(out) else None))
    if os.path.isfile(os.path.join(out, "model.safetensors")):
        with open(os.path.join(out, "model.safetensors"), "rb") as f:
            data = f.read()
        head = b'{"__metadata__":{"format":"pt"}}'
        check("empty safetensors: header only",
              data == struct.pack("<Q", len(head)) + head, repr(data))
    out = os.path.join(tmp, "empty-pt")
    p = unshard(d, out)
    check("empty torch: exit 0", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        check("empty torch: {}", torch.load(os.path.join(out,
                                                         "checkpoint.pt"))
              == {})


def whole_step(tmp):
    d = os.path.join(tmp, "step5")
    os.makedirs(d)
    torch.save({"w": torch.ones(2)}, os.path.join(d, "model.pt"))
    out = os.path.join(tmp, "whole-out")
    p = unshard(d, out)
    check("model.pt only: exit 0", p.returncode == 0, p.stderr)
    check("model.pt only: row", p.stdout == "skip\t-\tnot sharded: model.pt "
          "is already whole, nothing to merge\n", p.stdout)
    check("model.pt only: no DEST", not os.path.exists(out))
    torch.save({"step": 1}, os.path.join(d, "optim.pt"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("a: 1\n")
    p = unshard(d, out)
    check("model.pt + optim.pt: row", p.returncode == 0 and p.stdout ==
          "skip\t-\tnot sharded: model.pt, optim.pt are already whole, "
          "nothing to merge\n", p.stdout + p.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-dcp-details-")
    try:
        views(tmp)
        complex_values(tmp)
        empty(tmp)
        whole_step(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
