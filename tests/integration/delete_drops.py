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
shard right before the first DELETE, and the recorded ETag and size tell
(`size differs`)."""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import BUILD, Checker, age, ckpt, gen, tree  # noqa: E402
from s3test import S3Env, remote_contents  # noqa: E402

SHIM = os.path.join(BUILD, "libchange_preload.so")
SHARD = "step1000/model_and_optim/__0_0.distcp"


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        gen(runs)
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
        with S3Env() as s3:
            remote(c, s3, runs, tmp)
    return c.finish()


def remote(c, s3, runs, tmp):
    env = s3.env()
    src = "s3://ckpt-test/src/2871001"
    dest = os.path.join(tmp, "dest-s3")
    run = os.path.join(runs, "2871001")
    os.unlink(os.path.join(run, "latest"))  # object stores have no links
    rc, out, err = ckpt("upload", run, src, env=env)
    assert rc == 0, err
    s3.configure(put_before_delete={
        "path": "/ckpt-test/src/2871001/" + SHARD, "body": "rewritten"})
    note = ("kept 1 dropped file: %s (changed since its step was judged "
            "(size differs))" % SHARD)
    rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                        "--drop-sharded", "--drop-incomplete", src,
                        "--dest", dest, env=env)
    c.eq("s3: processed, the row says what was kept (%s)"
         % err.strip()[-300:], (rc, out[0][:2], out[0][-1]),
         (0, ["process", src], note))
    left = remote_contents(env, "ckpt-test", "src/2871001")
    c.eq("s3: only the rewritten shard stays, with its new bytes", left,
         {SHARD: b"rewritten"})


if __name__ == "__main__":
    sys.exit(main())
