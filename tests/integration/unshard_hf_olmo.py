#!/usr/bin/python3
# ctest-cost: 40
"""unshard_hf_olmo.py - issue 29: `ckpt unshard --format hf` of OLMo steps
against what transformers' own conversion scripts write.

References (tests/fixtures/olmo-hf/, scripts/fixtures/gen-olmo-hf.sh):
transformers 5.12.1's convert_olmo_weights_to_hf.py /
convert_olmo2_weights_to_hf.py run on three small OLMo models
(tests/support/make_olmo_hf.py: OLMo 1 tied, OLMo 1 untied with GQA,
clip_qkv, padded embedding and eos 0, OLMo 2 with norms and q/k norms),
and transformers' save_pretrained of those models split at 60,000 bytes
and cast to bfloat16 and float16.

Here the same models are written sharded by torch 1.13 in each OLMo
checkpointer's format (torch_legacy, torch_new DCP, local, olmo_core),
with optimizer and trainer state beside them, and exported. Checked
exactly: the same files; per safetensors file the same tensor names,
dtypes, shapes and bytes; config.json's model-defining fields; and then
every file byte for byte (the export is what the script writes). Also:
OLMo-core's names (an OLMo-core trainer's step of the olmo2 model, with
--config-dir) give the same olmo2 files; --max-shard-size (the shards and
index transformers writes), --dtype
bf16/fp16 (torch's casts), --verify, -n, run mode (DEST/stepN-hf/, a
rerun skips), and the errors: no config.yaml, a config that does not fit
the tensors, a tensor HF olmo cannot hold, each exit 1 with one error
line and nothing at DEST."""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import (CKPT, SRC, check, error_of, finish, generate, run,  # noqa: E402
                     st_tensors, unshard)

FIX = os.path.join(SRC, "tests", "fixtures", "olmo-hf")
FORMATS = ("legacy", "torch_new", "local", "olmo_core")
CASES = ("olmo1-tied", "olmo1-untied", "olmo2")
MODEL_FIELDS = ("architectures", "model_type", "hidden_size",
                "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "vocab_size",
                "max_position_embeddings", "rope_parameters", "clip_qkv",
                "rms_norm_eps", "tie_word_embeddings", "eos_token_id",
                "pad_token_id", "bos_token_id", "dtype", "attention_bias")


def same_dir(name, got, ref):
    """got (ckpt's export) against ref (the writer's), exactly."""
    files = sorted(os.listdir(ref))
    check(name + ": the writer's files", sorted(os.listdir(got)) == files,
          "%s vs %s" % (sorted(os.listdir(got)), files))
    for f in files:
        g, r = os.path.join(got, f), os.path.join(ref, f)
        if not os.path.exists(g):
            continue
        if f.endswith(".safetensors"):
            a, b = st_tensors(g), st_tensors(r)
            check("%s: %s tensor names" % (name, f), sorted(a) == sorted(b),
                  "%s vs %s" % (sorted(a), sorted(b)))
            bad = [k for k in b if k in a and a[k] != b[k]]
            check("%s: %s dtypes, shapes, bytes" % (name, f), not bad,
                  "differ: %s" % bad[:5])
        if f == "config.json":
            a, b = json.load(open(g)), json.load(open(r))
            bad = [k for k in MODEL_FIELDS if a.get(k) != b.get(k)]
            check(name + ": config.json model fields", not bad,
                  "; ".join("%s %r vs %r" % (k, a.get(k), b.get(k))
                            for k in bad))
        with open(g, "rb") as x, open(r, "rb") as y:
            check("%s: %s byte for byte" % (name, f), x.read() == y.read())


def export(name, step, out, *opts):
    p = unshard("--format", "hf", *opts, step, out)
    check(name + ": exit 0", p.returncode == 0, p.stdout + p.stderr)
    return p


def refused(name, step, out, want):
    p = unshard("--format", "hf", step, out)
    check(name + ": exit 1", p.returncode == 1, p.stdout + p.stderr)
    check(name + ": its error row", error_of(p).endswith(want),
          error_of(p) + "\nwanted: " + want)
    check(name + ": nothing at DEST", not os.path.exists(out))


