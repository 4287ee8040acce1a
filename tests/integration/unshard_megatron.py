#!/usr/bin/python3
# ctest-cost: 10
"""unshard_megatron.py: `ckpt unshard` of Megatron torch_dist steps, against
Megatron's own loader and torch's dcp_to_torch_save (issue 21).

Fixtures (written by megatron.core 0.20.0 / torch 2.14.1 itself; see
tests/fixtures/megatron/README.md):
  * real-writers/megatron_core_dist_ckpt_tensors/ckpt: dist_checkpointing.save,
    common state inside the DCP as 'common_state/shard_0_1' ([state_dict]);
  * megatron/common_pt/ckpt: the older layout, common.pt beside the DCP files
    (with a tensor in the common state);
  * megatron/gpt_run/checkpoints: megatron.training save_checkpoint,
    --ckpt-format torch_dist, tensor parallel 2: iter_0000010/ and
    latest_checkpointed_iteration.txt; the common state holds args (an
    argparse.Namespace with Megatron enums and signal.Signals).
Each output must equal reference_megatron_load.pt (Megatron's
load_common_state_dict merged with load_plain_tensors) key for key, in the
same order, tensors bit-exact; the other ShardedObjects (rng_state,
_extra_state), which Megatron loads only when asked, must equal torch's
dcp_to_torch_save values and nothing else may be there. Direct, through the
storage API, in run mode (directory and .tar), by `ckpt process`; the
legacy layout's ranks are merged; a clash between common state and tensors
is an error saying so; common.pt and the in-DCP item together: common.pt wins (as in
Megatron) and the item is kept. Before: the common state came out as
'common_state/shard_0_1': [dict], a step whose args hold a Namespace was
refused, common.pt was left out, and run mode said "unsupported checkpoint
format 'megatron'".
"""
import math
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, SRC, check, error_of, finish  # noqa: E402

import torch  # noqa: E402

FIX = os.path.join(SRC, "tests", "fixtures")
TENSORS = os.path.join(FIX, "real-writers", "megatron_core_dist_ckpt_tensors",
                       "ckpt")
TENSORS_REF = os.path.join(FIX, "megatron", "tensors")
COMMON_PT = os.path.join(FIX, "megatron", "common_pt")
GPT = os.path.join(FIX, "megatron", "gpt_run")
ITEM = "common_state/shard_0_1"


# --- loading Megatron's pickles without Megatron -------------------------
# The reference and ckpt's output name Megatron's classes (enums in args);
# megatron is not installed here: each becomes a stand-in class compared by
# its constructor arguments and state, the same in both files.

_stubs = {}


def _stub(mod, name):
    if (mod, name) not in _stubs:
        def new(cls, *a, **kw):
            o = object.__new__(cls)
            o.args, o.state = a, None
            return o

        def setstate(self, st):
            self.state = st

        def eq(self, other):
            return (type(self) is type(other) and self.args == other.args
                    and self.state == other.state)
        _stubs[(mod, name)] = type(name, (), {
            "__new__": new, "__init__": lambda self, *a, **k: None,
            "__setstate__": setstate, "__eq__": eq,
            "__hash__": lambda self: 0,
            "__repr__": lambda self: "%s.%s%r" % (mod, name, self.args)})
    return _stubs[(mod, name)]


class _Unpickler(pickle.Unpickler):
    def find_class(self, mod, name):
        if mod.startswith("megatron.") or (mod, name) == ("signal",
                                                          "Signals"):
            return _stub(mod, name)
        if mod.startswith("numpy._core"):   # numpy 2 writes, numpy 1 here
            mod = "numpy.core" + mod[len("numpy._core"):]
        return super().find_class(mod, name)


_PM = types.SimpleNamespace(Unpickler=_Unpickler, load=pickle.load,
                            __name__="pickle",
                            UnpicklingError=pickle.UnpicklingError)


def load(path):
    # Debian's torch 1.13 resets pickle_module to its module-global pickle
    # unless weights_only: swap that global for the call.
    old = torch.serialization.pickle
    torch.serialization.pickle = _PM
    try:
        return torch.load(path, pickle_module=_PM)
    finally:
        torch.serialization.pickle = old


