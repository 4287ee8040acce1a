#!/usr/bin/python3
# ctest-cost: 8
"""cli_habits.py - the spellings users of other tools bring (issue 30):

1. Commands: `cp`, `upload` and `copy` are one command (the same rows);
   a mistyped command gets a did-you-mean (`ckpt lss`: 'ls'), `sync`,
   `rm` and `du` say which command does the job here.
2. Options: aws's `--dryrun` is `-n`; OLMo's `--safe-tensors` and
   zero_to_fp32's `--safe_serialization` are `--format safetensors`;
   OLMo's `--model-only` is refused with what does it here; a mistyped
   option gets a did-you-mean (`--sumary`: '--summary').
3. Every command's --help ends its description with examples, and every
   option an example uses is one the command has.
4. Per-command options: -n, --tmp-dir, --progress and --no-progress are
   in the --help of the commands where they mean something only; -n and
   --tmp-dir (and --progress) elsewhere are refused (exit 2) naming the
   commands that take them, as git refuses; --no-progress is accepted by
   every command (scripts pass it to all, as aws's global options).
7. `-j` is the runs worked on at once wherever it is taken (ls, clean,
   map-wandb, process: the resolved count in process's -v line); files
   in flight are --transfers, unshard's threads --threads; cp and
   unshard refuse -j with a hint naming theirs.
5. `ckpt du DIR` is `ckpt ls --summary --by-run DIR`: a row per run,
   largest first, RUN, VERDICT, BYTES, WOULD-FREE (what clean frees of
   it), then the total; the sums agree with `ls --summary`'s.
6. Rows for people only on a terminal: `ckpt ls` through a pty has a
   header line and sizes as `1.5 KiB`; in a pipe no header and exact
   bytes; `-H` in a pipe gives the terminal's rows.
"""
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import offline  # noqa: E402
from harness import pty_out  # noqa: E402
from s3test import CKPT, Checker, ckpt, gen_runs  # noqa: E402

offline.apply(os.environ)
COMMANDS = ["clean", "cp", "ls", "map-wandb", "process", "unshard"]


def usage_lines(cmd, opt):
    """The stderr of `ckpt CMD OPT`: its lines without the usage ones."""
    rc, out, err = ckpt(cmd, opt, "x", "y")
    return rc, [ln for ln in err.splitlines()
                if not ln.startswith(("usage:", "(see"))]


def commands(c, s, tmp):
    rows = []
    for name in ("cp", "upload", "copy"):
        rc, out, err = ckpt(name, "-n", "-v", s + "/2871001",
                            tmp + "/c")
        rows.append((rc, re.sub(r"seconds=[0-9.]+", "", out)))
    c.true("cp, upload, copy: rows", rows[0][1].startswith("would-copy\t"))
    c.eq("cp, upload, copy: the same command", rows, [rows[0]] * 3)
    for typo, hint in (
            ("lss", "hint: did you mean 'ls'?"),
            ("unshrad", "hint: did you mean 'unshard'?"),
            ("sync", "hint: rclone's sync (and aws s3 sync --delete) "
             "deletes at DEST what the source lacks; ckpt never deletes at "
             "DEST (it may hold the only copy): 'ckpt cp SRC DEST' copies, "
             "skipping what is there"),
            ("rm", "hint: 'ckpt clean RUN' deletes runs proven bad")):
        rc, out, err = ckpt(typo, "x")
        c.eq("ckpt %s: exit 2, the hint" % typo, (rc, out, err), (
            2, "", "ckpt: '%s' is not a ckpt command. See 'ckpt --help'.\n"
            "%s\n" % (typo, hint)))
    rc, out, err = ckpt("zzzzzz")
    c.eq("far from every command: no hint", err,
         "ckpt: 'zzzzzz' is not a ckpt command. See 'ckpt --help'.\n")


