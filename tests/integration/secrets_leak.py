#!/usr/bin/env python3
# ctest-cost: 60
"""No secret ever leaves: every command (ls, clean -n, unshard, map-wandb,
upload, upload --wandb) on s3://, r2:// and gs:// and against the fake
W&B server, plain, -v, --json and both, on success paths and on failure
paths where the servers quote the request back in their error bodies (the
S3 proxy's echo_headers fault, fake_wandb's echo-* faults), with AWS keys
and a session token, R2 and GCS HMAC profile keys, WANDB_API_KEY and a
netrc all set. Then with temporary credentials from every source ckpt
asks (credfakes.py: EC2 metadata, web identity, the container endpoint,
SSO, credential_process, an authorized user's refresh token, the GCE
metadata server), on success and failure paths: their keys, session and
bearer tokens, and what ckpt gives them (the web identity token, the
container's authorization token, the SSO access token, the OAuth client
secret and refresh token) are secrets too. Then all stdout, stderr, and every file ckpt wrote (state,
spool, outputs, mapping files) is searched for each secret value, the
Basic credential, and for "Authorization", "Signature=" and
"X-Amz-Security-Token": none may appear.

Env: CKPT (binary), CKPT_SRC (repo root).

(Not named secrets.py: tests/integration is on other tests' sys.path,
where that name would shadow Python's own secrets module.)
"""
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SUPPORT = os.path.join(os.environ.get("CKPT_SRC", "."), "tests", "support")
sys.path.insert(0, SUPPORT)
from s3env import S3Env  # noqa: E402
import credfakes as cf  # noqa: E402
import wandb_fixtures as wf  # noqa: E402
from torchzip import torch_zip  # noqa: E402

CKPT = os.path.abspath(os.environ.get("CKPT", "build/ckpt"))
B = "ckpt-test"

AWS = ("AKIASECRETSTEST0001X", "aws/Secret+Value0123456789abcdefGHIJKLMN",
       "IQoJb3JpZ2luX2VjSessionTokenSecretValue0123456789zz")
R2 = ("r2accesskeyid0123456789abcdef0123",
      "r2secretaccesskey0123456789abcdef0123456789abcdef0123456789abcd")
GCS = ("GOOG1EHMACACCESSID0123456789ABCD",
       "gcsHmacSecret+0123456789/abcdefghijklmnop")
NETRC_OTHER = "netrc-only-secret-0123456789abcdef0123"
SECRETS = [AWS[0], AWS[1], AWS[2], R2[0], R2[1], GCS[0], GCS[1], wf.KEY,
           NETRC_OTHER, wf.basic_auth().split()[1]]
# Names of credential-carrying headers and parameters.
MARKERS = re.compile(rb"authorization|signature=|x-amz-security-token|"
                     rb"x-amz-credential|credential=", re.I)

FAILS = []
RUNS = [0]
OUTPUTS = []   # (what, bytes): scanned again once every secret is known


def fail(what):
    FAILS.append(what)
    print("FAIL %s" % what)


def scan(what, data):
    """data (bytes) must hold no secret and no credential header."""
    for s in SECRETS:
        if s.encode() in data:
            fail("%s: leaks %s...: %r" % (what, s[:6], data[:3000]))
    m = MARKERS.search(data)
    if m:
        i = m.start()
        fail("%s: %r in %r" % (what, m.group(), data[max(0, i - 200):i + 300]))


def ckpt(env, args, cwd):
    RUNS[0] += 1
    t = time.monotonic()
    p = subprocess.run([CKPT] + args, env=env, cwd=cwd, capture_output=True,
                       timeout=300)
    if time.monotonic() - t > 5:
        print("slow (%.1f s): %s" % (time.monotonic() - t, " ".join(args)))
    if b"Sanitizer" in p.stderr or p.returncode not in (0, 1):
        fail("ckpt %s: exit %d: %r" % (" ".join(args), p.returncode,
                                       p.stderr[-2000:]))
    scan("ckpt %s: stdout" % " ".join(args), p.stdout)
    scan("ckpt %s: stderr" % " ".join(args), p.stderr)
    OUTPUTS.append(("ckpt %s" % " ".join(args), p.stdout + p.stderr))
    return p.returncode, p.stdout, p.stderr


