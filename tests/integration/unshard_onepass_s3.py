#!/usr/bin/python3
# ctest-cost: 10
"""unshard_onepass_s3.py - `ckpt unshard` of a compressed run archive in
object storage reads it once (issue 22): the spool is local.

process_onepass.py's run (step0 and step1000 unsharded, step2000
skipped) as s3://ckpt-test/src/2871001.tar.zst and .tar.gz, unsharded to
a local DEST: the signing proxy's counters say how many bytes of the
archive's key were fetched. With the spool: the archive's size, once;
with --spool-limit 0 (as before): at least twice. The same rows and DEST
either way, no spool left in --tmp-dir.
"""
import os
import subprocess
import sys
import tempfile
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import CKPT, Checker, S3Env, contents, tool  # noqa: E402
from onepass import archive, fetched, make_run, once  # noqa: E402
from unshard_onepass import KINDS, ROWS  # noqa: E402

B = "ckpt-test"


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="unshard-onepass-s3-")
    try:
        src = make_run(tmp)
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            for ext, comp in KINDS:
                arc = archive(src, tmp, ext, comp)
                size = os.path.getsize(arc)
                url = "s3://%s/src%s/2871001%s" % (B, ext, ext)
                tool(env, "put", arc, url)
                got = {}
                for how, extra in (("spool", []),
                                   ("no spool", ["--spool-limit", "0"])):
                    top = os.path.join(tmp, "%s-%s" % (ext, how[:2]))
                    os.makedirs(os.path.join(top, "tmp"))
                    s3.reset_stats()
                    r = subprocess.run(
                        [CKPT, "unshard", "--tmp-dir", "tmp",
                         "--unshard-step0"] + extra +
                        [url, "dest"], cwd=top, env=env,
                        capture_output=True, text=True, timeout=300)
                    n = fetched(s3, "/%s/src%s/2871001%s" % (B, ext, ext))
                    got[how] = contents(os.path.join(top, "dest"))
                    c.eq("%s %s: exit 0, rows, no spool left (%s)"
                         % (ext, how, r.stderr[-300:]),
                         (r.returncode, r.stdout.splitlines(),
                          os.listdir(os.path.join(top, "tmp"))),
                         (0, ROWS, []))
                    if how == "spool":
                        c.true("%s: read once (%d bytes of %d)"
                               % (ext, n, size), once(n, size))
                    else:
                        c.true("%s: without the spool read twice (%d "
                               "bytes of %d)" % (ext, n, size),
                               n >= 2 * size)
                c.eq("%s: DEST as without the spool" % ext, got["spool"],
                     got["no spool"])
                c.eq("%s: 2 steps, 8 files" % ext, len(got["spool"]), 8)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
