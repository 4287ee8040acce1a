#!/usr/bin/python3
"""s3_tls.py - HTTPS endpoints: s3rver with a throwaway self-signed
certificate. TLS is verified (an unknown CA is an error, not retried),
AWS_CA_BUNDLE names a private CA, and --insecure (cfg.insecure) skips
verification."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import Checker, S3Env, tool  # noqa: E402

B = "ckpt-test"


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp,
                                                                "cert.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1"], check=True,
                       capture_output=True)
        with S3Env(buckets=[B], tls=(key, cert)) as s3:
            env = s3.env()
            c.true("https endpoint", env["AWS_ENDPOINT_URL"].startswith(
                   "https://127.0.0.1:"))
            rc, _, err = tool(env, "-s", "put", "-", "s3://%s/a" % B,
                              input=b"x", check=False)
            c.eq("unknown CA refused", (rc, err.split("\n")[1].startswith(
                 "storage_tool: network: s3://ckpt-test/a: SSL certificate "
                 "problem: ")), (1, True))
            c.true("not retried", "requests=1 " in err)
            ca = dict(env, AWS_CA_BUNDLE=cert)
            tool(ca, "put", "-", "s3://%s/a" % B, input=b"tls")
            _, out, _ = tool(ca, "cat", "s3://%s/a" % B)
            c.eq("AWS_CA_BUNDLE trusted", out, b"tls")
            _, out, _ = tool(env, "-k", "cat", "s3://%s/a" % B)
            c.eq("insecure skips verification", out, b"tls")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
