#!/usr/bin/python3
"""s3proxy.py - a verifying, fault-injecting HTTP proxy in front of s3rver.

s3rver 3.7.1 does not check SigV4 signatures, so every request is checked
here first: the signature is recomputed with botocore's S3SigV4Auth from
what arrived on the wire (decoded and re-encoded path and query, the
SignedHeaders, x-amz-content-sha256 against the body) and a mismatch is
answered 403 SignatureDoesNotMatch, as AWS would. Bearer tokens issued by
the proxy's own OAuth token endpoint (/__proxy/token, which verifies the
RS256 JWT assertion with the service account's public key) are accepted
instead of SigV4 for the GCS OAuth tests.

It also emulates what s3rver lacks (so tests can exercise those paths):
  * PUT with If-None-Match: * answers 412 PreconditionFailed when the
    object exists (s3rver ignores conditional PUT headers); atomic only
    among requests through this proxy;
  * PUT and DELETE with If-Match (ETag) or x-goog-if-generation-match
    (GCS) answer 412 when the object changed (404 when gone; generation
    "0" means "must not exist"), and replies with an ETag carry
    x-goog-generation, derived from the ETag (s3rver has no generations:
    distinct contents get distinct generations); config conditional=false
    switches all conditional-write enforcement off, "create" keeps only
    the create-only ones (If-None-Match: *, generation 0), to show what a
    service that ignores the headers would let happen; cond_conflict N
    answers the next N conditional writes 409 ConditionalRequestConflict,
    as S3 does when conditional writes to one key race; every request on
    a key once written conditionally is serialised with those writes, as
    S3's atomic object writes are (s3rver writes in place: a GET could see
    half an object, or one PUT's bytes with another's ETag);
  * If-Match / If-None-Match with ETags on object GET, HEAD and PUT are
    enforced against the object's current ETag (s3rver ignores them): a
    failed If-Match, or a matching If-None-Match on PUT, answers 412
    PreconditionFailed; a matching If-None-Match on GET/HEAD answers 304.
    The check is a HEAD just before the request is forwarded;
  * AbortMultipartUpload (DELETE ?uploadId=) answers 204 (s3rver: 405);
  * a ranged GET of an empty object answers 416 InvalidRange, as S3 does
    (s3rver sends 206 with Content-Length: 1 and no body, then hangs).

Faults, chosen per request at random (seeded):
  slowdown  fraction answered 503 SlowDown
  r2_429    fraction answered 429 with R2's "Reduce your concurrent request
            rate for the same object."
  reset     fraction of GET responses cut mid-body (TCP reset)
  slow_ms   delay before each 64 KiB of a response body
  trickle_bps, trickle_match  response bodies of requests whose path
            contains trickle_match ("" = all) are sent at trickle_bps
            bytes per second (0: off), a few bytes at a time: an endpoint
            that never stalls outright but never finishes either
  fault_next  the next N requests that may get faults (methods,
            fault_match) get one for sure, 503 SlowDown and reset
            alternately (SlowDown first), whatever the fractions say: a
            test that needs faults where a seeded draw may give none
  fault_next_kind  "slowdown" or "reset": fault_next's faults are all of
            that kind ("" = alternate)
  methods   only requests with these methods get faults ("" = all)
  fault_match  only requests whose path contains this get faults ("" = all)
  complete_error  the next N CompleteMultipartUpload requests are answered
            200 with an <Error> body (InternalError), as S3 may
  no_batch_delete  answer DeleteObjects 501 NotImplemented, as GCS did
  region    the bucket's region: requests signed for another answer 400
            AuthorizationHeaderMalformed with x-amz-bucket-region, as AWS
  delete_key_errors  in the next DeleteObjects, report this many keys as
            <Error> InternalError (and do not delete them), as S3 may
  delete_delay_ms  hold each DeleteObjects or DELETE this long before it
            is forwarded (a loaded server: the delete lands after its
            client may have died)
  put_before_delete  {"path": "/BUCKET/KEY", "body": "..."}: before the
            next DeleteObjects or DELETE is forwarded, store this object
            (once): a writer racing a tree delete, deterministically
  corrupt_put  the next N PUTs of whole objects (not parts) whose path
            contains corrupt_match have one body byte flipped before they
            are forwarded (after the signature check), as a bad link or
            NIC could: s3rver stores them and answers the MD5 of what it
            stored as ETag
  reset_writes  "reset" faults also hit PUT/POST: the request reaches
            s3rver (it is stored), then the connection is reset before
            any reply, so the client must repeat a request that succeeded
  echo_headers  the next N requests (-1: all) are answered echo_status
            (default 400) with an <Error> that quotes the request line and
            every header, credentials included, in its Code, Message and a
            Request element, as a careless server or proxy may
  list_max_keys  ListObjectsV2 requests are forwarded asking for at most
            this many keys a page (0: as asked), so that a small bucket
            lists in many pages
  list_fault  what ListObjectsV2 pages say about the next one, as a
            faulty or hostile service might: "no_token" (a truncated
            page without NextContinuationToken), "repeat_token" (a
            truncated page answered to a continuation token gives that
            same token again), "" (as s3rver says)
  list_inject, list_inject_match  add a <Contents> entry for the key
            list_inject (its size and ETag as s3rver has them, or 1 and a
            made-up one) to every ListObjectsV2 page whose prefix starts
            with list_inject_match: a key outside the prefix listed, or
            one with "//"
  put_before_list  {"path": "/BUCKET/KEY", "body": "...", "match":
            "PREFIX", "skip": N}: before the (N+1)-th ListObjectsV2 whose
            prefix starts with match is forwarded, store this object
            (once): DEST changed between a check and the listing that
            confirms it
  opaque_etag  every ETag the client sees (reply headers, listings,
            CompleteMultipartUpload) is "k1-" + s3rver's, so it is no MD5
            of the bytes (as with SSE-KMS, or a GCS composite object);
            If-Match / If-None-Match from the client are mapped back
  goog_hash  object HEAD/GET replies carry x-goog-hash, computed from
            the object's bytes as GCS does: "crc32c" (only, as for a GCS
            composite object), "md5" (only) or "both"; "" none
  get_delay_ms, get_delay_nth, get_delay_match  the get_delay_nth-th GET
            whose path contains get_delay_match waits get_delay_ms before
            it is checked and forwarded (stats "delayed" counts such GETs
            once they start waiting): a window to replace the object in
  deny      requests whose (decoded) path contains this are answered 403
            AccessDenied once their signature checked out ("" = none)
Set them with flags, or at run time: POST /__proxy/config {"slowdown":0.3}.
Keys: S3RVER/S3RVER, each --key, and those added at run time with POST
/__proxy/keys {"akid", "secret", "token", "expires"} (token: the session
token every request must carry and sign, or null; expires: epoch seconds
after which requests answer 400 ExpiredToken, or null); POST
/__proxy/bearer {"token", "expires"} accepts a bearer token (a credential
fake's) until expires (then 401). Stats "keys_used" counts the requests
each AKID (or "bearer TOKEN") signed; "expired" those refused for it.
Counters: GET /__proxy/stats (JSON), POST /__proxy/reset zeroes them;
"connections" (not zeroed) is how many connections are open, the asking
one included.
"object_gets" counts the object GETs that succeeded (listings excluded):
"ranged" (with a Range header) and "whole", their "bytes", the largest
body ("max_body") and per object path "keys": [GETs, bytes].

Listens on 127.0.0.1 only; prints "s3proxy listening on 127.0.0.1:PORT".
Exits by itself after --max-seconds.
"""
import argparse
import base64
import datetime
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

