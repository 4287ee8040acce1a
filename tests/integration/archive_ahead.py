#!/usr/bin/env python3
# ctest-cost: 9
"""The decoder runs ahead of the tar reader in a thread of its own
(src/archive/zahead.c, issue 22) and nothing a user sees changes. A run
(gen_runs' 2871005 plus 8 MiB of compressible noise) tarred and
compressed as four zstd frames:
  * whole: `ckpt ls` gives the rows it gives for what `tar x` extracts;
  * the third frame's checksum broken (the error comes mid-stream, with
    the decoder ahead of the reader): `ckpt ls` and `clean -n` fail with
    exactly the rows, message and exit code they gave when the reader
    decoded in its own thread; `upload --extract` fails the archive and
    the member it broke in, and leaves no partial file;
  * an unsafe member ('../escape') first, the run after it: `ckpt ls`
    stops at it and closes the archive while the thread is decoding ahead
    (no hang; no leak under the ASan build), exactly the error as before;
  * the last frame cut in half: 'truncated zstd input' as before;
  * a read of the file failing halfway (EIO from readcount_preload.c's
    CKPT_TEST_READS_EIO_AT), .tar.zst and .tar.gz, with the file read
    ahead of the decoder in a thread of its own (src/archive/zdec_in.c):
    `ckpt ls` and `clean -n` fail with the message and exit code they
    gave when the decoder read it.
`upload --extract` of the corrupt one failed the archive but then spun
forever before this test (a member abandoned while its multipart upload
was being created was never settled; src/upload/handle.c on_start).
The unit test (tests/unit/test_zahead.c) covers the thread itself: ahead
before asked, the two last blocks kept, a read failure, close at any
point.
"""
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (Checker, ckpt, gen_runs, noise, old_ctime,  # noqa: E402
                    scratch)
from onepass import SHIM  # noqa: E402

RUN = "2871005"


def make_tar(tmp):
    gen = os.path.join(tmp, "gen")
    gen_runs(gen)
    noise(os.path.join(gen, RUN, "blob.bin"), 80, 75000, 4)
    tar = os.path.join(tmp, "run.tar")
    subprocess.run(["tar", "cf", tar, "-C", gen, RUN], check=True)
    return gen, tar


def frames(tar, out, n=4):
    """tar as n zstd frames (each with its checksum); their sizes."""
    data = open(tar, "rb").read()
    step = len(data) // n + 1
    sizes = []
    with open(out, "wb") as f:
        for i in range(n):
            z = subprocess.run(["zstd", "-q", "-c", "-1", "--check"],
                               input=data[i * step:(i + 1) * step],
                               check=True, capture_output=True).stdout
            f.write(z)
            sizes.append(len(z))
    return sizes


def msg(got):
    """(rc, stdout, stderr lines without their timestamps)."""
    rc, out, err = got
    return rc, out, [ln.split(" ckpt: ", 1)[1] for ln in err.splitlines()]


def rows(out, first):
    return [[first] + ln.split("\t")[1:] for ln in out.splitlines()]



def ls_error(name, why):
    """What `ls` of an archive it cannot read prints (msg's form): its
    row, the error in the verdict's column, nothing on stderr (one report
    per event, docs/output.md)."""
    return (1, "%s\t-\t-\t-\terror: %s\t-\t-\n" % (name, why), [])