def options(c, s, tmp):
    run = s + "/2871002"
    dry = ckpt("clean", "-n", "--min-age", "0", run)[:2]
    c.true("clean -n: would-delete", dry[1].startswith("would-delete\t"))
    c.eq("--dryrun is -n (aws)", ckpt("clean", "--dryrun", "--min-age", "0",
                                      run)[:2], dry)
    c.true("the run still there", os.path.isdir(run))
    step = s + "/2871001/step1000"
    want = None
    for spelling in (["--format", "safetensors"], ["--safe-tensors"],
                     ["--safe_serialization"]):
        out = os.path.join(tmp, "st" + spelling[0].strip("-"))
        rc, _, err = ckpt("unshard", "--no-progress", *spelling, step, out)
        got = (rc, sorted(os.listdir(out)) if os.path.isdir(out) else err)
        want = want or got
        c.eq("unshard %s: safetensors" % " ".join(spelling), got, want)
    c.true("safetensors written", any(
        f.endswith(".safetensors") for f in want[1]))
    for cmd, opt, lines in (
            ("unshard", "--model-only", [
                "ckpt unshard: error: unknown option '--model-only'",
                "hint: ckpt unshard writes the model with the rest of the "
                "checkpoint (model.pt beside optim.pt and train.pt, as OLMo's "
                "unsharder does without --model-only); '--format hf' writes "
                "the model alone"]),
            ("ls", "--sumary", [
                "ckpt ls: error: unknown option '--sumary'",
                "hint: did you mean '--summary'?"]),
            ("cp", "--dry-rnu", [
                "ckpt cp: error: unknown option '--dry-rnu'",
                "hint: did you mean '--dry-run'?"]),
            ("cp", "--recursive", [
                "ckpt cp: error: unknown option '--recursive'",
                "hint: directories are always copied whole, as 'aws s3 cp "
                "--recursive'"]),
            ("process", "--zzzzzz", [
                "ckpt process: error: unknown option '--zzzzzz'"])):
        c.eq("%s %s" % (cmd, opt), usage_lines(cmd, opt), (2, lines))


def helps(c):
    for cmd in COMMANDS:
        rc, out, err = ckpt(cmd, "--help")
        c.eq("%s --help: exit 0" % cmd, rc, 0)
        text = out.split("\n\n")
        ex = out.split("    examples:\n", 1)
        c.true("%s --help: examples (%r)" % (cmd, text[0][-200:]),
               len(ex) == 2)
        if len(ex) != 2:
            continue
        examples = ex[1].split("\n\n", 1)[0]
        c.true("%s --help: examples of ckpt %s" % (cmd, cmd),
               examples.count("ckpt %s " % cmd) >= 2)
        known = set(re.findall(r"^ +(?:-\w, )?(--[\w-]+)", out, re.M))
        used = set(re.findall(r" (--[\w-]+)", examples))
        c.eq("%s --help: the examples' options exist" % cmd,
             sorted(used - known), [])


TAKES = {
    "clean": {"--dry-run", "--jobs"},
    "cp": {"--dry-run", "--progress", "--no-progress"},
    "ls": {"--jobs"},
    "map-wandb": {"--dry-run", "--jobs"},
    "process": {"--dry-run", "--tmp-dir", "--progress", "--no-progress",
                "--jobs"},
    "unshard": {"--dry-run", "--tmp-dir", "--progress", "--no-progress"},
}
SOME = {"--dry-run", "--tmp-dir", "--progress", "--no-progress", "--jobs"}
EVERY = {"--json", "--quiet", "--verbose", "--insecure",
         "--retries", "--profile", "--endpoint-url", "--region",
         "--log-file"}


def per_command(c, s):
    for cmd in COMMANDS:
        out = ckpt(cmd, "--help")[1].split("\nglobal options:\n", 1)[1]
        have = set(re.findall(r"^ +(?:-\w, )?(--[\w-]+)", out, re.M))
        c.eq("%s --help: its global options" % cmd,
             (sorted(have & SOME), sorted(EVERY - have)),
             (sorted(TAKES[cmd]), []))
    dry = ("hint: --dry-run is an option of clean, cp, map-wandb, process "
           "and unshard; 'ckpt ls' changes nothing")
    for cmd, argv, hint in (
            ("ls", ["-n"], dry), ("ls", ["--dryrun"], dry),
            ("ls", ["-nq"], dry),
            ("ls", ["--tmp-dir=/tmp"], "hint: --tmp-dir is an option of "
             "process and unshard; 'ckpt ls' spools nothing"),
            ("cp", ["--tmp-dir", "/tmp"], "hint: --tmp-dir is an option of "
             "process and unshard; 'ckpt cp' spools nothing"),
            ("clean", ["--progress"], "hint: --progress is an option of cp, "
             "process and unshard; 'ckpt clean' shows no progress")):
        rc, out, err = ckpt(cmd, *argv, s, s + "/x")
        c.eq("ckpt %s %s: refused" % (cmd, argv[0]), (rc, out, err), (
            2, "", "ckpt %s: error: unknown option '%s'\n%s\n"
            % (cmd, argv[0], hint)))
    run = s + "/2871001"
    c.eq("ls --no-progress: accepted, the same rows",
         ckpt("ls", "--no-progress", run), ckpt("ls", run))
    rc, out, err = ckpt("map-wandb", "--no-progress", "--offline", run)
    c.true("map-wandb --no-progress: accepted (%r)" % err, rc != 2)


