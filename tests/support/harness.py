"""harness.py: what the Python integration tests of `ckpt unshard` share.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "support"))
    from harness import CKPT, SRC, SUP, check, compare, finish, generate, run

SRC      the repository ($CKPT_SRC, else the working directory)
CKPT     the ckpt binary ($CKPT, else SRC/build/ckpt)
PY       Debian's python3, the one with torch 1.13 (/usr/bin/python3)
SUP      SRC/tests/support
Importing it applies tests/support/offline.env to os.environ (offline.py).
run(*args, ok=True, env=None) -> subprocess.CompletedProcess (text output).
         With ok, a non-zero exit raises AssertionError with the output.
unshard(*args) -> run(CKPT, "unshard", "--no-progress", *args, ok=False).
error_of(p) -> the message of the one error row of a failed unshard (no
         message on stderr), else a description of what it printed.
error_in(stdout, stderr) -> error_of of a command's output, for a test
         whose runner returns (rc, stdout, stderr) (s3test.ckpt).
refused(tmp, name, src, mutate, want, snapshot=None)
         A damaged copy of checkpoint SRC (TMP/bad-NAME, MUTATE(copy)) is
         refused: checks exit 1, one error row ending in TAB WANT % {"d":
         copy} and no message, no output and no .ckpt-* left in TMP; with
         SNAPSHOT (a function of the copy), the source untouched.
check(name, cond, detail="")
         Prints "ok   NAME", or "FAIL NAME: DETAIL" and counts a failure.
compare(name, actual, expected, *options)
         check(name, ...) that ACTUAL equals EXPECTED by check_unshard.py
         (options: its --allow-pickle etc.); on failure the detail is what
         check_unshard printed. Every compare of a test goes to one
         `check_unshard.py --batch` co-process, so torch is imported once
         per test, not once per compare; each is still made when called.
generate(*jobs)
         Writes fixtures: each job is [SCRIPT, ARG...] of a tests/support
         generator (["make_dcp.py", DIR, "--case", "rows"]); all run in one
         torch process (run_mains.py), in order. Raises AssertionError if
         one fails.
failures the names of the failed checks
finish() -> exit status
         Prints "N failures"; returns 1 if a check failed or if no check
         ran at all (a test that checked nothing proved nothing), else 0.
st_tensors(path) -> {name: (dtype, shape, data bytes)} of a safetensors
         file, read without torch.
"""
import json
import os
import pty
import shutil
import subprocess

import offline

# Every test runs offline: no credential source reaches past the loopback.
offline.apply(os.environ)

SRC = os.environ.get("CKPT_SRC", os.getcwd())
CKPT = os.environ.get("CKPT", os.path.join(SRC, "build", "ckpt"))
PY = "/usr/bin/python3"
SUP = os.path.join(SRC, "tests", "support")

failures = []
checks = [0]     # how many checks ran
_checker = None  # the check_unshard.py --batch co-process, once started


def pty_out(argv):
    """stdout of argv when it is a terminal."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    p.wait()
    os.close(master)
    return data.decode().replace("\r\n", "\n")


def run(*args, ok=True, env=None):
    p = subprocess.run(list(args), capture_output=True, text=True, env=env)
    if ok and p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            " ".join(args), p.returncode, p.stdout, p.stderr))
    return p


def unshard(*args):
    return run(CKPT, "unshard", "--no-progress", *args, ok=False)


def refused(tmp, name, src, mutate, want, snapshot=None):
    ck = os.path.join(tmp, "bad-" + name)
    shutil.copytree(src, ck)
    mutate(ck)
    before = snapshot(ck) if snapshot else None
    out = os.path.join(tmp, "badout-" + name)
    p = unshard(ck, out)
    rows = p.stdout.strip().splitlines()
    want = want % {"d": ck}
    check("%s: exit 1" % name, p.returncode == 1, p.stderr)
    check("%s: one error row, no message" % name, len(rows) == 1 and
          rows[0].startswith("error\t") and rows[0].endswith("\t" + want)
          and not p.stderr.strip(),
          p.stdout + p.stderr + "\nwanted: " + want)
    check("%s: no output, nothing left" % name, not os.path.exists(out) and
          not [x for x in os.listdir(tmp) if x.startswith(".ckpt-")])
    if snapshot:
        check("%s: source untouched" % name, snapshot(ck) == before)


def error_of(p):
    """The message of the one `error` row an unshard that failed prints
    (an item's failure is its row, not a message too: docs/output.md),
    or, when it printed anything else, what it printed."""
    return error_in(p.stdout, p.stderr)


def error_in(stdout, stderr):
    """error_of of a command's STDOUT and STDERR (s3test.ckpt's)."""
    rows = stdout.splitlines()
    if len(rows) == 1 and rows[0].startswith("error\t") and \
            not stderr.strip():
        return rows[0].split("\t", 3)[-1]
    return "<not one error row: %r %r>" % (stdout, stderr)


def check(name, cond, detail=""):
    checks[0] += 1
    print("%s %s%s" % ("ok  " if cond else "FAIL", name,
                       (": " + detail.strip()) if detail and not cond
                       else ""), flush=True)
    if not cond:
        failures.append(name)


def _check_unshard(argv):
    """(exit status, output) of check_unshard.py ARGV, by the co-process."""
    global _checker
    if _checker is None:
        _checker = subprocess.Popen(
            [PY, os.path.join(SUP, "check_unshard.py"), "--batch"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        _checker.stdin.write(json.dumps(list(argv)) + "\n")
        _checker.stdin.flush()
        line = _checker.stdout.readline()
    except BrokenPipeError:
        line = ""
    if not line:
        # It died (its stderr, inherited, says why); the next compare
        # starts a new one.
        rc = _checker.wait()
        _checker = None
        return 1, "check_unshard.py --batch exited with %d" % rc
    answer = json.loads(line)
    return answer["rc"], answer["output"]


def compare(name, actual, expected, *options):
    rc, out = _check_unshard([actual, expected] + list(options))
    check(name, rc == 0, out)


def generate(*jobs):
    argv = [PY, os.path.join(SUP, "run_mains.py")]
    for i, job in enumerate(jobs):
        argv += ([";"] if i else []) + list(job)
    return run(*argv)


def finish():
    global _checker
    if _checker is not None:
        _checker.stdin.close()
        _checker.wait()
        _checker = None
    print("%d failures" % len(failures))
    if checks[0] == 0 and not failures:
        print("FAIL no check ran")
        return 1
    return 1 if failures else 0


def st_tensors(path):
    """{name: (dtype, shape, data bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"],
                data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
