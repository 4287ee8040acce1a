#!/usr/bin/python3
# ctest-cost: 20
"""process_unshard_direct.py - `ckpt process` unshards a sharded step
straight to DEST/RUN_ID/stepN-unsharded/, with no local copy, against
s3rver behind the signing proxy and to a local directory:
  * s3:// DEST: a poller watches --tmp-dir (and $TMPDIR, the same
    directory) every few ms for the whole run: nothing is ever written
    there; the outputs at DEST are byte for byte a local `ckpt unshard`
    of the same step, and torch loads them equal to the fixture
    (check_unshard.py); the state object records each output with its
    size and its MD5 (computed from the bytes written);
  * local DEST with --tmp-dir (and $TMPDIR) a regular file, so that
    nothing can be created below it: the run succeeds, the same bytes;
  * a rerun after a kill mid-unshard (DEST holds a partial output and its
    "-unfinished" marker, the state records nothing): the step is redone,
    the marker goes, and --drop-sharded then leaves the sharded step out
    (only a verified output counts);
  * an output at DEST whose checksum is not the one recorded fails the
    verify phase: exit 1, the source untouched.
Before, every unshard output was written to --tmp-dir first and uploaded
from there."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (CKPT, Checker, S3Env, age_tree, digests,  # noqa: E402
                    gen_runs, remote_contents, tool)
from s3test import old_ctime  # noqa: E402

CHECK = os.path.join(HERE, "..", "support", "check_unshard.py")
FIX = os.path.join(HERE, "..", "fixtures", "runs", "olmo-torch-new-1.13")
B = "ckpt-test"
OUTS = ["config.yaml", "model.pt", "optim.pt", "train.pt"]


def run(env, *args):
    p = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def make_run(root, name="2871001"):
    """2871001 of gen_runs.py with its step1000 sharded only; a copy of
    the step is kept to unshard locally for comparison."""
    gen_runs(root)
    src = os.path.join(root, name)
    shutil.rmtree(os.path.join(src, "step1000-unsharded"))
    age_tree(root)
    return src


def local_unshard(c, env, src, out):
    """What `ckpt unshard` makes of the step locally: {name: sha256}."""
    rc, _, err = run(env, "unshard", "--no-progress", "-q",
                     os.path.join(src, "step1000"), out)
    c.eq("local unshard: exit (%s)" % err.strip(), rc, 0)
    return digests(out)


class Poller:
    """Every file ever seen below a directory, polled every 2 ms."""

    def __init__(self, root):
        self.root, self.seen, self.stop = root, set(), False
        self.t = threading.Thread(target=self.loop)
        self.t.start()

    def loop(self):
        while not self.stop:
            for d, _, fs in os.walk(self.root):
                for f in fs:
                    self.seen.add(os.path.relpath(os.path.join(d, f),
                                                  self.root))
            time.sleep(0.002)

    def end(self):
        self.stop = True
        self.t.join()
        return sorted(self.seen)


def check_state(c, what, state, outs):
    """The state's "unsharded" list: every output, its size and MD5."""
    got = sorted((e["path"], e["size"], e["sum"])
                 for e in state.get("unsharded", []))
    want = sorted(("step1000-unsharded/" + n, len(b),
                   hashlib.md5(b).hexdigest()) for n, b in outs.items())
    c.eq("%s: state records the outputs" % what, got, want)


def torch_check(c, what, outs, tmp):
    d = os.path.join(tmp, "check-" + what.replace(" ", "-"))
    os.makedirs(d)
    for n, b in outs.items():
        with open(os.path.join(d, n), "wb") as f:
            f.write(b)
    r = subprocess.run(["/usr/bin/python3", CHECK, d, FIX],
                       capture_output=True, text=True)
    c.eq("%s: torch loads the outputs equal (%s)" % (what, r.stdout.strip()),
         r.returncode, 0)


def s3_outputs(env, prefix):
    return remote_contents(env, B, prefix)


def sha(d):
    return {n: hashlib.sha256(b).hexdigest() for n, b in d.items()}


def to_s3(c, env, tmp):
    src = make_run(os.path.join(tmp, "runs-s3"))
    want = local_unshard(c, env, src, os.path.join(tmp, "local-s3"))
    scratch = os.path.join(tmp, "scratch")
    os.makedirs(scratch)
    e = dict(env, TMPDIR=scratch)
    p = Poller(scratch)
    rc, out, err = run(e, "process", "--no-wandb", "-q", "--tmp-dir",
                       scratch, src, "--dest", "s3://%s/direct" % B)
    seen = p.end()
    c.eq("s3: exit (%s)" % err.strip(), rc, 0)
    c.eq("s3: steps unsharded", out.split("\t")[5] if out else "", "1")
    c.eq("s3: nothing ever written to --tmp-dir", seen, [])
    outs = s3_outputs(env, "direct/2871001/step1000-unsharded")
    c.eq("s3: outputs byte for byte a local unshard", sha(outs), want)
    torch_check(c, "s3", outs, tmp)
    _, st, _ = tool(env, "cat", "s3://%s/direct/.ckpt-process/2871001.json"
                    % B)
    check_state(c, "s3", json.loads(st), outs)
    c.eq("s3: source gone", os.path.exists(src), False)


