#!/usr/bin/python3
# ctest-cost: 15
"""unshard_hf_part.py - issue 29: `ckpt unshard --format hf --part I/N`.

An OLMo step (tests/support/make_olmo_hf.py, olmo1-untied, local format)
exported with --max-shard-size 60000 (five shards) by one process, then by
N processes, one part each:

- 4 parts run in the order 3, 0, 2, 1: each writes only its shards and a
  record; the last one writes config.json, generation_config.json and the
  index; DEST is then the single process's output byte for byte, with no
  record left;
- a part run again: "complete already", DEST unchanged, no record;
- 8 parts (more than shards: some have none), run 7 .. 0: the same DEST;
- a record another plan left (another --max-shard-size) does not count:
  the export finishes only when this plan's last part has run;
- every record there but a shard gone: the last part fails naming it;
- --part 4/4, --part on a run and --part to object storage are refused;
  -n writes nothing."""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import (CKPT, check, error_of, finish, generate, run,  # noqa: E402
                     unshard)

OPTS = ("--format", "hf", "--max-shard-size", "60000")


def tree(d):
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as x:
            out[f] = x.read()
    return out


def part(step, dest, i, n, *extra):
    return unshard(*OPTS, "--part", "%d/%d" % (i, n), *extra, step, dest)


def parts(name, step, dest, order, n, single):
    rows = []
    for k, i in enumerate(order):
        p = part(step, dest, i, n)
        last = k == len(order) - 1
        check("%s: part %d exit 0" % (name, i), p.returncode == 0,
              p.stdout + p.stderr)
        rows.append(p.stdout.rstrip("\n").split("; ")[-1])
        if not last:
            check("%s: part %d: no index yet" % (name, i), not os.path.exists(
                os.path.join(dest, "model.safetensors.index.json")))
    check("%s: the last part writes the index" % name,
          rows == ["part recorded (the last part writes the index)"] *
          (len(order) - 1) + ["every part done: index written"], str(rows))
    check("%s: DEST is the single process's, byte for byte" % name,
          tree(dest) == single, "%s vs %s" % (sorted(tree(dest)),
                                              sorted(single)))


def main():
    tmp = tempfile.mkdtemp(prefix="hf-part-")
    try:
        gen = os.path.join(tmp, "gen")
        generate(["make_olmo_hf.py", "sharded", gen, "--case", "olmo1-untied",
                  "--format", "local", "--ranks", "3"])
        step = os.path.join(gen, "ckpt")
        one = os.path.join(tmp, "single")
        p = unshard(*OPTS, step, one)
        check("single process: exit 0", p.returncode == 0, p.stderr)
        single = tree(one)
        check("single process: five shards, the index",
              len([f for f in single if f.startswith("model-0")]) == 5 and
              "model.safetensors.index.json" in single, str(sorted(single)))

        dest = os.path.join(tmp, "p4")
        parts("4 parts", step, dest, [3, 0, 2, 1], 4, single)
        p = part(step, dest, 2, 4)
        check("part run again: complete already, DEST unchanged",
              p.returncode == 0 and p.stdout.rstrip().endswith(
                  "; the export was complete already") and
              tree(dest) == single, p.stdout + p.stderr)
        parts("8 parts", step, os.path.join(tmp, "p8"), list(range(7, -1, -1)),
              8, single)

        # A record of another plan does not count.
        dest = os.path.join(tmp, "stale")
        os.makedirs(dest)
        with open(os.path.join(dest, ".ckpt-part-1-of-4.json"), "w") as f:
            json.dump({"plan": "0123456789abcdef", "part": 1, "parts": 4,
                       "files": []}, f)
        for i in (0, 2, 3):
            part(step, dest, i, 4)
        check("a stale record: not finished by it",
              not os.path.exists(os.path.join(dest,
                                              "model.safetensors.index.json")))
        parts("stale, then part 1", step, dest, [1], 4, single)

        # Every record there, a shard gone.
        dest = os.path.join(tmp, "gone")
        for i in (0, 1, 2):
            part(step, dest, i, 4)
        os.remove(os.path.join(dest, "model-00001-of-00005.safetensors"))
        p = part(step, dest, 3, 4)
        want = ("'%s/model-00001-of-00005.safetensors' is missing: every "
                "part's record is there, but not its shard" % dest)
        check("a shard gone: the last part fails naming it",
              p.returncode == 1 and want in error_of(p) and not os.path.exists(
                  os.path.join(dest, "model.safetensors.index.json")),
              p.stdout + p.stderr)

        p = unshard(*OPTS, "--part", "4/4", step, os.path.join(tmp, "x"))
        check("--part 4/4: usage (exit 2)", p.returncode == 2 and
              "--part needs I/N with 0 <= I < N, got '4/4'" in p.stderr,
              p.stderr)
        runs = os.path.join(tmp, "run")
        os.makedirs(runs)
        shutil.copytree(step, os.path.join(runs, "step5"))
        p = part(runs, os.path.join(tmp, "y"), 0, 2)
        check("--part on a run: refused (exit 2)", p.returncode == 2 and
              "give the step, not a run" in p.stdout, p.stdout + p.stderr)
        p = run(CKPT, "unshard", *OPTS, "--part", "0/2", step,
                "s3://bucket/x", ok=False)
        check("--part to object storage: usage (exit 2)",
              p.returncode == 2 and "--part writes a local DEST" in p.stderr,
              p.stderr)
        dest = os.path.join(tmp, "dry")
        p = part(step, dest, 1, 4, "-n")
        check("-n: would-unshard, nothing written",
              p.returncode == 0 and p.stdout.startswith("would-unshard\t") and
              not os.path.exists(dest), p.stdout + p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
