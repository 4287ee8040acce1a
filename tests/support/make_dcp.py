#!/usr/bin/python3
"""make_dcp.py: write a REAL torch 1.13 distributed (DCP) checkpoint plus the
state dict a correct unsharder must produce from it.

Runs at test time with Debian bookworm's torch 1.13 (python3-torch 1.13.1,
Python 3.11):

    /usr/bin/python3 tests/support/make_dcp.py OUTDIR --case CASE [options]

Options:
    --case CASE       rows | cols | blocks2d | multi | replicated | dtypes |
                      objects | olmo | all | big        (required)
    --ranks N         world size (default: the case's own, 2-4; big: 8)
    --size-mb N       big only: total tensor payload in MiB (default 64)
    --no-expected     do not write OUTDIR/expected.pt (and expected_olmo/)
    --verify          after saving, load the checkpoint back with torch's own
                      DCP loader (load_state_dict, no_dist, into full-size
                      targets) and compare with expected.pt (default for every
                      case but big)
    --no-verify       skip that
    --timeout S       give up (and kill the workers) after S seconds (default 120)

Writes (OUTDIR is created; it must not contain ckpt/ already):
    OUTDIR/ckpt/              the DCP checkpoint: .metadata + __R_N.distcp
                              (for --case olmo: an OLMo torch_new step dir, see
                              below)
    OUTDIR/expected.pt        torch.save of {fqn: value}: every ShardedTensor
                              and plain tensor as ONE full, contiguous, plain
                              tensor (same dtype, same shape), every other value
                              as the Python object the coordinator rank saved.
                              torch 1.13 DCP does NOT flatten or nest: the keys
                              are exactly the top-level keys of the saved state
                              dict (flat keys such as "model.wte.weight" stay
                              flat; a nested dict is ONE byte item).
    OUTDIR/manifest.json      what was saved: case, torch/python versions,
                              world size, coordinator rank,
                              single_file_per_rank, and per key its kind
                              ("sharded" / "tensor" / "bytes"), dtype, shape and
                              the chunk boxes [[rank, offsets, sizes], ...].

How the checkpoint is written: torchranks.py starts the ranks (fork), each
joins a gloo process group on 127.0.0.1 (free port), builds its
ShardedTensors with init_from_local_shards (placement "rank:R/cpu") and calls
torch.distributed._shard.checkpoint.save_state_dict(sd, FileSystemWriter(...),
coordinator_rank=C). In 1.13 only the coordinator writes plain tensors and
byte items (so replicated values are stored once, in __C_*.distcp), and
ShardedTensor shards are written by their owner. single_file_per_rank=False
(1.13's default) gives one file per item (__R_0, __R_1, ...); True gives one
__R_0.distcp per rank with items at offsets.

Cases (all deterministic, seeded; tensors of at most a few KB):
  rows        3 ranks. Row (dim 0) sharding, uneven; one rank owns no shard of
              one tensor; a zero-row chunk; 1-D, 2-D and 3-D tensors.
              single_file_per_rank=False.
  cols        2 ranks. Sharding along dim 1 and dim 2 (2-D and 3-D).
              single_file_per_rank=True.
  blocks2d    4 ranks. 2-D block grids with uneven blocks, also a 3-D tensor
              blocked on dims 0 and 2.
  multi       3 ranks. Several shards per rank: round-robin row blocks, and a
              non-grid tiling of rectangles, listed out of order.
              single_file_per_rank=True.
  replicated  3 ranks, coordinator_rank=1. Plain tensors present on every rank
              (only the coordinator's copy is written), a rank-dependent int
              ("writer_rank": expected is the coordinator's value), plus one
              ShardedTensor. single_file_per_rank=True.
  dtypes      2 ranks. For every dtype torch 1.13 can save (float64, float32,
              float16, bfloat16, int8, int16, int32, int64, uint8, bool,
              complex64, complex128): a row-sharded tensor whose rank-0 shard
              is column-major (non-contiguous, saved with its strides), a
              plain tensor, a transposed plain tensor (non-contiguous, saved
              with strides (1, n)), a narrowed slice of a bigger tensor
              (cloned by DCP), a 0-d tensor and a zero-element tensor. Floats
              include NaNs with payloads and sign, +-inf, -0.0, denormals,
              extremes; ints include min/max. Also a requires_grad shard.
  objects     2 ranks. Byte items: ints (small, negative, 2**70), floats (0.1,
              nan, inf, -0.0), str (unicode, empty, long), bytes, bool, None,
              lists, tuples, nested dicts, int dict keys, OrderedDict, a
              2500-element list, torch.Size, a dtype, a set, a bytearray,
              and a dict that holds tensors (the byte item
              then has data/N records). Plus one ShardedTensor.
              single_file_per_rank=True. All values are of types the
              weights_only allow-list of torch 2.x accepts.
  olmo        3 ranks. OLMo torch_new-like step dir, as close as 1.13 allows
              (1.13 cannot flatten nested dicts, so keys are flat):
                ckpt/model_and_optim/   DCP with keys model.<fqn> (fp32
                                        ShardedTensors, FSDP-style
                                        tensor.chunk(world) row shards, a rank
                                        with no shard for small params),
                                        optim.state.<fqn>.exp_avg /
                                        .exp_avg_sq (sharded like the param),
                                        optim.state.<fqn>.step (0-d fp32, plain),
                                        optim.param_groups (byte item).
                ckpt/train/rank{R}.pt   per-rank trainer state via torch.save
                                        (pathlib.PosixPath, numpy and python
                                        RNG states, torch RNG state, counters)
                ckpt/config.yaml
              Besides expected.pt (flat, authoritative) it writes
              OUTDIR/expected_olmo/model.pt ({fqn: tensor}, "model." stripped)
              and expected_olmo/train.pt (a byte-for-byte copy of
              train/rank0.pt). The nesting of optim.* keys cannot be recovered
              from a 1.13 checkpoint, so there is no expected optim.pt; use the
              torch 2.x fixtures (tests/fixtures/dcp-v2.*) for that.
  all         3 ranks. A small mix of all of the above in one checkpoint.
              single_file_per_rank=True.
  big         --ranks (default 8) ranks, --size-mb total. ~300 tensors, bf16
              and fp32, mixed: row shards, column shards, 2-D blocks, several
              shards per rank, replicated plain tensors, a few byte items.
              single_file_per_rank=True. Use --no-expected for benchmarks.

Exit status 0 on success; non-zero (with a message) on any failure or timeout.
"""
import argparse
import collections
import json
import math
import os
import pathlib
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402
from torch.distributed._shard.sharded_tensor import (  # noqa: E402
    Shard, ShardMetadata, init_from_local_shards)
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
import torchranks  # noqa: E402

