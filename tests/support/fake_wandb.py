#!/usr/bin/env python3
"""A fake W&B GraphQL server for the map-wandb tests (stdlib only).

It answers exactly the requests of tests/support/README-wandb.md (the W&B
API facts it follows, with the exchanges):
POST /graphql with HTTP Basic auth "api:KEY" (401 otherwise), routed on the
operation name (Run, Runs, GetDefaultEntity), with MongoDB-style `filters`
sent as a JSON *string* (equality, $eq $ne $in $nin $regex $exists $gt $gte
$lt $lte, $and $or $nor, on name, display_name/displayName, group, state,
createdAt, jobType, config.K[.value][.sub...], summary_metrics.K), cursor
pagination (perPage, next cursor = last edge's cursor), configs as JSON
strings of {"k": {"value": v, "desc": null}}.

Control endpoints (no auth):
  GET  /_stats         {"requests": N, "ops": {...}, "filters": [...]}
  POST /_reset         zero the counters, drop pending faults
  POST /_fault         {"kind": K, "count": N[, "seconds": S]}: the next N
                       GraphQL requests fail: "429" (Retry-After: 1,
                       RateLimit-Remaining: 0, RateLimit-Reset: 1),
                       "500" ({"errors":["Server down"]}), "gqlerror"
                       (200, {"errors":[{"message":"x"}],"data":null}),
                       "malformed" (200, truncated JSON), "hang" (sleep S
                       seconds, then answer normally), "401", and the
                       servers that echo the request back in errors:
                       "echo-json" (HTTP `status`, default 400, GraphQL
                       errors quoting the Authorization header, raw header
                       lines and the decoded credential), "echo-text" (the
                       same as text/plain), "echo-200" (status 200 with
                       such `errors`), "trickle" (200 and headers, then
                       one body byte every `interval` s (default 0.5) for
                       `seconds` s, never the whole body). Never answering
                       at all is "hang" with a long `seconds`.
                       Kinds "endless" and "loop" change every later Runs
                       listing until /_reset: one run per page and
                       hasNextPage always true, with a fresh cursor per
                       page ("endless") or cursors alternating between
                       two values ("loop").

Usage: fake_wandb.py --db DB.json --key KEY [--timeout S] [--port-file F]
DB.json: {"entities": {"ENTITY": {"default": bool}}, "runs": [{"entity",
"project", "name", "displayName", "group", "state", "createdAt", "config":
{...plain values...}, "summary": {...}}]}
Listens on 127.0.0.1 on a free port, prints "PORT <n>" on stdout, and
stops by itself after --timeout seconds (default 600).
"""
import argparse
import base64
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MISSING = object()


class Filter:
    """Evaluate a MongoDB-style filter against a run."""

    FIELDS = {"name": "name", "display_name": "displayName",
              "displayName": "displayName", "group": "group",
              "state": "state", "createdAt": "createdAt",
              "created_at": "createdAt", "jobType": "jobType",
              "tags": "tags", "username": "username", "host": "host"}

    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("filters must be a JSON object")
        self.spec = spec

    def matches(self, run):
        return self._match(run, self.spec)

    def _match(self, run, spec):
        for key, cond in spec.items():
            if key == "$and":
                ok = all(self._match(run, c) for c in cond)
            elif key == "$or":
                ok = any(self._match(run, c) for c in cond)
            elif key == "$nor":
                ok = not any(self._match(run, c) for c in cond)
            elif key.startswith("$"):
                raise ValueError("unknown operator %s" % key)
            else:
                ok = self._cond(self._value(run, key), cond)
            if not ok:
                return False
        return True

    def _value(self, run, field):
        if field in self.FIELDS:
            return run.get(self.FIELDS[field], None)
        for prefix, attr in (("config.", "config"),
                             ("summary_metrics.", "summary")):
            if field.startswith(prefix):
                parts = field[len(prefix):].split(".")
                v = run.get(attr, {}).get(parts[0], MISSING)
                rest = parts[1:]
                # config.k and config.k.value are the same thing.
                if attr == "config" and rest and rest[0] == "value":
                    rest = rest[1:]
                for p in rest:
                    v = v.get(p, MISSING) if isinstance(v, dict) else MISSING
                return v
        raise ValueError("unknown field %s" % field)

    def _cond(self, v, cond):
        if not (isinstance(cond, dict) and cond and
                all(k.startswith("$") for k in cond)):
            return v is not MISSING and v == cond
        for op, arg in cond.items():
            if not self._op(v, op, arg):
                return False
        return True

    def _op(self, v, op, arg):
        present = v is not MISSING
        if op == "$eq":
            return present and v == arg
        if op == "$ne":
            return not present or v != arg
        if op == "$in":
            return present and v in arg
        if op == "$nin":
            return not present or v not in arg
        if op == "$exists":
            return present == bool(arg)
        if op == "$regex":
            return present and isinstance(v, str) and \
                re.search(arg, v) is not None
        if op in ("$gt", "$gte", "$lt", "$lte"):
            if not present or v is None:
                return False
            try:
                return {"$gt": v > arg, "$gte": v >= arg, "$lt": v < arg,
                        "$lte": v <= arg}[op]
            except TypeError:
                return False
        raise ValueError("unknown operator %s" % op)


