"""s3test.py - shared helpers for the Python object-storage integration
tests: run storage_tool, check results, count passes."""
import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from s3env import S3Env  # noqa: E402,F401

BUILD = os.environ.get("CKPT_BUILD") or os.path.join(HERE, "..", "..",
                                                     "build")
TOOL = os.path.join(BUILD, "storage_tool")
CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
GEN_RUNS = os.path.join(HERE, "gen_runs.py")


def ckpt(*args, env=None, timeout=600):
    """Run ckpt; returns (rc, stdout str, stderr str)."""
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       timeout=timeout)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def unshard(env, *args):
    """`ckpt unshard --no-progress ARGS` under env; with SINK_TIMES set,
    print how long it took (the sink tests' timings)."""
    import time
    t0 = time.time()
    p = subprocess.run([CKPT, "unshard", "--no-progress"] + list(args),
                       env=env, capture_output=True, text=True, timeout=600)
    if os.environ.get("SINK_TIMES"):
        print("%.2fs %s" % (time.time() - t0, " ".join(args)))
    return p


def file_rows(out):
    """The rows of `ckpt cp` (upload) output: its lines but the total row
    that ends it."""
    return [ln for ln in out.splitlines() if not ln.startswith("total\t")]


def ls_errors(out):
    """The rows of `ckpt ls`, each LOCATION or run it could not read as
    (LOCATION, WHY): that is its row, STATE `error: WHY`, and no message
    repeats it (docs/output.md); any other row as the tuple of its
    fields."""
    res = []
    for ln in out.splitlines():
        f = tuple(ln.split("\t"))
        if len(f) == 7 and f[4].startswith("error: ") and \
                f[1:4] + f[5:] == ("-",) * 5:
            res.append((f[0], f[4][len("error: "):]))
        else:
            res.append(f)
    return res


def sh(*args, env=None):
    """Run a command (text output); a non-zero exit raises AssertionError
    with its output."""
    p = subprocess.run(list(args), env=env, capture_output=True, text=True,
                       timeout=600)
    if p.returncode:
        raise AssertionError("%s: %d\n%s%s" % (" ".join(args), p.returncode,
                                               p.stdout, p.stderr))
    return p


def download(env, bucket, prefix, to):
    """aws s3 cp --recursive of s3://bucket/prefix into a fresh `to`
    (what a user would fetch); returns `to`."""
    shutil.rmtree(to, ignore_errors=True)
    sh("aws", "s3", "cp", "--quiet", "--recursive",
       "s3://%s/%s" % (bucket, prefix), to, env=env)
    return to


def noise(path, rounds, run, alphabet):
    """Compressible noise at path, the same bytes every time: rounds of
    30,000 random bytes then run bytes drawn from range(alphabet) (many
    bzip2 blocks, xz blocks and zstd frames once compressed)."""
    r = random.Random(22)
    with open(path, "wb") as f:
        for _ in range(rounds):
            f.write(r.randbytes(30000))
            f.write(bytes(r.randrange(alphabet) for _ in range(run)))


def contents(root):
    """{relative path: bytes} of the files below root."""
    out = {}
    for d, _, fs in os.walk(root):
        for n in fs:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def snapshot(path):
    """{relative path: bytes} of a run directory (links left out) or an
    archive (its single top directory stepped into)."""
    files = {}
    if os.path.isdir(path):
        for d, _, fs in os.walk(path):
            for n in fs:
                p = os.path.join(d, n)
                if not os.path.islink(p):
                    with open(p, "rb") as f:
                        files[os.path.relpath(p, path)] = f.read()
        return files
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            for i in z.infolist():
                if not i.is_dir():
                    files[i.filename] = z.read(i)
    else:
        with tarfile.open(path) as t:
            for m in t.getmembers():
                if m.isfile():
                    files[m.name] = t.extractfile(m).read()
    tops = {k.split("/")[0] for k in files}
    if len(tops) == 1 and all("/" in k for k in files):
        files = {k.split("/", 1)[1]: v for k, v in files.items()}
    return files


def listing(root):
    """Sorted relative paths of the files below root."""
    out = []
    for d, _, fs in os.walk(root):
        for n in fs:
            out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def plan(out):
    """process rows as sorted (action, run, numbers...) with the real
    run's words and without the columns a plan has not (freed per run,
    seconds): `process -n` and the real run compare equal."""
    res = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "total":
            res.append(tuple(x for x in f if not x.startswith("seconds=")))
        elif f[0] in ("process", "would-process"):
            res.append(("process",) + tuple(f[1:6]))
        else:
            res.append((f[0].replace("would-delete", "delete"),) +
                       tuple(x.replace("finishes an", "finished an")
                             for x in f[1:]))
    return sorted(res)