from xml.sax.saxutils import escape as xml_escape

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer",
       "upgrade", "proxy-authorization", "proxy-authenticate", "expect"}
AUTH_HEADERS = {"authorization", "x-amz-security-token", "x-amz-date",
                "x-amz-content-sha256"}
R2_MSG = "Reduce your concurrent request rate for the same object."


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.cond_lock = threading.Lock()
        self.cond_paths = set()   # keys written conditionally
        self.upstream = args.upstream
        # AKID -> (secret, session token or None, expiry (epoch) or None)
        self.keys = {"S3RVER": ("S3RVER", None, None)}
        for spec in args.key or []:
            parts = spec.split(":")
            self.keys[parts[0]] = (parts[1], parts[2] if len(parts) > 2
                                   else None, None)
        self.require_auth = not args.allow_anonymous
        self.config = {"slowdown": args.slowdown, "r2_429": args.r2_429,
                       "reset": args.reset, "slow_ms": args.slow_ms,
                       "methods": args.fault_methods, "token_ttl": 3600,
                       "complete_error": 0, "no_batch_delete": False,
                       "delete_key_errors": 0, "region": "",
                       "reset_writes": False, "echo_headers": 0,
                       "echo_status": 400, "conditional": True,
                       "cond_conflict": 0, "put_before_delete": None,
                       "get_delay_ms": 0, "get_delay_nth": 0,
                       "get_delay_match": "", "fault_match": "",
                       "corrupt_put": 0, "corrupt_match": "",
                       "fault_next": 0, "fault_next_kind": "",
                       "trickle_bps": 0,
                       "trickle_match": "", "delete_delay_ms": 0,
                       "deny": "",
                       "list_max_keys": 0, "list_fault": "",
                       "list_inject": "", "list_inject_match": "",
                       "opaque_etag": False, "goog_hash": "",
                       "put_before_list": None}
        self.get_seen = 0
        self.connections = 0
        self.rng = random.Random(args.seed)
        self.sa_pubkey = args.sa_pubkey
        self.sa_email = args.sa_email
        self.tokens = {}   # bearer token -> expiry (epoch) or None
        self.reset_stats()

    def reset_stats(self):
        with self.lock:
            self.stats = {"requests": 0, "methods": {}, "statuses": {},
                          "bytes_in": 0, "bytes_out": 0, "get_requests": 0,
                          "get_bytes": 0, "put_bytes": 0,
                          "faults": {"slowdown": 0,
                          "r2_429": 0, "reset": 0, "complete_error": 0,
                          "corrupt_put": 0, "list": 0,
                          "no_batch_delete": 0, "delete_key_errors": 0},
                          "sig_ok": 0,
                          "sig_fail": 0, "bearer_ok": 0, "tokens_issued": 0,
                          "keys_used": {}, "expired": 0,
                          "delayed": 0,
                          "emulated": {"if_none_match": 0, "abort": 0,
                                       "empty_range": 0, "if_match": 0,
                                       "precondition": 0},
                          "conditions": {},
                          "object_gets": {"ranged": 0, "whole": 0,
                                          "bytes": 0, "max_body": 0,
                                          "keys": {}}}

    def count(self, key, n=1, sub=None):
        with self.lock:
            if sub is None:
                self.stats[key] += n
            else:
                d = self.stats[key]
                d[sub] = d.get(sub, 0) + n

    def draw(self, method, path=""):
        """The fault (or None) for one request."""
        with self.lock:
            c = self.config
            if c["methods"] and method not in c["methods"].split(","):
                return None
            if c["fault_match"] and c["fault_match"] not in path:
                return None
            if c["fault_next"] > 0:
                c["fault_next"] -= 1
                if c["fault_next_kind"]:
                    return c["fault_next_kind"]
                return "reset" if c["fault_next"] % 2 == 0 else "slowdown"
            x = self.rng.random()
            for name in ("slowdown", "r2_429", "reset"):
                if x < c[name]:
                    return name
                x -= c[name]
        return None


