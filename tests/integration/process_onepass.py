#!/usr/bin/python3
# ctest-cost: 25
"""process_onepass.py - `ckpt process` decompresses a compressed run
archive once (issue 22).

The run: 2871001 of the sample (step0, step1000 sharded without an
-unsharded copy, so it is unsharded; step2000 aborted; a `latest` link)
plus 3 MiB of random bytes (train_data/big.bin), archived with tar and
each of zstd, gzip, bzip2 and xz. An LD_PRELOAD shim
(tests/support/readcount_preload.c) counts the bytes ckpt reads from the
archive file and its opens.

For each kind, `process --no-wandb --min-age 0` (the archive deleted at
the end):
  * default (spooled): the archive is read once (its size plus the few
    header bytes sniffed); --spool-limit 0 (each phase reads it again,
    as before: the reference) reads it 4 times;
  * both give the same row, the same state object (host, pid, time and
    source path aside) and the same DEST tree, byte for byte, which is
    also what processing the extracted directory (`tar x`) gives;
  * no spool is left in --tmp-dir;
  * `ckpt ls` and `ckpt clean -n` of it read it once too.
Then, .tar.zst:
  * --keep-source: read once, kept, same DEST;
  * killed (SIGKILL from the shim as the spool's second member file is
    created, the first one whole): a
    spool is left in --tmp-dir; the rerun (its lease lapsed) removes it
    (`removed stale temporary ... (pid N, dead)`), reads the archive once
    and converges to the reference;
  * over budget (--spool-limit 100K): a `spool skip: not spooled
    (its members pass --spool-limit 100.0 KiB): ...` log line, the
    multi-pass path, the same row, state and DEST;
  * truncated (cut in the middle): not spooled, the run fails in judge
    (`failed`, exit 1), the archive kept, nothing at DEST, no spool left.
"""
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker, contents, lapse  # noqa: E402
from onepass import (STALE_RE, SPOOL_RE, archive, counted,  # noqa: E402
                     dest, make_run, masked, once, processed_dir, reads_of)

KINDS = [(".tar.zst", ["zstd", "-q", "-c"]), (".tar.gz", ["gzip", "-c"]),
         (".tar.bz2", ["bzip2", "-c"]), (".tar.xz", ["xz", "-c"])]
ARGS = ["--no-wandb", "--min-age", "0", "--no-progress", "--runs", "1"]


