#!/usr/bin/python3
# ctest-cost: 15
"""process_onepass_s3.py - `ckpt process` of a compressed run archive in
object storage reads it once (issue 22): the spool is local.

The sample run 2871001 without its -unsharded copy (so step1000 is
unsharded) as s3://ckpt-test/src/2871001.tar.zst and .tar.gz, processed
to a local DEST with --no-wandb --min-age 0: the signing proxy's
counters say how many bytes of the archive's key were fetched. With the
spool: the archive's size, once; with --spool-limit 0 (each phase reads
it again, as before): at least 4 times. Same rows, the same DEST and
state (host, pid, time aside) either way; the archive deleted; no spool
left in --tmp-dir.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import CKPT, Checker, S3Env, contents, tool  # noqa: E402
from onepass import archive, fetched, make_run, once  # noqa: E402

B = "ckpt-test"
KINDS = [(".tar.zst", ["zstd", "-q", "-c"]), (".tar.gz", ["gzip", "-c"])]


def dest(top):
    out = {}
    for k, v in contents(top).items():
        if k.endswith(".lease"):
            continue
        if k.startswith(".ckpt-process/"):
            o = json.loads(v)
            for x in ("host", "pid", "updated"):
                o.pop(x, None)
            v = json.dumps(o, sort_keys=True)
        out[k] = v
    return out


def rows(out):
    res = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "process":
            f[2] = "DEST"
            f[7] = "S"
        if f[0] == "total":
            f[-1] = "seconds=S"
        res.append(f)
    return res


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-onepass-s3-")
    try:
        src = make_run(tmp, big=False)
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            for ext, comp in KINDS:
                arc = archive(src, tmp, ext, comp)
                size = os.path.getsize(arc)
                key = "/%s/src%s/2871001%s" % (B, ext, ext)
                got = {}
                for how, extra in (("spool", []),
                                   ("no spool", ["--spool-limit", "0"])):
                    url = "s3://%s/src%s/2871001%s" % (B, ext, ext)
                    tool(env, "put", arc, url)
                    d = os.path.join(tmp, "d%s-%s" % (ext, how[:2]))
                    t = os.path.join(tmp, "t%s-%s" % (ext, how[:2]))
                    os.makedirs(t)
                    s3.reset_stats()
                    r = subprocess.run(
                        [CKPT, "process", "--no-wandb", "--min-age", "0",
                         "--no-progress", "--tmp-dir", t] + extra +
                        [url, "--dest", d], env=env, capture_output=True,
                        text=True, timeout=300)
                    n = fetched(s3, key)
                    got[how] = (rows(r.stdout), dest(d))
                    c.eq("%s %s: exit 0 (%s)" % (ext, how, r.stderr[-300:]),
                         r.returncode, 0)
                    c.eq("%s %s: archive deleted, no spool left"
                         % (ext, how),
                         (tool(env, "stat", url, check=False)[0]
                          != 0, os.listdir(t)), (True, []))
                    if how == "spool":
                        c.true("%s: read once (%d bytes of %d)"
                               % (ext, n, size), once(n, size))
                    else:
                        c.true("%s: without the spool read again per "
                               "phase (%d bytes of %d)"
                               % (ext, n, size), n >= 4 * size)
                c.eq("%s: rows, DEST and state as without the spool" % ext,
                     got["spool"], got["no spool"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
