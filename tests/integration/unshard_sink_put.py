#!/usr/bin/python3
# ctest-cost: 40
"""unshard_sink_put.py - the object-storage output sink writes an output
that fits the write policy's single PUT (CKPT_SINGLE_PUT_MAX) and the
memory budget (--memory) as ONE PUT, not a multipart upload (s3rver, as
MinIO on one disk, copies every part again at CompleteMultipartUpload).

Counted at the proxy (s3rver behind tests/support/s3proxy.py), for real
torch 1.13 DCP checkpoints (make_dcp.py --case big) unsharded local -> s3:

- a ~34 MB output, torch and safetensors, default --memory: exactly two
  PUTs (the DEST-unfinished marker, the output), no POST (no
  CreateMultipartUpload / CompleteMultipartUpload), one DELETE (the
  marker), and the bytes sent equal the output's size plus the marker's;
  the object's ETag is the MD5 of its bytes; downloaded with aws-cli, the
  bytes equal a local unshard of the same checkpoint;
- the same with --memory 16M (the output does not fit): a multipart
  upload (one CreateMultipartUpload and one Complete, five parts of
  8 MiB), same bytes;
- two 503s and two connection resets (after s3rver stored the body)
  injected on that PUT: it is sent five times, the object is the same
  bytes, still no multipart upload;
- `ckpt process --runs 1` of a run holding that step: the state records
  the output's size and MD5, its ETag at DEST is that MD5, and the run
  is verified and done;
- the PUT answered 503 every time (--retries 2): exit 1 with the error,
  three PUTs (the marker, two tries), no output
  object, the marker left (never a complete-looking output), and nothing
  to abort (no multipart upload was started).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (CKPT, Checker, S3Env, age_tree, digests,  # noqa: E402
                    download, sh, tool, unshard)
from harness import generate  # noqa: E402

B = "ck"
MIB = 1 << 20


def objects(env, prefix):
    _, out, _ = tool(env, "ls", "-r", "s3://%s/%s" % (B, prefix),
                     check=False)
    return sorted(line.split("\t")[2] for line in out.decode().splitlines())


def exists(env, key):
    return tool(env, "stat", "s3://%s/%s" % (B, key), check=False)[0] == 0


def etag(env, key):
    p = sh("aws", "s3api", "head-object", "--bucket", B, "--key", key,
           "--query", "ETag", "--output", "text", env=env)
    return p.stdout.strip().strip('"')


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def process(c, env, tmp, src):
    """`ckpt process --runs 1` (the whole default budget for the run's
    unshard): the step's checkpoint.pt goes as one PUT too; the state
    records its size and MD5, which the verify phase then checks against
    the ETag at DEST (an MD5 of the same form)."""
    runs = os.path.join(tmp, "runs")
    run = os.path.join(runs, "3100001")
    for d in ("wandb", "train_data"):
        os.makedirs(os.path.join(run, d))
    with open(os.path.join(run, "config.yaml"), "w") as f:
        f.write("run_name: put-3100001\nsave_folder: /scratch/3100001\n")
    shutil.copytree(src, os.path.join(run, "step1000"))
    age_tree(runs)
    p = subprocess.run([CKPT, "process", "-q", "--no-progress", "--no-wandb",
                        "--min-age", "0", "--runs", "1", runs, "--dest",
                        "s3://%s/proc" % B],
                       env=dict(env, CKPT_STATE_DIR=os.path.join(tmp, "st")),
                       capture_output=True, text=True, timeout=600)
    c.eq("process: exit", (p.returncode, p.stderr), (0, ""))
    out = os.path.join(tmp, "loc-torch", "checkpoint.pt")
    key = "proc/3100001/step1000-unsharded/checkpoint.pt"
    _, st, _ = tool(env, "cat", "s3://%s/proc/.ckpt-process/3100001.json" % B,
                    check=False)
    got = [(e["size"], e["sum"]) for e in json.loads(st or "{}").get(
        "unsharded", []) if e["path"].endswith("/checkpoint.pt")]
    c.eq("process: state records checkpoint.pt's size and MD5", got,
         [(os.path.getsize(out), md5(out))])
    c.eq("process: its ETag at DEST is that MD5", etag(env, key), md5(out))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-sink-put-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(["make_dcp.py", fx, "--case", "big", "--size-mb", "32",
                  "--no-verify"])
        src = os.path.join(fx, "ckpt")
        with S3Env(buckets=[B]) as s3:
            env = s3.env()

            def run(what, fmt, prefix, *opts):
                """Unshard src to s3://B/prefix; the proxy's counts."""
                s3.reset_stats()
                p = unshard(env, "--format", fmt, *opts, src,
                            "s3://%s/%s" % (B, prefix))
                st = s3.stats()
                c.eq(what + ": exit", (p.returncode, p.stderr), (0, ""))
                c.eq(what + ": no marker left",
                     exists(env, prefix + "-unfinished"), False)
                return st

            for fmt, name in (("torch", "checkpoint.pt"),
                              ("safetensors", "model.safetensors")):
                loc = os.path.join(tmp, "loc-" + fmt)
                p = unshard(env, "--format", fmt, src, loc)
                c.eq(fmt + " local: exit", (p.returncode, p.stderr),
                     (0, ""))
                out = os.path.join(loc, name)
                size = os.path.getsize(out)
                c.true("%s: output of %d bytes, above one part (8 MiB) and "
                       "below --memory's default (96 MiB)" % (fmt, size),
                       8 * MIB < size < 96 * MIB)
                others = sorted(n for n in os.listdir(loc) if n != name)

                what = fmt + " one PUT"
                prefix = "out/put-" + fmt
                st = run(what, fmt, prefix)
                m = st["methods"]
                # The marker, the output, and (safetensors) extra.json.
                c.eq(what + ": requests that write", (
                    m.get("PUT", 0), m.get("POST", 0), m.get("DELETE", 0)),
                    (2 + len(others), 0, 1))
                small = sum(os.path.getsize(os.path.join(loc, n))
                            for n in others)
                marker = st["put_bytes"] - size - small
                c.true(what + ": bytes sent are the outputs' and the "
                       "marker's (%d left)" % marker, 0 < marker < 200)
                c.eq(what + ": ETag is the MD5", etag(env, prefix + "/" +
                                                      name), md5(out))
                got = download(env, B, prefix, os.path.join(tmp, "dl", prefix))
                c.eq(what + ": bytes equal a local unshard", digests(got),
                     digests(loc))

                what = fmt + " --memory 16M"
                prefix = "out/mpu-" + fmt
                st = run(what, fmt, prefix, "--memory", "16M")
                m = st["methods"]
                nparts = (size + 8 * MIB - 1) // (8 * MIB)
                c.eq(what + ": a multipart upload of %d parts" % nparts, (
                    m.get("PUT", 0), m.get("POST", 0)),
                    (2 + len(others) + nparts - 1, 2))
                got = download(env, B, prefix, os.path.join(tmp, "dl", prefix))
                c.eq(what + ": bytes equal a local unshard", digests(got),
                     digests(loc))

            loc = os.path.join(tmp, "loc-torch")
            # Faults on the output's PUT only (not the marker's): 503,
            # reset after s3rver stored the body, 503, reset; then it goes.
            s3.reset_stats()
            s3.configure(fault_next=4, reset_writes=True, methods="PUT",
                         fault_match="/out/fault/checkpoint.pt")
            p = unshard(env, src, "s3://%s/out/fault" % B)
            st = s3.stats()
            s3.configure(fault_next=0, reset_writes=False, methods="",
                         fault_match="")
            c.eq("faults: exit", (p.returncode, p.stderr), (0, ""))
            c.eq("faults: two 503s and two resets injected",
                 (st["faults"]["slowdown"], st["faults"]["reset"]), (2, 2))
            c.eq("faults: PUTs (the marker, the output 5 times)",
                 st["methods"].get("PUT", 0), 6)
            c.eq("faults: no multipart upload", st["methods"].get("POST", 0),
                 0)
            c.eq("faults: no marker left",
                 exists(env, "out/fault-unfinished"), False)
            got = download(env, B, "out/fault", os.path.join(tmp, "dl", "f"))
            c.eq("faults: bytes equal a local unshard", digests(got),
                 digests(loc))

            # The PUT never succeeds: exit 1, nothing that looks complete.
            s3.reset_stats()
            s3.configure(slowdown=1.0, fault_match="/out/fail/checkpoint.pt")
            p = unshard(env, "--retries", "2", src, "s3://%s/out/fail" % B)
            st = s3.stats()
            s3.configure(slowdown=0, fault_match="")
            c.eq("fail: exit 1", p.returncode, 1)
            why = [ln.split("\t", 3)[-1] for ln in p.stdout.splitlines()
                   if ln.startswith("error\t")]
            c.true("fail: why, in its error row (%r)" % p.stdout,
                   len(why) == 1 and "503" in why[0])
            c.eq("fail: PUTs (the marker, 2 tries), no multipart upload",
                 (st["methods"].get("PUT", 0), st["methods"].get("POST", 0),
                  st["methods"].get("DELETE", 0)), (3, 0, 0))
            c.eq("fail: no output, the marker left",
                 (objects(env, "out/fail"),
                  exists(env, "out/fail-unfinished")), ([], True))

            process(c, env, tmp, src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