def du(c, s):
    age = ["--min-age", "0"]
    rc, out, err = ckpt("du", s, *age)
    c.eq("du = ls --summary --by-run", (rc, out, err),
         ckpt("ls", "--summary", "--by-run", s, *age))
    rows = [ln.split("\t") for ln in out.splitlines()]
    _, summ, _ = ckpt("ls", "--summary", s, *age)
    per = {ln.split("\t")[0]: ln.split("\t") for ln in summ.splitlines()}
    runs = sorted(os.path.join(s, n) for n in os.listdir(s)
                  if n not in ("logs", "notes"))   # not runs
    c.eq("du: a row per run, then the total",
         (sorted(r[0] for r in rows[:-1]), rows[-1][:2]), (runs, ["total",
                                                              "-"]))
    sizes = [int(r[2]) for r in rows[:-1]]
    c.eq("du: largest first", sizes, sorted(sizes, reverse=True))
    c.eq("du: the total's bytes and would-free are ls --summary's",
         rows[-1][2:], [per["total"][2], per["would-free"][2]])
    verdicts = {r[0]: (r[1], r[3]) for r in rows[:-1]}
    c.eq("du: a bad run frees what it holds, a complete one nothing",
         (verdicts[s + "/2871002"][0], verdicts[s + "/2871005"]),
         ("bad", ("complete", "0")))
    c.eq("du: the bad run's would-free is its size",
         verdicts[s + "/2871002"][1],
         [r[2] for r in rows if r[0] == s + "/2871002"][0])
    c.eq("du: live runs free nothing", sorted(set(
        ln.split("\t")[1:4:2] == ["live", "0"]
        for ln in ckpt("du", s)[1].splitlines()[:-1])), [True])
    rc, out, err = ckpt("ls", "--by-run", s)
    c.eq("--by-run without --summary: refused", (rc, err.splitlines()[0]), (
        2, "ckpt ls: error: --by-run is a form of --summary: 'ckpt ls "
        "--summary --by-run' (or 'ckpt du')"))
    tty = pty_out([CKPT, "du", s] + age).splitlines()
    c.eq("du on a terminal: a header, sizes for people",
         (tty[0], tty[-1].split("\t")[0]), (
             "RUN\tVERDICT\tBYTES\tWOULD-FREE", "total"))


