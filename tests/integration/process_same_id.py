#!/usr/bin/python3
# ctest-cost: 10
"""process_same_id.py - two runs that share a run id (the same Slurm job
id under two scratch directories) must never be merged into one DEST
prefix: `ckpt process` keys a run's lease and state at DEST by its id, so
the second run of that id is reported `failed` and left untouched, in
the same invocation and in any later one, while the first is processed.

Before the fix the second run was first "skipped ... leased" by its own
process, and a later invocation then uploaded it over the first run's
objects at DEST/ID/ (the first run's source already deleted) and deleted
it: one run's checkpoint lost, the other's mixed into it."""
import hashlib
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, age_tree, ckpt, gen_runs  # noqa: E402


def tree(root):
    """{relative path: sha256} of the files below root."""
    out = {}
    for d, _, fs in os.walk(root):
        for n in fs:
            p = os.path.join(d, n)
            if not os.path.islink(p):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = hashlib.sha256(
                        f.read()).hexdigest()
    return out


def rows(out):
    return [line.split("\t")[:3] for line in out.splitlines()
            if not line.startswith("total")]


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-sameid-")
    try:
        g = os.path.join(tmp, "g")
        gen_runs(g)
        a = os.path.join(tmp, "a", "1234")
        b = os.path.join(tmp, "b", "1234")
        os.makedirs(os.path.dirname(a))
        os.makedirs(os.path.dirname(b))
        shutil.copytree(os.path.join(g, "2871001"), a, symlinks=True)
        shutil.copytree(os.path.join(g, "2871001"), b, symlinks=True)
        # Same file names, other bytes: a merge would overwrite a's.
        with open(os.path.join(b, "config.yaml"), "ab") as f:
            f.write(b"# run b\n")
        age_tree(tmp)
        want_a, want_b = tree(a), tree(b)
        dest = os.path.join(tmp, "D")
        args = ["--dest", dest, "--no-wandb", "--min-age", "0",
                "--unshard", "none"]
        why = ("lease: run id '1234' is also the id of %s, queued before "
               "it: the two would share one state at DEST; left untouched"
               % a)

        rc, out, err = ckpt("process", os.path.dirname(a),
                            os.path.dirname(b), *args)
        c.eq("same queue: exit" + ": " + err, rc, 1)
        c.eq("same queue: rows" + ": " + err, sorted(rows(out)),
             sorted([["process", a, os.path.join(dest, "1234")],
                     ["error", b, why]]))
        c.eq("same queue: a at DEST exactly", tree(os.path.join(dest,
                                                                "1234")),
             want_a)
        c.eq("same queue: a gone", os.path.exists(a), False)
        c.eq("same queue: b untouched", tree(b), want_b)
        # Leases are compare-and-swapped under a lock file each: none is
        # left behind.
        c.eq("same queue: state dir", sorted(os.listdir(os.path.join(
            dest, ".ckpt-process"))), ["1234.json"])

        # A later invocation with b alone: the state at DEST is a's.
        rc, out, err = ckpt("process", os.path.dirname(b), *args)
        state = os.path.join(dest, ".ckpt-process", "1234.json")
        c.eq("later: exit", rc, 1)
        c.eq("later: row" + ": " + err, rows(out),
             [["error", b, "lease: run id '1234' at DEST was processed "
               "from %s (%s); this is another run with the same id: left "
               "untouched" % (a, state)]])
        c.eq("later: a at DEST unchanged", tree(os.path.join(dest, "1234")),
             want_a)
        c.eq("later: b untouched", tree(b), want_b)

        # The same run again (a copy put back where a was) is not a clash:
        # its state is its own, so it is verified and deleted again.
        shutil.copytree(b, a, symlinks=True)
        shutil.copy(os.path.join(g, "2871001", "config.yaml"),
                    os.path.join(a, "config.yaml"))
        age_tree(a)
        rc, out, err = ckpt("process", os.path.dirname(a), *args)
        c.eq("own state: exit", rc, 0)
        c.eq("own state: row", [r[0] for r in rows(out)], ["process"])
        c.eq("own state: DEST unchanged", tree(os.path.join(dest, "1234")),
             want_a)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
