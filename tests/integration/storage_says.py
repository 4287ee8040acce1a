#!/usr/bin/python3
# ctest-cost: 20
"""storage_says.py - ckpt says what a remote request waits on: each retry
of an endpoint that does not answer is a line on stderr (`retrying (2/3)
in 0.1 s: <why>`), at once; a reply that asks to try again (503 SlowDown)
only with -v until a request has had three in a row; -q says none. A
refusal names the service's error code (a HEAD's too, which has no body)
and what to check, naming where the credentials came from. A missing
bucket or refused keys at DEST are one error for upload and process, not
a failed row per file or run; a writer that may not list still writes."""
import os
import re
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import Checker, S3Env, ckpt, tool  # noqa: E402

B = "ckpt-test"


def lines(err):
    """stderr without timestamps, delays and curl's timings."""
    out = []
    for line in err.splitlines():
        line = re.sub(r"^\S+Z ", "", line)
        line = re.sub(r" in [0-9.]+ s: ", " in D s: ", line)
        line = re.sub(r" after \d+ ms", "", line)
        out.append(line)
    return out


def said(out, err):
    """What ls said: its stderr lines, then its rows' errors as
    `ckpt: error: WHY` (an item's failure is its row, not a message too:
    docs/output.md; said twice, the test sees it twice)."""
    errs = ["ckpt: " + f[4] for f in (ln.split("\t") for ln in
                                      out.splitlines())
            if len(f) > 4 and f[4].startswith("error: ")]
    return lines(err) + lines("\n".join(errs))


def unreachable(c, env):
    """A port nothing listens on: every retry is told, then the error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))   # bound, never listening: refused
        port = s.getsockname()[1]
        e = dict(env, AWS_ENDPOINT_URL="http://127.0.0.1:%d" % port)
        why = ("Failed to connect to 127.0.0.1 port %d: Couldn't connect "
               "to server" % port)
        rc, out, err = ckpt("ls", "--no-progress", "--retries", "3",
                            "s3://%s/x" % B, env=e)
        retry = ["ckpt: warning: s3://%s/x%s: retrying (%d/3) in D s: %s"
                 % (B, slash, n, why) for slash in ("", "/")
                 for n in (2, 3)]
        c.eq("unreachable: each retry said, then the error", (rc,
             said(out, err)), (1, retry + ["ckpt: error: s3://%s/x: %s (after "
                                       "3 attempts)" % (B, why)]))
        rc, out, err = ckpt("ls", "-q", "--no-progress", "--retries", "3",
                            "s3://%s/x" % B, env=e)
        c.eq("unreachable, -q: the error alone", (rc, said(out, err)),
             (1, ["ckpt: error: s3://%s/x: %s (after 3 attempts)"
                  % (B, why)]))


def slowdowns(c, s3, env, n, *flags):
    """ls with the listing's first n GETs answered 503 SlowDown."""
    s3.configure(fault_next=n, fault_next_kind="slowdown", methods="GET")
    rc, out, err = ckpt("ls", "--no-progress", *flags, "s3://%s/x" % B,
                        env=env)
    s3.configure(fault_next=0, fault_next_kind="", methods="")
    c.eq("%d SlowDowns %s: listed" % (n, flags), rc, 0)
    return [x for x in lines(err) if "retrying" in x]


