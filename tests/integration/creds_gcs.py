#!/usr/bin/python3
# ctest-cost: 45
"""creds_gcs.py - gs:// with Google's Application Default Credentials, as
on a GCE VM or after `gcloud auth application-default login`: an
authorized user's refresh token (GOOGLE_APPLICATION_CREDENTIALS, or
gcloud's file in CLOUDSDK_CONFIG) traded at an OAuth token endpoint, and
the GCE metadata server, each a fake on 127.0.0.1 (credfakes.py) that
ckpt finds through the key file's token_uri and google-auth's
GCE_METADATA_HOST / GCE_METADATA_IP. The S3 proxy accepts only the bearer
tokens a fake issued, until they expire.

Checked: each source gives working uploads and listings through the XML
API; their order; Metadata-Flavor: Google on every metadata request and
required on its replies; tokens that live 20 s refreshed during a longer
transfer; external_account refused clearly; no credentials anywhere is one
error naming every place looked at."""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from credfakes import GceMetadata, OAuth  # noqa: E402
from s3test import Checker, S3Env, ckpt, file_rows, ls_errors  # noqa: E402

B = "ckpt-test"


def lines(err):
    out = []
    for line in err.splitlines():
        line = re.sub(r"^\S+Z ", "", line)
        line = re.sub(r" after \d+ ms", "", line)
        out.append(line)
    return out


def ls_failed(got):
    """(exit, the rows of a `ckpt ls`, what it could not read as
    (LOCATION, WHY), the lines on stderr), without timestamps and times."""
    rc, out, err = got
    return rc, ls_errors("\n".join(lines(out))), lines(err)


class T:
    def __init__(self, c, s3):
        self.c = c
        self.s3 = s3
        self.src = os.path.join(s3.tmp, "run1")
        os.makedirs(os.path.join(self.src, "step10"))
        for name in ("config.yaml", "step10/model.pt"):
            with open(os.path.join(self.src, name), "w") as f:
                f.write(name * 100)
        self.gcloud = os.path.join(s3.tmp, "gcloud")
        os.makedirs(self.gcloud)
        self.n = 0

    def base(self, **extra):
        e = self.s3.env()
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            del e[k]
        e["GCS_ENDPOINT_URL"] = self.s3.endpoint
        e["CLOUDSDK_CONFIG"] = self.gcloud
        e.update(extra)
        return e

    def upload(self, what, env):
        """ckpt upload to a fresh prefix and ckpt ls of it; returns the
        bearer tokens that were used."""
        self.n += 1
        dest = "gs://%s/gcs/%d" % (B, self.n)
        self.s3.reset_stats()
        rc, out, err = ckpt("upload", "-q", "--no-progress", self.src, dest,
                            env=env)
        self.c.eq("%s: upload" % what, (rc, file_rows(out), err),
                  (0, [], ""))
        rc, out, err = ckpt("ls", "--no-progress", dest, env=env)
        self.c.eq("%s: ls" % what, (rc, err), (0, ""))
        st = self.s3.stats()
        self.c.eq("%s: every request with a bearer token" % what,
                  st["sig_ok"], 0)
        return {k[len("bearer "):] for k in st["keys_used"]}

    def user_file(self, name, oauth):
        path = os.path.join(self.s3.tmp, name)
        with open(path, "w") as f:
            json.dump({"type": "authorized_user", "client_id": oauth.client[0],
                       "client_secret": oauth.client[1],
                       "refresh_token": oauth.client[2],
                       "token_uri": oauth.token_uri}, f)
        return path


def authorized_user(t):
    with OAuth(t.s3, "client-a.apps", "secret-a", "1//refresh-a") as a:
        env = t.base(GOOGLE_APPLICATION_CREDENTIALS=t.user_file("a.json", a))
        used = t.upload("authorized_user", env)
        t.c.eq("authorized_user: its tokens", used, {x[0] for x in a.issued})
        form = dict(x.split("=", 1) for x in
                    a.requests[0][3].decode().split("&"))
        t.c.eq("authorized_user: a refresh_token grant", form, {
               "grant_type": "refresh_token", "client_id": "client-a.apps",
               "client_secret": "secret-a", "refresh_token": "1%2F%2F"
               "refresh-a"})
        a.client = ("client-a.apps", "secret-a", "revoked")
        got = ckpt("ls", "--no-progress", "gs://%s/gcs" % B, env=env)
        t.c.eq("authorized_user: a refused refresh token", ls_failed(got),
               (1, [("gs://%s/gcs" % B, "gs://%s/: OAuth token endpoint %s: "
                     "HTTP 400 invalid_grant" % (B, a.token_uri))], []))