def same(x, y, at=""):
    """None if x and y are equal (tensors bit for bit, dict order too),
    else where they differ."""
    if torch.is_tensor(x) or torch.is_tensor(y):
        if not (torch.is_tensor(x) and torch.is_tensor(y)):
            return at + ": tensor and non-tensor"
        if x.dtype != y.dtype or x.shape != y.shape:
            return "%s: %s%s != %s%s" % (at, x.dtype, tuple(x.shape),
                                         y.dtype, tuple(y.shape))
        bits = {torch.float32: torch.int32, torch.float64: torch.int64,
                torch.float16: torch.int16, torch.bfloat16: torch.int16}
        if x.dtype in bits:
            x, y = x.view(bits[x.dtype]), y.view(bits[y.dtype])
        return None if torch.equal(x, y) else at + ": tensor values"
    if type(x) is not type(y):
        return "%s: %s != %s" % (at, type(x).__name__, type(y).__name__)
    if type(x).__module__ == "numpy" and hasattr(x, "tobytes"):
        ok = x.dtype == y.dtype and x.shape == y.shape and \
            x.tobytes() == y.tobytes()
        return None if ok else at + ": numpy values"
    if isinstance(x, dict):
        if list(x) != list(y):
            return "%s: keys %s != %s" % (at, list(x), list(y))
        for k in x:
            d = same(x[k], y[k], "%s.%s" % (at, k))
            if d:
                return d
        return None
    if isinstance(x, (list, tuple)):
        if len(x) != len(y):
            return at + ": lengths"
        for i, (a, b) in enumerate(zip(x, y)):
            d = same(a, b, "%s[%d]" % (at, i))
            if d:
                return d
        return None
    if hasattr(x, "__dict__") and not isinstance(x, type):
        return same(vars(x), vars(y), at + "(vars)")
    if isinstance(x, float):
        ok = (math.isnan(x) and math.isnan(y)) or (
            x == y and math.copysign(1, x) == math.copysign(1, y))
        return None if ok else "%s: %r != %r" % (at, x, y)
    return None if x == y else "%s: %r != %r" % (at, x, y)


def expected(ref_dir):
    """Megatron's full load, then every other DCP entry as torch's
    dcp_to_torch_save gives it, in the checkpoint's order."""
    meg = load(os.path.join(ref_dir, "reference_megatron_load.pt"))
    dcp = load(os.path.join(ref_dir, "reference_dcp_to_torch_save.pt"))
    out = dict(meg)
    for k, v in dcp.items():
        if k not in meg and k != ITEM:
            out[k] = v
    return meg, out


def check_output(name, out_file, ref_dir):
    got = load(out_file)
    meg, want = expected(ref_dir)
    d = same(got, dict((k, want[k]) for k in got) if set(got) == set(want)
             else want)
    check(name + ": equals Megatron's load + dcp_to_torch_save", d is None,
          d or "")
    # Megatron's own keys first and in its order (the common state, then
    # the tensors in checkpoint order).
    mine = [k for k in got if k in meg]
    check(name + ": Megatron's keys in Megatron's order", mine == list(meg),
          "%s != %s" % (mine, list(meg)))


def ckpt(*args, env=None):
    return subprocess.run([CKPT] + list(args), capture_output=True,
                          text=True, env=env)


