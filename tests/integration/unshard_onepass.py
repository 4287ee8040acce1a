#!/usr/bin/python3
# ctest-cost: 15
"""unshard_onepass.py - `ckpt unshard ARCHIVE DEST` decompresses a
compressed run archive once (issue 22), and `ckpt upload --extract` of
one reads it once.

The run is process_onepass.py's: 2871001 of the sample (step0 and
step1000 sharded without an -unsharded copy, so both are unsharded;
step2000 aborted, skipped) plus 3 MiB of random bytes, archived with tar
and zstd or gzip. tests/support/readcount_preload.c counts the bytes ckpt
reads from the archive file.

For .tar.zst and .tar.gz, `unshard --tmp-dir tmp ARCHIVE dest`:
  * default (spooled): the archive is read once (its size plus the few
    header bytes sniffed); --spool-limit 0 (no spool: the run's load and
    the step pass each read it, as before: the reference) reads it twice;
  * both give the same rows, and the same DEST, byte for byte, as
    unsharding the extracted directory;
  * no spool is left in --tmp-dir.
Then, .tar.zst:
  * killed (SIGKILL from the shim once half the archive was read): a
    spool is left in --tmp-dir; the rerun removes it (`removed stale
    temporary ... (pid N, dead)`), reads the archive once, same rows/DEST;
  * over budget (--spool-limit 100K): a warning says why, the archive is
    read twice, the same rows and DEST;
  * `upload --extract` (with and without --delete-source) reads it once
    and copies the run's files;
  * on a terminal, the pass draws a progress line that ends as `read
    NAME: 1/1 items, SIZE/SIZE, RATE/s`.
"""
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import CKPT, Checker, contents  # noqa: E402
from onepass import (STALE_RE, SPOOL_RE, archive, counted,  # noqa: E402
                     extracted, make_run, once)
from process_tty import on_pty  # noqa: E402

KINDS = [(".tar.zst", ["zstd", "-q", "-c"]), (".tar.gz", ["gzip", "-c"])]
ROWS = ["skip\tstep2000\tincomplete: model_and_optim/.metadata missing",
        "unshard\tstep0\tdest/step0-unsharded: 4 files, 32 tensors",
        "unshard\tstep1000\tdest/step1000-unsharded: 4 files, 32 tensors"]


def ckpt(top, arc, *cmd, kill_at=None):
    """ckpt CMD in top/ (cwd) with the read counter on top/arc's copy:
    (rc, rows, stderr, bytes read)."""
    r, reads, _ = counted(top, arc, cmd, kill_at=kill_at)
    return r.returncode, r.stdout.splitlines(), r.stderr, reads