def order(t):
    """GOOGLE_APPLICATION_CREDENTIALS, then gcloud's file, then the
    metadata server; the ones after the one used are never asked."""
    adc = os.path.join(t.gcloud, "application_default_credentials.json")
    with OAuth(t.s3, "a", "sa", "ra") as a, OAuth(t.s3, "b", "sb", "rb") \
            as b, GceMetadata(t.s3) as g:
        env = t.base(GOOGLE_APPLICATION_CREDENTIALS=t.user_file("a2.json",
                                                                a),
                     GCE_METADATA_HOST=g.host, GCE_METADATA_IP=g.host)
        os.rename(t.user_file("b.json", b), adc)

        def step(what, fake):
            before = [len(f.requests) for f in (a, b, g)]
            used = t.upload("order: " + what, env)
            asked = [f.name for f, n in zip((a, b, g), before)
                     if len(f.requests) > n]
            t.c.eq("order: %s wins" % what, (used <= {x[0] for x in
                   fake.issued} and bool(used), asked), (True,
                   [fake.name]))
        step("GOOGLE_APPLICATION_CREDENTIALS", a)
        del env["GOOGLE_APPLICATION_CREDENTIALS"]
        step("gcloud's application-default file", b)
        os.unlink(adc)
        step("the GCE metadata server", g)
        t.c.true("metadata: every request said Metadata-Flavor: Google",
                 all(r[2].get("Metadata-Flavor") == "Google"
                     for r in g.requests))
        t.c.eq("metadata: probed once per process, then the token",
               [r[1] for r in g.requests[:2]],
               ["/", GceMetadata.TOKEN_PATH])


def not_gce(t):
    with GceMetadata(t.s3, flavor_reply=False) as g:
        env = t.base(GCE_METADATA_HOST=g.host, GCE_METADATA_IP=g.host)
        got = ckpt("ls", "--no-progress", "gs://%s/gcs" % B, env=env)
        t.c.eq("a metadata server that is not Google's", ls_failed(got),
               (1, [("gs://%s/gcs" % B, "gs://%s/: no credentials: none in "
                    "GCS_PROFILE (HMAC keys), GOOGLE_APPLICATION_CREDENTIALS,"
                    " %s/application_default_credentials.json (gcloud auth "
                    "application-default login); GCE metadata server "
                    "http://%s/: the reply is not a GCE metadata server's "
                    "(no Metadata-Flavor: Google)" % (B, t.gcloud, g.host))],
                []))
    # The offline default: the metadata server at a closed port.
    env = t.base()
    rc, out, err = ckpt("upload", "--no-progress", t.src, "gs://%s/x" % B,
                        env=env)
    t.c.eq("nowhere: one error, every place named", (rc, out, lines(err)),
           (1, "", ["ckpt: error: gs://%s/: no credentials: none in "
                    "GCS_PROFILE (HMAC keys), GOOGLE_APPLICATION_CREDENTIALS,"
                    " %s/application_default_credentials.json (gcloud auth "
                    "application-default login); GCE metadata server "
                    "http://127.0.0.1:1/: Failed to connect to 127.0.0.1 "
                    "port 1: Couldn't connect to server" % (B, t.gcloud)]))
    wif = os.path.join(t.s3.tmp, "wif.json")
    with open(wif, "w") as f:
        json.dump({"type": "external_account", "audience": "//iam.googleapis"
                   ".com/projects/1/locations/global/workloadIdentityPools/p"
                   "/providers/gh", "subject_token_type": "urn:ietf:params:"
                   "oauth:token-type:jwt", "token_url": "https://sts."
                   "googleapis.com/v1/token", "credential_source": {
                       "file": "/var/run/token"}}, f)
    got = ckpt("ls", "--no-progress", "gs://%s/gcs" % B,
               env=t.base(GOOGLE_APPLICATION_CREDENTIALS=wif))
    t.c.eq("external_account refused", ls_failed(got), (1, [(
           "gs://%s/gcs" % B, "gs://%s/: '%s': credentials of type "
           "'external_account' are not supported: give ckpt a "
           "service_account or authorized_user key, or HMAC keys "
           "(GCS_PROFILE)" % (B, wif))], []))


def refresh(t):
    """Tokens that live 20 s, a transfer of about 30 s: asked again before
    they expire, never used after."""
    big = os.path.join(t.s3.tmp, "slow")
    os.makedirs(big)
    for i in range(14):
        with open(os.path.join(big, "f%02d" % i), "wb") as f:
            f.write(os.urandom(300 * 1024))
    with GceMetadata(t.s3, lifetime=20) as g:
        env = t.base(GCE_METADATA_HOST=g.host, GCE_METADATA_IP=g.host)
        rc, _, err = ckpt("upload", "-q", "--no-progress", big,
                          "gs://%s/slow" % B, env=env)
        t.c.eq("refresh: uploaded", (rc, err), (0, ""))
        t.s3.reset_stats()
        t.s3.configure(trickle_bps=40 * 1024, trickle_match="/slow/")
        start = time.time()
        rc, _, err = ckpt("upload", "-q", "--no-progress", "--transfers", "4",
                          "gs://%s/slow" % B, os.path.join(t.s3.tmp, "down"),
                          env=env)
        took = time.time() - start
        t.s3.configure(trickle_bps=0, trickle_match="")
        st = t.s3.stats()
        t.c.eq("refresh: downloaded", (rc, err), (0, ""))
        t.c.true("refresh: longer than a token lives (%.0f s)" % took,
                 took > 25)
        t.c.true("refresh: asked again, used each, one thread asking "
                 "(%d tokens)" % len(g.issued), 3 <= len(g.issued) <= 6 and
                 len(st["keys_used"]) >= 2)
        t.c.eq("refresh: none used after it expired", st["expired"], 0)


def main():
    c = Checker()
    with S3Env(buckets=[B]) as s3:
        t = T(c, s3)
        for case in (authorized_user, order, not_gce, refresh):
            case(t)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
