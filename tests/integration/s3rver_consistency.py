#!/usr/bin/python3
# ctest-cost: 5
"""s3rver_consistency.py - the test S3 (tests/support/s3rver_atomic.js
over s3rver) keeps S3's read-after-write guarantee, which the lease and
every read-back test rely on: a GET sent after a PUT's answer returns
that object whole, and a GET overlapping PUTs of the same key returns one
complete version, never a short or empty body. s3rver as shipped fails
both (it answers a PUT before the bytes are written and rewrites the file
in place): S3ENV_RAW_S3RVER=1 runs this against it."""
import http.client
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import Checker, S3Env  # noqa: E402

B = "ckpt-test"
ROUNDS = 300
# Versions of one object: sizes far apart, every byte telling its version.
VERSIONS = [bytes([65 + i]) * n for i, n in enumerate((300, 70000, 900000))]


def request(port, method, path, body=None):
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    h.request(method, path, body=body,
              headers={"Content-Length": str(len(body))} if body else {})
    r = h.getresponse()
    data = r.read()
    h.close()
    return r.status, data


def put_then_get(c, port):
    """Sequential: each answered PUT is read back whole at once."""
    bad = []
    for i in range(ROUNDS):
        v = VERSIONS[i % len(VERSIONS)]
        st, _ = request(port, "PUT", "/%s/raw/seq" % B, v)
        assert st == 200, st
        st, got = request(port, "GET", "/%s/raw/seq" % B)
        if st != 200 or got != v:
            bad.append((i, st, len(got), len(v)))
    c.eq("every GET after an answered PUT returns that PUT's bytes",
         bad[:5], [])


def overlapping(c, port):
    """Writers replace one key while readers read it: each read is one
    complete version."""
    stop = threading.Event()
    bad = []

    def writer(k):
        i = k
        while not stop.is_set():
            request(port, "PUT", "/%s/raw/hot" % B,
                    VERSIONS[i % len(VERSIONS)])
            i += 1

    def reader():
        for _ in range(ROUNDS // 2):
            try:
                st, got = request(port, "GET", "/%s/raw/hot" % B)
            except http.client.HTTPException as e:  # a body cut short
                st, got = repr(e)[:40], b""
            if st != 200 or got not in VERSIONS:
                bad.append((st, len(got), got[:1]))

    request(port, "PUT", "/%s/raw/hot" % B, VERSIONS[0])
    ws = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    rs = [threading.Thread(target=reader) for _ in range(3)]
    for t in ws + rs:
        t.start()
    for t in rs:
        t.join()
    stop.set()
    for t in ws:
        t.join()
    c.eq("GETs overlapping PUTs return whole versions", bad[:5], [])


def main():
    c = Checker()
    with S3Env(buckets=[B], proxy=False) as s3:
        put_then_get(c, s3.s3rver_port)
        overlapping(c, s3.s3rver_port)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