def make_env(s3, tmp, wandb_url):
    secret = os.path.join(tmp, "secret")
    home = os.path.join(secret, "home")
    os.makedirs(home)
    creds = os.path.join(secret, "credentials")
    with open(creds, "w") as f:
        f.write("[r2p]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                "[gcsp]\naws_access_key_id = %s\naws_secret_access_key = "
                "%s\n" % (R2 + GCS))
    with open(os.path.join(home, ".netrc"), "w") as f:
        f.write("machine api.wandb.ai login user password %s\n"
                "machine %s login user password %s\n"
                % (NETRC_OTHER, wandb_url.split("//")[1], wf.KEY))
    e = {k: v for k, v in s3.env().items()
         if not k.startswith("WANDB_") and k != "NETRC"}
    e.update({
        "AWS_ACCESS_KEY_ID": AWS[0], "AWS_SECRET_ACCESS_KEY": AWS[1],
        "AWS_SESSION_TOKEN": AWS[2],
        "AWS_SHARED_CREDENTIALS_FILE": creds,
        "R2_PROFILE": "r2p", "R2_ENDPOINT_URL": s3.endpoint,
        "GCS_PROFILE": "gcsp", "GCS_ENDPOINT_URL": s3.endpoint,
        "WANDB_API_KEY": wf.KEY, "WANDB_BASE_URL": wandb_url,
        "HOME": home, "CKPT_STATE_DIR": os.path.join(tmp, "work", "state"),
        "CKPT_WANDB_TIMEOUT": "5",
    })
    return e


def make_run(tmp):
    db = wf.DB()
    cfg = wf.olmo_config("OLMo-1B-secret", "/results/1000001")
    db.add("ab12cd34", display="OLMo-1B-secret", config=cfg, step=1000)
    d = os.path.join(tmp, "work", "src", "run1")
    os.makedirs(os.path.join(d, "step1000"))
    wf.write_config(d, cfg, wf.wandb_section(name="OLMo-1B-secret"))
    wf.add_wandb_run(d, "ab12cd34", slurm="1000001", last_step=1000)
    with open(os.path.join(d, "step1000", "model.pt"), "wb") as f:
        f.write(torch_zip(b"weights" * 100))
    db.write(os.path.join(tmp, "db.json"))


def commands():
    """(args) run in tmp/work; success and failure both."""
    return [
        ["upload", "src/run1", "s3://%s/runs/run1" % B],
        ["upload", "src/run1", "r2://%s/r2/run1" % B],
        ["upload", "src/run1", "gs://%s/gs/run1" % B],
        ["upload", "--wandb", "src/run1", "s3://%s/wb" % B],
        ["upload", "s3://%s/runs/run1" % B, "down/run1"],
        ["ls", "s3://%s/runs" % B],
        ["ls", "r2://%s/r2" % B],
        ["ls", "gs://%s/gs" % B],
        ["ls", "s3://%s/nothing-here" % B],
        ["clean", "-n", "--min-age", "0", "s3://%s/runs/run1" % B],
        ["unshard", "s3://%s/runs/run1" % B, "unsharded"],
        ["unshard", "s3://%s/missing/step1" % B, "unsharded2"],
        ["map-wandb", "s3://%s/runs/run1" % B],
        ["map-wandb", "-o", "map.tsv", "src/run1"],
        ["map-wandb", "-o", "s3://%s/map.jsonl" % B, "--json", "src/run1"],
    ]


SPOOLS = ("process", "unshard")


def run_all(env, tmp, flag_sets, extra=(), skip=()):
    work = os.path.join(tmp, "work")
    for args in commands():
        if args[0] in skip:
            continue
        # (--tmp-dir where the command takes it: its spool is scanned)
        spool = ["--tmp-dir", "spool"] if args[0] in SPOOLS else []
        for flags in flag_sets:
            ckpt(env, [args[0]] + list(flags) + list(extra) + spool +
                 args[1:], work)


def scan_files(tmp):
    n = 0
    for d, _, fs in os.walk(os.path.join(tmp, "work")):
        for f in fs:
            p = os.path.join(d, f)
            if os.path.islink(p):
                continue
            with open(p, "rb") as fh:
                scan("file %s" % os.path.relpath(p, tmp), fh.read())
            n += 1
    return n


