#!/usr/bin/env python3
"""make_dcp_v2.py: write REAL torch 2.x DCP checkpoints (DTensor, FSDP2,
get_state_dict) plus torch's own reference output, for committed fixtures.

Runs with torch >= 2.6 only, i.e. inside the Debian chroots made by
scripts/fixtures/make-chroot.sh (trixie: torch 2.6, sid: torch 2.14). NOT run
at test time; scripts/fixtures/gen-v2.sh drives it and copies the result to
tests/fixtures/dcp-v<torch major.minor>/.

    USE_LIBUV=0 python3 make_dcp_v2.py OUT [--case CASE ...] [--timeout S]

For every case (default: all the running torch supports) it writes
    OUT/<case>/ckpt/          the DCP checkpoint (FileSystemWriter)
    OUT/<case>/reference.pt   torch's own unsharded form:
                              torch.distributed.checkpoint.format_utils.
                              dcp_to_torch_save(ckpt, reference.pt): the state
                              dict NESTED again through planner_data, every
                              DTensor/tensor as one full plain tensor. This is
                              what `ckpt unshard --layout single` must produce.
    OUT/<case>/manifest.json  case, torch and python versions, world size,
                              mesh, writer options, and per flattened key
                              (as in .metadata) its kind, dtype, global shape,
                              placements, and the chunk boxes.
Each case also computes the expected full state dict itself (from the
generator's global tensors, or, for FSDP2 state, DTensor.full_tensor()) and
the script FAILS unless torch's reference.pt equals it exactly (bit for bit,
dtypes, shapes, structure; see check_unshard.compare). Where the reference
cannot be produced by torch (a layout its FileSystemReader cannot read), the
generator's own expected dict is written as reference.pt instead and
manifest.json says "reference": "generator" (only rank_local: torch 2.14's
dcp_to_torch_save reads just __0.metadata there and returns zeros for the
other ranks' chunks; manifest.json "reference_note" records that).

Processes: torchranks.py (spawn: the parent has run DCP's threaded reader
by then, so fork is unsafe), gloo on 127.0.0.1 (free port; USE_LIBUV=0 is
needed by Debian's build). DTensors are built with
DTensor.from_local(local, mesh, placements, shape=, stride=) from boxes that
torch's own compute_local_shape_and_global_offset gives (gloo cannot scatter
bf16/bool, so distribute_tensor is not used). torch.chunk-style uneven
sharding: some ranks get short or EMPTY shards.

Cases:
  row        4 ranks, 1-D mesh, Shard(0): uneven (3,3,3,1), a rank with an
             empty shard, 1-D/2-D/3-D, f32 and bf16; one plain replicated
             tensor (deduplicated by DCP). Default writer (one file per rank).
  col        3 ranks, Shard(1) and Shard(2). FileSystemWriter(thread_count=2):
             two files per rank (__R_0, __R_1).
  mesh2d     4 ranks, 2x2 mesh ("dp", "tp"): [Shard(0), Shard(1)],
             [Shard(0), Shard(0)] (same dim twice), [Replicate(), Shard(1)],
             [Shard(1), Replicate()], [Replicate(), Replicate()].
  nested     4 ranks. A toy model (model.embed, model.layers.N.{fc1,fc2,norm},
             lm_head) under FSDP2 fully_shard, AdamW after one step (grads set
             directly), state from
             torch.distributed.checkpoint.state_dict.get_state_dict, saved as
             {"model": msd, "optim": osd, "train": {...}}: keys with dots
             inside (planner_data paths), 0-d "step" tensors, param_groups as
             byte items, train state with ints/floats/str/None/tuples
             (python RNG state), lists of tensors, a torch RNG state tensor.
  dtypes     2 ranks. Shard(0) DTensors for float64/32/16, bfloat16, int8/16/
             32/64, uint8, bool, complex64/128, uint16/32/64 and float8
             (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz) (the latter six are
             _rebuild_tensor_v3 / UntypedStorage in the zip); NaN payloads,
             +-inf, -0.0, min/max; a non-contiguous local shard; plain
             transposed (strides kept), sliced (cloned), 0-d and zero-element
             tensors.
  objects    2 ranks. single_file_per_rank=False (one file per item). Nested
             non-tensor values: flattened by the 2.4+ planner into separate
             byte items (dicts always descended, lists of scalars terminal,
             tuples terminal), lists of dicts, int/str/float/bool/None/bytes,
             an empty list, and an empty dict (which DCP drops: it is absent
             from reference.pt).
  zstd       (torch >= 2.7) 2 ranks. FileSystemWriter(_extensions=
             [ZStandard()]): every item zstd-compressed,
             transform_descriptors ['stream.zstd/1'].
  rank_local (torch with dcp.save(use_collectives=...)) 2 ranks. Each rank
             writes __R.metadata (no global .metadata) and its own data file.
  st_format  2 ranks. FileSystemWriter(serialization_format=SAFETENSORS):
             byte items, then one safetensors file of the rank's tensors per
             data file. torch cannot read it back: reference.pt is the
             generator's expected dict, checked against every rank file's
             tensors read by safetensors.torch.load.
  hf_sharded 2 ranks, tensors only. HuggingFaceStorageWriter(save_distributed=
             True, fqn_to_index_mapping: 2 files): shard-R-model-K-of-2
             .safetensors, no .metadata. reference/ = torch's
             consolidate_safetensors_files; reference.pt its tensors.
  hf_consolidated  the same with enable_consolidation=True: torch's own
             model-K-of-2.safetensors + index in ckpt/, shards in
             ckpt/sharded/; reference.pt = the consolidated tensors.

Exit status 0 when every requested case was written and checked.
"""
import argparse
import collections
import inspect
import json
import math
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: E402
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset  # noqa: E402

