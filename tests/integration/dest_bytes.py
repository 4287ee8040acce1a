#!/usr/bin/python3
# ctest-cost: 60
"""dest_bytes.py - bytes, not records (issue 27, class 3): before a
source is deleted, DEST's copy is proven equal by DEST's own answer about
the bytes it holds (its ETag where that is an MD5, GCS's x-goog-hash MD5
or CRC32C), never by ckpt's own x-amz-meta-ckpt-md5.

  damaged        DEST holds other bytes under x-amz-meta-ckpt-md5 of the
                 source's (what a PUT damaged on the way left): `upload
                 --delete-source` is a conflict naming it, source kept;
                 with --overwrite it sends the file again (before: `skipped`,
                 and the source deleted with only the damaged copy left)
  process        the same object under `ckpt process`: a conflict naming
                 the file, run failed, source kept, `-n` says the same
                 (before: skipped, source deleted)
  always damaged every PUT of a small file damaged on the way: the file
                 fails and the damaged object is taken away (before: left
                 at DEST, metadata and all)
  damaged once   a small file's PUT damaged once is sent again (before:
                 the file failed)
  replaced       every file found equal at DEST, then one replaced there
                 before the listing that confirms the pass: nothing
                 deleted (before: the source deleted, DEST holding another
                 writer's bytes)
  arrived        a file uploaded, acknowledged, then replaced at DEST
                 before the verifying listing (another size; the same
                 size, other bytes): nothing deleted, the row names what
                 DEST lists (a mutation check break had no test)
  output         an unshard output at DEST with an ETag that is no MD5,
                 recorded in the state without its ETag: --drop-sharded
                 drops nothing on it (before: its size alone licensed
                 dropping the sharded step, the copy at DEST damaged)
  opaque         ETags that are no MD5 (SSE-KMS, GCS composites): equal
                 files are proven by x-goog-hash (CRC32C alone, or MD5
                 alone) and skipped, a damaged one is sent again (before:
                 skipped on the metadata)
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import (Checker, S3Env, age_tree, ckpt, gen_runs,  # noqa: E402
                    old_ctime, remote_contents, scratch)

B = "ckpt-test"
# ListObjectsV2 requests of a fresh DEST prefix before the one that
# verifies a pass (the up-front probe, the stat, DEST's listing)
SKIP = int(os.environ.get("DEST_BYTES_SKIP", "3"))


def write_tree(root, files):
    for name, data in files.items():
        p = os.path.join(root, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


def plant(env, key, data, meta_of):
    """An object at s3://B/key holding data, with ckpt's metadata saying
    it holds meta_of (what a PUT damaged on the way leaves)."""
    tmp = os.path.join(os.environ["DEST_BYTES_TMP"], "plant")
    with open(tmp, "wb") as f:
        f.write(data)
    subprocess.run(["aws", "s3api", "put-object", "--bucket", B, "--key",
                    key, "--body", tmp, "--metadata",
                    "ckpt-md5=" + hashlib.md5(meta_of).hexdigest()],
                   env=env, check=True, capture_output=True)


def damage(data):
    b = bytearray(data)
    b[len(b) // 2] ^= 1
    return bytes(b)


def rows(out, action):
    return sorted(x.split("\t")[1] for x in out.splitlines()
                  if x.startswith(action + "\t"))


def files_of(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def damaged_upload(c, env, tmp, name, opaque=""):
    """upload --delete-source over a DEST whose a.txt is damaged under
    ckpt's metadata of the right bytes."""
    files = {"a.txt": os.urandom(3000), "d/b.txt": os.urandom(5000),
             "c.bin": os.urandom(300000)}
    src = os.path.join(tmp, name)
    write_tree(src, files)
    rc, _, err = ckpt("upload", "-q", src, "s3://%s/%s" % (B, name),
                      env=env)
    c.eq("%s: staged (%s)" % (name, err), rc, 0)
    plant(env, "%s/a.txt" % name, damage(files["a.txt"]), files["a.txt"])
    # DEST's copy is never replaced unasked: a conflict, source kept
    rc, out, err = ckpt("upload", "-v", "--delete-source", src,
                        "s3://%s/%s" % (B, name), env=env)
    c.eq("%s: without --overwrite: exit 1 (%s)" % (name, err), rc, 1)
    c.true("%s: without --overwrite: a conflict naming a.txt (%r)"
           % (name, out), "conflict: s3://%s/%s/a.txt already exists at "
           "DEST with different bytes" % (B, name) in out)
    c.eq("%s: without --overwrite: source kept" % name,
         os.path.exists(os.path.join(src, "a.txt")), True)
    rc, out, err = ckpt("upload", "-v", "--delete-source", "--overwrite",
                        src, "s3://%s/%s" % (B, name), env=env)
    c.eq("%s: exit (%s)" % (name, err), rc, 0)
    c.eq("%s: the damaged file sent again" % name, rows(out, "copy"),
         [os.path.join(src, "a.txt")])
    c.eq("%s: the equal ones proven and skipped%s" % (name, opaque),
         rows(out, "skip"), [os.path.join(src, "c.bin"),
                                os.path.join(src, "d/b.txt")])
    c.eq("%s: DEST holds the source's bytes" % name,
         remote_contents(env, B, name), files)
    c.eq("%s: source deleted" % name, os.path.exists(src), False)


