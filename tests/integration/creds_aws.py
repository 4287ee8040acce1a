#!/usr/bin/python3
# ctest-cost: 60
"""creds_aws.py - s3:// with no keys given, only a source of them, as on a
cloud VM, in a pod or behind an SSO login: EC2 instance metadata (IMDSv2),
the container credentials endpoint, web identity (STS), the SSO token
cache and credential_process, each a fake on 127.0.0.1 (credfakes.py)
that ckpt finds only through the SDKs' own override variables. The S3
proxy accepts only the temporary keys a fake issued, with their session
token signed, until they expire.

Checked: each source gives working uploads and listings; the chain's
order (the environment, web identity, SSO, the credentials file,
credential_process, the config file, the container, EC2); aws-cli's
--profile, --endpoint-url and --region; keys that live 20 s refreshed
during a longer transfer (none used after it expired); and the failures:
no credentials anywhere is one error naming every place looked at, a
source that fails says why, and a test never reaches past the loopback
(CKPT_TEST_LOOPBACK_ONLY)."""
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from credfakes import Container, Imds, SsoPortal, Sts  # noqa: E402
from s3test import (CKPT, Checker, S3Env, ckpt, file_rows,  # noqa: E402
                    ls_errors)

B = "ckpt-test"
ROLE = "arn:aws:iam::123456789012:role/ckpt-writer"


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
        self.home = os.path.join(s3.tmp, "home")
        os.makedirs(self.home)
        self.src = os.path.join(s3.tmp, "run1")
        os.makedirs(os.path.join(self.src, "step10"))
        for name in ("config.yaml", "step10/model.pt"):
            with open(os.path.join(self.src, name), "w") as f:
                f.write(name * 100)
        self.n = 0

    def base(self, **extra):
        """s3.env() with no keys: an empty credentials file, a config
        file as given, HOME of its own."""
        e = self.s3.env()
        del e["AWS_ACCESS_KEY_ID"], e["AWS_SECRET_ACCESS_KEY"]
        e["HOME"] = self.home
        e.update(extra)
        return e

    def upload(self, what, env, *flags):
        """ckpt upload of the run to a fresh prefix and ckpt ls of it:
        both work, with the keys of one source. Returns the AKIDs that
        signed."""
        self.n += 1
        dest = "s3://%s/creds/%d" % (B, self.n)
        self.s3.reset_stats()
        rc, out, err = ckpt("upload", "-q", "--no-progress", *flags,
                            self.src, dest, env=env)
        self.c.eq("%s: upload" % what, (rc, file_rows(out), err),
                  (0, [], ""))
        rc, out, err = ckpt("ls", "--no-progress", *flags, dest, env=env)
        self.c.eq("%s: ls" % what, (rc, err), (0, ""))
        return set(self.s3.stats()["keys_used"])

    def write(self, name, text, mode=0o600):
        path = os.path.join(self.s3.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path


def imds(t):
    with Imds(t.s3) as m:
        env = t.base(AWS_EC2_METADATA_DISABLED="false",
                     AWS_EC2_METADATA_SERVICE_ENDPOINT=m.url)
        used = t.upload("IMDSv2", env)
        t.c.eq("IMDSv2: signed with the keys it issued (one process, one "
               "fetch each)", used, {k[0] for k in m.issued})
        puts = [r for r in m.requests if r[0] == "PUT"]
        t.c.true("IMDSv2: a session token asked with its TTL",
                 puts and all(r[1] == "/latest/api/token" and
                              r[2].get("X-aws-ec2-metadata-token-ttl-"
                                       "seconds") == "21600" for r in puts))
        gets = [r for r in m.requests if r[0] == "GET"]
        t.c.true("IMDSv2: every GET carries the token", gets and all(
                 r[2].get("X-aws-ec2-metadata-token") in m.tokens
                 for r in gets))
        m.role = None
        got = ckpt("ls", "--no-progress", "s3://%s/creds" % B, env=env)
        t.c.eq("IMDSv2: no role attached", ls_failed(got), (1, [(
               "s3://%s/creds" % B, "s3://%s/: no credentials: none in the "
               "environment (AWS_ACCESS_KEY_ID), web identity "
               "(AWS_WEB_IDENTITY_TOKEN_FILE), profile 'default' of %s and "
               "%s (keys, credential_process, SSO), container credentials "
               "(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI); EC2 "
               "instance metadata %s: no IAM role is attached to this "
               "instance" % (B, env["AWS_SHARED_CREDENTIALS_FILE"],
                             env["AWS_CONFIG_FILE"], m.url))], []))


def container(t):
    tok = t.write("pod-token", "pod-identity-token-0123456789\n")
    with Container(t.s3, auth="pod-identity-token-0123456789") as k:
        env = t.base(AWS_CONTAINER_CREDENTIALS_FULL_URI=k.uri,
                     AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=tok)
        used = t.upload("container (token file)", env)
        t.c.eq("container: its keys", used, {x[0] for x in k.issued})
        # The token file is read again on every fetch: it rotates.
        t.write("pod-token", "rotated\n")
        got = ckpt("ls", "--no-progress", "s3://%s/creds" % B, env=env)
        t.c.eq("container: a token it refuses", ls_failed(got), (1, [(
               "s3://%s/creds" % B, "s3://%s/: container credentials %s: "
               "HTTP 401 Unauthorized" % (B, k.uri))], []))
        k.auth = "literal-token"
        env = t.base(AWS_CONTAINER_CREDENTIALS_FULL_URI=k.uri,
                     AWS_CONTAINER_AUTHORIZATION_TOKEN="literal-token")
        t.upload("container (token)", env)


def web_identity(t):
    tokfile = t.write("web-token", "eyJhbGciOiJSUzI1NiJ9.web-token-1.sig")

    def current():
        with open(tokfile) as f:
            return f.read()
    with Sts(t.s3, current, ROLE) as sts:
        env = t.base(AWS_ROLE_ARN=ROLE, AWS_WEB_IDENTITY_TOKEN_FILE=tokfile,
                     AWS_ENDPOINT_URL_STS=sts.url)
        used = t.upload("web identity", env)
        t.c.eq("web identity: the role's keys", used,
               {x[0] for x in sts.issued})
        f = sts.forms[0]
        t.c.eq("web identity: the call", (f["Action"], f["Version"],
               f["RoleArn"], f["WebIdentityToken"],
               bool(re.match(r"ckpt-\d+$", f["RoleSessionName"]))),
               ("AssumeRoleWithWebIdentity", "2011-06-15", ROLE, current(),
                True))
        t.c.true("web identity: unsigned", all(
                 "Authorization" not in r[2] for r in sts.requests))
        # The token rotates: it is read again for every call.
        t.write("web-token", "eyJhbGciOiJSUzI1NiJ9.web-token-2.sig")
        env["AWS_ROLE_SESSION_NAME"] = "nightly"
        t.upload("web identity, rotated token", env)
        t.c.eq("web identity: the new token, the session name",
               (sts.forms[-1]["WebIdentityToken"],
                sts.forms[-1]["RoleSessionName"]), (current(), "nightly"))
        # In the profile instead (role_arn + web_identity_token_file).
        conf = t.write("config-web", "[profile pod]\nrole_arn = %s\n"
                       "web_identity_token_file = %s\n" % (ROLE, tokfile))
        env = t.base(AWS_CONFIG_FILE=conf, AWS_PROFILE="pod",
                     AWS_ENDPOINT_URL_STS=sts.url)
        t.upload("web identity from the profile", env)
        sts.role_arn = "arn:aws:iam::123456789012:role/other"
        got = ckpt("ls", "--no-progress", "s3://%s/creds" % B, env=env)
        t.c.eq("web identity: STS refuses", ls_failed(got), (1, [(
               "s3://%s/creds" % B, "s3://%s/: web identity (STS %s): "
               "HTTP 400 AccessDenied" % (B, sts.url))], []))


def sso(t):
    conf = t.write("config-sso", "[profile dev]\nsso_session = corp\n"
                   "sso_account_id = 123456789012\nsso_role_name = Writer\n"
                   "[sso-session corp]\nsso_start_url = https://corp."
                   "awsapps.com/start\nsso_region = eu-west-1\n")
    cache = os.path.join(t.home, ".aws", "sso", "cache")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, hashlib.sha1(b"corp").hexdigest() + ".json")

    def login(expires):
        with open(path, "w") as f:
            json.dump({"startUrl": "https://corp.awsapps.com/start",
                       "region": "eu-west-1", "accessToken": "sso-access-"
                       "token-0123456789", "expiresAt": expires}, f)
    login(time.strftime("%Y-%m-%dT%H:%M:%SZ",
                        time.gmtime(time.time() + 3600)))
    with SsoPortal(t.s3, "sso-access-token-0123456789", "123456789012",
                   "Writer") as p:
        env = t.base(AWS_CONFIG_FILE=conf, AWS_PROFILE="dev",
                     AWS_ENDPOINT_URL_SSO=p.url)
        used = t.upload("SSO", env)
        t.c.eq("SSO: the role's keys", used, {x[0] for x in p.issued})
        login("2020-01-01T00:00:00Z")
        got = ckpt("ls", "--no-progress", "s3://%s/creds" % B, env=env)
        t.c.eq("SSO: an expired login", ls_failed(got), (1, [(
               "s3://%s/creds" % B, "s3://%s/: profile 'dev' (SSO): the "
               "SSO token cached in '%s' has expired: run 'aws sso login "
               "--profile dev'" % (B, path))], []))
        os.unlink(path)
        got = ckpt("ls", "--no-progress", "s3://%s/creds" % B, env=env)
        t.c.eq("SSO: never logged in", ls_failed(got), (1, [(
               "s3://%s/creds" % B, "s3://%s/: profile 'dev' (SSO): no SSO "
               "token cached in '%s': run 'aws sso login --profile dev'"
               % (B, path))], []))