SEED = 20261121


# --------------------------------------------------------------------------
# Case description

class Sharded:
    """A global tensor split into boxes; each box is owned by one rank."""

    def __init__(self, full, shards, noncontig_ranks=(), requires_grad=False):
        self.full = full.contiguous()
        # shards: list of (rank, offsets, sizes)
        self.shards = [(r, tuple(o), tuple(s)) for r, o, s in shards]
        self.noncontig_ranks = set(noncontig_ranks)
        self.requires_grad = requires_grad
        _check_tiling(self.full.shape, [(o, s) for _, o, s in self.shards])


class Plain:
    """A value present in every rank's state dict (tensor or object).
    value_fn(rank) may make it rank-dependent; only the coordinator's is saved."""

    def __init__(self, value=None, value_fn=None):
        self.value = value
        self.value_fn = value_fn

    def for_rank(self, rank):
        return self.value_fn(rank) if self.value_fn else self.value


class Spec:
    def __init__(self, name, world, single_file=False, coordinator=0):
        self.name = name
        self.world = world
        self.single_file = single_file
        self.coordinator = coordinator
        self.entries = collections.OrderedDict()

    def add(self, fqn, entry):
        assert fqn not in self.entries, fqn
        if isinstance(entry, Sharded):
            for r, _, _ in entry.shards:
                assert 0 <= r < self.world, (fqn, r, self.world)
        self.entries[fqn] = entry


