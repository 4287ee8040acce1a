#!/usr/bin/python3
# ctest-cost: 10
"""process_dry_run.py - `ckpt process -n` predicts the real run exactly:
the same rows (would-process / would-delete / skipped) with the same
files, bytes and steps per run, and the same totals, freed bytes
included, on the sample runs (directories and every archive kind) with
a sharded step to unshard and --drop-sharded. Before, a dry run counted
the sharded step that the real run drops (its -unsharded copy is made
only by the real run), left out the unshard outputs, gave a copied
train.pt size 0 and freed=0; and -n changes nothing.

Also when the -unsharded copy is already complete at DEST (an earlier
`ckpt unshard` to the same place, or a worker killed after the step's
commit): the real run records and verifies it and drops the sharded step;
the plan counted neither its files nor the drop."""
import hashlib
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, age_tree, ckpt, gen_runs  # noqa: E402
from s3test import old_ctime, plan  # noqa: E402


def tree(root):
    out = {}
    for d, ds, fs in os.walk(root):
        for n in ds + fs:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = hashlib.sha256(
                        f.read()).hexdigest()
            else:
                out[os.path.relpath(p, root)] = "dir-or-link"
    return out


def main():
    # Trees are aged with utime(): ctimes aged too (s3test.old_ctime).
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-dry-")
    try:
        runs = os.path.join(tmp, "runs")
        gen_runs(runs, archives=True)
        # step1000 of 2871001 becomes a step to unshard (and then drop).
        shutil.rmtree(os.path.join(runs, "2871001", "step1000-unsharded"))
        age_tree(runs)
        dest = os.path.join(tmp, "D")
        args = [runs, "--dest", dest, "--no-wandb", "--drop-sharded",
                "--logs", os.path.join(runs, "logs")]
        before = tree(runs)
        rc, dry, err = ckpt("process", "-n", *args)
        c.eq("dry: exit", rc, 0)
        c.eq("dry: nothing changed", tree(runs), before)
        c.eq("dry: nothing at DEST", os.path.exists(dest), False)
        rc, real, err = ckpt("process", *args)
        c.eq("real: exit", rc, 0)
        c.eq("the plan is the run", plan(dry), plan(real))
        got = [r for r in plan(real) if r[1].endswith("/2871001")]
        c.eq("the unsharded run: 25 files (2 logs), the step dropped", got,
             [("process", os.path.join(runs, "2871001"),
               os.path.join(dest, "2871001"), "25", got[0][4] if got else
               "", "1")])
        c.eq("dropped step not at DEST", os.path.exists(os.path.join(
            dest, "2871001", "step1000")), False)
        c.eq("unsharded step at DEST", sorted(os.listdir(os.path.join(
            dest, "2871001", "step1000-unsharded"))),
            ["config.yaml", "model.pt", "optim.pt", "train.pt"])
        earlier_unshard(c, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


def earlier_unshard(c, tmp):
    runs = os.path.join(tmp, "runs2")
    gen_runs(runs)
    run = os.path.join(runs, "2871001")
    shutil.rmtree(os.path.join(run, "step1000-unsharded"))
    age_tree(runs)
    dest = os.path.join(tmp, "D2")
    rc, out, err = ckpt("unshard", "--no-progress", run,
                        os.path.join(dest, "2871001"))
    c.eq("earlier unshard to DEST: exit", (rc, err), (0, ""))
    args = [run, "--dest", dest, "--no-wandb", "--drop-sharded"]
    rc, dry, err = ckpt("process", "-n", *args)
    c.eq("copy at DEST, dry: exit", rc, 0)
    rc, real, err = ckpt("process", *args)
    c.eq("copy at DEST, real: exit", rc, 0)
    c.eq("copy at DEST: the plan is the run", plan(dry), plan(real))
    c.eq("copy at DEST: the sharded step dropped", os.path.exists(
        os.path.join(dest, "2871001", "step1000")), False)


if __name__ == "__main__":
    sys.exit(main())
