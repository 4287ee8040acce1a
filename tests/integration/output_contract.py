#!/usr/bin/python3
# ctest-cost: 20
"""output_contract.py - the output contract of docs/output.md, checked
against every command:

1. Every command's --json stdout (ls, ls -l, ls --summary, ls --tree,
   clean, clean -n with pruning, map-wandb, unshard of one checkpoint and
   of a run,
   unshard --format hf (one process and --part I/N), cp/upload (-n,
   --overwrite), process, process -n (--unshard-format hf) and a rerun;
   their errors too) is JSON lines only, each valid against
   docs/output.schema.json (validated by python3-jsonschema): a "type" and "schema":1 on every line, every key
   with the one type the schema gives it, no key it does not list. Every
   type the schema names is seen, and every verb but abort.
2. The TSV rows of the same commands start with a verb of the schema's
   set (or "total"), the same verb the JSON line of that item has.
3. Each event once, on one stream: with --json, nothing on stderr repeats
   a row (no process phase log lines, no unshard error message, no cp
   summary line); an item's failure is its row.
4. The docs agree: every JSON example line in docs/ validates, and
   docs/output.md names every type and verb of the schema.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import offline  # noqa: E402
from s3test import Checker, ckpt, gen_runs  # noqa: E402
from harness import generate  # noqa: E402

import jsonschema  # noqa: E402  (python3-jsonschema)

offline.apply(os.environ)
SCHEMA = json.load(open(os.path.join(ROOT, "docs", "output.schema.json")))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
VERBS = SCHEMA["$defs"]["verb"]["enum"]
TYPES = SCHEMA["properties"]["type"]["enum"]


def json_lines(c, what, out):
    """The lines of a --json stdout, each checked against the schema."""
    rows = []
    for i, line in enumerate(out.splitlines()):
        try:
            o = json.loads(line)
        except ValueError:
            c.true("%s: line %d is JSON: %r" % (what, i + 1, line), False)
            continue
        errs = sorted(e.message for e in VALIDATOR.iter_errors(o))
        c.eq("%s: line %d valid (%s)" % (what, i + 1, line[:160]), errs, [])
        rows.append(o)
    return rows


class Run:
    def __init__(self, c):
        self.c = c
        self.types = set()
        self.verbs = set()

    def both(self, name, args, rc=None, tsv_verbs=True):
        """ckpt ARGS with --json and without ("{i}" in an argument is 0,
        then 1: a command that changes things works on a copy each
        time): the JSON checked, the TSV rows' first column a verb (or
        total), and the same verbs as the JSON lines' actions."""
        def argv(i):
            return [a.replace("{i}", str(i)) for a in args]
        r1, out, err = ckpt(*(argv(0) + ["--json"]))
        rows = json_lines(self.c, name, out)
        self.c.true("%s --json: some output" % name, rows)
        for o in rows:
            self.types.add(o["type"])
            if "action" in o:
                self.verbs.add(o["action"])
        r2, tsv, err2 = ckpt(*argv(1))
        if rc is not None:
            self.c.eq("%s: exit status" % name, (r1, r2), (rc, rc))
        if tsv_verbs:
            got = [line.split("\t")[0] for line in tsv.splitlines()]
            bad = [v for v in got if v not in VERBS and v != "total"]
            self.c.eq("%s: TSV verbs in the set" % name, bad, [])
            want = [o.get("action", o["type"]) for o in rows
                    if o["type"] != "phase"]
            self.c.eq("%s: TSV and JSON say the same" % name, sorted(got),
                      sorted(want))
        return rows, err, tsv, err2


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="contract-")
    try:
        s = os.path.join(tmp, "s")
        gen_runs(s, archives=True)
        r = Run(c)
        age = ["--min-age", "0"]
        # ls: listing, -l, --summary, one checkpoint, an unreadable path
        r.both("ls", ["ls", s], 0, tsv_verbs=False)
        r.both("ls -l", ["ls", "-l", s], 0, tsv_verbs=False)
        r.both("ls --summary", ["ls", "--summary", s] + age, 0,
               tsv_verbs=False)
        r.both("ls --summary --by-run", ["ls", "--summary", "--by-run", s]
               + age, 0, tsv_verbs=False)
        r.both("du", ["du", s] + age, 0, tsv_verbs=False)
        rows = r.both("ls --tree", ["ls", "--tree", s] + age, 0,
                      tsv_verbs=False)[0]
        c.eq("ls --tree --json: a run line per run (its verdict, freed "
             "and checkpoints), then the total", (
                 sorted({o["type"] for o in rows[:-1]}),
                 all({"verdict", "freed", "checkpoints"} <= set(o)
                     for o in rows[:-1]),
                 rows[-1]["type"], rows[-1]["verdict"]),
             (["run"], True, "summary", "total"))
        r.both("ls one checkpoint", ["ls", s + "/2871001/step1000"], 0,
               tsv_verbs=False)
        rows, err, tsv, _ = r.both("ls missing", ["ls", tmp + "/nope"], 1,
                                   tsv_verbs=False)
        c.eq("ls missing: an error row, no message", (
            [o["action"] for o in rows], err, tsv.split("\t")[4][:6]),
            (["error"], "", "error:"))
        # clean: -n, live, pruning (-n and real), a real delete
        r.both("clean -n", ["clean", "-n", s] + age, 0)
        r.both("clean live", ["clean", s], 0)
        rows, _, _, _ = r.both("clean -n --keep-last 1",
                               ["clean", "-n", "--keep-last", "1",
                                s + "/2871001"] + age, 0)
        c.eq("clean -n: would_prune, not pruned",
             [sorted(k for k in o if "prune" in k) for o in rows],
             [["would_prune"]])
        for i in (1, 2):
            shutil.copytree(os.path.join(s, "2871001"),
                            os.path.join(tmp, "p%d" % i), symlinks=True)
            shutil.copytree(os.path.join(s, "2871002"),
                            os.path.join(tmp, "b%d" % i), symlinks=True)
        _, out, _ = ckpt("clean", "--keep-last", "1", "--json",
                         tmp + "/p1", tmp + "/b1", *age)
        rows = json_lines(c, "clean --keep-last 1", out)
        c.eq("clean: pruned and a delete", [
            (o["action"], "pruned" in o, o["freed"] > 0) for o in rows],
            [("keep", True, True), ("delete", False, True)])
        # map-wandb: found, and a non-run
        r.both("map-wandb", ["map-wandb", "--offline", s + "/2871001",
                             s + "/2871101.tar"], 0, tsv_verbs=False)
        # unshard: one checkpoint (-n and real), a run, an error
        r.both("unshard -n", ["unshard", "-n", s + "/2871001/step1000",
                              tmp + "/u0"], 0)
        r.both("unshard", ["unshard", s + "/2871001/step1000",
                           tmp + "/u1"], 0)
        r.both("unshard run", ["unshard", s + "/2871001", tmp + "/u2{i}"],
               0)
        rows, err, _, err2 = r.both("unshard error",
                                    ["unshard", tmp + "/nope", tmp + "/u3"],
                                    1)
        c.eq("unshard error: its row only, no message too", (
            [o["action"] for o in rows], err, err2), (["error"], "", ""))
        # unshard --format hf, one process and as --part I/N
        hf = os.path.join(tmp, "hf")
        generate(["make_olmo_hf.py", "sharded", hf, "--case", "olmo1-untied",
                  "--format", "local", "--ranks", "3"])
        hfo = ["unshard", "--format", "hf", "--max-shard-size", "60000"]
        r.both("unshard --format hf", hfo + [hf + "/ckpt", tmp + "/h{i}"], 0)
        for part in ("0/2", "1/2"):
            rows, _, _, _ = r.both("unshard --part " + part, hfo + [
                "--part", part, hf + "/ckpt", tmp + "/hp{i}"], 0)
            c.eq("unshard --part %s: part and part_state" % part,
                 [(o.get("part"), o.get("part_state")) for o in rows],
                 [(part, "recorded" if part == "0/2" else "finished")])
        # cp/upload: -v rows, -n, an error
        r.both("cp -v", ["cp", "-v", s + "/2871005", tmp + "/c1{i}"], 0)
        r.both("cp -n", ["cp", "-n", s + "/2871001", tmp + "/c2"], 0)
        r.both("cp --overwrite", ["cp", "-v", "--overwrite", s + "/2871005",
                                  tmp + "/c1{i}"], 0)
        rows, err, _, _ = r.both("upload missing",
                                 ["upload", tmp + "/nope", tmp + "/c3"], 1)
        c.eq("cp --json: no summary line on stderr", [
            line for line in err.splitlines() if "file(s)" in line and
            "did not arrive" not in line], [])
        # process: -n, real, a rerun (done), with --json no log lines
        for i in (0, 1):
            shutil.copytree(s, os.path.join(tmp, "q%d" % i), symlinks=True)
        r.both("process -n", ["process", "-n", "--no-wandb", tmp + "/q{i}",
                              "--dest", tmp + "/d{i}"] + age, 0)
        r.both("process -n --unshard-format hf", [
            "process", "-n", "--no-wandb", "--unshard-format", "hf",
            tmp + "/q{i}", "--dest", tmp + "/d{i}"] + age)
        rows, err, tsv, _ = r.both("process", [
            "process", "--no-wandb", tmp + "/q{i}", "--dest",
            tmp + "/d{i}"] + age, 0)
        c.eq("process --json: no log lines on stderr", err, "")
        c.eq("process: TSV verbs", sorted(
            set(line.split("\t")[0] for line in tsv.splitlines())),
            ["delete", "process", "skip", "total"])
        for i in (0, 1):
            shutil.rmtree(os.path.join(tmp, "q%d" % i))
            shutil.copytree(s, os.path.join(tmp, "q%d" % i), symlinks=True)
        rows, _, _, _ = r.both("process rerun", [
            "process", "--no-wandb", "--keep-source", tmp + "/q{i}",
            "--dest", tmp + "/d{i}"] + age, 0)
        c.eq("process rerun: a done run is a skip saying so", sorted(set(
            o["reason"].split(":")[0] for o in rows
            if o["type"] == "run" and o["action"] == "skip")),
            ["already processed", "does not look like "
             "a run (no config.yaml with wandb/ or train_data/, and no "
             "checkpoint directory)"])

        c.eq("every type seen", sorted(r.types), sorted(TYPES))
        c.eq("every verb seen (but abort)",
             sorted(v for v in r.verbs if v), sorted(
                 v for v in VERBS if v != "abort"))

        # The docs: their JSON examples, and output.md naming the set.
        for md in sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                                   recursive=True)):
            for n, line in enumerate(open(md).read().splitlines()):
                if line.startswith('{"type"'):
                    json_lines(c, "%s:%d" % (os.path.relpath(md, ROOT),
                                             n + 1), line)
        doc = open(os.path.join(ROOT, "docs", "output.md")).read()
        for w in TYPES + VERBS:
            c.true("docs/output.md names `%s`" % w, "`%s`" % w in doc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