def _check_tiling(shape, boxes):
    """Boxes must be inside the tensor, disjoint, and cover it exactly."""
    total = 0
    for o, s in boxes:
        assert len(o) == len(shape) == len(s), (shape, o, s)
        for d in range(len(shape)):
            assert 0 <= o[d] and o[d] + s[d] <= shape[d], (shape, o, s)
        total += math.prod(s)
    assert total == math.prod(shape), ("boxes do not cover", shape, boxes)
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            (oa, sa), (ob, sb) = boxes[i], boxes[j]
            if math.prod(sa) == 0 or math.prod(sb) == 0:
                continue
            if all(oa[d] < ob[d] + sb[d] and ob[d] < oa[d] + sa[d]
                   for d in range(len(shape))):
                raise AssertionError(("overlap", boxes[i], boxes[j]))


def _box(t, offsets, sizes):
    for d, (o, s) in enumerate(zip(offsets, sizes)):
        t = t.narrow(d, o, s)
    return t


# --------------------------------------------------------------------------
# Sharding helpers

def split_sizes(n, parts):
    """FSDP/torch.chunk-style split of n into at most `parts` pieces (the last
    ones may be short or missing), padded with zero-size pieces."""
    if n == 0:
        return [0] * parts
    c = -(-n // parts)
    out = []
    left = n
    for _ in range(parts):
        k = min(c, left)
        out.append(k)
        left -= k
    return out


def shards_along(shape, dim, sizes, ranks):
    """One shard per entry of sizes along dim, owned by ranks[i]."""
    out = []
    off = 0
    for r, s in zip(ranks, sizes):
        o = [0] * len(shape)
        o[dim] = off
        sz = list(shape)
        sz[dim] = s
        out.append((r, o, sz))
        off += s
    assert off == shape[dim]
    return out


def grid(shape, dims, splits, owner):
    """Block grid over dims (tuple of 2 dims) with split sizes per dim;
    owner(i, j) gives the rank of block (i, j)."""
    out = []
    d0, d1 = dims
    o0 = 0
    for i, s0 in enumerate(splits[0]):
        o1 = 0
        for j, s1 in enumerate(splits[1]):
            o = [0] * len(shape)
            sz = list(shape)
            o[d0], o[d1] = o0, o1
            sz[d0], sz[d1] = s0, s1
            out.append((owner(i, j), o, sz))
            o1 += s1
        o0 += s0
    return out


# --------------------------------------------------------------------------
# Values

def gen(tag):
    g = torch.Generator()
    g.manual_seed(SEED + sum(ord(c) * (i + 1) for i, c in enumerate(tag)))
    return g


FLOAT_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
COMPLEX_DTYPES = [torch.complex64, torch.complex128]
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + [torch.bool] + COMPLEX_DTYPES

_INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32,
             torch.float16: torch.int16, torch.bfloat16: torch.int16}
# NaN bit patterns with payload / sign: (quiet payload nan, negative nan)
_NAN_BITS = {torch.float64: (0x7FF8000000000123, -0x0008000000000000),
             torch.float32: (0x7FC00123, -0x00400000),
             torch.float16: (0x7E03, -0x0200),
             torch.bfloat16: (0x7FC3, -0x0040)}


def rand_tensor(dtype, shape, tag, specials=True):
    """Deterministic values of dtype; with specials, the first elements hold
    edge values (NaN payloads, inf, -0.0, denormal, extremes, min/max)."""
    g = gen(tag)
    n = math.prod(shape)
    if dtype.is_floating_point:
        t = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)
        if specials and n:
            fi = torch.finfo(dtype)
            sp = [float("inf"), float("-inf"), -0.0, fi.tiny / 4, fi.max,
                  fi.min, fi.eps, 0.0]
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
    lo, hi = max(ii.min, -2**62), min(ii.max, 2**62)
    t = torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)
    if specials and n >= 3:
        t[0] = ii.min
        t[1] = ii.max
        t[2] = 0
    return t.reshape(shape)


def f32(shape, tag):
    return rand_tensor(torch.float32, shape, tag, specials=False)


# --------------------------------------------------------------------------
# Cases

