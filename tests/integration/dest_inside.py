#!/usr/bin/python3
# ctest-cost: 30
"""dest_inside.py - DEST inside what is deleted (issue 27, class 8) is
refused up front, nothing read into it or written:

  unshard   `unshard --delete-sharded RUN RUN/step1000/out` (and DEST the
            step itself; -n too; a run in s3 as well): exit 2, `error`
            naming DEST and the step, the run untouched. Before, the
            output was written inside step1000 and deleted with it, exit
            0.
  process   `process RUN --dest RUN/out` (-n too): `failed RUN judge:
            DEST '...' is inside the run`, exit 1, nothing written in the
            run (no lease, no output). Before, the step was unsharded
            into RUN/out/ and only the upload refused.
  upload    `upload --delete-source RUN RUN/out`: exit 2 (as before).
  in place  `unshard --delete-sharded RUN RUN` still works (each step
            replaced by its -unsharded output).
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (Checker, S3Env, age_tree, ckpt, digests,  # noqa: E402
                    gen_runs, old_ctime, remote_contents, scratch)

B = "ckpt-test"


def make_run(gen, root):
    """2871001 with its sharded step1000 alone (no -unsharded copy, no
    aborted step2000, no `latest` link)."""
    r = os.path.join(root, "R")
    shutil.copytree(os.path.join(gen, "2871001"), r, symlinks=True)
    for x in ("step1000-unsharded", "step2000"):
        shutil.rmtree(os.path.join(r, x))
    os.unlink(os.path.join(r, "latest"))
    age_tree(root)
    return r


def refused(c, env, what, argv, want_rc, want_msg, before, now):
    rc, out, err = ckpt(*argv, env=env)
    c.eq("%s: exit (%s)" % (what, out + err), rc, want_rc)
    c.true("%s: says why (%r)" % (what, out + err), want_msg in out + err)
    c.eq("%s: the run untouched" % what, now(), before)


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-inside-") as tmp, S3Env() as s3:
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        gen = os.path.join(tmp, "gen")
        gen_runs(gen)
        r = make_run(gen, os.path.join(tmp, "l"))
        before = digests(r)

        def now():
            return digests(r)
        step = os.path.join(r, "step1000")
        for dry in ([], ["-n"]):
            for dest in (os.path.join(step, "out"), step):
                refused(c, env, "unshard %s%s" % (" ".join(dry), dest),
                        ["unshard"] + dry + ["--delete-sharded", r, dest], 2,
                        "--delete-sharded: DEST '%s' is inside '%s', a "
                        "checkpoint it may delete; nothing done"
                        % (dest, step), before, now)
            refused(c, env, "process %s" % " ".join(dry),
                    ["process"] + dry + ["--no-wandb", "--min-age", "0", r,
                                         "--dest", os.path.join(r, "out")],
                    1, "error\t%s\tjudge: DEST '%s' is inside the run"
                    % (r, os.path.join(r, "out")), before, now)
        refused(c, env, "upload", ["upload", "--delete-source", r,
                                   os.path.join(r, "out")], 2,
                "is inside SRC '%s': deleting SRC would delete the copy" % r,
                before, now)
        # In s3: the same refusal by keys.
        rc, _, _ = ckpt("upload", "-q", r, "s3://%s/R" % B, env=env)
        c.eq("s3: staged", rc, 0)
        sbefore = remote_contents(env, B, "R")

        def snow():
            return remote_contents(env, B, "R")
        refused(c, env, "unshard s3", ["unshard", "--delete-sharded",
                                       "s3://%s/R" % B,
                                       "s3://%s/R/step1000/out" % B], 2,
                "is inside 's3://%s/R/step1000'" % B, sbefore, snow)
        # In place, as always.
        rc, out, err = ckpt("unshard", "--delete-sharded", "--unshard-step0", r,
                            r, env=env)
        c.eq("in place: exit (%s)" % (out + err), rc, 0)
        c.eq("in place: the steps replaced by their outputs",
             sorted(x for x in os.listdir(r) if x.startswith("step")),
             ["step0-unsharded", "step1000-unsharded"])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
