#!/usr/bin/python3
"""make_olmo_hf.py: small OLMo models with OLMo's exact parameter names and
config.yaml, whole (for transformers' conversion scripts) or sharded in each
OLMo checkpointer's format (for `ckpt unshard --format hf`).

    make_olmo_hf.py unsharded OUTDIR [--case C]...
        OUTDIR/C/config.yaml + OUTDIR/C/model.pt ({fqn: fp32 tensor}, what
        OLMo's unsharder writes and what convert_olmo{,2}_weights_to_hf.py
        read). Runs under torch 1.13 or 2.x (the chroot that makes the
        committed references in tests/fixtures/olmo-hf/).
    make_olmo_hf.py sharded OUTDIR --case C --format F [--ranks N]
        OUTDIR/ckpt/: one OLMo step of case C, written by torch 1.13 the
        way OLMo's checkpointer F writes it (F: legacy, torch_new, local,
        olmo_core), with an AdamW state and trainer state beside the model
        (what the export must leave out), and config.yaml; F olmo-core:
        an OLMo-core trainer's step (DCP) of the same weights under
        OLMo-core's names, no config.yaml.

Cases (tests/fixtures/olmo-hf/README.md):
  olmo1-tied     OLMo 1: non-parametric layer norm, multi-head attention,
                 weight tying, embedding_size 128 > vocab_size 100.
  olmo1-untied   OLMo 1: GQA (6 heads, 2 KV heads), clip_qkv 8.0, untied
                 output (transformer.ff_out), mlp_hidden_size 160,
                 eos_token_id 0 (the scripts' fix makes it 50279), 3 layers.
  olmo2          OLMo 2: RMS norms with weights after attention and MLP
                 (norm_after), q/k norms (attention_layer_norm), GQA,
                 rope_theta 500000, untied output.
  olmo2-big      OLMo 2 of 371M parameters, 1.5 GB (bench/hf_export.sh;
                 never made unless named).

--no-optim: the sharded step without optimizer state (the benchmark's:
the export never reads it).

Values are exact in float32 and the same under every torch: element i of a
tensor is ((i * 2654435761 + h) mod 65536 - 32768) / 65536 (h from its
name), norm weights 1 plus that; no random generator is involved.
"""
import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402

BASE = {
    "activation_type": "swiglu", "alibi": False, "bias_for_layer_norm": None,
    "block_type": "sequential", "flash_attention": False, "include_bias": False,
    "init_device": "meta", "init_fn": "mitchell", "layer_norm_with_affine": False,
    "max_sequence_length": 64, "multi_query_attention": None, "n_kv_heads": None,
    "rope": True, "rope_full_precision": True, "scale_logits": False,
    "weight_tying": True, "layer_norm_type": "default", "attention_layer_norm": False,
    "norm_after": False, "clip_qkv": None, "rope_theta": 10000, "mlp_ratio": 4,
    "mlp_hidden_size": None, "pad_token_id": 1, "eos_token_id": 50,
    "layer_norm_eps": 1e-05, "vocab_size": 100, "embedding_size": 128,
}
CASES = {
    "olmo1-tied": dict(BASE, d_model=32, n_heads=4, n_layers=2),
    "olmo1-untied": dict(BASE, d_model=48, n_heads=6, n_kv_heads=2, n_layers=3,
                         clip_qkv=8.0, weight_tying=False, mlp_hidden_size=160,
                         eos_token_id=0, embedding_size=112),
    "olmo2": dict(BASE, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2,
                  layer_norm_type="rms", layer_norm_with_affine=True,
                  attention_layer_norm=True, norm_after=True, layer_norm_eps=1e-06,
                  rope_theta=500000, weight_tying=False, embedding_size=104),
    # bench/hf_export.sh only: 1.5 GB of float32 weights (371M parameters)
    "olmo2-big": dict(BASE, d_model=1024, n_heads=16, n_layers=16,
                      layer_norm_type="rms", layer_norm_with_affine=True,
                      attention_layer_norm=True, norm_after=True,
                      layer_norm_eps=1e-06, rope_theta=500000, weight_tying=False,
                      mlp_hidden_size=8192, vocab_size=50280,
                      embedding_size=50304, max_sequence_length=4096),
}
TEST_CASES = ("olmo1-tied", "olmo1-untied", "olmo2")
SCALAR_KEYS = [k for k in BASE] + ["d_model", "n_heads", "n_layers"]


def yaml_value(v):
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, float):   # PyYAML's represent_float, as OmegaConf saves
        r = repr(v).lower()
        return r.replace("e", ".0e", 1) if "." not in r and "e" in r else r
    return str(v)