def error_xml(code, message, extra=""):
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s"
            "</Code><Message>%s</Message>%s<RequestId>s3proxy</RequestId>"
            "</Error>" % (code, message, extra)).encode()


def parse_auth(value):
    """AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..."""
    algo, _, rest = value.partition(" ")
    fields = {}
    for part in rest.split(","):
        k, _, v = part.strip().partition("=")
        fields[k] = v
    return algo, fields


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s3proxy"

    def log_message(self, fmt, *args):
        pass

    @property
    def st(self):
        return self.server.state

    def do_GET(self):
        self.handle_any()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    # -- plumbing --------------------------------------------------------

    def read_body(self):
        """The request body, or None when the client went away before
        sending all of it (killed mid-PUT): a service never acts on such
        a request, so neither does the proxy."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                line = self.rfile.readline()
                try:
                    size = int(line.split(b";")[0], 16)
                except ValueError:
                    return None
                if size == 0:
                    self.rfile.readline()
                    return out
                chunk = self.rfile.read(size)
                if len(chunk) < size:
                    return None
                out += chunk
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        return body if len(body) == n else None

    def reply(self, status, body=b"", headers=None, method=None):
        self.send_response(status)
        hdrs = dict(headers or {})
        hdrs.setdefault("Content-Length", str(len(body)))
        if body and "Content-Type" not in hdrs:
            hdrs["Content-Type"] = "application/xml"
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        if (method or self.command) != "HEAD" and body:
            self.write_body(body)
        self.st.count("statuses", sub=str(status))

    def write_body(self, body):
        bps = self.st.config["trickle_bps"]
        if bps and self.st.config["trickle_match"] in self.path:
            return self.trickle(body, bps)
        slow = self.st.config["slow_ms"]
        for i in range(0, len(body), 65536):
            if slow:
                time.sleep(slow / 1000.0)
            chunk = body[i:i + 65536]
            self.wfile.write(chunk)
            self.st.count("bytes_out", len(chunk))
            if self.command == "GET":
                self.st.count("get_bytes", len(chunk))

    def trickle(self, body, bps):
        """body at bps bytes per second, in tenths of a second; a client
        that gives up closes the connection."""
        step = max(1, bps // 10)
        try:
            for i in range(0, len(body), step):
                self.wfile.write(body[i:i + step])
                self.wfile.flush()
                self.st.count("bytes_out", len(body[i:i + step]))
                time.sleep(step / float(bps))
        except OSError:
            self.close_connection = True

    def reset_mid_body(self, status, headers, body):
        """Send the headers and half the body, then a TCP reset."""
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        half = body[:max(1, len(body) // 2)]
        self.wfile.write(half)
        self.wfile.flush()
        self.st.count("bytes_out", len(half))
        self.st.count("get_bytes", len(half))
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def reset_no_reply(self):
        """The request was carried out; the reply is lost to a reset."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    # -- request handling ------------------------------------------------

    def handle_any(self):
        path = self.path
        if path.startswith("/__proxy/"):
            return self.control(path)
        body = self.read_body()
        if body is None:
            self.close_connection = True
            return
        st = self.st
        echo = self.echo()
        if echo:
            return self.reply(*echo)
        st.count("requests")
        st.count("methods", sub=self.command)
        st.count("bytes_in", len(body))
        if self.command == "PUT":
            st.count("put_bytes", len(body))
        if self.command == "GET":
            st.count("get_requests")
        denied = self.authenticate(body) or self.deny(path)
        if denied:
            return self.reply(*denied)
        self.unmap_etags()
        fault = st.draw(self.command, path)
        if fault == "slowdown":
            st.count("faults", sub="slowdown")
            return self.reply(503, error_xml("SlowDown", "Please reduce "
                              "your request rate."))
        if fault == "r2_429":
            st.count("faults", sub="r2_429")
            return self.reply(429, error_xml("TooManyRequests", R2_MSG))
        special = self.special_fault(path)
        if special:
            return self.reply(*special)
        body = self.maybe_corrupt(path, body)
        self.maybe_delay(path)
        cond = (self.command == "PUT" and
                self.headers.get("If-None-Match", "").strip() == "*")
        cond = self.count_conditions() or cond
        if cond and self.take_conflict():
            return self.reply(409, error_xml("ConditionalRequestConflict",
                              "A conflicting operation occurred. If using "
                              "PutObject you can retry the request."))
        # A conditional write is HEAD + PUT/DELETE under one lock; other
        # requests on its key wait for it (atomic objects).
        key_path = urllib.parse.urlsplit(path).path
        with st.lock:
            if cond:
                st.cond_paths.add(key_path)
            cond = cond or key_path in st.cond_paths
        with st.cond_lock if cond else _NoLock():
            emulated = self.emulate(path) or self.conditions(path)
            if emulated:
                return self.reply(*emulated)
            self.race_delete(path)
            self.delay_delete(path)
            failed_keys = self.drop_delete_keys(path, body)
            if failed_keys:
                body = failed_keys[0]
            listing = self.list_request(path)
            status, headers, rbody = self.forward(body)
            if listing and status == 200:
                rbody = self.list_rewrite(listing, rbody)
                headers["Content-Length"] = str(len(rbody))
            if failed_keys:
                rbody = self.add_key_errors(rbody, failed_keys[1])
                headers["Content-Length"] = str(len(rbody))
            add_generation(headers)
            self.goog_hash(path, status, headers, rbody)
            rbody = self.map_etags(headers, rbody)
        if fault == "reset" and self.command == "GET" and len(rbody) > 1:
            st.count("faults", sub="reset")
            return self.reset_mid_body(status, headers, rbody)
        if (fault == "reset" and self.command in ("PUT", "POST") and
                st.config["reset_writes"]):
            st.count("faults", sub="reset")
            return self.reset_no_reply()
        self.count_object_get(path, status, rbody)
        self.reply(status, rbody, headers)

    def count_object_get(self, path, status, body):
        """Object GETs (not listings) that succeeded: ranged or whole, and
        the largest body, so a test can tell reads in place from
        downloads."""
        if self.command != "GET" or status not in (200, 206):
            return
        if urllib.parse.urlsplit(path).query:
            return  # a listing or another bucket call
        kind = "ranged" if self.headers.get("Range") else "whole"
        with self.st.lock:
            og = self.st.stats["object_gets"]
            og[kind] += 1
            og["bytes"] += len(body)
            og["max_body"] = max(og["max_body"], len(body))
            key = og["keys"].setdefault(
                urllib.parse.unquote(urllib.parse.urlsplit(path).path),
                [0, 0])
            key[0] += 1
            key[1] += len(body)

    def echo(self):
        with self.st.lock:
            c = self.st.config
            if not c["echo_headers"]:
                return None
            if c["echo_headers"] > 0:
                c["echo_headers"] -= 1
            status = c["echo_status"]
        dump = "%s %s\n%s" % (self.command, self.path, "".join(
            "%s: %s\n" % kv for kv in self.headers.items()))
        dump = xml_escape(dump)
        return (status, error_xml("Echo " + dump, dump,
                                  "<Request>%s</Request>" % dump))

    def special_fault(self, path):
        params = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query,
                                       keep_blank_values=True)
        if self.command != "POST":
            return None
        with self.st.lock:
            c = self.st.config
            if "uploadId" in params and c["complete_error"] > 0:
                c["complete_error"] -= 1
                hit = "complete_error"
            elif "delete" in params and c["no_batch_delete"]:
                hit = "no_batch_delete"
            else:
                return None
            self.st.stats["faults"][hit] += 1
        if hit == "complete_error":
            return (200, error_xml("InternalError", "We encountered an "
                    "internal error. Please try again."))
        return (501, error_xml("NotImplemented", "POST ?delete is not "
                "implemented for objects."))

    def maybe_corrupt(self, path, body):
        """corrupt_put: flip one byte of a whole-object PUT's body."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query,
                                      keep_blank_values=True)
        if self.command != "PUT" or not body or "partNumber" in query:
            return body
        with self.st.lock:
            c = self.st.config
            if c["corrupt_put"] <= 0 or c["corrupt_match"] not in path:
                return body
            c["corrupt_put"] -= 1
            self.st.stats["faults"]["corrupt_put"] += 1
        b = bytearray(body)
        b[len(b) // 2] ^= 0x01
        return bytes(b)

    def unmap_etags(self):
        """opaque_etag: the client's If-Match / If-None-Match name
        s3rver's ETags again."""
        if not self.st.config["opaque_etag"]:
            return
        for h in ("If-Match", "If-None-Match"):
            v = self.headers.get(h)
            if v is not None and "k1-" in v:
                self.headers.replace_header(h, v.replace("k1-", ""))

    def map_etags(self, headers, body):
        """opaque_etag: ETags in reply headers and XML bodies get "k1-"."""
        if not self.st.config["opaque_etag"]:
            return body
        for k, v in list(headers.items()):
            if k.lower() == "etag":
                headers[k] = '"k1-%s"' % v.strip('"')
        if body.startswith(b"<?xml") and b"<ETag>" in body:
            body = re.sub(rb"<ETag>(&quot;|\")?", lambda m: b"<ETag>" +
                          (m.group(1) or b"") + b"k1-", body)
            headers["Content-Length"] = str(len(body))
        return body

    def goog_hash(self, path, status, headers, body):
        """goog_hash: x-goog-hash of an object HEAD/GET reply, from the
        object's bytes (a whole GET upstream for a HEAD or a range)."""
        mode = self.st.config["goog_hash"]
        split = urllib.parse.urlsplit(path)
        if (not mode or self.command not in ("HEAD", "GET") or split.query
                or status not in (200, 206)):
            return
        if self.command == "HEAD" or status == 206:
            st, _, body = self.upstream_request("GET", split.path, {}, b"")
            if st != 200:
                return
        vals = []
        if mode in ("crc32c", "both"):
            vals.append("crc32c=" + base64.b64encode(struct.pack(
                ">I", crc32c(body))).decode())
        if mode in ("md5", "both"):
            vals.append("md5=" + base64.b64encode(
                hashlib.md5(body).digest()).decode())
        headers["x-goog-hash"] = ",".join(vals)

    def list_request(self, path):
        """A ListObjectsV2 request: its query (and, with list_max_keys,
        the path forwarded asks for that many keys a page). None for
        other requests."""
        split = urllib.parse.urlsplit(path)
        q = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        if self.command != "GET" or q.get("list-type") != ["2"]:
            return None
        self.put_before_list(q.get("prefix", [""])[0])
        n = self.st.config["list_max_keys"]
        if n:
            q["max-keys"] = [str(min(n, int(q.get("max-keys",
                                                  ["1000"])[0])))]
            self.path = urllib.parse.urlunsplit(split._replace(
                query=urllib.parse.urlencode(q, doseq=True,
                                             quote_via=urllib.parse.quote)))
        return q

    def put_before_list(self, prefix):
        with self.st.lock:
            put = self.st.config["put_before_list"]
            if not put or not prefix.startswith(put.get("match", "")):
                return
            if put.get("skip", 0) > 0:
                put["skip"] -= 1
                return
            self.st.config["put_before_list"] = None
        data = put["body"].encode()
        self.upstream_request("PUT", put["path"],
                              {"Content-Length": str(len(data))}, data)

    def list_rewrite(self, q, body):
        """list_fault and list_inject on one ListObjectsV2 page."""
        c = self.st.config
        text = body.decode()
        hit = False
        truncated = "<IsTruncated>true</IsTruncated>" in text
        if truncated and c["list_fault"] == "no_token":
            text = re.sub(r"<NextContinuationToken>[^<]*"
                          r"</NextContinuationToken>", "", text)
            hit = True
        token = q.get("continuation-token", [""])[0]
        if truncated and c["list_fault"] == "repeat_token" and token:
            text = re.sub(r"<NextContinuationToken>[^<]*"
                          r"</NextContinuationToken>",
                          "<NextContinuationToken>%s</NextContinuationToken>"
                          % xml_escape(token), text)
            hit = True
        key = c["list_inject"]
        if key and q.get("prefix", [""])[0].startswith(
                c["list_inject_match"]):
            status, hdrs, _ = self.upstream_request(
                "HEAD", "/%s/%s" % (urllib.parse.urlsplit(self.path).path
                                    .strip("/").split("/")[0],
                                    urllib.parse.quote(key)), {}, b"")
            h = dict((k.lower(), v) for k, v in hdrs)
            size = h.get("content-length", "1") if status == 200 else "1"
            etag = h.get("etag", '"%s"' % ("0" * 32)) if status == 200 \
                else '"%s"' % ("0" * 32)
            entry = ("<Contents><Key>%s</Key><LastModified>"
                     "2020-01-01T00:00:00.000Z</LastModified><ETag>%s"
                     "</ETag><Size>%s</Size><StorageClass>STANDARD"
                     "</StorageClass></Contents>" % (xml_escape(key),
                                                     xml_escape(etag), size))
            text = text.replace("</ListBucketResult>",
                                entry + "</ListBucketResult>")
            hit = True
        if hit:
            self.st.count("faults", sub="list")
        return text.encode()

    def is_delete(self, path):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query,
                                      keep_blank_values=True)
        return (self.command == "DELETE" and "uploadId" not in query) \
            or (self.command == "POST" and "delete" in query)

    def delay_delete(self, path):
        ms = self.st.config["delete_delay_ms"]
        if ms and self.is_delete(path):
            self.st.count("delayed")
            time.sleep(ms / 1000.0)

    def race_delete(self, path):
        """put_before_delete: store an object just before a delete."""
        if not self.is_delete(path):
            return
        with self.st.lock:
            put = self.st.config["put_before_delete"]
            self.st.config["put_before_delete"] = None
        if put:
            data = put["body"].encode()
            self.upstream_request("PUT", put["path"],
                                  {"Content-Length": str(len(data))}, data)

    def drop_delete_keys(self, path, body):
        """delete_key_errors: take keys out of a DeleteObjects body.
        Returns (new body, dropped keys) or None."""
        if self.command != "POST" or "delete" not in \
                urllib.parse.parse_qs(urllib.parse.urlsplit(path).query,
                                      keep_blank_values=True):
            return None
        with self.st.lock:
            n = self.st.config["delete_key_errors"]
            self.st.config["delete_key_errors"] = 0
            if n:
                self.st.stats["faults"]["delete_key_errors"] += n
        if not n:
            return None
        parts = body.split(b"<Object>")
        keep, dropped = parts[:1], []
        for p in parts[1:]:
            if len(dropped) < n:
                dropped.append(p.split(b"<Key>")[1].split(b"</Key>")[0])
            else:
                keep.append(p)
        new = b"<Object>".join(keep)
        if b"</Delete>" not in new:
            new += b"</Delete>"
        return new, dropped

    def add_key_errors(self, rbody, keys):
        errs = b"".join(b"<Error><Key>" + k + b"</Key><Code>InternalError"
                        b"</Code><Message>We encountered an internal error."
                        b"</Message></Error>" for k in keys)
        return rbody.replace(b"</DeleteResult>", errs + b"</DeleteResult>")

    def maybe_delay(self, path):
        if self.command != "GET":
            return
        with self.st.lock:
            c = self.st.config
            if not c["get_delay_ms"] or c["get_delay_match"] not in path:
                return
            self.st.get_seen += 1
            if self.st.get_seen != c["get_delay_nth"]:
                return
            self.st.stats["delayed"] += 1
            ms = c["get_delay_ms"]
        time.sleep(ms / 1000.0)

    def etag_conditions(self, path, params):
        """If-Match / If-None-Match with ETags on an object request."""
        im = self.headers.get("If-Match")
        inm = self.headers.get("If-None-Match", "").strip()
        key = urllib.parse.urlsplit(path).path.lstrip("/").partition("/")[2]
        if (self.command not in ("GET", "HEAD", "PUT") or not key or
                "uploadId" in params or not (im or inm and inm != "*")):
            return None
        status, hdrs, _ = self.upstream_request("HEAD", path, {}, b"")
        if status != 200:
            return None  # the request itself answers (404 ...)
        cur = dict((k.lower(), v) for k, v in hdrs).get("etag", "")
        cur = cur.strip().strip('"')
        tags = lambda v: [t.strip().strip('"') for t in v.split(",")]
        self.st.count("emulated", sub="if_match")
        failed = None
        if self.command == "PUT":
            im = None  # conditions() checks it, under cond_lock
        if im and im.strip() != "*" and cur not in tags(im):
            failed = "If-Match"
        elif inm and inm != "*" and cur in tags(inm):
            if self.command != "PUT":
                self.st.count("emulated", sub="precondition")
                return (304, b"", {"ETag": '"%s"' % cur})
            failed = "If-None-Match"
        if not failed:
            return None
        self.st.count("emulated", sub="precondition")
        return (412, error_xml("PreconditionFailed", "At least one of the "
                "pre-conditions you specified did not hold",
                "<Condition>%s</Condition>" % failed))

    def emulate(self, path):
        q = urllib.parse.urlsplit(path).query
        params = urllib.parse.parse_qs(q, keep_blank_values=True)
        if self.command == "DELETE" and "uploadId" in params:
            self.st.count("emulated", sub="abort")
            return (204, b"")
        cond = self.etag_conditions(path, params)
        if cond:
            return cond
        if (self.command == "PUT" and self.st.config["conditional"] and
                self.headers.get("If-None-Match", "").strip() == "*" and
                "uploadId" not in params):
            status, _, _ = self.upstream_request("HEAD", path, {}, b"")
            if status == 200:
                self.st.count("emulated", sub="if_none_match")
                return (412, error_xml("PreconditionFailed", "At least "
                        "one of the pre-conditions you specified did "
                        "not hold", "<Condition>If-None-Match"
                        "</Condition>"))
        return None

    # -- conditional writes (If-Match, x-goog-if-generation-match) --------

    def count_conditions(self):
        """Count the precondition headers of a PUT/DELETE (tests check
        which ones were sent); True when there is one."""
        if self.command not in ("PUT", "DELETE"):
            return False
        seen = [h for h in ("If-Match", "x-goog-if-generation-match")
                if self.headers.get(h) is not None]
        for h in seen:
            self.st.count("conditions", sub="%s %s=%s" % (
                self.command, h.lower(), self.headers.get(h).strip()
                if h != "If-Match" else "etag"))
        return bool(seen)

    def take_conflict(self):
        with self.st.lock:
            if self.st.config["cond_conflict"] <= 0:
                return False
            self.st.config["cond_conflict"] -= 1
            return True

    def conditions(self, path):
        """412 (or 404) for a PUT/DELETE whose If-Match ETag or GCS
        generation precondition does not hold; None to go on. Runs under
        cond_lock, so HEAD + write is atomic among requests through here."""
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query,
                                  keep_blank_values=True)
        im = self.headers.get("If-Match")
        gm = self.headers.get("x-goog-if-generation-match")
        mode = self.st.config["conditional"]
        if (self.command not in ("PUT", "DELETE") or "uploadId" in q or
                (im is None and gm is None) or not mode or
                (mode == "create" and (gm or "").strip() != "0")):
            return None
        status, hdrs, _ = self.upstream_request("HEAD", path, {}, b"")
        etag = None
        if status == 200:
            etag = dict((k.lower(), v) for k, v in hdrs).get("etag", "")
            etag = etag.strip().strip('"')
        if gm is not None and gm.strip() == "0":
            ok = etag is None
        elif etag is None:
            return (404, error_xml("NoSuchKey", "The specified key does "
                    "not exist."))
        elif gm is not None:
            ok = generation_of(etag) == gm.strip()
        else:
            ok = im.strip() == "*" or im.strip().strip('"') == etag
        if ok:
            return None
        self.st.count("emulated", sub="if_match")
        return (412, error_xml("PreconditionFailed", "At least one of the "
                "pre-conditions you specified did not hold",
                "<Condition>%s</Condition>" % ("If-Match" if gm is None
                                               else "x-goog-if-generation-"
                                               "match")))

    def upstream_request(self, method, path, headers, body):
        conn = http.client.HTTPConnection(self.st.upstream, timeout=120)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            r = conn.getresponse()
            if r.status == 206 and (r.getheader("Content-Range") or "") \
                    .endswith("/0"):
                self.st.count("emulated", sub="empty_range")
                return 416, [("Content-Type", "application/xml")], \
                    error_xml("InvalidRange", "The requested range is not "
                              "satisfiable")
            data = r.read()
            return r.status, r.getheaders(), data
        finally:
            conn.close()

    def forward(self, body):
        headers = {}
        for k, v in self.headers.items():
            lk = k.lower()
            if lk in HOP or lk in AUTH_HEADERS or lk == "host":
                continue
            if lk in ("if-none-match", "if-match"):
                continue  # enforced here (emulate); s3rver ignores them
            headers[k] = v
        headers["Content-Length"] = str(len(body))
        status, hdrs, data = self.upstream_request(self.command, self.path,
                                                   headers, body)
        out = {}
        for k, v in hdrs:
            if k.lower() not in HOP and k.lower() != "content-length":
                out[k] = v
        out["Content-Length"] = str(len(data))
        if self.command == "HEAD":
            out["Content-Length"] = dict((k.lower(), v) for k, v in hdrs) \
                .get("content-length", "0")
        return status, out, data

    # -- authentication --------------------------------------------------

    def authenticate(self, body):
        auth = self.headers.get("Authorization")
        if not auth:
            if self.st.require_auth:
                return (403, error_xml("AccessDenied", "Anonymous access "
                        "is not allowed"))
            return None
        if auth.startswith("Bearer "):
            if auth[7:] in self.st.tokens:
                exp = self.st.tokens[auth[7:]]
                if exp is not None and time.time() >= exp:
                    self.st.count("expired")
                    return (401, error_xml("AuthenticationRequired",
                            "The access token has expired"))
                self.st.count("bearer_ok")
                self.st.count("keys_used", sub="bearer " + auth[7:])
                return None
            return (401, error_xml("AuthenticationRequired", "Invalid "
                    "bearer token"))
        return self.verify_sigv4(auth, body)

    def deny(self, path):
        """config deny: requests on paths containing it are refused."""
        d = self.st.config["deny"]
        if d and d in urllib.parse.unquote(path):
            return (403, error_xml("AccessDenied", "Access Denied"))
        return None

    def verify_sigv4(self, auth, body):
        algo, f = parse_auth(auth)
        if algo != "AWS4-HMAC-SHA256" or not {"Credential", "SignedHeaders",
                                              "Signature"} <= set(f):
            return (400, error_xml("AuthorizationHeaderMalformed",
                    "Malformed Authorization header"))
        cred = f["Credential"].split("/")
        akid, day, region, service = cred[0], cred[1], cred[2], cred[3]
        if akid not in self.st.keys:
            return (403, error_xml("InvalidAccessKeyId", "Unknown key"))
        want_region = self.st.config["region"]
        if want_region and region != want_region:
            return (400, error_xml("AuthorizationHeaderMalformed", "the "
                    "region '%s' is wrong; expecting '%s'" % (region,
                    want_region), "<Region>%s</Region>" % want_region),
                    {"x-amz-bucket-region": want_region})
        secret, token, expires = self.st.keys[akid]
        if expires is not None and time.time() >= expires:
            self.st.count("expired")
            return (400, error_xml("ExpiredToken", "The provided token has "
                    "expired."))
        signed = f["SignedHeaders"].split(";")
        amz_date = self.headers.get("X-Amz-Date", "")
        sha = self.headers.get("X-Amz-Content-SHA256")
        problem = self.check_fields(signed, amz_date, day, service, sha,
                                    token, body)
        if problem:
            return problem
        want, creq = self.signature(signed, secret, token, akid, region,
                                    amz_date)
        if want != f["Signature"]:
            self.st.count("sig_fail")
            sys.stderr.write("s3proxy: signature mismatch; canonical "
                             "request:\n%s\n" % creq)
            return (403, error_xml("SignatureDoesNotMatch", "The request "
                    "signature we calculated does not match the signature "
                    "you provided.", "<CanonicalRequest>%s</CanonicalRequest>"
                    % creq.replace("&", "&amp;").replace("<", "&lt;")))
        self.st.count("sig_ok")
        self.st.count("keys_used", sub=akid)
        return None

    def check_fields(self, signed, amz_date, day, service, sha, token, body):
        def bad(code, msg, status=403):
            self.st.count("sig_fail")
            return (status, error_xml(code, msg))
        if "host" not in signed or "x-amz-date" not in signed:
            return bad("AccessDenied", "host and x-amz-date must be signed")
        if service != "s3" or amz_date[:8] != day:
            return bad("SignatureDoesNotMatch", "bad credential scope")
        try:
            t = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")
        except ValueError:
            return bad("AccessDenied", "bad x-amz-date")
        skew = abs((datetime.datetime.utcnow() - t).total_seconds())
        if skew > 900:
            return bad("RequestTimeTooSkewed", "time skew too large")
        if token is not None:
            if (self.headers.get("X-Amz-Security-Token") != token or
                    "x-amz-security-token" not in signed):
                return bad("InvalidToken", "bad or unsigned session token")
        if not sha:
            return bad("InvalidRequest", "missing x-amz-content-sha256", 400)
        if sha != "UNSIGNED-PAYLOAD" and \
                sha != hashlib.sha256(body).hexdigest():
            return bad("XAmzContentSHA256Mismatch", "payload hash mismatch",
                       400)
        for h in signed:
            if h not in self.headers:
                return bad("AccessDenied", "signed header %s missing" % h)
        return None

    def signature(self, signed, secret, token, akid, region, amz_date):
        """Recompute as a server does: decode, then re-encode."""
        split = urllib.parse.urlsplit(self.path)
        path = urllib.parse.quote(urllib.parse.unquote(split.path),
                                  safe="/~")
        params = []
        for pair in split.query.split("&") if split.query else []:
            k, _, v = pair.partition("=")
            params.append((urllib.parse.unquote(k),
                           urllib.parse.unquote(v)))
        headers = {h: ",".join(self.headers.get_all(h)) for h in signed}
        host = self.headers.get("Host")
        req = AWSRequest(method=self.command, url="http://%s%s" % (host,
                         path), headers=headers)
        req.params = params
        req.context["timestamp"] = amz_date
        signer = S3SigV4Auth(Credentials(akid, secret, token), "s3", region)
        creq = signer.canonical_request(req)
        sts = signer.string_to_sign(req, creq)
        return signer.signature(sts, req), creq

    # -- control and OAuth -----------------------------------------------

    def control(self, path):
        body = self.read_body()
        if path == "/__proxy/stats":
            with self.st.lock:
                data = json.dumps(dict(self.st.stats, connections=self.st
                                       .connections)).encode()
            return self.reply(200, data, {"Content-Type":
                                          "application/json"})
        if path == "/__proxy/reset" and self.command == "POST":
            self.st.reset_stats()
            return self.reply(204)
        if path == "/__proxy/config" and self.command == "POST":
            with self.st.lock:
                self.st.config.update(json.loads(body or b"{}"))
                data = json.dumps(self.st.config).encode()
            return self.reply(200, data, {"Content-Type":
                                          "application/json"})
        if path == "/__proxy/token" and self.command == "POST":
            return self.token(body)
        if path == "/__proxy/keys" and self.command == "POST":
            k = json.loads(body)
            with self.st.lock:
                self.st.keys[k["akid"]] = (k["secret"], k.get("token"),
                                           k.get("expires"))
            return self.reply(204)
        if path == "/__proxy/bearer" and self.command == "POST":
            with self.st.lock:
                t = json.loads(body)
                self.st.tokens[t["token"]] = t.get("expires")
            return self.reply(204)
        return self.reply(404, error_xml("NoSuchControl", path))

    def token(self, body):
        form = urllib.parse.parse_qs(body.decode())
        grant = form.get("grant_type", [""])[0]
        jwt = form.get("assertion", [""])[0]
        err = None
        if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            err = "unsupported_grant_type"
        else:
            err = self.check_jwt(jwt)
        if err:
            return self.reply(400, json.dumps({"error": "invalid_grant",
                              "error_description": err}).encode(),
                              {"Content-Type": "application/json"})
        tok = "ya29.test-%016x" % self.st.rng.getrandbits(64)
        self.st.tokens[tok] = None
        self.st.count("tokens_issued")
        data = {"access_token": tok, "token_type": "Bearer",
                "expires_in": self.st.config["token_ttl"]}
        return self.reply(200, json.dumps(data).encode(),
                          {"Content-Type": "application/json"})

    def check_jwt(self, jwt):
        parts = jwt.split(".")
        if len(parts) != 3 or not self.st.sa_pubkey:
            return "malformed assertion"
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        if header.get("alg") != "RS256":
            return "alg must be RS256"
        with tempfile.NamedTemporaryFile() as sig:
            sig.write(b64url_decode(parts[2]))
            sig.flush()
            r = subprocess.run(["openssl", "dgst", "-sha256", "-verify",
                                self.st.sa_pubkey, "-signature", sig.name],
                               input=("%s.%s" % (parts[0], parts[1]))
                               .encode(), capture_output=True)
        if r.returncode != 0:
            return "bad signature"
        now = time.time()
        aud = "http://%s/__proxy/token" % self.headers.get("Host")
        if claims.get("iss") != self.st.sa_email:
            return "wrong iss"
        if claims.get("aud") != aud:
            return "wrong aud"
        if "devstorage" not in claims.get("scope", ""):
            return "wrong scope"
        iat, exp = claims.get("iat", 0), claims.get("exp", 0)
        if abs(iat - now) > 300 or exp <= iat or exp - iat > 3600:
            return "bad iat/exp"
        return None