def direct(tmp):
    cases = [("tensors", TENSORS, TENSORS_REF),
             ("common_pt", os.path.join(COMMON_PT, "ckpt"), COMMON_PT),
             ("gpt_run", os.path.join(GPT, "checkpoints", "iter_0000010"),
              GPT)]
    via = dict(os.environ, CKPT_SOURCE_VIA_STORAGE="1")
    for name, src, ref in cases:
        for how, env in (("local", None), ("storage", via)):
            out = os.path.join(tmp, "%s-%s" % (name, how))
            p = ckpt("unshard", "--verify", "--no-progress", src, out,
                     env=env)
            check("%s %s: exit 0" % (name, how), p.returncode == 0,
                  p.stderr)
            if p.returncode == 0:
                check("%s %s: one output" % (name, how),
                      os.listdir(out) == ["checkpoint.pt"],
                      str(os.listdir(out)))
                check_output("%s %s" % (name, how),
                             os.path.join(out, "checkpoint.pt"), ref)
    # The tensors case has no tensor in its common state: safetensors works,
    # the common state's values at the top of extra.json.
    out = os.path.join(tmp, "tensors-st")
    p = ckpt("unshard", "--format", "safetensors", "--no-progress", TENSORS,
             out)
    check("tensors safetensors: exit 0", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        import json
        with open(os.path.join(out, "extra.json")) as f:
            extra = json.load(f)
        check("tensors safetensors: extra.json is the common state",
              extra == {"iteration": 10,
                        "args": {"lr": 0.001, "note": "common state"}},
              str(extra))
        check("tensors safetensors: files",
              sorted(os.listdir(out)) == ["extra.json", "model.safetensors"],
              str(os.listdir(out)))


def files(d):
    return sorted(os.path.relpath(os.path.join(r, f), d)
                  for r, _, fs in os.walk(d) for f in fs)


def run_mode(tmp):
    """iter_N steps of a run: a directory, a .tar, `ckpt process`."""
    run = os.path.join(tmp, "mgrun")
    shutil.copytree(os.path.join(GPT, "checkpoints"), run)
    # A second step in the older common.pt layout.
    shutil.copytree(os.path.join(COMMON_PT, "ckpt"),
                    os.path.join(run, "iter_0000005"))
    dest = os.path.join(tmp, "mgrun-dest")
    p = ckpt("unshard", "--no-progress", run, dest)
    check("run: exit 0", p.returncode == 0, p.stderr)
    rows = [l.split("\t")[:2] for l in p.stdout.splitlines()]
    check("run: rows", rows == [["unshard", "iter_0000005"],
                                ["unshard", "iter_0000010"]],
          p.stdout)
    for step, ref in (("iter_0000005", COMMON_PT), ("iter_0000010", GPT)):
        f = os.path.join(dest, step + "-unsharded", "checkpoint.pt")
        check("run %s: output" % step, os.path.isfile(f))
        if os.path.isfile(f):
            check_output("run " + step, f, ref)
    arc = os.path.join(tmp, "mgrun.tar")
    with tarfile.open(arc, "w") as t:
        t.add(run, arcname="mgrun")
    dest = os.path.join(tmp, "mgrun-tar-dest")
    p = ckpt("unshard", "--no-progress", arc, dest)
    check("tar: exit 0", p.returncode == 0, p.stderr)
    for step, ref in (("iter_0000005", COMMON_PT), ("iter_0000010", GPT)):
        f = os.path.join(dest, step + "-unsharded", "checkpoint.pt")
        check("tar %s: output" % step, os.path.isfile(f))
        if os.path.isfile(f):
            check_output("tar " + step, f, ref)
    # process: judged, unsharded next to the copy, source deleted.
    q = os.path.join(tmp, "queue")
    os.makedirs(q)
    shutil.copytree(os.path.join(GPT, "checkpoints"), os.path.join(q, "r1"))
    pdest = os.path.join(tmp, "pdest")
    p = ckpt("process", "--no-wandb", "--min-age", "0", "-q",
             os.path.join(q, "r1"), "--dest", pdest)
    check("process: exit 0", p.returncode == 0, p.stdout + p.stderr)
    f = os.path.join(pdest, "r1", "iter_0000010-unsharded", "checkpoint.pt")
    check("process: output", os.path.isfile(f))
    if os.path.isfile(f):
        check_output("process", f, GPT)
    check("process: source deleted", not os.path.exists(os.path.join(q, "r1")))
    got = files(os.path.join(pdest, "r1", "iter_0000010"))
    want = files(os.path.join(GPT, "checkpoints", "iter_0000010"))
    check("process: the step copied too", got == want, "%s != %s" % (got,
                                                                      want))


def errors(tmp):
    # The legacy layout (real-writers, TP=2) is merged now
    # (unshard_megatron_legacy.py holds it to Megatron's TP=1): the
    # column-parallel qkv on dim 0, the row-parallel proj on dim 1.
    legacy = os.path.join(FIX, "real-writers", "megatron_legacy_torch",
                          "checkpoints")
    dest = os.path.join(tmp, "legacy-dest")
    p = ckpt("unshard", "--no-progress", legacy, dest)
    out = os.path.join(dest, "iter_0000010-unsharded", "checkpoint.pt")
    check("legacy: exit 0, the step merged", p.returncode == 0 and
          os.path.isfile(out), p.stdout + p.stderr)
    if os.path.isfile(out):
        m = load(out)["model"]
        r = [load(os.path.join(legacy, "iter_0000010", "mp_rank_0%d" % t,
                               "model_optim_rng.pt"))["model"]
             for t in (0, 1)]
        qkv = "decoder.layers.0.self_attention.linear_qkv.weight"
        proj = "decoder.layers.0.self_attention.linear_proj.weight"
        check("legacy: ranks concatenated", torch.equal(
            m[qkv], torch.cat([r[0][qkv], r[1][qkv]], 0)) and torch.equal(
            m[proj], torch.cat([r[0][proj], r[1][proj]], 1)),
            "%s %s" % (tuple(m[qkv].shape), tuple(m[proj].shape)))
    # A common state key that is also a tensor's: Megatron's merge refuses.
    bad = os.path.join(tmp, "clash")
    shutil.copytree(os.path.join(COMMON_PT, "ckpt"), bad)
    torch.save({"iteration": 3, "layer.weight_dim1": 7},
               os.path.join(bad, "common.pt"))
    out = os.path.join(tmp, "clash-out")
    p = ckpt("unshard", "--no-progress", bad, out)
    check("clash: exit 1", p.returncode == 1, p.stderr)
    check("clash: names the key in its error row",
          "Megatron common state and checkpoint both hold "
          "'layer.weight_dim1'" in error_of(p), error_of(p))
    check("clash: nothing written", not os.path.exists(out))
    # common.pt beside a DCP that has the item too: common.pt is merged
    # (Megatron's load_common_state_dict reads it first), the item kept.
    both = os.path.join(tmp, "both")
    shutil.copytree(TENSORS, both)
    torch.save({"iteration": 99}, os.path.join(both, "common.pt"))
    out = os.path.join(tmp, "both-out")
    p = ckpt("unshard", "--no-progress", both, out)
    check("both: exit 0", p.returncode == 0, p.stderr)
    if p.returncode == 0:
        got = load(os.path.join(out, "checkpoint.pt"))
        check("both: keys", list(got) == [
            "iteration", "layer.weight_dim0", "layer.weight_dim1",
            "layer.norm_replicated", ITEM], str(list(got)))
        check("both: common.pt merged, item kept",
              got.get("iteration") == 99 and got.get(ITEM) == [{
                  "iteration": 10,
                  "args": {"lr": 0.001, "note": "common state"}}],
              str(got))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-megatron-")
    try:
        direct(tmp)
        run_mode(tmp)
        errors(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
