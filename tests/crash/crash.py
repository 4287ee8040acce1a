#!/usr/bin/python3
"""crash.py - crash consistency of the commands that write or delete:
kill -9 from outside at random moments, then check what was left.

usage: crash.py [--kills N] [--seed S] [--only NAME,...] [--json FILE]
                [--quick] [--known KIND,...]
(CRASH_KEEP=1 keeps each iteration's directory for a post-mortem)

Scenarios (NAME):
  clean          ckpt clean --keep-last 1 over generated runs and run
                 archives (tests/support/gen_runs.py --archives)
  unshard        ckpt unshard --delete-sharded of a local run (6 DCP steps,
                 real torch 1.13 bytes) into a local DEST
  unshard_s3     the same with the run in S3 (s3rver behind s3proxy.py;
                 3 small DCP steps made by make_dcp.py, 1 with --quick)
  upload         ckpt upload --delete-source, local -> local
  upload_s3      ckpt upload --delete-source, local -> s3://
  process        ckpt process SRC --dest DEST --drop-sharded
                 --drop-incomplete --no-wandb --min-age 0, local -> local,
                 over a directory of runs (make_process_runs: sharded
                 steps unsharded to DEST then dropped, one whose
                 -unsharded copy is in the run, incomplete steps dropped,
                 step0 kept, bad runs deleted, a good run, a non-run)
  process_s3     the same into s3:// (DEST through the proxy)
  process_replaced  process killed the moment a good run's state becomes
                 "uploaded", then its source replaced (config.yaml, other
                 bytes): the rerun must fail it with a conflict and leave
                 DEST's files of the run as they were (DEST's only copy
                 is immutable); the other runs converge
  process_vanish process with a good run's files vanishing under it (its
                 directory emptied at the k-th open, k in 1..16:
                 vanish_preload.c), no kill: never a "processed" row or a
                 "done" state without all of it at DEST, no file lost

Each scenario first runs once uninterrupted: the reference (final state
of SRC and DEST, and its duration T). Then N times: a fresh copy of the
input, the command started and sent SIGKILL after a delay drawn uniformly
from [0, 0.9 T) (T: the shorter of two uninterrupted runs; a kill that
comes after the command ended counts as "missed", not as a kill point),
the invariants checked on what the kill left, the command rerun to
completion, and the invariants of the end state checked.
In the local unshard scenario every other kill instead comes the moment
the delete of a step drawn at random starts (the step renamed aside or a
file of it unlinked): that window is a few milliseconds of the run. In
the process scenarios every other kill comes at the start of a drop: the
process kills itself right after it renamed aside a bad run, or unlinked
the first file of a dropped step, drawn at random among those the
reference deletes (tests/support/kill_preload.c, LD_PRELOAD). In the
unshard_s3 scenario every other kill comes the moment a delete of the
step's objects reaches the proxy, which holds each delete
UnshardS3.DELETE_DELAY_MS, so it lands after the kill. After every kill
in an S3 scenario the checks wait until the proxy has carried out every
request the dead process sent (settle): a SIGKILL does not recall them,
and on a loaded machine a DeleteObjects in flight lands under the
after-kill snapshot or the rerun. Before the rerun a killed process's
leases are made to lapse (their expiry put in the past), as time would.

Invariants after a kill (each violation is a bug):
  - nothing deleted without a verified copy: a source file (upload), a
    sharded step (unshard --delete-sharded) or a run (clean) that is gone,
    even partly, has its complete copy at DEST, identical to the
    reference's, or was going to be deleted by the uninterrupted command
    too (clean); process: a good run of which anything is gone has all
    of its files at DEST, the reference's (its unsharded steps included,
    so a dropped sharded step has its verified copy there); a bad run or
    a dropped incomplete step is one the uninterrupted run deletes too;
  - no output judged complete unless it is: every DEST file under its
    final name is identical to the reference's (temporary names are
    hidden: .ckpt-tmp-*, .NAME.ckpt-up-*, process's leases and
    `-unsharded-unfinished` markers), and every checkpoint that
    `ckpt ls DEST` calls complete is identical to the reference's
    (process: the unshard outputs; a step copied from the source
    appears file by file, as upload writes it);
  - nothing that should stay is touched: what the uninterrupted run keeps
    is still there, identical (clean: kept runs; process: the non-run;
    SRC files are never modified).
Invariants after the rerun:
  - it converges: SRC and DEST are exactly the reference's final state
    (process: its state objects at DEST/.ckpt-process compared without
    host, pid, time and FREED, the pass's own figure, and with the
    iteration's directory as D);
  - no litter: no temporary file or directory is left.

Violations have a kind: "safety" (the invariants after a kill),
"converge" (the rerun ends elsewhere than the reference, or exits
otherwise), "litter" (it converges but for temporary files a killed
process left), "leftover-sharded" (it converges but SRC still holds (part
of) a sharded step whose output is complete at DEST), "leftover-run"
(clean: it converges but for part of a run or pruned checkpoint the
reference deletes), the process kinds (Process.classify:
"drop-remains", "stuck-uploaded", "state-missing", "reason", "counts",
"lapsed-lease"), "reference" (the uninterrupted run failed).
--known KIND,... reports those kinds as KNOWN without failing (open
findings, docs/reliability.md).

Prints one line per scenario (kills, missed, violations by kind) and the
first violations of each kind, "N passed, N failed" last; exit 1 on any
violation not --known.
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC") or os.path.normpath(os.path.join(HERE,
                                                                  "..", ".."))
SUP = os.path.join(SRC, "tests", "support")
sys.path.insert(0, SUP)
from s3test import BUILD, S3Env  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
TOOL = os.path.join(os.environ.get("CKPT_BUILD") or BUILD, "storage_tool")
KILL_SHIM = os.path.join(os.environ.get("CKPT_BUILD") or BUILD,
                         "libkill_preload.so")
FIX = os.path.join(SRC, "tests", "fixtures", "runs", "olmo-torch-new-1.13")
BUCKET = "crash"
MIB = 1 << 20
TEMP_MARKS = (".ckpt-tmp", ".ckpt-up-", ".ckpt-del-")


def is_temp(rel):
    """ckpt's temporary and scratch names: hidden, ".ckpt-" (.ckpt-tmp-*,
    .ckpt-src-*, ...) or ".NAME.ckpt-up-*". In process's state directory
    at DEST (.ckpt-process) the leases are: a run's state object stays."""
    if rel.split("/")[0] == ".ckpt-process":
        return rel.endswith(".lease")
    return any(part.startswith(".ckpt-") or
               any(m in part for m in TEMP_MARKS) for part in rel.split("/"))