from check_unshard import compare  # noqa: E402
import torchranks  # noqa: E402

SEED = 20261121
VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


# --------------------------------------------------------------------------
# Values (same conventions as make_dcp.py)

def gen(tag):
    g = torch.Generator()
    g.manual_seed(SEED + sum(ord(c) * (i + 1) for i, c in enumerate(tag)))
    return g


_INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32,
             torch.float16: torch.int16, torch.bfloat16: torch.int16}
_NAN_BITS = {torch.float64: (0x7FF8000000000123, -0x0008000000000000),
             torch.float32: (0x7FC00123, -0x00400000),
             torch.float16: (0x7E03, -0x0200),
             torch.bfloat16: (0x7FC3, -0x0040)}
_UNSIGNED_WIDE = {"uint16": torch.int16, "uint32": torch.int32, "uint64": torch.int64}


def rand_tensor(dtype, shape, tag, specials=True):
    g = gen(tag)
    n = math.prod(shape)
    name = str(dtype).replace("torch.", "")
    if name.startswith("float8"):
        # random bytes, reinterpreted: covers every bit pattern incl. NaN
        b = torch.randint(0, 256, (n,), generator=g, dtype=torch.int64).to(torch.uint8)
        return b.view(dtype).reshape(shape)
    if name in _UNSIGNED_WIDE:
        it = _UNSIGNED_WIDE[name]
        ii = torch.iinfo(it)
        t = torch.randint(max(ii.min, -2**62), min(ii.max, 2**62), (n,), generator=g,
                          dtype=torch.int64).to(it)
        if specials and n >= 2:
            t[0] = -1          # all ones: the unsigned maximum
            t[1] = ii.min      # the top bit alone
        return t.view(dtype).reshape(shape)
    if dtype.is_floating_point:
        t = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)
        if specials and n:
            fi = torch.finfo(dtype)
            sp = [float("inf"), float("-inf"), -0.0, fi.tiny / 4, fi.max, fi.min, fi.eps, 0.0]
            k = min(len(sp), n)
            t[:k] = torch.tensor(sp[:k], dtype=torch.float64).to(dtype)
            iv = t.view(_INT_VIEW[dtype])
            a, b = _NAN_BITS[dtype]
            if n > k:
                iv[k] = a
            if n > k + 1:
                iv[k + 1] = b
        return t.reshape(shape)
    if dtype.is_complex:
        part = torch.float64 if dtype == torch.complex128 else torch.float32
        re = torch.randn(n, generator=g, dtype=torch.float64).to(part)
        im = torch.randn(n, generator=g, dtype=torch.float64).to(part)
        t = torch.complex(re, im)
        if specials and n >= 3:
            t[0] = complex(float("nan"), 1.0)
            t[1] = complex(-0.0, float("inf"))
            t[2] = complex(0.0, -0.0)
        return t.reshape(shape)
    if dtype == torch.bool:
        return (torch.randint(0, 2, (n,), generator=g) == 1).reshape(shape)
    ii = torch.iinfo(dtype)
    t = torch.randint(max(ii.min, -2**62), min(ii.max, 2**62), (n,), generator=g,
                      dtype=torch.int64).to(dtype)
    if specials and n >= 3:
        t[0], t[1], t[2] = ii.min, ii.max, 0
    return t.reshape(shape)


