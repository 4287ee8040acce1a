#!/usr/bin/python3
"""make_olmo_core.py: write OLMo `olmo_core` sharded checkpoints (OLMo-core 0.1
format, olmo_core.distributed.checkpoint) with torch 1.13, plus what OLMo's
own scripts/unshard.py would write from them.

OLMo-core is not installable here (Debian bookworm, torch 1.13), so this
writes the documented format itself, from a real model and a real AdamW
state (docs/formats/olmo.md says what was confirmed from the sources):

    /usr/bin/python3 tests/support/make_olmo_core.py OUTDIR [--case C] [--no-verify]

    --case C      f32-2 | bf16-3 | old-4 | all (default all: OUTDIR/<case>/)
    --no-verify   skip reading the files back the way OLMo-core does

Each case writes OUTDIR/ckpt/ (an OLMo step directory) and OUTDIR/expected/:
    ckpt/model/rank_{R}.safetensors   safetensors files (header per the spec:
    ckpt/optim/rank_{R}.safetensors   8-byte LE length, JSON, data; tensors
                                      ordered as the safetensors library orders
                                      them), each key a 1-D tensor: the rank's
                                      piece of the full tensor
    ckpt/{model,optim}/metadata.json  Checkpointer.save's StorageMetadata
    ckpt/train/rank{R}.pt             trainer state (pathlib paths, numpy RNG),
                                      as OLMo's trainer_state_dict
    ckpt/config.yaml                  sharded_checkpointer: olmo_core
    expected/model.pt                 {fqn: full tensor}
    expected/optim.pt                 OLMo-core's _unflatten_optimizer_state:
                                      {"state": {param id: {key: tensor}},
                                       "param_groups": [group minus _param_names]}
    expected/train.pt                 = ckpt/train/rank0.pt
    expected/config.yaml              = ckpt/config.yaml

How the pieces are cut (what FSDP with use_orig_params gives OLMo-core's
_get_torch_fsdp_state_dict_for_checkpoint): the parameters of each wrapped
unit are flattened and concatenated, padded to a multiple of the world size
and split evenly; each parameter's piece on rank R is the intersection, a
range [start, end) of its row-major flattening (possibly empty: (0, 0)).
Optimizer state of the same shape is sharded like its parameter
(_wrap_tensor_for_sharded_parameter); "step" and the pickled values are
plain tensors that only the first rank holding them writes. A rank whose
piece of a parameter is empty has no optimizer state for it (FSDP +
init_optimizer_state), so its file lacks that state key.

Cases:
  f32-2   2 ranks, float32, schema 0.1 ("shard_spec_per_file").
  bf16-3  3 ranks, bfloat16 parameters (float32 "step"), schema 0.1, plus
          DTensor-style entries (flattened_offsets null, local_shape +
          global_offset: a 2-D tensor sharded on dim 1, a 1-D one on dim 0)
          and a tensor stored as two ranges per rank.
  old-4   4 ranks, float32, the earlier schema ("flattened_offsets_per_file":
          {file: [start, end]}), a unit so small that rank 3 holds nothing.

Importable: write_case(outdir, case, verify=True), write_safetensors(path,
tensors), read_safetensors(path), olmo_core_unshard(step_dir).
"""
import argparse
import collections
import json
import os
import pickle
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from check_unshard import compare  # noqa: E402
from make_olmo_legacy import trainer_state  # noqa: E402

SEED = 20240611
CASES = {"f32-2": (2, torch.float32, "0.1"),
         "bf16-3": (3, torch.bfloat16, "0.1"),
         "old-4": (4, torch.float32, "old")}

# safetensors names (OLMo-core TORCH_DTYPES) and the Rust enum order the
# safetensors library sorts by (descending), then by name.
ST_NAME = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
           torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
           torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL"}
ST_ORDER = ["BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32",
            "F32", "F64", "I64", "U64"]
ST_DTYPE = {v: k for k, v in ST_NAME.items()}


