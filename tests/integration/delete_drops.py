#!/usr/bin/python3
# ctest-cost: 5
"""delete_drops.py - a dropped step is re-checked before each unlink
(issue 20 class 7). `process --drop-sharded --drop-incomplete` of the
good sample run leaves out step1000 (it has a complete -unsharded copy)
and step2000 (incomplete), and deletes them with the source. A shard of
step1000 that grows, or is rewritten in place with its mtime put back,
after the run was judged is kept with its new bytes: the row and the
state say which file and why, everything else goes. The moment is exact:
an LD_PRELOAD shim (tests/support/change_preload.c) changes the shard as
the first source file is unlinked, after judging and before the dropped
steps, which go last. The same with the run in object storage (s3rver
behind tests/support/s3proxy.py): the proxy stores a new version of the
shard right before the first DELETE, and the recorded size tells
(`size differs`); a rewrite with other bytes of the same size, only the
recorded ETag (`ETag differs`). Two more moments, local: a shard
rewritten while its step is judged (after the listing the drops use,
before their record: `changed while its step was judged`), and a shard
written into a dropped step after a kill in its delete, before the
rerun (never judged: `written after its step was judged`)."""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import BUILD, Checker, age, ckpt, gen, tree  # noqa: E402
from s3test import S3Env, lapse, remote_contents  # noqa: E402
from gen_runs import whole_unsharded  # noqa: E402

SHIM = os.path.join(BUILD, "libchange_preload.so")
KILL = os.path.join(BUILD, "libkill_preload.so")
SHARD = "step1000/model_and_optim/__0_0.distcp"


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        gen(runs)
        whole_unsharded(os.path.join(runs, "2871001"))
        for mode, what in (("grow", "size"), ("rewrite", "ctime")):
            run = os.path.join(tmp, "2871001")
            dest = os.path.join(tmp, "dest-" + mode)
            shutil.copytree(os.path.join(runs, "2871001"), run,
                            symlinks=True)
            age(run)
            shard = os.path.join(run, SHARD)
            with open(shard, "rb") as f:
                old = f.read()
            env = dict(os.environ, LD_PRELOAD=SHIM, CKPT_TEST_CHANGE=shard,
                       CKPT_TEST_CHANGE_MODE=mode,
                       CKPT_TEST_CHANGE_UNDER=run,
                       ASAN_OPTIONS=(os.environ.get("ASAN_OPTIONS", "") +
                                     ":verify_asan_link_order=0").lstrip(
                                         ":"))
            note = ("kept 1 dropped file: %s (changed since its step was "
                    "judged (%s differs))" % (SHARD, what))
            rc, out, err = ckpt("process", "--no-wandb", "--drop-sharded",
                                "--drop-incomplete", run, "--dest", dest,
                                env=env)
            c.eq("%s: processed, the row says what was kept (%s)"
                 % (mode, err.strip()[-300:]), (rc, out[0][:2], out[0][-1]),
                 (0, ["process", run], note))
            left = tree(run)
            c.eq("%s: only the changed shard (and the latest link naming "
                 "its step) stay" % mode, sorted(left),
                 ["latest", SHARD])
            new = left.get(SHARD, b"")
            c.true("%s: the shard's new bytes are there" % mode,
                   new != old and len(new) == len(old) +
                   (4096 if mode == "grow" else 0))
            c.true("%s: the dropped steps are not at DEST" % mode,
                   not any(p.startswith(("step1000/", "step2000/"))
                           for p in tree(os.path.join(dest, "2871001"))))
            with open(os.path.join(dest, ".ckpt-process",
                                   "2871001.json")) as f:
                st = json.load(f)
            c.eq("%s: the state says it too" % mode,
                 (st["phase"], st.get("why")), ("done", note))
            shutil.rmtree(run, ignore_errors=True)
        while_judged(c, runs, tmp)
        after_kill(c, runs, tmp)
        with S3Env() as s3:
            remote(c, s3, runs, tmp)
    return c.finish()


def processed(c, what, rc, out, err, run, note):
    c.eq("%s: processed, the row says what was kept (%s)"
         % (what, err.strip()[-300:]),
         (rc, out[0][:2] if out else out, out[0][-1] if out else None),
         (0, ["process", run], note))


