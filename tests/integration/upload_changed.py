#!/usr/bin/python3
# ctest-cost: 30
"""upload_changed.py - a source file that changes while (or after) it is
copied, its modification time put back each time (as `touch -r` does),
against s3rver behind the fault-injecting proxy:

* rewritten in place during a multipart upload (the upload is held on
  503s by the proxy while the file is rewritten; locally, rewritten when
  the copy's temporary file appears): a `failed ... changed during
  upload` row, exit 1, no object at DEST (nor temporary file), nothing in
  the journal; a rerun once the file is stable copies the final bytes;
* rewritten in place after an upload: the journal's record of that upload
  does not skip it (the ctime changed): a conflict (DEST's copy is never
  replaced unasked), then with --overwrite the new bytes are copied;
* replaced by a new file (another inode) with the same bytes: compared by
  content, skipped as such, not on the journal's word;
* an --extract archive rewritten in place between runs: its members are
  compared again, not skipped on the journal's word (conflicts; copied
  with --overwrite).
"""
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import BUILD, Checker, S3Env, file_rows  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ckpt-test"
MIB = 1 << 20


def ckpt(env, *args):
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       timeout=600)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def rewrite(path, data):
    """New bytes in place (same inode, same size), mtime put back."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == \
        (st.st_size, st.st_mtime_ns, st.st_ino)


def replace(path, data):
    """The same path, a new inode, the same mtime."""
    st = os.stat(path)
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)


def fetch(env, url, tmp):
    out = os.path.join(tmp, "fetched")
    if os.path.exists(out):
        os.unlink(out)
    rc, _, err = ckpt(env, "upload", "-q", url, out)
    if rc != 0:
        return None
    with open(out, "rb") as f:
        return f.read()


def during(c, s3, env, tmp):
    """Rewritten while its multipart upload is held by the proxy."""
    rng = random.Random(7)
    src = os.path.join(tmp, "big.bin")
    old, new = rng.randbytes(24 * MIB), rng.randbytes(24 * MIB)
    with open(src, "wb") as f:
        f.write(old)
    url = "s3://%s/chg/big.bin" % B
    s3.reset_stats()
    s3.configure(slowdown=1.0, methods="PUT")
    p = subprocess.Popen([CKPT, "upload", "-v", "--transfers", "1",
                          "--retries", "60", src, url], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while s3.stats()["faults"]["slowdown"] < 1 and time.time() < deadline:
        time.sleep(0.02)
    c.true("the first part is being sent", s3.stats()["faults"]["slowdown"]
           >= 1)
    rewrite(src, new)
    s3.configure(slowdown=0.0, methods="")
    out, err = p.communicate(timeout=300)
    out, err = out.decode(), err.decode()
    c.eq("changed mid-upload: exit (%s)" % err.strip(), p.returncode, 1)
    c.eq("changed mid-upload: row", file_rows(out),
         ["error\t%s\t%s\t%s: changed during upload (ctime differs)" %
          (src, url, src)])
    c.true("changed mid-upload: no object at DEST",
           fetch(env, url, tmp) is None)
    # Stable now: the rerun copies the final bytes (nothing was recorded).
    rc, out, err = ckpt(env, "upload", "-v", src, url)
    c.eq("rerun: exit (%s)" % err.strip(), rc, 0)
    c.eq("rerun: row", file_rows(out), ["copy\t%s\t%s" % (src, url)])
    c.true("rerun: DEST holds the final bytes", fetch(env, url, tmp) == new)
    rc, out, _ = ckpt(env, "upload", "-v", src, url)
    c.eq("unchanged: the journal skips it", file_rows(out),
         ["skip\t%s\t%s\tcopied by an earlier run (journal), DEST "
          "unchanged" % (src, url)])


def during_local(c, env, tmp):
    """The same with a local DEST: rewritten as soon as the temporary
    file of the copy appears (copying 256 MiB one part at a time takes
    far longer than noticing it)."""
    src = os.path.join(tmp, "loc.bin")
    dst = os.path.join(tmp, "locdst")
    os.makedirs(dst)
    with open(src, "wb") as f:
        f.write(os.urandom(256 * MIB))
    p = subprocess.Popen([CKPT, "upload", "-v", "--transfers", "1", src,
                          dst + "/"],
                         env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not os.listdir(dst) and time.time() < deadline:
        time.sleep(0.001)
    c.true("local: the copy started", bool(os.listdir(dst)))
    rewrite(src, b"rewritten" * 1000)
    out, err = p.communicate(timeout=300)
    out, err = out.decode(), err.decode()
    final = os.path.join(dst, "loc.bin")
    c.eq("local: changed mid-copy: exit (%s)" % err.strip(), p.returncode, 1)
    # rewrite() puts the mtime back right after writing: a check that
    # falls between the two sees the mtime differ, a later one the ctime
    # (a slow build, ASan, is more often in between). Either is the change
    # found.
    c.true("local: changed mid-copy: row (%s)" % out.strip(),
           file_rows(out) in (
               ["error\t%s\t%s\t%s: changed during upload (%s differs)" %
                (src, final, src, what)]
               for what in ("ctime", "modification time")))
    c.eq("local: nothing at DEST, no temporary file", os.listdir(dst), [])
    rc, out, err = ckpt(env, "upload", "-v", src, dst + "/")
    c.eq("local: rerun", (rc, file_rows(out)),
         (0, ["copy\t%s\t%s" % (src, final)]))
    with open(src, "rb") as a, open(final, "rb") as b:
        c.true("local: DEST holds the final bytes", a.read() == b.read())
    shutil.rmtree(dst)
    os.unlink(src)


def after(c, env, tmp):
    """Changed between two runs: the journal's record is not trusted."""
    src = os.path.join(tmp, "s.txt")
    url = "s3://%s/j/s.txt" % B
    with open(src, "wb") as f:
        f.write(b"version one\n" * 100)
    rc, out, _ = ckpt(env, "upload", "-v", src, url)
    c.eq("first copy", (rc, file_rows(out)),
         (0, ["copy\t%s\t%s" % (src, url)]))
    rewrite(src, b"version two\n" * 100)
    rc, out, err = ckpt(env, "upload", "-v", src, url)
    c.eq("rewritten in place, mtime put back: found to differ, a conflict "
         "without --overwrite (%s)" % err.strip(), (rc, file_rows(out)),
         (1, ["error\t%s\t%s\tconflict: %s already exists at DEST with "
              "different bytes; not replaced (DEST keeps its copy: it may "
              "be the only one)" % (src, url, url)]))
    rc, out, err = ckpt(env, "upload", "-v", "--overwrite", src, url)
    c.eq("rewritten in place, mtime put back: copied again (%s)" %
         err.strip(), (rc, file_rows(out)),
         (0, ["copy\t%s\t%s" % (src, url)]))
    c.true("DEST holds version two",
           fetch(env, url, tmp) == b"version two\n" * 100)
    replace(src, b"version two\n" * 100)
    rc, out, _ = ckpt(env, "upload", "-v", src, url)
    c.eq("new inode, same bytes: compared, not trusted to the journal",
         (rc, file_rows(out)),
         (0, ["skip\t%s\t%s\tsame size and checksum" % (src, url)]))
    rc, out, _ = ckpt(env, "upload", "-v", src, url)
    c.eq("then the journal skips it again", file_rows(out),
         ["skip\t%s\t%s\tcopied by an earlier run (journal), DEST "
          "unchanged" % (src, url)])