def unshard(top, arc, *extra, kill_at=None):
    """(rc, rows, stderr, reads, --tmp-dir entries)"""
    got = ckpt(top, arc, "unshard", "--tmp-dir", "tmp", "--unshard-step0",
               *extra,
               os.path.basename(arc), "dest", kill_at=kill_at)
    return got + (sorted(os.listdir(os.path.join(top, "tmp"))),)


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="unshard-onepass-")
    try:
        src = make_run(tmp)
        d, r = extracted(src, tmp, "unshard", "--unshard-step0",
                         "2871001", "dest")
        # (in directory order; an archive's come in archive order)
        c.eq("directory: exit 0, rows (%s)" % r.stderr[-300:],
             (r.returncode, sorted(r.stdout.splitlines())), (0, ROWS))
        want = contents(os.path.join(d, "dest"))
        for ext, comp in KINDS:
            arc = archive(src, tmp, ext, comp)
            size = os.path.getsize(arc)
            ref = unshard(os.path.join(tmp, "ref" + ext), arc,
                          "--spool-limit", "0")
            got = unshard(os.path.join(tmp, "one" + ext), arc)
            c.eq("%s: exit 0 (%s)" % (ext, got[2][-300:]), got[0], 0)
            c.true("%s: spooled: read once (%d bytes of %d)"
                   % (ext, got[3], size), once(got[3], size))
            c.true("%s: --spool-limit 0 reads it twice (%d bytes of %d)"
                   % (ext, ref[3], size), ref[3] >= 2 * size)
            c.eq("%s: rows as without the spool, as the directory's" % ext,
                 (got[1], ref[0], ref[1]), (ROWS, 0, ROWS))
            c.eq("%s: DEST as from the extracted directory" % ext,
                 contents(os.path.join(tmp, "one" + ext, "dest")), want)
            c.eq("%s: DEST without the spool as well" % ext,
                 contents(os.path.join(tmp, "ref" + ext, "dest")), want)
            c.eq("%s: no spool left in --tmp-dir" % ext,
                 (got[4], ref[4]), ([], []))

        arc = os.path.join(tmp, "2871001.tar.zst")
        size = os.path.getsize(arc)

        # On a terminal: the pass's progress line, redrawn in place, ends
        # as `read NAME: 1/1 items, SIZE/SIZE, RATE/s`; then the rows.
        top = os.path.join(tmp, "tty")
        os.makedirs(os.path.join(top, "tmp"))
        shutil.copy(arc, top)
        rc, out = on_pty([CKPT, "unshard", "--tmp-dir", "tmp",
                          "2871001.tar.zst", "dest"], top)
        kept = [seg.split("\r\x1b[K")[-1]
                for seg in out.replace("\r\n", "\n").split("\n")]
        c.eq("terminal: exit 0", rc, 0)
        c.true("terminal: the pass's progress line (%r)" % out[-600:],
               any(re.fullmatch(r"read 2871001\.tar\.zst: 1/1 items, "
                                r"(\S+ \S+)/\1, [0-9.]+ \S+/s", k)
                   for k in kept))

        # Killed mid-pass: the spool stays; the rerun removes it.
        top = os.path.join(tmp, "kill")
        got = unshard(top, arc, kill_at=size // 2)
        c.eq("killed: SIGKILL mid-pass, a spool left in --tmp-dir",
             (got[0], len(got[4]), all(re.match(SPOOL_RE, x)
                                       for x in got[4])),
             (-9, 1, True))
        got = unshard(top, arc)
        c.eq("killed, rerun: exit 0, read once, rows, spool removed",
             (got[0], once(got[3], size), got[1], got[4]),
             (0, True, ROWS, []))
        c.true("killed, rerun: says it removed the stale spool (%s)"
               % got[2][-300:],
               re.search(STALE_RE, got[2]) is not None)
        c.eq("killed, rerun: DEST", contents(os.path.join(top, "dest")),
             want)

        # Over budget: read once per pass, the same result.
        top = os.path.join(tmp, "budget")
        got = unshard(top, arc, "--spool-limit", "100K")
        c.eq("over budget: exit 0, read twice, rows, no spool left",
             (got[0], got[3] >= 2 * size, got[1], got[4]),
             (0, True, ROWS, []))
        c.true("over budget: a warning says why (%s)" % got[2][-300:],
               "2871001.tar.zst: not spooled (its members pass "
               "--spool-limit 100.0 KiB): each pass reads the archive "
               "again" in got[2])
        c.eq("over budget: DEST", contents(os.path.join(top, "dest")), want)

        # upload --extract: one pass already (pinned).
        files = {k: v for k, v in contents(os.path.join(src,
                                                        "2871001")).items()
                 if k != "latest"}
        for extra in ([], ["--delete-source"]):
            top = os.path.join(tmp, "upload" + "".join(extra))
            got = ckpt(top, arc, "upload", "--extract", *extra,
                       os.path.basename(arc), "up")
            c.eq("upload --extract %s: exit 0, read once (%d bytes of %d)"
                 % (" ".join(extra), got[3], size),
                 (got[0], once(got[3], size)), (0, True))
            c.eq("upload --extract %s: the run's files" % " ".join(extra),
                 contents(os.path.join(top, "up")), files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
