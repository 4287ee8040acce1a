"""onepass.py - what the one-pass archive tests (process_onepass*.py,
unshard_onepass*.py, issue 22) share: the run, its archives, ckpt under
the read counter (readcount_preload.c), and the read-once bounds."""
import json
import os
import shutil
import subprocess

from s3test import BUILD, CKPT, contents, gen_runs

SHIM = os.path.join(BUILD, "libreadcount_preload.so")
SPOOL_RE = r"\.ckpt-.*\.tmp$"
STALE_RE = r"removed stale temporary tmp/\.ckpt-\S+\.tmp \(pid \d+, dead\)"


def make_run(tmp, big=True):
    """tmp/src/2871001: the sample run 2871001 without its
    step1000-unsharded (so step1000 is unsharded); with big, 3 MiB of
    random bytes in train_data/big.bin. Returns tmp/src."""
    gen = os.path.join(tmp, "gen")
    gen_runs(gen)
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    shutil.copytree(os.path.join(gen, "2871001"),
                    os.path.join(src, "2871001"), symlinks=True)
    shutil.rmtree(os.path.join(src, "2871001", "step1000-unsharded"))
    if big:
        with open(os.path.join(src, "2871001", "train_data", "big.bin"),
                  "wb") as f:
            f.write(os.urandom(3 << 20))
    return src


def archive(src, tmp, ext, comp):
    """tmp/2871001EXT: src/2871001 tarred and piped through comp."""
    path = os.path.join(tmp, "2871001" + ext)
    tar = subprocess.run(["tar", "cf", "-", "-C", src, "2871001"],
                         check=True, capture_output=True).stdout
    with open(path, "wb") as f:
        f.write(subprocess.run(comp, input=tar, check=True,
                               capture_output=True).stdout)
    return path


def extracted(src, tmp, *argv):
    """tmp/dir/2871001, the extracted run, and `ckpt ARGV` run in tmp/dir
    (the reference every archive must match): (tmp/dir,
    CompletedProcess)."""
    d = os.path.join(tmp, "dir")
    os.makedirs(d)
    shutil.copytree(os.path.join(src, "2871001"),
                    os.path.join(d, "2871001"), symlinks=True)
    return d, subprocess.run([CKPT] + list(argv), cwd=d,
                             capture_output=True, text=True)


def processed_dir(c, src, tmp, argv):
    """DEST (dest()) of `ckpt process ARGV --keep-source` of the extracted
    run (extracted()), its exit 0 checked with c: what every archive of it
    must give."""
    d, r = extracted(src, tmp, "process", *argv, "--keep-source",
                     "2871001", "--dest", "dest")
    c.eq("directory: exit 0 (%s)" % r.stderr[-300:], r.returncode, 0)
    return dest(d)


def preload_env(shim, **var):
    """The environment with LD_PRELOAD=shim (ASan told the shim comes
    first) and the variables var."""
    return dict(os.environ, LD_PRELOAD=shim,
                ASAN_OPTIONS=(os.environ.get("ASAN_OPTIONS", "") +
                              ":verify_asan_link_order=0").lstrip(":"),
                **var)


def shim_env(path, counts, kill_at=None, kill_create=None):
    """The environment that counts ckpt's reads of path into counts
    (with kill_at: SIGKILL once that many bytes were read; with
    kill_create: right after the second file created whose path holds
    it)."""
    env = preload_env(SHIM, CKPT_TEST_READS_PATH=path,
                      CKPT_TEST_READS_OUT=counts)
    if kill_at is not None:
        env["CKPT_TEST_READS_KILL_AT"] = str(kill_at)
    if kill_create is not None:
        env["CKPT_TEST_READS_KILL_CREATE"] = kill_create
    return env


def in_top(top, arc, log):
    """top/ made with top/tmp (for --tmp-dir) and a copy of arc (kept
    when there), the shim's log top/LOG removed: (arc's name, the log's
    path)."""
    os.makedirs(os.path.join(top, "tmp"), exist_ok=True)
    name = os.path.basename(arc)
    if not os.path.exists(os.path.join(top, name)):
        shutil.copy(arc, os.path.join(top, name))
    path = os.path.join(top, log)
    if os.path.exists(path):
        os.remove(path)
    return name, path


def counted(top, arc, argv, kill_at=None, kill_create=None):
    """`ckpt ARGV` in top/ (cwd, so rows and DEST names are the same
    everywhere), with the read counter on top/'s copy of arc (made if
    absent; top/tmp made for --tmp-dir): (CompletedProcess, bytes read,
    opens)."""
    name, counts = in_top(top, arc, "reads")
    r = subprocess.run([CKPT] + list(argv), cwd=top,
                       env=shim_env(os.path.join(top, name), counts,
                                    kill_at, kill_create),
                       capture_output=True, text=True, timeout=300)
    reads, opens = (0, 0)
    if os.path.exists(counts):
        with open(counts) as f:
            reads, opens = map(int, f.read().split())
    return r, reads, opens


def reads_of(arc, *cmd):
    """Bytes `ckpt CMD ARC` reads from arc."""
    counts = arc + ".reads"
    subprocess.run([CKPT] + list(cmd) + [arc], env=shim_env(arc, counts),
                   capture_output=True, timeout=300)
    with open(counts) as f:
        n = int(f.read().split()[0])
    os.remove(counts)
    return n


def once(n, size):
    """n bytes read of an archive of size: once (its size plus the few
    header bytes sniffed)."""
    return size <= n < size + 65536


def fetched(s3, key):
    """Bytes the proxy served of object KEY (/bucket/key) since its last
    reset_stats."""
    return s3.stats()["object_gets"]["keys"].get(key, [0, 0])[1]


def masked(row):
    """A process row without its times."""
    f = row.split("\t")
    if f[0] == "process":
        f[7] = "S"
    elif f[0] == "total":
        f[-1] = "seconds=S"
    return "\t".join(f)


def dest(top):
    """DEST as {path: bytes}, the state object normalised (who wrote it,
    when, from where) and leases left out."""
    out = {}
    for k, v in contents(os.path.join(top, "dest")).items():
        if k.endswith(".lease"):
            continue
        if k.startswith(".ckpt-process/"):
            o = json.loads(v)
            for x in ("host", "pid", "updated", "src"):
                o.pop(x, None)
            v = json.dumps(o, sort_keys=True)
        out[k] = v
    return out
