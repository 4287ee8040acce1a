#!/usr/bin/python3
"""s3_gcs_oauth.py - gs:// with a service-account JSON key: ckpt signs an
RS256 JWT (throwaway RSA key made here with openssl), the proxy's token
endpoint verifies it with the public key and issues a bearer token, and
every storage request must carry it. Tokens are cached and refreshed."""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import Checker, S3Env, tool  # noqa: E402

B = "ckpt-test"
EMAIL = "ckpt-test@example.iam.gserviceaccount.com"


def keypair(tmp, name):
    key = os.path.join(tmp, name + ".pem")
    pub = os.path.join(tmp, name + ".pub")
    subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", key, "-pubout", "-out", pub],
                   check=True, capture_output=True)
    return key, pub


def sa_file(tmp, name, key, token_uri):
    path = os.path.join(tmp, name + ".json")
    with open(key) as f:
        pem = f.read()
    with open(path, "w") as f:
        json.dump({"type": "service_account", "project_id": "test",
                   "private_key_id": "k1", "private_key": pem,
                   "client_email": EMAIL, "token_uri": token_uri}, f)
    return path


def gs_env(s3, sa):
    e = s3.env()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        del e[k]
    e["GOOGLE_APPLICATION_CREDENTIALS"] = sa
    e["GCS_ENDPOINT_URL"] = s3.endpoint
    return e


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        key, pub = keypair(tmp, "sa")
        other, _ = keypair(tmp, "other")
        with S3Env(buckets=[B], proxy_args=["--sa-pubkey", pub,
                   "--sa-email", EMAIL]) as s3:
            uri = s3.endpoint + "/__proxy/token"
            env = gs_env(s3, sa_file(tmp, "sa", key, uri))
            data = random.Random(2).randbytes(3 * 1024 * 1024)
            s3.reset_stats()
            tool(env, "put", "-", "gs://%s/oauth/blob" % B, input=data)
            _, out, _ = tool(env, "cat", "gs://%s/oauth/blob" % B)
            c.true("gs:// round trip with OAuth", out == data)
            _, out, _ = tool(env, "ls", "gs://%s/oauth" % B)
            c.eq("gs:// listing", out, b"f\t3145728\tblob\n")
            st = s3.stats()
            c.eq("bearer on every request", (st["bearer_ok"], st["sig_ok"]),
                 (st["requests"], 0))
            c.eq("one token per process (cached)", st["tokens_issued"], 3)

            # A short-lived token is refreshed between slow requests.
            s3.configure(token_ttl=1, slow_ms=100)
            s3.reset_stats()
            _, out, _ = tool(env, "cat", "gs://%s/oauth/blob" % B)
            s3.configure(token_ttl=3600, slow_ms=0)
            c.true("read with refreshes", out == data)
            # 4 GETs (three 1 MiB reads, then one at the end), each slower
            # than the token's half-second life.
            c.eq("token refreshed per request", s3.stats()["tokens_issued"],
                 4)

            bad = gs_env(s3, sa_file(tmp, "bad", other, uri))
            rc, _, err = tool(bad, "ls", "gs://%s/oauth" % B, check=False)
            c.eq("JWT signed by another key", (rc, err), (1,
                 "storage_tool: auth: gs://%s/: OAuth token endpoint %s: "
                 "HTTP 400 invalid_grant\n" % (B, uri)))
            with open(key) as f:
                c.true("private key never shown",
                       f.read()[40:80] not in err)
            nokey = dict(env, GOOGLE_APPLICATION_CREDENTIALS=os.path.join(
                         tmp, "missing.json"))
            rc, _, err = tool(nokey, "ls", "gs://%s/oauth" % B, check=False)
            c.eq("missing key file", (rc, err), (1, "storage_tool: "
                 "not-found: gs://%s/: open '%s/missing.json': No such file "
                 "or directory\n" % (B, tmp)))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
