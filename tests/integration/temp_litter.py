#!/usr/bin/python3
# ctest-cost: 40
"""temp_litter.py: temporary files of `ckpt upload` (local DEST) and
`ckpt unshard`: short names, and what a killed run leaves behind.

1. `kill -9` of an upload while it writes (a `.ckpt-*.tmp` exists in
   DEST): the rerun removes every temporary the dead process left,
   saying `removed stale temporary PATH (pid N, dead)` for each, and the
   copy is complete and identical.
2. The same for an unshard killed while its temporary output directory
   exists: the rerun removes it, says so, and writes the same bytes as an
   undisturbed run.
3. Temporaries of a live process and of another host are never touched.
4. A file name of 250 bytes (legal: up to 255) is copied (the temporary
   name used to be the file name plus a suffix: "File name too long").

The fixture of 2 is a real torch 1.13 DCP checkpoint (make_dcp.py).
"""
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, check, finish, generate  # noqa: E402

TEMP = re.compile(r"^\.ckpt-([0-9a-f]{8})-(\d+)-[0-9a-f]+\.tmp$")


def host_hash():
    """FNV-1a of the host name, as ckpt puts it in temporary names."""
    h = 2166136261
    for c in socket.gethostname().encode():
        h = ((h ^ c) * 16777619) & 0xffffffff
    return "%08x" % h


def temps(root):
    """Paths of the temporaries below root (not inside one)."""
    out = []
    for d, dirs, files in os.walk(root):
        for n in list(dirs) + files:
            if TEMP.match(n):
                out.append(os.path.join(d, n))
        dirs[:] = [n for n in dirs if not TEMP.match(n)]
    return sorted(out)