def process_conflict(c, env, tmp):
    runs = os.path.join(tmp, "runs")
    gen_runs(runs)
    run = os.path.join(runs, "2871005")
    with open(os.path.join(run, "config.yaml"), "rb") as f:
        cfg = f.read()
    before = files_of(run)
    plant(env, "proc/2871005/config.yaml", damage(cfg), cfg)
    argv = ["process", "--no-wandb", "--min-age", "0", run, "--dest",
            "s3://%s/proc" % B]
    for dry in (["-n"], []):
        rc, out, err = ckpt(*(argv[:1] + dry + argv[1:]), env=env)
        what = "process%s" % (" -n" if dry else "")
        c.eq("%s: exit 1 (%s)" % (what, out + err), rc, 1)
        c.true("%s: a conflict naming config.yaml (%r)" % (what, out),
               "conflict: s3://%s/proc/2871005/config.yaml already exists "
               "at DEST with different bytes" % B in out)
        c.eq("%s: source kept" % what, files_of(run), before)
    c.eq("process: DEST's object untouched",
         remote_contents(env, B, "proc/2871005", ["config.yaml"]),
         {"config.yaml": damage(cfg)})


def damaged_on_the_way(c, s3, env, tmp):
    files = {"f%d" % i: os.urandom(20000 + i) for i in range(4)}
    src = os.path.join(tmp, "way")
    write_tree(src, files)
    s3.configure(corrupt_put=100, corrupt_match="/always/f2")
    rc, out, err = ckpt("upload", "--retries", "3", src,
                        "s3://%s/always" % B, env=env)
    c.eq("always damaged: exit", rc, 1)
    c.true("always damaged: f2 failed on its ETag (%r)" % out,
           "DEST reports ETag" in out and
           rows(out, "error") == [os.path.join(src, "f2")])
    c.eq("always damaged: the damaged object taken away",
         sorted(remote_contents(env, B, "always")), ["f0", "f1", "f3"])
    s3.configure(corrupt_put=1, corrupt_match="/once/f1")
    s3.reset_stats()
    rc, out, err = ckpt("upload", src, "s3://%s/once" % B, env=env)
    st = s3.stats()
    s3.configure(corrupt_put=0, corrupt_match="")
    c.eq("damaged once: exit (%s)" % out, rc, 0)
    c.eq("damaged once: the fault hit", st["faults"]["corrupt_put"], 1)
    c.eq("damaged once: f1 sent twice", st["methods"].get("PUT"), 5)
    c.eq("damaged once: DEST identical", remote_contents(env, B, "once"),
         files)


def replaced_after_check(c, s3, env, tmp):
    """Every file found equal at DEST, then one replaced there before the
    listing that confirms the pass: nothing is deleted."""
    files = {"a.txt": os.urandom(3000), "b.txt": os.urandom(4000)}
    src = os.path.join(tmp, "after")
    write_tree(src, files)
    rc, _, err = ckpt("upload", "-q", src, "s3://%s/after" % B, env=env)
    c.eq("replaced: staged (%s)" % err, rc, 0)
    s3.configure(put_before_list={"path": "/%s/after/a.txt" % B,
                                  "body": "another writer", "match": "after",
                                  "skip": 4})
    rc, out, err = ckpt("upload", "--delete-source", "--overwrite", src,
                        "s3://%s/after" % B, env=env)
    s3.configure(put_before_list=None)
    c.eq("replaced: exit 1 (%s)" % out, rc, 1)
    c.true("replaced: says so (%r)" % out,
           "changed at DEST after it was found equal" in out)
    c.eq("replaced: source kept", files_of(src), ["a.txt", "b.txt"])


