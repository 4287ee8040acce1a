#!/usr/bin/python3
"""make_olmo_local.py: write OLMo `local` sharded checkpoints
(LocalShardedCheckpointer: raw FSDP flat-parameter shards) with torch 1.13,
plus the files OLMo's own unsharder writes from them.

    /usr/bin/python3 tests/support/make_olmo_local.py OUTDIR [--no-verify]
    /usr/bin/python3 tests/support/make_olmo_local.py --check CHECKS.json

torch 1.13's FSDP cannot run on CPU, so the flat parameters are laid out
here exactly as FSDP lays them out (torch/distributed/fsdp/flat_param.py,
docs/facts-other-formats.md section 1): the original parameters of each
FSDP module flattened and concatenated in _fqns order (torch >= 2.1 with
use_orig_params: each parameter aligned to 16 bytes by padding elements
between parameters), then cut as torch.chunk(world_size) cuts it, each
rank's chunk right-padded with zeros to the first chunk's size
(_shard_numel_padded; trailing ranks may hold nothing but padding). The
FlatParameter attributes OLMo saves (_FLAT_PARAM_METADATA_TO_SAVE) are
computed as torch computes them:
  torch >= 2.1 (layout "2.1"): _fqns, _numels, _numels_with_padding, _shapes
      (torch.Size), _shard_numel_padded, _shard_param_infos = tuple of the
      NamedTuple _ShardParamInfo(in_shard, offset_in_shard, numel_in_shard,
      intra_param_start_idx, intra_param_end_idx inclusive), pickled by
      reference to torch.distributed.fsdp._flat_param (layout "2.1fp": to
      torch.distributed.fsdp.flat_param, the 2.0-era module path);
  torch <= 2.0.1 (layout "2.0"): _fqns, _shard_param_offsets ((start,
      end inclusive) per held parameter), _shard_indices (first, last held
      parameter; (0, 0) when none), _numels, _shapes, _shard_numel_padded.
The NamedTuple class is registered in sys.modules under those module names
so torch.save pickles the real path.

Writes, per case (OUTDIR/CASE/):
    ckpt/model/rank{R}.pt  {"modules": [{"name": FSDP module name,
                           "handles": [{"flat_param.data": 1-D shard,
                           "flat_param._fqns": ..., ...}]}]} in named_modules
                           order: the root "" first, nested modules as
                           "_fsdp_wrapped_module.transformer.blocks.0", one
                           nested twice ("..._fsdp_wrapped_module.ff"), one
                           without handles
    ckpt/optim/rank{R}.pt  optim.state_dict() as OLMo's AdamW with
                           use_orig_params leaves it: state[id] per ORIGINAL
                           parameter (ids in named_parameters order over two
                           param groups with "param_names" = FSDP names),
                           {"step": 0-d, "exp_avg": 1-D local slice,
                           "exp_avg_sq": ..., "grad_norm_exp_avg": 0-d} for
                           parameters the rank holds part of, only
                           {"grad_norm_exp_avg"} for the others
    ckpt/train/rank{R}.pt  trainer state (pathlib paths, numpy RNG state)
    ckpt/metadata.yaml     "world_size: N"
    ckpt/config.yaml
    expected/model.pt      {fqn: full tensor}
    expected/optim.pt      {"state": {id: {...full...}}, "param_groups": rank
                           0's with "_fsdp_wrapped_module." removed}
    expected/config.yaml
Cases: w2-21 (2 ranks, 2.1), w3-20 (3 ranks, 2.0, optimizer slices strided
views of one buffer), w4-21fp (4 ranks, 2.1fp, a rank with padding only),
w4-20 (4 ranks, 2.0, flat_param.data a view at an offset of a larger
storage). Dtypes: float32 and bfloat16 flat parameters; 0-d, 1-D, 2-D and
3-D parameters.
With --world N only OUTDIR/wN-21/ (N ranks, layout 2.1) is written, e.g.
1,024 ranks in about 2 s: every rank file is built in this one process
anyway, so a many-rank case differs from the four above only in size.
Also OUTDIR/bad/: single rank files for the error tests (w4-21fp rank 1
unless named): model-shape.pt (a _shapes entry differs), model-dtype.pt
(a flat parameter in float16), model-oob.pt (offset_in_shard past the data),
model-gap.pt (one in_shard False), model-oob20.pt (w4-20 rank 1: a
_shard_param_offsets end past its parameter), optim-step.pt (rank 2's step
differs), optim-missing.pt (an exp_avg_sq missing), optim-groups.pt (an lr
differs); ids.json names the parameters and state ids involved.
OUTDIR/CASE/single.pt is {"model": ..., "optim": ...} for --layout single.

Verification (default): every case is unsharded again by an independent
copy of OLMo's LocalShardedCheckpointer.unshard_checkpoint /
_iter_flat_param_shards logic from the written files and compared with
expected/.

--check CHECKS.json: one process for many comparisons (torch starts are
slow): a JSON list of {"name", "actual", "expected"} (as for
check_unshard.py; "extra": compare ACTUAL extra.json's optim.param_groups
with EXPECTED optim.pt's) or {"name", "same": [file, file]} (bytes equal).
Prints "ok NAME" / "FAIL NAME: why" and exits 1 on any failure.
"""
import argparse
import collections
import contextlib
import importlib
import io
import json
import os
import pathlib
import random
import shutil
import sys
import types
import typing

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402