def case_rows(world=3, prefix="", spec=None):
    spec = spec or Spec("rows", world)
    w = spec.world
    r = list(range(w))
    spec.add(prefix + "weight", Sharded(
        f32((10, 6), prefix + "rows.weight"),
        shards_along((10, 6), 0, [4, 4, 2] if w == 3 else split_sizes(10, w), r)))
    # one rank (1) owns nothing
    spec.add(prefix + "embed", Sharded(
        f32((7, 5), prefix + "rows.embed"),
        shards_along((7, 5), 0, [3, 4], [0, w - 1])))
    spec.add(prefix + "bias", Sharded(
        f32((11,), prefix + "rows.bias"),
        shards_along((11,), 0, split_sizes(11, w), r)))
    # 2 rows over 3 ranks: last rank holds a zero-row chunk
    spec.add(prefix + "tiny", Sharded(
        f32((2, 4), prefix + "rows.tiny"),
        shards_along((2, 4), 0, split_sizes(2, w), r)))
    spec.add(prefix + "cube", Sharded(
        f32((5, 2, 3), prefix + "rows.cube"),
        shards_along((5, 2, 3), 0, split_sizes(5, w), r)))
    return spec


def case_cols(world=2, prefix="", spec=None):
    spec = spec or Spec("cols", world, single_file=True)
    w = spec.world
    r = list(range(w))
    spec.add(prefix + "w", Sharded(
        f32((4, 9), prefix + "cols.w"), shards_along((4, 9), 1, split_sizes(9, w), r)))
    spec.add(prefix + "w3_dim1", Sharded(
        f32((2, 7, 3), prefix + "cols.w3"),
        shards_along((2, 7, 3), 1, split_sizes(7, w), r[::-1])))
    spec.add(prefix + "w3_dim2", Sharded(
        f32((3, 2, 5), prefix + "cols.w3b"),
        shards_along((3, 2, 5), 2, split_sizes(5, w), r)))
    return spec


def case_blocks2d(world=4, prefix="", spec=None):
    spec = spec or Spec("blocks2d", world)
    w = spec.world
    spec.add(prefix + "w", Sharded(
        f32((6, 10), prefix + "b2d.w"),
        grid((6, 10), (0, 1), ([4, 2], [3, 7]), lambda i, j: (2 * i + j) % w)))
    spec.add(prefix + "v", Sharded(
        f32((7, 5), prefix + "b2d.v"),
        grid((7, 5), (0, 1), ([3, 4], [2, 3]), lambda i, j: (i + 2 * j) % w)))
    spec.add(prefix + "t3", Sharded(
        f32((4, 3, 6), prefix + "b2d.t3"),
        grid((4, 3, 6), (0, 2), ([1, 3], [4, 2]), lambda i, j: (3 - 2 * i - j) % w)))
    return spec


def case_multi(world=3, prefix="", spec=None):
    spec = spec or Spec("multi", world, single_file=True)
    w = spec.world
    # 6 row blocks of 2 rows, round-robin: rank r owns blocks r, r+w, ...
    spec.add(prefix + "rr", Sharded(
        f32((12, 4), prefix + "multi.rr"),
        shards_along((12, 4), 0, [2] * 6, [i % w for i in range(6)])))
    # non-grid tiling of a 5x5, listed out of order
    tiles = [((2, 1), (3, 4)), ((0, 0), (2, 3)), ((2, 0), (3, 1)), ((0, 3), (2, 2))]
    spec.add(prefix + "tiles", Sharded(
        f32((5, 5), prefix + "multi.tiles"),
        [(i % w if i < 2 else 0, o, s) for i, (o, s) in enumerate(tiles)]))
    # rank 0 holds all, as 3 column pieces
    spec.add(prefix + "one_owner", Sharded(
        f32((3, 6), prefix + "multi.one"),
        shards_along((3, 6), 1, [1, 2, 3], [0, 0, 0])))
    return spec


def case_replicated(world=3, prefix="", spec=None):
    spec = spec or Spec("replicated", world, single_file=True, coordinator=1)
    spec.add(prefix + "rep_f32", Plain(f32((3, 4), prefix + "rep.a")))
    spec.add(prefix + "rep_i64", Plain(rand_tensor(torch.int64, (5,), prefix + "rep.b")))
    spec.add(prefix + "rep_bf16", Plain(rand_tensor(torch.bfloat16, (2, 2), prefix + "rep.c", False)))
    spec.add(prefix + "rep_scalar", Plain(torch.tensor(2.5)))
    spec.add(prefix + "writer_rank", Plain(value_fn=lambda rank: rank))
    spec.add(prefix + "sharded", Sharded(
        f32((4, 4), prefix + "rep.s"), shards_along((4, 4), 0, split_sizes(4, spec.world),
                                                    list(range(spec.world)))))
    return spec