def f32(shape, tag):
    return rand_tensor(torch.float32, shape, tag, specials=False)


# --------------------------------------------------------------------------
# DTensor helpers

def dtensor(full, mesh, placements, noncontig=False):
    """A DTensor whose global value is `full`, built without collectives."""
    full = full.contiguous()
    shape, offset = compute_local_shape_and_global_offset(full.shape, mesh, placements)
    local = full
    for d, (o, s) in enumerate(zip(offset, shape)):
        local = local.narrow(d, o, s)
    local = local.clone()
    if noncontig and local.dim() == 2 and min(local.shape) > 1:
        local = local.t().contiguous().t()
    return DTensor.from_local(local, mesh, placements, run_check=False,
                              shape=full.shape, stride=full.stride())


class Case:
    """name, world, mesh shape, build(rank, mesh) -> (state_dict, expected),
    writer kwargs, save kwargs, min torch version."""

    def __init__(self, name, world, mesh_shape, build, writer=None, save=None,
                 min_version=(2, 6), mesh_names=None, check=None):
        self.name, self.world, self.mesh_shape = name, world, mesh_shape
        self.build, self.writer, self.save = build, writer or {}, save or {}
        self.min_version, self.mesh_names = min_version, mesh_names
        self.check = check

    def supported(self):
        if VERSION < self.min_version:
            return False, f"needs torch >= {self.min_version[0]}.{self.min_version[1]}"
        if self.check:
            return self.check()
        return True, ""


def _plain(x):
    return x.detach().contiguous().clone() if torch.is_tensor(x) else x


# --------------------------------------------------------------------------
# Cases

def build_row(rank, mesh):
    full = collections.OrderedDict([
        ("weight", f32((10, 6), "v2.row.weight")),
        ("embed", f32((5, 4), "v2.row.embed")),           # 2,2,1,0: rank 3 empty
        ("bias", f32((7,), "v2.row.bias")),
        ("cube", f32((6, 2, 3), "v2.row.cube")),
        ("bf16", rand_tensor(torch.bfloat16, (9, 4), "v2.row.bf16")),
    ])
    sd = collections.OrderedDict((k, dtensor(v, mesh, [Shard(0)])) for k, v in full.items())
    sd["replicated"] = f32((3, 3), "v2.row.rep")            # plain, on every rank
    full["replicated"] = sd["replicated"]
    return sd, full


def build_col(rank, mesh):
    full = collections.OrderedDict([
        ("w", f32((4, 10), "v2.col.w")),
        ("w3", f32((3, 2, 5), "v2.col.w3")),
        ("i64", rand_tensor(torch.int64, (3, 8), "v2.col.i64")),
    ])
    pl = {"w": [Shard(1)], "w3": [Shard(2)], "i64": [Shard(1)]}
    sd = collections.OrderedDict((k, dtensor(v, mesh, pl[k])) for k, v in full.items())
    return sd, full


