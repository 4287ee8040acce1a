#!/usr/bin/python3
# ctest-cost: 60
"""upload_delete.py - `ckpt upload --delete-source` against s3rver behind
the fault-injecting proxy: when faults make some files fail, nothing at
all is deleted and the run says which files did not arrive; once
everything arrives and is verified, the source goes (a local tree, its
directories included; a remote prefix, object by object); and with
R2-style same-object throttling (429) on most writes, everything still
arrives and the throttles are counted."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import BUILD, Checker, S3Env, tool  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ckpt-test"


def make(root, rng, n=20):
    files = {}
    for i in range(n):
        files["d%d/f%02d" % (i % 3, i)] = rng.randbytes(rng.randrange(1, 5000))
    files["big"] = rng.randbytes(9 * (1 << 20))
    for name, data in files.items():
        p = os.path.join(root, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    return files


def ckpt(env, *args):
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       timeout=600)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def local_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def names(env, prefix):
    rc, out, _ = tool(env, "ls", "-r", "s3://%s/%s" % (B, prefix),
                      check=False)
    return sorted(line.split("\t")[2] for line in out.decode().splitlines())


def failing(c, s3, env, src, files):
    """Half the PUTs refused, one attempt each: some files fail."""
    s3.configure(slowdown=0.5, methods="PUT")
    rc, out, err = ckpt(env, "upload", "--retries", "1", "-v",
                        "--delete-source", src, "s3://%s/del" % B)
    s3.configure(slowdown=0.0, methods="")
    failed = [line.split("\t")[1] for line in out.splitlines()
              if line.startswith("error\t")]
    c.eq("exit with failures", rc, 1)
    c.true("some files failed: %d" % len(failed), 0 < len(failed))
    # With one attempt, a refused PUT shows as the 503 itself or, when the
    # loaded proxy drops the connection, as a reset: both name the object.
    bad = [line for line in out.splitlines() if line.startswith("error\t")
           and not (line.endswith("HTTP 503 SlowDown") or
                    line.endswith("Connection reset by peer"))
           or (line.startswith("error\t") and
               line.split("\t")[3].split(": ")[0] != line.split("\t")[2])]
    c.true("every failed row names a file and the error: %r" % bad[:3],
           not bad)
    c.true("the run says nothing was deleted",
           "not deleting any source: some files did not arrive" in err)
    c.eq("no deleted rows", [x for x in out.splitlines()
                             if x.startswith("delete")], [])
    c.eq("source intact", local_files(src), sorted(files))
    arrived = set(names(env, "del"))
    c.eq("exactly the failed files did not arrive",
         sorted(os.path.relpath(f, src) for f in failed),
         sorted(set(files) - arrived))


def succeeding(c, s3, env, src, files):
    rc, out, err = ckpt(env, "upload", "--json", "--delete-source", src,
                        "s3://%s/del" % B)
    s = json.loads(out.strip().splitlines()[-1])
    c.eq("clean run exit (%s)" % err.strip(), rc, 0)
    c.eq("all deleted", (s["error"], s["delete"]), (0, len(files)))
    c.eq("local source tree gone", os.path.exists(src), False)
    c.eq("all at DEST", names(env, "del"), sorted(files))
    back = src + ".back"
    rc, _, _ = ckpt(env, "upload", "-q", "s3://%s/del" % B, back)
    ok = rc == 0
    for n, d in files.items():
        with open(os.path.join(back, n), "rb") as f:
            ok = ok and f.read() == d
    c.true("DEST identical to what the source held", ok)
    # Remote SRC: objects deleted one by one after verification.
    rc, out, _ = ckpt(env, "upload", "--json", "--delete-source",
                      "s3://%s/del" % B, "s3://%s/moved" % B)
    c.eq("remote move exit", rc, 0)
    c.eq("remote source empty", names(env, "del"), [])
    c.eq("remote DEST complete", names(env, "moved"), sorted(files))


def throttled(c, s3, env, src):
    rng = random.Random(5)
    files = make(src, rng, n=30)
    s3.configure(r2_429=0.4, methods="PUT")
    s3.reset_stats()
    rc, out, err = ckpt(env, "upload", "--json", src, "s3://%s/thr" % B)
    st = s3.stats()
    s3.configure(r2_429=0.0, methods="")
    s = json.loads(out.strip().splitlines()[-1])
    c.eq("throttled run exit (%s)" % err.strip(), rc, 0)
    c.eq("throttled: all arrived", (s["copy"], s["error"]),
         (len(files), 0))
    c.true("throttles backed off per object: %d (proxy %d)" % (
        s["throttled"], st["faults"]["r2_429"]),
        s["throttled"] == st["faults"]["r2_429"] > 10)
    c.eq("throttled: DEST complete", names(env, "thr"), sorted(files))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-delete-")
    try:
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            src = os.path.join(tmp, "src")
            files = make(src, random.Random(1))
            failing(c, s3, env, src, files)
            succeeding(c, s3, env, src, files)
            throttled(c, s3, env, os.path.join(tmp, "thr"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