_CRC32C = []


def crc32c(data):
    """CRC-32C (Castagnoli), as GCS states it in x-goog-hash."""
    if not _CRC32C:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC32C.append(c)
    c = 0xFFFFFFFF
    t = _CRC32C
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def generation_of(etag):
    """A GCS-like generation for an ETag (s3rver keeps none)."""
    h = etag if all(c in "0123456789abcdef" for c in etag) and etag \
        else hashlib.md5(etag.encode()).hexdigest()
    return str(int(h[:12], 16) + 1)


def add_generation(headers):
    """x-goog-generation beside the ETag, as GCS's XML API sends it."""
    for k, v in list(headers.items()):
        if k.lower() == "etag":
            headers["x-goog-generation"] = generation_of(v.strip('"'))


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Counts its open connections (stats "connections", the asking one
    included): accepted in order, each counted until its handler is done
    with it, so a client that waits for 1 knows that every request sent
    before it asked (a killed process's) was carried out or refused."""
    daemon_threads = True
    allow_reuse_address = True

    def process_request(self, request, client_address):
        with self.state.lock:
            self.state.connections += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        try:
            super().shutdown_request(request)
        finally:
            with self.state.lock:
                self.state.connections -= 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--upstream", required=True, help="HOST:PORT of s3rver")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--key", action="append",
                   help="extra AKID:SECRET[:SESSION_TOKEN] accepted")
    p.add_argument("--allow-anonymous", action="store_true")
    p.add_argument("--slowdown", type=float, default=0.0)
    p.add_argument("--r2-429", type=float, default=0.0)
    p.add_argument("--reset", type=float, default=0.0)
    p.add_argument("--slow-ms", type=int, default=0)
    p.add_argument("--fault-methods", default="")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sa-pubkey", help="PEM public key of the service "
                   "account whose JWTs /__proxy/token accepts")
    p.add_argument("--sa-email", default="ckpt-test@example.iam."
                   "gserviceaccount.com")
    p.add_argument("--max-seconds", type=float, default=3600)
    args = p.parse_args()
    srv = Server(("127.0.0.1", args.port), Handler)
    srv.state = State(args)
    print("s3proxy listening on 127.0.0.1:%d" % srv.server_address[1],
          flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    deadline = time.time() + args.max_seconds
    try:
        while time.time() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    srv.shutdown()


if __name__ == "__main__":
    main()