SEED = 20261205
WRAP = "_fsdp_wrapped_module."


def _namedtuple_in(module):
    """The _ShardParamInfo class as if defined in `module` (torch 1.13 has
    flat_param but no _flat_param: that one is a stand-in module)."""
    cls = typing.NamedTuple("_ShardParamInfo", [
        ("in_shard", bool), ("offset_in_shard", typing.Optional[int]),
        ("numel_in_shard", typing.Optional[int]),
        ("intra_param_start_idx", typing.Optional[int]),
        ("intra_param_end_idx", typing.Optional[int])])
    cls.__module__ = module
    try:
        mod = importlib.import_module(module)
    except ImportError:
        mod = types.ModuleType(module)
    mod._ShardParamInfo = cls
    sys.modules[module] = mod
    return cls


INFO = {"2.1": _namedtuple_in("torch.distributed.fsdp._flat_param"),
        "2.1fp": _namedtuple_in("torch.distributed.fsdp.flat_param")}

# FSDP modules (named_modules order) and their parameters (_fqns order,
# relative to the module). dtype per flat parameter.
MODULES = [
    ("", torch.float32, [("transformer.wte.weight", (10, 6)),
                         ("transformer.ln_f.weight", (6,)),
                         ("transformer.ln_f.bias", (6,))]),
    (WRAP + "transformer.blocks.0", torch.float32,
     [("att_proj.weight", (12, 6)), ("att_proj.bias", (12,)),
      ("ff_proj.weight", (3, 4, 5)), ("attn_norm.weight", (6,))]),
    (WRAP + "transformer.blocks.1", torch.bfloat16,
     [("att_proj.weight", (7, 6)), ("scale", ()), ("ff_out.weight", (5, 3, 2)),
      ("ff_out.bias", (1,))]),
    (WRAP + "transformer.blocks.1." + WRAP + "ff", torch.float32,
     [("weight", (1, 5))]),
    (WRAP + "transformer.blocks.1." + WRAP + "act", torch.float32, []),
]
# named_parameters() order of the model (the optimizer's ids)
MODEL_ORDER = [
    "transformer.wte.weight",
    "transformer.blocks.0.att_proj.weight", "transformer.blocks.0.att_proj.bias",
    "transformer.blocks.0.ff_proj.weight", "transformer.blocks.0.attn_norm.weight",
    "transformer.blocks.1.att_proj.weight", "transformer.blocks.1.scale",
    "transformer.blocks.1.ff_out.weight", "transformer.blocks.1.ff_out.bias",
    "transformer.blocks.1.ff.weight",
    "transformer.ln_f.weight", "transformer.ln_f.bias",
]
PARAM_GROUP = {"lr": 4e-4, "betas": (0.9, 0.95), "eps": 1e-5, "weight_decay": 0.1,
               "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
               "differentiable": False, "fused": None, "initial_lr": 4e-4,
               "max_grad_norm": 1.0, "max_grad_norm_ratio": None}
