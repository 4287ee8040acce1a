#!/usr/bin/python3
# ctest-cost: 15
"""process_lease_lost.py - `ckpt process` checks its lease right before
each deletion of a source file (docs/commands/process.md, "lease"): once
the lease is lost, nothing more is deleted.

Run 2871005 of the sample (a good run) is in object storage and DEST
beside it (s3rver behind the proxy, which enforces the lease's
conditional writes); `process --transfers 1 --lease-ttl 3`: the lease is
renewed every second, with If-Match. The proxy holds every DELETE 3 s
(delete_delay_ms) and, right before the first (the first source file),
stores another worker's lease over this run's (put_before_delete): the
next renewal finds another version and the lease is lost while that
first delete is held. That file goes (its delete had been checked and
sent); every other file of the run stays at the source, the row says
`failed … delete: … the lease on this run was lost …`, and the state
stays `uploaded` with every file at DEST, verified (a rerun finishes it
once the lease is its own again)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (BUILD, Checker, S3Env, gen_runs,  # noqa: E402
                    remote_contents, snapshot)

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ckpt-test"
RUN = "2871005"


def ckpt(env, *args):
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp, S3Env() as s3:
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        runs = os.path.join(tmp, "runs")
        gen_runs(runs)
        want = snapshot(os.path.join(runs, RUN))
        src = "s3://%s/src/%s" % (B, RUN)
        dest = "s3://%s/dest" % B
        rc, _, err = ckpt(env, "upload", "-q", os.path.join(runs, RUN), src)
        c.eq("source uploaded (%s)" % err.strip(), rc, 0)
        s3.configure(delete_delay_ms=3000, put_before_delete={
            "path": "/%s/dest/.ckpt-process/%s.lease" % (B, RUN),
            "body": json.dumps({"run": RUN, "host": "other-node",
                                "pid": 1, "token": "theirs",
                                "acquired": 0, "expires": 4102444800})})
        rc, out, err = ckpt(env, "process", "--no-wandb", "--min-age", "0",
                            "--transfers", "1", "--lease-ttl", "3", src,
                            "--dest", dest)
        row = out.splitlines()[0].split("\t") if out else []
        c.eq("exit 1 (%s)" % err.strip()[-400:], rc, 1)
        c.eq("row: error", row[:2], ["error", src])
        c.true("row: the delete stopped on the lost lease (%s)" % row,
               len(row) > 2 and row[2].startswith("delete: ") and
               "the lease on this run was lost" in row[2])
        left = remote_contents(env, B, "src/" + RUN)
        c.eq("one source file deleted (its delete was under way), the "
             "rest kept", (len(left), all(want[k] == v
                                         for k, v in left.items())),
             (len(want) - 1, True))
        at = remote_contents(env, B, "dest/" + RUN)
        c.eq("DEST holds the run", at, want)
        st = json.loads(remote_contents(env, B, "dest/.ckpt-process",
                                        [RUN + ".json"])[RUN + ".json"])
        c.eq("state stays uploaded", st["phase"], "uploaded")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
