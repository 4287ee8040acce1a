"""delproof.py: what the "Delete only on proof" tests share (issue 20
classes 5, 7, 8, 9: tests/integration/delete_*.py).

CKPT, BUILD   the ckpt binary, the build directory
gen(root)     the sample runs of gen_runs.py, every file old enough for
              the default --min-age
ckpt(*args, env=None, timeout=60) -> (rc, rows, stderr)
              rows: the TSV lines split on tabs, a process row without
              its SECONDS column (its optional NOTE kept), the total row
              without seconds=; a command that runs past timeout is a
              failure (rc 124), not a hang
tree(path)    {relative path: bytes, or '->target', or 'fifo'} of a
              directory, links not followed
"""
import os
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3test import BUILD, Checker, old_ctime  # noqa: E402,F401

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
GEN = os.path.join(HERE, "gen_runs.py")


def age(root, t=1e9):
    for d, ds, fs in os.walk(root):
        for n in ds + fs:
            os.utime(os.path.join(d, n), (t, t), follow_symlinks=False)
    os.utime(root, (t, t))


def gen(root):
    subprocess.run([sys.executable, GEN, root], check=True,
                   capture_output=True)
    age(root)


def rows(out):
    res = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "process":
            f = f[:7] + f[8:]
        if f[0] == "total":
            f = [x for x in f if not x.startswith("seconds=")]
        res.append(f)
    return res


def ckpt(*args, env=None, timeout=60):
    # Trees are aged with utime(): ctime as old (s3test.old_ctime), with
    # the test's own shim, if any, loaded too.
    env = old_ctime(env, (env or {}).get("LD_PRELOAD"))
    try:
        r = subprocess.run([CKPT] + list(args), capture_output=True,
                           env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, [], "timed out after %d s" % timeout
    return r.returncode, rows(r.stdout.decode()), r.stderr.decode()


def tree(path):
    res = {}
    for d, ds, fs in os.walk(path):
        for n in ds + fs:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, path)
            m = os.lstat(p).st_mode
            if stat.S_ISLNK(m):
                res[rel] = "->" + os.readlink(p)
            elif stat.S_ISFIFO(m):
                res[rel] = "fifo"
            elif stat.S_ISREG(m):
                with open(p, "rb") as f:
                    res[rel] = f.read()
    return res
