#!/usr/bin/python3
"""unshard_dcp_v2.py: `ckpt unshard` against committed torch 2.x fixtures.

Every tests/fixtures/dcp-v2.*/CASE/ holds ckpt/ (a DCP checkpoint written
by real torch 2.x processes in a Debian chroot) and reference.pt (torch's
own dcp_to_torch_save of it). ckpt's checkpoint.pt must equal the reference
value for value (tensors bit-exact, nesting restored from planner_data),
and, for cases whose dtypes safetensors has, so must --format safetensors.
The OLMo layout must split the reference the way SPEC says.
"""
import glob
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, SRC, check, compare, finish, run  # noqa: E402

ST_DTYPES = {"float64", "float32", "float16", "bfloat16", "int64", "int32",
             "int16", "int8", "uint8", "bool", "complex64", "uint16",
             "uint32", "uint64", "float8_e5m2", "float8_e4m3fn"}


def ckpt(*args, env=None):
    return run(CKPT, *args, ok=False, env=env)


def manifest(case_dir):
    with open(os.path.join(case_dir, "manifest.json")) as f:
        return json.load(f)


def one_case(case_dir, tmp):
    name = os.path.relpath(case_dir, os.path.join(SRC, "tests", "fixtures"))
    out = os.path.join(tmp, name.replace("/", "_"))
    ref = os.path.join(case_dir, "reference.pt")
    m = manifest(case_dir)
    # Full pickle only where objects need it: torch 1.13 cannot resolve
    # _rebuild_tensor_v3, the checker's safe loader can.
    objs = ["--allow-pickle"] if any(k["kind"] == "bytes"
                                     for k in m["keys"].values()) else []
    p = ckpt("unshard", "--verify", "--no-progress",
             os.path.join(case_dir, "ckpt"), out + "-pt")
    check(name + ": torch exit 0", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        compare(name + ": equals dcp_to_torch_save", os.path.join(
            out + "-pt", "checkpoint.pt"), ref, *objs)
    # The same through the storage API (the remote read path).
    env = dict(os.environ, CKPT_SOURCE_VIA_STORAGE="1")
    p = ckpt("unshard", "--no-progress", os.path.join(case_dir, "ckpt"),
             out + "-storage", env=env)
    check(name + ": via storage exit 0", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        compare(name + ": via storage equals dcp_to_torch_save",
                os.path.join(out + "-storage", "checkpoint.pt"), ref, *objs)
    dtypes = {k.get("dtype") for k in m["keys"].values() if "dtype" in k}
    if dtypes <= ST_DTYPES:
        p = ckpt("unshard", "--format", "safetensors", "--verify",
                 os.path.join(case_dir, "ckpt"), out + "-st")
        check(name + ": safetensors exit 0", p.returncode == 0, p.stderr)
        st = os.path.join(out + "-st", "model.safetensors")
        compare(name + ": safetensors tensors", st, ref)
        # extra.json holds the reference's non-tensor values: there
        # exactly when the manifest has a key that is not a tensor.
        extra = os.path.join(out + "-st", "extra.json")
        values = any(k["kind"] not in ("tensor", "dtensor")
                     for k in m["keys"].values())
        check(name + ": extra.json %s" % ("written" if values else "absent"),
              os.path.exists(extra) == values,
              str(sorted(os.listdir(out + "-st"))
                  if os.path.isdir(out + "-st") else None))
        if values:
            compare(name + ": extra.json values", extra, ref)
    if any(k.get("path", [""])[0] == "model" for k in m["keys"].values()):
        p = ckpt("unshard", "--layout", "olmo", "--verify",
                 os.path.join(case_dir, "ckpt"), out + "-olmo")
        check(name + ": olmo exit 0", p.returncode == 0, p.stderr)
        if p.returncode == 0:
            compare(name + ": olmo split equals reference", out + "-olmo",
                    ref, *objs)


def main():
    cases = sorted(glob.glob(os.path.join(SRC, "tests", "fixtures",
                                          "dcp-v2.*", "*", "ckpt")))
    # The fixtures are committed: none found is a broken tree, not a pass.
    check("torch 2.x fixtures found", len(cases) > 0, "glob found none")
    if not cases:
        return finish()
    tmp = tempfile.mkdtemp(prefix="ckpt-dcpv2-")
    try:
        for c in cases:
            one_case(os.path.dirname(c), tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