class State:
    def __init__(self, db, key):
        self.lock = threading.Lock()
        self.key = key
        self.entities = db.get("entities", {})
        self.runs = {}
        for r in db["runs"]:
            self.runs.setdefault((r["entity"], r["project"]), []).append(r)
        for lst in self.runs.values():
            lst.sort(key=lambda r: (r.get("createdAt") or "", r["name"]))
        self.reset()

    def reset(self):
        self.faults = []
        self.paging = None
        self.requests = 0
        self.ops = {}
        self.filters = []

    def next_fault(self):
        with self.lock:
            if not self.faults:
                return None
            f = self.faults[0]
            f["count"] -= 1
            if f["count"] <= 0:
                self.faults.pop(0)
            return f


def node(run):
    cfg = {k: {"value": v, "desc": None} for k, v in run.get("config",
                                                            {}).items()}
    cfg["_wandb"] = {"value": {"cli_version": "0.19.1", "t": {}}}
    summary = dict(run.get("summary", {}))
    return {
        "name": run["name"],
        "displayName": run.get("displayName"),
        "group": run.get("group"),
        "state": run.get("state", "finished"),
        "createdAt": run.get("createdAt"),
        "config": json.dumps(cfg),
        "summaryMetrics": json.dumps(summary),
    }


def op_name(body):
    if body.get("operationName"):
        return body["operationName"]
    m = re.match(r"\s*(query|mutation)\s+(\w+)", body.get("query", ""))
    return m.group(2) if m else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set in main

    def log_message(self, fmt, *args):
        pass

    def send(self, status, obj=None, raw=None, headers=(),
             ctype="application/json"):
        data = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        st = self.state
        if self.path == "/_stats":
            with st.lock:
                self.send(200, {"requests": st.requests, "ops": st.ops,
                                "filters": st.filters})
        else:
            self.send(404, {"error": "not found"})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_POST(self):
        st = self.state
        raw = self.body()
        if self.path == "/_reset":
            with st.lock:
                st.reset()
            return self.send(200, {})
        if self.path == "/_fault":
            f = json.loads(raw)
            with st.lock:
                if f["kind"] in ("endless", "loop"):
                    st.paging = f["kind"]
                else:
                    st.faults.append(f)
            return self.send(200, {})
        if self.path != "/graphql":
            return self.send(404, {"errors": [{"message": "not found"}]})
        with st.lock:
            st.requests += 1
        if self.fault():
            return
        expect = "Basic " + base64.b64encode(
            ("api:" + st.key).encode()).decode()
        if self.headers.get("Authorization") != expect:
            return self.send(401, {"errors": [{"message":
                                               "user is not logged in"}]})
        try:
            body = json.loads(raw)
            self.graphql(body)
        except (ValueError, KeyError, TypeError) as e:
            self.send(400, {"errors": [{"message": "bad request: %s" % e}]})

    def fault(self):
        f = self.state.next_fault()
        if not f:
            return False
        kind = f["kind"]
        if kind == "429":
            self.send(429, raw=b"Rate limit exceeded",
                      headers=[("Retry-After", "1"),
                               ("RateLimit-Remaining", "0"),
                               ("RateLimit-Reset", "1")])
        elif kind == "500":
            self.send(500, {"errors": ["Server down"]})
        elif kind == "gqlerror":
            self.send(200, {"errors": [{"message": "x"}], "data": None})
        elif kind == "malformed":
            self.send(200, raw=b'{"data": {"project": ')
        elif kind == "401":
            self.send(401, {"errors": [{"message": "bad key"}]})
        elif kind.startswith("echo"):
            self.echo(kind, int(f.get("status", 400)))
        elif kind == "trickle":
            self.trickle(float(f.get("interval", 0.5)),
                         float(f.get("seconds", 60)))
        elif kind == "hang":
            time.sleep(float(f.get("seconds", 3)))
            return False
        return True

    def trickle(self, interval, seconds):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(interval)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def echo(self, kind, status):
        """A server that quotes the request (as some proxies and debug
        builds do), credentials included."""
        auth = self.headers.get("Authorization", "")
        sent = {"Authorization": auth,
                "Accept": self.headers.get("Accept")}
        raw = "".join("%s: %s\r\n" % (k, self.headers.get(k))
                      for k in ("Authorization", "Content-Type"))
        decoded = base64.b64decode(auth.split()[-1]).decode() if auth else ""
        msg = "not allowed; request headers: %r; raw: %s; decoded: %s" % (
            sent, raw, decoded)
        if kind == "echo-text":
            return self.send(status, raw=msg.encode(), ctype="text/plain")
        self.send(200 if kind == "echo-200" else status,
                  {"errors": [{"message": msg}], "data": None})

    def graphql(self, body):
        st = self.state
        op = op_name(body)
        v = body.get("variables") or {}
        with st.lock:
            st.ops[op] = st.ops.get(op, 0) + 1
        if op == "GetDefaultEntity":
            ent = [e for e, d in st.entities.items() if d.get("default")]
            return self.send(200, {"data": {"viewer": {
                "id": "VXNlcjox", "entity": ent[0] if ent else None}}})
        if op not in ("Run", "Runs"):
            raise ValueError("unknown operation %r" % op)
        runs = st.runs.get((v["entity"], v["project"]))
        if runs is None:
            return self.send(200, {"data": {"project": None}})
        if op == "Run":
            hit = [r for r in runs if r["name"] == v["name"]]
            return self.send(200, {"data": {"project": {
                "run": node(hit[0]) if hit else None}}})
        self.runs_page(runs, v)

    def endless_page(self, v):
        """A server whose listing never ends."""
        n = 0
        if v.get("cursor"):
            n = int(base64.b64decode(v["cursor"]).decode().split(":")[1])
        nxt = n + 1 if self.state.paging == "endless" else (n + 1) % 2
        cursor = base64.b64encode(("%s:%d" % (self.state.paging, nxt))
                                  .encode()).decode()
        run = {"name": "endless%06d" % n, "createdAt": None, "config": {}}
        self.send(200, {"data": {"project": {"runs": {
            "edges": [{"node": node(run), "cursor": cursor}],
            "pageInfo": {"endCursor": cursor, "hasNextPage": True}}}}})

    def runs_page(self, runs, v):
        st = self.state
        if st.paging:
            return self.endless_page(v)
        filters = v.get("filters")
        if filters is not None and not isinstance(filters, str):
            raise ValueError("filters must be a JSON string (JSONString)")
        with st.lock:
            st.filters.append(filters)
        flt = Filter(json.loads(filters)) if filters else None
        sel = [r for r in runs if flt is None or flt.matches(r)]
        if v.get("order") == "-created_at":
            sel.reverse()
        per = int(v.get("perPage") or 50)
        start = 0
        if v.get("cursor"):
            start = int(base64.b64decode(v["cursor"]).decode().split(":")[1])
        page = sel[start:start + per]
        edges = [{"node": node(r), "cursor": base64.b64encode(
            ("cursor:%d" % (start + i + 1)).encode()).decode()}
            for i, r in enumerate(page)]
        more = start + per < len(sel)
        self.send(200, {"data": {"project": {"runs": {
            "edges": edges,
            "pageInfo": {"endCursor": edges[-1]["cursor"] if edges else None,
                         "hasNextPage": more}}}}})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that timed out on a "hang" fault has gone: not an error.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError,
                                               ConnectionResetError)):
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--port-file")
    a = ap.parse_args()
    with open(a.db) as f:
        db = json.load(f)
    Handler.state = State(db, a.key)
    srv = Server(("127.0.0.1", 0), Handler)
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file, "w") as f:
            f.write(str(port))
    print("PORT %d" % port, flush=True)
    # Stop by ourselves, so a crashed test never leaves a server behind.
    t = threading.Timer(a.timeout, srv.shutdown)
    t.daemon = True
    t.start()
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
