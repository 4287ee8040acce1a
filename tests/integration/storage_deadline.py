#!/usr/bin/env python3
# ctest-cost: 20
"""Requests that never end (issue 20, class 13).

An S3 endpoint that trickles its replies (tests/support/s3proxy.py's
trickle_bps) kept `ckpt ls --retries 1` running for many minutes: the
stall guard caught only a reply with no byte for a minute. Now every
request has a minimum throughput (CKPT_HTTP_MIN_SPEED bytes/s over
CKPT_HTTP_SLOW_TIME s) and an overall deadline (CKPT_HTTP_DEADLINE s plus
one per CKPT_HTTP_DEADLINE_SPEED bytes of body); each ends the attempt
with an error that names the limit. Small limits keep this to seconds.
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import CKPT, Checker, S3Env, tool  # noqa: E402

B = "ckpt-test"


def ls(env, limit):
    """(exit, the error its row says, seconds) of `ckpt ls --retries 1`
    (the LOCATION's row: `LOCATION - - - error: WHY - -`); exit None when
    it was still running after limit seconds."""
    t0 = time.time()
    try:
        r = subprocess.run([CKPT, "ls", "--retries", "1",
                            "s3://%s/runs/" % B], env=env,
                           capture_output=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return None, "", limit
    rows = [ln.split("\t") for ln in r.stdout.decode().splitlines()]
    why = [f[4] for f in rows if len(f) > 4 and f[4].startswith("error: ")]
    return r.returncode, why[-1] if why else "", time.time() - t0


def main():
    c = Checker()
    with S3Env() as s3:
        env = s3.env()
        for i in range(12):
            tool(env, "put", "-", "s3://%s/runs/run%02d/config.yaml" %
                 (B, i), input=b"x: 1\n")
        rc, _, secs = ls(env, 60)
        c.eq("no fault: exit 0", rc, 0)

        # A reply at 20 bytes/s: slower than 100 bytes/s for 2 s.
        s3.configure(trickle_bps=20, trickle_match="list-type")
        e = dict(env, CKPT_HTTP_MIN_SPEED="100", CKPT_HTTP_SLOW_TIME="2")
        rc, last, secs = ls(e, 30)
        c.eq("trickle: exit 1", rc, 1)
        c.true("trickle: within seconds (%.1f s)" % secs, secs < 15)
        c.true("trickle: says which limit (%r)" % last, last.endswith(
            "transfer slower than 100 bytes/s for 2 s "
            "(CKPT_HTTP_MIN_SPEED, CKPT_HTTP_SLOW_TIME)"))

        # Fast enough for the throughput guard, never done: the deadline.
        s3.configure(trickle_bps=300, trickle_match="list-type")
        e = dict(env, CKPT_HTTP_MIN_SPEED="100", CKPT_HTTP_SLOW_TIME="2",
                 CKPT_HTTP_DEADLINE="3")
        rc, last, secs = ls(e, 30)
        c.eq("deadline: exit 1", rc, 1)
        c.true("deadline: within seconds (%.1f s)" % secs, secs < 15)
        c.true("deadline: says which limit (%r)" % last, last.endswith(
            "request not finished within its deadline of 3 s "
            "(CKPT_HTTP_DEADLINE plus 1 s per CKPT_HTTP_DEADLINE_SPEED "
            "bytes)"))

        s3.configure(trickle_bps=0)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
