#!/usr/bin/python3
# ctest-cost: 60
"""unshard_sink_crash.py - SIGKILL `ckpt unshard SRC s3://…` at random
moments (s3rver behind the signing proxy): `ckpt ls` of the run holding
DEST never judges a partial output complete, and a rerun finishes it
byte-identical to a local unshard.

Two outputs, killed in turn: an OLMo step's model.pt/optim.pt/train.pt/
config.yaml (four objects: only the DEST-unfinished marker keeps a
partial set from looking complete) and a 20 MB checkpoint.pt (--memory
16M: it does not fit, so a multipart upload of three parts; with room it
would be one PUT, as unshard_sink_put.py shows). Kills land after the
k-th write request (PUT, POST, DELETE) the proxy sees, k uniform over a
clean run's count; every
fifth kill is followed by a rerun to completion, and half the reruns
(of either output) then delete DEST, so that kills hit first writes as
well as overwrites of a complete output. CKPT_SINK_KILLS sets the count (50).
"""
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (BUILD, Checker, S3Env, digests,  # noqa: E402
                    remote_contents, tool)
from harness import generate  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ck"


def remote_digests(env, prefix):
    return {n: hashlib.sha256(b).hexdigest()
            for n, b in remote_contents(env, B, prefix).items()}


def judged(env):
    """{checkpoint name: complete} as `ckpt ls` of the run judges."""
    p = subprocess.run([CKPT, "ls", "--json", "s3://%s/run" % B], env=env,
                       capture_output=True, text=True, timeout=120)
    out = {}
    for line in p.stdout.splitlines():
        for k in json.loads(line).get("checkpoints", []):
            out[k["name"]] = k["complete"]
    return out


def main():
    c = Checker()
    rng = random.Random(int(os.environ.get("CKPT_SINK_SEED", "12")))
    kills = int(os.environ.get("CKPT_SINK_KILLS", "50"))
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-sink-crash-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(["make_dcp.py", os.path.join(fx, "olmo"), "--case", "olmo",
                  "--no-verify", "--no-expected"],
                 ["make_dcp.py", os.path.join(fx, "big"), "--case", "big",
                  "--size-mb", "20", "--no-verify", "--no-expected"])
        jobs = [("step10-unsharded", os.path.join(fx, "olmo", "ckpt")),
                ("step20-unsharded", os.path.join(fx, "big", "ckpt"))]
        want = {}
        for name, src in jobs:
            loc = os.path.join(tmp, "loc", name)
            subprocess.run([CKPT, "unshard", "--no-progress", src, loc],
                           check=True, capture_output=True)
            want[name] = digests(loc)
        with S3Env(buckets=[B]) as s3:
            env = s3.env()

            def cmd(name, src):
                mem = ["--memory", "16M"] if name == "step20-unsharded" \
                    else []
                return [CKPT, "unshard", "--no-progress"] + mem + [
                    src, "s3://%s/run/%s" % (B, name)]

            def rerun(name, src, what):
                p = subprocess.run(cmd(name, src), env=env,
                                   capture_output=True, text=True,
                                   timeout=300)
                c.eq(what + ": exit", (p.returncode, p.stderr), (0, ""))
                c.eq(what + ": bytes", remote_digests(env, "run/" + name),
                     want[name])
                c.eq(what + ": judged complete", judged(env).get(name),
                     True)

            def writes():
                m = s3.stats()["methods"]
                return sum(m.get(k, 0) for k in ("PUT", "POST", "DELETE"))

            # Kills land among the writes (PUT, POST, DELETE requests the
            # proxy sees): after the k-th of a clean run's, k uniform, and
            # a random few ms more.
            nwrites = {}
            for name, src in jobs:
                w0 = writes()
                subprocess.run(cmd(name, src), env=env, check=True,
                               capture_output=True)
                nwrites[name] = writes() - w0
                if name == "step20-unsharded":
                    c.eq("clean %s: a multipart upload" % name,
                         s3.stats()["methods"].get("POST", 0) >= 2, True)
                c.eq("clean " + name, remote_digests(env, "run/" + name),
                     want[name])
                tool(env, "rm-tree", "s3://%s/run/%s" % (B, name))
            bad = marked = 0
            for i in range(kills):
                name, src = jobs[i % 2]
                p = subprocess.Popen(cmd(name, src), env=env,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
                k, w0 = rng.randint(0, nwrites[name]), writes()
                while writes() < w0 + k and p.poll() is None:
                    time.sleep(0.001)
                time.sleep(rng.uniform(0, 0.01))
                p.send_signal(signal.SIGKILL)
                p.wait()
                state = judged(env).get(name)
                if os.environ.get("CKPT_SINK_DEBUG"):
                    print(i, name, state,
                          sorted(remote_digests(env, "run/" + name)))
                marked += state is False
                if state:
                    got = remote_digests(env, "run/" + name)
                    if got != want[name]:
                        bad += 1
                        c.eq("kill %d (%s): judged complete, so complete" %
                             (i, name), got, want[name])
                if i % 5 == 4:
                    rerun(name, src, "kill %d: rerun" % i)
                    if (i // 5) % 4 < 2:
                        tool(env, "rm-tree", "s3://%s/run/%s" % (B, name))
            c.eq("kills judged complete while partial", bad, 0)
            print("%d of %d kills left an output marked unfinished" %
                  (marked, kills))
            c.true("some kills left a marked output", marked >= kills // 5)
            for name, src in jobs:
                rerun(name, src, "final " + name)
            _, top, _ = tool(env, "ls", "s3://%s/run" % B)
            c.eq("no marker left", sorted(
                ln.split("\t")[2] for ln in top.decode().splitlines()),
                ["step10-unsharded", "step20-unsharded"])
            c.eq("every request signed correctly", s3.stats()["sig_fail"],
                 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
