#!/usr/bin/python3
"""selftest.py: quick self-test of the fixture tools (torch 1.13, ~30 s).

    /usr/bin/python3 tests/support/selftest.py [--cases rows,dtypes,...]

Checks that
  * make_dcp.py writes every case, make_olmo_legacy.py its rank files (each run verifies itself by loading the
    checkpoint back with torch's DCP reader and comparing with expected.pt);
  * check_unshard.py accepts expected.pt against itself and rejects tampered
    copies (one flipped bit, a NaN payload, dtype, shape, a missing key,
    list-vs-tuple, bool-vs-int, -0.0), with exit status 1;
  * the pure-Python safetensors reader round-trips (files written here by a
    minimal writer), validates headers, and the index.json form works;
  * an OLMo-layout directory (model.pt / optim.pt / train.pt) is compared
    against a nested reference (tests/fixtures/dcp-v2.*/nested/reference.pt);
  * every committed torch 2.x reference.pt loads with torch 1.13 through
    check_unshard (incl. uint16/float8 tensors as ForeignTensor).
Exit 0 when all pass.
"""
import argparse
import collections
import copy
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401
import torch  # noqa: E402
import check_unshard as cu  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
PY = sys.executable
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def run_check(actual, expected, *extra):
    """check_unshard.main in this process (a subprocess per call would spend
    seconds importing torch)."""
    rc, out = cu.run([actual, expected, *extra])
    return rc, out.strip()