def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-ahead-") as tmp:
        os.chdir(tmp)
        env = dict(os.environ, CKPT_STATE_DIR=os.path.join(tmp, "state"))
        gen, tar = make_tar(tmp)
        sizes = frames(tar, "whole.tar.zst")
        rc, out, err = ckpt("ls", os.path.join(gen, RUN), env=env)
        want = (0, rows(out, "RUN"))
        rc, out, err = ckpt("ls", "whole.tar.zst", env=env)
        c.eq("whole: ls rows as of tar x", (rc, rows(out, "RUN")), want)

        # The third frame's checksum broken.
        data = bytearray(open("whole.tar.zst", "rb").read())
        data[sum(sizes[:3]) - 1] ^= 0x55
        open("bad.tar.zst", "wb").write(bytes(data))
        why = ("bad.tar.zst: zstd data is corrupt (Restored data doesn't "
               "match checksum)")
        c.eq("corrupt midway: ls fails naming it",
             msg(ckpt("ls", "bad.tar.zst", env=env)),
             ls_error("bad.tar.zst", why))
        c.eq("corrupt midway: clean -n reports it",
             msg(ckpt("clean", "-n", "--min-age", "0", "--no-progress",
                      "bad.tar.zst", env=env)),
             (1, "error\tbad.tar.zst\t%s\n" % why, []))
        # upload --extract: the archive's row and the member it broke in
        # failed (its upload aborted). Before, the engine spun forever on
        # that member: abandoned while its upload was being created, it
        # waited for parts that never came.
        dest = os.path.join(tmp, "dest")
        try:
            rc, out, err = ckpt("upload", "--extract", "--no-progress",
                                "bad.tar.zst", dest, env=env, timeout=120)
        except subprocess.TimeoutExpired:
            rc, out, err = None, "", ""
        c.eq("corrupt midway: upload --extract fails the archive and the "
             "member, leaves no partial file",
             (rc, sorted(ln for ln in out.splitlines()
                         if not ln.startswith("total\t")),
              err.splitlines()[-1:] and
              err.splitlines()[-1].split(" ckpt: ")[1],
              [f for _, _, fs in os.walk(dest) for f in fs
               if f.startswith(".ckpt-")]),
             (1, ["error\tbad.tar.zst\t-\t" + why,
                  "error\tbad.tar.zst/%s/blob.bin\t%s/blob.bin\t%s"
                  % (RUN, dest, why)],
              "error: 2 file(s) or source(s) did not arrive: see the "
              "'error' rows", []))

        # An unsafe member first: ls stops there, the thread decoding
        # ahead of it is stopped.
        with tarfile.open("unsafe.tar", "w") as t:
            t.add(os.path.join(gen, RUN, "config.yaml"), "../escape")
            t.add(os.path.join(gen, RUN), RUN)
        with open("unsafe.tar.zst", "wb") as f:
            subprocess.run(["zstd", "-q", "-c", "unsafe.tar"], stdout=f,
                           check=True)
        c.eq("unsafe member first: ls stops there",
             msg(ckpt("ls", "unsafe.tar.zst", env=env)),
             ls_error("unsafe.tar.zst", "unsafe.tar.zst: member '../escape' "
                      "has a '..' component"))

        # A read failure halfway through the file (EIO from the read that
        # reaches it, the bytes before it read): the file is read ahead of
        # the decoder in a thread of its own (src/archive/zdec_in.c), and
        # the failure reaches the user as when the decoder read it.
        with open("whole.tar.gz", "wb") as f:
            subprocess.run(["gzip", "-c", "-1", tar], stdout=f, check=True)
        for name in ("whole.tar.zst", "whole.tar.gz"):
            size = os.path.getsize(name)
            shim = old_ctime(dict(env,
                                  CKPT_TEST_READS_PATH=os.path.abspath(name),
                                  CKPT_TEST_READS_OUT=os.path.join(tmp,
                                                                   "reads"),
                                  CKPT_TEST_READS_EIO_AT=str(size // 2)),
                             preload=SHIM)
            why = "read '%s': Input/output error" % name
            c.eq("%s, read failure halfway: ls fails naming it" % name,
                 msg(ckpt("ls", name, env=shim)), ls_error(name, why))
            c.eq("%s, read failure halfway: clean -n reports it" % name,
                 msg(ckpt("clean", "-n", "--min-age", "0", "--no-progress",
                          name, env=shim)),
                 (1, "error\t%s\t%s\n" % (name, why), []))

        # Cut in the last frame.
        open("cut.tar.zst", "wb").write(open("whole.tar.zst", "rb").read()[
            :sum(sizes[:3]) + sizes[3] // 2])
        c.eq("cut in the last frame: ls fails",
             msg(ckpt("ls", "cut.tar.zst", env=env)),
             ls_error("cut.tar.zst", "cut.tar.zst: truncated zstd input"))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