def case_dtypes(world=2, prefix="", spec=None, dtypes=ALL_DTYPES):
    spec = spec or Spec("dtypes", world)
    w = spec.world
    for dt in dtypes:
        n = str(dt).replace("torch.", "")
        spec.add(f"{prefix}sharded.{n}", Sharded(
            rand_tensor(dt, (5, 3), f"{prefix}dt.sh.{n}"),
            shards_along((5, 3), 0, [3, 2] if w == 2 else split_sizes(5, w), list(range(w))),
            noncontig_ranks=(0,)))
        spec.add(f"{prefix}plain.{n}", Plain(rand_tensor(dt, (3, 4), f"{prefix}dt.pl.{n}")))
        # transposed view of a 4x3 tensor: shape (3, 4), strides (1, 3)
        spec.add(f"{prefix}transposed.{n}",
                 Plain(rand_tensor(dt, (4, 3), f"{prefix}dt.tr.{n}").t()))
        # narrow slice of a bigger tensor (storage larger than numel)
        spec.add(f"{prefix}slice.{n}",
                 Plain(rand_tensor(dt, (6, 4), f"{prefix}dt.sl.{n}")[1:4, 1:3]))
        spec.add(f"{prefix}scalar.{n}",
                 Plain(rand_tensor(dt, (1,), f"{prefix}dt.sc.{n}", False).reshape(())))
        spec.add(f"{prefix}empty.{n}", Plain(torch.zeros((0, 3), dtype=dt)))
    spec.add(f"{prefix}requires_grad", Sharded(
        f32((4, 2), f"{prefix}dt.rg"), shards_along((4, 2), 0, split_sizes(4, w), list(range(w))),
        requires_grad=True))
    return spec


def object_values():
    return collections.OrderedDict([
        ("int", 7), ("neg_int", -3), ("big_int", 2**70), ("neg_big_int", -(2**65) - 1),
        ("int32_edge", 2**31), ("float", 0.1), ("nan", float("nan")),
        ("inf", float("inf")), ("neg_zero", -0.0),
        ("str", "h\u00e9llo \u2713 \U0001F600"), ("empty_str", ""),
        ("long_str", "x" * 300), ("bytes", b"\x00\xffbin"),
        ("true", True), ("false", False), ("none", None),
        ("list", [1, 2.5, "x", None, [True]]),
        ("tuple", (1, (2, 3), "t")), ("empty", {}),
        ("nested", {"a": {"b": [1, {"c": "d"}]}, "lr": 1e-3, "betas": (0.9, 0.95)}),
        ("int_keys", {1: "a", 2: "b", -1: "neg"}),
        ("ordered", collections.OrderedDict([("z", 1), ("a", 2)])),
        ("long_list", list(range(2500))),
        ("size", torch.Size([2, 3])), ("dtype", torch.bfloat16),
        ("set", {3, 1}), ("bytearray", bytearray(b"ba")),
        ("with_tensors", {"t": torch.arange(6, dtype=torch.int32).reshape(2, 3),
                          "u": [torch.tensor([1.5, -2.0], dtype=torch.float64)],
                          "n": 5}),
    ])


def case_objects(world=2, prefix="", spec=None):
    spec = spec or Spec("objects", world, single_file=True)
    for k, v in object_values().items():
        spec.add(prefix + k, Plain(v))
    spec.add(prefix + "sharded", Sharded(
        f32((3, 3), prefix + "obj.s"), shards_along((3, 3), 0, split_sizes(3, spec.world),
                                                    list(range(spec.world)))))
    return spec