# ---- snapshots: {relative path: ("d",) | ("f", md5) | ("l", target)} ----

def md5_file(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def snap(root):
    out = {}
    if not os.path.lexists(root):
        return out
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("l", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("d",)
            else:
                out[rel] = ("f", md5_file(p))
    return out


def direct(env):
    """env talking to s3rver itself: setting up and inspecting need not go
    through the (slow, re-signing) proxy that the commands under test
    use. (Without S3: env.)"""
    if "S3ENV_S3RVER" not in env:
        return env
    return dict(env, AWS_ENDPOINT_URL="http://" + env["S3ENV_S3RVER"])


def proxy(env, path, data=None):
    """The S3 proxy's control endpoint (GET, or POST data): its JSON."""
    req = urllib.request.Request(
        "http://%s/__proxy/%s" % (env["S3ENV_PROXY"], path),
        data=None if data is None else json.dumps(data).encode(),
        method="GET" if data is None else "POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"null")


def settle(env, limit=300):
    """Wait until the S3 proxy has carried out every request a killed
    process sent. A SIGKILL does not stop what the servers already
    received: a DeleteObjects in flight lands after the kill, on a loaded
    machine well after it, under the after-kill checks and the rerun. The
    proxy accepts connections in order and counts each until its request
    is answered (or refused, the client gone mid-body): once only the one
    asking is open, nothing the dead process sent is still on its way."""
    if "S3ENV_PROXY" not in env:
        return
    t0 = time.monotonic()
    while proxy(env, "stats")["connections"] > 1:
        if time.monotonic() - t0 > limit:
            raise RuntimeError("the S3 proxy still serves a killed "
                               "process's requests after %d s" % limit)
        time.sleep(0.01)


def tool(env, *args):
    p = subprocess.run([TOOL] + list(args), env=direct(env),
                       capture_output=True,
                       timeout=300)
    if p.returncode:
        raise RuntimeError("storage_tool %s: %s" % (" ".join(args),
                                                    p.stderr.decode()))
    return p.stdout


def snap_s3(env, prefix):
    """Objects under s3://BUCKET/prefix/ by content MD5 (fetched: an ETag
    is not always the MD5). A request the killed command had sent whole
    still reaches s3rver through the proxy after the kill (a lease's
    DELETE): an object listed and gone when read is listed again, until
    a listing holds still."""
    for _ in range(20):
        try:
            return snap_s3_once(env, prefix)
        except RuntimeError as e:
            if "not-found" not in str(e):
                raise
            time.sleep(0.1)
    return snap_s3_once(env, prefix)


def snap_s3_once(env, prefix):
    out = {}
    loc = "s3://%s/%s" % (BUCKET, prefix)
    p = subprocess.run([TOOL, "ls", "-r", loc], env=direct(env),
                       capture_output=True, timeout=300)
    if p.returncode:
        return out   # nothing there
    for line in p.stdout.decode().splitlines():
        typ, size, name = line.split("\t", 2)
        if typ == "d":
            continue
        # (s3rver fails ranged reads of empty objects; the proxy hides it)
        data = tool(env, "cat", loc + "/" + name) if int(size) else b""
        out[name] = ("f", hashlib.md5(data).hexdigest())
    return out


def diff(a, b):
    """Human-readable differences of two snapshots (a: got, b: want)."""
    lines = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            lines.append("  %s: got %s, want %s" % (k, a.get(k), b.get(k)))
    return "\n".join(lines[:20])


def ls_complete(root, env=None):
    """Checkpoints `ckpt ls DEST` calls complete: {name: files}."""
    if not os.path.isdir(root):
        return {}
    p = subprocess.run([CKPT, "ls", root], capture_output=True, text=True,
                       env=env, timeout=120)
    done = {}
    for line in p.stdout.splitlines():
        f = line.split("\t")
        if len(f) >= 5 and f[4] == "complete":
            done[f[1]] = f
    return done


def under(s, prefix):
    """The entries of snapshot s below directory prefix, relative to it."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in s.items() if k.startswith(prefix + "/")}


# ---- scenarios ----

DEL = re.compile(r"^\.(.+)\.ckpt-del-.*-[0-9]+$")


def undo_rename(k):
    """k with each ".NAME.ckpt-del-HOST-PID" component (a rename-first
    delete, clean's or unshard's) put back as NAME."""
    return "/".join(DEL.sub(r"\1", p) for p in k.split("/"))


class Scenario:
    """prepare(d) makes the input in directory d (and remote prefix);
    argv(d) is the command; state(d) -> (src snapshot, dest snapshot);
    after_kill(d, orig, ref) -> [violations]."""
    name = ""
    remote = False
    DELETE_DELAY_MS = 0   # remote: the proxy holds each delete this long

    def __init__(self, env, rng, work):
        self.env = env
        self.rng = rng
        self.work = work

    def state(self, d):
        return snap(os.path.join(d, "src")), snap(os.path.join(d, "dst"))

    def probe(self, d):
        """None, or a function that says when to kill (see Unshard)."""
        return None

    def lapse(self, d):
        """Before the rerun: what time would do to a killed process's
        leftovers (Process: its leases)."""

    def kill_at(self, d):
        """None, or the environment that makes the command kill itself at
        a chosen point (see Process): used instead of probe()."""
        return None

    def classify(self, end, ref, orig):
        """A scenario's own kind of a rerun's end state, or None."""
        return None


class Clean(Scenario):
    name = "clean"
    RUNS = ["2871002", "2871003", "2871004", "2871006", "2871001", "2871005",
            "notes", "2871102.tar.gz", "2871103.tar.zst", "2871106.tar.xz",
            "2871107.tar.bz2", "2871101.tar", "2871105.zip"]

    def __init__(self, *a):
        super().__init__(*a)
        self.template = os.path.join(self.work, "clean-template")
        subprocess.run([sys.executable, os.path.join(SUP, "gen_runs.py"),
                        self.template, "--archives"], check=True,
                       capture_output=True)

    def prepare(self, d):
        shutil.copytree(self.template, os.path.join(d, "src"), symlinks=True)

    def argv(self, d):
        return [CKPT, "clean", "--min-age", "0", "--keep-last", "1", "-j",
                "2", "--no-progress", "-q"] + [os.path.join(d, "src", r) for r in self.RUNS]

    # clean's delete starts by renaming the run (or pruned checkpoint) to
    # ".NAME.ckpt-del-HOST-PID": the same files under that name are no
    # change (undo_rename).

    def after_kill(self, d, orig, ref):
        src, _ = self.state(d)
        v = []
        for k, val in src.items():
            if orig[0].get(undo_rename(k)) != val:
                v.append("clean changed or created %s" % k)
        for k, val in ref[0].items():
            if src.get(k) != val:
                v.append("clean deleted %s, which the uninterrupted run "
                         "keeps" % k)
        return v


def make_run(root, step, steps):
    os.makedirs(root)
    with open(os.path.join(root, "config.yaml"), "w") as f:
        f.write("run_name: crash\nsave_folder: /scratch/crash\n")
    os.makedirs(os.path.join(root, "wandb"))
    for s in steps:
        shutil.copytree(step, os.path.join(root, "step%d" % s))


class Unshard(Scenario):
    name = "unshard"

    def prepare(self, d):
        # The OLMo torch_new step of tests/fixtures (80 chunks), 6 times.
        make_run(os.path.join(d, "src"), os.path.join(FIX, "step"),
                 range(100, 700, 100))

    def src_loc(self, d):
        return os.path.join(d, "src")

    def probe(self, d):
        """Every other kill comes the moment the delete of a step drawn at
        random starts (the step renamed aside or a file of it unlinked):
        a window of a few milliseconds that delays drawn over the whole
        run seldom hit."""
        step = os.path.join(d, "src", "step%d" % self.rng.randrange(
            100, 700, 100))

        def fingerprint():
            out = []
            for sub in ("", "model_and_optim", "train"):
                try:
                    out.append(os.lstat(os.path.join(step, sub)).st_mtime_ns)
                except FileNotFoundError:
                    out.append(None)
            return out
        first = fingerprint()
        return lambda: fingerprint() != first

    def argv(self, d):
        return [CKPT, "unshard", "--delete-sharded", "--no-progress", "-q",
                self.src_loc(d), os.path.join(d, "dst")]

    # A local step's delete starts by renaming it to
    # ".stepN.ckpt-del-HOST-PID": its files under that name are the step,
    # gone from its name (the output must be complete), not new files.
    def after_kill(self, d, orig, ref):
        src, dst = self.state(d)
        src = {undo_rename(k): val for k, val in src.items()}
        v = []
        steps = sorted({k.split("/")[0] for k in orig[0]
                        if k.startswith("step")})
        for s in steps:
            o = under(orig[0], s)
            if under(src, s) != o:
                out = "%s-unsharded" % s
                if under(dst, out) != under(ref[1], out):
                    v.append("sharded %s deleted (partly) but DEST has no "
                             "complete %s:\n%s" % (s, out, diff(
                                 under(dst, out), under(ref[1], out))))
        for k, val in src.items():
            if orig[0].get(k) != val:
                v.append("SRC file changed or created: %s" % k)
        for k, val in dst.items():
            if is_temp(k):
                continue
            if ref[1].get(k) != val:
                v.append("DEST %s under its final name differs from the "
                         "reference (%s vs %s)" % (k, val, ref[1].get(k)))
        for name in ls_complete(os.path.join(d, "dst"), self.env):
            if under(dst, name) != under(ref[1], name):
                v.append("ckpt ls calls %s complete, but it differs from "
                         "the reference" % name)
        return v


class UnshardS3(Unshard):
    name = "unshard_s3"
    remote = True

    def __init__(self, *a):
        super().__init__(*a)
        # Every ranged GET goes through the re-signing proxy (~40 ms): a
        # DCP step of few chunks (torch 1.13, make_dcp.py --case rows)
        # keeps a run at about a second.
        self.step = os.path.join(self.work, "rows")
        subprocess.run(["/usr/bin/python3", os.path.join(SUP, "run_mains.py"),
                        "make_dcp.py", self.step, "--case", "rows"],
                       check=True, capture_output=True)

    def prepare(self, d):
        make_run(os.path.join(d, "run"), os.path.join(self.step, "ckpt"),
                 (10,) if QUICK else (10, 20, 30))
        self.prefix = "u/%s" % os.path.basename(d)
        p = subprocess.run([CKPT, "upload", "-q", "--no-progress",
                            os.path.join(d, "run"),
                            "s3://%s/%s" % (BUCKET, self.prefix)],
                           env=direct(self.env), capture_output=True,
                           text=True)
        if p.returncode:
            raise RuntimeError("upload of the run: " + p.stderr)
        shutil.rmtree(os.path.join(d, "run"))

    def src_loc(self, d):
        return "s3://%s/u/%s" % (BUCKET, os.path.basename(d))

    # Each delete waits this long at the proxy: the probe's kill comes
    # while the step's DeleteObjects is in flight, as on a loaded server.
    DELETE_DELAY_MS = 300

    def probe(self, d):
        """Every other kill comes the moment a delete of the step's
        objects reaches S3 (the proxy counts it, then holds it
        DELETE_DELAY_MS): it lands after the kill (settle waits for it)."""

        def deletes():
            m = proxy(self.env, "stats")["methods"]
            return m.get("POST", 0) + m.get("DELETE", 0)
        first = deletes()

        def hit():
            time.sleep(0.005)
            return deletes() != first
        return hit

    def state(self, d):
        return (snap_s3(self.env, "u/%s" % os.path.basename(d)),
                snap(os.path.join(d, "dst")))

    def after_kill(self, d, orig, ref):
        # Object storage has no directories: a step is its objects.
        return super().after_kill(d, orig, ref)


def make_tree(root, rng, small, big):
    files = {"big.bin": rng.randbytes(big * MIB + 5),
             "mid.bin": rng.randbytes(3 * MIB + 1),
             "empty": b"", "sub/deep/empty2": b""}
    for i in range(small):
        files["small/f%03d" % i] = rng.randbytes(rng.randrange(0, 30000))
    for name, data in files.items():
        p = os.path.join(root, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


class Upload(Scenario):
    name = "upload"

    def __init__(self, *a):
        super().__init__(*a)
        self.template = os.path.join(self.work, "upload-template")
        # Multipart (8 MiB parts): 17 MiB is 3 parts, 9 MiB (quick) 2.
        if QUICK:
            make_tree(self.template, self.rng, 20, 9)
        else:
            make_tree(self.template, self.rng, 60, 17)

    def prepare(self, d):
        shutil.copytree(self.template, os.path.join(d, "src"))
        os.makedirs(os.path.join(d, "state"))

    def dest(self, d):
        return os.path.join(d, "dst")

    def argv(self, d):
        return [CKPT, "upload", "--delete-source", "--no-progress", "-q",
                "--transfers", "4", "--state-dir", os.path.join(d, "state"),
                os.path.join(d, "src"), self.dest(d)]

    def after_kill(self, d, orig, ref):
        src, dst = self.state(d)
        v = []
        for k, val in orig[0].items():
            if val[0] != "f":
                continue
            if src.get(k) is None and dst.get(k) != val:
                v.append("source %s deleted, DEST has %s, want %s" % (
                    k, dst.get(k), val))
        for k, val in src.items():
            if orig[0].get(k) != val:
                v.append("SRC file changed or created: %s" % k)
        for k, val in dst.items():
            if is_temp(k) or val[0] == "d":
                continue
            if orig[0].get(k) != val:
                v.append("DEST %s under its final name is not the source's "
                         "bytes (%s vs %s)" % (k, val, orig[0].get(k)))
        return v


class UploadS3(Upload):
    name = "upload_s3"
    remote = True

    def dest(self, d):
        return "s3://%s/up/%s" % (BUCKET, os.path.basename(d))

    def state(self, d):
        return (snap(os.path.join(d, "src")),
                snap_s3(self.env, "up/%s" % os.path.basename(d)))


# ---- process --drop-sharded --drop-incomplete ----

STATE = re.compile(r"^\.ckpt-process/[^/]+\.json$")
LEASE = re.compile(r"^\.ckpt-process/[^/]+\.lease(\.lock)?$")
UNFINISHED = "-unsharded-unfinished"


def make_process_runs(root, quick):
    """gen_runs.py's runs but its logs/: 2871001 (step0 kept, step1000
    dropped: its -unsharded copy is in the run, step2000 incomplete:
    dropped), the bad runs 2871002 (step0 only), 2871003 (step0, an
    aborted step), 2871004 (no checkpoint), 2871006 (a truncated shard)
    (deleted), 2871005 (good, nothing to unshard), notes (not a run:
    kept); 2871007 (step1000 and step2000 unsharded to DEST, then
    dropped; step3000 incomplete: dropped) and 2871008 (step0 kept, 4
    steps unsharded and dropped, an incomplete one dropped). --quick:
    2871001, 2871002, 2871007 (without step2000) and notes."""
    import gen_runs
    gen_runs.generate(root)
    # step1000's copy holds its optimizer too, as OLMo's unsharder writes
    # it: else --drop-sharded keeps the step
    gen_runs.whole_unsharded(os.path.join(root, "2871001"))
    shutil.rmtree(os.path.join(root, "logs"))
    runs = {"2871007": ([1000] if quick else [1000, 2000], 3000, False)}
    if quick:
        for rid in ("2871003", "2871004", "2871005", "2871006"):
            shutil.rmtree(os.path.join(root, rid))
    else:
        runs["2871008"] = ([1000, 2000, 3000, 4000], 5000, True)
    for rid, (steps, aborted, step0) in runs.items():
        r = os.path.join(root, rid)
        gen_runs.run_skeleton(r, rid, "ffff%s" % rid[-4:])
        if step0:
            gen_runs.sharded_step(r, "step0")
        for s in steps:
            gen_runs.sharded_step(r, "step%d" % s)
        gen_runs.aborted_step(r, "step%d" % aborted)


def norm_state(data, d):
    """A .ckpt-process state object less what differs from one worker or
    pass to the next (host, pid, time) and with the iteration's directory
    as D; its unshard outputs in path order (a rerun records the ones a
    killed worker wrote as DEST lists them)."""
    try:
        o = json.loads(data)
    except ValueError:
        return ("state", "unparsable: %r" % data[:200], "")
    # FREED is what each pass deleted at the source.
    for k in ("host", "pid", "updated", "freed"):
        o.pop(k, None)
    if isinstance(o.get("src"), str):
        o["src"] = o["src"].replace(d, "D")
    if isinstance(o.get("unsharded"), list):
        o["unsharded"] = sorted(o["unsharded"],
                                key=lambda e: json.dumps(e, sort_keys=True))
    counts = {k: o.pop(k, None) for k in COUNTS}
    return ("state", json.dumps(o, sort_keys=True),
            json.dumps(counts, sort_keys=True))


def reason_only(got, want):
    """Two normalised state objects of a deleted run that differ only in
    the reason: the rerun's "finished an interrupted delete (...)" for
    the judge's."""
    a, b = json.loads(got), json.loads(want)
    why = str(a.pop("why", ""))
    b.pop("why", None)
    return (a == b and a.get("phase") == "deleted" and
            why.startswith("finished an interrupted delete"))


def stuck_uploaded(got, want):
    """A normalised state object "uploaded" where the reference's says
    "done", the same otherwise (but the source, which a state written
    before the first delete may lack)."""
    a, b = json.loads(got), json.loads(want)
    if a.get("phase") != "uploaded" or b.get("phase") != "done":
        return False
    for o in (a, b):
        o.pop("phase")
        o.pop("src", None)
    return a == b


def below(s, top):
    """The entries of snapshot s at or below top (a run's name)."""
    return {k: v for k, v in s.items()
            if k == top or k.startswith(top + "/")}


COUNTS = ("files", "bytes", "steps")


def final(s):
    """A DEST snapshot without temporary names, ckpt's own state
    (.ckpt-process) and unshard outputs' unfinished markers."""
    return {k: v for k, v in s.items()
            if not is_temp(k) and not k.endswith(UNFINISHED) and
            k.split("/")[0] != ".ckpt-process"}


class Process(Scenario):
    """ckpt process --drop-sharded --drop-incomplete of a directory of
    runs (make_process_runs) into a local DEST."""
    name = "process"

    def __init__(self, *a):
        super().__init__(*a)
        self.template = os.path.join(self.work, self.name + "-template")
        make_process_runs(self.template, QUICK)

    def prepare(self, d):
        shutil.copytree(self.template, os.path.join(d, "src"), symlinks=True)
        os.makedirs(os.path.join(d, "state"))

    def dest_loc(self, d):
        return os.path.join(d, "dst")

    def argv(self, d):
        return [CKPT, "process", os.path.join(d, "src"), "--dest",
                self.dest_loc(d), "--drop-sharded", "--drop-incomplete",
                "--no-wandb", "--min-age", "0", "--no-progress", "-q",
                "--state-dir", os.path.join(d, "state")]

    def snap_dest(self, d):
        out = snap(os.path.join(d, "dst"))
        for k in out:
            if STATE.match(k) and out[k][0] == "f":
                with open(os.path.join(d, "dst", k), "rb") as f:
                    out[k] = norm_state(f.read(), d)
        return out

    def state(self, d):
        return snap(os.path.join(d, "src")), self.snap_dest(d)

    def drops(self):
        """What the uninterrupted run deletes without a copy at DEST:
        dropped steps ("RUN/stepN") and bad runs ("RUN")."""
        orig, ref = self.orig, self.ref
        out = []
        for k, v in sorted(orig[0].items()):
            if v[0] != "d" or k.count("/") > 1 or k in ref[0]:
                continue
            if any(r == k or r.startswith(k + "/") for r in ref[1]):
                continue
            if not any(k.startswith(o + "/") for o in out):
                out.append(k)
        return out

    def kill_at(self, d):
        """Every other kill comes the moment the delete of a dropped step
        or a bad run drawn at random starts: right after the run is
        renamed aside or a first file of the step unlinked, by the
        process itself (tests/support/kill_preload.c). A kill from
        outside when a watcher sees the change comes too late: the steps
        are small and go whole in the meantime."""
        what = self.rng.choice(self.drops())
        # (ASan wants its runtime first; the shim only wraps unlink and
        # rename.)
        asan = (self.env.get("ASAN_OPTIONS", "") +
                ":verify_asan_link_order=0").lstrip(":")
        return {"LD_PRELOAD": KILL_SHIM, "ASAN_OPTIONS": asan,
                "CKPT_TEST_KILL_AT": os.path.join(d, "src", what)}

    def lapse(self, d):
        """A killed worker's leases stay until they expire (--lease-ttl):
        made to lapse now, as the next pass would find them later."""
        loc = self.dest_loc(d) + "/.ckpt-process"
        p = subprocess.run([TOOL, "ls", loc], env=direct(self.env),
                           capture_output=True, text=True, timeout=300)
        for line in p.stdout.splitlines():
            name = line.split("\t", 2)[2]
            if not name.endswith(".lease"):
                continue
            o = json.loads(tool(self.env, "cat", loc + "/" + name))
            o["acquired"] = o["expires"] = int(time.time()) - 3600
            subprocess.run([TOOL, "put", "-", loc + "/" + name],
                           env=direct(self.env), check=True,
                           input=json.dumps(o).encode() + b"\n",
                           capture_output=True, timeout=300)

    def after_kill(self, d, orig, ref):
        src, dst = self.state(d)
        src = {undo_rename(k): val for k, val in src.items()}
        v = []
        for run in sorted({k.split("/")[0] for k in orig[0]}):
            if below(src, run) == below(orig[0], run):
                continue
            if run in ref[0]:
                v.append("%s changed, which the uninterrupted run keeps"
                         % run)
            elif any(k.startswith(run + "/") for k in ref[1]):
                # A good run: nothing goes before all of it is at DEST.
                got, want = final(below(dst, run)), final(below(ref[1], run))
                if got != want:
                    v.append("source of %s deleted (partly) but DEST has "
                             "not all of it:\n%s" % (run, diff(got, want)))
            # else a bad run: the uninterrupted run deletes it too
        for k, val in src.items():
            if orig[0].get(k) != val:
                v.append("SRC file changed or created: %s" % k)
        for k, val in final(dst).items():
            if ref[1].get(k) != val:
                v.append("DEST %s under its final name differs from the "
                         "reference (%s vs %s)" % (k, val, ref[1].get(k)))
        # The unshard phase's outputs appear whole or not at all; a step
        # copied from the source appears file by file, as upload writes
        # it (checked above, file by file).
        got = ls_complete_tree(self.dest_loc(d), self.env)
        for name in got:
            if name in orig[0] or any(k.startswith(name + "/")
                                      for k in orig[0]):
                continue
            if final(under(dst, name)) != final(under(ref[1], name)):
                v.append("ckpt ls calls %s complete, but it differs from "
                         "the reference:\n%s" % (name, diff(
                             final(under(dst, name)),
                             final(under(ref[1], name)))))
        return v


    def classify(self, end, ref, orig):
        """The process kinds of a rerun's end state that differs from the
        reference only in DEST, each difference one of (the first kind
        present names it):
          "drop-remains": a file of a step the reference drops, the
            source's bytes (a rerun after a kill in a dropped step's
            delete uploads what is left of it, docs/commands/process.md
            "Leaving files out"), the state's counts with it;
          "stuck-uploaded": a run's state says "uploaded", not "done":
            killed after the last file of the run went, before "done"
            was written; a pass over SRC no longer sees the run;
          "state-missing": a bad run's state ("deleted") is missing:
            killed after its delete, before the state was written;
          "reason": a deleted run's state says "finished an interrupted
            delete (...)", not the judge's reason;
          "counts": a state object's FILES, BYTES or STEPS (the state
            describes what is at DEST, issue 20 class 14; STEPS still
            counts what the rerun unsharded);
          "lapsed-lease": a killed worker's lease, expired, of a run no
            later pass takes (docs/commands/process.md: left to lapse).
        Else None (the generic kinds)."""
        if end[0] != ref[0]:
            return None
        drops = [s for s in self.drops() if "/" in s]
        seen = set()
        for k in set(end[1]) | set(ref[1]):
            got, want = end[1].get(k), ref[1].get(k)
            if got == want:
                continue
            states = got and want and got[0] == want[0] == "state"
            if states and got[1] == want[1]:
                seen.add("counts")
            elif states and reason_only(got[1], want[1]):
                seen.add("reason")
            elif states and stuck_uploaded(got[1], want[1]):
                seen.add("stuck-uploaded")
            elif got is None and want[0] == "state" and \
                    json.loads(want[1]).get("phase") == "deleted":
                seen.add("state-missing")
            elif want is None and LEASE.match(k):
                seen.add("lapsed-lease")
            elif want is None and orig[0].get(k) == got and any(
                    k == s or k.startswith(s + "/") for s in drops):
                seen.add("drop-remains")
            else:
                return None
        for kind in ("drop-remains", "stuck-uploaded", "state-missing",
                     "reason", "counts", "lapsed-lease"):
            if kind in seen:
                return kind
        return None


class ProcessS3(Process):
    """The same into s3:// (s3rver behind s3proxy.py)."""
    name = "process_s3"
    remote = True

    def dest_loc(self, d):
        return "s3://%s/p/%s" % (BUCKET, os.path.basename(d))

    def snap_dest(self, d):
        prefix = "p/%s" % os.path.basename(d)
        out = snap_s3(self.env, prefix)
        for k in out:
            if STATE.match(k):
                data = tool(self.env, "cat", "s3://%s/%s/%s" % (BUCKET,
                                                                prefix, k))
                out[k] = norm_state(data, d)
        return out


class ProcessReplaced(Process):
    """process killed the moment the state of a good run (2871001)
    becomes "uploaded" (its rename: kill_preload.c's CKPT_TEST_KILL_TO),
    before any of its source is deleted; then the source is replaced
    (its config.yaml rewritten, other bytes, same size) and the command
    run again. DEST's copy may be the only one: the rerun must fail the
    run with a conflict naming config.yaml, keep the new source and
    leave DEST's files of the run as the kill left them; the other runs
    converge to the reference."""
    name = "process_replaced"
    RUN = "2871001"

    def kills(self, d, kills, r, violation, limit):
        for i in range(kills):
            d = os.path.join(self.work, "%s-%04d" % (self.name, i))
            os.makedirs(d)
            self.prepare(d)
            asan = (self.env.get("ASAN_OPTIONS", "") +
                    ":verify_asan_link_order=0").lstrip(":")
            state = os.path.join(d, "dst", ".ckpt-process",
                                 self.RUN + ".json")
            kenv = {"LD_PRELOAD": KILL_SHIM, "ASAN_OPTIONS": asan,
                    "CKPT_TEST_KILL_TO": state}
            hit, delay, at = run_self_killed(self.argv(d),
                                             dict(self.env, **kenv), limit)
            if not at:
                r["missed"] += 1
                continue
            r["kills"] += 1
            before = len(r["violations"])
            for msg in self.after_kill(d, self.orig, self.ref):
                violation("safety", delay, msg)
            with open(state) as f:
                phase = json.load(f).get("phase")
            if phase != "uploaded":
                violation("kill-point", delay, "the state at the kill "
                          "says %r, not 'uploaded'" % phase)
            kept = final(below(self.snap_dest(d), self.RUN))
            cfg = os.path.join(d, "src", self.RUN, "config.yaml")
            with open(cfg, "rb") as f:
                data = bytearray(f.read())
            data[-2] ^= 0x20        # other bytes, same size
            with open(cfg, "wb") as f:
                f.write(bytes(data))
            self.lapse(d)
            p2, _ = run_to_end(self.argv(d), self.env)
            src, dst = self.state(d)
            row = [x for x in p2.stdout.splitlines()
                   if x.startswith("error\t%s/src/%s\t" % (d, self.RUN))]
            if p2.returncode != 1 or not row or "conflict:" not in row[0] \
                    or "config.yaml" not in row[0]:
                violation("immutable", delay, "the rerun of a replaced "
                          "source did not fail with a conflict naming "
                          "config.yaml (exit %d): %s" % (
                              p2.returncode, p2.stdout[-600:]))
            if final(below(dst, self.RUN)) != kept:
                violation("immutable", delay, "DEST's files of %s changed "
                          "after its source was replaced:\n%s" % (
                              self.RUN, diff(final(below(dst, self.RUN)),
                                             kept)))
            if not os.path.exists(cfg) or \
                    md5_file(cfg) != hashlib.md5(bytes(data)).hexdigest():
                violation("immutable", delay, "the new source's "
                          "config.yaml is gone or changed")
            for run in {k.split("/")[0] for k in self.orig[0]} - {
                    self.RUN}:
                if below(src, run) != below(self.ref[0], run) or \
                        final(below(dst, run)) != final(
                            below(self.ref[1], run)):
                    violation("converge", delay, "%s did not converge" % run)
            if len(r["violations"]) == before:
                r["survived"] += 1
            if not os.environ.get("CRASH_KEEP"):
                shutil.rmtree(d, ignore_errors=True)


class ProcessVanish(Process):
    """process with a good run's files vanishing under it: its directory
    emptied (files moved to RUN.vanished, an empty directory left, as
    another worker leaves it) at the k-th open of it, k drawn from 1..16
    (vanish_preload.c), so that some land between its judge and its
    upload. Nothing may call the run processed (row) or done (state)
    without all of it at DEST, and no file may be lost (each is at the
    source, where the shim moved it, at DEST as the reference has it, or
    one the reference deletes too). (No rerun: files put back by rename
    have new ctimes, which the recorded drops rightly refuse.)"""
    name = "process_vanish"
    GOOD = ("2871001", "2871007")

    def kills(self, d, kills, r, violation, limit):
        shim = os.path.join(os.environ.get("CKPT_BUILD") or BUILD,
                            "libvanish_preload.so")
        for i in range(kills):
            d = os.path.join(self.work, "%s-%04d" % (self.name, i))
            os.makedirs(d)
            self.prepare(d)
            run = self.rng.choice(self.GOOD)
            k = self.rng.randint(1, 16)
            top = os.path.join(d, "src", run)
            asan = (self.env.get("ASAN_OPTIONS", "") +
                    ":verify_asan_link_order=0").lstrip(":")
            venv = dict(self.env, LD_PRELOAD=shim, ASAN_OPTIONS=asan,
                        CKPT_TEST_VANISH=top, CKPT_TEST_VANISH_SKIP=str(k),
                        CKPT_TEST_VANISH_EMPTY="1")
            p, _ = run_to_end(self.argv(d), venv)
            r["kills"] += 1
            before = len(r["violations"])
            _, dst = self.state(d)
            whole = final(below(dst, run)) == final(below(self.ref[1], run))
            said = [x for x in p.stdout.splitlines()
                    if x.startswith("process\t%s\t" % top)]
            st = os.path.join(d, "dst", ".ckpt-process", run + ".json")
            done = os.path.exists(st) and json.load(open(st)).get(
                "phase") == "done"
            if (said or done) and not whole:
                violation("false-success", k, "%s %s without all of it at "
                          "DEST (the %d-th open emptied it):\n%s" % (
                              run, "processed" if said else "done", k,
                              diff(final(below(dst, run)),
                                   final(below(self.ref[1], run)))))
            # Nothing lost: each source file is still at the source (or
            # where the shim moved it), at DEST as the reference has it,
            # or one the reference deletes too (a bad run, a drop).
            src = {k.replace(run + ".vanished", run, 1): v
                   for k, v in snap(os.path.join(d, "src")).items()}
            got = final(dst)
            for key, val in self.orig[0].items():
                if val[0] != "f" or src.get(key) == val or \
                        got.get(key) == val:
                    continue
                if key in self.ref[0] or key in self.ref[1]:
                    violation("lost", k, "%s is gone from the source and "
                              "not at DEST (the %d-th open of %s emptied "
                              "it)" % (key, k, run))
            if len(r["violations"]) == before:
                r["survived"] += 1
            if not os.environ.get("CRASH_KEEP"):
                shutil.rmtree(d, ignore_errors=True)


def ls_complete_tree(loc, env):
    """Checkpoints `ckpt ls DEST` calls complete in the runs at DEST:
    {"RUN/STEP": row}."""
    p = subprocess.run([CKPT, "ls", loc], capture_output=True, text=True,
                       env=env, timeout=120)
    done = {}
    for line in p.stdout.splitlines():
        f = line.split("\t")
        if len(f) >= 5 and f[4] == "complete":
            run = f[0][len(loc):].strip("/")
            done[(run + "/" if run else "") + f[1]] = f
    return done


SCENARIOS = [Clean, Unshard, UnshardS3, Upload, UploadS3, Process,
             ProcessS3, ProcessReplaced, ProcessVanish]
QUICK = False


# ---- the driver ----

def run_to_end(argv, env):
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, capture_output=True, text=True,
                       timeout=600)
    return p, time.monotonic() - t0


def run_killed(argv, env, delay):
    """Start argv, SIGKILL it after delay seconds. True if the kill hit a
    running process."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        p.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return True


def run_killed_on(argv, env, probe, limit):
    """Start argv, SIGKILL it as soon as probe() is true. (hit, seconds
    from the start to the kill, whether the probe chose the moment)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    while p.poll() is None and time.monotonic() - t0 < limit:
        if probe():
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            hit = p.returncode == -signal.SIGKILL
            return hit, time.monotonic() - t0, hit
    # Past the limit (a slow run on a loaded machine): killed here, at
    # no chosen point, but a kill all the same: checked, leases lapsed.
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    return p.returncode == -signal.SIGKILL, time.monotonic() - t0, False


def run_self_killed(argv, env, limit):
    """Run argv, whose environment makes it SIGKILL itself at a chosen
    point (kill_preload.c). (hit, seconds from the start to the end,
    whether it died at its point)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        p.wait(timeout=limit)
        hit = p.returncode == -signal.SIGKILL
        return hit, time.monotonic() - t0, hit
    except subprocess.TimeoutExpired:
        # Not at its point by the limit (a loaded machine): killed here,
        # a kill all the same (checked, its leases lapsed before the
        # rerun).
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return p.returncode == -signal.SIGKILL, time.monotonic() - t0, False


def classify(name, end, ref, orig):
    """Kind of a rerun's end state that differs from the reference:
    "litter" when every difference is a temporary name left behind (a dead
    process's: ckpt removes only its own), "leftover-sharded" (unshard)
    when every difference is SRC still holding (part of) a sharded step
    whose output at DEST is complete (--delete-sharded killed before or
    while deleting it), "leftover-run" (clean) when every difference is
    SRC still holding part of a run or a pruned checkpoint that the
    reference deletes (killed while deleting it), else "converge"."""
    keys = [(0, k) for k in set(end[0]) | set(ref[0])
            if end[0].get(k) != ref[0].get(k)]
    keys += [(1, k) for k in set(end[1]) | set(ref[1])
             if end[1].get(k) != ref[1].get(k)]
    if all(is_temp(k) and k not in ref[side] for side, k in keys):
        return "litter"
    tops = {k.split("/")[0] for side, k in keys}
    extra = all(side == 0 and k not in ref[0] for side, k in keys)
    if extra and name.startswith("unshard") and all(
            s.startswith("step") and under(end[1], s + "-unsharded") and
            under(end[1], s + "-unsharded") == under(ref[1],
                                                     s + "-unsharded")
            for s in tops):
        return "leftover-sharded"
    if extra and name == "clean" and all(
            partly_deleted(k, end[0], orig[0], ref[0])
            for side, k in keys):
        return "leftover-run"
    return "converge"


def partly_deleted(k, end, orig, ref):
    """k lies in a tree the reference deletes (its topmost ancestor
    missing from ref) of which the killed run deleted a part."""
    parts = k.split("/")
    for i in range(1, len(parts) + 1):
        top = "/".join(parts[:i])
        if top not in ref:
            return under(end, top) != under(orig, top)
    return False


def scenario(cls, env, rng, work, kills, report):
    sc = cls(env, rng, work)
    if sc.remote:
        proxy(env, "config", {"delete_delay_ms": sc.DELETE_DELAY_MS})
    ref_dir = os.path.join(work, sc.name + "-ref")
    os.makedirs(ref_dir)
    sc.prepare(ref_dir)
    orig = sc.state(ref_dir)
    p, dur = run_to_end(sc.argv(ref_dir), env)
    ref = sc.state(ref_dir)
    sc.orig, sc.ref = orig, ref
    # A rerun after a kill answers as the first run (the kill came before
    # anything changed) or as a rerun of a finished one (after: clean and
    # --delete-source runs find SRC gone).
    p_again, _ = run_to_end(sc.argv(ref_dir), env)
    exits = {p.returncode, p_again.returncode}
    # The first run pays for cold caches: the kill window is the shorter
    # of two uninterrupted runs.
    d2 = os.path.join(work, sc.name + "-ref2")
    os.makedirs(d2)
    sc.prepare(d2)
    _, dur2 = run_to_end(sc.argv(d2), env)
    dur = min(dur, dur2)
    shutil.rmtree(d2, ignore_errors=True)
    r = {"scenario": sc.name, "reference_seconds": round(dur, 3),
         "reference_exit": p.returncode, "rerun_exit": p_again.returncode,
         "kills": 0, "probed": 0, "missed": 0, "survived": 0,
         "violations": []}
    report.append(r)

    def violation(kind, delay, msg):
        r["violations"].append({"kind": kind, "delay": round(delay, 3),
                                "message": msg})

    if p.returncode or any(is_temp(k) for s in ref for k in s):
        violation("reference", 0, "the uninterrupted run failed (%d) or "
                  "left temporary files: %s" % (p.returncode,
                                                p.stderr[-500:]))
    if hasattr(sc, "kills"):
        sc.kills(work, kills, r, violation, 10 * dur + 5)
        return r
    for i in range(kills):
        d = os.path.join(work, "%s-%04d" % (sc.name, i))
        os.makedirs(d)
        sc.prepare(d)
        kenv = sc.kill_at(d) if i % 2 else None
        probe = sc.probe(d) if i % 2 and not kenv else None
        if kenv:
            hit, delay, at = run_self_killed(sc.argv(d),
                                             dict(env, **kenv), 10 * dur + 5)
            r["probed"] += at
        elif probe:
            hit, delay, at = run_killed_on(sc.argv(d), env, probe,
                                           10 * dur + 5)
            r["probed"] += at
        else:
            delay = rng.uniform(0, 0.9 * dur)
            hit = run_killed(sc.argv(d), env, delay)
        settle(env)
        before = len(r["violations"])
        if not hit:
            r["missed"] += 1
        else:
            r["kills"] += 1
            for msg in sc.after_kill(d, orig, ref):
                violation("safety", delay, msg)
            sc.lapse(d)
        p2, _ = run_to_end(sc.argv(d), env)
        end = sc.state(d)
        if end != ref:
            violation(sc.classify(end, ref, orig) or
                      classify(sc.name, end, ref, orig), delay,
                      "the rerun (exit %d) did not converge:\n%s\n%s" % (
                          p2.returncode, diff(end[0], ref[0]),
                          diff(end[1], ref[1])))
        elif p2.returncode not in exits:
            violation("converge", delay, "the rerun exits %d, the "
                      "reference %s: %s" % (p2.returncode, sorted(exits),
                                           p2.stderr[-500:]))
        if hit and len(r["violations"]) == before:
            r["survived"] += 1
        if not os.environ.get("CRASH_KEEP"):
            shutil.rmtree(d, ignore_errors=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--quick", action="store_true",
                    help="smaller upload trees (the CI sample)")
    ap.add_argument("--known", default="",
                    help="violation kinds reported as KNOWN, not failing "
                    "(litter, leftover-sharded: see docs/reliability.md)")
    a = ap.parse_args()
    global QUICK
    QUICK = a.quick
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    only = set(filter(None, a.only.split(",")))
    classes = [c for c in SCENARIOS if not only or c.name in only]
    print("crash.py: seed %d, %d kills per command" % (seed, a.kills),
          flush=True)
    known = set(filter(None, a.known.split(",")))
    report = []
    work = tempfile.mkdtemp(prefix="ckpt-crash-")
    try:
        base = dict(os.environ)
        local = [c for c in classes if not c.remote]
        remote = [c for c in classes if c.remote]
        for cls in local:
            scenario(cls, base, rng, work, a.kills, report)
            show(report[-1], known)
        if remote:
            with S3Env(buckets=[BUCKET]) as s3:
                env = s3.env()
                for cls in remote:
                    scenario(cls, env, rng, work, a.kills, report)
                    show(report[-1], known)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:  # figures for docs/reliability.md
            json.dump({"seed": seed, "kills_per_command": a.kills,
                       "scenarios": report}, f, indent=1)
    bad = sum(1 for r in report
              if any(v["kind"] not in known for v in r["violations"]))
    print("%d passed, %d failed" % (len(report) - bad, bad))
    return 1 if bad else 0


def show(r, known):
    kinds = {}
    for v in r["violations"]:
        kinds[v["kind"]] = kinds.get(v["kind"], 0) + 1
    probed = (" (%d at the start of a delete)" % r["probed"]
              if r["probed"] else "")
    print("%-11s reference %.2fs exit %d; kill points survived %d/%d%s, "
          "missed (ended before the kill) %d, violations %s" % (
              r["scenario"], r["reference_seconds"], r["reference_exit"],
              r["survived"], r["kills"], probed, r["missed"],
              ", ".join("%s %d" % kv for kv in sorted(kinds.items()))
              or "0"), flush=True)
    shown = {}
    for v in r["violations"]:
        shown[v["kind"]] = shown.get(v["kind"], 0) + 1
        if shown[v["kind"]] > 3:
            continue
        tag = "KNOWN" if v["kind"] in known else "VIOLATION"
        print("  %s %s, kill at %.3fs: %s" % (
            tag, v["kind"], v["delay"],
            v["message"].replace("\n", "\n    ")), flush=True)


if __name__ == "__main__":
    sys.exit(main())
