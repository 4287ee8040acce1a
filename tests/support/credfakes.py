"""credfakes.py - fakes of the services that hand out cloud credentials,
each a small HTTP server on 127.0.0.1, for tests that give ckpt no keys but
a source of them. ckpt finds a fake only through that source's own
override variable (AWS_EC2_METADATA_SERVICE_ENDPOINT, the container URI,
AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL_SSO, GCE_METADATA_HOST/_IP, a JSON
key's token_uri), exactly as it would find the real service: it never
knows it talks to a fake.

Every key or token a fake hands out is made up there and registered with
the S3 proxy of the test's S3Env (add_key with its session token and
expiry, add_bearer), so a request signed with anything else, or after the
expiry, is refused there (400 ExpiredToken, 401); stats()["keys_used"]
says which keys signed how many requests.

    from credfakes import Imds, Sts
    with S3Env() as s3, Imds(s3, lifetime=20) as imds:
        env = dict(s3.env(), AWS_EC2_METADATA_DISABLED="false",
                   AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url)
        imds.issued        # [(akid, secret, token, expires)] in order
        imds.requests      # [(method, path, {header: value}, body)]

Imds        IMDSv2: PUT /latest/api/token needs the TTL header (1..21600,
            echoed back); the role name and the role's JSON need the token.
            role=None: no role attached (404).
Container   the ECS / EKS Pod Identity endpoint: GET PATH, Authorization
            must be `auth` when set.
Sts         AssumeRoleWithWebIdentity, unsigned POST: the token must be
            `web_token` (a callable is asked each time: the file's current
            content), RoleArn `role_arn`; XML with an Expiration.
SsoPortal   GET /federation/credentials: x-amz-sso_bearer_token must be
            `access_token`; roleCredentials with expiration in ms.
GceMetadata the GCE metadata server: every request needs Metadata-Flavor:
            Google and every reply carries it (flavor_reply=False leaves it
            out: not the real server); GET / is the probe, the default
            service account's token is a bearer token.
OAuth       a token endpoint: grant_type=refresh_token with the client ID,
            secret and refresh token it was given; a bearer token.
lifetime    seconds what a fake issues lives (default 3600).
"""
import datetime
import http.server
import json
import secrets
import socketserver
import threading
import time
import urllib.parse


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc) \
        .strftime("%Y-%m-%dT%H:%M:%SZ")


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Fake:
    """One fake service; subclasses answer in route(handler, body)."""
    name = "fake"

    def __init__(self, s3, lifetime=3600):
        self.s3 = s3
        self.lifetime = lifetime
        self.issued = []
        self.requests = []
        self.lock = threading.Lock()
        self.down = False
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_any(self):
                if fake.down:
                    # Stopped: a kept-alive connection gets no answer
                    # either (the client's next connection is refused).
                    self.close_connection = True
                    return
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with fake.lock:
                    fake.requests.append((self.command, self.path,
                                          dict(self.headers.items()), body))
                status, headers, data = fake.route(self, body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_any

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        """Stop answering, on kept-alive connections too."""
        self.down = True
        self.server.shutdown()
        self.server.server_close()

    def keys(self):
        """New temporary keys, registered with the S3 proxy."""
        n = len(self.issued) + 1
        akid = "ASIA%s%04d%s" % (self.name.upper()[:4], n,
                                 secrets.token_hex(4).upper())
        secret = secrets.token_urlsafe(30)
        token = "%s-session-%s" % (self.name, secrets.token_urlsafe(48))
        expires = int(time.time()) + self.lifetime
        self.s3.add_key(akid, secret, token=token, expires=expires)
        with self.lock:
            self.issued.append((akid, secret, token, expires))
        return akid, secret, token, expires

    def bearer(self):
        tok = "ya29.%s-%s" % (self.name, secrets.token_urlsafe(32))
        expires = int(time.time()) + self.lifetime
        self.s3.add_bearer(tok, expires=expires)
        with self.lock:
            self.issued.append((tok, expires))
        return tok

    def count(self, method=None, path=None):
        with self.lock:
            return sum(1 for r in self.requests
                       if (method is None or r[0] == method) and
                       (path is None or r[1].startswith(path)))


def _json(status, obj, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return status, h, json.dumps(obj).encode()


def _text(status, text, headers=None):
    h = {"Content-Type": "text/plain"}
    h.update(headers or {})
    return status, h, text.encode()


class Imds(Fake):
    name = "imds"
    TTL = "X-aws-ec2-metadata-token-ttl-seconds"
    ROLE_PATH = "/latest/meta-data/iam/security-credentials/"

    def __init__(self, s3, lifetime=3600, role="ckpt-test-role"):
        self.role = role
        self.tokens = {}
        super().__init__(s3, lifetime)

    def route(self, h, body):
        if h.command == "PUT" and h.path == "/latest/api/token":
            ttl = h.headers.get(self.TTL, "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return _text(400, "")
            tok = secrets.token_urlsafe(40)
            self.tokens[tok] = time.time() + int(ttl)
            return _text(200, tok, {self.TTL: ttl})
        tok = h.headers.get("X-aws-ec2-metadata-token")
        if h.command != "GET" or tok not in self.tokens or \
                time.time() > self.tokens[tok]:
            return _text(401, "")
        if h.path == self.ROLE_PATH:
            return _text(200, self.role) if self.role else _text(404, "")
        if self.role and h.path == self.ROLE_PATH + self.role:
            akid, secret, token, expires = self.keys()
            return _json(200, {"Code": "Success", "LastUpdated":
                               iso(time.time()), "Type": "AWS-HMAC",
                               "AccessKeyId": akid, "SecretAccessKey": secret,
                               "Token": token, "Expiration": iso(expires)})
        return _text(404, "")


class Container(Fake):
    name = "ecs"

    def __init__(self, s3, lifetime=3600, path="/v1/credentials", auth=None):
        self.path = path
        self.auth = auth
        super().__init__(s3, lifetime)

    @property
    def uri(self):
        return self.url + self.path

    def route(self, h, body):
        if h.command != "GET" or h.path != self.path:
            return _text(404, "")
        if self.auth is not None and h.headers.get("Authorization") != \
                self.auth:
            return _json(401, {"code": "AccessDenied"})
        akid, secret, token, expires = self.keys()
        return _json(200, {"RoleArn": "arn:aws:iam::1:role/task",
                           "AccessKeyId": akid, "SecretAccessKey": secret,
                           "Token": token, "Expiration": iso(expires)})


class Sts(Fake):
    name = "sts"

    def __init__(self, s3, web_token, role_arn, lifetime=3600):
        self.web_token = web_token
        self.role_arn = role_arn
        self.forms = []
        super().__init__(s3, lifetime)

    def error(self, code, msg):
        return 400, {"Content-Type": "text/xml"}, (
            "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/"
            "2011-06-15/\"><Error><Type>Sender</Type><Code>%s</Code>"
            "<Message>%s</Message></Error><RequestId>fake</RequestId>"
            "</ErrorResponse>" % (code, msg)).encode()

    def route(self, h, body):
        form = {k: v[0] for k, v in urllib.parse.parse_qs(
            body.decode(), keep_blank_values=True).items()}
        with self.lock:
            self.forms.append(form)
        want = self.web_token() if callable(self.web_token) \
            else self.web_token
        if h.command != "POST" or h.path != "/" or \
                form.get("Action") != "AssumeRoleWithWebIdentity" or \
                form.get("Version") != "2011-06-15":
            return self.error("InvalidAction", "not a web identity call")
        if form.get("WebIdentityToken") != want:
            return self.error("InvalidIdentityToken", "token not valid")
        if form.get("RoleArn") != self.role_arn or \
                not form.get("RoleSessionName"):
            return self.error("AccessDenied", "not authorized")
        akid, secret, token, expires = self.keys()
        return 200, {"Content-Type": "text/xml"}, (
            "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts."
            "amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult>"
            "<SubjectFromWebIdentityToken>system:serviceaccount:ns:sa"
            "</SubjectFromWebIdentityToken><AssumedRoleUser><Arn>%s/%s</Arn>"
            "<AssumedRoleId>AROA:x</AssumedRoleId></AssumedRoleUser>"
            "<Credentials><SessionToken>%s</SessionToken><SecretAccessKey>%s"
            "</SecretAccessKey><Expiration>%s</Expiration><AccessKeyId>%s"
            "</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
            "<ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata>"
            "</AssumeRoleWithWebIdentityResponse>" % (
                self.role_arn, form["RoleSessionName"], token, secret,
                iso(expires), akid)).encode()


class SsoPortal(Fake):
    name = "sso"

    def __init__(self, s3, access_token, account, role, lifetime=3600):
        self.access_token = access_token
        self.account = account
        self.role = role
        super().__init__(s3, lifetime)

    def route(self, h, body):
        u = urllib.parse.urlsplit(h.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query).items()}
        if h.command != "GET" or u.path != "/federation/credentials":
            return _json(404, {"message": "not found"})
        if h.headers.get("x-amz-sso_bearer_token") != self.access_token:
            return _json(401, {"message": "Session token not found or "
                               "invalid"})
        if q.get("account_id") != self.account or \
                q.get("role_name") != self.role:
            return _json(403, {"message": "No access"})
        akid, secret, token, expires = self.keys()
        return _json(200, {"roleCredentials": {
            "accessKeyId": akid, "secretAccessKey": secret,
            "sessionToken": token, "expiration": expires * 1000}})


class GceMetadata(Fake):
    name = "gce"
    TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/" \
                 "token"

    def __init__(self, s3, lifetime=3600, flavor_reply=True):
        self.flavor_reply = flavor_reply
        super().__init__(s3, lifetime)

    @property
    def host(self):
        return "127.0.0.1:%d" % self.port

    def route(self, h, body):
        hdrs = {"Metadata-Flavor": "Google"} if self.flavor_reply else {}
        if h.headers.get("Metadata-Flavor") != "Google":
            return _text(403, "Missing Metadata-Flavor:Google header.",
                         hdrs)
        path = urllib.parse.urlsplit(h.path).path
        if h.command == "GET" and path == "/":
            return _text(200, "computeMetadata/\n", hdrs)
        if h.command == "GET" and path == self.TOKEN_PATH:
            return _json(200, {"access_token": self.bearer(),
                               "expires_in": self.lifetime,
                               "token_type": "Bearer"}, hdrs)
        return _text(404, "", hdrs)


class OAuth(Fake):
    name = "oauth"

    def __init__(self, s3, client_id, client_secret, refresh_token,
                 lifetime=3600):
        self.client = (client_id, client_secret, refresh_token)
        super().__init__(s3, lifetime)

    @property
    def token_uri(self):
        return self.url + "/token"

    def route(self, h, body):
        form = {k: v[0] for k, v in urllib.parse.parse_qs(
            body.decode()).items()}
        if h.command != "POST" or h.path != "/token":
            return _json(404, {"error": "not_found"})
        if form.get("grant_type") != "refresh_token":
            return _json(400, {"error": "unsupported_grant_type"})
        if (form.get("client_id"), form.get("client_secret"),
                form.get("refresh_token")) != self.client:
            return _json(400, {"error": "invalid_grant",
                               "error_description": "Bad Request"})
        return _json(200, {"access_token": self.bearer(),
                           "expires_in": self.lifetime,
                           "scope": "https://www.googleapis.com/auth/"
                                    "devstorage.read_write",
                           "token_type": "Bearer"})
