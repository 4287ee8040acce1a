#!/usr/bin/python3
# ctest-cost: 8
"""unshard_megatron_legacy.py: `ckpt unshard` of legacy Megatron steps
(iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt) merges the tensor and
pipeline ranks into the model Megatron holds at TP=1 PP=1 (issue 29).

Fixtures (tests/fixtures/megatron_legacy/README.md): Megatron's own
save_checkpoint wrote one tiny GPT (4 layers, swiglu, GQA, untied output
layer) at TP=1 PP=1, TP=2, PP=2 and TP=2 x PP=2, from master weights that
do not depend on the sizes (use_cpu_initialization: Megatron splits each
full tensor itself). The TP=1 PP=1 file's model is the reference: every
output must hold its keys in its order, every tensor of the same dtype,
shape and bytes, every _extra_state None, and iteration 10; in run mode,
through the storage API with --verify and as safetensors too. Damaged copies: a replicated norm that differs on one rank, a missing
rank directory, a key whose split is not known; --format hf without the
model's config.json refused.
Before: every one of these
steps was refused ("unshard reads torch_dist steps only").

The pickles are read with Debian's torch 1.13; Megatron's classes (in
args) and numpy 2's numpy._core (in rng_state) are stand-ins.
"""
import importlib.abc
import json
import importlib.machinery
import os
import shutil
import struct
import sys
import tempfile
import types
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import (CKPT, SRC, check, error_of, finish, refused,  # noqa: E402
                     run, st_tensors, unshard)
import zippatch  # noqa: E402

import torch  # noqa: E402

FIX = os.path.join(SRC, "tests", "fixtures", "megatron_legacy")
STEP = os.path.join("checkpoints", "iter_0000010")
REF = os.path.join(FIX, "tp1pp1", STEP, "mp_rank_00", "model_optim_rng.pt")
CASES = ["tp1pp1", "tp2pp1", "tp1pp2", "tp2pp2"]


class _Stub:
    def __init__(self, *a, **k):
        pass

    def __setstate__(self, state):
        pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (_Stub,), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on the path: only what nothing else can import."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "megatron" or name.startswith("numpy._core"):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())


def load(path):
    return torch.load(path, map_location="cpu")


def same_model(name, out, ref):
    got = load(out)
    check("%s: model, checkpoint_version, iteration" % name,
          list(got) == ["model", "checkpoint_version", "iteration"] and
          got["iteration"] == 10, repr(list(got)))
    m = got.get("model", {})
    check("%s: the reference's keys in its order" % name,
          list(m) == list(ref), "%r\n!=\n%r" % (list(m), list(ref)))
    bad = []
    for k, v in ref.items():
        w = m.get(k)
        if torch.is_tensor(v):
            if not (torch.is_tensor(w) and w.dtype == v.dtype and
                    w.shape == v.shape and
                    w.contiguous().numpy().tobytes() ==
                    v.contiguous().numpy().tobytes()):
                bad.append(k)
        elif v is not None or w is not None:
            bad.append(k)
    check("%s: every tensor's dtype, shape and bytes (%d keys)" %
          (name, len(ref)), not bad, "differ: %s" % bad)


def record_of(path, key):
    """The storage record of tensor KEY of a rank file: the one whose bytes
    are the tensor's (the fixture's tensors own their storages)."""
    want = load(path)["model"][key].contiguous().numpy().tobytes()
    with open(path, "rb") as f:
        data = f.read()
    hits = [r.name for r in zippatch.records(data)
            if "/data/" in r.name and
            data[r.data_off:r.data_off + r.size] == want]
    assert len(hits) == 1, hits
    return hits[0]