def while_judged(c, runs, tmp):
    """A shard rewritten while its step is judged for the drops, after
    that pass listed it (the age shim writes it the 4th time process
    opens step1000's .metadata: the drop pass reads it last, after the
    run's judging and unshard's): recorded as changed then, kept at the
    delete. (Rewritten at an earlier open, the pass sees the new shard,
    step1000 is incomplete, and it goes as a dropped incomplete step.)"""
    run = os.path.join(tmp, "judged", "2871001")
    shutil.copytree(os.path.join(runs, "2871001"), run, symlinks=True)
    age(run)
    shard = os.path.join(run, SHARD)
    env = dict(os.environ, CKPT_TEST_WRITE=shard, CKPT_TEST_WRITE_ON_NTH="4",
               CKPT_TEST_WRITE_ON=os.path.join(
                   run, "step1000", "model_and_optim", ".metadata"))
    rc, out, err = ckpt("process", "--no-wandb", "--drop-sharded",
                        "--drop-incomplete", "--min-age", "0", run,
                        "--dest", os.path.join(tmp, "dest-judged"), env=env)
    processed(c, "while judged", rc, out, err, run,
              "kept 1 dropped file: %s (changed while its step was "
              "judged)" % SHARD)
    c.eq("while judged: only the rewritten shard (and latest) stay",
         tree(run), {"latest": tree(os.path.join(runs, "2871001"))["latest"],
                     SHARD: b"written during process\n"})


def after_kill(c, runs, tmp):
    """Killed at the first unlink of step1000 (the state `uploaded`
    records what was judged droppable); a new shard is written into
    step1000; the rerun deletes the rest of what was judged, and keeps
    the new shard: it was never judged."""
    run = os.path.join(tmp, "killed", "2871001")
    dest = os.path.join(tmp, "dest-killed")
    shutil.copytree(os.path.join(runs, "2871001"), run, symlinks=True)
    age(run)
    args = ["process", "--no-wandb", "--drop-sharded", "--drop-incomplete",
            "--min-age", "0", run, "--dest", dest]
    env = dict(os.environ, LD_PRELOAD=KILL,
               CKPT_TEST_KILL_AT=os.path.join(run, "step1000"))
    rc, out, err = ckpt(*args, env=env)
    c.eq("killed in step1000's delete (%s)" % err.strip()[-200:], rc, -9)
    new = os.path.join("step1000", "model_and_optim", "__9_0.distcp")
    os.makedirs(os.path.dirname(os.path.join(run, new)), exist_ok=True)
    with open(os.path.join(run, new), "wb") as f:
        f.write(b"a shard written after the kill\n")
    lapse(dest)
    rc, out, err = ckpt(*args)
    processed(c, "after a kill", rc, out, err, run,
              "kept 1 dropped file: %s (written after its step was "
              "judged)" % new)
    c.eq("after a kill: only the new shard (and latest) stay", tree(run),
         {"latest": tree(os.path.join(runs, "2871001"))["latest"],
          new: b"a shard written after the kill\n"})


def remote(c, s3, runs, tmp):
    env = s3.env()
    run = os.path.join(runs, "2871001")
    os.unlink(os.path.join(run, "latest"))  # object stores have no links
    size = os.path.getsize(os.path.join(run, SHARD))
    # The rewrite between judging and the DELETE: other bytes of another
    # size, then other bytes of the same size (only the ETag tells).
    for what, body in (("size", "rewritten"), ("ETag", "y" * size)):
        src = "s3://ckpt-test/src-%s/2871001" % what
        dest = os.path.join(tmp, "dest-s3-" + what)
        rc, out, err = ckpt("upload", run, src, env=env)
        assert rc == 0, err
        s3.configure(put_before_delete={
            "path": "/ckpt-test/src-%s/2871001/%s" % (what, SHARD),
            "body": body})
        note = ("kept 1 dropped file: %s (changed since its step was "
                "judged (%s differs))" % (SHARD, what))
        rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                            "--drop-sharded", "--drop-incomplete", src,
                            "--dest", dest, env=env)
        c.eq("s3 %s: processed, the row says what was kept (%s)"
             % (what, err.strip()[-300:]), (rc, out[0][:2] if out else out,
                                            out[0][-1] if out else None),
             (0, ["process", src], note))
        left = remote_contents(env, "ckpt-test", "src-%s/2871001" % what)
        c.eq("s3 %s: only the rewritten shard stays, with its new bytes"
             % what, left, {SHARD: body.encode()})


if __name__ == "__main__":
    sys.exit(main())
