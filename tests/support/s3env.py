#!/usr/bin/python3
"""s3env.py - start a local S3 for tests: s3rver, and s3proxy in front of
it (signature checks, fault injection, counters). Loopback only; every
process stops with the environment, and by itself after max_seconds.

From Python:
    from s3env import S3Env
    with S3Env(buckets=["ckpt-test"]) as s3:
        subprocess.run([...], env=s3.env())     # AWS_* set for ckpt/aws
        s3.configure(slowdown=0.3)              # faults on the proxy
        s3.add_key("ASIA...", "secret", token="...", expires=time.time())
        s3.stats()["requests"]

From a shell (tests/support/s3env.sh wraps this):
    s3env.py run [--no-proxy] [--bucket B]... -- CMD ARGS...
        runs CMD with the environment set, stops everything, exits as CMD;
    s3env.py serve --env-file F [...]
        writes `export NAME=VALUE` lines to F once ready, serves until
        SIGTERM or --max-seconds.

Importing it applies tests/support/offline.env to os.environ (offline.py).

Environment given to commands: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
(S3RVER), AWS_ENDPOINT_URL (the proxy, or s3rver with --no-proxy),
AWS_REGION, empty AWS credential/config files (the user's are never read),
S3ENV_PROXY (host:port of the proxy), S3ENV_S3RVER (host:port of s3rver),
S3ENV_BUCKET (first bucket).
"""
import argparse
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import offline

# Every test (and benchmark) runs offline: no credential source reaches
# past the loopback, and neither do aws-cli's.
offline.apply(os.environ)

HERE = os.path.dirname(os.path.abspath(__file__))
S3RVER = os.path.join(HERE, "node_modules", "s3rver", "bin", "s3rver.js")
# s3rver with S3's read-after-write guarantee (atomic, complete PUTs).
S3RVER_ATOMIC = os.path.join(HERE, "s3rver_atomic.js")


def server_env(base=None):
    """base (default os.environ) for a test server (s3rver, the proxy, the
    fake W&B server, Slurm's daemons): without the LD_PRELOAD shims and
    their CKPT_TEST_* settings that a test may have put in its own
    environment for ckpt. In the ASan build the shims are instrumented,
    and a process without ASan's runtime (node) dies on them at start."""
    e = dict(os.environ if base is None else base)
    e.pop("LD_PRELOAD", None)
    for k in [k for k in e if k.startswith("CKPT_TEST_")]:
        del e[k]
    return e


def _die_with_parent():
    # The servers must not outlive a test killed with SIGKILL.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _read_port(proc, marker, timeout=600.0):
    """Wait for 'marker HOST:PORT' on proc's stdout; return PORT. A server
    that exits fails at once; the deadline is only for one that hangs (on
    a loaded machine node takes seconds, not one, to start s3rver)."""
    deadline = time.time() + timeout
    buf = b""
    while time.time() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], 0.2)
        if r:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if marker in line:
                    return int(line.rsplit(":", 1)[1].strip())
        if proc.poll() is not None:
            break
    raise RuntimeError("%s did not start: %r" % (marker, buf[-2000:]))


