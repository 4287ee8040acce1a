#!/usr/bin/python3
# ctest-cost: 15
"""unshard_hf_trainer.py - issue 29: `ckpt unshard --format hf` of what
HF Trainer, accelerate and DeepSpeed write, against their own tools'
output (tests/fixtures/real-writers/, provenance beside each):

- an HF Trainer checkpoint-N split into 3 safetensors + index, given
  directly: the same tensors (names, dtypes, shapes, bytes) in one
  model.safetensors, config.json and generation_config.json copied;
  --max-shard-size splits it again (3 shards, the index's total_size);
- an accelerate FSDP2 SHARDED_STATE_DICT run (checkpoint-2/
  pytorch_model_fsdp_0/, no config.json: --config-dir gives the model's):
  run mode writes checkpoint-2-hf/ whose model.safetensors is byte for
  byte accelerate merge-weights' output; plain run mode writes model.pt
  and --format safetensors model.safetensors with merge-weights' tensors
  (before: "unsupported checkpoint format 'hf'"); the step given as
  itself is one checkpoint: `ls` judges it, --format hf writes
  merge-weights' bytes into DEST, plain unshard model.pt (before: `ls`
  printed nothing, unshard "no checkpoint"); without a config, an error
  naming what is missing;
- HF Trainer + DeepSpeed ZeRO-3 whose checkpoint-2/model.safetensors holds
  only empty placeholders (accelerate's CPU rank race): judged a DeepSpeed
  step (before: unsharded, so run mode skipped it as "not sharded"), merged
  from global_step2/ through `latest`: --format hf byte for byte what
  zero_to_fp32.py --safe_serialization writes, config.json the
  checkpoint's; plain run mode zero_to_fp32's tensors in checkpoint.pt;
- HF Trainer + DeepSpeed ZeRO-2 with tied embeddings, global_step2/ given
  directly (config.json found above it): zero_to_fp32's tensors with the
  tied lm_head.weight written once (as embed_tokens; zero_to_fp32's own
  --safe_serialization fails there, its log committed), equal to the
  Trainer's own model.safetensors minus that copy;
- torch DCP's HuggingFaceStorageWriter shards (torchtitan's and
  torchtune's HF export): the tensors of torch's own consolidation;
- a Megatron torch_dist step without config.json: refused, nothing written."""
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import (CKPT, SRC, check, error_of, finish, run,  # noqa: E402
                     st_tensors, unshard)

RW = os.path.join(SRC, "tests", "fixtures", "real-writers")


def torch_tensors(path):
    sd = torch.load(path, weights_only=True)
    out = {}
    for k, t in sd.items():
        t = t.detach().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        out[k] = ({torch.float32: "F32", torch.bfloat16: "BF16",
                   torch.float16: "F16"}[t.dtype], list(t.shape), raw)
    return out


def same_tensors(name, got, want):
    check(name + ": tensor names", sorted(got) == sorted(want),
          "%s vs %s" % (sorted(got), sorted(want)))
    bad = [k for k in want if k in got and got[k] != want[k]]
    check(name + ": dtypes, shapes, bytes", not bad, "differ: %s" % bad[:5])


def same_file(name, a, b):
    with open(a, "rb") as x, open(b, "rb") as y:
        check(name, x.read() == y.read())


def rows(p):
    return [l.split("\t")[:2] for l in p.stdout.splitlines()]