OLMO_PARAMS = [  # fqn, shape
    ("transformer.wte.weight", (50, 16)),
    ("transformer.blocks.0.att_proj.weight", (48, 16)),
    ("transformer.blocks.0.attn_out.weight", (16, 16)),
    ("transformer.blocks.0.ff_proj.weight", (40, 16)),
    ("transformer.blocks.0.ff_out.weight", (16, 20)),
    ("transformer.blocks.0.attn_norm.weight", (16,)),
    ("transformer.blocks.0.attn_norm.bias", (2,)),
    ("transformer.ln_f.weight", (16,)),
]


def case_olmo(world=3, prefix="", spec=None):
    spec = spec or Spec("olmo", world, single_file=True)
    w = spec.world
    r = list(range(w))
    groups = {"lr": 4e-4, "betas": (0.9, 0.95), "eps": 1e-5, "weight_decay": 0.1,
              "amsgrad": False, "maximize": False, "foreach": None,
              "capturable": False, "initial_lr": 4e-4, "params": []}
    for fqn, shape in OLMO_PARAMS:
        sh = shards_along(shape, 0, split_sizes(shape[0], w), r)
        spec.add(f"{prefix}model.{fqn}", Sharded(f32(shape, "olmo.p." + fqn), sh))
    for fqn, shape in OLMO_PARAMS:
        sh = shards_along(shape, 0, split_sizes(shape[0], w), r)
        spec.add(f"{prefix}optim.state.{fqn}.step", Plain(torch.tensor(3.0)))
        spec.add(f"{prefix}optim.state.{fqn}.exp_avg",
                 Sharded(f32(shape, "olmo.m." + fqn) * 1e-3, sh))
        spec.add(f"{prefix}optim.state.{fqn}.exp_avg_sq",
                 Sharded(f32(shape, "olmo.v." + fqn).abs() * 1e-6, sh))
        groups["params"].append(fqn)
    spec.add(f"{prefix}optim.param_groups", Plain([groups]))
    return spec


def case_all(world=3):
    spec = Spec("all", world, single_file=True)
    case_rows(spec=spec, prefix="rows.")
    case_cols(spec=spec, prefix="cols.")
    case_blocks2d(spec=spec, prefix="b2d.")
    case_multi(spec=spec, prefix="multi.")
    case_replicated(spec=spec, prefix="rep.")
    case_dtypes(spec=spec, prefix="dt.",
                dtypes=[torch.bfloat16, torch.float16, torch.int8, torch.bool,
                        torch.complex64])
    spec.add("obj.nested", Plain(object_values()["nested"]))
    spec.add("obj.step", Plain(11))
    spec.add("obj.str", Plain(object_values()["str"]))
    return spec


