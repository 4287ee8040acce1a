#!/usr/bin/python3
# ctest-cost: 70
"""process_interrupt.py - `ckpt process` stopped by SIGTERM, and killed
by SIGKILL (docs/deploy.md "Interrupts"), against s3rver behind the
proxy (slowed, so that runs are in flight when the signal lands):

1. SIGTERM while runs are in flight: exit 143 within seconds,
   "interrupted: rerun to resume (SIGTERM)" on stderr, every run in
   flight failed "PHASE: interrupted", the total row, no lease left at
   DEST, no temporary beside the runs, nothing left in TMPDIR; a rerun
   right after takes every run at once (no "leased by") and converges
   (every good run at DEST byte for byte, every bad one deleted).
2. SIGKILL while it holds leases: the rerun right after takes the dead
   worker's leases over at once (same host, its pid gone), says so with
   a log line per lease, and converges; nothing waits out the 10-minute
   TTL (a lease on a run the dead worker had finished lapses: no pass
   queues that run again)."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import Checker, S3Env, old_ctime  # noqa: E402
from interrupts import Proc, leases, process_env, temporaries  # noqa: E402
import process_workers as pw  # noqa: E402

CKPT = pw.CKPT
B = pw.B


def process_sigterm(c, s3, tmp):
    runs = os.path.join(tmp, "t-runs")
    pw.make_runs(runs)
    snaps = {n: pw.snapshot(os.path.join(runs, n)) for n in pw.GOOD}
    env = process_env(s3, tmp)
    dest = "s3://%s/t" % B
    s3.configure(slow_ms=300)
    p = Proc([CKPT, "process", "--no-wandb", runs, "--dest", dest], env)
    c.true("process: a run reached its upload",
           p.wait_for(r": (unshard|upload) ok"))
    t0 = time.time()
    p.p.send_signal(signal.SIGTERM)
    rc, out, err = p.finish()
    took = time.time() - t0
    s3.configure(slow_ms=0)
    print("process: exit %d %.2f s after SIGTERM" % (rc, took))
    c.eq("process SIGTERM: exit 143", rc, 143)
    c.true("process SIGTERM: out within 10 s (%.1f s)" % took, took < 10)
    c.eq("process SIGTERM: last word", err.splitlines()[-1].split(" ", 1)[1],
         "ckpt: interrupted: rerun to resume (SIGTERM)")
    rows = pw.rows_of(out)
    failed = [r for r in rows if r[0] == "error"]
    c.true("process SIGTERM: runs in flight failed", failed)
    c.eq("process SIGTERM: each failed 'PHASE: interrupted'",
         [r[2].split(": ", 1)[1] for r in failed], ["interrupted"] *
         len(failed))
    c.true("process SIGTERM: not every run was started",
           len(rows) < len(pw.GOOD) + len(pw.BADR) + 1)
    c.eq("process SIGTERM: total row printed", out.splitlines()[-1][:6],
         "total\t")
    c.eq("process SIGTERM: no lease left at DEST", leases(env, "t"), [])
    c.eq("process SIGTERM: no temporary beside the runs",
         temporaries(runs), [])
    c.eq("process SIGTERM: TMPDIR empty", os.listdir(env["TMPDIR"]), [])
    t0 = time.time()
    r = subprocess.run([CKPT, "process", "--no-wandb", "-q", runs,
                        "--dest", dest], env=env, capture_output=True,
                       text=True, timeout=300)
    print("process: rerun %.1f s" % (time.time() - t0))
    c.eq("process rerun: exit 0 (%s)" % r.stderr[-500:], r.returncode, 0)
    again = pw.rows_of(r.stdout)
    c.eq("process rerun: nothing leased",
         [x for x in again if "leased by" in "\t".join(x)], [])
    pw.check_final(c, "process rerun", env, runs, "t", snaps, tmp)


def process_sigkill(c, s3, tmp):
    runs = os.path.join(tmp, "k-runs")
    pw.make_runs(runs)
    snaps = {n: pw.snapshot(os.path.join(runs, n)) for n in pw.GOOD}
    env = process_env(s3, tmp)
    dest = "s3://%s/k" % B
    s3.configure(slow_ms=300)
    p = Proc([CKPT, "process", "--no-wandb", runs, "--dest", dest], env)
    c.true("process: a run reached its unshard",
           p.wait_for(r": (unshard|upload) ok"))
    p.p.kill()
    p.finish()
    s3.configure(slow_ms=0)
    held = leases(env, "k")
    c.true("SIGKILL: the dead worker's leases are left (%s)" % held, held)
    # A run the worker finished (its source gone) before the kill is
    # queued by no one again: its lease lapses (reliability.md,
    # lapsed-lease). The others' are taken over.
    queued = {pw.rid(n.split(".ckpt-del-")[0][1:]) if ".ckpt-del-" in n
              else pw.rid(n) for n in os.listdir(runs)}
    lapse = [n for n in held if n[:-len(".lease")] not in queued]
    held = [n for n in held if n not in lapse]
    t0 = time.time()
    r = subprocess.run([CKPT, "process", "--no-wandb", runs, "--dest",
                        dest], env=env, capture_output=True, text=True,
                       timeout=300)
    took = time.time() - t0
    print("process after SIGKILL: rerun %.1f s" % took)
    c.eq("SIGKILL rerun: exit 0", r.returncode, 0)
    c.eq("SIGKILL rerun: nothing leased",
         [x for x in pw.rows_of(r.stdout) if "leased by" in "\t".join(x)],
         [])
    host = socket.gethostname()
    said = re.findall(r": lease ok: taken-over: the lease of (.*):(\d+) "
                      r"until \S+, whose process no longer runs on this "
                      r"host$", r.stderr, re.M)
    c.eq("SIGKILL rerun: each dead lease taken over, with a log line",
         sorted(set(said)), [(host, str(p.p.pid))])
    c.eq("SIGKILL rerun: as many takeovers as leases left", len(said),
         len(held))
    pw.check_final(c, "SIGKILL rerun", env, runs, "k", snaps, tmp,
                   leased_ok=lapse)


def main():
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-interrupt-")
    try:
        with S3Env() as s3:
            for part in (process_sigterm, process_sigkill):
                t0 = time.time()
                part(c, s3, tmp)
                print("%s: %.1f s" % (part.__name__, time.time() - t0))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
