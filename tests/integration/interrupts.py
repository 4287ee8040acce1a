#!/usr/bin/python3
# ctest-cost: 45
"""interrupts.py - SIGINT, SIGTERM and SIGHUP stop the commands that
write (docs/ckpt.md "Interrupts"), against s3rver behind the proxy
(slowed, so that work is in flight when the signal lands); `process`:
process_interrupt.py.

1. upload s3:// -> local, SIGINT once a part of a 72 MiB object was
   acknowledged: exit 130; the only temporary left at DEST is the one the
   journal records for resume; the rerun fetches only the ranges it
   lacks (bytes through the proxy) and the file is byte for byte.
2. unshard s3:// -> local, SIGHUP mid-read: exit 129, no temporary output
   at DEST; a rerun makes the checkpoint.
3. clean of remote runs, SIGINT while judging: exit 130, every RUN
   "skip interrupted: left as it was", nothing deleted."""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import Checker, S3Env, old_ctime, tool  # noqa: E402
import process_workers as pw  # noqa: E402

CKPT = pw.CKPT
B = pw.B
MIB = 1 << 20
FIX = os.path.join(HERE, "..", "fixtures", "runs", "olmo-torch-new-1.13")


class Proc:
    """A ckpt process whose stderr is read as it comes."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.err, self.out = [], []
        self.ts = [threading.Thread(target=self._pump, args=(s, d))
                   for s, d in ((self.p.stderr, self.err),
                                (self.p.stdout, self.out))]
        for t in self.ts:
            t.start()

    @staticmethod
    def _pump(stream, into):
        for line in stream:
            into.append(line)

    def wait_for(self, pattern, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline and self.p.poll() is None:
            if any(re.search(pattern, line) for line in self.err):
                return True
            time.sleep(0.05)
        return False

    def finish(self, timeout=120):
        rc = self.p.wait(timeout=timeout)
        for t in self.ts:
            t.join()
        return rc, "".join(self.out), "".join(self.err)


def temporaries(root):
    """Names below root that are ckpt's temporaries or delete-asides."""
    found = []
    for d, ds, fs in os.walk(root):
        for n in ds + fs:
            if ".ckpt-" in n:
                found.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(found)


def leases(env, prefix):
    _, out, _ = tool(env, "ls", "s3://%s/%s/.ckpt-process" % (B, prefix),
                     check=False)
    return sorted(line.split("\t")[2] for line in out.decode().splitlines()
                  if line.endswith(".lease"))


def process_env(s3, tmp):
    env = s3.env()
    env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
    env["TMPDIR"] = os.path.join(tmp, "scratch")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def journal_parts(state):
    """(temporary named by the journal's S line, parts acknowledged)."""
    tmp, parts = None, 0
    for name in os.listdir(state) if os.path.isdir(state) else []:
        if not name.endswith(".journal"):
            continue
        with open(os.path.join(state, name)) as f:
            for line in f:
                f_ = line.rstrip("\n").split("\t")
                if f_[0] == "S":
                    tmp = f_[2]
                elif f_[0] == "P":
                    parts += 1
    return tmp, parts


def upload_resume(c, s3, tmp):
    src = os.path.join(tmp, "u-src")
    os.makedirs(src)
    big = os.urandom(72 * MIB + 5)
    with open(os.path.join(src, "big.bin"), "wb") as f:
        f.write(big)
    with open(os.path.join(src, "small.bin"), "wb") as f:
        f.write(os.urandom(3 * MIB))
    env = process_env(s3, tmp)
    env["CKPT_STATE_DIR"] = state = os.path.join(tmp, "u-state")
    r = subprocess.run([CKPT, "upload", "-q", src, "s3://%s/u" % B],
                       env=env, capture_output=True, timeout=300)
    c.eq("upload: source in the bucket", r.returncode, 0)
    shutil.rmtree(state)
    dst = os.path.join(tmp, "u-dst")
    s3.configure(slow_ms=25)
    p = Proc([CKPT, "upload", "--transfers", "2", "s3://%s/u" % B, dst], env)
    deadline = time.time() + 60
    while time.time() < deadline and journal_parts(state)[1] < 1:
        time.sleep(0.05)
    p.p.send_signal(signal.SIGINT)
    rc, out, err = p.finish()
    s3.configure(slow_ms=0)
    jtmp, parts = journal_parts(state)
    print("upload: interrupted with %d part(s) acknowledged" % parts)
    c.eq("upload SIGINT: exit 130", rc, 130)
    c.eq("upload SIGINT: last word", err.splitlines()[-1].split(" ", 1)[1],
         "ckpt: interrupted: rerun to resume (SIGINT)")
    c.true("upload SIGINT: parts acknowledged", parts >= 1)
    c.eq("upload SIGINT: the only temporary is the journal's",
         temporaries(dst), [os.path.basename(jtmp or "-")])
    s3.reset_stats()
    r = subprocess.run([CKPT, "upload", "--json", "s3://%s/u" % B, dst],
                       env=env, capture_output=True, text=True, timeout=300)
    got = s3.stats()["bytes_out"]
    c.eq("upload rerun: exit 0", r.returncode, 0)
    part = 8 * MIB
    lacking = len(big) - parts * part
    print("upload rerun: %d bytes through the proxy, %d lacking" %
          (got, lacking))
    c.true("upload rerun: only the lacking ranges fetched (%d > %d)" %
           (got, lacking + 3 * MIB + 65536),
           got <= lacking + 3 * MIB + 65536)
    total = json.loads(r.stdout.splitlines()[-1])
    c.eq("upload rerun: resumed the acknowledged parts",
         total["bytes_resumed"], parts * part)
    with open(os.path.join(dst, "big.bin"), "rb") as f:
        c.eq("upload rerun: big.bin byte for byte",
             hashlib.sha256(f.read()).hexdigest(),
             hashlib.sha256(big).hexdigest())
    c.eq("upload rerun: no temporary left", temporaries(dst), [])