def case_big(world=8, size_mb=64):
    """~300 tensors totalling size_mb MiB; bf16 and fp32; mixed sharding."""
    spec = Spec("big", world, single_file=True)
    n = 300
    budget = size_mb * 2**20
    rng = random.Random(SEED)
    weights = [rng.uniform(0.2, 2.0) for _ in range(n)]
    scale = budget / sum(weights)
    r = list(range(world))
    for i in range(n):
        dt = torch.bfloat16 if i % 2 == 0 else torch.float32
        nbytes = max(64, int(weights[i] * scale))
        cols = rng.choice([64, 128, 256, 512, 1024])
        rows = max(1, nbytes // (cols * (2 if dt == torch.bfloat16 else 4)))
        shape = (rows, cols)
        kind = i % 6
        fqn = f"layers.{i // 6}.{['row', 'col', 'grid', 'rr', 'rep', 'uneven'][kind]}_{i}"
        g = torch.Generator()
        g.manual_seed(SEED + i)
        full = torch.randn(shape, generator=g, dtype=torch.float32).to(dt)
        if kind == 0:
            sh = shards_along(shape, 0, split_sizes(rows, world), r)
        elif kind == 1:
            sh = shards_along(shape, 1, split_sizes(cols, world), r)
        elif kind == 2:
            a = 2 if world % 2 == 0 else 1
            b = world // a
            sh = grid(shape, (0, 1), (split_sizes(rows, a), split_sizes(cols, b)),
                      lambda x, y: (x * b + y) % world)
        elif kind == 3:
            k = 2 * world
            sh = shards_along(shape, 0, split_sizes(rows, k), [j % world for j in range(k)])
        elif kind == 4:
            spec.add(fqn, Plain(full))
            continue
        else:
            sizes = split_sizes(rows, world)
            sh = shards_along(shape, 0, sizes, r[::-1])
        spec.add(fqn, Sharded(full, sh))
    spec.add("step", Plain(1000))
    spec.add("config", Plain({"lr": 1e-4, "name": "big", "layers": list(range(50))}))
    return spec


CASES = {
    "rows": case_rows, "cols": case_cols, "blocks2d": case_blocks2d,
    "multi": case_multi, "replicated": case_replicated, "dtypes": case_dtypes,
    "objects": case_objects, "olmo": case_olmo, "all": case_all,
}


def build_spec(args):
    if args.case == "big":
        return case_big(args.ranks or 8, args.size_mb)
    fn = CASES[args.case]
    return fn(args.ranks) if args.ranks else fn()


# --------------------------------------------------------------------------
# Workers

def _local_state_dict(spec, rank):
    sd = collections.OrderedDict()
    for fqn, e in spec.entries.items():
        if isinstance(e, Sharded):
            local = []
            for r, o, s in e.shards:
                if r != rank:
                    continue
                t = _box(e.full, o, s).clone()
                if e.requires_grad:
                    t.requires_grad_(True)
                local.append(Shard(t, ShardMetadata(list(o), list(s), f"rank:{rank}/cpu")))
            st = init_from_local_shards(local, *e.full.shape)
            if rank in e.noncontig_ranks:
                # init_from_local_shards insists on contiguous shards; swap in
                # a column-major copy afterwards so DCP saves it with strides.
                for sh in st.local_shards():
                    t = sh.tensor.detach()
                    if t.dim() == 2 and t.shape[0] > 1 and t.shape[1] > 1:
                        sh.tensor = t.t().contiguous().t()
                        assert not sh.tensor.is_contiguous()
            sd[fqn] = st
        else:
            sd[fqn] = e.for_rank(rank)
    return sd


def _train_state(spec, rank):
    import numpy as np
    random.seed(SEED + rank)
    np.random.seed(SEED + rank)
    torch.manual_seed(SEED + rank)
    return {
        "epoch": 1,
        "global_step": 3,
        "global_train_examples_seen_this_epoch": 3 * 8,
        "global_train_tokens_seen": 3 * 8 * 64,
        "world_size": spec.world,
        "checkpoints": [pathlib.PosixPath("/runs/olmo-tiny/step3")],
        "unsharded_checkpoints": [],
        "ephemeral_checkpoints": [],
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                "torch": torch.random.get_rng_state(), "cuda": None, "mps": None},
    }


def _worker(rank, world, spec, ckpt_dir, olmo):
    sd = _local_state_dict(spec, rank)
    dcp_dir = os.path.join(ckpt_dir, "model_and_optim") if olmo else ckpt_dir
    dcp.save_state_dict(sd, dcp.FileSystemWriter(dcp_dir,
                                                 single_file_per_rank=spec.single_file),
                        coordinator_rank=spec.coordinator)
    if olmo:
        os.makedirs(os.path.join(ckpt_dir, "train"), exist_ok=True)
        torch.save(_train_state(spec, rank),
                   os.path.join(ckpt_dir, "train", f"rank{rank}.pt"))


def run_ranks(spec, ckpt_dir, timeout, olmo=False):
    os.makedirs(ckpt_dir, exist_ok=True)
    torchranks.run(_worker, spec.world, args=(spec, ckpt_dir, olmo),
                   timeout=timeout)


# --------------------------------------------------------------------------
# Expected output

def expected_state_dict(spec):
    out = collections.OrderedDict()
    for fqn, e in spec.entries.items():
        if isinstance(e, Sharded):
            out[fqn] = e.full.detach().clone()
        else:
            v = e.for_rank(spec.coordinator)
            out[fqn] = v.detach().contiguous().clone() if torch.is_tensor(v) else v
    return out


