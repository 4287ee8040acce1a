#!/usr/bin/python3
# ctest-cost: 30
"""upload_crash.py - crash consistency of `ckpt upload` (s3rver behind the
counting proxy).

1. kill -9 the upload at 20 random moments, rerunning each time: every
   run sends at most the bytes still missing at DEST when it started
   (proxy PUT body bytes), and the final tree is complete and identical;
   one more run sends nothing.
2. Killed after some parts were acknowledged, a rerun resumes the
   multipart upload: it sends exactly the parts not yet acknowledged.
3. Killed mid-upload, then the source file changes: the rerun discards the
   stale multipart upload (AbortMultipartUpload) and uploads the new bytes.
"""
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import BUILD, Checker, S3Env, tool  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ckpt-test"
MIB = 1 << 20


def make_tree(root, rng):
    files = {"big.bin": rng.randbytes(40 * MIB + 7),
             "mid.bin": rng.randbytes(12 * MIB),
             "empty": b"", "sub/empty2": b""}
    for i in range(150):
        files["small/f%03d" % i] = rng.randbytes(rng.randrange(0, 20000))
    for name, data in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return files


def dest_sizes(env, prefix):
    rc, out, _ = tool(env, "ls", "-r", "s3://%s/%s" % (B, prefix),
                      check=False)
    sizes = {}
    for line in out.decode().splitlines() if rc == 0 else []:
        _, size, name = line.split("\t", 2)
        sizes[name] = int(size)
    return sizes


def missing(files, sizes):
    """Bytes of the files DEST lacks (objects appear whole or not)."""
    return sum(len(d) for n, d in files.items() if sizes.get(n) != len(d))


def upload(env, src, dest, *extra, wait=True):
    cmd = [CKPT, "upload", "-q", "--json", "--transfers", "8"] + \
        list(extra) + [src, dest]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    if not wait:
        return p
    out, err = p.communicate(timeout=600)
    return p.returncode, out.decode(), err.decode()


def summary(out):
    return json.loads(out.strip().splitlines()[-1])


def identical(c, env, files, prefix, tmp):
    back = os.path.join(tmp, "back-" + prefix)
    shutil.rmtree(back, ignore_errors=True)
    rc, _, err = upload(env, "s3://%s/%s" % (B, prefix), back)
    c.eq("read back exit (%s)" % err.strip(), rc, 0)
    for name, data in files.items():
        with open(os.path.join(back, name), "rb") as f:
            if f.read() != data:
                c.true("%s identical" % name, False)
                return
    got = sorted(os.path.relpath(os.path.join(d, f), back)
                 for d, _, fs in os.walk(back) for f in fs)
    c.eq("nothing extra", got, sorted(files))


def random_kills(c, s3, env, tmp):
    rng = random.Random(7)
    src = os.path.join(tmp, "src")
    files = make_tree(src, rng)
    deadline = time.time() + 240
    killed = 0
    for rnd in range(20):
        before = missing(files, dest_sizes(env, "crash"))
        s3.reset_stats()
        p = upload(env, src, "s3://%s/crash" % B, wait=False)
        try:
            p.wait(timeout=rng.uniform(0.05, 1.2))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            killed += 1
        p.communicate()
        sent = s3.stats()["put_bytes"]
        c.true("round %d: sent %d <= missing %d" % (rnd, sent, before),
               sent <= before)
        if time.time() > deadline:
            break
    c.true("some runs were killed (%d)" % killed, killed >= 5)
    before = missing(files, dest_sizes(env, "crash"))
    s3.reset_stats()
    rc, out, err = upload(env, src, "s3://%s/crash" % B)
    c.eq("final run exit (%s %s)" % (err.strip(), out), rc, 0)
    sent = s3.stats()["put_bytes"]
    c.true("final run sent %d <= missing %d" % (sent, before),
           sent <= before)
    identical(c, env, files, "crash", tmp)
    s3.reset_stats()
    rc, out, _ = upload(env, src, "s3://%s/crash" % B)
    s = summary(out)
    c.eq("complete: rerun sends nothing",
         (rc, s["copy"], s["skip"], s3.stats()["put_bytes"]),
         (0, 0, len(files), 0))


def kill_after_parts(env, state, src, dest, parts):
    """Start an upload and kill -9 it once `parts` parts are journaled."""
    p = upload(env, src, dest, "--transfers", "2", wait=False)
    t0 = time.time()
    while time.time() - t0 < 60 and p.poll() is None:
        n = 0
        for j in glob.glob(os.path.join(state, "*.journal")):
            with open(j, "rb") as f:
                n += sum(1 for line in f if line.startswith(b"P\t"))
        if n >= parts:
            break
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.communicate()


def resume(c, s3, env, tmp, state):
    src = os.path.join(tmp, "one")
    os.makedirs(src)
    data = random.Random(3).randbytes(100 * MIB + 5)
    with open(os.path.join(src, "big"), "wb") as f:
        f.write(data)
    kill_after_parts(env, state, src, "s3://%s/resume" % B, 3)
    s3.reset_stats()
    rc, out, err = upload(env, src, "s3://%s/resume" % B)
    s = summary(out)
    sent = s3.stats()["put_bytes"]
    c.eq("resume exit (%s)" % err.strip(), rc, 0)
    c.true("resumed at least 3 parts: %d" % s["bytes_resumed"],
           s["bytes_resumed"] >= 3 * 8 * MIB)
    c.eq("resume sends exactly the rest", sent, len(data) - s["bytes_resumed"])
    c.eq("resume summary counts", (s["copy"], s["bytes_sent"]),
         (1, sent))
    _, got, _ = tool(env, "cat", "s3://%s/resume/big" % B)
    c.true("resumed object identical", got == data)
    return src, data


def stale(c, s3, env, tmp, state, src, data):
    kill_after_parts(env, state, src, "s3://%s/stale" % B, 2)
    new = bytes(b ^ 0x5a for b in data[:MIB]) + data[MIB:]
    path = os.path.join(src, "big")
    with open(path, "wb") as f:
        f.write(new)
    os.utime(path, (time.time() + 5, time.time() + 5))
    s3.reset_stats()
    rc, out, err = upload(env, src, "s3://%s/stale" % B)
    s = summary(out)
    st = s3.stats()
    c.eq("stale exit (%s)" % err.strip(), rc, 0)
    c.eq("stale upload discarded, nothing resumed",
         (s["abort"], s["bytes_resumed"], st["emulated"]["abort"]),
         (1, 0, 1))
    c.eq("new bytes sent whole", st["put_bytes"], len(new))
    _, got, _ = tool(env, "cat", "s3://%s/stale/big" % B)
    c.true("object holds the new bytes", got == new)


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-crash-")
    state = os.path.join(tmp, "state")
    try:
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = state
            random_kills(c, s3, env, tmp)
            src, data = resume(c, s3, env, tmp, state)
            stale(c, s3, env, tmp, state, src, data)
            c.eq("signatures all valid", s3.stats()["sig_fail"], 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
