#!/usr/bin/python3
# ctest-cost: 60
"""dest_vanish.py - no false success (issue 27, class 11): a run whose
files vanish between the judge and the upload (another worker, a user)
is never reported `processed`, state `done`, exit 0, with less than the
run at DEST.

  sweep    the run's directory is emptied (its files moved away, an empty
           directory left, as a worker that deleted them leaves it) at
           the k-th open of it, k = 1..16, by an LD_PRELOAD shim
           (tests/support/vanish_preload.c, CKPT_TEST_VANISH_EMPTY): for
           every k, a `processed` row has the whole run at DEST, and
           some k land between the judge and the upload, where the run
           fails naming a file that `vanished from the source since the
           run was judged`. Before: `processed RUN DEST 0 0`, state
           `done`, exit 0, nothing at DEST.
  workers  two workers given different DESTs over one SRC, at once, ten
           tries: whichever reports `processed` has the whole run at its
           DEST, and between them no file is lost. Before, the second
           copied what the first had not deleted yet, called the run done
           and deleted it.
"""
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (BUILD, CKPT, Checker, age_tree, contents,  # noqa: E402
                    gen_runs, old_ctime, scratch)

SHIM = os.path.join(BUILD, "libvanish_preload.so")
VANISHED = "vanished from the source since the run was judged"


def files(root):
    """{path: bytes} below root, symbolic links left out (`latest`)."""
    out = {}
    for d, _, fs in os.walk(root):
        for n in fs:
            p = os.path.join(d, n)
            if not os.path.islink(p):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = f.read()
    return out


def state(dest, rid):
    try:
        with open(os.path.join(dest, ".ckpt-process", rid + ".json")) as f:
            return json.load(f)["phase"]
    except OSError:
        return None


def sweep(c, gen, tmp):
    want = contents(os.path.join(gen, "2871005"))
    hits = []
    for k in range(1, 17):
        root = os.path.join(tmp, "sweep%d" % k)
        run, dest = os.path.join(root, "R"), os.path.join(root, "D")
        shutil.copytree(os.path.join(gen, "2871005"), run)
        env = dict(os.environ)
        env.update(LD_PRELOAD=SHIM + " " + env["LD_PRELOAD"],
                   CKPT_TEST_VANISH=run, CKPT_TEST_VANISH_SKIP=str(k),
                   CKPT_TEST_VANISH_EMPTY="1",
                   ASAN_OPTIONS=(env.get("ASAN_OPTIONS", "") +
                                 ":verify_asan_link_order=0").lstrip(":"))
        r = subprocess.run([CKPT, "process", "--no-wandb", "--min-age", "0",
                            run, "--dest", dest], env=env,
                           capture_output=True, text=True, timeout=300)
        row = [x for x in r.stdout.splitlines() if not x.startswith("total")]
        at = contents(os.path.join(dest, "R")) if os.path.isdir(
            os.path.join(dest, "R")) else {}
        if row and row[0].startswith("process\t"):
            c.eq("k=%d: processed, so the whole run at DEST" % k, at, want)
        if r.returncode == 0:
            c.true("k=%d: exit 0 only with the run at DEST or nothing "
                   "done (%r)" % (k, row), at == want or not row or
                   not row[0].startswith("process\t"))
        if state(dest, "R") == "done":
            c.eq("k=%d: state done, so the whole run at DEST" % k, at, want)
        if any(VANISHED in x for x in row):
            hits.append(k)
            c.eq("k=%d: vanished: failed, exit 1" % k,
                 (row[0].split("\t")[0], r.returncode), ("error", 1))
            c.true("k=%d: the upload phase names a file (%r)" % (k, row),
                   row[0].split("\t")[2].startswith("upload: %s/" % run))
            c.eq("k=%d: state not done" % k, state(dest, "R"), None)
    c.true("sweep: some kill lands between judge and upload: %r" % hits,
           hits)


def workers(c, gen, tmp, tries):
    for t in range(tries):
        root = os.path.join(tmp, "w%d" % t)
        run = os.path.join(root, "R")
        shutil.copytree(os.path.join(gen, "2871001"), run, symlinks=True)
        # Many small files: the first worker's deletes take a while, and
        # the second, started a little later each try, lists the run in
        # the middle of them.
        for i in range(400):
            with open(os.path.join(run, "train_data", "x%03d.npy" % i),
                      "wb") as f:
                f.write(b"%d" % i * 100)
        age_tree(root)
        want = files(run)
        dests = [os.path.join(root, "D1"), os.path.join(root, "D2")]
        procs = []
        for i, d in enumerate(dests):
            if i:
                time.sleep(0.04 * t)
            procs.append(subprocess.Popen(
                [CKPT, "process", "--no-wandb", "--min-age", "0",
                 "--unshard", "none", run, "--dest", d],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=300) for p in procs]
        union = {}
        for d, p, (out, err) in zip(dests, procs, outs):
            at = files(os.path.join(d, "R"))
            union.update(at)
            if out.startswith("process\t"):
                c.eq("try %d %s: processed, so the whole run there (%s)"
                     % (t, os.path.basename(d), out), sorted(at),
                     sorted(want))
                c.eq("try %d %s: exit 0" % (t, os.path.basename(d)),
                     p.returncode, 0)
            if state(d, "R") == "done":
                c.eq("try %d %s: done, so the whole run there" % (
                    t, os.path.basename(d)), sorted(at), sorted(want))
        union.update(files(run))
        c.eq("try %d: nothing lost" % t, sorted(union), sorted(want))


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-vanish-") as tmp:
        gen = os.path.join(tmp, "gen")
        gen_runs(gen)
        sweep(c, gen, tmp)
        workers(c, gen, tmp, 12)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