def strip_ts(text):
    return re.sub(r"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", "", text)


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def kill_when(argv, cond, what):
    """Start argv, SIGKILL it as soon as cond() holds; True if it did."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while p.poll() is None and time.time() < deadline:
        if cond():
            p.send_signal(signal.SIGKILL)
            p.wait()
            return p.pid
        time.sleep(0.0005)
    p.kill()
    p.wait()
    check("%s: killed while writing" % what, False, "finished first")
    return None


def same_tree(a, b):
    def files(root):
        out = {}
        for d, _, fs in os.walk(root):
            for n in fs:
                with open(os.path.join(d, n), "rb") as f:
                    out[os.path.relpath(os.path.join(d, n), root)] = f.read()
        return out
    return files(a) == files(b)


def removed_lines(stderr, paths, pid):
    want = sorted("ckpt: removed stale temporary %s (pid %d, dead)" % (p, pid)
                  for p in paths)
    got = sorted(x for x in strip_ts(stderr).splitlines()
                 if "removed stale temporary" in x)
    return got == want, "got %s, want %s" % (got, want)


def upload_killed(tmp):
    src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
    rng = random.Random(5)
    for i in range(48):
        d = os.path.join(src, "d%d" % (i % 3))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%02d" % i), "wb") as f:
            f.write(rng.randbytes(3 << 20))
    # The kill lands a moment after a temporary was seen; on a loaded
    # machine that moment may fall between two files, every temporary
    # renamed already. Such a kill proves nothing: start again.
    for attempt in range(10):
        shutil.rmtree(dst, ignore_errors=True)
        pid = kill_when([CKPT, "upload", "-q", "--transfers", "4", src, dst],
                        lambda: bool(os.path.isdir(dst) and temps(dst)),
                        "upload")
        if pid is None:
            return
        left = temps(dst)
        if left:
            break
    check("upload killed: temporaries left, named with host and pid",
          left and all(TEMP.match(os.path.basename(x)).groups() ==
                       (host_hash(), str(pid)) for x in left), str(left))
    p = subprocess.run([CKPT, "upload", src, dst], capture_output=True,
                       text=True)
    check("upload rerun: exit 0", p.returncode == 0, p.stderr)
    ok, detail = removed_lines(p.stderr, left, pid)
    check("upload rerun: says what it removed", ok, detail)
    check("upload rerun: no temporaries left", temps(dst) == [],
          str(temps(dst)))
    check("upload rerun: copy complete and identical", same_tree(src, dst))


def unshard_killed(tmp):
    ck = os.path.join(tmp, "big", "ckpt")
    ref = os.path.join(tmp, "ref")
    subprocess.run([CKPT, "unshard", "-q", ck, ref], check=True,
                   stdout=subprocess.DEVNULL)
    out = os.path.join(tmp, "out", "step")
    os.makedirs(os.path.dirname(out))
    pid = kill_when([CKPT, "unshard", "-q", "--threads", "1", ck, out],
                    lambda: bool(temps(os.path.dirname(out))), "unshard")
    if pid is None:
        return
    left = temps(os.path.dirname(out))
    check("unshard killed: its temporary directory left", len(left) == 1 and
          TEMP.match(os.path.basename(left[0])).groups() ==
          (host_hash(), str(pid)) and not os.path.exists(out), str(left))
    p = subprocess.run([CKPT, "unshard", "--no-progress", ck, out],
                       capture_output=True, text=True)
    check("unshard rerun: exit 0", p.returncode == 0, p.stderr)
    ok, detail = removed_lines(p.stderr, left, pid)
    check("unshard rerun: says what it removed", ok, detail)
    check("unshard rerun: nothing left beside DEST",
          os.listdir(os.path.dirname(out)) == ["step"],
          str(os.listdir(os.path.dirname(out))))
    check("unshard rerun: the same bytes as an undisturbed run",
          same_tree(ref, out))


def others_kept(tmp):
    """Live pid of this host, dead pid of another host: both stay."""
    dst = os.path.join(tmp, "others")
    os.makedirs(dst)
    other = "%08x" % (int(host_hash(), 16) ^ 1)
    keep = [os.path.join(dst, ".ckpt-%s-%d-0.tmp" % (host_hash(), os.getpid())),
            os.path.join(dst, ".ckpt-%s-%d-0.tmp" % (other, dead_pid()))]
    dead = os.path.join(dst, ".ckpt-%s-%d-7.tmp" % (host_hash(), dead_pid()))
    for x in keep + [dead]:
        with open(x, "w") as f:
            f.write("x")
    src = os.path.join(tmp, "one")
    os.makedirs(src)
    with open(os.path.join(src, "a"), "w") as f:
        f.write("a")
    p = subprocess.run([CKPT, "upload", src, dst], capture_output=True,
                       text=True)
    check("others: exit 0", p.returncode == 0, p.stderr)
    check("others: live pid's and other host's temporaries kept",
          all(os.path.exists(x) for x in keep), str(os.listdir(dst)))
    check("others: dead one removed", not os.path.exists(dead))
    pid = int(TEMP.match(os.path.basename(dead)).group(2))
    ok, detail = removed_lines(p.stderr, [dead], pid)
    check("others: says what it removed", ok, detail)


def long_name(tmp):
    src, dst = os.path.join(tmp, "lsrc"), os.path.join(tmp, "ldst")
    os.makedirs(src)
    name = "n" * 250
    with open(os.path.join(src, name), "wb") as f:
        f.write(b"long name" * 1000)
    p = subprocess.run([CKPT, "upload", "-q", src, dst], capture_output=True,
                       text=True)
    check("250-byte file name: upload exit 0", p.returncode == 0, p.stderr)
    check("250-byte file name: copied", same_tree(src, dst) and
          os.listdir(dst) == [name], str(os.listdir(dst)
                                         if os.path.isdir(dst) else ""))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-temp-litter-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "big"), "--case", "big",
                  "--size-mb", "48", "--ranks", "4", "--no-expected"])
        upload_killed(tmp)
        unshard_killed(tmp)
        others_kept(tmp)
        long_name(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
