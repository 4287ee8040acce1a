#!/usr/bin/env python3
"""gen_runs.py: generate a sample of training-run directories, as a lab's
scratch filesystem holds them, for the demo and the `clean`/`ls` tests.

usage: gen_runs.py OUTDIR [--archives]

Python stdlib only. Checkpoint bytes are real: the sharded steps are copies
of a DCP checkpoint written by torch 1.13 (tests/fixtures/runs/, see its
README), the unsharded ones real torch.save files.

Runs (named by Slurm job id, as OLMo's save_folder is):
  2871001  good: step0, step1000 (complete DCP), step1000-unsharded,
           step2000 (aborted: shards without .metadata), a `latest` link
  2871002  bad: died after the step-0 checkpoint (step0 only)
  2871003  bad: step0 and an aborted step500
  2871004  bad: died at start-up: config.yaml, wandb/ and train_data/ only
  2871005  good: only step3000-unsharded
  2871006  bad: step1500 whose .distcp shard is truncated
  notes    not a run: a directory of text files
  logs/    Slurm logs named by job id (2871001.out, 2871001.err, 2871005.out)
With --archives also: 2871101.tar (copy of 2871001), 2871102.tar.gz
(2871002), 2871103.tar.zst (2871003), 2871105.zip (2871005),
2871106.tar.xz (2871006), 2871107.tar.bz2 (2871004), each holding its run
under a top directory of the archive's name.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures", "runs", "olmo-torch-new-1.13")

CONFIG = """run_name: olmo-tiny-{id}
seed: 6198
save_folder: /scratch/runs/{id}
sharded_checkpointer: torch_new
model:
  d_model: 64
  n_layers: 2
optimizer:
  name: adamw
  learning_rate: 0.0004
wandb:
  entity: ckpt-tests
  project: olmo-tiny
  name: olmo-tiny-{id}
  group: tiny
"""


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)


def run_skeleton(root, rid, wandb_id):
    write(os.path.join(root, "config.yaml"), CONFIG.format(id=rid))
    wdir = os.path.join(root, "wandb", "wandb",
                        "run-20261101_120000-%s" % wandb_id, "files")
    write(os.path.join(wdir, "wandb-metadata.json"),
          '{"slurm": {"job_id": "%s"}, "host": "nid001234"}\n' % rid)
    write(os.path.join(wdir, "config.yaml"),
          "run_name:\n  value: olmo-tiny-%s\n" % rid)
    write(os.path.join(root, "train_data", "rank0.npy"), b"\x93NUMPY" * 8)


def sharded_step(root, name):
    dst = os.path.join(root, name)
    shutil.copytree(os.path.join(FIX, "step"), dst)
    return dst


def whole_unsharded(root, name="step1000-unsharded"):
    """Make root/name hold the whole step as OLMo's unsharder writes it:
    an optim.pt beside model.pt and train.pt (the fixture has none: see
    its README). Its bytes stand in for the optimizer's (a whole torch
    zip, the model's): enough for what judges and drops it. Without it
    the copy holds less than the step, whose DCP stores optimizer state,
    and `process --drop-sharded` keeps the step."""
    dst = os.path.join(root, name, "optim.pt")
    shutil.copy(os.path.join(FIX, "model.pt"), dst)
    st = os.stat(os.path.join(root, name, "model.pt"))
    os.utime(dst, (st.st_atime, st.st_mtime))   # as old as its step


def unsharded_step(root, name):
    dst = os.path.join(root, name)
    os.makedirs(dst)
    for f in ("model.pt", "train.pt"):
        shutil.copy(os.path.join(FIX, f), os.path.join(dst, f))
    shutil.copy(os.path.join(FIX, "step", "config.yaml"), dst)


def aborted_step(root, name):
    """Shards written, .metadata never: the job died mid-save."""
    dst = sharded_step(root, name)
    os.remove(os.path.join(dst, "model_and_optim", ".metadata"))


def truncated_step(root, name):
    dst = sharded_step(root, name)
    shard = os.path.join(dst, "model_and_optim", "__1_0.distcp")
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(size // 2)


def generate(out):
    os.makedirs(out, exist_ok=True)
    r = os.path.join(out, "2871001")
    run_skeleton(r, "2871001", "a1b2c3d4")
    sharded_step(r, "step0")
    sharded_step(r, "step1000")
    unsharded_step(r, "step1000-unsharded")
    aborted_step(r, "step2000")
    os.symlink("step1000", os.path.join(r, "latest"))

    r = os.path.join(out, "2871002")
    run_skeleton(r, "2871002", "e5f6a7b8")
    sharded_step(r, "step0")

    r = os.path.join(out, "2871003")
    run_skeleton(r, "2871003", "c9d0e1f2")
    sharded_step(r, "step0")
    aborted_step(r, "step500")

    r = os.path.join(out, "2871004")
    run_skeleton(r, "2871004", "a3b4c5d6")

    r = os.path.join(out, "2871005")
    run_skeleton(r, "2871005", "e7f8a9b0")
    unsharded_step(r, "step3000-unsharded")

    r = os.path.join(out, "2871006")
    run_skeleton(r, "2871006", "c1d2e3f4")
    truncated_step(r, "step1500")

    write(os.path.join(out, "notes", "README.txt"), "not a run\n")
    for name in ("2871001.out", "2871001.err", "2871005.out"):
        write(os.path.join(out, "logs", "slurm-" + name),
              "step 1000 loss 2.31\n")
    write(os.path.join(out, "notes", "todo.txt"), "clean scratch\n")


ARCHIVES = [
    ("2871001", "2871101.tar", ["tar", "-cf"]),
    ("2871002", "2871102.tar.gz", ["tar", "-czf"]),
    ("2871003", "2871103.tar.zst", ["tar", "--zstd", "-cf"]),
    ("2871005", "2871105.zip", ["zip", "-qry"]),
    ("2871006", "2871106.tar.xz", ["tar", "-cJf"]),
    ("2871004", "2871107.tar.bz2", ["tar", "-cjf"]),
]


def archives(out):
    tmp = os.path.join(out, ".staging")
    for src, name, cmd in ARCHIVES:
        stem = name.split(".")[0]
        os.makedirs(tmp)
        shutil.copytree(os.path.join(out, src), os.path.join(tmp, stem),
                        symlinks=True)
        subprocess.run(cmd + [os.path.abspath(os.path.join(out, name)), stem],
                       cwd=tmp, check=True)
        shutil.rmtree(tmp)


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.exit(__doc__)
    generate(argv[1])
    if "--archives" in argv[2:]:
        archives(argv[1])


if __name__ == "__main__":
    main(sys.argv)