def config_yaml(case, checkpointer):
    """config.yaml as OLMo's TrainConfig.save writes it (OmegaConf): the
    model section the conversion scripts read, and the trainer's keys."""
    m = CASES[case]
    lines = [f"run_name: olmo-hf-{case}", f"save_folder: /runs/olmo-hf-{case}",
             f"sharded_checkpointer: {checkpointer}", "model:"]
    for k in sorted(m):
        lines.append(f"  {k}: {yaml_value(m[k])}")
    lines += ["tokenizer:", "  identifier: tokenizers/allenai_gpt-neox-olmo-dolma-v1_5.json",
              "  truncate_direction: right",
              "wandb:", "  entity: ckpt-tests", f"  project: olmo-hf-{case}", ""]
    return "\n".join(lines)


def values(shape, name, norm=False):
    n = 1
    for s in shape:
        n *= s
    h = sum((i + 1) * ord(c) for i, c in enumerate(name)) * 40503
    i = torch.arange(n, dtype=torch.int64)
    v = ((i * 2654435761 + h) % 65536 - 32768).to(torch.float32) / 65536
    return (v + 1 if norm else v).reshape(shape)


def olmo_params(case):
    """{fqn: shape} in OLMo's state_dict order (OLMo's module registration:
    wte, ln_f, blocks (k_norm, q_norm, attn_out, ff_out, attn_norm,
    ff_norm, att_proj, ff_proj), ff_out)."""
    m = CASES[case]
    d, hd = m["d_model"], m["d_model"] // m["n_heads"]
    kv = m["n_kv_heads"] or m["n_heads"]
    hidden = m["mlp_hidden_size"] or m["mlp_ratio"] * d
    affine = m["layer_norm_with_affine"]
    out = collections.OrderedDict()
    out["transformer.wte.weight"] = (m["embedding_size"], d)
    if affine:
        out["transformer.ln_f.weight"] = (d,)
    for b in range(m["n_layers"]):
        p = f"transformer.blocks.{b}."
        if m["attention_layer_norm"]:
            out[p + "k_norm.weight"] = (kv * hd,)
            out[p + "q_norm.weight"] = (d,)
        out[p + "attn_out.weight"] = (d, d)
        out[p + "ff_out.weight"] = (d, hidden // 2)
        if affine:
            out[p + "attn_norm.weight"] = (d,)
            out[p + "ff_norm.weight"] = (d,)
        out[p + "att_proj.weight"] = (d + 2 * kv * hd, d)
        out[p + "ff_proj.weight"] = (hidden, d)
    if not m["weight_tying"]:
        out["transformer.ff_out.weight"] = (m["embedding_size"], d)
    return out


def model_state(case):
    return collections.OrderedDict(
        (fqn, values(shape, fqn, norm="norm" in fqn or "ln_f" in fqn))
        for fqn, shape in olmo_params(case).items())


NO_OPTIM = []


def core_state(case):
    """The same weights under OLMo-core's names (olmo_core.nn.transformer:
    q/k/v and the MLP's w1 (gate) / w3 (up) unfused), what an OLMo-core
    trainer's model_and_optim/ holds: for an export test against the
    olmo2 reference."""
    m = CASES[case]
    d, hd = m["d_model"], m["d_model"] // m["n_heads"]
    kvd = (m["n_kv_heads"] or m["n_heads"]) * hd
    hidden = m["mlp_hidden_size"] or m["mlp_ratio"] * d
    full = model_state(case)
    out = collections.OrderedDict()
    out["embeddings.weight"] = full["transformer.wte.weight"]
    for b in range(m["n_layers"]):
        o, c = f"transformer.blocks.{b}.", f"blocks.{b}."
        qkv = full[o + "att_proj.weight"]
        out[c + "attention.w_q.weight"] = qkv[:d].clone()
        out[c + "attention.w_k.weight"] = qkv[d:d + kvd].clone()
        out[c + "attention.w_v.weight"] = qkv[d + kvd:].clone()
        out[c + "attention.q_norm.weight"] = full[o + "q_norm.weight"]
        out[c + "attention.k_norm.weight"] = full[o + "k_norm.weight"]
        out[c + "attention.w_out.weight"] = full[o + "attn_out.weight"]
        out[c + "attention_norm.weight"] = full[o + "attn_norm.weight"]
        ff = full[o + "ff_proj.weight"]
        out[c + "feed_forward.w1.weight"] = ff[hidden // 2:].clone()
        out[c + "feed_forward.w2.weight"] = full[o + "ff_out.weight"]
        out[c + "feed_forward.w3.weight"] = ff[:hidden // 2].clone()
        out[c + "feed_forward_norm.weight"] = full[o + "ff_norm.weight"]
    out["lm_head.norm.weight"] = full["transformer.ln_f.weight"]
    out["lm_head.w_out.weight"] = full["transformer.ff_out.weight"]
    return out


def write_core(ckpt, case, world):
    """An OLMo-core trainer's step: model_and_optim/ (DCP, "model" and
    "optim" entries) and train/rank{R}.pt, the model under OLMo-core's
    names, no config.yaml (OLMo-core keeps its config.json in the run)."""
    import make_dcp as D
    spec = D.Spec("olmo-core-names", world, single_file=True)
    r = list(range(world))
    for fqn, t in core_state(case).items():
        sh = D.shards_along(t.shape, 0, D.split_sizes(t.shape[0], world), r)
        spec.add(f"model.{fqn}", D.Sharded(t, sh))
        spec.add(f"optim.state.{fqn}.exp_avg",
                 D.Sharded(values(t.shape, "m." + fqn) * 1e-3, sh))
    D.run_ranks(spec, ckpt, 120, olmo=True)


def optim_state(case):
    """AdamW moments of each parameter (deterministic, no step taken)."""
    if NO_OPTIM:
        return collections.OrderedDict()
    return collections.OrderedDict(
        (fqn, {"exp_avg": values(t.shape, "m." + fqn) * 1e-3,
               "exp_avg_sq": values(t.shape, "v." + fqn).abs() * 1e-6})
        for fqn, t in model_state(case).items())


def write_unsharded(out, case):
    d = os.path.join(out, case)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write(config_yaml(case, "torch_legacy"))
    torch.save(dict(model_state(case)), os.path.join(d, "model.pt"))


# --------------------------------------------------------------------------
# Sharded steps (torch 1.13, through the project's format generators)

PARAM_GROUP = {"lr": 4e-4, "betas": (0.9, 0.95), "eps": 1e-5, "weight_decay": 0.1,
               "amsgrad": False, "maximize": False, "foreach": None,
               "capturable": False, "initial_lr": 4e-4}


def _legacy_worker(rank, world, case, ckpt):
    import torch.distributed as dist
    from torch.distributed.fsdp._shard_utils import _create_chunk_sharded_tensor
    from make_olmo_legacy import trainer_state
    pg = dist.distributed_c10d._get_default_group()
    model = collections.OrderedDict()
    state = collections.OrderedDict()
    for fqn, t in model_state(case).items():
        model[fqn] = _create_chunk_sharded_tensor(t, rank, world, 1, pg).cpu()
    for fqn, m in optim_state(case).items():
        state[fqn] = {"step": torch.tensor(3.0)}
        for k, t in m.items():
            state[fqn][k] = _create_chunk_sharded_tensor(t, rank, world, 1, pg)
    group = dict(PARAM_GROUP, params=list(model))
    sd = collections.OrderedDict([("model", model),
                                  ("optim", {"state": state, "param_groups": [group]})])
    sd.update(trainer_state(rank, world))
    torch.save(sd, os.path.join(ckpt, f"rank{rank}.pt"))


def write_legacy(ckpt, case, world):
    import torchranks
    os.makedirs(ckpt)
    torchranks.run(_legacy_worker, world, args=(case, ckpt), timeout=120)


def write_torch_new(ckpt, case, world):
    import make_dcp as D
    spec = D.Spec("olmo-hf", world, single_file=True)
    r = list(range(world))
    for fqn, t in model_state(case).items():
        sh = D.shards_along(t.shape, 0, D.split_sizes(t.shape[0], world), r)
        spec.add(f"model.{fqn}", D.Sharded(t, sh))
    for fqn, m in optim_state(case).items():
        spec.add(f"optim.state.{fqn}.step", D.Plain(torch.tensor(3.0)))
        for k, t in m.items():
            sh = D.shards_along(t.shape, 0, D.split_sizes(t.shape[0], world), r)
            spec.add(f"optim.state.{fqn}.{k}", D.Sharded(t, sh))
    spec.add("optim.param_groups", D.Plain([dict(PARAM_GROUP,
                                                  params=list(model_state(case)))]))
    D.run_ranks(spec, ckpt, 120, olmo=True)


def write_local(ckpt, case, world):
    """make_olmo_local's writer over this model: the root FSDP unit holds
    wte, ln_f and the output layer, each block is a unit of its own."""
    import make_olmo_local as L
    params, opt = model_state(case), optim_state(case)
    root = [(f, tuple(t.shape)) for f, t in params.items() if ".blocks." not in f]
    mods = [("", torch.float32, root)]
    for b in range(CASES[case]["n_layers"]):
        p = f"transformer.blocks.{b}."
        mods.append((L.WRAP + p[:-1], torch.float32,
                     [(f[len(p):], tuple(t.shape)) for f, t in params.items()
                      if f.startswith(p)]))
    full = collections.OrderedDict()
    for module, _, ps in mods:
        for rel, _ in ps:
            fqn = L.root_fqn(module, rel)
            full[fqn] = {"param": params[fqn], "exp_avg": opt[fqn]["exp_avg"],
                         "exp_avg_sq": opt[fqn]["exp_avg_sq"],
                         "module": module, "rel": rel}
    L.MODULES, L.MODEL_ORDER, L.FULL = mods, list(params), full
    tmp = ckpt + ".gen"
    L.write_case(tmp, "c", world, "2.1", "")
    os.rename(os.path.join(tmp, "c", "ckpt"), ckpt)
    import shutil
    shutil.rmtree(tmp)


def write_olmo_core(ckpt, case, world):
    """make_olmo_core's writer (OLMo-core 0.1 safetensors) over this model,
    FSDP flat pieces per unit (each block, then the rest)."""
    import make_olmo_core as M
    from make_olmo_legacy import trainer_state
    params, opt = model_state(case), optim_state(case)
    blocks = [[f for f in params if f.startswith(f"transformer.blocks.{b}.")]
              for b in range(CASES[case]["n_layers"])]
    units = blocks + [[f for f in params if ".blocks." not in f]]
    specs = {}
    for unit in units:
        total = sum(params[f].numel() for f in unit)
        per = -(-total // world)
        at = 0
        for f in unit:
            k = params[f].numel()
            ranges = []
            for r in range(world):
                lo, hi = max(at, r * per), min(at + k, (r + 1) * per)
                ranges.append(((lo - at, hi - at),) if lo < hi else ((0, 0),))
            specs[f] = M.Spec(ranges=ranges)
            at += k
    M.save_part(os.path.join(ckpt, "model"),
                collections.OrderedDict((f, (t, specs[f])) for f, t in params.items()),
                world, "0.1")
    flat = collections.OrderedDict()
    flat["num_param_groups"] = (torch.tensor(1), M.Spec())
    flat["param_group0"] = (M.serialize_to_tensor(
        dict(PARAM_GROUP, params=list(range(len(params))), _param_names=list(params))),
        M.Spec())
    for f, m in opt.items():
        flat[f"state.{f}.__step"] = (torch.tensor(3.0), M.Spec())
        for k, t in m.items():
            flat[f"state.{f}.__{k}"] = (t, specs[f])
    flat["state_keys"] = (M.serialize_to_tensor(["exp_avg", "exp_avg_sq", "step"]), M.Spec())
    M.save_part(os.path.join(ckpt, "optim"), flat, world, "0.1")
    os.makedirs(os.path.join(ckpt, "train"))
    for r in range(world):
        torch.save(trainer_state(r, world), os.path.join(ckpt, "train", f"rank{r}.pt"))


WRITERS = {"olmo-core": (None, write_core),
           "legacy": ("torch_legacy", write_legacy),
           "torch_new": ("torch_new", write_torch_new),
           "local": ("local", write_local),
           "olmo_core": ("olmo_core", write_olmo_core)}


def write_sharded(out, case, fmt, world):
    ckpt = os.path.join(out, "ckpt")
    if os.path.exists(ckpt):
        sys.exit(f"make_olmo_hf: {ckpt} already exists")
    name, fn = WRITERS[fmt]
    fn(ckpt, case, world)
    if name:
        with open(os.path.join(ckpt, "config.yaml"), "w") as f:
            f.write(config_yaml(case, name))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["unsharded", "sharded"])
    ap.add_argument("outdir")
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--format", choices=sorted(WRITERS))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--no-optim", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    NO_OPTIM[:] = [1] if args.no_optim else []
    if args.what == "unsharded":
        for c in args.case or TEST_CASES:
            write_unsharded(args.outdir, c)
        return 0
    if not args.format or not args.case or len(args.case) != 1:
        ap.error("sharded needs one --case and --format")
    write_sharded(args.outdir, args.case[0], args.format, args.ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
