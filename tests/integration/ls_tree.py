#!/usr/bin/python3
# ctest-cost: 6
"""ls_tree.py - `ckpt ls --tree` (issue 30: a tree of run -> steps ->
size and verdict) over the generated sample, directories and archives,
and a damaged archive:

1. In a pipe: exactly each run's row, RUN, VERDICT, BYTES, WOULD-FREE
   (the verdict as `du` gives it), under it a row per checkpoint drawn as
   tree(1) draws it, its STATE and BYTES as plain `ls` prints them, and
   the total row of `du`. Bytes are summed here from the files (a run's
   regular files, an archive's own size), not read from ckpt; the
   damaged archive is an error run, 'error: WHY' in its row (counted in
   the total as du counts it), exit 0; no message on stderr.
2. Each row says what plain `ls` and `du` say of the same run.
3. On a terminal (a pty): a header line, then the same rows with sizes
   for people (1.5 KiB), as `-H` gives them in a pipe.
4. --json: a run line per run whose checkpoints are plain ls's, with
   the verdict and freed of du's row; the last line du's total.
5. A LOCATION that is one checkpoint: its rows as plain ls lists it,
   VERDICT and WOULD-FREE '-', left out of the total (as du leaves it).
6. --tree with --summary or -l: refused (exit 2).
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import offline  # noqa: E402
from harness import pty_out  # noqa: E402
from s3test import CKPT, Checker, ckpt, gen_runs  # noqa: E402

offline.apply(os.environ)
MID, END = "\u251c\u2500\u2500 ", "\u2514\u2500\u2500 "
MISSING = "incomplete: model_and_optim/.metadata missing"
# run -> (verdict, frees all of it, [(checkpoint, state)]); an archive
# holds the run named in COPY_OF.
RUNS = {
    "2871001": ("incomplete", False, [
        ("step0", "complete"), ("step1000", "complete"),
        ("step1000-unsharded", "complete"), ("step2000", MISSING)]),
    "2871002": ("bad", True, [("step0", "complete")]),
    "2871003": ("bad", True, [("step0", "complete"), ("step500", MISSING)]),
    "2871004": ("bad", True, []),
    "2871005": ("complete", False, [("step3000-unsharded", "complete")]),
    "2871006": ("bad", True, [("step1500", "incomplete: model_and_optim/"
                               "__1_0.distcp truncated")]),
}
COPY_OF = {"2871101.tar": "2871001", "2871102.tar.gz": "2871002",
           "2871103.tar.zst": "2871003", "2871105.zip": "2871005",
           "2871106.tar.xz": "2871006", "2871107.tar.bz2": "2871004"}


def files_bytes(path):
    """The bytes of the regular files under path (symlinks are no files)."""
    n = 0
    for d, _, names in os.walk(path):
        for f in names:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                n += os.path.getsize(p)
    return n


def expected(s, bad_archive):
    rows, total, freed = [], 0, 0
    for name in sorted(list(RUNS) + list(COPY_OF) + [bad_archive]):
        path = os.path.join(s, name)
        if name == bad_archive:
            rows.append("%s\terror: %s: truncated gzip input\t1000\t0"
                        % (path, path))
            total += 1000
            continue
        src = COPY_OF.get(name, name)
        verdict, frees, ckpts = RUNS[src]
        size = (os.path.getsize(path) if name in COPY_OF
                else files_bytes(path))
        total += size
        freed += size if frees else 0
        rows.append("%s\t%s\t%d\t%d" % (path, verdict, size,
                                        size if frees else 0))
        for i, (ck, state) in enumerate(ckpts):
            rows.append("%s%s\t%s\t%d\t-" % (
                MID if i + 1 < len(ckpts) else END, ck, state,
                files_bytes(os.path.join(s, src, ck))))
    rows.append("total\t-\t%d\t%d" % (total, freed))
    return "\n".join(rows) + "\n"


def human_size(n):
    u = 0
    while n >= 1024 ** (u + 1) and u < 5:
        u += 1
    return "%d B" % n if u == 0 else "%.1f %s" % (
        n / 1024 ** u, "B KiB MiB GiB TiB PiB".split()[u])


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="lstree-")
    try:
        s = os.path.join(tmp, "s")
        gen_runs(s, archives=True)
        bad = "2871108.tar.gz"
        with open(os.path.join(s, "2871102.tar.gz"), "rb") as f:
            head = f.read(1000)
        with open(os.path.join(s, bad), "wb") as f:
            f.write(head)
        age = ["--min-age", "0"]

        rc, out, err = ckpt("ls", "--tree", s, *age)
        c.eq("pipe: the exact tree", (rc, out, err),
             (0, expected(s, bad), ""))

        # each row is what plain ls and du say of the run
        _, du, _ = ckpt("du", s, *age)
        du_rows = {ln.split("\t")[0]: ln.split("\t")
                   for ln in du.splitlines()}
        _, ls, _ = ckpt("ls", s)
        ls_rows = {}
        for ln in ls.splitlines():
            f = ln.split("\t")
            if f[1] != "-":
                ls_rows.setdefault(f[0], []).append([f[1], f[4], f[5]])
        runs, tree_ls, run = {}, {}, None
        for ln in out.splitlines()[:-1]:
            f = ln.split("\t")
            if f[0].startswith((MID, END)):
                tree_ls.setdefault(run, []).append(
                    [f[0][len(MID):], f[1], f[2]])
            else:
                run = f[0]
                runs[run] = f
        for f in runs.values():
            f[1] = f[1].split(":")[0]    # error: WHY
        c.eq("run rows are du's rows", runs,
             {k: v for k, v in du_rows.items() if k != "total"})
        c.eq("the total row is du's", out.splitlines()[-1],
             du.splitlines()[-1])
        c.eq("checkpoint rows are plain ls's", tree_ls, ls_rows)

        # a terminal: header, sizes for people, as -H in a pipe
        one = [os.path.join(s, "2871001"), os.path.join(s, "2871002")]
        tty = pty_out([CKPT, "ls", "--tree"] + one + age)
        _, forced, _ = ckpt("ls", "--tree", "-H", *(one + age))
        c.eq("terminal = -H in a pipe", tty, forced)
        _, pipe, _ = ckpt("ls", "--tree", *(one + age))
        want = ["RUN\tVERDICT\tBYTES\tWOULD-FREE"]
        for ln in pipe.splitlines():
            f = ln.split("\t")
            f[2] = human_size(int(f[2]))
            if f[3] != "-":
                f[3] = human_size(int(f[3]))
            want.append("\t".join(f))
        c.eq("terminal: a header and sizes for people", tty.splitlines(),
             want)
        c.true("terminal: KiB sizes (%r)" % tty, "149.0 KiB" in tty)

        # --json: plain ls's checkpoints, du's verdict and freed
        rc, js, err = ckpt("ls", "--tree", "--json", *(one + age))
        lines = [json.loads(ln) for ln in js.splitlines()]
        _, ls_js, _ = ckpt("ls", "--json", *one)
        plain = {o["run"]: o["checkpoints"]
                 for o in map(json.loads, ls_js.splitlines())}
        c.eq("--json: run lines with ls's checkpoints and du's verdict", (
            rc, [(o["type"], o["run"], o["verdict"], o["bytes"], o["freed"],
                  o["checkpoints"] == plain[o["run"]]) for o in lines[:-1]],
            lines[-1]), (0, [
                ("run", one[0], "incomplete", int(runs[one[0]][2]), 0, True),
                ("run", one[1], "bad", int(runs[one[1]][2]),
                 int(runs[one[1]][2]), True)],
                {"type": "summary", "schema": 1, "verdict": "total",
                 "runs": 2, "bytes": int(runs[one[0]][2]) +
                 int(runs[one[1]][2]), "freed": int(runs[one[1]][2])}))

        # a LOCATION that is one checkpoint: listed, no verdict, not in
        # the total (du leaves it out)
        step = os.path.join(s, "2871001", "step1000")
        size = files_bytes(step)
        c.eq("one checkpoint: its rows, no verdict, not counted",
             ckpt("ls", "--tree", step, one[1], *age), (
                 0, "%s\t-\t%d\t-\n%sstep1000\tcomplete\t%d\t-\n"
                 "%s\ntotal\t-\t%s\t%s\n" % (
                     step, size, END, size,
                     "\n".join(pipe.splitlines()[5:7]),
                     runs[one[1]][2], runs[one[1]][2]), ""))

        for other in ("--summary", "-l"):
            rc, out, err = ckpt("ls", "--tree", other, s)
            c.eq("--tree %s: refused" % other, (rc, out, err.split("\n")[0]),
                 (2, "", "ckpt ls: error: %s and -l exclude each other"
                  % ("--tree" if other == "-l" else "--summary")
                  if other == "-l" else
                  "ckpt ls: error: --summary and --tree exclude each other "
                  "('ckpt du' for a row per run)"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
