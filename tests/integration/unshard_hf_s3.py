#!/usr/bin/python3
# ctest-cost: 30
"""unshard_hf_s3.py - issue 29: `ckpt unshard --format hf` to and from
object storage (s3rver behind tests/support/s3proxy.py):

- an OLMo 2 step (make_olmo_hf.py, local format) exported to
  s3://BUCKET/olmo2-bf16 with --dtype bf16 and --memory 16M (the cast
  bands through the remote sink's memory gate): downloaded with aws-cli,
  byte for byte transformers' bfloat16 reference
  (tests/fixtures/olmo-hf/olmo2/reference-bf16), and no -unfinished marker
  left;
- the same step uploaded, then exported from S3 (read in place, config.yaml
  read where the step is) with --max-shard-size 60000 to a local DEST:
  the same files as the local export with those options;
- --part to an s3:// DEST: a usage error (exit 2)."""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import CKPT, S3Env, download, sh, unshard  # noqa: E402
from harness import SRC, check, finish, generate  # noqa: E402

B = "ckpt-test"
REF = os.path.join(SRC, "tests", "fixtures", "olmo-hf", "olmo2")


def tree(d):
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as x:
            out[f] = x.read()
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="hf-s3-")
    try:
        gen = os.path.join(tmp, "gen")
        generate(["make_olmo_hf.py", "sharded", gen, "--case", "olmo2",
                  "--format", "local", "--ranks", "3"])
        step = os.path.join(gen, "ckpt")
        with S3Env() as s3:
            env = s3.env()
            p = unshard(env, "--format", "hf", "--dtype", "bf16", "--memory",
                        "16M", step, "s3://%s/olmo2-bf16" % B)
            check("to S3 --dtype bf16: exit 0", p.returncode == 0,
                  p.stdout + p.stderr)
            got = download(env, B, "olmo2-bf16", os.path.join(tmp, "got"))
            check("to S3: transformers' bfloat16 files, byte for byte",
                  tree(got) == tree(os.path.join(REF, "reference-bf16")),
                  str(sorted(tree(got))))
            p = sh("aws", "s3", "ls", "s3://%s/" % B, env=env)
            check("to S3: no -unfinished marker left",
                  "unfinished" not in p.stdout, p.stdout)

            sh("aws", "s3", "cp", "--quiet", "--recursive", step,
               "s3://%s/run/step7" % B, env=env)
            out = os.path.join(tmp, "from-s3")
            p = unshard(env, "--format", "hf", "--max-shard-size", "60000",
                        "s3://%s/run/step7" % B, out)
            check("from S3: exit 0", p.returncode == 0, p.stdout + p.stderr)
            local = os.path.join(tmp, "local")
            p = unshard(env, "--format", "hf", "--max-shard-size", "60000",
                        step, local)
            check("from S3: the local export's files", os.path.isdir(out) and
                  tree(out) == tree(local) and
                  "model.safetensors.index.json" in tree(out),
                  str(sorted(tree(out))) if os.path.isdir(out) else p.stderr)
            p = unshard(env, "--format", "hf", "--part", "0/2", step,
                        "s3://%s/parts" % B)
            check("--part to S3: usage error", p.returncode == 2 and
                  "--part writes a local DEST" in p.stderr, p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
