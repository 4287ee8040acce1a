#!/usr/bin/python3
# ctest-cost: 10
"""first_run_hints.py - what a new user meets on the first run (issue 30):

1. Every run skipped as live: clean and process end with one stderr line
   naming --min-age (and its value); one run taken: no such line.
2. A failed W&B lookup (no API key): process and cp --wandb name the way
   out: --no-wandb, --wandb-map and map-wandb --offline.
3. A non-run in the queue is said once per pass: its row, with no log
   line (it was 3 lines: lease, judge, row, on every cron pass).
4. process ends with a line per run of what it uploaded and freed, most
   freed first.
5. The demo's comment gives the live guard's default as the code has it.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import offline  # noqa: E402
from s3test import CKPT, Checker, ckpt  # noqa: E402

offline.apply(os.environ)
STAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z "
LIVE = ("ckpt: hint: every run was skipped as live: written to within "
        "--min-age (%s); a shorter one takes runs written to more recently "
        "('--min-age 1h'; '--min-age 0' once nothing writes to them)")


def msgs(err):
    return [re.sub(STAMP, "", ln) for ln in err.splitlines()]


def fresh(tmp, name):
    d = os.path.join(tmp, name)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "support",
                                                 "gen_runs.py"), d],
                   check=True, capture_output=True)
    return d


def live(c, tmp):
    s = fresh(tmp, "live")
    rc, out, err = ckpt("clean", s)
    c.eq("clean, all live: the hint, last", (rc, msgs(err)[-1:]),
         (0, [LIVE % "1d, the default"]))
    rc, out, err = ckpt("clean", "--min-age", "2h", s + "/2871001")
    c.eq("clean, one live run: the hint with the value given",
         msgs(err), [(LIVE % "2h").replace("every run was", "the run was")])
    rc, out, err = ckpt("process", "--no-wandb", s, "--dest", tmp + "/ld")
    c.eq("process, all live: the hint, last", (rc, msgs(err)[-1:]),
         (0, [LIVE % "1d, the default"]))
    rc, out, err = ckpt("clean", "-n", "--min-age", "0", s)
    c.true("clean, none live: no hint", "hint:" not in err)


def wandb(c, tmp):
    s = fresh(tmp, "wb")
    env = dict(os.environ, HOME=os.path.join(tmp, "nohome"))
    env.pop("WANDB_API_KEY", None)
    r = subprocess.run([CKPT, "process", "--min-age", "0", s + "/2871005",
                        "--dest", tmp + "/wd"], env=env, capture_output=True,
                       text=True)
    c.eq("process, no W&B key: the error, then the way out",
         (r.returncode, msgs(r.stderr)[-2:]), (1, [
             "ckpt: error: W&B lookup failed; nothing processed",
             "ckpt: hint: without asking W&B: '--no-wandb' puts runs at "
             "DEST/RUN_ID/; '--wandb-map FILE' takes their paths from FILE, "
             "which 'ckpt map-wandb --offline -o FILE SRC...' writes from "
             "the runs' own files"]))
    r = subprocess.run([CKPT, "cp", "--wandb", s + "/2871005", tmp + "/wc"],
                       env=env, capture_output=True, text=True)
    c.eq("cp --wandb, no W&B key: the way out", (r.returncode,
         msgs(r.stderr)[-1:]), (1, [
             "ckpt: hint: without asking W&B: '--wandb-map FILE' takes the "
             "runs' paths from FILE, which 'ckpt map-wandb --offline -o "
             "FILE SRC...' writes from their own files; without --wandb SRC "
             "goes to DEST itself"]))
    m = os.path.join(tmp, "map.tsv")
    r = subprocess.run([CKPT, "map-wandb", "--offline", "-o", m,
                        s + "/2871005"], env=env, capture_output=True,
                       text=True)
    r = subprocess.run([CKPT, "process", "--min-age", "0", "--wandb-map", m,
                        s + "/2871005", "--dest", tmp + "/wd"], env=env,
                       capture_output=True, text=True)
    c.eq("the way the hint names works", (r.returncode, r.stdout[:8]),
         (0, "process\t"))


def non_runs(c, tmp):
    s = fresh(tmp, "nr")
    for i in range(2):    # a pass, then the next cron pass
        rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                            s, "--dest", tmp + "/nd")
        said = [ln for ln in out.splitlines() + err.splitlines()
                if "/notes" in ln]
        c.eq("pass %d: a non-run: its row only" % i, said, [
            "skip\t%s/notes\tdoes not look like a run (no config.yaml with "
            "wandb/ or train_data/, and no checkpoint directory)" % s])
        if i == 0:
            c.eq("a run worked on keeps its lease line, before its judge",
                 [ln.split(": ", 2)[2][:9] for ln in msgs(err)
                  if ln.startswith("ckpt: %s/2871005: " % s)][:2],
                 ["lease ok:", "judge ok:"])


def per_run(c, tmp):
    s = fresh(tmp, "pr")
    rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0", s,
                        "--dest", tmp + "/pd")
    rows = {ln.split("\t")[1]: ln.split("\t") for ln in out.splitlines()
            if ln.startswith(("process\t", "delete\t"))}
    ends = [ln for ln in msgs(err) if re.match(r"ckpt: [^ ]*: (uploaded|bad,)",
                                               ln)]
    c.eq("process: a line per run that uploaded or freed", len(ends),
         len(rows))

    def kib(n):
        n = int(n)
        return "%d B" % n if n < 1024 else "%.1f KiB" % (n / 1024)
    want = []
    for run, r in sorted(rows.items(), key=lambda kv: (
            -int(kv[1][6] if kv[1][0] == "process" else 0), kv[0])):
        if r[0] == "process":
            want.append("ckpt: %s: uploaded %s, freed %s" % (
                run, kib(r[4]), kib(r[6])))
    got = [ln for ln in ends if "uploaded" in ln]
    c.eq("process: uploaded and freed, as the rows say, most freed first",
         got, want)
    c.true("process: bad runs' freed bytes too (%r)" % ends,
           any(re.match(r"ckpt: .*/2871003: bad, deleted, freed 281\.5 KiB$",
                        ln) for ln in ends))


def demo(c):
    text = open(os.path.join(ROOT, "scripts", "demo.sh")).read()
    said = re.search(r"within --min-age, (\S+) by default", text)
    _, out, _ = ckpt("clean", "--help")
    code = re.search(r"--min-age DURATION .*default (\w+)", out)
    c.eq("demo.sh: the live guard's default as the code has it",
         said and said.group(1), code and code.group(1))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="hints-")
    try:
        live(c, tmp)
        wandb(c, tmp)
        non_runs(c, tmp)
        per_run(c, tmp)
        demo(c)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