CASES = [  # name, world size, layout, variant
    ("w2-21", 2, "2.1", ""),
    ("w3-20", 3, "2.0", "strided-optim"),
    ("w4-21fp", 4, "2.1fp", ""),
    ("w4-20", 4, "2.0", "offset-data"),
]


def root_fqn(module, rel):
    prefix = module.replace(WRAP, "")
    return f"{prefix}.{rel}" if prefix else rel


def fsdp_name(module, rel):
    """named_parameters() name of an FSDP model with use_orig_params."""
    return f"{module}.{WRAP}{rel}" if module else f"{WRAP}{rel}"


def values(shape, dtype, tag):
    g = torch.Generator().manual_seed(SEED + sum(map(ord, tag)) * 7919 + len(tag))
    return torch.randn(shape, generator=g).to(dtype)


def full_state():
    """{fqn: {"param", "exp_avg", "exp_avg_sq"}} plus dtype per fqn."""
    out = collections.OrderedDict()
    for module, dtype, params in MODULES:
        for rel, shape in params:
            fqn = root_fqn(module, rel)
            sq_dtype = torch.float32 if dtype == torch.bfloat16 else dtype
            out[fqn] = {"param": values(shape, dtype, "p." + fqn),
                        "exp_avg": values(shape, dtype, "m." + fqn) * 1e-3,
                        "exp_avg_sq": values(shape, sq_dtype, "v." + fqn).abs() * 1e-6,
                        "module": module, "rel": rel}
    return out


# --------------------------------------------------------------------------
# Flat parameters

def layout_flat(params, dtype, aligned):
    """Unsharded flat layout: [(index or None for padding, start, numel)]."""
    align = 16 // torch.tensor([], dtype=dtype).element_size() if aligned else 1
    out, total = [], 0
    for i, (_, shape) in enumerate(params):
        if total % align:
            pad = align - total % align
            out.append((None, total, pad))
            total += pad
        n = 1
        for s in shape:
            n *= s
        out.append((i, total, n))
        total += n
    return out, total


