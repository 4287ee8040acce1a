#!/usr/bin/env python3
"""ckpt map-wandb when things go wrong: no key (and the netrc that fixes
it), a rejected key, an unreachable server, malformed JSON, GraphQL errors
on 200, 5xx and 429 (retried, honouring Retry-After), a stalled server, and
a run with no evidence. Exact messages, exit codes and request counts.

Env: CKPT (binary), CKPT_SRC (repo root).
"""
import json
import os
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", "."), "tests",
                                "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wandb_fixtures as wf  # noqa: E402
from map_wandb import ckpt  # noqa: E402
from tally import check, finish  # noqa: E402

ROW = ("local1\tai2-llm/olmo-small/ab12cd34\twandb run dir "
       "wandb/wandb/run-20240501_100000-ab12cd34, confirmed by W&B")


def build(tmp):
    db = wf.DB()
    db.add_filler(30)
    cfg = wf.olmo_config("OLMo-1B-local", "/results/1000001")
    db.add("ab12cd34", display="OLMo-1B-local", config=cfg)
    d = os.path.join(tmp, "runs", "local1")
    os.makedirs(d)
    wf.write_config(d, cfg, wf.wandb_section(name="OLMo-1B-local"))
    wf.add_wandb_run(d, "ab12cd34")
    db.write(os.path.join(tmp, "db.json"))
    empty = os.path.join(tmp, "runs", "empty")
    os.makedirs(empty)
    return d, empty


def message(err):
    """The message of the single error line on stderr."""
    lines = [l for l in err.splitlines() if "error: " in l]
    return lines[0].split("error: ", 1)[1] if len(lines) == 1 else lines


def test_no_key(fake, run, tmp):
    home = os.path.join(tmp, "home")
    os.makedirs(home, exist_ok=True)
    fake.reset()
    rc, out, err = ckpt([run], fake.url, env={"HOME": home}, key=None)
    msg = ("no W&B API key: set WANDB_API_KEY, or add 'machine "
           "127.0.0.1:%d login user password <key>' to %s/.netrc (what "
           "`wandb login` writes)" % (fake.port, home))
    check("no key: exit", rc, 1)
    check("no key: message", message(err), msg)
    check("no key: row", out, "local1\t-\terror: %s\n" % msg)
    check("no key: no requests", fake.requests(), 0)

    # wandb login's netrc entry: machine host:port, password = key.
    with open(os.path.join(home, ".netrc"), "w") as f:
        f.write("machine api.wandb.ai\n  login user\n  password wrong\n"
                "machine 127.0.0.1:%d\n  login user\n  password %s\n"
                % (fake.port, wf.KEY))
    rc, out, err = ckpt([run], fake.url, env={"HOME": home}, key=None)
    check("netrc: row", out, ROW + "\n")
    check("netrc: exit", rc, 0)
    alt = os.path.join(tmp, "alt-netrc")
    with open(alt, "w") as f:
        f.write("default password %s\n" % wf.KEY)
    rc, out, err = ckpt([run], fake.url, env={"HOME": tmp + "/nowhere",
                                              "NETRC": alt}, key=None)
    check("NETRC default entry: row", out, ROW + "\n")


def test_bad_key(fake, run, empty):
    fake.reset()
    rc, out, err = ckpt([run, empty], fake.url, key="not-the-key")
    msg = ("W&B API rejected the API key from WANDB_API_KEY (HTTP 401): "
           "check WANDB_API_KEY or ~/.netrc")
    check("bad key: exit", rc, 1)
    check("bad key: message", message(err), msg)
    # (the empty directory beside it is no run: skipped, no row)
    check("bad key: rows", out.splitlines(), ["local1\t-\terror: " + msg])
    check("bad key: one request, no retry", fake.requests(), 1)


def test_unreachable(run):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    url = "http://127.0.0.1:%d" % port
    rc, out, err = ckpt(["--retries", "2", run], url)
    check("unreachable: exit", rc, 1)
    check("unreachable: row", out,
          "local1\t-\terror: W&B API %s/graphql: Couldn't connect to "
          "server (run ai2-llm/olmo-small/ab12cd34; gave up after 2 "
          "attempts)\n" % url)