def make_tar(path, big, small):
    """The same names, sizes and times: only the bytes differ."""
    with tarfile.open(path, "w") as t:
        for name, data in (("run1/big.bin", big), ("run1/small.txt", small)):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))


def archive(c, env, tmp):
    """--extract: an archive rewritten in place between two runs (mtime
    put back) is not vouched for by the journal of its large members."""
    rng = random.Random(11)
    tar = os.path.join(tmp, "run1.tar")
    big1, big2 = rng.randbytes(12 * MIB), rng.randbytes(12 * MIB)
    make_tar(tar, big1, b"one\n")
    url = "s3://%s/x" % B
    rc, out, err = ckpt(env, "upload", "-v", "--extract", tar, url)
    rows = sorted((r.split("\t")[0], r.split("\t")[2])
                  for r in file_rows(out))
    c.eq("archive: first copy (%s)" % err.strip(), (rc, rows),
         (0, [("copy", url + "/big.bin"),
              ("copy", url + "/small.txt")]))
    other = os.path.join(tmp, "other.tar")
    make_tar(other, big2, b"two\n")
    with open(other, "rb") as f:
        rewrite(tar, f.read())
    rc, out, err = ckpt(env, "upload", "-v", "--extract", tar, url)
    rows = sorted((r.split("\t")[0], r.split("\t")[2])
                  for r in file_rows(out))
    c.eq("archive rewritten: every member found to differ, conflicts "
         "without --overwrite (%s)" % err.strip(),
         (rc, rows), (1, [("error", url + "/big.bin"),
                          ("error", url + "/small.txt")]))
    rc, out, err = ckpt(env, "upload", "-v", "--extract", "--overwrite", tar,
                        url)
    rows = sorted((r.split("\t")[0], r.split("\t")[2])
                  for r in file_rows(out))
    c.eq("archive rewritten: every member copied again (%s)" % err.strip(),
         (rc, rows), (0, [("copy", url + "/big.bin"),
                          ("copy", url + "/small.txt")]))
    c.true("archive rewritten: DEST holds the new large member",
           fetch(env, url + "/big.bin", tmp) == big2)


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-changed-")
    try:
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            during(c, s3, env, tmp)
            during_local(c, env, tmp)
            after(c, env, tmp)
            archive(c, env, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
