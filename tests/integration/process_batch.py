#!/usr/bin/python3
# ctest-cost: 25
"""process_batch.py - `ckpt process --batch ID` (src/process/claim.c):
the claims that share a Slurm array's runs out, on a local DEST with
claims planted as other workers would leave them
(DEST/.ckpt-process/RUN_ID.claim):

1. a claim of this batch by a live process of this host, or by a process
   of another host: another worker's run, no row, left at the source; by
   a process of this host that no longer exists and not done (a killed
   task): taken over and processed; done (its row was given): no row;
   a claim of another batch: replaced and processed. Every run this
   worker handled has its claim, of this batch, done; exit 0; the total
   row counts only the rows.
2. a run claimed by a live worker when this one passed it, given back
   while this one works on the others (the claim deleted, as an
   interrupted task does): this worker takes it at the end of its walk.
3. with -n nothing is claimed (no claim object is made).
4. --batch values outside [A-Za-z0-9._-]{1,64}: usage error, exit 2."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import Checker, old_ctime  # noqa: E402
import process_workers as pw  # noqa: E402

CKPT = pw.CKPT
HOST = socket.gethostname()


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def plant(dest, rid, batch, host, pid, done):
    d = os.path.join(dest, ".ckpt-process")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, rid + ".claim"), "w") as f:
        f.write(json.dumps({"batch": batch, "host": host, "pid": pid,
                            "run": rid, "token": "f" * 32,
                            "done": done}) + "\n")


def claim(dest, rid):
    path = os.path.join(dest, ".ckpt-process", rid + ".claim")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def rows(out):
    return {os.path.basename(r[1]): r for r in pw.rows_of(out)}


def planted(c, tmp):
    runs = os.path.join(tmp, "p-runs")
    dest = os.path.join(tmp, "p-dest")
    pw.make_runs(runs)
    gone = dead_pid()
    plant(dest, "3000001", "b1", HOST, os.getpid(), False)  # live
    plant(dest, "3000002", "b1", HOST, gone, False)         # killed
    plant(dest, "3000003", "b1", HOST, gone, True)          # done
    plant(dest, "2871005", "b0", HOST, os.getpid(), False)  # other batch
    plant(dest, "2871004", "b1", "elsewhere", gone, False)  # other host
    r = subprocess.run([CKPT, "process", "--no-wandb", "-q", "--batch", "b1",
                        runs, "--dest", dest], capture_output=True,
                       text=True, timeout=300)
    c.eq("planted: exit 0 (%s)" % r.stderr[-500:], r.returncode, 0)
    got = rows(r.stdout)
    c.eq("planted: rows", sorted((n, x[0]) for n, x in got.items()),
         sorted([("2871001", "process"), ("2871002", "delete"),
                 ("2871005", "process"), ("2871101.tar.gz", "process"),
                 ("2871102.tar.gz", "delete"), ("3000002", "process"),
                 ("notes", "skip")]))
    c.eq("planted: others' runs left at the source",
         sorted(os.listdir(runs)), ["2871004", "3000001", "3000003",
                                    "notes"])
    c.eq("planted: the total counts the rows", r.stdout.splitlines()[-1]
         .split("\t")[1:5], ["process=4", "delete=2", "skip=1",
                             "error=0"])
    mine = {n: claim(dest, pw.rid(n)) for n in got}
    c.eq("planted: every run handled has our claim, done",
         {n: (v["batch"], v["host"], v["pid"] != os.getpid(), v["done"])
          for n, v in mine.items()},
         {n: ("b1", HOST, True, True) for n in got})
    c.eq("planted: the others' claims untouched",
         [(claim(dest, x)["pid"], claim(dest, x)["done"])
          for x in ("3000001", "3000003", "2871004")],
         [(os.getpid(), False), (gone, True), (gone, False)])


def rewalk(c, tmp):
    runs = os.path.join(tmp, "w-runs")
    dest = os.path.join(tmp, "w-dest")
    pw.make_runs(runs)
    plant(dest, "2871001", "b2", HOST, os.getpid(), False)
    p = subprocess.Popen([CKPT, "process", "--no-wandb", "--runs", "1",
                          "--batch", "b2", runs, "--dest", dest],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    err = []

    def pump():
        for line in p.stderr:
            err.append(line)
    t = threading.Thread(target=pump)
    t.start()
    deadline = time.time() + 120
    while time.time() < deadline and not any(
            re.search(r"/2871004: lease ok", x) for x in err):
        time.sleep(0.02)
    # Given back while the worker is on the other runs.
    os.unlink(os.path.join(dest, ".ckpt-process", "2871001.claim"))
    out, _ = p.communicate(timeout=300)
    t.join()
    c.eq("rewalk: exit 0", p.returncode, 0)
    order = [os.path.basename(r[1]) for r in pw.rows_of(out)]
    c.eq("rewalk: the run given back is taken, last", order[-1:],
         ["2871001"])
    c.eq("rewalk: every run once", sorted(order),
         sorted(pw.GOOD + pw.BADR + ["notes"]))
    c.eq("rewalk: its claim ours, done", (claim(dest, "2871001")["batch"],
                                          claim(dest, "2871001")["done"]),
         ("b2", True))


def dry_and_usage(c, tmp):
    runs = os.path.join(tmp, "n-runs")
    dest = os.path.join(tmp, "n-dest")
    pw.make_runs(runs)
    r = subprocess.run([CKPT, "process", "-n", "--no-wandb", "--batch", "b3",
                        runs, "--dest", dest], capture_output=True,
                       text=True, timeout=300)
    c.eq("-n --batch: exit 0, no claim made",
         (r.returncode, os.path.exists(os.path.join(dest, ".ckpt-process"))),
         (0, False))
    for bad in ("", "a/b", "x" * 65, "a b"):
        r = subprocess.run([CKPT, "process", "--batch", bad, runs, "--dest",
                            dest], capture_output=True, text=True)
        c.eq("--batch %r: usage error" % bad, (r.returncode, r.stderr.split(
            "\n")[0]), (2, "ckpt process: error: --batch '%s': expected 1 "
                        "to 64 letters, digits, '.', '_' or '-'" % bad))


def main():
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-batch-")
    try:
        for part in (planted, rewalk, dry_and_usage):
            t0 = time.time()
            part(c, tmp)
            print("%s: %.1f s" % (part.__name__, time.time() - t0))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
