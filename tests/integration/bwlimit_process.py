#!/usr/bin/python3
# ctest-cost: 8
"""bwlimit_process.py - --bwlimit wherever files are copied (issue 30),
into s3:// through the S3 test server (s3rver behind s3proxy), rates
measured here from the bytes DEST received over the command's wall time:

1. `process --bwlimit 4M -j 2` of two runs holding 12 MiB each: both
   processed, every byte sent; the pass takes at least the time the
   bytes take at 4 MiB/s (95 %: one limit for both runs at once, a
   limit per run would take half of it) and at most that (110 %) plus
   the unlimited pass's time and a second; the unlimited pass of the
   same runs takes under half of it.
2. `unshard --bwlimit 2M` of an 8 MiB DCP checkpoint to s3://: its
   output the same way within 2 MiB/s; without it under half of the
   time.
3. `--bwlimit fast`: a usage error (exit 2, nothing written) in both.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUP = os.path.join(HERE, "..", "support")
sys.path.insert(0, SUP)
import offline  # noqa: E402
from s3env import S3Env  # noqa: E402
from s3test import CKPT, Checker, gen_runs, old_ctime  # noqa: E402

offline.apply(os.environ)
B = "ckpt-test"
MIB = 1 << 20


def ckpt(env, *args):
    t0 = time.time()
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       timeout=600)
    return (r.returncode, r.stdout.decode(), r.stderr.decode(),
            time.time() - t0)


def total(out):
    last = out.splitlines()[-1].split("\t")
    return dict(f.split("=", 1) for f in last[1:])


def runs(tmp, name, sample):
    """Two runs (the sample's 2871005, complete) of 12 MiB each: random
    bytes in train_data/, which the run owns and process copies."""
    d = os.path.join(tmp, name)
    for r in ("r1", "r2"):
        shutil.copytree(os.path.join(sample, "2871005"), os.path.join(d, r),
                        symlinks=True)
        with open(os.path.join(d, r, "train_data", "rank1.npy"), "wb") as f:
            f.write(os.urandom(12 * MIB))
    return d


def limits(c, what, mib, sent, wall, free):
    """Never faster than the limit; slower only by the work the same
    pass does unlimited (plus a second); the unlimited pass much faster."""
    floor = sent / (mib * MIB)
    c.true("%s: %.2f s, not under the %.2f s the bytes take at the limit "
           "(95 %%)" % (what, wall, floor), wall >= floor * 0.95)
    c.true("%s: %.2f s, at most those %.2f s (110 %%) plus the unlimited "
           "pass's %.2f s and 1 s" % (what, wall, floor, free),
           wall <= floor * 1.1 + free + 1)
    # (half, not less: under ASan the unlimited pass itself is slow)
    c.true("%s: unlimited in %.2f s, under half of %.2f s"
           % (what, free, wall), free < wall / 2)


def process(c, env, tmp, sample):
    base = ["process", "--no-wandb", "--min-age", "0", "--no-progress",
            "-j", "2"]
    src = runs(tmp, "free", sample)
    rc, out, err, free = ckpt(env, *base, src, "--dest", "s3://%s/free" % B)
    print("process without --bwlimit: %.2f s" % free)
    src = runs(tmp, "limited", sample)
    want = sum(os.path.getsize(os.path.join(dp, f))
               for dp, _, fs in os.walk(src) for f in fs
               if not os.path.islink(os.path.join(dp, f)))
    rc, out, err, wall = ckpt(env, *base, "--bwlimit", "4M", src,
                              "--dest", "s3://%s/lim" % B)
    t = total(out)
    sent = int(t["bytes"])
    print("process --bwlimit 4M -j 2: %d bytes in %.2f s: %.2f MiB/s, "
          "at most %.2f MiB/s" % (sent, wall, sent / wall / MIB,
                                  sent / max(wall - free, 0.01) / MIB))
    c.eq("process --bwlimit: both runs copied, every byte", (
        rc, t["process"], sent), (0, "2", want))
    limits(c, "process --bwlimit 4M, 2 runs at once", 4, sent, wall, free)
    rc, out, err, _ = ckpt(env, *base, "--bwlimit", "fast", src,
                           "--dest", "s3://%s/x" % B)
    c.eq("process --bwlimit fast: usage error", (rc, out), (2, ""))


def unshard(c, env, tmp):
    d = os.path.join(tmp, "dcp")
    subprocess.run(["/usr/bin/python3", os.path.join(SUP, "make_dcp.py"), d,
                    "--case", "big", "--ranks", "2", "--size-mb", "8",
                    "--no-expected", "--no-verify"], check=True,
                   capture_output=True, timeout=300)
    step = os.path.join(d, "ckpt")
    rc, out, err, free = ckpt(env, "unshard", "--no-progress", step,
                              "s3://%s/u-free" % B)
    print("unshard without --bwlimit: %.2f s" % free)
    rc, out, err, wall = ckpt(env, "unshard", "--no-progress", "--json",
                              "--bwlimit", "2M", step, "s3://%s/u-lim" % B)
    sent = sum(o["bytes"] for o in json.loads(out)["outputs"]) if rc == 0 \
        else 0
    print("unshard --bwlimit 2M: %d bytes in %.2f s: %.2f MiB/s" % (
        sent, wall, sent / wall / MIB))
    c.eq("unshard --bwlimit: written (%r)" % (out + err)[-300:],
         (rc, sent > 7.5 * MIB), (0, True))
    limits(c, "unshard --bwlimit 2M", 2, sent, wall, free)
    rc, out, err, _ = ckpt(env, "unshard", "--bwlimit", "fast", step,
                           "s3://%s/u-x" % B)
    c.eq("unshard --bwlimit fast: usage error", (rc, out), (2, ""))


def main():
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="bwlimit-")
    try:
        sample = os.path.join(tmp, "s")
        gen_runs(sample)
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            process(c, env, tmp, sample)
            unshard(c, env, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