def process(t):
    t.s3.add_key("ASIAPROCESS0001", "process-secret", token="proc-token")
    script = t.write("helper.py", "#!/usr/bin/python3\nimport json, sys\n"
                     "if sys.argv[1:] != ['--role', 'writer role']:\n"
                     "    sys.exit('bad args %r' % sys.argv[1:])\n"
                     "print(json.dumps({'Version': 1, 'AccessKeyId': "
                     "'ASIAPROCESS0001', 'SecretAccessKey': 'process-secret',"
                     " 'SessionToken': 'proc-token', 'Expiration': "
                     "'2099-01-01T00:00:00Z'}))\n", 0o700)
    conf = t.write("config-proc", "[profile vault]\ncredential_process = "
                   "%s --role 'writer role'\n" % script)
    env = t.base(AWS_CONFIG_FILE=conf, AWS_PROFILE="vault")
    t.c.eq("credential_process: its keys", t.upload("credential_process",
           env), {"ASIAPROCESS0001"})
    fail = t.write("fail.sh", "#!/bin/sh\necho 'vault is sealed' >&2\n"
                   "echo '{\"Version\": 1}'\nexit 3\n", 0o700)
    conf = t.write("config-fail", "[profile vault]\ncredential_process = "
                   "%s\n" % fail)
    got = ckpt("ls", "--no-progress", "s3://%s/creds" % B,
               env=dict(env, AWS_CONFIG_FILE=conf))
    t.c.eq("credential_process: fails", ls_failed(got), (1, [(
           "s3://%s/creds" % B, "s3://%s/: profile 'vault' "
           "(credential_process): '%s' exited with 3: vault is sealed"
           % (B, fail))], []))
    v2 = t.write("v2.sh", "#!/bin/sh\necho '{\"Version\": 2, \"AccessKeyId\":"
                 " \"A\", \"SecretAccessKey\": \"s\"}'\n", 0o700)
    conf = t.write("config-v2", "[profile vault]\ncredential_process = %s\n"
                   % v2)
    got = ckpt("ls", "--no-progress", "s3://%s/creds" % B,
               env=dict(env, AWS_CONFIG_FILE=conf))
    t.c.eq("credential_process: Version 2", ls_failed(got), (1, [(
           "s3://%s/creds" % B, "s3://%s/: profile 'vault' "
           "(credential_process): the output's Version is not 1 (the only "
           "one there is)" % B)], []))


