#!/usr/bin/python3
# ctest-cost: 40
"""s3_listing_faith.py - an S3 listing is not taken on faith (issue 27,
class 6). The proxy makes a small bucket list in pages of 2 keys and then
lies about the pages (tests/support/s3proxy.py list_fault, list_inject):

  no_token      a truncated page without NextContinuationToken
  repeat_token  a truncated page that gives back the token it was asked
                with
  outside       a key outside the prefix listed (another run's object)
  dslash        a key with "//" below the prefix

Before, the first two ended the listing as if it were complete: `clean`
judged a good run by its first page (config.yaml and one file of its
only checkpoint), called it bad and deleted it; `upload --delete-source`
moved the first page, deleted it and said the move was done. The third
was re-based by length and deleted under a name never listed (another
run's object). Now each listing fails, the command exits 1 naming the
prefix, and no DeleteObjects or DELETE follows: every object stays.
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import (Checker, S3Env, ckpt, gen_runs, old_ctime,  # noqa: E402
                    remote_contents, scratch)

B = "ckpt-test"


def tree(env, rid):
    """{name: sha256} of the objects of runs/RID."""
    return {k: hashlib.sha256(v).hexdigest()
            for k, v in remote_contents(env, B, "runs/" + rid).items()}


def deletes(st):
    """DELETE requests and POSTs (DeleteObjects) the proxy forwarded."""
    m = st["methods"]
    return m.get("DELETE", 0) + m.get("POST", 0)


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-listfaith-") as tmp, S3Env() as s3:
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        runs = os.path.join(tmp, "runs")
        gen_runs(runs)
        for rid in ("2871005", "2871002", "2871004"):
            rc, _, err = ckpt("upload", "-q", os.path.join(runs, rid),
                              "s3://%s/runs/%s" % (B, rid), env=env)
            c.eq("staged %s (%s)" % (rid, err.strip()), rc, 0)
        before = {rid: tree(env, rid)
                  for rid in ("2871005", "2871002", "2871004")}
        c.true("staged: the good run has several pages of keys",
               len(before["2871005"]) > 4)

        def check(name, faults, argv, want_msg, runs_kept):
            s3.configure(**faults)
            s3.reset_stats()
            rc, out, err = ckpt(*argv, env=env)
            st = s3.stats()
            s3.configure(list_max_keys=0, list_fault="", list_inject="",
                         list_inject_match="")
            c.eq("%s: exit 1 (%s%s)" % (name, out, err), rc, 1)
            c.true("%s: the fault was hit" % name, st["faults"]["list"] > 0)
            c.true("%s: says why (%r)" % (name, out + err),
                   want_msg in out + err)
            c.eq("%s: no DeleteObjects or DELETE" % name, deletes(st), 0)
            for rid in runs_kept:
                c.eq("%s: %s untouched" % (name, rid),
                     tree(env, rid), before[rid])
            return out

        good = "s3://%s/runs/2871005" % B
        out = check("clean, no token",
                    dict(list_max_keys=2, list_fault="no_token"),
                    ["clean", "--min-age", "0", good],
                    "truncated but gives no continuation token",
                    ["2871005"])
        c.true("clean, no token: an error row, not a delete (%r)" % out,
               out.startswith("error\t"))
        check("clean -n, no token",
              dict(list_max_keys=2, list_fault="no_token"),
              ["clean", "-n", "--min-age", "0", good],
              "truncated but gives no continuation token", ["2871005"])
        check("clean, repeated token",
              dict(list_max_keys=2, list_fault="repeat_token"),
              ["clean", "--min-age", "0", good],
              "continuation token already used", ["2871005"])
        dest = os.path.join(tmp, "moved")
        check("upload --delete-source, no token",
              dict(list_max_keys=2, list_fault="no_token"),
              ["upload", "--delete-source", good, dest],
              "truncated but gives no continuation token", ["2871005"])
        # A bad run: its delete would follow the judge. The key of another
        # run slipped into its listing must not be deleted with it.
        other = "runs/2871005/config.yaml"
        check("clean, key outside the prefix",
              dict(list_inject=other, list_inject_match="runs/2871002"),
              ["clean", "--min-age", "0", "s3://%s/runs/2871002" % B],
              "outside the prefix listed", ["2871005", "2871002"])
        check("process, key outside the prefix",
              dict(list_inject=other, list_inject_match="runs/2871004"),
              ["process", "--no-wandb", "--min-age", "0",
               "s3://%s/runs/2871004" % B, "--dest",
               os.path.join(tmp, "pdest")],
              "outside the prefix listed", ["2871005", "2871004"])
        check("clean, key with //",
              dict(list_inject="runs/2871002//step0/x",
                   list_inject_match="runs/2871002"),
              ["clean", "--min-age", "0", "s3://%s/runs/2871002" % B],
              "an empty path component", ["2871005", "2871002"])
        # Sanity: without faults the bad run goes and the good one stays.
        rc, out, _ = ckpt("clean", "--min-age", "0", good,
                          "s3://%s/runs/2871002" % B, env=env)
        c.eq("no fault: exit", rc, 0)
        c.eq("no fault: rows", sorted(x.split("\t")[0]
                                      for x in out.splitlines()),
             ["delete", "keep"])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
