#!/usr/bin/env python3
# ctest-cost: 20
"""A tar holding the same member twice (`tar -r` appends; issue 20, "Also
seen"): the later copy wins everywhere, as after `tar x`, and is counted
once.

The run 2871005 archived with `tar cf`, then config.yaml and
train_data/rank0.npy changed (other sizes) and appended with `tar rf`:
7 names, 9 members. `upload --extract --delete-source` and `process`, to
a local and an s3 DEST: exit 0, 7 files counted, DEST holds the later
copies, the archive is deleted. `upload --extract` (no delete) run twice
to s3 converges (before, every pass failed 'DEST lists a different
size').
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (Checker, age_tree, contents, ckpt,  # noqa: E402
                    dest_tree, file_rows, gen_runs, s3_session)
from process_s3 import rows  # noqa: E402

B = "ckpt-test"
LATER = {"config.yaml": b"run_name: appended\nlater: copy\n",
         "train_data/rank0.npy": b"appended later, other size"}


def make(tmp):
    gen = os.path.join(tmp, "gen")
    gen_runs(gen)
    src = os.path.join(tmp, "src")
    run = os.path.join(src, "2871005")
    shutil.copytree(os.path.join(gen, "2871005"), run)
    arc = os.path.join(tmp, "2871005.tar")
    subprocess.run(["tar", "cf", arc, "-C", src, "2871005"], check=True)
    for n, data in LATER.items():
        with open(os.path.join(run, n), "wb") as f:
            f.write(data)
        subprocess.run(["tar", "rf", arc, "-C", src, "2871005/" + n],
                       check=True)
    members = subprocess.run(["tar", "tf", arc], check=True, text=True,
                             capture_output=True).stdout.split()
    assert len([m for m in members if not m.endswith("/")]) == 9, members
    return contents(run), arc


def fresh(arc, tmp, name):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    p = os.path.join(d, os.path.basename(arc))
    shutil.copy2(arc, p)
    age_tree(d)
    return p


def dest_of(tmp, dname, what):
    return (os.path.join(tmp, "d-%s-%s" % (what, dname)) if dname == "local"
            else "s3://%s/%s" % (B, what))


def summary(out):
    """The total row's counts and bytes (not its times)."""
    return [ln.split("\tbytes_sent=")[0] for ln in out.splitlines()
            if ln.startswith("total\t")]


def upload(c, env, tmp, arc, want):
    for dname in ("local", "s3"):
        what = "upload -> %s" % dname
        a = fresh(arc, tmp, "up-" + dname)
        dest = dest_of(tmp, dname, "up")
        rc, out, err = ckpt("upload", "-n", "--extract", "--delete-source",
                            "--no-progress", a, dest, env=env)
        c.eq("%s -n: exit, summary" % what, (rc, summary(out)),
             (0, ["total\tcopy=7\tskip=0\terror=0\tdelete=1\tkeep=0\t"
                  "abort=0\tbytes=27638"]))
        rc, out, err = ckpt("upload", "--extract", "--delete-source",
                            "--no-progress", a, dest, env=env)
        c.eq("%s: exit, summary" % what, (rc, summary(out)),
             (0, ["total\tcopy=7\tskip=0\terror=0\tdelete=1\tkeep=0\t"
                  "abort=0\tbytes=27638"]))
        c.eq("%s: DEST holds the later copies" % what,
             dest_tree(env, dest), want)
        c.eq("%s: archive deleted" % what, os.path.exists(a), False)
    # Without --delete-source, twice: the rerun converges (skips or
    # sends again, and verifies).
    a = fresh(arc, tmp, "again")
    dest = dest_of(tmp, "s3", "again")
    for i in (1, 2):
        rc, out, err = ckpt("upload", "--extract", "--no-progress", a, dest,
                            env=env)
        c.eq("s3 pass %d: exit 0" % i, (rc, file_rows(out)), (0, []))
        c.eq("s3 pass %d: DEST holds the later copies" % i,
             dest_tree(env, dest), want)


def process(c, env, tmp, arc, want):
    size = str(sum(map(len, want.values())))
    for dname in ("local", "s3"):
        what = "process -> %s" % dname
        a = fresh(arc, tmp, "pr-" + dname)
        dest = dest_of(tmp, dname, "pr")
        for dry in (["-n"], []):
            rc, out, _ = ckpt("process", *dry, "--no-wandb", "--no-progress",
                              a, "--dest", dest, env=env)
            r = rows(out)[0]
            c.eq("%s %s: exit, row" % (what, dry), (rc, r[:2], r[3:5]),
                 (0, ["would-process" if dry else "process", a],
                  ["7", size]))
        c.eq("%s: DEST holds the later copies" % what,
             dest_tree(env, dest + "/2871005"), want)
        c.eq("%s: archive deleted" % what, os.path.exists(a), False)


def main():
    c = Checker()
    with s3_session("ckpt-dups-") as (tmp, env):
        want, arc = make(tmp)
        upload(c, env, tmp, arc, want)
        process(c, env, tmp, arc, want)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