def precedence(t):
    """Every source configured at once; each removed in turn hands over to
    the next, and the ones after it are never asked."""
    tokfile = t.write("web-token-p", "web-token-p")
    t.s3.add_key("AKIAENV000000001", "env-secret")
    t.s3.add_key("AKIAFILE00000001", "file-secret")
    t.s3.add_key("AKIACONF00000001", "conf-secret")
    t.s3.add_key("AKIAPROC00000001", "proc-secret")
    helper = t.write("proc.sh", "#!/bin/sh\necho '{\"Version\": 1, "
                     "\"AccessKeyId\": \"AKIAPROC00000001\", "
                     "\"SecretAccessKey\": \"proc-secret\"}'\n", 0o700)
    creds = t.write("creds-p", "[all]\naws_access_key_id = AKIAFILE00000001\n"
                    "aws_secret_access_key = file-secret\n")
    conf = t.write("config-p", "[profile all]\ncredential_process = %s\n"
                   "aws_access_key_id = AKIACONF00000001\n"
                   "aws_secret_access_key = conf-secret\n"
                   "[profile conf]\naws_access_key_id = AKIACONF00000001\n"
                   "aws_secret_access_key = conf-secret\n"
                   "[profile none]\nregion = us-east-1\n" % helper)
    with Sts(t.s3, "web-token-p", ROLE) as sts, Container(t.s3) as k, \
            Imds(t.s3) as m:
        env = t.base(AWS_ACCESS_KEY_ID="AKIAENV000000001",
                     AWS_SECRET_ACCESS_KEY="env-secret",
                     AWS_ROLE_ARN=ROLE, AWS_WEB_IDENTITY_TOKEN_FILE=tokfile,
                     AWS_ENDPOINT_URL_STS=sts.url,
                     AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=conf,
                     AWS_PROFILE="all",
                     AWS_CONTAINER_CREDENTIALS_FULL_URI=k.uri,
                     AWS_EC2_METADATA_DISABLED="false",
                     AWS_EC2_METADATA_SERVICE_ENDPOINT=m.url)

        def step(what, keys, asked_one=None):
            """keys: the AKIDs that must sign, or the fake whose last
            issued keys must (it alone of the three asked)."""
            fakes = (("sts", sts), ("container", k), ("imds", m))
            before = [len(f.requests) for _, f in fakes]
            used = t.upload("precedence: " + what, env)
            asked = tuple(n for (n, f), b in zip(fakes, before)
                          if len(f.requests) > b)
            if not isinstance(keys, set):
                # (ckpt upload and ckpt ls each asked it once)
                keys = {x[0] for x in keys.issued[-2:]}
            t.c.eq("precedence: %s wins" % what, (used, asked),
                   (keys, (asked_one,) if asked_one else ()))
        step("the environment", {"AKIAENV000000001"})
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        step("web identity", sts, "sts")
        del env["AWS_WEB_IDENTITY_TOKEN_FILE"]
        step("the credentials file", {"AKIAFILE00000001"})
        env["AWS_SHARED_CREDENTIALS_FILE"] = t.write("empty", "")
        step("credential_process", {"AKIAPROC00000001"})
        env["AWS_PROFILE"] = "conf"
        step("the config file", {"AKIACONF00000001"})
        env["AWS_PROFILE"] = "none"
        step("the container", k, "container")
        del env["AWS_CONTAINER_CREDENTIALS_FULL_URI"]
        step("EC2 instance metadata", m, "imds")


