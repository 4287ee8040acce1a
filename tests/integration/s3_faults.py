#!/usr/bin/python3
# ctest-cost: 10
"""s3_faults.py - the object-storage client under injected faults: 30% of
requests answered 503 SlowDown, some 429 with R2's same-object message,
GET bodies cut by TCP resets. Every operation still completes and the
data is identical; a broken ranged GET resumes from the byte it reached."""
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import Checker, S3Env, tool  # noqa: E402

B = "ckpt-test"


def counters(err):
    m = re.search(r"requests=(\d+) retries=(\d+)", err)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def resume(c, s3, env):
    """Every GET cut halfway: the read still completes, resuming where it
    broke (a restart would fetch the whole range again each time; bytes
    in flight when the reset lands are lost, hence the slack)."""
    data = random.Random(3).randbytes(300000)
    tool(env, "put", "-", "s3://%s/resume/blob" % B, input=data)
    s3.configure(reset=1.0, methods="GET")
    s3.reset_stats()
    _, out, err = tool(env, "-s", "cat", "s3://%s/resume/blob" % B)
    st = s3.stats()
    s3.configure(reset=0.0, methods="")
    c.true("read through resets identical", out == data)
    c.true("resets happened", st["faults"]["reset"] >= 10)
    c.true("resumed, not restarted: %d bytes sent" % st["get_bytes"],
           len(data) <= st["get_bytes"] <= len(data) * 5 // 4)


def under_faults(c, s3, env):
    s3.configure(slowdown=0.3, r2_429=0.05, reset=0.1, methods="")
    s3.reset_stats()
    rc, _, err = tool(env, "-s", "-j", "8", "put-many",
                      "s3://%s/flaky/many" % B, "300", "100")
    c.eq("put-many under faults", rc, 0)
    c.true("client retried", counters(err)[1] > 0)
    _, out, _ = tool(env, "ls", "-r", "s3://%s/flaky/many" % B)
    c.eq("all 300 listed", out.decode().splitlines(),
         ["f\t100\tobj-%06d" % i for i in range(300)])
    data = random.Random(5).randbytes(12 * 1024 * 1024 + 3)
    mp = dict(env, CKPT_S3_PART_SIZE="5M")
    # S3 may answer CompleteMultipartUpload 200 with an <Error> body.
    s3.configure(complete_error=2)
    tool(mp, "put", "-", "s3://%s/flaky/big" % B, input=data)
    _, out, err = tool(env, "-s", "cat", "s3://%s/flaky/big" % B)
    c.true("multipart object read back identical", out == data)
    _, out, _ = tool(env, "cat", "s3://%s/flaky/big" % B, "5000000",
                     "3000000")
    c.true("ranged read identical", out == data[5000000:8000000])
    tool(env, "rm-tree", "s3://%s/flaky" % B)
    st = s3.stats()
    s3.configure(slowdown=0.0, r2_429=0.0, reset=0.0)
    rc, _, _ = tool(env, "ls", "-r", "s3://%s/flaky" % B, check=False)
    c.eq("tree deleted", rc, 1)
    f = st["faults"]
    # (Resets are drawn for GETs only, which are few here; resume() checks
    # them deterministically.)
    c.true("faults injected: %r" % f, f["slowdown"] > 50 and
           f["r2_429"] > 0 and f["complete_error"] == 2)


def exhausted(c, s3, env):
    """A fault that never ends: bounded attempts, then an exact error."""
    s3.configure(slowdown=1.0)
    rc, _, err = tool(env, "-r", "4", "stat", "s3://%s/x" % B, check=False)
    s3.configure(slowdown=0.0)
    c.eq("gives up after 4 attempts", (rc, err), (1, "storage_tool: http: "
         "s3://ckpt-test/x: HTTP 503 ServiceUnavailable (after 4 "
         "attempts)\n"))


def main():
    c = Checker()
    with S3Env(buckets=[B], proxy_args=["--seed", "42"]) as s3:
        env = s3.env()
        resume(c, s3, env)
        under_faults(c, s3, env)
        exhausted(c, s3, env)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