def unshard_sighup(c, s3, tmp):
    env = process_env(s3, tmp)
    r = subprocess.run([CKPT, "upload", "-q", os.path.join(FIX, "step"),
                        "s3://%s/d/step1000" % B], env=env,
                       capture_output=True, timeout=300)
    c.eq("unshard: checkpoint in the bucket", r.returncode, 0)
    dst = os.path.join(tmp, "d-out")
    s3.configure(trickle_bps=2000, trickle_match="distcp")
    p = Proc([CKPT, "unshard", "--no-progress", "s3://%s/d/step1000" % B,
              dst], env)
    time.sleep(2)
    p.p.send_signal(signal.SIGHUP)
    rc, _, err = p.finish()
    s3.configure(trickle_bps=0, trickle_match="")
    c.eq("unshard SIGHUP: exit 129", rc, 129)
    c.eq("unshard SIGHUP: last word", err.splitlines()[-1].split(" ", 1)[1],
         "ckpt: interrupted: rerun to resume (SIGHUP)")
    c.eq("unshard SIGHUP: no temporary output",
         temporaries(dst) if os.path.isdir(dst) else [], [])
    r = subprocess.run([CKPT, "unshard", "--no-progress",
                        "s3://%s/d/step1000" % B, dst], env=env,
                       capture_output=True, text=True, timeout=300)
    c.eq("unshard rerun: exit 0", r.returncode, 0)
    c.eq("unshard rerun: the checkpoint", sorted(os.listdir(dst)),
         ["config.yaml", "model.pt", "optim.pt", "train.pt"])


def clean_sigint(c, s3, tmp):
    runs = os.path.join(tmp, "c-runs")
    pw.make_runs(runs)
    env = process_env(s3, tmp)
    r = subprocess.run([CKPT, "upload", "-q", runs, "s3://%s/c" % B],
                       env=env, capture_output=True, timeout=300)
    c.eq("clean: runs in the bucket", r.returncode, 0)
    _, before, _ = tool(env, "ls", "-r", "s3://%s/c" % B)
    bad = ["s3://%s/c/%s" % (B, n) for n in ("2871002", "2871004")]
    s3.configure(trickle_bps=50)
    p = Proc([CKPT, "clean", "--min-age", "0"] + bad, env)
    time.sleep(1.5)
    p.p.send_signal(signal.SIGINT)
    rc, out, err = p.finish()
    s3.configure(trickle_bps=0)
    c.eq("clean SIGINT: exit 130", rc, 130)
    c.eq("clean SIGINT: rows", sorted(out.splitlines()),
         sorted("skip\t%s\tinterrupted: left as it was" % b for b in bad))
    c.eq("clean SIGINT: last word", err.splitlines()[-1].split(" ", 1)[1],
         "ckpt: interrupted: rerun to resume (SIGINT)")
    _, after, _ = tool(env, "ls", "-r", "s3://%s/c" % B)
    c.eq("clean SIGINT: nothing deleted", after, before)


def main():
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="interrupts-")
    try:
        with S3Env() as s3:
            for part in (upload_resume, unshard_sighup, clean_sigint):
                # INTERRUPTS_ONLY=NAME: that part alone (while debugging).
                if os.environ.get("INTERRUPTS_ONLY", part.__name__) != \
                        part.__name__:
                    continue
                t0 = time.time()
                part(c, s3, tmp)
                print("%s: %.1f s" % (part.__name__, time.time() - t0))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