def to_local(c, env, tmp):
    src = make_run(os.path.join(tmp, "runs-local"))
    want = local_unshard(c, env, src, os.path.join(tmp, "local-local"))
    blocker = os.path.join(tmp, "not-a-dir")
    with open(blocker, "w") as f:
        f.write("--tmp-dir is this file: nothing can be made below it\n")
    dest = os.path.join(tmp, "D")
    rc, out, err = run(dict(env, TMPDIR=blocker), "process", "--no-wandb",
                       "-q", "--tmp-dir", blocker, src, "--dest", dest)
    c.eq("local: exit (%s)" % err.strip(), rc, 0)
    got = os.path.join(dest, "2871001", "step1000-unsharded")
    c.eq("local: outputs byte for byte a local unshard", digests(got), want)
    outs = {}
    for n in OUTS:
        if os.path.exists(os.path.join(got, n)):
            with open(os.path.join(got, n), "rb") as f:
                outs[n] = f.read()
    with open(os.path.join(dest, ".ckpt-process", "2871001.json")) as f:
        check_state(c, "local", json.load(f), outs)
    c.eq("local: nothing beside the outputs", sorted(os.listdir(
        os.path.join(dest, "2871001"))), ["config.yaml", "step0",
                                          "step1000", "step1000-unsharded",
                                          "step2000", "train_data",
                                          "wandb"])


def rerun_after_kill(c, env, tmp):
    """A killed worker's leftovers at DEST: part of an output, and the
    marker the unshard library writes first and removes last."""
    src = make_run(os.path.join(tmp, "runs-kill"))
    want = local_unshard(c, env, src, os.path.join(tmp, "local-kill"))
    pre = "s3://%s/killed/2871001/step1000-unsharded" % B
    junk = os.path.join(tmp, "junk")
    with open(junk, "wb") as f:
        f.write(b"half a model.pt")
    for n in ("model.pt", "config.yaml"):
        tool(env, "put", junk, pre + "/" + n)
    tool(env, "put", junk, pre + "-unfinished")
    rc, out, err = run(env, "process", "--no-wandb", "-q", "--drop-sharded",
                       src, "--dest", "s3://%s/killed" % B)
    c.eq("kill rerun: exit (%s)" % err.strip(), rc, 0)
    c.eq("kill rerun: step redone", out.split("\t")[5] if out else "", "1")
    outs = s3_outputs(env, "killed/2871001/step1000-unsharded")
    c.eq("kill rerun: outputs byte for byte a local unshard", sha(outs),
         want)
    _, ls, _ = tool(env, "ls", "s3://%s/killed/2871001" % B)
    names = sorted(line.split("\t")[2] for line in ls.decode().splitlines())
    c.eq("kill rerun: marker gone, sharded step dropped",
         [n for n in names if n.startswith("step1000")],
         ["step1000-unsharded"])
    c.eq("kill rerun: source gone", os.path.exists(src), False)


def tampered(c, env, tmp):
    """The state records an output whose bytes at DEST are not the ones
    written: verify fails before anything is deleted."""
    src = make_run(os.path.join(tmp, "runs-bad"))
    dest = os.path.join(tmp, "DB")
    out_dir = os.path.join(dest, "2871001", "step1000-unsharded")
    local_unshard(c, env, src, out_dir)
    state = {"run": "2871001", "phase": "new", "dest": "2871001",
             "src": os.path.realpath(src), "unsharded": []}
    for n in OUTS:
        size = os.path.getsize(os.path.join(out_dir, n))
        state["unsharded"].append({"path": "step1000-unsharded/" + n,
                                   "size": size, "sum": "0" * 32})
    os.makedirs(os.path.join(dest, ".ckpt-process"))
    with open(os.path.join(dest, ".ckpt-process", "2871001.json"), "w") as f:
        json.dump(state, f)
    before = digests(src)
    rc, out, err = run(env, "process", "--no-wandb", "-q", src, "--dest",
                       dest)
    c.eq("tampered: exit", rc, 1)
    c.true("tampered: verify failed (%s)" % out.strip(),
           out.startswith("error\t") and "verify: " in out and
           "checksum" in out)
    c.eq("tampered: source untouched", digests(src), before)


def main():
    # Trees are aged with utime(): ctimes aged too (s3test.old_ctime).
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-proc-direct-")
    try:
        with S3Env() as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            to_s3(c, env, tmp)
            to_local(c, env, tmp)
            rerun_after_kill(c, env, tmp)
            tampered(c, env, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
