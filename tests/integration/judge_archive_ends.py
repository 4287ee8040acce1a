#!/usr/bin/python3
# ctest-cost: 3
"""judge_archive_ends.py - a run in a compressed archive is judged as its
directory: a torch zip or a safetensors file cut short before it was
archived is incomplete there too (src/run/tree.c keeps the heads and
tails the checks read while the one pass lists the archive).

Runs: HF-style checkpoint-100 with model.safetensors whole, cut by 1000
bytes, or cut inside its header; an OLMo step1000-unsharded whose
model.pt (the fixture's torch 1.13 zip) is whole or cut to 3/4. Each as a
directory and as .tar.gz, .tar.zst, .tar.bz2, .tar.xz: `ckpt ls -l`
gives the same rows (but the name) and `clean -n` the same verdicts.
Before: every archive said `complete` for the cut files."""
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, ckpt, scratch  # noqa: E402

OLMO = os.path.join(HERE, "..", "fixtures", "runs", "olmo-torch-new-1.13")
KINDS = ((".tar.gz", "gzip"), (".tar.zst", "zstd -q"), (".tar.bz2", "bzip2"),
         (".tar.xz", "xz"))


def safetensors(path, n):
    """A safetensors file of one F32 tensor of n values."""
    data = struct.pack("<%df" % n, *[i * 0.5 for i in range(n)])
    hdr = json.dumps({"w": {"dtype": "F32", "shape": [n],
                            "data_offsets": [0, len(data)]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + data)


def run(root, name, step, make):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "wandb"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("run_name: %s\n" % name)
    os.makedirs(os.path.join(d, step))
    make(os.path.join(d, step))
    return name


def cut(path, keep):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:keep(len(data))])


def build(root):
    def hf(how):
        def make(d):
            p = os.path.join(d, "model.safetensors")
            safetensors(p, 300000)
            if how == "cut":
                cut(p, lambda n: n - 1000)
            elif how == "header":
                cut(p, lambda n: 40)
            with open(os.path.join(d, "trainer_state.json"), "w") as f:
                f.write('{"global_step": 100}')
        return make

    def olmo(how):
        def make(d):
            p = os.path.join(d, "model.pt")
            shutil.copy(os.path.join(OLMO, "model.pt"), p)
            if how == "cut":
                cut(p, lambda n: n * 3 // 4)
        return make

    names = [run(root, "hf-" + h, "checkpoint-100", hf(h))
             for h in ("whole", "cut", "header")]
    names += [run(root, "olmo-" + h, "step1000-unsharded", olmo(h))
              for h in ("whole", "cut")]
    return names


def main():
    c = Checker()
    with scratch("ckpt-archive-ends-") as tmp:
        names = build(tmp)
        os.chdir(tmp)
        subprocess.run("find . -exec touch -h -d '3 days ago' {} +",
                       shell=True, check=True)
        rc, rows, _ = ckpt("ls", "-l", *names)
        c.eq("directories: exit 0", rc, 0)
        c.true("directories: the cut ones are incomplete (%s)" % rows,
               rows.count("\tincomplete: ") == 3 and
               rows.count("\tcomplete\t") == 2)
        _, verdicts, _ = ckpt("clean", "-n", "--min-age", "0", *names)
        for ext, comp in KINDS:
            arcs = []
            for n in names:
                subprocess.run("tar cf - %s | %s -c > %s%s"
                               % (n, comp, n, ext), shell=True, check=True)
                arcs.append(n + ext)
            rc, out, err = ckpt("ls", "-l", *arcs)
            c.eq("%s: ls -l as the directories (%s)" % (ext, err[-300:]),
                 (rc, out.replace(ext + "\t", "\t")), (0, rows))
            rc, out, err = ckpt("clean", "-n", "--min-age", "0", *arcs)
            c.eq("%s: clean -n as the directories" % ext,
                 out.replace(ext + "\t", "\t"), verdicts)
            for a in arcs:
                os.remove(a)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