WEB_TOKEN = "eyJhbGciOiJSUzI1NiJ9.web-identity-secret-0123456789.sig"
POD_TOKEN = "pod-authorization-secret-0123456789"
SSO_TOKEN = "sso-access-token-secret-0123456789"
OAUTH = ("oauth-client.apps", "oauth-client-secret-0123456789",
         "1//oauth-refresh-token-secret-0123456789")
SECRETS += [WEB_TOKEN, POD_TOKEN, SSO_TOKEN, OAUTH[1], OAUTH[2]]


def temp_sources(s3, env, tmp):
    """Every command, then the echo fault, with the keys of each source
    of temporary credentials; returns the fakes (their issued keys are
    secrets too)."""
    work = os.path.join(tmp, "work")
    sec = os.path.join(tmp, "secret")
    tok = os.path.join(sec, "web-token")
    pod = os.path.join(sec, "pod-token")
    with open(tok, "w") as f:
        f.write(WEB_TOKEN)
    with open(pod, "w") as f:
        f.write(POD_TOKEN)
    cache = os.path.join(env["HOME"], ".aws", "sso", "cache")
    os.makedirs(cache)
    with open(os.path.join(cache, hashlib.sha1(b"corp").hexdigest() +
                           ".json"), "w") as f:
        json.dump({"accessToken": SSO_TOKEN,
                   "expiresAt": "2099-01-01T00:00:00Z"}, f)
    s3.add_key("ASIAPROCESSSECRET01", "process-secret-0123456789",
               token="process-session-token-0123456789")
    SECRETS.extend(["ASIAPROCESSSECRET01", "process-secret-0123456789",
                    "process-session-token-0123456789"])
    helper = os.path.join(sec, "helper.sh")
    with open(helper, "w") as f:
        f.write("#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": "
                "\"ASIAPROCESSSECRET01\", \"SecretAccessKey\": "
                "\"process-secret-0123456789\", \"SessionToken\": "
                "\"process-session-token-0123456789\"}'\n")
    os.chmod(helper, 0o700)
    conf = os.path.join(sec, "config")
    with open(conf, "w") as f:
        f.write("[profile sso]\nsso_session = corp\nsso_account_id = 1\n"
                "sso_role_name = R\n[sso-session corp]\nsso_start_url = "
                "https://corp.awsapps.com/start\nsso_region = eu-west-1\n"
                "[profile proc]\ncredential_process = %s\n" % helper)
    user = os.path.join(sec, "user.json")
    base = {k: v for k, v in env.items() if k not in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "R2_PROFILE", "GCS_PROFILE")}
    base["AWS_CONFIG_FILE"] = conf
    fakes = [cf.Imds(s3), cf.Sts(s3, WEB_TOKEN, "arn:aws:iam::1:role/r"),
             cf.Container(s3, auth=POD_TOKEN),
             cf.SsoPortal(s3, SSO_TOKEN, "1", "R"), cf.OAuth(s3, *OAUTH),
             cf.GceMetadata(s3)]
    imds, sts, ecs, sso, oauth, gce = fakes
    with open(user, "w") as f:
        json.dump({"type": "authorized_user", "client_id": OAUTH[0],
                   "client_secret": OAUTH[1], "refresh_token": OAUTH[2],
                   "token_uri": oauth.token_uri}, f)
    sources = [
        dict(AWS_EC2_METADATA_DISABLED="false",
             AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url),
        dict(AWS_ROLE_ARN="arn:aws:iam::1:role/r",
             AWS_WEB_IDENTITY_TOKEN_FILE=tok, AWS_ENDPOINT_URL_STS=sts.url),
        dict(AWS_CONTAINER_CREDENTIALS_FULL_URI=ecs.uri,
             AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=pod),
        dict(AWS_PROFILE="sso", AWS_ENDPOINT_URL_SSO=sso.url),
        dict(AWS_PROFILE="proc"),
    ]
    google = [dict(GOOGLE_APPLICATION_CREDENTIALS=user),
              dict(GCE_METADATA_HOST=gce.host, GCE_METADATA_IP=gce.host)]
    cmds = [["upload", "src/run1", "s3://%s/tmp/run1" % B],
            ["ls", "s3://%s/runs" % B],
            ["unshard", "s3://%s/runs/run1" % B, "unsharded-tmp"]]
    gcmds = [["upload", "src/run1", "gs://%s/tmp/run1" % B],
             ["ls", "gs://%s/gs" % B]]
    for echo in (0, -1):
        s3.configure(echo_headers=echo, echo_status=403)
        for extra, commands in [(x, cmds) for x in sources] + \
                [(x, gcmds) for x in google]:
            e = dict(base, **extra)
            for args in commands:
                for flags in ([], ["-v", "--json"]):
                    ckpt(e, [args[0]] + flags + ["--retries", "2"] +
                         args[1:], work)
    s3.configure(echo_headers=0)
    # Sources that refuse: STS, the container, the token endpoint.
    sts.web_token, ecs.auth = "other", "other"
    oauth.client = ("x", "y", "z")
    for extra in sources[1:3] + google[:1]:
        ckpt(dict(base, **extra), ["ls", "-v", "s3://%s/runs" % B
                                   if "GOOGLE_APPLICATION_CREDENTIALS"
                                   not in extra else "gs://%s/gs" % B], work)
    for f in fakes:
        f.stop()
    if not all(f.issued for f in (imds, sts, ecs, sso, oauth, gce)):
        fail("a source issued nothing: %r" % [
             (f.name, len(f.issued)) for f in fakes])
    return fakes


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-secrets-")
    try:
        make_run(tmp)
        os.makedirs(os.path.join(tmp, "work", "spool"))
        keys = ["%s:%s:%s" % AWS, "%s:%s" % R2, "%s:%s" % GCS]
        with S3Env(buckets=[B], keys=keys) as s3, \
                wf.FakeWandb(os.path.join(tmp, "db.json")) as fake:
            env = make_env(s3, tmp, fake.url)
            all_flags = ([], ["-v"], ["--json"], ["-v", "--json"])
            # Success paths (the first upload seeds the bucket).
            run_all(env, tmp, all_flags)
            rc, out, _ = ckpt(env, ["ls", "s3://%s/runs" % B],
                              os.path.join(tmp, "work"))
            if rc != 0 or not out.startswith(b"s3://%s/runs/run1\tstep1000"
                                             % B.encode()):
                fail("seeding did not work: %d %r" % (rc, out))
            # The netrc instead of WANDB_API_KEY.
            netrc = {k: v for k, v in env.items() if k != "WANDB_API_KEY"}
            ckpt(netrc, ["map-wandb", "-v", "src/run1"],
                 os.path.join(tmp, "work"))
            # Servers that quote the request back: final (400) and
            # retried (503) errors, JSON, 200-with-errors and text bodies.
            for s3_status, wb_kind in ((400, "echo-json"), (503, "echo-200"),
                                       (403, "echo-text")):
                s3.configure(echo_headers=-1, echo_status=s3_status)
                fake.reset()
                fake.fault(wb_kind, 100000, status=s3_status)
                # (unshard does not take --retries: 10 attempts, a
                # minute, on a 503; its 400 and 403 paths are covered.)
                run_all(env, tmp, ([], ["-v"], ["-v", "--json"]),
                        extra=["--retries", "2"],
                        skip=("unshard",) if s3_status == 503 else ())
                ckpt(netrc, ["map-wandb", "-v", "src/run1"],
                     os.path.join(tmp, "work"))
            if s3.stats()["requests"] == 0:
                fail("the S3 proxy saw no requests")
            s3.configure(echo_headers=0)
            # Temporary credentials: the keys each source issued are
            # secrets too; every output so far is scanned again for them.
            for f in temp_sources(s3, env, tmp):
                for issued in f.issued:
                    SECRETS.extend(x for x in issued if isinstance(x, str))
            for what, data in OUTPUTS:
                scan(what, data)
            n = scan_files(tmp)
            if n < 5:
                fail("only %d files written: the commands did not run" % n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d ckpt runs, %d failed" % (RUNS[0], len(FAILS)))
    if not RUNS[0]:
        print("FAIL no ckpt command ran")
        return 1
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