def rename_key(path, old, new):
    """Rename a model key in data.pkl, same length, CRC rewritten."""
    assert len(old) == len(new)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    rec = [r for r in zippatch.records(bytes(data))
           if r.name.endswith("/data.pkl")][0]
    body = bytes(data[rec.data_off:rec.data_off + rec.size])
    assert body.count(old.encode()) == 1
    body = body.replace(old.encode(), new.encode())
    data[rec.data_off:rec.data_off + rec.size] = body
    for o in rec.crc_offs:
        struct.pack_into("<I", data, o, zlib.crc32(body) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(data)


def main():
    ref = load(REF)["model"]
    tmp = tempfile.mkdtemp(prefix="mglegacy-")
    try:
        for c in CASES:
            out = os.path.join(tmp, c)
            p = unshard(os.path.join(FIX, c, STEP), out)
            check("%s: exit 0" % c, p.returncode == 0, p.stdout + p.stderr)
            if p.returncode == 0:
                same_model(c, os.path.join(out, "checkpoint.pt"), ref)
        # Run mode: the run's step merged beside the others' names.
        out = os.path.join(tmp, "run")
        p = unshard(os.path.join(FIX, "tp2pp2", "checkpoints"), out)
        got = os.path.join(out, "iter_0000010-unsharded", "checkpoint.pt")
        check("run mode: exit 0, the step written", p.returncode == 0 and
              os.path.isfile(got), p.stdout + p.stderr)
        if os.path.isfile(got):
            same_model("run mode", got, ref)

        # --delete-sharded: the output holds the model alone (not the
        # ranks' optimizer and RNG states, nor args), so the step stays.
        own = os.path.join(tmp, "own")
        shutil.copytree(os.path.join(FIX, "tp2pp2"), own)
        p = run(CKPT, "unshard", "--no-progress", "--delete-sharded",
                os.path.join(own, "checkpoints"),
                os.path.join(tmp, "own-out"), ok=False)
        check("--delete-sharded: exit 0, the step kept, saying why",
              p.returncode == 0 and
              os.path.isdir(os.path.join(own, STEP)) and
              "kept (its unsharded output holds the model weights only"
              in p.stdout, p.stdout + p.stderr)

        src = os.path.join(FIX, "tp2pp2", STEP)
        # Read through the storage API (as from object storage), verified.
        out = os.path.join(tmp, "via")
        p = run(CKPT, "unshard", "--no-progress", "--verify", src, out,
                ok=False, env=dict(os.environ, CKPT_SOURCE_VIA_STORAGE="1"))
        check("storage API --verify: exit 0", p.returncode == 0,
              p.stdout + p.stderr)
        if p.returncode == 0:
            same_model("storage API", os.path.join(out, "checkpoint.pt"), ref)
        # --format safetensors: the model's tensors under their keys, the
        # rest (_extra_state, iteration, checkpoint_version) in extra.json.
        out = os.path.join(tmp, "st")
        p = unshard("--format", "safetensors", src, out)
        check("safetensors: exit 0", p.returncode == 0, p.stdout + p.stderr)
        if p.returncode == 0:
            got = st_tensors(os.path.join(out, "model.safetensors"))
            want = {k: ("F32", list(v.shape),
                        v.contiguous().numpy().tobytes())
                    for k, v in ref.items() if torch.is_tensor(v)}
            check("safetensors: every tensor's name, dtype, shape and bytes",
                  got == want and all(v.dtype == torch.float32
                                      for v in ref.values()
                                      if torch.is_tensor(v)),
                  "%s\n!=\n%s" % (sorted(got), sorted(want)))
            with open(os.path.join(out, "extra.json")) as f:
                extra = json.load(f)
            check("safetensors: extra.json", extra == dict(
                {k: None for k, v in ref.items() if v is None},
                checkpoint_version=3.0, iteration=10), str(extra)[:300])
        # One rank's copy of a replicated norm differs (a consistent file:
        # its record's CRC rewritten): an error naming key and rank.
        last = os.path.join("mp_rank_01_001", "model_optim_rng.pt")
        key = "decoder.final_layernorm.weight"
        rec = record_of(os.path.join(src, last), key)
        refused(tmp, "norm", src,
                lambda d: zippatch.patch(os.path.join(d, last), rec, True),
                "%(d)s: tensor '" + key + "' is replicated across "
                "tensor-parallel ranks, but '" + last + "' (rank 1) holds "
                "different bytes from rank 0's")
        # A rank directory missing: the step is incomplete (ls says so and
        # run mode skips it); given directly, an error naming the file.
        refused(tmp, "missing-rank", src,
                lambda d: shutil.rmtree(os.path.join(d, "mp_rank_01_001")),
                "'%(d)s/mp_rank_01_001/model_optim_rng.pt' is missing (the "
                "step has 2 tensor x 2 pipeline ranks)")
        # A key whose split the name does not tell: never guessed.
        first = os.path.join("mp_rank_00_000", "model_optim_rng.pt")
        refused(tmp, "unknown-key", src,
                lambda d: rename_key(os.path.join(d, first),
                                     "layers.0.pre_mlp_layernorm.weight",
                                     "layers.0.pre_mlp_layerXorm.weight"),
                "%(d)s: '" + first + "': how tensor 'decoder.layers.0."
                "pre_mlp_layerXorm.weight' is split across tensor-parallel "
                "ranks is not known (the checkpoint does not say; this "
                "version knows megatron.core GPT's keys)")
        # --format hf needs the model's config.json (exported in
        # unshard_hf_megatron.py): none here, said so, nothing written.
        hf = os.path.join(tmp, "hf")
        p = unshard("--format", "hf", src, hf)
        check("--format hf without config.json: an error row saying so, "
              "nothing written",
              p.returncode == 1 and error_of(p) == src + ": no config.json "
              "in the checkpoint or the directory above it (give the "
              "model's with --config-dir DIR)" and not os.path.exists(hf),
              error_of(p))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
