#!/usr/bin/python3
# ctest-cost: 10
"""process_tty.py - `ckpt process` on a terminal and off it.

On a real pseudo-terminal (stdout and stderr both on it, 250 columns, as
an interactive shell has them), over the generated sample (directories
and every archive kind), --runs 1 so that the queue order is the row
order:
  * one progress line at the bottom, redrawn in place (\\r ESC[K), with
    the rows printed above it: what stays on the screen is exactly the
    rows of the same command without a terminal, then the final progress
    line, then the total row; no per-phase log lines;
  * the final line is `process: 14/14 runs, BYTES copied, FREED freed,
    RATE/s, ETA 0s, in flight: none`, BYTES and FREED the total row's
    bytes= and freed= in ckpt's units;
  * while each run is worked on, a drawn line names it in flight, and the
    done count goes 0, 1, ..., 14 without going back;
  * each compressed archive (.tar.gz, .tar.zst, .tar.xz, .tar.bz2), read
    once into its spool, is drawn in flight with its bytes read and rate
    when its pass ends: `in flight: NAME (read SIZE of SIZE, RATE/s)`.
Without a terminal (pipes): the same rows on stdout, timestamped log
lines on stderr (one per phase), and no progress line, \\r or ESC on
either stream."""
import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import BUILD, Checker, gen_runs  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def size(n):
    u, v = 0, float(n)
    while v >= 1024 and u < 5:
        v /= 1024
        u += 1
    return "%d B" % n if u == 0 else "%.1f %s" % (v, UNITS[u])


def on_pty(argv, cwd):
    """Run argv with stdin, stdout and stderr on a new pseudo-terminal;
    return (exit status, every byte it wrote)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0,
                                                       0))
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                         cwd=cwd, close_fds=True, start_new_session=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(), out.decode()


def human(lines):
    """Rows as a terminal shows them (-H): process rows' bytes and freed
    columns, the total's bytes= and freed=, as size() writes them."""
    out = []
    for line in lines:
        f = line.split("\t")
        if f[0] == "process":
            for i in (4, 6):
                f[i] = size(int(f[i]))
        elif f[0] == "total":
            f = [k + "=" + size(int(v)) if k in ("bytes", "freed") else x
                 for x in f for k, v in [(x.split("=") + [""])[:2]]]
        out.append("\t".join(f))
    return out


def masked(lines):
    """Rows with their seconds (the only timing-dependent field) masked."""
    out = []
    for line in lines:
        f = line.split("\t")
        if f[0] == "process":
            f[7] = "S"
        elif f[0] == "total":
            f = [("seconds=S" if x.startswith("seconds=") else x) for x in f]
        out.append("\t".join(f))
    return out


def screen(raw):
    """What the terminal shows at the end, and every status line drawn:
    a line's text after its last \\r ESC[K is what stays."""
    text = raw.replace("\r\n", "\n")
    shown, drawn = [], []
    for line in text.split("\n"):
        segs = line.split("\r\x1b[K")
        drawn += [s for s in segs if s.startswith("process: ")]
        if segs[-1]:
            shown.append(segs[-1])
    return shown, drawn


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-tty-")
    try:
        gen_runs(os.path.join(tmp, "sample"), archives=True)
        args = [CKPT, "process", "--no-wandb", "--min-age", "0", "--runs",
                "1", "runs", "--dest", "dest"]
        # off a terminal
        shutil.copytree(os.path.join(tmp, "sample"),
                        os.path.join(tmp, "a", "runs"), symlinks=True)
        r = subprocess.run(args, cwd=os.path.join(tmp, "a"),
                           capture_output=True, text=True, timeout=300)
        c.eq("no terminal: exit 0", r.returncode, 0)
        rows = r.stdout.splitlines()
        c.eq("no terminal: 14 rows and the total", len(rows), 15)
        c.eq("no terminal: no \\r or ESC anywhere",
             [s for s in (r.stdout, r.stderr) if "\r" in s or "\x1b" in s],
             [])
        logs = r.stderr.splitlines()
        c.true("no terminal: timestamped log lines, one per phase (%d)"
               % len(logs), len(logs) > 20 and all(
                   re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ckpt: ", x)
                   for x in logs))
        c.true("no terminal: judge log line",
               any(x.endswith("ckpt: runs/2871001: judge ok: complete "
                              "checkpoint step1000-unsharded (unsharded)")
                   for x in logs))
        c.eq("no terminal: no progress line",
             [x for x in logs if "process: " in x], [])

        # on a terminal
        shutil.copytree(os.path.join(tmp, "sample"),
                        os.path.join(tmp, "b", "runs"), symlinks=True)
        rc, raw = on_pty(args, os.path.join(tmp, "b"))
        c.eq("terminal: exit 0", rc, 0)
        shown, drawn = screen(raw)
        # the end's summary per run (what each uploaded or freed), below
        # the total row: read apart
        end = max(i for i, x in enumerate(shown) if x.startswith("total\t"))
        per_run = shown[end + 1:]
        shown = shown[:end + 1]
        c.true("terminal: a summary line per run at the end (%r)" % per_run,
               0 < len(per_run) <= 11 and
               all(x.startswith("ckpt: ") for x in per_run))
        total = dict(kv.split("=") for kv in rows[-1].split("\t")[1:])
        final = shown[-2] if len(shown) > 1 else ""
        c.eq("terminal: the final progress line",
             re.sub(r", [0-9.]+ (B|KiB|MiB|GiB)/s, ", ", RATE/s, ", final),
             "process: 14/14 runs, %s copied, %s freed, RATE/s, ETA 0s, "
             "in flight: none" % (size(int(total["bytes"])),
                                  size(int(total["freed"]))))
        c.eq("terminal: the screen is the rows (sizes for people), the "
             "final line, the total",
             masked(shown[:-2] + shown[-1:]), masked(human(rows)))
        names = [os.path.basename(x.split("\t")[1]) for x in rows[:-1]]
        c.eq("terminal: each run drawn in flight while it was worked on",
             [n for n in names
              if not any(d.endswith("in flight: " + n) for d in drawn)], [])
        arcs = sorted(n for n in os.listdir(os.path.join(tmp, "sample"))
                      if re.search(r"\.tar\.(gz|zst|xz|bz2)$", n))
        c.eq("terminal: 4 compressed archives in the sample", len(arcs), 4)
        c.eq("terminal: each archive drawn with its bytes read and rate",
             [n for n in arcs if not any(re.search(
                 r"in flight: %s \(read %s of %s, [0-9.]+ (B|KiB|MiB|GiB)"
                 r"/s\)$" % (re.escape(n), re.escape(sz), re.escape(sz)),
                 d) for sz in [size(os.path.getsize(os.path.join(
                     tmp, "sample", n)))] for d in drawn)], [])
        done = [int(re.match(r"process: (\d+)/14 runs", d).group(1))
                for d in drawn]
        c.eq("terminal: done counts 0..14, never back",
             (sorted(set(done)), done == sorted(done)),
             (list(range(15)), True))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