def shard_ranges(total, world):
    """torch.chunk(world): [(start, length, padded)] per rank."""
    c = -(-total // world) if total else 0
    out = []
    for r in range(world):
        s = min(r * c, total)
        n = max(0, min(c, total - s))
        out.append((s, n, c - n))
    return out


def shard_metadata(entries, rs, rn, layout, ninfo):
    """Per parameter (start, end incl., offset in shard) or None."""
    held = [None] * ninfo
    re = rs + rn - 1
    for i, ps, n in entries:
        if i is None or n == 0 or rn == 0:
            continue
        pe = ps + n - 1
        if rs > pe or re < ps:
            continue
        a = max(rs, ps) - ps
        b = min(re, pe) - ps
        held[i] = (a, b, max(rs, ps) - rs)
    return held


def handle_dict(module, dtype, params, full, rank, world, layout, variant):
    aligned = layout != "2.0"
    entries, total = layout_flat(params, dtype, aligned)
    flat = torch.full((total,), -777.0, dtype=dtype)   # alignment padding
    for i, ps, n in entries:
        if i is not None:
            flat[ps:ps + n] = full[root_fqn(module, params[i][0])]["param"].reshape(-1)
    rs, rn, padded = shard_ranges(total, world)[rank]
    data = torch.cat([flat[rs:rs + rn], torch.zeros(padded, dtype=dtype)])
    if variant == "offset-data":   # a view at an offset of a larger storage
        big = torch.zeros(data.numel() + 5, dtype=dtype)
        big[3:3 + data.numel()] = data
        data = big[3:3 + data.numel()]
    held = shard_metadata(entries, rs, rn, layout, len(params))
    d = {}   # OLMo's handle dicts are plain dicts
    d["flat_param.data"] = data
    d["flat_param._fqns"] = tuple(rel for rel, _ in params)
    if layout == "2.0":
        idx = [i for i, h in enumerate(held) if h]
        d["flat_param._shard_param_offsets"] = tuple((held[i][0], held[i][1]) for i in idx)
        d["flat_param._shard_indices"] = (idx[0], idx[-1]) if idx else (0, 0)
    numels = tuple(n for i, _, n in entries if i is not None)
    d["flat_param._numels"] = numels
    if layout != "2.0":
        d["flat_param._numels_with_padding"] = tuple(n for _, _, n in entries)
    d["flat_param._shapes"] = tuple(torch.Size(s) for _, s in params)
    d["flat_param._shard_numel_padded"] = padded
    if layout != "2.0":
        cls = INFO[layout]
        d["flat_param._shard_param_infos"] = tuple(
            cls(True, h[2], h[1] - h[0] + 1, h[0], h[1]) if h else
            cls(False, None, None, None, None) for h in held)
    return d, held


def model_state(full, rank, world, layout, variant):
    """(model file dict, {fqn: (start, end incl.)} this rank holds)."""
    mods, held_by_fqn = [], {}
    for module, dtype, params in MODULES:
        handles = []
        if params:
            h, held = handle_dict(module, dtype, params, full, rank, world, layout,
                                  variant)
            handles.append(h)
            for (rel, _), hd in zip(params, held):
                if hd:
                    held_by_fqn[root_fqn(module, rel)] = (hd[0], hd[1])
        mods.append({"handles": handles, "name": module})
    return {"modules": mods}, held_by_fqn


# --------------------------------------------------------------------------
# Optimizer and trainer state

def param_groups():
    decay = [f for f in MODEL_ORDER if len(FULL[f]["param"].shape) >= 2]
    rest = [f for f in MODEL_ORDER if f not in decay]
    groups, ids, nid = [], {}, 0
    for names, wd in ((decay, 0.1), (rest, 0.0)):
        g = dict(PARAM_GROUP)
        g["weight_decay"] = wd
        g["params"] = list(range(nid, nid + len(names)))
        g["param_names"] = [fsdp_name(FULL[f]["module"], FULL[f]["rel"]) for f in names]
        for f in names:
            ids[f] = nid
            nid += 1
        groups.append(g)
    return groups, ids


def optim_state(held_by_fqn, rank, variant):
    groups, ids = param_groups()
    state = {}   # as Optimizer.state_dict() returns it
    strided = {}
    if variant == "strided-optim":   # exp_avg_sq: every 2nd element of one buffer
        n = sum(e - s + 1 for s, e in held_by_fqn.values())
        buf = torch.zeros(2 * n + 1, dtype=torch.float32)
        at = 1
        for f in MODEL_ORDER:
            if f in held_by_fqn:
                s, e = held_by_fqn[f]
                k = e - s + 1
                v = FULL[f]["exp_avg_sq"].reshape(-1)[s:e + 1]
                if v.dtype == torch.float32:
                    buf[at:at + 2 * k:2] = v
                    strided[f] = buf[at:at + 2 * k:2]
                    at += 2 * k
    for f in sorted(ids, key=ids.get):
        st = {}
        if f in held_by_fqn:
            s, e = held_by_fqn[f]
            st["step"] = torch.tensor(7.0)
            st["exp_avg"] = FULL[f]["exp_avg"].reshape(-1)[s:e + 1].clone()
            st["exp_avg_sq"] = strided.get(f, FULL[f]["exp_avg_sq"].reshape(-1)[s:e + 1].clone())
        st["grad_norm_exp_avg"] = torch.tensor(0.25 + ids[f])
        state[ids[f]] = st
    return {"state": state, "param_groups": groups}


def expected_optim():
    groups, ids = param_groups()
    state = collections.OrderedDict()
    for f in sorted(ids, key=ids.get):
        state[ids[f]] = {"step": torch.tensor(7.0),
                         "exp_avg": FULL[f]["exp_avg"].clone(),
                         "exp_avg_sq": FULL[f]["exp_avg_sq"].clone(),
                         "grad_norm_exp_avg": torch.tensor(0.25 + ids[f])}
    for g in groups:
        g["param_names"] = [n.replace(WRAP, "") for n in g["param_names"]]
    return {"state": state, "param_groups": groups}


def trainer_state(rank, world):
    import numpy as np
    random.seed(SEED + rank)
    np.random.seed(SEED + rank)
    gen = torch.Generator().manual_seed(SEED + rank)
    run = pathlib.PosixPath("/runs/olmo-local-tiny")
    return collections.OrderedDict([
        ("epoch", 1), ("global_step", 7), ("global_train_examples_seen_this_epoch", 7 * 16),
        ("global_train_tokens_seen", 7 * 16 * 128), ("world_size", world),
        ("checkpoints", [run / "step7"]), ("unsharded_checkpoints", []),
        ("ephemeral_checkpoints", []),
        ("rng", {"python": random.getstate(), "numpy": np.random.get_state(),
                 "torch": gen.get_state(), "cuda": gen.get_state().clone(), "mps": None}),
    ])


FULL = full_state()


def write_case(out, name, world, layout, variant):
    ck = os.path.join(out, name, "ckpt")
    for sub in ("model", "optim", "train"):
        os.makedirs(os.path.join(ck, sub))
    for r in range(world):
        model, held = model_state(FULL, r, world, layout, variant)
        torch.save(model, os.path.join(ck, "model", f"rank{r}.pt"))
        torch.save(optim_state(held, r, variant), os.path.join(ck, "optim", f"rank{r}.pt"))
        torch.save(trainer_state(r, world), os.path.join(ck, "train", f"rank{r}.pt"))
    with open(os.path.join(ck, "metadata.yaml"), "w") as f:
        f.write(f"world_size: {world}\n")
    with open(os.path.join(ck, "config.yaml"), "w") as f:
        f.write("run_name: olmo-local-tiny\nsave_folder: /runs/olmo-local-tiny\n"
                "sharded_checkpointer: local\n"
                "wandb:\n  entity: ckpt-tests\n  project: olmo-local-tiny\n")
    exp = os.path.join(out, name, "expected")
    os.makedirs(exp)
    torch.save({f: v["param"].clone() for f, v in FULL.items()},
               os.path.join(exp, "model.pt"))
    torch.save(expected_optim(), os.path.join(exp, "optim.pt"))
    torch.save({"model": {f: v["param"].clone() for f, v in FULL.items()},
                "optim": expected_optim()}, os.path.join(out, name, "single.pt"))
    shutil.copyfile(os.path.join(ck, "config.yaml"), os.path.join(exp, "config.yaml"))
    return ck


def write_bad(out):
    """Mutated single rank files of w4-21fp for the error tests."""
    bad = os.path.join(out, "bad")
    os.makedirs(bad)
    world, layout = 4, "2.1fp"
    cls = INFO[layout]

    def handle(model, module):
        return [m for m in model["modules"] if m["name"] == module][0]["handles"][0]

    model, _ = model_state(FULL, 1, world, layout, "")
    h = handle(model, WRAP + "transformer.blocks.0")
    shapes = list(h["flat_param._shapes"])
    shapes[1] = torch.Size([3, 4])
    h["flat_param._shapes"] = tuple(shapes)
    torch.save(model, os.path.join(bad, "model-shape.pt"))

    model, _ = model_state(FULL, 1, world, layout, "")
    h = handle(model, WRAP + "transformer.blocks.0")
    h["flat_param.data"] = h["flat_param.data"].to(torch.float16)
    torch.save(model, os.path.join(bad, "model-dtype.pt"))

    model, _ = model_state(FULL, 1, world, layout, "")
    h = handle(model, "")
    infos = list(h["flat_param._shard_param_infos"])
    i = next(k for k, x in enumerate(infos) if x.in_shard)
    infos[i] = infos[i]._replace(offset_in_shard=infos[i].offset_in_shard + 1000)
    h["flat_param._shard_param_infos"] = tuple(infos)
    torch.save(model, os.path.join(bad, "model-oob.pt"))

    model, _ = model_state(FULL, 1, world, layout, "")
    h = handle(model, WRAP + "transformer.blocks.0")
    infos = list(h["flat_param._shard_param_infos"])
    i = next(k for k, x in enumerate(infos) if x.in_shard)
    infos[i] = cls(False, None, None, None, None)
    h["flat_param._shard_param_infos"] = tuple(infos)
    torch.save(model, os.path.join(bad, "model-gap.pt"))

    ids = {"gap-fqn": root_fqn(WRAP + "transformer.blocks.0", MODULES[1][2][i][0])}

    _, held = model_state(FULL, 2, world, layout, "")
    optim = optim_state(held, 2, "")
    sid = next(k for k, v in optim["state"].items() if "step" in v)
    optim["state"][sid]["step"] = torch.tensor(8.0)
    torch.save(optim, os.path.join(bad, "optim-step.pt"))
    ids["optim-step"] = sid

    _, held = model_state(FULL, 1, world, layout, "")
    optim = optim_state(held, 1, "")
    sid = next(k for k, v in optim["state"].items() if "step" in v)
    del optim["state"][sid]["exp_avg_sq"]
    torch.save(optim, os.path.join(bad, "optim-missing.pt"))
    ids["optim-missing"] = sid
    ids["optim-missing-fqn"] = [f for f, k in param_groups()[1].items() if k == sid][0]
    ids["optim-missing-range"] = held[ids["optim-missing-fqn"]]
    ids["optim-missing-numel"] = FULL[ids["optim-missing-fqn"]]["param"].numel()

    optim = optim_state(held, 1, "")
    optim["param_groups"][1]["lr"] = 1e-3
    torch.save(optim, os.path.join(bad, "optim-groups.pt"))

    model, _ = model_state(FULL, 1, world, "2.0", "")
    h = handle(model, WRAP + "transformer.blocks.1")
    offs = list(h["flat_param._shard_param_offsets"])
    offs[-1] = (offs[-1][0], offs[-1][1] + 50)
    h["flat_param._shard_param_offsets"] = tuple(offs)
    torch.save(model, os.path.join(bad, "model-oob20.pt"))
    last = h["flat_param._shard_indices"][1]
    ids["oob20-fqn"] = root_fqn(WRAP + "transformer.blocks.1", MODULES[2][2][last][0])
    ids["oob20-range"] = offs[-1]
    ids["oob20-numel"] = FULL[ids["oob20-fqn"]]["param"].numel()
    with open(os.path.join(bad, "ids.json"), "w") as f:
        json.dump(ids, f)


# --------------------------------------------------------------------------
# Independent copy of OLMo's LocalShardedCheckpointer.unshard_checkpoint

def olmo_unshard(ck):
    import yaml
    with open(os.path.join(ck, "metadata.yaml")) as f:
        world = yaml.safe_load(f)["world_size"]
    full, flat_data = {}, collections.defaultdict(dict)
    for rank in range(world):
        ms = torch.load(os.path.join(ck, "model", f"rank{rank}.pt"))
        for md in ms["modules"]:
            prefix = md["name"].replace(WRAP, "")
            for h in md["handles"]:
                data = h["flat_param.data"]
                pad = h["flat_param._shard_numel_padded"]
                if pad > 0:
                    assert (data[-pad:] == 0).all()
                shards = []
                if "flat_param._shard_indices" in h:
                    s0, cur = h["flat_param._shard_indices"][0], 0
                    for rel, shape, (a, b) in zip(h["flat_param._fqns"][s0:],
                                                  h["flat_param._shapes"][s0:],
                                                  h["flat_param._shard_param_offsets"]):
                        shards.append((rel, shape, a, b, data[cur:cur + b - a + 1]))
                        cur += b - a + 1
                else:
                    for rel, shape, info in zip(h["flat_param._fqns"], h["flat_param._shapes"],
                                                h["flat_param._shard_param_infos"]):
                        if info.in_shard:
                            o, n = info.offset_in_shard, info.numel_in_shard
                            shards.append((rel, shape, info.intra_param_start_idx,
                                           info.intra_param_end_idx, data[o:o + n]))
                for rel, shape, a, b, sd in shards:
                    fqn = f"{prefix}.{rel}" if prefix else rel
                    if fqn not in full:
                        full[fqn] = torch.full(shape, float("nan"), dtype=sd.dtype)
                    full[fqn].view(-1)[a:b + 1].copy_(sd)
                    flat_data[rank][fqn] = (shape, a, b)
    for k, t in full.items():
        assert not torch.isnan(t).any(), k
    optim = {"state": collections.defaultdict(dict)}
    id_to_fqn = {}
    for rank in range(world):
        os_ = torch.load(os.path.join(ck, "optim", f"rank{rank}.pt"))
        if "param_groups" not in optim:
            optim["param_groups"] = os_["param_groups"]
            for g in os_["param_groups"]:
                for n, i in zip(g["param_names"], g["params"]):
                    id_to_fqn[i] = n.replace(WRAP, "")
        else:
            assert optim["param_groups"] == os_["param_groups"]
        for i, st in os_["state"].items():
            fs = flat_data[rank].get(id_to_fqn[i])
            out = optim["state"][i]
            for k, v in st.items():
                if v.shape == torch.Size([]):
                    if k in out:
                        assert out[k] == v
                    else:
                        out[k] = v
                    continue
                shape, a, b = fs
                if k not in out:
                    out[k] = torch.empty(shape, dtype=v.dtype)
                out[k].view(-1)[a:b + 1].copy_(v)
    for g in optim["param_groups"]:
        g["param_names"] = [n.replace(WRAP, "") for n in g["param_names"]]
    optim["state"] = dict(optim["state"])
    return full, optim


def verify(case_dir):
    from check_unshard import compare
    model, optim = olmo_unshard(os.path.join(case_dir, "ckpt"))
    for name, got in (("model", model), ("optim", optim)):
        want = torch.load(os.path.join(case_dir, "expected", f"{name}.pt"))
        r = compare(got, want)
        if not r.ok:
            raise AssertionError(f"{case_dir}: OLMo-style unshard differs from "
                                 f"expected/{name}.pt at {r.path}: {r.msg}")


# --------------------------------------------------------------------------
# Batch comparison

def check_many(path):
    import check_unshard
    with open(path) as f:
        checks = json.load(f)
    bad = 0
    for c in checks:
        why = ""
        try:
            if "same" in c:
                a, b = c["same"]
                with open(a, "rb") as fa, open(b, "rb") as fb:
                    if fa.read() != fb.read():
                        why = f"{a} and {b} differ"
            elif c.get("extra"):
                with open(c["actual"]) as f:
                    got = json.load(f)["optim.param_groups"]
                want = torch.load(c["expected"])["param_groups"]
                want = json.loads(json.dumps(want))
                if got != want:
                    why = f"extra.json param_groups {got!r} != {want!r}"
            else:
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                    rc = check_unshard.main([c["actual"], c["expected"]] +
                                            c.get("args", []))
                if rc != 0:
                    why = buf.getvalue().strip()
        except Exception as e:  # noqa: BLE001
            why = f"{type(e).__name__}: {e}"
        print(f"{'FAIL' if why else 'ok  '} {c['name']}{': ' + why if why else ''}")
        bad += bool(why)
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--check", metavar="CHECKS.json")
    ap.add_argument("--world", type=int, metavar="N",
                    help="write only OUTDIR/wN-21: N ranks, layout 2.1 (no bad/)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.check:
        return check_many(args.check)
    if not args.outdir:
        ap.error("OUTDIR is required")
    out = os.path.abspath(args.outdir)
    os.makedirs(out, exist_ok=True)
    if args.world:      # one case of many ranks, all in this process
        if args.world < 2:
            ap.error("--world must be at least 2")
        name = f"w{args.world}-21"
        write_case(out, name, args.world, "2.1", "")
        if not args.no_verify:
            verify(os.path.join(out, name))
        print(f"make_olmo_local: {args.world} ranks -> {os.path.join(out, name)}")
        return 0
    for name, world, layout, variant in CASES:
        write_case(out, name, world, layout, variant)
        if not args.no_verify:
            verify(os.path.join(out, name))
    write_bad(out)
    print(f"make_olmo_local: {len(CASES)} cases -> {out}"
          f"{'' if args.no_verify else ', verified by an OLMo-style unshard'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