def flags(t):
    """aws-cli's --profile, --endpoint-url and --region."""
    t.s3.add_key("AKIAFLAG00000001", "flag-secret")
    creds = t.write("creds-f", "[flagged]\naws_access_key_id = "
                    "AKIAFLAG00000001\naws_secret_access_key = flag-secret\n")
    env = t.base(AWS_SHARED_CREDENTIALS_FILE=creds,
                 AWS_ACCESS_KEY_ID="AKIAWRONG0000001",
                 AWS_SECRET_ACCESS_KEY="wrong")
    t.c.eq("--profile beats the environment's keys", t.upload(
           "--profile", env, "--profile", "flagged"), {"AKIAFLAG00000001"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % s.getsockname()[1]
        e = dict(env, AWS_ENDPOINT_URL=closed, AWS_ENDPOINT_URL_S3=closed)
        t.c.eq("--endpoint-url beats AWS_ENDPOINT_URL(_S3)", t.upload(
               "--endpoint-url", e, "--profile", "flagged",
               "--endpoint-url", t.s3.endpoint), {"AKIAFLAG00000001"})
    t.s3.configure(region="eu-north-1")
    t.upload("--region", dict(env, AWS_REGION="us-east-1"), "--profile",
             "flagged", "--region", "eu-north-1")
    got = ckpt("ls", "--no-progress", "--profile", "flagged",
               "s3://%s/creds" % B, env=env)
    t.s3.configure(region="")
    t.c.eq("without --region: the bucket's region named", ls_failed(got),
           (1, [("s3://%s/creds" % B, "s3://%s/creds: HTTP 400 "
                 "AuthorizationHeaderMalformed (the bucket is in region "
                 "eu-north-1: set AWS_REGION)" % B)], []))
    rc, out, _ = ckpt("upload", "--help")
    t.c.true("--help lists them", rc == 0 and all(
             f in out for f in ("--profile NAME", "--endpoint-url URL",
                                "--region REGION")))
    got = ckpt("ls", "--profile", "nope", "s3://%s/creds" % B, env=env)
    t.c.eq("--profile of no profile", ls_failed(got), (1, [(
           "s3://%s/creds" % B, "s3://%s/: profile 'nope' not found in %s "
           "or %s" % (B, creds, env["AWS_CONFIG_FILE"]))], []))


def refresh(t):
    """Keys that live 20 s, a transfer of about 30 s: asked again before
    they expire (halfway, for keys this short), never used after."""
    big = os.path.join(t.s3.tmp, "slow")
    os.makedirs(big)
    for i in range(14):
        with open(os.path.join(big, "f%02d" % i), "wb") as f:
            f.write(os.urandom(300 * 1024))
    with Imds(t.s3, lifetime=20) as m:
        env = t.base(AWS_EC2_METADATA_DISABLED="false",
                     AWS_EC2_METADATA_SERVICE_ENDPOINT=m.url)
        # Each 300 KiB body trickles at 40 KiB/s on the way back: 7.5 s
        # a GET, 4 at a time (--transfers 4), 4 rounds: the threads share
        # the keys
        # and their refreshes.
        rc, out, err = ckpt("upload", "-q", "--no-progress", big,
                            "s3://%s/slow" % B, env=env)
        t.c.eq("refresh: uploaded", (rc, err), (0, ""))
        t.s3.reset_stats()
        t.s3.configure(trickle_bps=40 * 1024, trickle_match="/slow/")
        start = time.time()
        down = os.path.join(t.s3.tmp, "down")
        rc, out, err = ckpt("upload", "-q", "--no-progress", "--transfers",
                            "4", "s3://%s/slow" % B, down, env=env)
        took = time.time() - start
        t.s3.configure(trickle_bps=0, trickle_match="")
        st = t.s3.stats()
        t.c.eq("refresh: downloaded", (rc, err), (0, ""))
        t.c.true("refresh: it took longer than the keys live (%.0f s)"
                 % took, took > 25)
        # (one set for the upload, then one per refresh: every 10 s, not
        # once per thread)
        t.c.true("refresh: asked again, used each, one thread asking "
                 "(%d sets)" % len(m.issued), 3 <= len(m.issued) <= 6 and
                 len(st["keys_used"]) >= 2)
        t.c.eq("refresh: none used after it expired", st["expired"], 0)


def refresh_fails(t):
    """The metadata service goes away during a transfer: its keys are
    used while they last (but never in their last seconds), then every
    request fails naming the source, and none reaches the service with
    keys that have expired."""
    with Imds(t.s3, lifetime=20) as m:
        env = t.base(AWS_EC2_METADATA_DISABLED="false",
                     AWS_EC2_METADATA_SERVICE_ENDPOINT=m.url)
        t.s3.reset_stats()
        t.s3.configure(trickle_bps=150 * 1024, trickle_match="/slow/")
        p = subprocess.Popen([CKPT, "upload", "-q", "--no-progress",
                              "--transfers", "1", "s3://%s/slow" % B,
                              os.path.join(t.s3.tmp, "down2")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        deadline = time.time() + 60
        while not m.issued and time.time() < deadline:
            time.sleep(0.1)
        m.stop()
        out, err = p.communicate(timeout=300)
        t.s3.configure(trickle_bps=0, trickle_match="")
        st = t.s3.stats()
        rows = [r.split("\t") for r in file_rows(out)]
        why = {re.sub(r" after \d+ ms", "", r[3].split(": ", 1)[1])
               for r in rows if r[0] == "error"}
        t.c.eq("refresh fails: the rest fail, naming the source", (
               p.returncode, why), (1, {"EC2 instance metadata %s: Failed "
                                        "to connect to 127.0.0.1 port %d: "
                                        "Couldn't connect to server" % (
                                            m.url, m.port)}))
        t.c.true("refresh fails: the keys used while they lasted (%d of 14 "
                 "files)" % (14 - len(rows)), 14 - len(rows) >= 4)
        t.c.eq("refresh fails: none used after it expired", st["expired"], 0)


def nowhere(t):
    """No credentials anywhere: one error naming every place looked at."""
    env = t.base()
    rc, out, err = ckpt("upload", "--no-progress", t.src, "s3://%s/x" % B,
                        env=env)
    t.c.eq("nowhere: one error, every place named", (rc, out, lines(err)), (
           1, "", ["ckpt: error: s3://%s/: no credentials: none in the "
                   "environment (AWS_ACCESS_KEY_ID), web identity "
                   "(AWS_WEB_IDENTITY_TOKEN_FILE), profile 'default' of %s "
                   "and %s (keys, credential_process, SSO), container "
                   "credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or "
                   "_FULL_URI); EC2 instance metadata is off "
                   "(AWS_EC2_METADATA_DISABLED)" % (
                       B, env["AWS_SHARED_CREDENTIALS_FILE"],
                       env["AWS_CONFIG_FILE"])]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % s.getsockname()[1]
        env = t.base(AWS_EC2_METADATA_DISABLED="false",
                     AWS_EC2_METADATA_SERVICE_ENDPOINT=closed)
        got = ckpt("ls", "--no-progress", "s3://%s/x" % B, env=env)
        t.c.eq("nowhere, EC2 metadata not answering: no retry said, one "
               "error", ls_failed(got), (1, [(
                   "s3://%s/x" % B,
                   "s3://%s/: no credentials: none in the "
                   "environment (AWS_ACCESS_KEY_ID), web identity "
                   "(AWS_WEB_IDENTITY_TOKEN_FILE), profile 'default' of %s "
                   "and %s (keys, credential_process, SSO), container "
                   "credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or "
                   "_FULL_URI); EC2 instance metadata %s: Failed to connect "
                   "to 127.0.0.1 port %s: Couldn't connect to server" % (
                       B, env["AWS_SHARED_CREDENTIALS_FILE"],
                       env["AWS_CONFIG_FILE"], closed, closed.split(":")[-1])
               )], []))
    # The guard: ECS's own address is never asked from a test.
    env = t.base(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI="/v2/credentials/x")
    got = ckpt("ls", "--no-progress", "s3://%s/x" % B, env=env)
    t.c.eq("guard: 169.254.170.2 not asked", ls_failed(got), (1, [(
           "s3://%s/x" % B, "s3://%s/: container credentials "
           "http://169.254.170.2/v2/credentials/x: not asked: 169.254.170.2 "
           "is not a loopback address and CKPT_TEST_LOOPBACK_ONLY is set"
           % B)], []))


def main():
    c = Checker()
    with S3Env(buckets=[B]) as s3:
        t = T(c, s3)
        for case in (imds, container, web_identity, sso, process, precedence,
                     flags, nowhere, refresh, refresh_fails):
            case(t)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