def jobs(c, s, tmp):
    """-j is the runs worked on at once in every command that takes it
    (as GNU parallel's jobs): ls, clean, map-wandb and process take it;
    process's files in flight are --transfers (its -v line says both),
    --runs is -j's older spelling; cp and unshard, which work inside one
    SRC, refuse -j with a hint naming --transfers and --threads."""
    run = s + "/2871001"
    # (clean with --min-age 0: a live run's row says how many seconds
    # ago it was written, which the two runs may see differently)
    for argv in (["ls", s], ["clean", "-n", "--min-age", "0", s],
                 ["map-wandb", "--offline", "-n", run]):
        rc, out, err = ckpt(argv[0], "-j", "2", *argv[1:])
        c.eq("%s -j 2: the same as without" % argv[0], (rc, out),
             ckpt(*argv)[:2])
    def said(*extra):
        rc, out, err = ckpt("process", "-n", "-v", "--no-wandb", *extra,
                            s, "--dest", tmp + "/pd")
        return rc, re.findall(r"process: runs at once \(-j\): ([0-9]+); "
                              r"files in flight \(--transfers\), shared "
                              r"among them: ([0-9]+)", err)
    c.eq("process: -j is runs at once, --transfers files in flight", [
        said(), said("-j", "2"), said("--transfers", "5", "-j", "1"),
        said("--runs", "3"), said("-j", "3", "--runs", "3")], [
        (0, [("4", "32")]), (0, [("2", "32")]), (0, [("1", "5")]),
        (0, [("3", "32")]), (0, [("3", "32")])])
    rc, out, err = ckpt("process", "-j", "2", "--runs", "3", s,
                        "--dest", tmp + "/pd")
    c.eq("process -j 2 --runs 3: refused", (rc, out, err.splitlines()[0]), (
        2, "", "ckpt process: error: -j and --runs differ: --runs is -j's "
        "older spelling (runs at once)"))
    hint = ("hint: -j, --jobs is the runs worked on at once (clean, ls, "
            "map-wandb, process); 'ckpt %s' ")
    for cmd, own in (("cp", "copies one SRC: its files in flight are "
                      "--transfers N"),
                     ("upload", "copies one SRC: its files in flight are "
                      "--transfers N"),
                     ("unshard", "works on one checkpoint or run: its "
                      "worker threads are --threads N")):
        c.eq("%s -j: refused, naming its own option" % cmd,
             ckpt(cmd, "-j", "4", run, tmp + "/x"),
             (2, "", "ckpt %s: error: unknown option '-j'\n%s%s\n"
              % (cmd, hint % cmd, own)))
    strip = re.compile(r"seconds=[0-9.]+")
    rc, out, err = ckpt("cp", "-n", "--transfers", "4", run, tmp + "/c")
    c.eq("cp --transfers 4: the same rows", (rc, strip.sub("", out)),
         (0, strip.sub("", ckpt("cp", "-n", run, tmp + "/c")[1])))
    step = run + "/step1000"
    rc, out, err = ckpt("unshard", "--no-progress", "--threads", "1", step,
                        tmp + "/u1")
    rc2, out2, err2 = ckpt("unshard", "--no-progress", step, tmp + "/u2")
    c.eq("unshard --threads 1: the same outputs", (rc, sorted(
        os.listdir(tmp + "/u1"))), (rc2, sorted(os.listdir(tmp + "/u2"))))
    with open(tmp + "/u1/model.pt", "rb") as a, \
            open(tmp + "/u2/model.pt", "rb") as b:
        c.true("unshard --threads 1: the same model bytes",
               a.read() == b.read())


def human(c, s):
    run = s + "/2871001"
    header = "RUN\tCHECKPOINT\tSTEP\tFORMAT\tSTATE\tBYTES\tFILES"
    _, pipe, _ = ckpt("ls", run)
    tty = pty_out([CKPT, "ls", run])
    _, forced, _ = ckpt("ls", "-H", run)
    c.eq("ls on a terminal = ls -H in a pipe", tty, forced)
    lines = tty.splitlines()
    c.eq("terminal: a header line first", lines[0], header)
    c.eq("pipe: no header", pipe.splitlines()[0].split("\t")[0], run)
    exact = [ln.split("\t")[5] for ln in pipe.splitlines()]
    shown = [ln.split("\t")[5] for ln in lines[1:]]
    c.true("pipe: exact bytes (%r)" % exact,
           all(re.fullmatch(r"[0-9]+", b) for b in exact))
    c.true("terminal: sizes for people (%r)" % shown,
           all(re.fullmatch(r"[0-9]+ B|[0-9]+\.[0-9] [KMGTP]iB", b)
               for b in shown) and any("iB" in b for b in shown))
    c.eq("terminal: the same rows", [ln.split("\t")[:5] for ln in lines[1:]],
         [ln.split("\t")[:5] for ln in pipe.splitlines()])
    _, js, _ = ckpt("ls", "-H", "--json", run)
    c.true("--json stays exact with -H", '"bytes":' in js and "iB" not in js)


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="habits-")
    try:
        s = os.path.join(tmp, "s")
        gen_runs(s)
        commands(c, s, tmp)
        options(c, s, tmp)
        helps(c)
        per_command(c, s)
        human(c, s)
        du(c, s)
        jobs(c, s, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