class S3Env:
    def __init__(self, buckets=("ckpt-test",), proxy=True, max_seconds=1800,
                 proxy_args=(), keys=(), tls=None):
        """tls: (key.pem, cert.pem) to serve s3rver over HTTPS (then
        without the proxy, which speaks plain HTTP)."""
        self.buckets = list(buckets)
        self.tls = tls
        self.use_proxy = proxy and not tls
        self.max_seconds = max_seconds
        self.proxy_args = list(proxy_args)
        for k in keys:
            self.proxy_args += ["--key", k]
        self.procs = []
        self.tmp = None
        self.s3rver_port = self.proxy_port = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        if not os.path.exists(S3RVER):
            raise RuntimeError("s3rver is not installed: run "
                               "scripts/install-deps.sh --test")
        self.tmp = tempfile.mkdtemp(prefix="ckpt-s3env-")
        for name in ("credentials", "config"):
            open(os.path.join(self.tmp, name), "w").close()
        env = server_env()
        # s3rver 3.7.1 pages with DES, which Node >= 17 only has here.
        env["NODE_OPTIONS"] = "--openssl-legacy-provider"
        # S3ENV_RAW_S3RVER=1: s3rver as shipped (to show what the
        # wrapper fixes: tests/integration/s3rver_consistency.py).
        raw = os.environ.get("S3ENV_RAW_S3RVER") == "1"
        cmd = ["node", S3RVER if raw else S3RVER_ATOMIC, "-d", os.path.join(self.tmp, "data"),
               "-a", "127.0.0.1", "-p", "0", "--no-vhost-buckets"]
        for b in self.buckets:
            cmd += ["--configure-bucket", b]
        if self.tls:
            cmd += ["--key", self.tls[0], "--cert", self.tls[1]]
        log = open(os.path.join(self.tmp, "s3rver.log"), "wb")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                             env=env, preexec_fn=_die_with_parent)
        self.procs.append(p)
        self.s3rver_port = _read_port(p, "listening on")
        # Keep draining s3rver's request log so it never blocks on a pipe.
        self._drain(p)
        if self.use_proxy:
            cmd = [sys.executable, os.path.join(HERE, "s3proxy.py"),
                   "--upstream", "127.0.0.1:%d" % self.s3rver_port,
                   "--max-seconds", str(self.max_seconds)] + self.proxy_args
            q = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                 stderr=open(os.path.join(self.tmp,
                                             "s3proxy.log"), "wb"),
                                 env=server_env(),
                                 preexec_fn=_die_with_parent)
            self.procs.append(q)
            self.proxy_port = _read_port(q, "s3proxy listening on")
        return self

    def _drain(self, p):
        import threading

        def pump():
            while p.stdout.read(65536):
                pass
        threading.Thread(target=pump, daemon=True).start()

    @property
    def endpoint(self):
        port = self.proxy_port if self.use_proxy else self.s3rver_port
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", port)

    def env(self, base=None):
        e = dict(os.environ if base is None else base)
        for k in ("AWS_PROFILE", "S3_PROFILE", "R2_PROFILE", "GCS_PROFILE",
                  "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
                  "GOOGLE_APPLICATION_CREDENTIALS", "AWS_DEFAULT_REGION",
                  "AWS_CA_BUNDLE"):
            e.pop(k, None)
        e.update({
            "AWS_ACCESS_KEY_ID": "S3RVER",
            "AWS_SECRET_ACCESS_KEY": "S3RVER",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_SHARED_CREDENTIALS_FILE": os.path.join(self.tmp,
                                                        "credentials"),
            "AWS_CONFIG_FILE": os.path.join(self.tmp, "config"),
            "S3ENV_S3RVER": "127.0.0.1:%d" % self.s3rver_port,
            "S3ENV_BUCKET": self.buckets[0] if self.buckets else "",
        })
        if self.use_proxy:
            e["S3ENV_PROXY"] = "127.0.0.1:%d" % self.proxy_port
        return e

    def _control(self, path, data=None):
        req = urllib.request.Request(
            "http://127.0.0.1:%d/__proxy/%s" % (self.proxy_port, path),
            data=None if data is None else json.dumps(data).encode(),
            method="GET" if data is None else "POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            body = r.read()
        return json.loads(body) if body else None

    def stats(self):
        return self._control("stats")

    def reset_stats(self):
        self._control("reset", {})

    def configure(self, **faults):
        return self._control("config", faults)

    def add_key(self, akid, secret, token=None, expires=None):
        """Make the proxy accept another key (with token: only with that
        session token, signed; expires: epoch seconds after which it
        answers 400 ExpiredToken)."""
        self._control("keys", {"akid": akid, "secret": secret,
                               "token": token, "expires": expires})

    def add_bearer(self, token, expires=None):
        """Make the proxy accept a bearer token (until expires)."""
        self._control("bearer", {"token": token, "expires": expires})

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _args(argv):
    p = argparse.ArgumentParser(description="local S3 for tests")
    p.add_argument("mode", choices=["run", "serve"])
    p.add_argument("--no-proxy", action="store_true")
    p.add_argument("--bucket", action="append")
    p.add_argument("--env-file")
    p.add_argument("--max-seconds", type=float, default=1800)
    p.add_argument("--proxy-arg", action="append", default=[],
                   help="extra s3proxy.py argument (repeatable)")
    cmd = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    a = p.parse_args(argv)
    a.cmd = cmd
    return a


def main(argv):
    a = _args(argv)
    env = S3Env(buckets=a.bucket or ["ckpt-test"], proxy=not a.no_proxy,
                max_seconds=a.max_seconds, proxy_args=a.proxy_arg)
    with env:
        if a.mode == "run":
            try:
                return subprocess.run(a.cmd, env=env.env(),
                                      timeout=a.max_seconds).returncode
            except subprocess.TimeoutExpired:
                return 124
        stop = []
        signal.signal(signal.SIGTERM, lambda *x: stop.append(1))
        tmp = a.env_file + ".tmp"
        with open(tmp, "w") as f:
            for k, v in sorted(env.env({}).items()):
                f.write("export %s='%s'\n" % (k, v))
        os.rename(tmp, a.env_file)
        deadline = time.time() + a.max_seconds
        while not stop and time.time() < deadline:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
