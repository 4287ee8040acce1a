#!/usr/bin/python3
# ctest-cost: 6
"""unshard_dcp_safetensors.py: torch DCP written as safetensors (issue 21),
from tests/fixtures/dcp-v2.14/ (torch 2.14.1, 2 ranks over gloo, made by
make_dcp_v2.py):
  * st_format: FileSystemWriter(serialization_format=SAFETENSORS): .metadata
    plus __R_0.distcp files holding the byte items, then one safetensors
    file of the rank's tensors (torch's own readers cannot read it back);
  * hf_sharded: HuggingFaceStorageWriter(save_distributed=True, two output
    files): shard-RRRRR-model-KKKKK-of-00002.safetensors only;
  * hf_consolidated: the same with enable_consolidation: torch's own
    model-KKKKK-of-00002.safetensors + index, the shards under sharded/.
unshard_dcp_v2.py compares every output with reference.pt. Here: the
safetensors output holds, tensor for tensor, the very bytes (dtype, shape,
data) of torch's own consolidation (consolidate_safetensors_files), direct
and through the storage API; `ls -l` judges each as a step of a run
(dcp-hf unknown: nothing written records the world size; the consolidated
form unsharded complete, dcp complete); run mode unshards the sharded
ones; a shard file cut short is proof of an incomplete step, and so is one
missing from the middle of a tensor (ls and unshard name the tensor;
dcp_hf_proof.py has the rest). Before: the HF shards were judged "unsharded
incomplete: split safetensors without their index" (clean deleted them) and
could not be unsharded; st_format failed ("not a torch.save zip").
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import (CKPT, SRC, check, error_of, finish,  # noqa: E402
                     st_tensors)

FIX = os.path.join(SRC, "tests", "fixtures", "dcp-v2.14")


def ckpt(*args, env=None):
    return subprocess.run([CKPT] + list(args), capture_output=True,
                          text=True, env=env)


def dir_tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(st_tensors(os.path.join(d, f)))
    return out


def against_torch(tmp):
    via = dict(os.environ, CKPT_SOURCE_VIA_STORAGE="1")
    for case, ref in (("hf_sharded", "reference"), ("hf_consolidated", "ckpt"),
                      ("st_format", None)):
        src = os.path.join(FIX, case, "ckpt")
        for how, env in (("local", None), ("storage", via)):
            out = os.path.join(tmp, "%s-%s" % (case, how))
            p = ckpt("unshard", "--format", "safetensors", "--verify",
                     "--no-progress", src, out, env=env)
            check("%s %s: exit 0" % (case, how), p.returncode == 0, p.stderr)
            if p.returncode != 0 or ref is None:
                continue
            got = st_tensors(os.path.join(out, "model.safetensors"))
            want = dir_tensors(os.path.join(FIX, case, ref))
            check("%s %s: the bytes of torch's consolidation" % (case, how),
                  got == want, "%s != %s" % (sorted(got), sorted(want)))
    # st_format: the tensors without byte items, the values in extra.json.
    out = os.path.join(tmp, "st_format-local")
    check("st_format: output written", os.path.isdir(out))
    if os.path.isdir(out):
        check("st_format: files", sorted(os.listdir(out)) ==
              ["extra.json", "model.safetensors"], str(os.listdir(out)))
        with open(os.path.join(out, "extra.json")) as f:
            extra = json.load(f)
        check("st_format: byte items", extra == {
            "step": 7, "meta.lr": 0.5, "meta.ids": [1, 2]}, str(extra))
        check("st_format: tensors", sorted(st_tensors(os.path.join(
            out, "model.safetensors"))) == ["i64", "rep", "w0", "w1"])


def run_mode(tmp):
    run = os.path.join(tmp, "run")
    os.makedirs(run)
    for step, case in ((1, "hf_sharded"), (2, "hf_consolidated"),
                       (3, "st_format")):
        shutil.copytree(os.path.join(FIX, case, "ckpt"),
                        os.path.join(run, "step%d" % step))
    p = ckpt("ls", "-l", run)
    rows = [l.split("\t")[1:5] for l in p.stdout.splitlines()]
    check("ls: verdicts", rows == [
        ["step1", "1", "dcp-hf", "unknown: shards consistent, but nothing "
         "written records the world size: a missing last rank cannot be "
         "seen (torch's reader cannot tell either)"],
        ["step2", "2", "unsharded", "complete"],
        ["step3", "3", "dcp", "complete"]], p.stdout + p.stderr)
    dest = os.path.join(tmp, "run-dest")
    p = ckpt("unshard", "--no-progress", run, dest)
    check("run: exit 0", p.returncode == 0, p.stderr)
    rows = [l.split("\t")[:2] for l in p.stdout.splitlines()]
    check("run: rows", rows == [["unshard", "step1"],
                                ["skip", "step2"],
                                ["unshard", "step3"]], p.stdout)
    check("run: outputs", sorted(os.listdir(dest)) ==
          ["step1-unsharded", "step3-unsharded"], str(os.listdir(dest)))
    # Given directly, the consolidated form is read as whole tensors.
    out = os.path.join(tmp, "consolidated-direct")
    p = ckpt("unshard", "--no-progress", os.path.join(run, "step2"), out)
    check("consolidated direct: exit 0", p.returncode == 0, p.stderr)


def damaged(tmp):
    run = os.path.join(tmp, "bad")
    os.makedirs(run)
    src = os.path.join(FIX, "hf_sharded", "ckpt")
    cut = os.path.join(run, "step1")
    shutil.copytree(src, cut)
    f = os.path.join(cut, "shard-00002-model-00001-of-00002.safetensors")
    with open(f, "r+b") as fh:
        fh.truncate(os.path.getsize(f) - 8)
    gap = os.path.join(run, "step2")
    shutil.copytree(src, gap)
    os.remove(os.path.join(gap, "shard-00001-model-00001-of-00002.safetensors"))
    p = ckpt("ls", "-l", run)
    rows = [l.split("\t")[1:5] for l in p.stdout.splitlines()]
    check("damaged ls: cut short is incomplete, so is a gap (named)",
          len(rows) == 2 and rows[0][:3] == ["step1", "1", "dcp-hf"] and
          rows[0][3].startswith("incomplete") and
          rows[1] == ["step2", "2", "dcp-hf", "incomplete: tensor "
                      "'model.embed.weight': chunks cover 12 of 28 elements "
                      "(a shard file is missing)"],
          p.stdout + p.stderr)
    out = os.path.join(tmp, "gap-out")
    p = ckpt("unshard", "--no-progress", gap, out)
    check("gap: exit 1", p.returncode == 1, p.stderr)
    check("gap: names the tensor in its error row", "tensor "
          "'model.embed.weight': chunks cover" in error_of(p), error_of(p))
    check("gap: nothing written", not os.path.exists(out))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-dcpst-")
    try:
        against_torch(tmp)
        run_mode(tmp)
        damaged(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
