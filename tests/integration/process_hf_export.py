#!/usr/bin/python3
# ctest-cost: 25
"""process_hf_export.py - issue 29: `ckpt process --unshard-format hf`
exports each sharded step of a run as a Hugging Face model directory,
DEST/.../stepN-hf/, in the unshard phase.

The run: an OLMo 2 model (tests/support/make_olmo_hf.py) as a torch_new
step (DCP) with config.yaml at the run's top, to a local DEST with
--drop-sharded and --no-wandb. Checks: exit 0; DEST/.../step10-hf/ is
byte for byte transformers' conversion script's output
(tests/fixtures/olmo-hf/olmo2/reference); the state records its three
files; the sharded step10 is still uploaded to DEST (an export holds the
model only: it never licenses leaving a step out, as an -unsharded copy
does); a second process of a copy of the run to the same DEST finds
step10-hf there, compares it with an export made again (adopted, no
conflict: recorded) and writes nothing new.""" 
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import CKPT, SRC, check, finish, generate  # noqa: E402
from s3test import age_tree, old_ctime  # noqa: E402

REF = os.path.join(SRC, "tests", "fixtures", "olmo-hf", "olmo2", "reference")


def tree(d):
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as x:
            out[f] = x.read()
    return out


def find(root, name):
    for d, dirs, _ in os.walk(root):
        if name in dirs:
            return os.path.join(d, name)
    return None


def process(env, *args):
    return subprocess.run([CKPT, "process", "--no-wandb", "-q",
                           "--unshard-format", "hf", "--drop-sharded"] +
                          list(args), env=env, capture_output=True,
                          text=True, timeout=600)


def main():
    env = dict(os.environ, **old_ctime())
    tmp = tempfile.mkdtemp(prefix="process-hf-")
    try:
        gen = os.path.join(tmp, "gen")
        generate(["make_olmo_hf.py", "sharded", gen, "--case", "olmo2",
                  "--format", "torch_new", "--ranks", "2"])
        runs = os.path.join(tmp, "runs")
        run = os.path.join(runs, "olmo2-run")
        os.makedirs(run)
        shutil.copytree(os.path.join(gen, "ckpt"), os.path.join(run, "step10"))
        shutil.move(os.path.join(run, "step10", "config.yaml"),
                    os.path.join(run, "config.yaml"))
        again = os.path.join(tmp, "again", "olmo2-run")
        shutil.copytree(run, again)
        age_tree(runs)
        age_tree(os.path.join(tmp, "again"))
        dest = os.path.join(tmp, "dest")
        env["TMPDIR"] = tmp
        p = process(env, "--keep-source", run, "--dest", dest)
        check("process: exit 0", p.returncode == 0, p.stdout + p.stderr)
        out = find(dest, "step10-hf")
        check("step10-hf at DEST", out is not None, str(os.listdir(dest)))
        if out:
            check("step10-hf: the conversion script's files, byte for byte",
                  tree(out) == tree(REF), str(sorted(tree(out))))
        top = os.path.dirname(out) if out else dest
        check("the sharded step10 uploaded too (an export licenses no drop)",
              os.path.isdir(os.path.join(top, "step10")) and
              os.path.exists(os.path.join(top, "step10", "model_and_optim",
                                          ".metadata")),
              str(os.listdir(top)))
        states = [os.path.join(d, f) for d, _, fs in
                  os.walk(os.path.join(dest, ".ckpt-process"))
                  for f in fs if f.endswith(".json")]
        rec = []
        for s in states:
            with open(s) as f:
                rec += [e["path"] for e in json.load(f).get("unsharded", [])]
        check("the state records step10-hf's files", sorted(rec) == [
            "step10-hf/config.json", "step10-hf/generation_config.json",
            "step10-hf/model.safetensors"], str(rec))
        before = tree(out) if out else None
        shutil.rmtree(os.path.join(dest, ".ckpt-process"))
        p = process(env, "--keep-source", again, "--dest", dest)
        check("a second process to the same DEST: exit 0 (adopted, no "
              "conflict)", p.returncode == 0, p.stdout + p.stderr)
        check("step10-hf unchanged, the only export",
              out and tree(out) == before and
              sorted(d for d, _, fs in os.walk(dest)
                     if d.endswith("-hf")) == [out], str(p.stdout))
        rec = []
        for d, _, fs in os.walk(os.path.join(dest, ".ckpt-process")):
            for f in fs:
                if f.endswith(".json"):
                    with open(os.path.join(d, f)) as x:
                        rec += [e["path"] for e in
                                json.load(x).get("unsharded", [])]
        check("the adopted export recorded again", sorted(rec) == [
            "step10-hf/config.json", "step10-hf/generation_config.json",
            "step10-hf/model.safetensors"], str(rec))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