def digests(root):
    """{relative path: sha256} of the files below root."""
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), root)] = \
                    hashlib.sha256(fh.read()).hexdigest()
    return out


AGE_SHIM = os.path.join(BUILD, "libage_preload.so")


def old_ctime(env=None, preload=None):
    """env (os.environ when None) for ckpt over trees aged with utime():
    the live-run guard reads the newer of mtime and ctime, and a test
    cannot put a ctime in the past, so tests/support/age_preload.c
    reports every ctime 10 days earlier (a change still moves it).
    preload: another shim to load as well."""
    e = dict(os.environ if env is None else env)
    e["LD_PRELOAD"] = AGE_SHIM + (" " + preload if preload else "")
    e["CKPT_TEST_OLD_CTIME"] = "864000"
    # ASan wants its runtime first; the shim only wraps stat() and open().
    e["ASAN_OPTIONS"] = (e.get("ASAN_OPTIONS", "") +
                         ":verify_asan_link_order=0").lstrip(":")
    return e


def lapse(dest):
    """Every lease in a local DEST's .ckpt-process/, expired an hour ago
    (as a killed worker's is after --lease-ttl)."""
    sdir = os.path.join(dest, ".ckpt-process")
    for name in os.listdir(sdir):
        if not name.endswith(".lease"):
            continue
        path = os.path.join(sdir, name)
        with open(path) as f:
            lease = json.load(f)
        lease["acquired"] = lease["expires"] = int(time.time()) - 3600
        with open(path, "w") as f:
            f.write(json.dumps(lease) + "\n")


def age_tree(root, when=1e9):
    """Every file and directory below root (not root) older than any
    --min-age: mtime `when`."""
    for d, ds, fs in os.walk(root):
        for n in ds + fs:
            os.utime(os.path.join(d, n), (when, when), follow_symlinks=False)


def gen_runs(root, archives=False):
    """tests/support/gen_runs.py's sample runs under root, aged."""
    subprocess.run([sys.executable, GEN_RUNS, root] +
                   (["--archives"] if archives else []), check=True,
                   capture_output=True)
    age_tree(root)


class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def eq(self, what, got, want):
        if got == want:
            self.passed += 1
        else:
            self.failed += 1
            g, w = repr(got), repr(want)
            print("FAIL %s:\n  got  %s\n  want %s" % (what, g[:2000],
                  w[:2000]), file=sys.stderr)

    def true(self, what, cond):
        self.eq(what, bool(cond), True)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed or not self.passed else 0


def tool(env, *args, input=None, check=True, timeout=600):
    """Run storage_tool; returns (rc, stdout bytes, stderr str)."""
    r = subprocess.run([TOOL] + list(args), env=env, input=input,
                       capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("storage_tool %s: rc %d: %s" % (
            " ".join(args), r.returncode, r.stderr.decode()))
    return r.returncode, r.stdout, r.stderr.decode()


def remote_contents(env, bucket, prefix, names=None, check=False):
    """{key relative to prefix: bytes} of the objects below
    s3://bucket/prefix, read back with storage_tool (names: only those).
    A prefix holding nothing is {} - or, with check, the listing's
    failure raises."""
    _, out, _ = tool(env, "ls", "-r", "s3://%s/%s" % (bucket, prefix),
                     check=check)
    res = {}
    for line in out.decode().splitlines():
        name = line.split("\t")[2]
        if names is None or name in names:
            _, res[name], _ = tool(env, "cat", "s3://%s/%s/%s"
                                   % (bucket, prefix, name))
    return res


@contextlib.contextmanager
def scratch(prefix):
    """A scratch directory, yielded; removed after, from "/" (a test may
    have chdir'd into it)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp
    finally:
        os.chdir("/")
        shutil.rmtree(tmp, ignore_errors=True)


def dest_tree(env, dest, bucket="ckpt-test"):
    """contents() of a DEST: a local directory or s3://BUCKET/PREFIX."""
    if dest.startswith("s3://"):
        return remote_contents(env, bucket,
                               dest[len("s3://%s/" % bucket):])
    return contents(dest)


@contextlib.contextmanager
def s3_session(prefix):
    """A scratch directory (removed after) and a running S3Env: yields
    (tmp, env), env with its own CKPT_STATE_DIR below tmp. Trees are
    aged with utime(), so ctimes are aged too (old_ctime)."""
    os.environ.update(old_ctime())
    with scratch(prefix) as tmp, S3Env() as s3:
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        yield tmp, env
