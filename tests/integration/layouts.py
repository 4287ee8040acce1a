#!/usr/bin/python3
# ctest-cost: 4
"""layouts.py - issue 21 (judging): the checkpoints other trainers write,
judged with each writer's own completeness rule (src/run/layout_*.c).

Every run is built from the real libraries' files (tests/fixtures/
real-writers/, provenance beside them); the damaged ones are damaged as
../shared/fixtures/real-writers/damaged_*/DAMAGE.txt describes a crash
leaving them (a DeepSpeed rank's optim file never written, a Megatron
torch_dist save killed before metadata.json, an HF Trainer step killed
before trainer_state.json, an HF Trainer + DeepSpeed step killed inside
the engine's save), plus a Megatron legacy step without a tensor
rank and rank-local DCP steps without a rank's metadata (its data there,
or gone too: then the sharded tensor's chunks do not cover it).

`ckpt ls` gives each step its verdict and format; `clean -n` predicts and
`clean` does exactly this: runs whose newest step is complete are kept
(exit 0), a run is deleted only on a proven incomplete step, and
`--keep-last 1` prunes the older `checkpoint-N`, `global_stepN`,
`iter_N` steps of a kept run. Before: DeepSpeed, Megatron (legacy and
torch_dist), accelerate FSDP, HF `pytorch_model*.bin` and rank-local DCP
steps were `unknown` or
unreadable (".metadata: pickle global '...SavePlan' is not allowed"), so
clean reported every such run an `error` (exit 1) and kept the damaged
ones too."""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, ckpt, listing, scratch  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures")
RW = os.path.join(FIX, "real-writers")
HF = os.path.join(RW, "hf_trainer_llama_sharded", "checkpoint-2")
FSDP = os.path.join(RW, "hf_trainer_fsdp2_sharded", "checkpoint-2")
DS2 = os.path.join(RW, "deepspeed_zero2_fp32", "checkpoints", "global_step2")
DS3 = os.path.join(RW, "deepspeed_zero3_fp32", "checkpoints", "global_step2")
DSB = os.path.join(RW, "deepspeed_zero1_bf16", "checkpoints", "global_step2")
MGL = os.path.join(RW, "megatron_legacy_torch", "checkpoints",
                   "iter_0000010")
MGD = os.path.join(RW, "megatron_core_dist_ckpt_tensors", "ckpt")
RL = os.path.join(FIX, "dcp-v2.14", "rank_local", "ckpt")