def run(top, arc, *extra, kill_create=None):
    """process a copy of arc in top/ (cwd, so rows and DEST names are the
    same everywhere): (rc, rows, log, reads, opens, tmp entries)."""
    r, reads, opens = counted(top, arc, ["process"] + ARGS +
                              ["--tmp-dir", "tmp"] + list(extra) +
                              [os.path.basename(arc), "--dest", "dest"],
                              kill_create=kill_create)
    rows = [masked(x) for x in r.stdout.splitlines()]
    return (r.returncode, rows, r.stderr, reads, opens,
            sorted(os.listdir(os.path.join(top, "tmp"))))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-onepass-")
    try:
        src = make_run(tmp)
        # The extracted directory, processed: what every archive gives.
        want = processed_dir(c, src, tmp, ARGS)
        refrows = {}
        for ext, comp in KINDS:
            arc = archive(src, tmp, ext, comp)
            size = os.path.getsize(arc)
            ref = run(os.path.join(tmp, "ref" + ext), arc, "--spool-limit",
                      "0")
            refrows[ext] = ref[1]
            for cmd in (["ls"], ["clean", "-n", "--min-age", "0"]):
                n = reads_of(arc, *cmd)
                c.true("%s: %s reads it once (%d bytes of %d)"
                       % (ext, " ".join(cmd), n, size),
                       once(n, size))
            got = run(os.path.join(tmp, "one" + ext), arc)
            c.eq("%s: exit 0 (%s)" % (ext, got[2][-300:]), got[0], 0)
            c.true("%s: spooled: read once (%d bytes of %d)"
                   % (ext, got[3], size), once(got[3], size))
            c.true("%s: --spool-limit 0 reads it again in each phase "
                   "(%d bytes of %d)" % (ext, ref[3], size),
                   ref[3] >= 4 * size)
            c.eq("%s: rows as without the spool" % ext, got[1], ref[1])
            c.eq("%s: processed" % ext, got[1][0].split("\t")[:2],
                 ["process", "2871001" + ext])
            g = dest(os.path.join(tmp, "one" + ext))
            c.eq("%s: DEST and state as without the spool" % ext, g,
                 dest(os.path.join(tmp, "ref" + ext)))
            c.eq("%s: DEST as from the extracted directory" % ext,
                 {k: v for k, v in g.items()
                  if not k.startswith(".ckpt-process/")},
                 {k: v for k, v in want.items()
                  if not k.startswith(".ckpt-process/")})
            c.eq("%s: archive deleted, no spool left" % ext,
                 (os.path.exists(os.path.join(tmp, "one" + ext,
                                              "2871001" + ext)), got[5]),
                 (False, []))

        arc = os.path.join(tmp, "2871001.tar.zst")
        size = os.path.getsize(arc)
        ref = dest(os.path.join(tmp, "ref.tar.zst"))
        top = os.path.join(tmp, "keep")
        got = run(top, arc, "--keep-source")
        c.eq("--keep-source: exit 0, read once, kept",
             (got[0], once(got[3], size),
              os.path.exists(os.path.join(top, "2871001.tar.zst"))),
             (0, True, True))
        c.eq("--keep-source: DEST as from the directory",
             {k: v for k, v in dest(top).items()
              if not k.startswith(".ckpt-process/")},
             {k: v for k, v in want.items()
              if not k.startswith(".ckpt-process/")})

        # Killed mid-pass: the spool stays; the rerun removes it. The kill
        # comes as the spool creates its second member file (not at a
        # number of bytes read: the archive is read ahead of the decoder,
        # zdec_in.c, and a small one is read whole before anything is
        # spooled).
        top = os.path.join(tmp, "kill")
        got = run(top, arc, kill_create="tmp/.ckpt-")
        c.eq("killed: SIGKILL mid-pass, a spool left in --tmp-dir",
             (got[0], len(got[5]), all(re.match(SPOOL_RE, x)
                                       for x in got[5])),
             (-9, 1, True))
        left = os.path.join(top, "tmp", got[5][0]) if got[5] else ""
        c.true("killed: the spool holds members read before the kill",
               any(files for _, _, files in os.walk(left)))
        lapse(os.path.join(top, "dest"))
        got = run(top, arc)
        c.eq("killed, rerun: exit 0, read once, spool removed",
             (got[0], once(got[3], size), got[5]),
             (0, True, []))
        c.true("killed, rerun: says it removed the stale spool",
               re.search(STALE_RE, got[2]) is not None)
        c.eq("killed, rerun: DEST and state converge", dest(top), ref)

        # Over budget: read once per phase, the same result.
        top = os.path.join(tmp, "budget")
        got = run(top, arc, "--spool-limit", "100K")
        c.eq("over budget: exit 0, read again per phase, no spool left",
             (got[0], got[3] >= 4 * size, got[5]), (0, True, []))
        c.true("over budget: the log says why",
               "2871001.tar.zst: spool skip: not spooled (its members "
               "pass --spool-limit 100.0 KiB): each phase reads the "
               "archive again" in got[2])
        c.eq("over budget: rows, DEST and state as without the spool",
             (got[1], dest(top)), (refrows[".tar.zst"], ref))

        # Truncated: judged an error, kept, nothing spooled or copied.
        top = os.path.join(tmp, "cut")
        os.makedirs(top)
        with open(arc, "rb") as f:
            data = f.read()
        with open(os.path.join(top, "2871001.tar.zst"), "wb") as f:
            f.write(data[:len(data) // 2])
        got = run(top, arc)
        c.eq("truncated: exit 1, failed in judge, kept, no spool, no DEST "
             "files",
             (got[0], got[1][0].split("\t")[:2],
              os.path.exists(os.path.join(top, "2871001.tar.zst")), got[5],
              [k for k in contents(os.path.join(top, "dest"))
               if not k.startswith(".ckpt-process/")]
              if os.path.isdir(os.path.join(top, "dest")) else []),
             (1, ["error", "2871001.tar.zst"], True, [], []))
        c.true("truncated: the row says judge (%s)" % got[1][0],
               got[1][0].split("\t")[2].startswith("judge: "))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
