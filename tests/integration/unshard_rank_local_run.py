#!/usr/bin/python3
# ctest-cost: 15
"""unshard_rank_local_run.py: rank-local DCP steps (torch >= 2.9,
use_collectives=False: __R.metadata per rank, no .metadata) as steps of a
run, written by torch 1.13 through tests/support/make_dcp_ranklocal.py.

The run holds step10 (rank-local DCP at the step's top) and step20 (an
OLMo torch_new step whose model_and_optim/ is rank-local, with
train/rank{R}.pt). `ckpt unshard RUN DEST` of the run as a directory, a
.tar, a .tar.gz, a .zip and an s3:// prefix (s3rver behind the signing
proxy), and `ckpt process` of the run, must unshard both steps: rows
asserted exactly, values compared with the generator's expected state
dicts (check_unshard.py), train.pt byte for byte train/rank0.pt.

Before, step20 was judged complete but its unshard failed ("no .metadata
(not a DCP checkpoint)"): only model_and_optim/.metadata made a step an
OLMo step.
"""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import CKPT, check, compare, finish, generate  # noqa: E402
from s3test import S3Env, listing, sh  # noqa: E402

B = "ckpt-test"


def make_run(tmp, fx):
    r = os.path.join(tmp, "run")
    os.makedirs(r)
    with open(os.path.join(r, "config.yaml"), "w") as f:
        f.write("run: ranklocal\n")
    shutil.copytree(os.path.join(fx, "agree", "ckpt"),
                    os.path.join(r, "step10"))
    shutil.copytree(os.path.join(fx, "olmo", "ckpt"),
                    os.path.join(r, "step20"))
    return r


def archives(tmp, run):
    out = {}
    for name, mode in (("run.tar", "w"), ("run.tar.gz", "w:gz")):
        p = os.path.join(tmp, name)
        with tarfile.open(p, mode) as t:
            t.add(run, arcname="run")
        out[name] = p
    p = os.path.join(tmp, "run.zip")
    with zipfile.ZipFile(p, "w") as z:
        for d, _, fs in os.walk(run):
            for n in sorted(fs):
                full = os.path.join(d, n)
                z.write(full, os.path.join("run", os.path.relpath(full, run)))
    out["run.zip"] = p
    return out


def rows(dest):
    return ["unshard\tstep10\t%s/step10-unsharded: 2 files, 2 tensors"
            % dest,
            "unshard\tstep20\t%s/step20-unsharded: 4 files, 2 tensors"
            % dest]


OUTS = ["step10-unsharded/checkpoint.pt", "step10-unsharded/config.yaml",
        "step20-unsharded/config.yaml", "step20-unsharded/model.pt",
        "step20-unsharded/optim.pt", "step20-unsharded/train.pt"]


def values(name, fx, dest):
    compare(name + ": step10 values",
            os.path.join(dest, "step10-unsharded", "checkpoint.pt"),
            os.path.join(fx, "agree", "expected.pt"))
    compare(name + ": step20 values", os.path.join(dest, "step20-unsharded"),
            os.path.join(fx, "olmo", "expected.pt"))
    with open(os.path.join(dest, "step20-unsharded", "train.pt"), "rb") as a, \
            open(os.path.join(fx, "olmo", "ckpt", "train", "rank0.pt"),
                 "rb") as b:
        check(name + ": train.pt is train/rank0.pt", a.read() == b.read())


def unshard(src, dest, env=None):
    return subprocess.run([CKPT, "unshard", "--no-progress", src, dest],
                          capture_output=True, text=True, env=env,
                          timeout=600)


def local(tmp, fx, run):
    srcs = {"dir": run}
    srcs.update(archives(tmp, run))
    for name, src in srcs.items():
        dest = os.path.join(tmp, "out-" + name)
        p = unshard(src, dest)
        check(name + ": exit 0", p.returncode == 0, p.stderr)
        check(name + ": rows", p.stdout.splitlines() == rows(dest), p.stdout)
        check(name + ": outputs", listing(dest) == OUTS, str(listing(dest)))
        if p.returncode == 0:
            values(name, fx, dest)


def remote(tmp, fx, run):
    with S3Env(buckets=[B]) as s3:
        env = s3.env()
        sh("aws", "s3", "cp", "--quiet", "--recursive", run,
           "s3://%s/runs/run1/" % B, env=env)
        dest = os.path.join(tmp, "out-s3")
        p = unshard("s3://%s/runs/run1" % B, dest, env=env)
        check("s3: exit 0", p.returncode == 0, p.stderr)
        check("s3: rows", p.stdout.splitlines() == rows(dest), p.stdout)
        check("s3: outputs", listing(dest) == OUTS, str(listing(dest)))
        if p.returncode == 0:
            values("s3", fx, dest)


def process(tmp, fx, run):
    src = os.path.join(tmp, "prun", "run")
    shutil.copytree(run, src)
    dest = os.path.join(tmp, "pdest")
    p = subprocess.run([CKPT, "process", "--no-wandb", "--min-age", "0",
                        "--keep-source", "--dest", dest, src],
                       capture_output=True, text=True, timeout=600)
    check("process: exit 0", p.returncode == 0, p.stderr)
    first = p.stdout.splitlines()[:1]
    check("process: row", [r.split("\t")[:2] for r in first] ==
          [["process", src]], p.stdout)
    got = [f for f in listing(os.path.join(dest, "run"))
           if "-unsharded/" in f]
    check("process: outputs", got == OUTS, str(got))
    if p.returncode == 0:
        values("process", fx, os.path.join(dest, "run"))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-rl-run-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(["make_dcp_ranklocal.py", fx])
        run = make_run(tmp, fx)
        local(tmp, fx, run)
        remote(tmp, fx, run)
        process(tmp, fx, run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
