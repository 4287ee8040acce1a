#!/usr/bin/python3
# ctest-cost: 25
"""unshard_remote_run.py - `ckpt unshard` of a run directory that lives in
S3 (s3rver behind the signature-checking proxy).

The run holds a DCP step with an existing -unsharded sibling (skipped), an
OLMo torch_new step (DCP), an OLMo torch_legacy step and a zarr step (all
read in place by ranged GETs), a plain DCP step without config.yaml (gets
the run's, read from the bucket) and an aborted step. Outputs are compared value for value with what torch 1.13
saved (tests/support/check_unshard.py); --delete-sharded then removes
exactly the unsharded steps' objects; scratch is left empty."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUP = os.path.join(HERE, "..", "support")
sys.path.insert(0, SUP)
from s3test import BUILD, Checker, S3Env, sh, tool  # noqa: E402
import harness  # noqa: E402
from harness import compare, generate  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ck"


def make_run(tmp, fx):
    r = os.path.join(tmp, "run")
    os.makedirs(r)
    with open(os.path.join(r, "config.yaml"), "w") as f:
        f.write("run: remote\n")
    shutil.copytree(os.path.join(fx, "rows", "ckpt"), os.path.join(r, "step5"))
    os.makedirs(os.path.join(r, "step5-unsharded"))
    shutil.copy(os.path.join(fx, "rows", "expected.pt"),
                os.path.join(r, "step5-unsharded", "model.pt"))
    shutil.copytree(os.path.join(fx, "olmo", "ckpt"), os.path.join(r, "step10"))
    shutil.copytree(os.path.join(fx, "legacy", "ckpt"),
                    os.path.join(r, "step15"))
    shutil.copytree(os.path.join(fx, "rows", "ckpt"), os.path.join(r, "step20"))
    shutil.copytree(os.path.join(fx, "rows", "ckpt"), os.path.join(r, "step30"))
    os.remove(os.path.join(r, "step30", ".metadata"))
    shutil.copytree(os.path.join(fx, "zarr", "ckpt"),
                    os.path.join(r, "0000000050"))
    return r


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def objects(env, prefix):
    _, out, _ = tool(env, "ls", "-r", "s3://%s/%s" % (B, prefix))
    return sorted(line.split("\t")[2] for line in out.decode().splitlines())


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-remote-run-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(*[["make_dcp.py", os.path.join(fx, case), "--case", case,
                    "--no-verify"] for case in ("rows", "olmo")],
                 ["make_olmo_legacy.py", os.path.join(fx, "legacy"),
                  "--ranks", "3", "--no-verify"],
                 ["make_zarr.py", os.path.join(fx, "zarr")])
        run = make_run(tmp, fx)
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            sh("aws", "s3", "cp", "--quiet", "--recursive", run,
               "s3://%s/runs/run1/" % B, env=env)
            before = objects(env, "runs/run1")
            dest = os.path.join(tmp, "out")
            scratch = os.path.join(tmp, "scratch")
            os.makedirs(scratch)
            p = subprocess.run([CKPT, "unshard", "--no-progress",
                                "--tmp-dir", scratch,
                                "s3://%s/runs/run1" % B, dest], env=env,
                               capture_output=True, text=True, timeout=600)
            c.eq("exit", (p.returncode, p.stderr), (0, ""))

            def done(step, n, t):
                return "unshard\t%s\t%s/%s-unsharded: %s, %d tensors" % (
                    step, dest, step, n, t)
            c.eq("lines", p.stdout.splitlines(), [
                "skip\tstep5\talready unsharded: step5-unsharded in the run",
                done("step10", "4 files", 32),
                done("step15", "4 files", 44),
                done("step20", "2 files", 5),
                "skip\tstep30\tincomplete: .metadata missing",
                done("0000000050", "2 files", 10)])
            c.eq("outputs", files(dest), [
                "0000000050-unsharded/checkpoint.pt",
                "0000000050-unsharded/config.yaml",
                "step10-unsharded/config.yaml", "step10-unsharded/model.pt",
                "step10-unsharded/optim.pt", "step10-unsharded/train.pt",
                "step15-unsharded/config.yaml", "step15-unsharded/model.pt",
                "step15-unsharded/optim.pt", "step15-unsharded/train.pt",
                "step20-unsharded/checkpoint.pt",
                "step20-unsharded/config.yaml"])
            c.eq("scratch left empty", os.listdir(scratch), [])
            c.eq("every request signed correctly",
                 s3.stats()["sig_fail"], 0)
            c.eq("source untouched", objects(env, "runs/run1"), before)
            o = os.path.join(dest, "step10-unsharded")
            with open(os.path.join(o, "train.pt"), "rb") as a, \
                    open(os.path.join(fx, "olmo", "ckpt", "train",
                                      "rank0.pt"), "rb") as b:
                c.true("train.pt is train/rank0.pt", a.read() == b.read())
            with open(os.path.join(o, "config.yaml"), "rb") as a, \
                    open(os.path.join(fx, "olmo", "ckpt", "config.yaml"),
                         "rb") as b:
                c.true("step10 keeps its own config.yaml",
                       a.read() == b.read())
            for step in ("step20", "0000000050"):
                with open(os.path.join(dest, step + "-unsharded",
                                       "config.yaml")) as f:
                    c.eq(step + " gets the run's config.yaml", f.read(),
                         "run: remote\n")
            for name, got, want in (
                    ("step10 model", os.path.join(o, "model.pt"),
                     os.path.join(fx, "olmo", "expected_olmo", "model.pt")),
                    ("step15 torch_legacy",
                     os.path.join(dest, "step15-unsharded"),
                     os.path.join(fx, "legacy", "expected")),
                    ("step20 values",
                     os.path.join(dest, "step20-unsharded", "checkpoint.pt"),
                     os.path.join(fx, "rows", "expected.pt")),
                    ("zarr values",
                     os.path.join(dest, "0000000050-unsharded",
                                  "checkpoint.pt"),
                     os.path.join(fx, "zarr", "expected.pt"))):
                compare(name + " bit-exact", got, want)

            # --delete-sharded: each step's objects go once its output is
            # written and verified; step5 stays: its -unsharded copy in
            # the run is complete by structure but not what step5
            # unshards to (a torch.save'd model.pt, not ckpt's
            # checkpoint.pt), so it licenses no delete (exit 1).
            dest2 = os.path.join(tmp, "out-del")
            p = subprocess.run([CKPT, "unshard", "--no-progress",
                                "--delete-sharded", "--tmp-dir", scratch,
                                "s3://%s/runs/run1" % B, dest2], env=env,
                               capture_output=True, text=True, timeout=600)
            c.eq("delete: exit", p.returncode, 1)
            c.true("delete: step5 kept, saying why (%s)" % p.stdout,
                   "error\tstep5\talready unsharded: step5-unsharded in "
                   "the run exists, but it is not what step5 unshards to "
                   "(checkpoint.pt: " in p.stdout)
            c.eq("delete: rows say what went", [
                line.split("; deleted ")[-1]
                for line in p.stdout.splitlines() if "; deleted " in line],
                ["s3://%s/runs/run1/%s" % (B, s) for s in
                 ("step10", "step15", "step20", "0000000050")])
            c.eq("delete: exactly the unsharded steps' objects",
                 objects(env, "runs/run1"),
                 [k for k in before if not k.split("/")[0] in
                  ("step10", "step15", "step20", "0000000050")])
            c.eq("delete: outputs", files(dest2), files(dest))
            c.eq("delete: scratch left empty", os.listdir(scratch), [])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Value checks go through the harness's one torch co-process.
    return c.finish() | harness.finish()


if __name__ == "__main__":
    sys.exit(main())