def main():
    tmp = tempfile.mkdtemp(prefix="hf-olmo-")
    try:
        jobs = [["make_olmo_hf.py", "sharded", os.path.join(tmp, c + "-" + f),
                 "--case", c, "--format", f, "--ranks", "3"]
                for c in CASES for f in FORMATS]
        jobs.append(["make_olmo_hf.py", "sharded",
                     os.path.join(tmp, "olmo2-core"), "--case", "olmo2",
                     "--format", "olmo-core", "--ranks", "2"])
        generate(*jobs)
        for c in CASES:
            for f in FORMATS:
                name = "%s %s" % (c, f)
                out = os.path.join(tmp, "out-%s-%s" % (c, f))
                export(name, os.path.join(tmp, c + "-" + f, "ckpt"), out)
                same_dir(name, out, os.path.join(FIX, c, "reference"))

        # OLMo-core's names, the HF config given: OLMo-core's converter's
        # mapping gives transformers' olmo2 files.
        ref2 = os.path.join(FIX, "olmo2", "reference")
        core = os.path.join(tmp, "olmo2-core", "ckpt")
        out = os.path.join(tmp, "core")
        export("OLMo-core names", core, out, "--config-dir", ref2)
        same_dir("OLMo-core names", out, ref2)
        cfg = os.path.join(tmp, "gpt2cfg")
        os.makedirs(cfg)
        with open(os.path.join(cfg, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2"}, f)
        p = unshard("--format", "hf", "--config-dir", cfg, core,
                    os.path.join(tmp, "core-bad"))
        check("OLMo-core names as an unmapped model_type: refused",
              p.returncode == 1 and error_of(p).endswith(
                  "OLMo-core weights as HF model_type 'gpt2': no mapping "
                  "(olmo2, olmo3, llama, qwen2, qwen3 are mapped)") and
              not os.path.exists(os.path.join(tmp, "core-bad")), error_of(p))

        step = os.path.join(tmp, "olmo1-untied-torch_new", "ckpt")
        out = os.path.join(tmp, "shard")
        export("shards", step, out, "--max-shard-size", "60000")
        same_dir("shards", out, os.path.join(FIX, "olmo1-untied",
                                             "reference-shard60k"))

        for dt in ("bf16", "fp16"):
            out = os.path.join(tmp, "dtype-" + dt)
            export("--dtype " + dt, os.path.join(tmp, "olmo2-local", "ckpt"),
                   out, "--dtype", dt, "--verify")
            same_dir("--dtype " + dt, out, os.path.join(FIX, "olmo2",
                                                        "reference-" + dt))

        out = os.path.join(tmp, "dry")
        p = export("-n", os.path.join(tmp, "olmo2-legacy", "ckpt"), out, "-n")
        check("-n: would-unshard, nothing written",
              p.stdout.startswith("would-unshard\t") and
              not os.path.exists(out), p.stdout)

        # Run mode: each step to DEST/stepN-hf/; a rerun skips them.
        runs = os.path.join(tmp, "run")
        os.makedirs(runs)
        shutil.copytree(os.path.join(tmp, "olmo2-legacy", "ckpt"),
                        os.path.join(runs, "step10"))
        shutil.copytree(os.path.join(tmp, "olmo2-olmo_core", "ckpt"),
                        os.path.join(runs, "step20"))
        os.remove(os.path.join(runs, "step20", "config.yaml"))
        shutil.copy(os.path.join(runs, "step10", "config.yaml"), runs)
        dest = os.path.join(tmp, "runout")
        p = unshard("--format", "hf", runs, dest)
        rows = [l.split("\t")[:2] for l in p.stdout.splitlines()]
        check("run: one row per step", p.returncode == 0 and
              rows == [["unshard", "step10"], ["unshard", "step20"]],
              p.stdout + p.stderr)
        for s in ("step10", "step20"):
            same_dir("run " + s, os.path.join(dest, s + "-hf"),
                     os.path.join(FIX, "olmo2", "reference"))
        p = unshard("--format", "hf", runs, dest)
        check("run again: skipped", p.returncode == 0 and p.stdout ==
              "skip\tstep10\talready exported: %s/step10-hf exists\n"
              "skip\tstep20\talready exported: %s/step20-hf exists\n"
              % (dest, dest), p.stdout + p.stderr)
        p = unshard("--format", "hf", "--delete-sharded", runs, dest)
        check("--delete-sharded refused (exit 2)", p.returncode == 2 and
              "holds the model only" in p.stderr, p.stderr)

        # Errors: nothing written.
        bad = os.path.join(tmp, "noconfig")
        shutil.copytree(os.path.join(tmp, "olmo2-legacy", "ckpt"), bad)
        os.remove(os.path.join(bad, "config.yaml"))
        refused("no config.yaml", bad, os.path.join(tmp, "o1"),
                bad + ": no config.yaml in the checkpoint or its run: an OLMo "
                "model's config.json is made from its `model` section")
        bad = os.path.join(tmp, "wrongcfg")
        shutil.copytree(os.path.join(tmp, "olmo2-legacy", "ckpt"), bad)
        cfg = os.path.join(bad, "config.yaml")
        text = open(cfg).read().replace("  d_model: 32", "  d_model: 64")
        open(cfg, "w").write(text)
        refused("config does not fit", bad, os.path.join(tmp, "o2"),
                "OLMo tensor 'transformer.blocks.0.att_proj.weight' has 64 "
                "rows; %s says 128" % cfg)
        bad = os.path.join(tmp, "olmo1norms")
        shutil.copytree(os.path.join(tmp, "olmo2-legacy", "ckpt"), bad)
        cfg = os.path.join(bad, "config.yaml")
        text = open(cfg).read().replace("  norm_after: true",
                                        "  norm_after: false")
        open(cfg, "w").write(text)
        refused("a tensor olmo cannot hold", bad, os.path.join(tmp, "o3"),
                bad + ": OLMo tensor 'transformer.ln_f.weight' has no place in HF "
                "olmo (the conversion script maps no such tensor)")
        p = run(CKPT, "unshard", "--dtype", "bf16", "a", "b", ok=False)
        check("--dtype without --format hf: usage (exit 2)",
              p.returncode == 2 and "go with --format hf" in p.stderr,
              p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
