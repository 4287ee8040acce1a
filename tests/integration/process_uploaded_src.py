#!/usr/bin/python3
# ctest-cost: 3
"""process_uploaded_src.py - the state `ckpt process` writes as "uploaded"
right before a run's first deletion records the run's source, as every
other state does; a worker killed while deleting (tests/crash/crash.py's
process scenario found such a state without it) leaves a state that
another run with the same id is refused by.

Run A (DEST_ID 123) is killed right after its config.yaml is deleted (an
LD_PRELOAD shim, tests/support/kill_preload.c, makes the moment exact);
its lease is made to lapse. Run B, another run with id 123 from another
directory whose config.yaml differs, must then be refused (`failed ...
lease: run id '123' at DEST was processed from A`, exit 1, left
untouched), and A's rerun finishes A. Before the fix the state had no
source, B was taken for A's rerun: B's config.yaml replaced A's at DEST,
B was deleted, and A's config.yaml existed nowhere any more."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import BUILD, Checker, contents  # noqa: E402
import gen_runs  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
SHIM = os.path.join(BUILD, "libkill_preload.so")


def make_run(root, wandb_id, note):
    gen_runs.run_skeleton(root, "123", wandb_id)
    gen_runs.unsharded_step(root, "step10-unsharded")
    with open(os.path.join(root, "config.yaml"), "a") as f:
        f.write("# %s\n" % note)


def process(run, dest, kill_at=None):
    env = dict(os.environ)
    if kill_at:
        # ASan wants its runtime first; the shim only wraps unlink/rename.
        env.update(LD_PRELOAD=SHIM, CKPT_TEST_KILL_AT=kill_at,
                   ASAN_OPTIONS=(env.get("ASAN_OPTIONS", "") +
                                 ":verify_asan_link_order=0").lstrip(":"))
    r = subprocess.run([CKPT, "process", "--no-wandb", "--no-progress",
                        "--min-age", "0", run, "--dest", dest], env=env,
                       capture_output=True, text=True, timeout=300)
    rows = [line.split("\t") for line in r.stdout.splitlines()
            if line and not line.startswith("total\t")]
    return r.returncode, rows, r.stderr


def lapse(dest):
    """The killed worker's leases (the run's, its DEST path's), expired
    (as after --lease-ttl)."""
    for name in ("123.lease", "123.path.lease"):
        path = os.path.join(dest, ".ckpt-process", name)
        with open(path) as f:
            lease = json.load(f)
        lease["acquired"] = lease["expires"] = int(time.time()) - 3600
        with open(path, "w") as f:
            f.write(json.dumps(lease) + "\n")


def md5(data):
    return hashlib.md5(data).hexdigest()


def sums(root):
    """{relative path: MD5} of the files below root."""
    return {k: md5(v) for k, v in contents(root).items()}


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "a", "123"), os.path.join(tmp, "b", "123")
        dest = os.path.join(tmp, "dest")
        make_run(a, "aaaa0001", "run A")
        make_run(b, "bbbb0002", "run B, the same Slurm job id elsewhere")
        a_files, b_files = sums(a), sums(b)
        c.true("A's and B's config.yaml differ",
               a_files["config.yaml"] != b_files["config.yaml"])

        rc, rows, err = process(a, dest,
                                kill_at=os.path.join(a, "config.yaml"))
        c.eq("A killed right after its config.yaml went (%s)"
             % err.strip()[-300:], (rc, os.path.exists(a),
                                    os.path.exists(os.path.join(
                                        a, "config.yaml"))), (-9, True, False))
        with open(os.path.join(dest, ".ckpt-process", "123.json")) as f:
            state = json.load(f)
        c.eq("A's state: uploaded, with A as its source",
             (state.get("phase"), state.get("src")), ("uploaded", a))
        c.eq("A's config.yaml is at DEST",
             sums(os.path.join(dest, "123")).get("config.yaml"),
             a_files["config.yaml"])
        lapse(dest)

        rc, rows, err = process(b, dest)
        c.eq("B, the same id from elsewhere: refused, exit 1",
             (rc, [r[:2] for r in rows]), (1, [["error", b]]))
        c.true("B's reason names A (%s)" % rows,
               rows and rows[0][2].startswith(
                   "lease: run id '123' at DEST was processed from %s" % a))
        c.eq("B left untouched", sums(b), b_files)
        c.eq("DEST's config.yaml is still A's",
             sums(os.path.join(dest, "123")).get("config.yaml"),
             a_files["config.yaml"])

        rc, rows, err = process(a, dest)
        c.eq("A's rerun: processed, exit 0 (%s)" % err.strip()[-300:],
             (rc, [r[:2] for r in rows]), (0, [["process", a]]))
        c.eq("A gone at the source", os.path.exists(a), False)
        c.eq("DEST holds A, byte for byte",
             sums(os.path.join(dest, "123")), a_files)
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