# --------------------------------------------------------------------------
# safetensors, written and read per the format spec

def _bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    """safetensors.torch.save_file(tensors, path) without the package."""
    names = sorted(tensors, key=lambda n: (-ST_ORDER.index(ST_NAME[tensors[n].dtype]), n))
    header, data, off = {}, [], 0
    for n in names:
        b = _bytes(tensors[n])
        header[n] = {"dtype": ST_NAME[tensors[n].dtype],
                     "shape": list(tensors[n].shape), "data_offsets": [off, off + len(b)]}
        data.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(data))


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        s, e = info["data_offsets"]
        raw = bytearray(buf[8 + n + s:8 + n + e])
        dt = ST_DTYPE[info["dtype"]]
        if dt == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) \
                if raw else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def serialize_to_tensor(x):
    """olmo_core.io.serialize_to_tensor: pickle bytes as a uint8 tensor."""
    return torch.frombuffer(bytearray(pickle.dumps(x)), dtype=torch.uint8).clone()


# --------------------------------------------------------------------------
# The model and its optimizer state

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.att_proj = nn.Linear(16, 48, bias=False)
        self.attn_out = nn.Linear(16, 16, bias=False)
        self.ff_proj = nn.Linear(16, 40, bias=False)
        self.ff_out = nn.Linear(20, 16, bias=False)
        self.attn_norm = nn.LayerNorm(16)


class Model(nn.Module):
    def __init__(self, dtensors):
        super().__init__()
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(50, 16),
            "blocks": nn.ModuleList([Block(), Block()]),
            "ln_f": nn.LayerNorm(16),
        })
        self.scale = nn.Parameter(torch.ones(5))        # a unit of its own
        if dtensors:
            self.dt_2d = nn.Parameter(torch.zeros(5, 7))
            self.dt_1d = nn.Parameter(torch.zeros(10))


def units(model):
    """FSDP wrapping: one flat parameter per block, one for the rest; the
    DTensor parameters are not in any (they shard themselves)."""
    names = [n for n, _ in model.named_parameters() if not n.startswith("dt_")]
    blocks = [[n for n in names if n.startswith(f"transformer.blocks.{i}.")] for i in range(2)]
    scale = ["scale"]
    rest = [n for n in names if n not in sum(blocks, []) and n not in scale]
    return blocks + [rest, scale]


def build(case):
    world, dtype, schema = CASES[case]
    torch.manual_seed(SEED + world)
    model = Model(dtensors=case == "bf16-3").to(dtype)
    params = dict(model.named_parameters())
    decay = [n for n in params if n.endswith("weight") and "norm" not in n
             and "ln_f" not in n]
    groups = [{"params": [params[n] for n in decay], "param_names": decay,
               "weight_decay": 0.1, "initial_lr": 4e-4},
              {"params": [params[n] for n in params if n not in decay],
               "param_names": [n for n in params if n not in decay],
               "weight_decay": 0.0, "initial_lr": 4e-4}]
    opt = torch.optim.AdamW(groups, lr=4e-4, betas=(0.9, 0.95), eps=1e-5)
    for step in range(2):
        opt.zero_grad()
        loss = sum(((p.float() - 0.01 * step) ** 2).sum() * (i + 1)
                   for i, p in enumerate(model.parameters()))
        loss.backward()
        opt.step()
    return model, opt


# --------------------------------------------------------------------------
# Sharding: each tensor's piece per rank