def build_mesh2d(rank, mesh):
    specs = [
        ("s0_s1", (6, 10), [Shard(0), Shard(1)]),
        ("s0_s0", (10, 4), [Shard(0), Shard(0)]),
        ("r_s1", (3, 7), [Replicate(), Shard(1)]),
        ("s1_r", (4, 6), [Shard(1), Replicate()]),
        ("r_r", (2, 3), [Replicate(), Replicate()]),
        ("s0_s1_3d", (3, 5, 4), [Shard(0), Shard(1)]),
    ]
    full = collections.OrderedDict()
    sd = collections.OrderedDict()
    for name, shape, pl in specs:
        full[name] = f32(shape, "v2.m2d." + name)
        sd[name] = dtensor(full[name], mesh, pl)
    return sd, full


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 10)
        self.fc2 = torch.nn.Linear(10, 6, bias=False)
        self.norm = torch.nn.LayerNorm(6)


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.layers = torch.nn.ModuleList([Block(), Block()])


class Top(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = torch.nn.Linear(6, 11, bias=False)


def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def build_nested(rank, mesh):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    fully_shard = _fully_shard()
    torch.manual_seed(SEED)
    top = Top()
    for layer in top.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(top, mesh=mesh)
    opt = torch.optim.AdamW(top.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    # one step with deterministic gradients (FSDP2 forward needs an
    # accelerator stream API on CPU in some versions, so set grads directly)
    for i, (n, p) in enumerate(top.named_parameters()):
        gfull = f32(tuple(p.shape), "v2.nested.grad." + n)
        p.grad = dtensor(gfull, p.device_mesh, p.placements)
    opt.step()
    msd, osd = get_state_dict(top, opt)
    rs = random.Random(SEED)
    train = collections.OrderedDict([
        ("global_step", 1),
        ("epoch", 0),
        ("tokens_seen", 2**40 + 3),
        ("loss", 2.5),
        ("run_name", "toy-nested"),
        ("best", None),
        ("schedule", {"warmup": 10, "lrs": [0.0, 1e-3, 1e-2], "kind": "cosine"}),
        ("python_rng", rs.getstate()),
        ("torch_rng", torch.Generator().manual_seed(SEED).get_state()),
        ("ema", [f32((2, 3), "v2.nested.ema0"), f32((4,), "v2.nested.ema1")]),
        ("flags", {"resumed": False, "ids": (1, 2, 3)}),
    ])
    sd = collections.OrderedDict([("model", msd), ("optim", osd), ("train", train)])

    def full_of(x):
        if isinstance(x, DTensor):
            return x.full_tensor().detach().clone()
        if isinstance(x, dict):
            return type(x)((k, full_of(v)) for k, v in x.items()) \
                if not isinstance(x, collections.OrderedDict) else \
                collections.OrderedDict((k, full_of(v)) for k, v in x.items())
        if isinstance(x, list):
            return [full_of(v) for v in x]
        if isinstance(x, tuple):
            return tuple(full_of(v) for v in x)
        return _plain(x)
    return sd, full_of(sd)


DTYPE_NAMES = ["float64", "float32", "float16", "bfloat16", "int8", "int16", "int32",
               "int64", "uint8", "bool", "complex64", "complex128", "uint16", "uint32",
               "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]


def build_dtypes(rank, mesh):
    full = collections.OrderedDict()
    sd = collections.OrderedDict()
    for n in DTYPE_NAMES:
        dt = getattr(torch, n, None)
        if dt is None:
            continue
        t = rand_tensor(dt, (5, 3), "v2.dt.sh." + n)
        full[f"sharded.{n}"] = t
        sd[f"sharded.{n}"] = dtensor(t, mesh, [Shard(0)], noncontig=(rank == 0))
        p = rand_tensor(dt, (3, 4), "v2.dt.pl." + n)
        full[f"plain.{n}"] = sd[f"plain.{n}"] = p
        tr = rand_tensor(dt, (4, 3), "v2.dt.tr." + n).t()
        sd[f"transposed.{n}"] = tr
        full[f"transposed.{n}"] = tr.contiguous()
        sl = rand_tensor(dt, (6, 4), "v2.dt.sl." + n)[1:4, 1:3]
        sd[f"slice.{n}"] = sl
        full[f"slice.{n}"] = sl.contiguous()
        sc = rand_tensor(dt, (1,), "v2.dt.sc." + n, False).reshape(())
        full[f"scalar.{n}"] = sd[f"scalar.{n}"] = sc
        e = torch.zeros((0, 3), dtype=dt) if not n.startswith("float8") else \
            torch.zeros((0, 3), dtype=torch.uint8).view(dt)
        full[f"empty.{n}"] = sd[f"empty.{n}"] = e
    return sd, full


def build_objects(rank, mesh):
    extra = collections.OrderedDict([
        ("a", [1, 2]),
        ("s", "x"),
        ("f", 0.5),
        ("neg_zero", -0.0),
        ("nan", float("nan")),
        ("big", 2**70),
        ("flag", True),
        ("none", None),
        ("bytes", b"\x00\x01\xff"),
        ("tuple", (1, "two", 3.0)),
        ("unicode", "h\u00e9llo \u2713"),
        ("nested", {"deeper": {"k": "v", "n": [None, 1.5]}}),
        ("list_of_dicts", [{"k": 1}, {"k": 2, "s": "z"}]),
        ("empty_dict", {}),
        ("empty_list", []),
    ])
    w = f32((6, 4), "v2.obj.w")
    sd = collections.OrderedDict([("w", dtensor(w, mesh, [Shard(0)])), ("step", 42),
                                  ("extra", extra)])
    # DCP's flattening drops empty dicts (nothing to write for them), so an
    # unsharder cannot restore them: not part of the expected output.
    extra_exp = collections.OrderedDict((k, v) for k, v in extra.items() if k != "empty_dict")
    full = collections.OrderedDict([("w", w), ("step", 42), ("extra", extra_exp)])
    return sd, full


def build_zstd(rank, mesh):
    sd, full = build_row(rank, mesh)
    sd["meta"] = full["meta"] = {"compressed": True, "level": "default", "ids": [1, 2, 3]}
    sd["bf16_rep"] = full["bf16_rep"] = rand_tensor(torch.bfloat16, (4, 4), "v2.zstd.rep")
    return sd, full


def _zstd_writer():
    from torch.distributed.checkpoint._extension import ZStandard
    return {"_extensions": [ZStandard()]}


def _check_zstd():
    try:
        from torch.distributed.checkpoint._extension import ZStandard  # noqa: F401
        import zstandard  # noqa: F401
    except ImportError as e:
        return False, f"no ZStandard extension ({e})"
    if "_extensions" not in inspect.signature(dcp.FileSystemWriter.__init__).parameters:
        return False, "FileSystemWriter has no _extensions"
    return True, ""


def build_st(rank, mesh):
    """Tensors sharded on dim 0 and dim 1 (uneven), a replicated one, bf16
    and int64, and byte items: FileSystemWriter writes the byte items
    first, then one safetensors blob of the rank's tensors."""
    full = collections.OrderedDict([
        ("w0", f32((5, 4), "v2.st.w0")),
        ("w1", rand_tensor(torch.bfloat16, (3, 7), "v2.st.w1")),
        ("i64", rand_tensor(torch.int64, (6,), "v2.st.i64")),
    ])
    pl = {"w0": [Shard(0)], "w1": [Shard(1)], "i64": [Shard(0)]}
    sd = collections.OrderedDict((k, dtensor(v, mesh, pl[k])) for k, v in full.items())
    sd["rep"] = full["rep"] = f32((2, 3), "v2.st.rep")
    sd["step"] = full["step"] = 7
    sd["meta"] = full["meta"] = {"lr": 0.5, "ids": [1, 2]}
    return sd, full


def build_hf(rank, mesh):
    """Model weights only (safetensors holds tensors): HuggingFaceStorage-
    Writer with save_distributed=True, two output files by fqn."""
    full = collections.OrderedDict([
        ("model.embed.weight", f32((7, 4), "v2.hf.embed")),
        ("model.layers.0.mlp.weight", rand_tensor(torch.bfloat16, (4, 6), "v2.hf.mlp")),
        ("model.layers.0.norm.weight", f32((4,), "v2.hf.norm")),
        ("lm_head.weight", f32((7, 4), "v2.hf.head")),
    ])
    pl = {"model.embed.weight": [Shard(0)], "model.layers.0.mlp.weight": [Shard(1)],
          "lm_head.weight": [Shard(0)]}
    sd = collections.OrderedDict(
        (k, dtensor(v, mesh, pl[k]) if k in pl else v) for k, v in full.items())
    return sd, full


HF_FILES = {"model.embed.weight": 1, "model.layers.0.mlp.weight": 1,
            "model.layers.0.norm.weight": 2, "lm_head.weight": 2}


def _st_writer(path):
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    return dcp.FileSystemWriter(path, serialization_format=SerializationFormat.SAFETENSORS)


def _hf_writer(path, consolidate=False):
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    return HuggingFaceStorageWriter(path, fqn_to_index_mapping=dict(HF_FILES),
                                    save_distributed=True,
                                    enable_consolidation=consolidate)


def _hf_consolidated_writer(path):
    return _hf_writer(path, consolidate=True)


def _check_st():
    try:
        from torch.distributed.checkpoint.filesystem import SerializationFormat  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as e:
        return False, f"no safetensors serialization ({e})"
    return True, ""


def _check_hf():
    try:
        from torch.distributed.checkpoint import HuggingFaceStorageWriter  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as e:
        return False, f"no HuggingFaceStorageWriter ({e})"
    return True, ""


def _check_rank_local():
    if "use_collectives" not in inspect.signature(dcp.save).parameters:
        return False, "dcp.save has no use_collectives"
    return True, ""


CASES = [
    Case("row", 4, (4,), build_row),
    Case("col", 3, (3,), build_col, writer={"thread_count": 2}),
    Case("mesh2d", 4, (2, 2), build_mesh2d, mesh_names=("dp", "tp")),
    Case("nested", 4, (4,), build_nested),
    Case("dtypes", 2, (2,), build_dtypes),
    Case("objects", 2, (2,), build_objects, writer={"single_file_per_rank": False}),
    Case("zstd", 2, (2,), build_zstd, writer="zstd", check=_check_zstd),
    Case("rank_local", 2, (2,), build_row, save={"use_collectives": False},
         check=_check_rank_local),
    Case("st_format", 2, (2,), build_st, writer=_st_writer, check=_check_st),
    Case("hf_sharded", 2, (2,), build_hf, writer=_hf_writer, check=_check_hf),
    Case("hf_consolidated", 2, (2,), build_hf, writer=_hf_consolidated_writer,
         check=_check_hf),
]


# --------------------------------------------------------------------------
# Workers

def _writer_kwargs(case):
    if callable(case.writer):
        return {"writer": getattr(case.writer, "__name__", "writer")}
    return _zstd_writer() if case.writer == "zstd" else dict(case.writer)


def _make_writer(case, path):
    if callable(case.writer):
        return case.writer(path)
    return dcp.FileSystemWriter(path, **_writer_kwargs(case))


def _worker(rank, world, case, outdir):
    mesh = init_device_mesh("cpu", case.mesh_shape, mesh_dim_names=case.mesh_names)
    sd, expected = case.build(rank, mesh)
    if rank == 0:
        torch.save(expected, os.path.join(outdir, "expected.pt"))
        _write_manifest(case, sd, outdir)
    writer = _make_writer(case, os.path.join(outdir, "ckpt"))
    dcp.save(sd, storage_writer=writer, **case.save)


def run_ranks(case, outdir, timeout):
    torchranks.run(_worker, case.world, args=(case, outdir), timeout=timeout,
                   start_method="spawn", what=f"{case.name}: ranks")


def _flat_keys(sd, prefix=""):
    """Flattened keys as DCP's default planner names them (for the manifest)."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    flat, mapping = flatten_state_dict(sd)
    return flat, mapping


def _write_manifest(case, sd, outdir):
    flat, mapping = _flat_keys(sd)
    keys = collections.OrderedDict()
    for k, v in flat.items():
        if isinstance(v, DTensor):
            keys[k] = {"kind": "dtensor", "dtype": str(v.dtype).replace("torch.", ""),
                       "shape": list(v.shape), "placements": [str(p) for p in v.placements],
                       "path": list(mapping.get(k, (k,)))}
        elif torch.is_tensor(v):
            keys[k] = {"kind": "tensor", "dtype": str(v.dtype).replace("torch.", ""),
                       "shape": list(v.shape), "stride": list(v.stride()),
                       "path": list(mapping.get(k, (k,)))}
        else:
            keys[k] = {"kind": "bytes", "type": type(v).__name__,
                       "path": list(mapping.get(k, (k,)))}
    man = {
        "case": case.name,
        "generator": "tests/support/make_dcp_v2.py",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "world_size": case.world,
        "mesh_shape": list(case.mesh_shape),
        "mesh_dim_names": list(case.mesh_names) if case.mesh_names else None,
        "writer": {k: (v if isinstance(v, (int, bool, str)) else repr(v))
                   for k, v in _writer_kwargs(case).items()},
        "save": case.save,
        "keys": keys,
    }
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1)
        f.write("\n")


def _note_manifest(outdir, **kw):
    p = os.path.join(outdir, "manifest.json")
    with open(p) as f:
        man = json.load(f)
    man.update(kw)
    with open(p, "w") as f:
        json.dump(man, f, indent=1)
        f.write("\n")


def _torch_attempt(outdir, expected):
    """What torch's dcp_to_torch_save makes of outdir/ckpt, in words."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    tmp = os.path.join(outdir, "torch-attempt.pt")
    try:
        dcp_to_torch_save(os.path.join(outdir, "ckpt"), tmp)
        r = compare(torch.load(tmp, weights_only=False), expected)
        note = "matches" if r.ok else f"differs at {r.path}: {r.msg}"
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001  (CheckpointException is one)
        last = str(e).strip().splitlines()[-1:] or [""]
        note = f"failed: {type(e).__name__}: {last[0][:200]}"
    if os.path.exists(tmp):
        os.remove(tmp)
    return note


def _st_reference(outdir, exp_path, ref_path):
    """serialization_format=SAFETENSORS: torch 2.14 writes it but none of
    its readers reads it back (FileSystemReader torch.loads each item;
    dcp_to_torch_save fails), so the reference is the generator's expected
    dict, checked here against each rank file read by the safetensors
    package itself: the blob after the byte items is one safetensors file
    whose tensors are the rank's chunks at __metadata__ DCP_SHARDING_INFO's
    saved_offsets."""
    from safetensors.torch import load as st_load
    import torch.distributed.checkpoint as d
    expected = torch.load(exp_path, weights_only=False)
    md = d.FileSystemReader(os.path.join(outdir, "ckpt")).read_metadata()
    seen = 0
    for f in sorted(os.listdir(os.path.join(outdir, "ckpt"))):
        if not f.endswith(".distcp"):
            continue
        data = open(os.path.join(outdir, "ckpt", f), "rb").read()
        starts = {v.offset for k, v in md.storage_data.items()
                  if v.relative_path == f and k.fqn in expected and
                  torch.is_tensor(expected[k.fqn])}
        if not starts:
            continue
        assert len(starts) == 1, f"{f}: tensors at several offsets {starts}"
        blob = data[starts.pop():]
        hlen = int.from_bytes(blob[:8], "little")
        info = json.loads(json.loads(blob[8:8 + hlen])["__metadata__"]["DCP_SHARDING_INFO"])
        for k, t in st_load(blob).items():
            off = info[k]["saved_offsets"]
            want = expected[k]
            for dim, o in enumerate(off):
                want = want.narrow(dim, o, t.shape[dim])
            assert t.dtype == want.dtype and torch.equal(
                t.view(torch.uint8) if t.is_floating_point() else t,
                want.contiguous().view(torch.uint8) if t.is_floating_point() else want), (f, k)
            seen += 1
    shutil.copyfile(exp_path, ref_path)
    _note_manifest(outdir, reference_note=(
        "torch's dcp_to_torch_save " + _torch_attempt(outdir, expected) +
        f"; the generator's expected dict, checked against {seen} chunks read by "
        "safetensors.torch.load from the blob each .distcp file ends with")[:600])
    return "generator"


def _hf_reference(case, outdir, exp_path, ref_path):
    """HuggingFaceStorageWriter: torch's own consolidation
    (consolidate_safetensors_files, the code finish() runs with
    enable_consolidation) into reference/ -- for hf_consolidated the files
    it already wrote beside sharded/ -- and reference.pt, the torch.save of
    those files' tensors (safetensors.torch.load_file), which must equal
    the generator's expected dict."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint._consolidate_hf_safetensors import \
        consolidate_safetensors_files
    ckpt = os.path.join(outdir, "ckpt")
    if case.name == "hf_consolidated":
        ref_dir = ckpt
    else:
        ref_dir = os.path.join(outdir, "reference")
        os.makedirs(ref_dir)
        consolidate_safetensors_files(input_dir=ckpt, output_dir=ref_dir,
                                      fqn_to_index_mapping=dict(HF_FILES))
    expected = torch.load(exp_path, weights_only=False)
    got = {}
    for f in sorted(os.listdir(ref_dir)):
        if f.endswith(".safetensors"):
            got.update(load_file(os.path.join(ref_dir, f)))
    ordered = collections.OrderedDict((k, got[k]) for k in expected if k in got)
    assert set(got) == set(expected), (sorted(got), list(expected))
    torch.save(ordered, ref_path)
    _note_manifest(outdir, reference_note=(
        "consolidate_safetensors_files output in " + os.path.relpath(ref_dir, outdir) +
        "/; reference.pt = its tensors (safetensors.torch.load_file) in state dict "
        "order; torch's dcp_to_torch_save " + _torch_attempt(outdir, expected))[:600])
    return "torch"


def make_case(case, out, timeout):
    outdir = os.path.join(out, case.name)
    if os.path.exists(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    t0 = time.monotonic()
    run_ranks(case, outdir, timeout)
    ckpt = os.path.join(outdir, "ckpt")
    exp_path = os.path.join(outdir, "expected.pt")
    ref_path = os.path.join(outdir, "reference.pt")
    expected = torch.load(exp_path, weights_only=False)
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    if case.name.startswith("hf_"):
        source = _hf_reference(case, outdir, exp_path, ref_path)
    elif case.name == "st_format":
        source = _st_reference(outdir, exp_path, ref_path)
    elif case.save.get("use_collectives") is False:
        # Rank-local metadata: dcp_to_torch_save (no_dist) falls back to
        # __0.metadata ONLY and silently returns zeros for the other ranks'
        # chunks (seen with 2.14.1), so torch cannot make the reference. Use
        # the generator's expected dict, and record what torch did.
        tmp = os.path.join(outdir, "torch-attempt.pt")
        try:
            dcp_to_torch_save(ckpt, tmp)
            r = compare(torch.load(tmp, weights_only=False), expected)
            note = "matches" if r.ok else f"differs at {r.path}: {r.msg}"
        except Exception as e:  # noqa: BLE001
            note = f"failed: {type(e).__name__}: {e}"
        if os.path.exists(tmp):
            os.remove(tmp)
        shutil.copyfile(exp_path, ref_path)
        source = "generator"
        _note_manifest(outdir, reference_note=("torch's dcp_to_torch_save (no_dist, rank-local "
                                               "metadata) " + note)[:400])
    else:
        dcp_to_torch_save(ckpt, ref_path)
        source = "torch"
    ref = torch.load(ref_path, weights_only=False)
    res = compare(ref, expected)
    if not res.ok:
        raise AssertionError(f"{case.name}: torch reference differs from the generator's "
                             f"expected state dict at {res.path}: {res.msg}")
    os.remove(exp_path)
    _note_manifest(outdir, reference=source,
                   reference_contents=f"{res.tensors} tensors, {res.values} values")
    print(f"make_dcp_v2: {case.name}: {case.world} ranks, reference from {source}, "
          f"{res.tensors} tensors, {res.values} values ({time.monotonic() - t0:.1f}s)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--case", action="append", choices=[c.name for c in CASES])
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    wanted = args.case or [c.name for c in CASES]
    skipped = []
    for case in CASES:
        if case.name not in wanted:
            continue
        ok, why = case.supported()
        if not ok:
            print(f"make_dcp_v2: {case.name}: skipped: {why}")
            skipped.append(f"{case.name}: {why}")
            if args.case:
                return 1
            continue
        make_case(case, out, args.timeout)
    with open(os.path.join(out, "SKIPPED.txt"), "w") as f:
        f.write("".join(s + "\n" for s in skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