_ST_NAME = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
            torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
            torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def write_safetensors(path, tensors, meta=None):
    header = {}
    blobs = []
    off = 0
    for k, t in tensors.items():
        b = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() \
            if t.numel() else b""
        header[k] = {"dtype": _ST_NAME[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="rows,cols,blocks2d,multi,replicated,dtypes,objects,"
                                       "olmo,all")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ckpt-selftest-")

    # 1. generators
    for case in args.cases.split(","):
        out = os.path.join(tmp, case)
        p = subprocess.run([PY, "-W", "ignore", os.path.join(HERE, "make_dcp.py"), out,
                            "--case", case], capture_output=True, text=True, timeout=180)
        check(p.returncode == 0 and "verified" in p.stdout,
              f"make_dcp --case {case}: {(p.stdout + p.stderr).strip().splitlines()[-1:]}")

    out = os.path.join(tmp, "olmo-legacy")
    p = subprocess.run([PY, "-W", "ignore", os.path.join(HERE, "make_olmo_legacy.py"), out],
                       capture_output=True, text=True, timeout=180)
    check(p.returncode == 0 and "verified" in p.stdout,
          f"make_olmo_legacy: {(p.stdout + p.stderr).strip().splitlines()[-1:]}")
    if p.returncode == 0:
        rc, msg = run_check(os.path.join(out, "expected"), os.path.join(out, "expected"))
        check(rc == 0, f"check_unshard OLMo dir vs dir: {msg}")

    # 2. checker accepts / rejects
    base = os.path.join(tmp, "dtypes", "expected.pt")
    objs = os.path.join(tmp, "objects", "expected.pt")
    rc, msg = run_check(base, base)
    check(rc == 0 and msg.startswith("OK"), f"check_unshard same file: {msg}")
    e = torch.load(base)
    o = torch.load(objs)

    def tampered(name, obj, ref, want):
        p = os.path.join(tmp, name + ".pt")
        torch.save(obj, p)
        rc, msg = run_check(p, ref)
        check(rc == 1 and want in msg, f"rejects {name}: {msg[:110]}")

    t = copy.deepcopy(e)
    t["sharded.float32"].view(torch.int32)[4, 2] ^= 1
    tampered("bitflip", t, base, "['sharded.float32']")
    t = copy.deepcopy(e)
    nan_at = torch.isnan(t["plain.float16"].reshape(-1)).nonzero()[0]
    t["plain.float16"].view(torch.int16).reshape(-1)[nan_at] ^= 1
    tampered("nan-payload", t, base, "['plain.float16']")
    t = copy.deepcopy(e)
    t["plain.int32"] = t["plain.int32"].long()
    tampered("dtype", t, base, "dtype")
    t = copy.deepcopy(e)
    t["plain.uint8"] = t["plain.uint8"].reshape(4, 3)
    tampered("shape", t, base, "shape")
    t = copy.deepcopy(e)
    del t["empty.bool"]
    tampered("missing-key", t, base, "missing")
    t = copy.deepcopy(o)
    t["tuple"] = list(t["tuple"])
    tampered("list-vs-tuple", t, objs, "list where tuple")
    t = copy.deepcopy(o)
    t["true"] = 1
    tampered("bool-vs-int", t, objs, "int")
    t = copy.deepcopy(o)
    t["neg_zero"] = 0.0
    tampered("neg-zero", t, objs, "neg_zero")
    t = copy.deepcopy(o)
    t["nested"]["a"]["b"][1]["c"] = "e"
    tampered("nested-value", t, objs, "['c']")

    # 3. safetensors
    flat = collections.OrderedDict((k, v) for k, v in e.items()
                                   if v.dtype in _ST_NAME)
    st = os.path.join(tmp, "model.safetensors")
    write_safetensors(st, flat, {"format": "pt"})
    got = cu.load_safetensors(st)
    r = cu.compare(dict(got), dict(flat))
    check(r.ok and r.tensors == len(flat), f"safetensors round trip ({r.tensors} tensors)")
    exp_sub = os.path.join(tmp, "st-expected.pt")
    torch.save(flat, exp_sub)
    rc, msg = run_check(st, exp_sub)
    check(rc == 0, f"check_unshard model.safetensors: {msg}")
    keys = list(flat)
    sd1 = collections.OrderedDict((k, flat[k]) for k in keys[: len(keys) // 2])
    sd2 = collections.OrderedDict((k, flat[k]) for k in keys[len(keys) // 2:])
    sdir = os.path.join(tmp, "sharded-st")
    os.makedirs(sdir)
    write_safetensors(os.path.join(sdir, "model-00001-of-00002.safetensors"), sd1)
    write_safetensors(os.path.join(sdir, "model-00002-of-00002.safetensors"), sd2)
    wm = {k: "model-00001-of-00002.safetensors" for k in sd1}
    wm.update({k: "model-00002-of-00002.safetensors" for k in sd2})
    with open(os.path.join(sdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    rc, msg = run_check(os.path.join(sdir, "model.safetensors.index.json"), exp_sub)
    check(rc == 0, f"check_unshard index.json: {msg}")
    bad = os.path.join(tmp, "bad.safetensors")
    with open(st, "rb") as f:
        raw = bytearray(f.read())
    with open(bad, "wb") as f:
        f.write(raw[:-1])
    rc, msg = run_check(bad, exp_sub)
    check(rc == 1 and "ERROR" in msg, f"rejects truncated safetensors: {msg[:100]}")

    # 4. OLMo directory vs nested reference, and 5. committed references
    refs = []
    for root, _, files in os.walk(os.path.join(REPO, "tests", "fixtures")):
        if "reference.pt" in files:
            refs.append(os.path.join(root, "reference.pt"))
    for ref in sorted(refs):
        rc, msg = run_check(ref, ref)
        check(rc == 0, f"torch 1.13 checks {os.path.relpath(ref, REPO)}: {msg}")
    nested = [r for r in refs if os.sep + "nested" + os.sep in r]
    if nested:
        ref = cu.load_trusted(nested[0])
        d = os.path.join(tmp, "olmo-dir")
        os.makedirs(d)
        torch.save(ref["model"], os.path.join(d, "model.pt"))
        torch.save(ref["optim"], os.path.join(d, "optim.pt"))
        torch.save(ref["train"], os.path.join(d, "train.pt"))
        rc, msg = run_check(d, nested[0])
        check(rc == 0, f"OLMo dir vs nested reference: {msg}")
        bad = copy.deepcopy(ref["optim"])
        bad["param_groups"][0]["lr"] *= 2
        torch.save(bad, os.path.join(d, "optim.pt"))
        rc, msg = run_check(d, nested[0])
        check(rc == 1 and "optim.pt" in msg, f"OLMo dir rejects changed lr: {msg[:100]}")
    else:
        check(False, "no committed nested reference.pt found")

    if FAILS:
        print(f"{len(FAILS)} FAILED (temp files kept in {tmp})")
        return 1
    import shutil
    shutil.rmtree(tmp)
    print("selftest: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