def fsdp_pieces(model, world):
    """{param name: [((start, end),) per rank]}, FSDP flat-param sharding."""
    shapes = {n: p.shape for n, p in model.named_parameters()}
    out = {}
    for unit in units(model):
        numels = [shapes[n].numel() for n in unit]
        total = sum(numels)
        per = -(-total // world)
        at = 0
        for n, k in zip(unit, numels):
            ranges = []
            for r in range(world):
                lo, hi = max(at, r * per), min(at + k, (r + 1) * per)
                ranges.append(((lo - at, hi - at),) if lo < hi else ((0, 0),))
            out[n] = ranges
            at += k
    return out


def two_ranges(numel, world):
    """Rank R holds row-block R of each half: two ranges per rank."""
    half = numel // 2
    out = []
    for r in range(world):
        a = [half * r // world, half * (r + 1) // world]
        b = [half + (numel - half) * r // world, half + (numel - half) * (r + 1) // world]
        out.append(((a[0], a[1]), (b[0], b[1])))
    return out


def dtensor_boxes(shape, dim, world):
    """DTensor Shard(dim): torch.chunk sizes; (local_shape, global_offset)."""
    n = shape[dim]
    per = -(-n // world)
    out = []
    for r in range(world):
        lo, hi = min(r * per, n), min((r + 1) * per, n)
        ls, go = list(shape), [0] * len(shape)
        ls[dim], go[dim] = hi - lo, lo
        out.append((tuple(ls), tuple(go)))
    return out


class Spec:
    """How one tensor is stored: sharded (per rank a tuple of ranges, or a
    DTensor box) or plain (written by one rank)."""

    def __init__(self, ranges=None, boxes=None, owner=0):
        self.ranges, self.boxes, self.owner = ranges, boxes, owner

    def local(self, full, rank):
        """The rank's 1-D piece, or None if it writes nothing."""
        flat = full.reshape(-1)
        if self.boxes:
            ls, go = self.boxes[rank]
            t = full
            for d, (o, s) in enumerate(zip(go, ls)):
                t = t.narrow(d, o, s)
            return t.contiguous().reshape(-1)
        if self.ranges:
            return torch.cat([flat[s:e] for s, e in self.ranges[rank]])
        return flat.clone() if rank == self.owner else None

    def per_file(self, world, schema):
        files = {}
        for r in range(world):
            name = f"rank_{r}.safetensors"
            if self.boxes:
                ls, go = self.boxes[r]
                files[name] = {"flattened_offsets": None, "local_shape": list(ls),
                               "global_offset": list(go)}
            elif self.ranges:
                rs = [list(x) for x in self.ranges[r]]
                if schema == "old":
                    assert len(rs) == 1
                    files[name] = rs[0]
                else:
                    files[name] = {"flattened_offsets": rs, "local_shape": None,
                                   "global_offset": None}
        if not files:
            n = f"rank_{self.owner}.safetensors"
            files[n] = ([0, self.numel] if schema == "old" else
                        {"flattened_offsets": [[0, self.numel]], "local_shape": None,
                         "global_offset": None})
        return files


def tensor_meta(full, spec, world, schema):
    spec.numel = full.numel()
    sharded = bool(spec.ranges or spec.boxes)
    if schema == "old":
        return {"flattened_offsets_per_file": spec.per_file(world, schema),
                "shape": list(full.shape), "is_sharded": sharded,
                "dtype": ST_NAME[full.dtype]}
    return {"shape": list(full.shape), "is_sharded": sharded,
            "dtype": ST_NAME[full.dtype],
            "shard_spec_per_file": spec.per_file(world, schema)}


def model_specs(model, case, world):
    specs = {n: Spec(ranges=r) for n, r in fsdp_pieces(model, world).items()}
    if case == "bf16-3":
        specs["transformer.blocks.0.ff_proj.weight"] = Spec(ranges=two_ranges(640, world))
        specs["dt_2d"] = Spec(boxes=dtensor_boxes((5, 7), 1, world))
        specs["dt_1d"] = Spec(boxes=dtensor_boxes((10,), 0, world))
    return specs


def flatten_optim(model, opt, specs, world):
    """OLMo-core _flatten_optimizer_state: {key: (full tensor, Spec)}, with
    the ranks that hold no state for a parameter (empty local piece)."""
    osd = opt.state_dict()
    id2name = {}
    for g in osd["param_groups"]:
        for pid, name in zip(g["params"], g["param_names"]):
            id2name[pid] = name
    flat = collections.OrderedDict()
    flat["num_param_groups"] = (torch.tensor(len(osd["param_groups"])), Spec())
    for i, g in enumerate(osd["param_groups"]):
        g = dict(g)
        g["_param_names"] = [id2name[pid] for pid in g["params"]]
        flat[f"param_group{i}"] = (serialize_to_tensor(g), Spec())
    keys = set()
    missing = {}
    params = dict(model.named_parameters())
    for pid, st in osd["state"].items():
        name = id2name[pid]
        spec = specs[name]
        empty = [r for r in range(world) if spec.local(params[name].detach(), r).numel() == 0]
        for k, t in st.items():
            keys.add(k)
            key = f"state.{name}.__{k}"
            if k == "step" or t.shape != params[name].shape:
                # Written by the first rank that has state for the param.
                owner = min(r for r in range(world) if r not in empty)
                flat[key] = (t.clone(), Spec(owner=owner))
            else:
                flat[key] = (t.clone(), spec)
                missing[key] = empty
    flat["state_keys"] = (serialize_to_tensor(sorted(keys)), Spec())
    return flat, missing, osd, id2name


def save_part(d, tensors, world, schema, missing=None):
    """Checkpointer.save: one safetensors file per rank + metadata.json."""
    os.makedirs(d)
    meta = {"tensors": collections.OrderedDict()}
    for key, (full, spec) in tensors.items():
        meta["tensors"][key] = tensor_meta(full, spec, world, schema)
    for r in range(world):
        local = {}
        for key, (full, spec) in tensors.items():
            if missing and r in missing.get(key, ()):
                continue
            t = spec.local(full, r)
            if t is not None:
                local[key] = t
        write_safetensors(os.path.join(d, f"rank_{r}.safetensors"), local)
    with open(os.path.join(d, "metadata.json"), "w") as f:
        json.dump(meta, f)


def expected_optim(osd, id2name):
    """_unflatten_optimizer_state of the flattened state."""
    keys = sorted({k for st in osd["state"].values() for k in st})
    state = {}
    for g in osd["param_groups"]:
        for pid in g["params"]:
            st = {k: osd["state"][pid][k].clone() for k in keys if k in osd["state"].get(pid, {})}
            if st:
                state[pid] = st
    return {"state": state, "param_groups": [dict(g) for g in osd["param_groups"]]}


def write_case(outdir, case, verify=True):
    world, _, schema = CASES[case]
    ckpt, exp = os.path.join(outdir, "ckpt"), os.path.join(outdir, "expected")
    if os.path.exists(ckpt):
        sys.exit(f"make_olmo_core: {ckpt} already exists")
    model, opt = build(case)
    specs = model_specs(model, case, world)
    params = collections.OrderedDict((n, p.detach().clone()) for n, p in model.named_parameters())
    save_part(os.path.join(ckpt, "model"),
              collections.OrderedDict((n, (t, specs[n])) for n, t in params.items()),
              world, schema)
    flat, missing, osd, id2name = flatten_optim(model, opt, specs, world)
    save_part(os.path.join(ckpt, "optim"), flat, world, schema, missing)
    os.makedirs(os.path.join(ckpt, "train"))
    for r in range(world):
        torch.save(trainer_state(r, world), os.path.join(ckpt, "train", f"rank{r}.pt"))
    with open(os.path.join(ckpt, "config.yaml"), "w") as f:
        f.write(f"run_name: olmo-core-{case}\nsave_folder: /runs/olmo-core-{case}\n"
                "sharded_checkpointer: olmo_core\n"
                "wandb:\n  entity: ckpt-tests\n  project: olmo-core-tiny\n")
    os.makedirs(exp)
    torch.save(dict(params), os.path.join(exp, "model.pt"))
    torch.save(expected_optim(osd, id2name), os.path.join(exp, "optim.pt"))
    shutil.copyfile(os.path.join(ckpt, "train", "rank0.pt"), os.path.join(exp, "train.pt"))
    shutil.copyfile(os.path.join(ckpt, "config.yaml"), os.path.join(exp, "config.yaml"))
    if verify:
        got = olmo_core_unshard(ckpt)
        for part in ("model", "optim"):
            r = compare(got[part], torch.load(os.path.join(exp, f"{part}.pt")))
            if not r.ok:
                raise AssertionError(f"{case}: OLMo-core-style unshard differs from "
                                     f"expected/{part}.pt at {r.path}: {r.msg}")


# --------------------------------------------------------------------------
# An independent reader following OLMo-core's Checkpointer.unshard and
# _unflatten_optimizer_state, to check the writer above.

def _offsets(spec, shape):
    if spec.get("flattened_offsets") is not None:
        return [tuple(x) for x in spec["flattened_offsets"]]
    ls, go = spec["local_shape"], spec["global_offset"]
    if len(shape) == 1:
        return [(go[0], go[0] + ls[0])]
    assert len(shape) == 2, "OLMo-core: only 1D and 2D DTensors"
    return [(r * shape[1] + go[1], r * shape[1] + go[1] + ls[1])
            for r in range(go[0], go[0] + ls[0])]


def _unshard_dir(d):
    with open(os.path.join(d, "metadata.json")) as f:
        meta = json.load(f)
    for tm in meta["tensors"].values():     # Checkpointer.get_metadata
        if "flattened_offsets_per_file" in tm:
            old = tm.pop("flattened_offsets_per_file")
            tm["shard_spec_per_file"] = {
                p: {"flattened_offsets": [o] if o and isinstance(o[0], int) else o}
                for p, o in old.items()}
    files = {}
    out = collections.OrderedDict()
    for key, tm in meta["tensors"].items():
        full = torch.empty(tm["shape"], dtype=ST_DTYPE[tm["dtype"]])
        if full.dtype.is_floating_point:
            full.fill_(float("nan"))
        flat = full.view(-1)
        for fname, spec in tm["shard_spec_per_file"].items():
            offs = _offsets(spec, tm["shape"])
            if sum(e - s for s, e in offs) == 0:
                continue
            if fname not in files:
                files[fname] = read_safetensors(os.path.join(d, fname))
            data, at = files[fname][key], 0
            assert data.dim() == 1 and data.dtype == full.dtype
            for s, e in offs:
                flat[s:e].copy_(data[at:at + e - s])
                at += e - s
        assert not (full.dtype.is_floating_point and full.isnan().any()), key
        out[key] = full
    return out


def olmo_core_unshard(step_dir):
    model = _unshard_dir(os.path.join(step_dir, "model"))
    flat = _unshard_dir(os.path.join(step_dir, "optim"))

    def unpickle(t):
        return pickle.loads(bytes(t.tolist()))
    groups, name2id = [], {}
    for i in range(int(flat["num_param_groups"].item())):
        g = unpickle(flat[f"param_group{i}"])
        for name, pid in zip(g.pop("_param_names"), g["params"]):
            name2id[name] = pid
        groups.append(g)
    keys = unpickle(flat["state_keys"])
    state = {}
    for name, pid in name2id.items():
        st = {k: flat[f"state.{name}.__{k}"] for k in keys if f"state.{name}.__{k}" in flat}
        if st:
            state[pid] = st
    return {"model": dict(model), "optim": {"state": state, "param_groups": groups}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--case", default="all", choices=list(CASES) + ["all"])
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cases = list(CASES) if args.case == "all" else [args.case]
    for c in cases:
        out = os.path.join(args.outdir, c) if args.case == "all" else args.outdir
        write_case(out, c, verify=not args.no_verify)
        print(f"make_olmo_core: {c} -> {out}/ckpt")


if __name__ == "__main__":
    main()
