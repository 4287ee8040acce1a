#!/usr/bin/python3
# ctest-cost: 8
"""unshard_hf_megatron.py - issue 29: `ckpt unshard --format hf` of
Megatron steps (legacy mp_rank_TT/ merged, and torch_dist) of a
Llama-shaped megatron.core GPT, against Megatron-Bridge's own mapping.

Fixtures (tests/fixtures/megatron_llama/README.md): Megatron-LM's
save_checkpoint wrote one tiny Llama-shaped GPT (RMSNorm, no biases,
SwiGLU, rope, 4 heads in 2 query groups, untied output layer, fp32) at
TP=1 and TP=2, legacy (--ckpt-format torch) and torch_dist, and with its
output layer tied to the embedding (legacy TP=1), each beside the model's
config.json (transformers' LlamaConfig.save_pretrained). The references
hf_ref/ and hf_ref_tied/ are Megatron-Bridge's Llama mapping (its
split_qkv_weights and GatedMLPMapping, run on Megatron's tensors) saved
with safetensors' save_file.

Checked exactly: each of the five steps exports its reference's files
(the tied one without lm_head.weight),
per tensor the same names, dtypes, shapes and bytes, config.json's model
fields, and every file byte for byte; run mode (DEST/iter_0000010-hf/)
and `ckpt process --unshard-format hf` of the torch_dist run;
and the refusals, each exit 1 with one error row naming what does not
fit and nothing at DEST: no config.json, a config.json whose
num_key_value_heads does not fit linear_qkv, a model_type that is not
llama, a config.json that ties embeddings of a model with its own output
layer and one that unties those of a tied model, and a model with biases and LayerNorm (tests/fixtures/
megatron_legacy/). Before: every Megatron export was refused ("no HF
mapping of its layer names ... is implemented")."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import (CKPT, SRC, check, error_of, finish,  # noqa: E402
                     st_tensors, unshard)
from s3test import age_tree, old_ctime  # noqa: E402

FIX = os.path.join(SRC, "tests", "fixtures", "megatron_llama")
REF = os.path.join(FIX, "hf_ref")
REF_TIED = os.path.join(FIX, "hf_ref_tied")
STEP = os.path.join("checkpoints", "iter_0000010")
CASES = ("tp1", "tp2", "dist_tp1", "dist_tp2")
MODEL_FIELDS = ("architectures", "model_type", "hidden_size",
                "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim",
                "vocab_size", "rope_parameters", "rms_norm_eps",
                "tie_word_embeddings", "dtype", "attention_bias",
                "mlp_bias")


def same_dir(name, got, ref=REF):
    files = sorted(os.listdir(ref))
    check(name + ": the reference's files", sorted(os.listdir(got)) == files,
          "%s vs %s" % (sorted(os.listdir(got)), files))
    a = st_tensors(os.path.join(got, "model.safetensors"))
    b = st_tensors(os.path.join(ref, "model.safetensors"))
    check(name + ": tensor names", sorted(a) == sorted(b),
          "%s vs %s" % (sorted(a), sorted(b)))
    bad = [k for k in b if k in a and a[k] != b[k]]
    check(name + ": dtypes, shapes, bytes (%d tensors)" % len(b), not bad,
          "differ: %s" % bad[:5])
    ca = json.load(open(os.path.join(got, "config.json")))
    cb = json.load(open(os.path.join(ref, "config.json")))
    bad = [k for k in MODEL_FIELDS if ca.get(k) != cb.get(k)]
    check(name + ": config.json model fields", not bad, repr(bad))
    for f in files:
        with open(os.path.join(got, f), "rb") as x, \
                open(os.path.join(ref, f), "rb") as y:
            check("%s: %s byte for byte" % (name, f), x.read() == y.read())


def refused(name, step, out, want, *opts):
    p = unshard("--format", "hf", *opts, step, out)
    check(name + ": exit 1", p.returncode == 1, p.stdout + p.stderr)
    check(name + ": its error row", error_of(p) == want,
          error_of(p) + "\nwanted: " + want)
    check(name + ": nothing at DEST", not os.path.exists(out))


def config_dir(tmp, name, **change):
    d = os.path.join(tmp, "cfg-" + name)
    os.makedirs(d)
    c = json.load(open(os.path.join(REF, "config.json")))
    c.update(change)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    return d


def main():
    tmp = tempfile.mkdtemp(prefix="hf-megatron-")
    try:
        for c in CASES:
            out = os.path.join(tmp, "out-" + c)
            p = unshard("--format", "hf", os.path.join(FIX, c, STEP), out)
            check(c + ": exit 0", p.returncode == 0, p.stdout + p.stderr)
            same_dir(c, out)

        # The tied model: no output_layer, config.json ties; no lm_head.
        out = os.path.join(tmp, "out-tied")
        p = unshard("--format", "hf", os.path.join(FIX, "tied", STEP), out)
        check("tied: exit 0", p.returncode == 0, p.stdout + p.stderr)
        same_dir("tied", out, REF_TIED)
        check("tied: no lm_head.weight", "lm_head.weight" not in
              st_tensors(os.path.join(out, "model.safetensors")))
        bare = os.path.join(tmp, "tied-untied-cfg", "iter_0000010")
        shutil.copytree(os.path.join(FIX, "tied", STEP), bare)
        shutil.copy(os.path.join(REF, "config.json"), os.path.dirname(bare))
        refused("untied config, tied model", bare, os.path.join(tmp, "o0"),
                bare + ": Megatron tensor 'output_layer.weight' missing: the "
                "embedding is shared (--untie-embeddings-and-output-weights "
                "not given), but %s/config.json says tie_word_embeddings "
                "false" % os.path.dirname(bare))

        # Run mode: the run's step to DEST/iter_0000010-hf/.
        dest = os.path.join(tmp, "run")
        p = unshard("--format", "hf", os.path.join(FIX, "tp2", "checkpoints"),
                    dest)
        check("run: one row", p.returncode == 0 and
              [l.split("\t")[:2] for l in p.stdout.splitlines()] ==
              [["unshard", "iter_0000010"]], p.stdout + p.stderr)
        same_dir("run", os.path.join(dest, "iter_0000010-hf"))

        # ckpt process --unshard-format hf: the torch_dist run's step to
        # DEST/<run>/iter_0000010-hf/ in the unshard phase.
        env = dict(os.environ, **old_ctime(), TMPDIR=tmp)
        run_dir = os.path.join(tmp, "runs", "mg-run")
        shutil.copytree(os.path.join(FIX, "dist_tp2", "checkpoints"), run_dir)
        age_tree(os.path.join(tmp, "runs"))
        pdest = os.path.join(tmp, "pdest")
        p = subprocess.run([CKPT, "process", "--no-wandb", "-q",
                            "--unshard-format", "hf", "--keep-source",
                            run_dir, "--dest", pdest], env=env,
                           capture_output=True, text=True, timeout=300)
        check("process: exit 0", p.returncode == 0, p.stdout + p.stderr)
        out = os.path.join(pdest, "mg-run", "iter_0000010-hf")
        check("process: iter_0000010-hf at DEST", os.path.isdir(out),
              str(list(os.walk(pdest))))
        if os.path.isdir(out):
            same_dir("process", out)

        # No config.json: the step without the run's.
        bare = os.path.join(tmp, "bare", "iter_0000010")
        shutil.copytree(os.path.join(FIX, "tp1", STEP), bare)
        refused("no config.json", bare, os.path.join(tmp, "o1"),
                bare + ": no config.json in the checkpoint or the directory "
                "above it (give the model's with --config-dir DIR)")
        step = os.path.join(FIX, "tp2", STEP)
        cfg = config_dir(tmp, "kv", num_key_value_heads=4)
        refused("num_key_value_heads does not fit", step,
                os.path.join(tmp, "o2"), step + ": Megatron tensor "
                "'decoder.layers.0.self_attention.linear_qkv.weight' is "
                "[64, 32]; %s/config.json says [96, 32] ((num_attention_heads"
                " + 2 * num_key_value_heads) * head_dim, hidden_size)" % cfg,
                "--config-dir", cfg)
        dist = os.path.join(FIX, "dist_tp2", STEP)
        cfg = config_dir(tmp, "layers", num_hidden_layers=3)
        refused("stacked layers: num_hidden_layers does not fit", dist,
                os.path.join(tmp, "o3"), dist + ": Megatron tensor "
                "'decoder.layers.self_attention.linear_qkv.layer_norm_weight'"
                " is [2, 32]; %s/config.json says [3, 32] (num_hidden_layers, "
                "hidden_size)" % cfg, "--config-dir", cfg)
        cfg = config_dir(tmp, "mistral", model_type="mistral")
        refused("model_type mistral", step, os.path.join(tmp, "o4"),
                step + ": %s/config.json: model_type 'mistral': a Megatron "
                "GPT model is exported as HF llama only (Megatron-Bridge's "
                "Llama mapping)" % cfg, "--config-dir", cfg)
        cfg = config_dir(tmp, "tied", tie_word_embeddings=True)
        refused("tied config, untied model", step, os.path.join(tmp, "o5"),
                step + ": Megatron tensor 'output_layer.weight': the model's "
                "output layer is its own, but %s/config.json says "
                "tie_word_embeddings true" % cfg, "--config-dir", cfg)
        # Megatron's default GPT: linear biases and LayerNorm (4 layers,
        # ffn 64): shapes fit, the biases have no place.
        cfg = config_dir(tmp, "biases", num_hidden_layers=4,
                         intermediate_size=64)
        legacy = os.path.join(SRC, "tests", "fixtures", "megatron_legacy",
                              "tp2pp1", STEP)
        refused("biases", legacy, os.path.join(tmp, "o6"),
                legacy + ": Megatron tensor 'decoder.layers.0.input_layernorm."
                "bias': a bias: HF llama with attention_bias and mlp_bias "
                "false has none, and RMSNorm has no bias",
                "--config-dir", cfg)
        cfg = config_dir(tmp, "zeroheads", num_attention_heads=0)
        refused("num_attention_heads 0", step, os.path.join(tmp, "o8"),
                step + ": %s/config.json: num_attention_heads is not a whole "
                "number from 1 to 1e9" % cfg, "--config-dir", cfg)
        cfg = config_dir(tmp, "attnbias", attention_bias=True)
        refused("attention_bias true", step, os.path.join(tmp, "o7"),
                step + ": %s/config.json: attention_bias is true: "
                "Megatron-Bridge's Llama mapping has no biases" % cfg,
                "--config-dir", cfg)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
