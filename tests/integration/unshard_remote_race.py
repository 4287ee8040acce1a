#!/usr/bin/python3
# ctest-cost: 25
"""unshard_remote_race.py: `ckpt unshard` from S3 reads the objects it
listed, not whatever is there later.

s3rver ignores If-Match; tests/support/s3proxy.py enforces it (checked
here first with aws-cli). Then the proxy holds back a GET of one shard
while the test replaces that object with a same-size, consistent, but
different one (tensor bytes changed, CRCs fixed): every ranged GET of
ckpt carries If-Match with the ETag it saw, so the run fails with
"'s3://...' changed during read" (exit 1) and writes nothing, instead of
a checkpoint that mixes two versions with exit 0 (what it did without
the header).

Fixture: a real torch 1.13 DCP checkpoint (make_dcp.py --case rows).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import (CKPT, check, compare, error_of, finish,  # noqa: E402
                     generate)
from s3env import S3Env  # noqa: E402
import zippatch  # noqa: E402

B = "ck"
SHARD = "__0_0.distcp"


def aws(env, *args):
    return subprocess.run(["aws", "--endpoint-url", env["AWS_ENDPOINT_URL"]]
                          + list(args), env=env, capture_output=True,
                          text=True)



def proxy_enforces(env):
    head = aws(env, "s3api", "head-object", "--bucket", B, "--key",
               "m/" + SHARD)
    etag = json.loads(head.stdout)["ETag"]
    bad = aws(env, "s3api", "get-object", "--bucket", B, "--key",
              "m/" + SHARD, "--if-match", '"0123"', os.devnull)
    check("proxy: GET with a stale If-Match is 412", bad.returncode != 0 and
          "PreconditionFailed" in bad.stderr, bad.stderr)
    good = aws(env, "s3api", "get-object", "--bucket", B, "--key",
               "m/" + SHARD, "--if-match", etag, "--range", "bytes=0-9",
               os.devnull)
    check("proxy: GET with the current ETag passes", good.returncode == 0,
          good.stderr)
    return etag.strip('"')


def replaced_mid_run(tmp, s3, env, etag):
    fresh = os.path.join(tmp, "replacement")
    shutil.copy(os.path.join(tmp, "rows", "ckpt", SHARD), fresh)
    zippatch.patch(fresh, "/data/0", fix_crc=True)
    out = os.path.join(tmp, "out")
    # GET 1 of the shard reads its item's structure, GET 2 its tensor
    # bytes: hold GET 2 back while the object is replaced. (With read-ahead
    # on, this small shard is read whole by GET 1, whose window is shared
    # with the copy: one version by construction. Off, reads are piece by
    # piece, so the If-Match of every ranged GET is what is tested.)
    s3.configure(get_delay_ms=4000, get_delay_nth=2,
                 get_delay_match="m/" + SHARD)
    p = subprocess.Popen([CKPT, "unshard", "--no-progress", "--threads", "1",
                          "s3://%s/m" % B, out],
                         env=dict(env, CKPT_READAHEAD_MB="0"), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while s3.stats()["delayed"] < 1 and p.poll() is None and \
            time.time() < deadline:
        time.sleep(0.05)
    delayed = s3.stats()["delayed"] == 1
    check("the shard's second GET was held back", delayed)
    put = aws(env, "s3", "cp", "--quiet", fresh, "s3://%s/m/%s" % (B, SHARD))
    check("replaced during the run", put.returncode == 0, put.stderr)
    stdout, stderr = p.communicate(timeout=120)
    s3.configure(get_delay_ms=0)
    check("replaced shard: exit 1", p.returncode == 1,
          "%d %s %s" % (p.returncode, stdout, stderr))
    # The copy that meets the change names the chunk it was reading.
    want = ("^error\t[^\t]*\t[^\t]*\t(tensor 'weight' chunk \\[[0-9:, ]+\\]: )?"
            "'s3://%s/m/%s' changed during read \\(its ETag is no longer "
            "\"%s\"\\)$" % (B, SHARD, etag))
    check("replaced shard: the error names the object", re.search(
          want, stdout, re.M) and "ckpt: error" not in stderr,
          "%s\nwanted: %s" % (stdout + stderr, want))
    check("replaced shard: nothing written", not os.path.exists(out) and
          not [x for x in os.listdir(tmp) if x.startswith(".ckpt-")],
          str(os.listdir(tmp)))

    # Unchanged since the listing: the same run succeeds, bit-exact.
    put = aws(env, "s3", "cp", "--quiet",
              os.path.join(tmp, "rows", "ckpt", SHARD),
              "s3://%s/m/%s" % (B, SHARD))
    s3.reset_stats()
    r = subprocess.run([CKPT, "unshard", "--no-progress", "s3://%s/m" % B,
                        out], env=env, capture_output=True, text=True)
    em = s3.stats()["emulated"]
    check("unchanged: exit 0, conditional GETs, none failed",
          r.returncode == 0 and em["if_match"] > 0 and
          em["precondition"] == 0, r.stderr + json.dumps(em))
    compare("unchanged: bit-exact", os.path.join(out, "checkpoint.pt"),
            os.path.join(tmp, "rows", "expected.pt"))


def retries_honoured(tmp, s3, env):
    """--retries reaches the ranged reads of the sources (they used to
    open their own storage with the defaults)."""
    out = os.path.join(tmp, "out-retries")
    s3.configure(slowdown=1.0, fault_match=SHARD)
    r = subprocess.run([CKPT, "unshard", "--no-progress", "--retries", "2",
                        "s3://%s/m" % B, out], env=env, capture_output=True,
                       text=True)
    s3.configure(slowdown=0.0, fault_match="")
    want = ("s3://%s/m/%s: HTTP 503 ServiceUnavailable (after 2 attempts)" %
            (B, SHARD))
    check("--retries 2: exit 1, the shard's reads tried twice",
          r.returncode == 1 and want in error_of(r), r.stdout + r.stderr)
    check("--retries 2: nothing written", not os.path.exists(out))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-remote-race-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "rows"), "--case", "rows",
                  "--no-verify"])
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            r = aws(env, "s3", "cp", "--quiet", "--recursive",
                    os.path.join(tmp, "rows", "ckpt"), "s3://%s/m/" % B)
            check("fixture uploaded", r.returncode == 0, r.stderr)
            etag = proxy_enforces(env)
            s3.reset_stats()
            replaced_mid_run(tmp, s3, env, etag)
            retries_honoured(tmp, s3, env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
