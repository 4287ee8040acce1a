#!/usr/bin/python3
# ctest-cost: 25
"""cp_controls.py - the transfer controls rclone and aws users look for
in `ckpt cp` (issue 30), against a local DEST:

1. Filters: --include, --exclude and --filter-from FILE ("+ GLOB",
   "- GLOB", '#' comments) are one rule list in command-line order, the
   first match decides (the same globs as process's); with
   --delete-source the files left out stay at SRC; a filter file line
   that is no rule is refused (exit 2, the line named).
2. --bwlimit 4M: 24 MiB in files of 1 MiB take 6 s (one token bucket for
   all 32 workers): the bytes sent over the wall time is within 80-105 %
   of 4 MiB/s; without it the same copy takes well under a second.
3. --progress: in a pipe, progress lines every second from the start,
   each with a timestamp, with -q too; without it a short copy prints
   none; --progress with --no-progress is refused.
4. A resumed copy (SIGTERM mid-way, rerun with --progress): the size
   counts the whole file (64.0 MiB/64.0 MiB), the rate only the bytes
   this run sent (bytes_sent / seconds of the total row, within 15 %),
   not the parts an earlier run sent.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import offline  # noqa: E402
from s3test import CKPT, Checker, ckpt  # noqa: E402

offline.apply(os.environ)
MIB = 1 << 20
STAMP = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"


def put(path, size=3):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(os.urandom(size))


def files(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def total(out):
    line = [ln for ln in out.splitlines() if ln.startswith("total\t")][-1]
    return dict(f.split("=", 1) for f in line.split("\t")[1:])


def filters(c, tmp):
    src = os.path.join(tmp, "f")
    for rel in ("a/big.bin", "a/y.npy", "b/x.npy", "c.yaml", "step0/m.pt"):
        put(os.path.join(src, rel))
    rules = os.path.join(tmp, "rules")
    with open(rules, "w") as f:
        f.write("# rclone's filter file\n- *.yaml\n\n+ a/**\n  ; a comment"
                "\n- *\n")

    def planned(*opts):
        rc, out, err = ckpt("cp", "-n", "-v", *opts, src, tmp + "/fd")
        return rc, sorted(ln.split("\t")[1][len(src) + 1:]
                          for ln in out.splitlines()
                          if ln.startswith("would-copy\t")), err

    c.eq("--exclude '*.npy'", planned("--exclude", "*.npy"),
         (0, ["a/big.bin", "c.yaml", "step0/m.pt"], ""))
    c.eq("--filter-from: first match wins, the rest left out",
         planned("--filter-from", rules), (0, ["a/big.bin", "a/y.npy"], ""))
    c.eq("--exclude before --filter-from: it decides first",
         planned("--exclude", "*.npy", "--filter-from", rules),
         (0, ["a/big.bin"], ""))
    c.eq("--include after --filter-from: the file's rule came first",
         planned("--filter-from", rules, "--include", "c.yaml"),
         (0, ["a/big.bin", "a/y.npy"], ""))
    c.eq("--include before --filter-from: taken",
         planned("--include", "c.yaml", "--filter-from", rules),
         (0, ["a/big.bin", "a/y.npy", "c.yaml"], ""))
    rc, out, err = ckpt("cp", "--delete-source", "--filter-from", rules,
                        src, tmp + "/fd")
    c.eq("--delete-source: copied", (rc, files(tmp + "/fd")),
         (0, ["a/big.bin", "a/y.npy"]))
    c.eq("--delete-source: the files left out stay at SRC", files(src),
         ["b/x.npy", "c.yaml", "step0/m.pt"])
    bad = os.path.join(tmp, "bad")
    with open(bad, "w") as f:
        f.write("+ a/**\nexclude *.npy\n")
    rc, out, err = ckpt("cp", "--filter-from", bad, src, tmp + "/fx")
    c.eq("a line that is no rule: refused", (rc, out, err.splitlines()[0]), (
        2, "", "ckpt cp: error: --filter-from '%s' line 2: expected "
        "'+ PATTERN', '- PATTERN' or a '#' comment, got 'exclude *.npy'"
        % bad))
    c.true("refused: nothing copied", not os.path.exists(tmp + "/fx"))
    rc, _, err = ckpt("cp", "--filter-from", tmp + "/none", src, tmp + "/fx")
    c.eq("a missing filter file: refused", (rc, err.splitlines()[0]), (
        2, "ckpt cp: error: --filter-from '%s/none': No such file or "
        "directory" % tmp))


def bwlimit(c, tmp):
    src = os.path.join(tmp, "bw")
    for i in range(24):
        put(os.path.join(src, "f%02d" % i), MIB)
    t0 = time.time()
    rc, out, err = ckpt("cp", "--bwlimit", "4M", src, tmp + "/bwd")
    wall = time.time() - t0
    sent = int(total(out)["bytes_sent"])
    rate = sent / wall / MIB
    print("--bwlimit 4M: %d bytes in %.2f s: %.2f MiB/s" % (sent, wall, rate))
    c.eq("--bwlimit: copied", (rc, sent), (0, 24 * MIB))
    c.true("--bwlimit 4M: %.2f MiB/s within 80-105 %%" % rate,
           3.2 <= rate <= 4.2)
    t0 = time.time()
    rc, out, err = ckpt("cp", src, tmp + "/bwfree")
    free = time.time() - t0
    print("no --bwlimit: %.2f s" % free)
    c.true("no --bwlimit: %.2f s, well under the limited copy" % free,
           rc == 0 and free < wall / 3)
    rc, out, err = ckpt("cp", "--bwlimit", "fast", src, tmp + "/bwx")
    c.eq("--bwlimit needs a size", (rc, out), (2, ""))


def progress_lines(err, cmd="cp"):
    return [ln for ln in err.splitlines()
            if re.match(r"(%s )?ckpt: %s: [0-9]+/[0-9]+ items" % (STAMP, cmd),
                        ln)]


def progress(c, tmp):
    src = os.path.join(tmp, "pg")
    for i in range(8):
        put(os.path.join(src, "f%d" % i), MIB)
    rc, out, err = ckpt("cp", src, tmp + "/pg0")
    c.eq("a short copy in a pipe: no progress lines", (rc, progress_lines(err)),
         (0, []))
    rc, out, err = ckpt("cp", "-q", "--progress", "--bwlimit", "3M", src,
                        tmp + "/pg1")
    lines = progress_lines(err)
    c.eq("--progress -q: only progress lines on stderr",
         (rc, len(lines), len(err.splitlines())), (0, len(lines), len(lines)))
    c.true("--progress: every line timestamped (%r)" % lines,
           lines and all(re.match(STAMP + " ckpt: cp: ", ln) for ln in lines))
    c.true("--progress: the first line at the start (%r)" % lines[:1],
           lines and re.search(r" ckpt: cp: 0/8 items, 0 B/8\.0 MiB, 0 B/s$",
                               lines[0]))
    c.true("--progress: a line each second (%d lines for about 2.7 s)"
           % len(lines), 3 <= len(lines) <= 6)
    c.true("--progress: the last line the whole (%r)" % lines[-1:],
           lines and " ckpt: cp: 8/8 items, 8.0 MiB/8.0 MiB, " in lines[-1])
    rc, out, err = ckpt("cp", "--progress", "--no-progress", src,
                        tmp + "/pg2")
    c.eq("--progress --no-progress: refused", (rc, err.splitlines()[0]),
         (2, "ckpt cp: error: --progress and --no-progress exclude each "
          "other"))


def size_of(s):
    n, unit = s.split(" ")
    return float(n) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20,
                       "GiB": 1 << 30}[unit]


def resumed_rate(c, tmp):
    src = os.path.join(tmp, "rs")
    put(os.path.join(src, "big.bin"), 64 * MIB)
    env = dict(os.environ, CKPT_STATE_DIR=os.path.join(tmp, "state"))
    dst = tmp + "/rsd"
    p = subprocess.Popen([CKPT, "cp", "--bwlimit", "16M", src, dst],
                         env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    time.sleep(2.2)
    p.send_signal(signal.SIGTERM)
    p.communicate()
    c.eq("SIGTERM mid-copy: exit 143", p.returncode, 143)
    r = subprocess.run([CKPT, "cp", "--progress", "--bwlimit", "16M", src,
                        dst], env=env, capture_output=True, text=True)
    t = total(r.stdout)
    sent, resumed = int(t["bytes_sent"]), int(t["bytes_resumed"])
    lines = progress_lines(r.stderr)
    print("rerun: sent %d, resumed %d in %s s; last line %r" %
          (sent, resumed, t["seconds"], lines[-1:]))
    c.true("rerun: part resumed, part sent", sent > 0 and resumed > 0 and
           sent + resumed == 64 * MIB)
    m = re.search(r" 1/1 items, ([0-9.]+ \w+)/([0-9.]+ \w+), "
                  r"([0-9.]+ \w+)/s$", lines[-1] if lines else "")
    c.true("rerun: a last progress line (%r)" % lines[-1:], m)
    if not m:
        return
    c.eq("rerun: the size counts the whole file", m.group(1, 2),
         ("64.0 MiB", "64.0 MiB"))
    want = sent / float(t["seconds"])
    got = size_of(m.group(3))
    c.true("rerun: the rate counts the bytes sent now (%.1f MiB/s, sent "
           "%.1f MiB/s, all %.1f MiB/s)" % (got / MIB, want / MIB,
                                           64 * MIB / float(t["seconds"]) /
                                           MIB),
           abs(got - want) <= 0.15 * want)


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="cpctl-")
    try:
        filters(c, tmp)
        bwlimit(c, tmp)
        progress(c, tmp)
        resumed_rate(c, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