def manifest(spec, single_file):
    keys = collections.OrderedDict()
    for fqn, e in spec.entries.items():
        if isinstance(e, Sharded):
            keys[fqn] = {"kind": "sharded", "dtype": str(e.full.dtype).replace("torch.", ""),
                         "shape": list(e.full.shape),
                         "chunks": [[r, list(o), list(s)] for r, o, s in e.shards]}
        else:
            v = e.for_rank(spec.coordinator)
            if torch.is_tensor(v):
                keys[fqn] = {"kind": "tensor", "dtype": str(v.dtype).replace("torch.", ""),
                             "shape": list(v.shape), "stride": list(v.stride()),
                             "chunks": [[spec.coordinator, [0] * v.dim(), list(v.shape)]]}
            else:
                keys[fqn] = {"kind": "bytes", "type": type(v).__name__}
    return {
        "case": spec.name,
        "generator": "tests/support/make_dcp.py",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "world_size": spec.world,
        "coordinator_rank": spec.coordinator,
        "single_file_per_rank": single_file,
        "keys": keys,
    }


def verify(spec, dcp_dir, expected):
    """Load the checkpoint with torch's own 1.13 DCP reader into full-size
    targets (no process group) and compare with the expected state dict."""
    from check_unshard import compare
    target = collections.OrderedDict()
    for fqn, v in expected.items():
        if torch.is_tensor(v):
            # garbage-fill so that an unread element would show
            t = torch.empty_like(v)
            if t.numel():
                t.view(-1).view(torch.uint8).fill_(0xA5) if t.dtype != torch.bool \
                    else t.fill_(True)
            target[fqn] = t
        else:
            target[fqn] = None
    dcp.load_state_dict(target, dcp.FileSystemReader(dcp_dir), no_dist=True)
    res = compare(target, expected)
    if not res.ok:
        raise AssertionError(f"DCP round trip differs from expected at {res.path}: {res.msg}")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--case", required=True, choices=sorted(CASES) + ["big"])
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--size-mb", type=float, default=64)
    ap.add_argument("--no-expected", action="store_true")
    ap.add_argument("--verify", dest="verify", action="store_true", default=None)
    ap.add_argument("--no-verify", dest="verify", action="store_false")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args(argv)
    if args.ranks and not 1 <= args.ranks <= 64:
        ap.error("--ranks must be 1..64")
    if args.verify is None:
        args.verify = args.case != "big" and not args.no_expected

    t0 = time.monotonic()
    torch.set_num_threads(1)
    spec = build_spec(args)
    out = os.path.abspath(args.outdir)
    ckpt = os.path.join(out, "ckpt")
    if os.path.exists(ckpt):
        sys.exit(f"make_dcp: {ckpt} already exists")
    os.makedirs(out, exist_ok=True)
    olmo = spec.name == "olmo"
    run_ranks(spec, ckpt, args.timeout, olmo=olmo)
    if olmo:
        with open(os.path.join(ckpt, "config.yaml"), "w") as f:
            f.write("run_name: olmo-tiny\nsave_folder: /runs/olmo-tiny\n"
                    "sharded_checkpointer: torch_new\n"
                    "wandb:\n  entity: ckpt-tests\n  project: olmo-tiny\n")
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest(spec, spec.single_file), f, indent=1)
        f.write("\n")
    expected = None
    if not args.no_expected:
        expected = expected_state_dict(spec)
        torch.save(expected, os.path.join(out, "expected.pt"))
        if olmo:
            eo = os.path.join(out, "expected_olmo")
            os.makedirs(eo, exist_ok=True)
            model = collections.OrderedDict(
                (k[len("model."):], v) for k, v in expected.items() if k.startswith("model."))
            torch.save(model, os.path.join(eo, "model.pt"))
            shutil.copyfile(os.path.join(ckpt, "train", "rank0.pt"),
                            os.path.join(eo, "train.pt"))
    msg = ""
    if args.verify:
        if expected is None:
            expected = expected_state_dict(spec)
        res = verify(spec, os.path.join(ckpt, "model_and_optim") if olmo else ckpt, expected)
        msg = f", verified by DCP load ({res.tensors} tensors, {res.values} values)"
    print(f"make_dcp: case {spec.name}: {len(spec.entries)} keys, {spec.world} ranks "
          f"-> {ckpt}{msg} ({time.monotonic() - t0:.1f}s)")


if __name__ == "__main__":
    main()