def test_faults(fake, run):
    cases = [
        ("malformed", 1, [], "error: W&B API: malformed JSON response", 1),
        ("gqlerror", 1, [], "error: W&B API error: x", 1),
        ("500", 5, ["--retries", "2"], "error: W&B API: HTTP 500: Server "
         "down (gave up after 2 attempts)", 2),
        ("401", 1, [], "error: W&B API rejected the API key from "
         "WANDB_API_KEY (HTTP 401): check WANDB_API_KEY or ~/.netrc", 1),
    ]
    for kind, count, args, want, requests in cases:
        fake.reset()
        fake.fault(kind, count)
        rc, out, err = ckpt(args + [run], fake.url)
        check("%s: row" % kind, out, "local1\t-\t%s\n" % want)
        check("%s: exit" % kind, rc, 1)
        check("%s: requests" % kind, fake.requests(), requests)

    # Transient: one 500, then success (retried after a backoff).
    fake.reset()
    fake.fault("500", 1)
    rc, out, err = ckpt([run], fake.url)
    check("500 once: row", out, ROW + "\n")
    check("500 once: requests", fake.requests(), 2)

    # 429 with Retry-After: 1 -> wait a second, then success.
    fake.reset()
    fake.fault("429", 1)
    t = time.monotonic()
    rc, out, err = ckpt([run], fake.url)
    check("429: row", out, ROW + "\n")
    check("429: requests", fake.requests(), 2)
    check("429: waited Retry-After", time.monotonic() - t >= 1.0, True)

    # A server that stalls past WANDB_HTTP_TIMEOUT: a timeout, retried.
    fake.reset()
    fake.fault("hang", 1, seconds=4)
    rc, out, err = ckpt([run], fake.url, env={"WANDB_HTTP_TIMEOUT": "1"})
    check("stall: row", out, ROW + "\n")
    check("stall: requests", fake.requests(), 2)


def test_echo(fake, run):
    """A server that quotes the request in its errors: the credential it
    echoes is never printed (nor is any non-JSON body)."""
    said = ("not allowed; request headers: {'[redacted]', 'Accept': "
            "'application/json'}; raw: [redacted] Content-Type: "
            "application/json ; decoded: api:[redacted]")
    cases = [
        ("echo-json", 400, "error: W&B API: HTTP 400: " + said),
        ("echo-json", 403, "error: W&B API: permission denied (HTTP 403): " +
         said),
        ("echo-200", None, "error: W&B API error: " + said),
        ("echo-text", 400, "error: W&B API: HTTP 400 (a text/plain body, not "
         "shown)"),
    ]
    basic = wf.basic_auth().split()[1]
    for kind, status, want in cases:
        for args in ([], ["--json"], ["-v"]):
            fake.reset()
            fake.fault(kind, 1, status=status)
            rc, out, err = ckpt(args + [run], fake.url)
            what = "%s %s %s" % (kind, status, " ".join(args))
            if args == ["--json"]:
                check("%s: evidence" % what, json.loads(out)["reason"],
                      want)
            else:
                check("%s: row" % what, out, "local1\t-\t%s\n" % want)
            check("%s: exit" % what, rc, 1)
            check("%s: no credential" % what,
                  [s for s in (wf.KEY, basic, "Basic ", "Authorization")
                   if s in out + err],
                  [])


def test_usage():
    rc, out, err = ckpt([], "http://127.0.0.1:9")
    check("no RUN: exit", rc, 2)
    rc, out, err = ckpt(["--bogus", "x"], "http://127.0.0.1:9")
    check("bad option: exit", rc, 2)
    rc, out, err = ckpt(["--help"], "http://127.0.0.1:9")
    check("help: exit", rc, 0)
    check("help: synopsis", out.splitlines()[0],
          "usage: ckpt map-wandb [options] RUN...")


def test_bad_input(fake, tmp):
    f = os.path.join(tmp, "afile")
    with open(f, "w") as fh:
        fh.write("x")
    bad = os.path.join(tmp, "runs", "badyaml")
    os.makedirs(bad)
    with open(os.path.join(bad, "config.yaml"), "w") as fh:
        fh.write("wandb:\n  project: p\n name: x\n")
    rc, out, err = ckpt([f, os.path.join(tmp, "missing"), bad,
                         os.path.join(tmp, "run.tar.gz")], fake.url)
    # (afile, among several RUNs, is no run: skipped with a message)
    check("bad input: rows", out.splitlines(), [
        "missing\t-\terror: stat '%s/missing': No such file or directory"
        % tmp,
        "badyaml\t-\tunknown: no W&B evidence (no wandb/ run directory, no "
        "config.yaml) (unreadable evidence: config.yaml:3: did not find "
        "expected key (while parsing a block mapping at line 1))",
        "run\t-\terror: stat '%s/run.tar.gz': No such file or directory"
        % tmp])
    check("bad input: exit", rc, 1)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-mapwandb-err-")
    try:
        run, empty = build(tmp)
        with wf.FakeWandb(os.path.join(tmp, "db.json")) as fake:
            test_no_key(fake, run, tmp)
            test_bad_key(fake, run, empty)
            test_faults(fake, run)
            test_bad_input(fake, tmp)
            test_echo(fake, run)
        test_unreachable(run)
        test_usage()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