def replaced_after_upload(c, s3, env, tmp, name, body, why):
    """A file uploaded and acknowledged, then replaced at DEST by another
    writer before the listing that verifies the pass (another size, or
    the same size and other bytes: only the ETag tells): nothing is
    deleted, the row says what DEST lists."""
    files = {"a.txt": os.urandom(3000), "b.txt": os.urandom(4000)}
    src = os.path.join(tmp, name)
    write_tree(src, files)
    s3.configure(put_before_list={"path": "/%s/%s/a.txt" % (B, name),
                                  "body": body, "match": name, "skip": SKIP})
    rc, out, err = ckpt("upload", "--delete-source", src,
                        "s3://%s/%s" % (B, name), env=env)
    st = s3.stats()
    s3.configure(put_before_list=None)
    c.eq("%s: exit 1 (%s)" % (name, out), rc, 1)
    c.true("%s: says so (%r)" % (name, out), why in out)
    c.eq("%s: source kept" % name, files_of(src), ["a.txt", "b.txt"])
    return st


def output_unprovable(c, s3, env, tmp, gen):
    """An unshard output at DEST whose ETag is no MD5 and which the state
    records without the ETag it was given: its size alone proves nothing,
    so --drop-sharded drops nothing on it."""
    run = os.path.join(tmp, "outs", "2871001")
    shutil.copytree(os.path.join(gen, "2871001"), run, symlinks=True)
    for x in ("step1000-unsharded", "step2000"):
        shutil.rmtree(os.path.join(run, x))
    os.unlink(os.path.join(run, "latest"))
    age_tree(os.path.join(tmp, "outs"))
    # GCS-like: ETags no MD5, the files proven by x-goog-hash.
    s3.configure(opaque_etag=True, goog_hash="md5")
    dest = "s3://%s/outs" % B
    args = ["--no-wandb", "--min-age", "0", run, "--dest", dest]
    rc, out, err = ckpt("process", "--keep-source", *args, env=env)
    c.eq("output: first pass (%s)" % (out + err[-300:]), rc, 0)
    key = ".ckpt-process/2871001.json"
    st = json.loads(remote_contents(env, B, "outs", [key])[key])
    for o in st["unsharded"]:
        o.pop("etag", None)
    put(env, "outs/" + key, json.dumps(st).encode())
    model = "outs/2871001/step1000-unsharded/model.pt"
    good = remote_contents(env, B, "outs/2871001/step1000-unsharded",
                           ["model.pt"])["model.pt"]
    put(env, model, damage(good))
    before = files_of(run)
    rc, out, err = ckpt("process", "--drop-sharded", *args, env=env)
    s3.configure(opaque_etag=False, goog_hash="")
    c.eq("output: exit 1 (%s)" % out, rc, 1)
    c.true("output: says why (%r)" % out, "cannot be compared with the "
           "output written (no ETag recorded)" in out)
    c.eq("output: nothing dropped or deleted", files_of(run), before)


def put(env, key, data):
    tmp = os.path.join(os.environ["DEST_BYTES_TMP"], "put")
    with open(tmp, "wb") as f:
        f.write(data)
    subprocess.run(["aws", "s3", "cp", "--quiet", tmp, "s3://%s/%s" % (B, key)],
                   env=env, check=True, capture_output=True)


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-destbytes-") as tmp, S3Env() as s3:
        os.environ["DEST_BYTES_TMP"] = tmp
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        damaged_upload(c, env, tmp, "damaged")
        process_conflict(c, env, tmp)
        output_unprovable(c, s3, env, tmp, os.path.join(tmp, "runs"))
        damaged_on_the_way(c, s3, env, tmp)
        replaced_after_check(c, s3, env, tmp)
        replaced_after_upload(c, s3, env, tmp, "arrived-size",
                              "another writer",
                              "DEST lists a different size than was "
                              "uploaded")
        replaced_after_upload(c, s3, env, tmp, "arrived-etag", "x" * 3000,
                              "DEST lists a different ETag than the "
                              "upload's")
        for mode in ("crc32c", "md5"):
            s3.configure(opaque_etag=True, goog_hash=mode)
            damaged_upload(c, env, tmp, "opaque-" + mode,
                           " (opaque ETags, x-goog-hash %s)" % mode)
        s3.configure(opaque_etag=False, goog_hash="")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
