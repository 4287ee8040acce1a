#!/usr/bin/python3
# ctest-cost: 60
"""dest_immutable.py - DEST's only copy is immutable (issue 27, class 4):
once a source may have been deleted, a rerun never replaces DEST's bytes
with different ones, whatever the state says; `process -n` predicts the
same rows.

  reappears   a run at `done` (source deleted) reappears under the same
              name with another config.yaml, older than --min-age (a
              requeued job, a moved-in run): a conflict naming the file,
              run failed, both sides kept (local and s3 DEST). Before,
              DEST's config.yaml, the only copy of the first run's, was
              overwritten and the new source deleted.
  re-tarred   a worker killed between state `uploaded` and the archive's
              unlink, the archive then re-tarred under the same name with
              another config.yaml and another 20 MiB member: the rerun
              fails with a conflict, DEST's files and the new archive
              stay. Before, DEST's files were replaced and the new archive
              deleted. Re-tarred with the same bytes, the rerun proves
              every member equal (the 20 MiB one compared as it is read,
              never sent) and finishes: done, archive deleted.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (BUILD, Checker, S3Env, age_tree, ckpt,  # noqa: E402
                    dest_tree, digests, gen_runs, lapse, old_ctime,
                    scratch)

B = "ckpt-test"
KILL = os.path.join(BUILD, "libkill_preload.so")


def rows(out):
    res = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] in ("process", "would-process"):
            res.append(["process"] + f[1:6])
        elif f[0] != "total":
            res.append(f)
    return res


def both(c, what, env, args, want_rc):
    """process -n ARGS, then process ARGS: same rows, same exit."""
    rc_n, out_n, _ = ckpt("process", "-n", *args, env=env)
    rc, out, err = ckpt("process", *args, env=env)
    c.eq("%s: exit (%s)" % (what, out + err[-400:]), rc, want_rc)
    c.eq("%s: -n exit" % what, rc_n, want_rc)
    c.eq("%s: -n predicts the rows" % what, rows(out_n), rows(out))
    return rows(out)


def make_run(gen, root, name, cfg_extra=b"", big=None):
    src = os.path.join(root, name)
    shutil.copytree(os.path.join(gen, "2871005"), src)
    with open(os.path.join(src, "config.yaml"), "ab") as f:
        f.write(cfg_extra)
    if big is not None:
        with open(os.path.join(src, "train_data", "big.npy"), "wb") as f:
            f.write(big)
    age_tree(root)
    return src


def tar_run(src, arch):
    with tarfile.open(arch, "w:gz") as t:
        t.add(src, arcname=os.path.basename(src))
    shutil.rmtree(src)
    os.utime(arch, (1e9, 1e9))


def reappears(c, env, gen, tmp, dest, tag):
    root = os.path.join(tmp, "re-" + tag)
    args = ["--no-wandb", "--min-age", "0"]
    run = make_run(gen, root, "3001")
    rc, out, err = ckpt("process", *args, run, "--dest", dest, env=env)
    c.eq("%s: first pass done (%s)" % (tag, out + err), rc, 0)
    c.eq("%s: first source deleted" % tag, os.path.exists(run), False)
    first = dest_tree(env, dest + "/3001")
    run = make_run(gen, root, "3001", b"# requeued with other settings\n")
    before = digests(run)
    got = both(c, tag, env, args + [run, "--dest", dest], 1)
    cfg = os.path.join(run, "config.yaml")
    c.eq("%s: a conflict naming config.yaml" % tag, [r[:2] for r in got],
         [["error", run]])
    c.true("%s: says which file (%r)" % (tag, got),
           got and "verify: %s: conflict: %s/3001/config.yaml already "
           "exists at DEST" % (cfg, dest) in got[0][2])
    c.eq("%s: the new source kept" % tag, digests(run), before)
    c.eq("%s: DEST unchanged" % tag, dest_tree(env, dest + "/3001"), first)


def retarred(c, env, gen, tmp):
    root = os.path.join(tmp, "tar")
    dest = os.path.join(tmp, "tdest")
    big = os.urandom(20 << 20)
    args = ["--no-wandb", "--min-age", "0"]
    arch = os.path.join(root, "3002.tar.gz")
    tar_run(make_run(gen, root, "3002", big=big), arch)
    kenv = dict(env)
    kenv["LD_PRELOAD"] = (kenv.get("LD_PRELOAD", "") + " " + KILL).strip()
    kenv["CKPT_TEST_KILL_TO"] = os.path.join(dest, ".ckpt-process",
                                             "3002.json")
    rc, _, _ = ckpt("process", *args, arch, "--dest", dest, env=kenv)
    c.eq("re-tarred: killed at state uploaded", rc, -9)
    with open(os.path.join(dest, ".ckpt-process", "3002.json")) as f:
        c.eq("re-tarred: state", json.load(f)["phase"], "uploaded")
    c.true("re-tarred: archive still there", os.path.exists(arch))
    first = dest_tree(env, dest + "/3002")
    c.eq("re-tarred: the big member at DEST", first.get(
        "train_data/big.npy") == big, True)
    # Re-tarred under the same name: other config.yaml, one byte of the
    # big member changed.
    os.unlink(arch)
    big2 = bytearray(big)
    big2[len(big2) // 3] ^= 1
    tar_run(make_run(gen, root, "3002", b"# another run\n", bytes(big2)),
            arch)
    with open(arch, "rb") as f:
        new = f.read()
    lapse(dest)
    got = both(c, "re-tarred", env, args + [arch, "--dest", dest], 1)
    c.eq("re-tarred: failed", [r[:2] for r in got], [["error", arch]])
    c.true("re-tarred: a conflict (%r)" % got,
           got and "conflict:" in got[0][2] and "3002/" in got[0][2])
    c.true("re-tarred: the new archive kept", os.path.exists(arch))
    with open(arch, "rb") as f:
        c.eq("re-tarred: ...unchanged", f.read() == new, True)
    c.eq("re-tarred: DEST unchanged", dest_tree(env, dest + "/3002") ==
         first, True)
    # Re-tarred with the first run's bytes: every member proven equal,
    # the big one compared as it is read, nothing sent; done.
    os.unlink(arch)
    tar_run(make_run(gen, root, "3002", big=big), arch)
    got = both(c, "re-tarred same", env, args + [arch, "--dest", dest], 0)
    c.eq("re-tarred same: processed", [r[:2] for r in got],
         [["process", arch]])
    c.eq("re-tarred same: archive deleted", os.path.exists(arch), False)
    c.eq("re-tarred same: DEST unchanged", dest_tree(env, dest + "/3002") ==
         first, True)


def s3_compare(c, env, gen, tmp):
    """A 20 MiB member already at an s3 DEST (a multipart object) is
    compared while it is read: one byte changed is a conflict, equal
    bytes finish the run."""
    root = os.path.join(tmp, "s3tar")
    dest = "s3://%s/cmp" % B
    big = os.urandom(20 << 20)
    args = ["--no-wandb", "--min-age", "0"]
    arch = os.path.join(root, "3003.tar.gz")
    tar_run(make_run(gen, root, "3003", big=big), arch)
    rc, out, err = ckpt("process", *args, arch, "--dest", dest, env=env)
    c.eq("s3 compare: first pass (%s)" % (out + err), rc, 0)
    first = dest_tree(env, dest + "/3003")
    big2 = bytearray(big)
    big2[5] ^= 1
    tar_run(make_run(gen, root, "3003", big=bytes(big2)), arch)
    got = both(c, "s3 compare, changed", env, args + [arch, "--dest", dest],
               1)
    c.true("s3 compare, changed: conflict naming big.npy (%r)" % got,
           got and "big.npy: conflict:" in got[0][2])
    c.true("s3 compare, changed: archive kept", os.path.exists(arch))
    os.unlink(arch)
    tar_run(make_run(gen, root, "3003", big=big), arch)
    got = both(c, "s3 compare, same", env, args + [arch, "--dest", dest], 0)
    c.eq("s3 compare, same: archive deleted", os.path.exists(arch), False)
    c.eq("s3 compare: DEST unchanged", dest_tree(env, dest + "/3003") ==
         first, True)


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-immutable-") as tmp, S3Env() as s3:
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        gen = os.path.join(tmp, "gen")
        gen_runs(gen)
        reappears(c, env, gen, tmp, os.path.join(tmp, "ldest"), "local")
        reappears(c, env, gen, tmp, "s3://%s/sdest" % B, "s3")
        retarred(c, env, gen, tmp)
        s3_compare(c, env, gen, tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