def old_hf(d, cut):
    """An HF Trainer step as transformers < 4.35 wrote it by default
    (safe_serialization off): torch.save weights split in two + their
    index (save_pretrained's names), optimizer.pt, rng_state.pth,
    trainer_state.json; cut: the second shard cut short as a killed
    write leaves it."""
    import torch
    os.makedirs(d)
    sd = {"a.weight": torch.arange(6.0).reshape(2, 3), "b.bias": torch.ones(4)}
    torch.save({"a.weight": sd["a.weight"]},
               os.path.join(d, "pytorch_model-00001-of-00002.bin"))
    torch.save({"b.bias": sd["b.bias"]},
               os.path.join(d, "pytorch_model-00002-of-00002.bin"))
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        f.write('{"metadata": {"total_size": 40}, "weight_map": {'
                '"a.weight": "pytorch_model-00001-of-00002.bin", '
                '"b.bias": "pytorch_model-00002-of-00002.bin"}}')
    torch.save({"state": {}, "param_groups": []},
               os.path.join(d, "optimizer.pt"))
    torch.save({"python": 1}, os.path.join(d, "rng_state.pth"))
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        f.write('{"global_step": 3}')
    if cut:
        p = os.path.join(d, "pytorch_model-00002-of-00002.bin")
        os.truncate(p, os.path.getsize(p) // 2)


def run_dir(root, name, pieces, drop=()):
    """A run: config.yaml + wandb/, pieces [(src, rel)] copied in, then
    the files in drop (relative to the run) removed."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "wandb"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("run_name: %s\n" % name)
    for src, rel in pieces:
        shutil.copytree(src, os.path.join(d, rel))
    for rel in drop:
        p = os.path.join(d, rel)
        if os.path.isdir(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
    for dp, ds, fs in os.walk(d):
        for n in ds + fs:
            os.chmod(os.path.join(dp, n), 0o755 if n in ds else 0o644)
    return d


RUNS = [
    # name, pieces, files removed
    ("ds-bf16", [(DSB, "checkpoints/global_step2")], []),
    ("ds-cut", [(DS2, "checkpoints/global_step4")],
     ["checkpoints/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt"]),
    ("ds-interrupted", [(DS2, "checkpoints/global_step2"),
                        (DS2, "checkpoints/global_step4")],
     ["checkpoints/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt"]),
    ("ds-nomodel", [(DS2, "global_step2")],
     ["global_step2/mp_rank_00_model_states.pt"]),
    ("ds3", [(DS3, "checkpoints/global_step2"),
             (DS3, "checkpoints/global_step4")], []),
    ("ds3-cut", [(DS3, "global_step2")],
     ["global_step2/zero_pp_rank_1_mp_rank_00_model_states.pt"]),
    ("hf-bin", [], []),
    ("hf-bin-cut", [], []),
    ("hf-ds", [(HF, "checkpoint-4"), (DS2, "checkpoint-4/global_step4")],
     []),
    ("hf-ds-cut", [(HF, "checkpoint-4"), (DS2, "checkpoint-4/global_step4")],
     ["checkpoint-4/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt",
      "checkpoint-4/rng_state.pth", "checkpoint-4/trainer_state.json"]),
    ("hf-fsdp", [(FSDP, "checkpoint-2")], []),
    ("hf-fsdp-cut", [(FSDP, "checkpoint-2")],
     ["checkpoint-2/trainer_state.json"]),
    ("hf-partial", [(HF, "checkpoint-4")],
     ["checkpoint-4/trainer_state.json"]),
    ("hf-two", [(HF, "checkpoint-2"), (HF, "checkpoint-4")], []),
    ("mg-dist", [(MGD, "checkpoints/iter_0000010")], []),
    ("mg-dist-cut", [(MGD, "checkpoints/iter_0000020")],
     ["checkpoints/iter_0000020/metadata.json",
      "checkpoints/iter_0000020/.metadata"]),
    ("mg-legacy", [(MGL, "iter_0000010"), (MGL, "iter_0000020")], []),
    ("mg-legacy-cut", [(MGL, "iter_0000010")],
     ["iter_0000010/mp_rank_01"]),
    ("ranklocal", [(RL, "step5")], []),
    ("ranklocal-cut", [(RL, "step5")], ["step5/__1.metadata"]),
    ("ranklocal-gone", [(RL, "step5")],
     ["step5/__1.metadata", "step5/__1_0.distcp"]),
]


DS_RANK1 = ("zero_pp_rank_1_mp_rank_00_optim_states.pt missing (the "
            "recorded world size calls for it)")
HF_STATE = ("trainer_state.json missing (HF Trainer writes it last, after "
            "the optimizer and RNG state)")

# ckpt ls: RUN, CHECKPOINT, STEP, FORMAT, STATE
LS = [
    ("ds-bf16", "global_step2", "2", "deepspeed", "complete"),
    ("ds-cut", "global_step4", "4", "deepspeed", "incomplete: " + DS_RANK1),
    ("ds-interrupted", "global_step2", "2", "deepspeed", "complete"),
    ("ds-interrupted", "global_step4", "4", "deepspeed",
     "incomplete: " + DS_RANK1),
    ("ds-nomodel", "global_step2", "2", "deepspeed", "incomplete: "
     "mp_rank_00_model_states.pt missing (DeepSpeed saves the model states "
     "first)"),
    ("ds3", "global_step2", "2", "deepspeed", "complete"),
    ("ds3", "global_step4", "4", "deepspeed", "complete"),
    ("ds3-cut", "global_step2", "2", "deepspeed", "incomplete: "
     "zero_pp_rank_1_mp_rank_00_model_states.pt missing (the recorded world "
     "size calls for it)"),
    ("hf-bin", "checkpoint-3", "3", "unsharded", "complete"),
    ("hf-bin-cut", "checkpoint-3", "3", "unsharded", "incomplete: "
     "pytorch_model-00002-of-00002.bin: cut short (no end of central "
     "directory)"),
    ("hf-ds", "checkpoint-4", "4", "unsharded", "complete"),
    ("hf-ds-cut", "checkpoint-4", "4", "unsharded", "incomplete: "
     "global_step4/" + DS_RANK1),
    ("hf-fsdp", "checkpoint-2", "2", "hf", "complete"),
    ("hf-fsdp-cut", "checkpoint-2", "2", "hf", "incomplete: " + HF_STATE),
    ("hf-partial", "checkpoint-4", "4", "unsharded",
     "incomplete: " + HF_STATE),
    ("hf-two", "checkpoint-2", "2", "unsharded", "complete"),
    ("hf-two", "checkpoint-4", "4", "unsharded", "complete"),
    ("mg-dist", "iter_0000010", "10", "megatron", "complete"),
    ("mg-dist-cut", "iter_0000020", "20", "megatron", "incomplete: "
     "metadata.json missing (Megatron writes it last, after the DCP files)"),
    ("mg-legacy", "iter_0000010", "10", "megatron", "complete"),
    ("mg-legacy", "iter_0000020", "20", "megatron", "complete"),
    ("mg-legacy-cut", "iter_0000010", "10", "megatron", "incomplete: "
     "mp_rank_01/model_optim_rng.pt missing (the recorded parallel sizes "
     "call for it)"),
    ("ranklocal", "step5", "5", "dcp", "complete"),
    ("ranklocal-cut", "step5", "5", "dcp", "incomplete: __1.metadata "
     "missing (rank 1 wrote data files)"),
    ("ranklocal-gone", "step5", "5", "dcp", "incomplete: weight: the "
     "ranks' chunks do not cover it (a rank's __R.metadata missing)"),
]

# clean: run -> (kept checkpoint and format, or None: deleted)
KEEP = {
    "ds-bf16": "global_step2 (deepspeed)",
    "ds-interrupted": "global_step2 (deepspeed)",
    "ds3": "global_step4 (deepspeed)",
    "hf-bin": "checkpoint-3 (unsharded)",
    "hf-ds": "checkpoint-4 (unsharded)",
    "hf-fsdp": "checkpoint-2 (hf)",
    "hf-two": "checkpoint-4 (unsharded)",
    "mg-dist": "iter_0000010 (megatron)",
    "mg-legacy": "iter_0000020 (megatron)",
    "ranklocal": "step5 (dcp)",
}
PRUNED = {"ds3": "checkpoints/global_step2", "hf-two": "checkpoint-2",
          "mg-legacy": "iter_0000010"}


def clean_rows(dry, keep_last):
    out = []
    for name, _, _ in RUNS:
        if name in KEEP:
            line = "keep\t%s\tcomplete checkpoint %s" % (name, KEEP[name])
            if keep_last and name in PRUNED:
                line += "; %s %s" % ("would prune" if dry else "pruned",
                                      os.path.basename(PRUNED[name]))
        else:
            why = [r[4] for r in LS if r[0] == name][-1]
            step = [r[1] for r in LS if r[0] == name][-1]
            line = "%s\t%s\tno complete checkpoint with step > 0 (%s: %s)" % (
                "would-delete" if dry else "delete", name, step,
                why[len("incomplete: "):])
        out.append(line + "\n")
    return "".join(out)


def main():
    c = Checker()
    with scratch("ckpt-layouts-") as tmp:
        root = os.path.join(tmp, "runs")
        for name, pieces, drop in RUNS:
            d = run_dir(root, name, pieces, drop)
            if name.startswith("hf-bin"):
                old_hf(os.path.join(d, "checkpoint-3"), name == "hf-bin-cut")
        names = [r[0] for r in RUNS]
        os.chdir(root)
        before = {n: listing(n) for n in names}
        rc, out, err = ckpt("ls", *names)
        c.eq("ls: verdict and step of each layout",
             (rc, [tuple(l.split("\t")[:5]) for l in out.splitlines()]),
             (0, LS))

        for keep_last in (False, True):
            extra = ["--keep-last", "1"] if keep_last else []
            rc, out, err = ckpt("clean", "-n", "--min-age", "0", *extra,
                                *names)
            c.eq("clean -n %s: rows, exit 0" % extra, (rc, out),
                 (0, clean_rows(True, keep_last)))
            c.eq("clean -n %s: nothing deleted" % extra,
                 {n: listing(n) for n in names}, before)

        rc, out, err = ckpt("clean", "--min-age", "0", *names)
        c.eq("clean: rows as predicted, exit 0", (rc, out),
             (0, clean_rows(False, False)))
        left = sorted(n for n in names if os.path.exists(n))
        c.eq("clean: only the runs with a proven incomplete step are gone",
             left, sorted(KEEP))
        c.eq("clean: kept runs untouched", {n: listing(n) for n in left},
             {n: before[n] for n in left})

        rc, out, err = ckpt("clean", "--min-age", "0", "--keep-last", "1",
                            *left)
        want = "".join(l for l in clean_rows(False, True).splitlines(True)
                       if l.split("\t")[1] in KEEP)
        c.eq("clean --keep-last 1: older steps pruned, exit 0", (rc, out),
             (0, want))
        for n in left:
            pre = PRUNED.get(n)
            c.eq("clean --keep-last 1: %s files left" % n, listing(n),
                 [f for f in before[n]
                  if not (pre and f.startswith(pre + "/"))])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