def refusals(c, s3, env):
    obj = "s3://%s/x/run1/b" % B

    def ls(e):
        rc, out, err = ckpt("ls", "--no-progress", obj, env=e)
        return rc, said(out, err)

    def error(msg):
        return (1, ["ckpt: error: %s: %s" % (obj, msg)])
    c.eq("wrong secret", ls(dict(env, AWS_SECRET_ACCESS_KEY="wrong")),
         error("HTTP 403 SignatureDoesNotMatch: the secret key is not the "
               "access key ID's (credentials from the environment)"))
    creds = env["AWS_SHARED_CREDENTIALS_FILE"] + ".p"
    with open(creds, "w") as f:
        f.write("[p]\naws_access_key_id = NOPE\naws_secret_access_key = "
                "x\n")
    e = dict(env, AWS_SHARED_CREDENTIALS_FILE=creds, AWS_PROFILE="p")
    del e["AWS_ACCESS_KEY_ID"], e["AWS_SECRET_ACCESS_KEY"]
    c.eq("unknown key", ls(e), error(
         "HTTP 403 InvalidAccessKeyId: %s knows no such access key ID "
         "(credentials from profile 'p')" % s3.endpoint))
    s3.configure(deny="/x/run1/b")
    c.eq("not allowed", ls(env), error(
         "HTTP 403 AccessDenied: the credentials from the environment are "
         "not allowed this (check the bucket policy and the permissions of "
         "their user or role)"))
    s3.configure(deny="/denied/")
    rc, out, err = ckpt("upload", "--no-progress", "-q", creds,
                        "s3://%s/denied/f" % B, env=env)
    s3.configure(deny="")
    c.eq("not allowed, upload: the code in the row", (rc, out.splitlines(
         True)[0].split("\t")[-1]), (1, "s3://%s/denied/f: HTTP 403 AccessDenied: the "
                      "credentials from the environment are not allowed "
                      "this (check the bucket policy and the permissions "
                      "of their user or role)\n" % B))
    s3.add_key("ASIAOLD", "s", token="t", expires=1)
    c.eq("expired session token", ls(dict(
         env, AWS_ACCESS_KEY_ID="ASIAOLD", AWS_SECRET_ACCESS_KEY="s",
         AWS_SESSION_TOKEN="t")), error(
         "HTTP 400 ExpiredToken: the session token from the environment "
         "has expired: renew it"))


def up_front(c, s3, env):
    src = os.path.join(s3.tmp, "runs")
    os.makedirs(os.path.join(src, "run1", "step10"))
    for name in ("run1/config.yaml", "run1/step10/model.pt"):
        with open(os.path.join(src, name), "w") as f:
            f.write(name)
    one = "ckpt: error: s3://nobucket/x: no such bucket"
    rc, out, err = ckpt("upload", "--no-progress", os.path.join(src, "run1"),
                        "s3://nobucket/x", env=env)
    c.eq("upload, no bucket: one error", (rc, out, lines(err)),
         (1, "", [one]))
    rc, out, err = ckpt("process", "--no-progress", "--no-wandb",
                        "--min-age", "0", "--dest", "s3://nobucket/x", src,
                        env=env)
    c.eq("process, no bucket: one error", (rc, out, lines(err)),
         (1, "", [one]))
    rc, out, err = ckpt("upload", "--no-progress", os.path.join(src, "run1"),
                        "s3://%s/up" % B, env=dict(
                            env, AWS_SECRET_ACCESS_KEY="wrong"))
    c.eq("upload, wrong secret: one error", (rc, out, lines(err)),
         (1, "", ["ckpt: error: s3://%s/up: HTTP 403 SignatureDoesNotMatch: "
                  "the secret key is not the access key ID's (credentials "
                  "from the environment)" % B]))
    s3.configure(deny="list-type=2")
    rc, _, err = tool(env, "probe", "s3://%s/up" % B, check=False)
    s3.configure(deny="")
    c.eq("a probe refused AccessDenied passes (a writer may not list)",
         (rc, err), (0, ""))


def main():
    c = Checker()
    with S3Env(buckets=[B]) as s3:
        env = s3.env()
        tool(env, "put", "-", "s3://%s/x/run1/config.yaml" % B, input=b"a")
        unreachable(c, env)
        refusals(c, s3, env)
        up_front(c, s3, env)
        said = "s3://%s/x/: retrying (%%d/10) in D s: HTTP 503 SlowDown" % B
        c.eq("two SlowDowns: nothing said", slowdowns(c, s3, env, 2), [])
        c.eq("two SlowDowns, -v: said", slowdowns(c, s3, env, 2, "-v"),
             ["ckpt: " + said % n for n in (2, 3)])
        c.eq("four SlowDowns: the fourth attempt on said",
             slowdowns(c, s3, env, 4),
             ["ckpt: warning: " + said % n for n in (4, 5)])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