def main():
    tmp = tempfile.mkdtemp(prefix="hf-trainer-")
    try:
        # HF Trainer, split safetensors, given directly.
        ck = os.path.join(RW, "hf_trainer_llama_sharded", "checkpoint-2")
        out = os.path.join(tmp, "llama")
        p = unshard("--format", "hf", ck, out)
        check("trainer: exit 0", p.returncode == 0, p.stdout + p.stderr)
        want = {}
        for f in sorted(os.listdir(ck)):
            if f.endswith(".safetensors"):
                want.update(st_tensors(os.path.join(ck, f)))
        check("trainer: config, generation config, one model file",
              sorted(os.listdir(out)) == ["config.json",
                                          "generation_config.json",
                                          "model.safetensors"],
              str(os.listdir(out)))
        same_tensors("trainer", st_tensors(os.path.join(out,
                                                        "model.safetensors")),
                     want)
        for f in ("config.json", "generation_config.json"):
            same_file("trainer: %s copied" % f, os.path.join(out, f),
                      os.path.join(ck, f))
        out = os.path.join(tmp, "llama-split")
        p = unshard("--format", "hf", "--max-shard-size", "150000", ck, out)
        idx = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        ref = json.load(open(os.path.join(ck, "model.safetensors.index.json")))
        got = {}
        for f in set(idx["weight_map"].values()):
            got.update(st_tensors(os.path.join(out, f)))
        check("trainer split: 3 shards, the index's sizes",
              len(set(idx["weight_map"].values())) == 3 and
              idx["metadata"] == ref["metadata"] and
              sorted(idx["weight_map"]) == sorted(ref["weight_map"]),
              json.dumps(idx["metadata"]))
        same_tensors("trainer split", got, want)

        # accelerate FSDP2, run mode.
        acc = os.path.join(RW, "hf_trainer_fsdp2_sharded")
        refs = os.path.join(RW, "hf_trainer_fsdp2_export")
        merged = os.path.join(refs, "reference_accelerate_merge_weights",
                              "model.safetensors")
        out = os.path.join(tmp, "acc-hf")
        p = unshard("--format", "hf", "--config-dir",
                    os.path.join(refs, "model_config"), acc, out)
        check("accelerate --format hf: a row for checkpoint-2",
              p.returncode == 0 and rows(p) == [["unshard", "checkpoint-2"]],
              p.stdout + p.stderr)
        same_file("accelerate --format hf: merge-weights' model.safetensors",
                  os.path.join(out, "checkpoint-2-hf", "model.safetensors"),
                  merged)
        same_file("accelerate --format hf: config.json from --config-dir",
                  os.path.join(out, "checkpoint-2-hf", "config.json"),
                  os.path.join(refs, "model_config", "config.json"))
        out = os.path.join(tmp, "acc-pt")
        p = unshard(acc, out)
        check("accelerate run mode: unsharded (was unsupported)",
              p.returncode == 0 and rows(p) == [["unshard", "checkpoint-2"]],
              p.stdout + p.stderr)
        same_tensors("accelerate model.pt",
                     torch_tensors(os.path.join(out, "checkpoint-2-unsharded",
                                                "model.pt")),
                     st_tensors(merged))
        out = os.path.join(tmp, "acc-st")
        p = unshard("--format", "safetensors", acc, out)
        d = os.path.join(out, "checkpoint-2-unsharded")
        check("accelerate --format safetensors: model.safetensors",
              p.returncode == 0 and os.listdir(d) == ["model.safetensors"],
              p.stdout + p.stderr)
        same_tensors("accelerate model.safetensors",
                     st_tensors(os.path.join(d, "model.safetensors")),
                     st_tensors(merged))
        # The same step given directly (what accelerate merge-weights is
        # given the inside of): one checkpoint, not an empty run (before:
        # `ls` printed nothing, unshard "no checkpoint").
        step = os.path.join(acc, "checkpoint-2")
        p = run(CKPT, "ls", "-l", step)
        check("accelerate step given directly: ls judges it",
              p.returncode == 0 and p.stdout.split("\t")[1:5] ==
              ["checkpoint-2", "2", "hf", "complete"], p.stdout + p.stderr)
        out = os.path.join(tmp, "acc-step-hf")
        p = unshard("--format", "hf", "--config-dir",
                    os.path.join(refs, "model_config"), step, out)
        check("accelerate step given directly --format hf: written",
              p.returncode == 0 and sorted(os.listdir(out)) ==
              ["config.json", "generation_config.json", "model.safetensors"]
              if os.path.isdir(out) else False, p.stdout + p.stderr)
        if os.path.isfile(os.path.join(out, "model.safetensors")):
            same_file("accelerate step given directly: merge-weights' bytes",
                      os.path.join(out, "model.safetensors"), merged)
        out = os.path.join(tmp, "acc-step-pt")
        p = unshard(step, out)
        check("accelerate step given directly: model.pt",
              p.returncode == 0 and os.path.isfile(
                  os.path.join(out, "model.pt")), p.stdout + p.stderr)
        if p.returncode == 0 and os.path.isfile(os.path.join(out, "model.pt")):
            same_tensors("accelerate step given directly: model.pt",
                         torch_tensors(os.path.join(out, "model.pt")),
                         st_tensors(merged))

        out = os.path.join(tmp, "acc-noconfig")
        p = unshard("--format", "hf", acc, out)
        check("accelerate without a config: the error, nothing written",
              p.returncode == 1 and "no config.json in the checkpoint or the "
              "directory above it (give the model's with --config-dir DIR)"
              in p.stdout and not os.path.exists(os.path.join(
                  out, "checkpoint-2-hf")), p.stdout + p.stderr)

        # HF Trainer + DeepSpeed ZeRO-3, placeholders at the top.
        race = os.path.join(RW, "hf_ds_zero3_race")
        rr = os.path.join(race, "run")
        p = run(CKPT, "ls", rr)
        check("ZeRO-3 placeholders: judged a DeepSpeed step",
              p.stdout.split("\t")[1:5] == ["checkpoint-2", "2", "deepspeed",
                                             "complete"], p.stdout)
        out = os.path.join(tmp, "race-hf")
        p = unshard("--format", "hf", rr, out)
        check("ZeRO-3 placeholders --format hf: merged from global_step2",
              p.returncode == 0 and rows(p) == [["unshard", "checkpoint-2"]],
              p.stdout + p.stderr)
        same_file("ZeRO-3 --format hf: zero_to_fp32 --safe_serialization's "
                  "model.safetensors",
                  os.path.join(out, "checkpoint-2-hf", "model.safetensors"),
                  os.path.join(race, "reference_zero_to_fp32",
                               "model.safetensors"))
        same_file("ZeRO-3 --format hf: the checkpoint's config.json",
                  os.path.join(out, "checkpoint-2-hf", "config.json"),
                  os.path.join(rr, "checkpoint-2", "config.json"))
        out = os.path.join(tmp, "race-pt")
        p = unshard(rr, out)
        check("ZeRO-3 placeholders run mode: unsharded (was 'not sharded')",
              p.returncode == 0 and rows(p) == [["unshard", "checkpoint-2"]],
              p.stdout + p.stderr)
        same_tensors("ZeRO-3 checkpoint.pt",
                     torch_tensors(os.path.join(out, "checkpoint-2-unsharded",
                                                "checkpoint.pt")),
                     st_tensors(os.path.join(race, "reference_zero_to_fp32",
                                             "model.safetensors")))

        # HF Trainer + DeepSpeed ZeRO-2, tied embeddings.
        tied = os.path.join(RW, "hf_ds_zero2_tied")
        out = os.path.join(tmp, "tied")
        p = unshard("--format", "hf", os.path.join(tied, "run", "checkpoint-2",
                                                   "global_step2"), out)
        check("tied: exit 0", p.returncode == 0, p.stdout + p.stderr)
        got = st_tensors(os.path.join(out, "model.safetensors"))
        want = torch_tensors(os.path.join(tied, "reference_zero_to_fp32",
                                          "pytorch_model.bin"))
        check("tied: zero_to_fp32 holds lm_head.weight, equal to "
              "embed_tokens", want.get("lm_head.weight") ==
              want.get("model.embed_tokens.weight"))
        del want["lm_head.weight"]
        same_tensors("tied: zero_to_fp32's, lm_head written once", got, want)
        trainer = st_tensors(os.path.join(tied, "run", "checkpoint-2",
                                          "model.safetensors"))
        del trainer["lm_head.weight"]
        same_tensors("tied: the Trainer's own, lm_head written once", got,
                     trainer)

        # torch DCP's HuggingFaceStorageWriter (torchtitan's and
        # torchtune's HF export), sharded: the tensors of torch's own
        # consolidation, config.json from --config-dir.
        hfw = os.path.join(SRC, "tests", "fixtures", "dcp-v2.14", "hf_sharded")
        cfg = os.path.join(tmp, "cfg")
        os.makedirs(cfg)
        with open(os.path.join(cfg, "config.json"), "w") as f:
            f.write('{"model_type": "llama", "tie_word_embeddings": false}\n')
        out = os.path.join(tmp, "hfwriter")
        p = unshard("--format", "hf", "--config-dir", cfg,
                    os.path.join(hfw, "ckpt"), out)
        check("HuggingFaceStorageWriter shards: exit 0", p.returncode == 0,
              p.stdout + p.stderr)
        want = {}
        ref = os.path.join(hfw, "reference")
        for f in sorted(os.listdir(ref)):
            if f.endswith(".safetensors"):
                want.update(st_tensors(os.path.join(ref, f)))
        same_tensors("HuggingFaceStorageWriter shards: torch's consolidation",
                     st_tensors(os.path.join(out, "model.safetensors")), want)

        # Megatron torch_dist without the model's config.json (exported
        # in unshard_hf_megatron.py): refused, said why, nothing written.
        mg = os.path.join(RW, "megatron_core_dist_ckpt_tensors", "ckpt")
        out = os.path.join(tmp, "megatron")
        p = unshard("--format", "hf", mg, out)
        check("Megatron torch_dist without config.json: refused, nothing "
              "written",
              p.returncode == 1 and error_of(p).endswith(
                  "%s: no config.json in the checkpoint or the directory "
                  "above it (give the model's with --config-dir DIR)" % mg)
              and not os.path.exists(out), error_of(p))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
