#!/usr/bin/python3
# ctest-cost: 4
"""process_converge.py - `ckpt process SRC` killed at an exact moment
(an LD_PRELOAD shim, tests/support/kill_preload.c), its lease made to
lapse, then rerun over the same SRC: the rerun ends where an
uninterrupted run of a copy ends (tests/crash/crash.py's process
scenario, findings 5-7 of docs/reliability.md "Open findings"). The state
objects at DEST are compared with the uninterrupted run's (less host,
pid, time and FREED), SRC and DEST file by file.

  reason          a bad run killed right after it was renamed aside: the
                  rerun finishes the delete, its state keeps the judge's
                  reason (was "finished an interrupted delete (...)")
  state-missing   a bad run killed right after its renamed-aside copy was
                  removed whole: the state "deleted" is there (was
                  missing: a pass over SRC no longer saw the run)
  stuck-uploaded  a good run killed right after its directory, emptied,
                  was removed: state "done" (was "uploaded" forever)
  done-then-kill  killed right after "done" was written: the emptied
                  directory stays for the rerun, which removes it
  counts          killed right after the first unsharded step's state
                  write: the rerun's state says 2 steps, as the
                  uninterrupted run's (was 1: what the rerun unsharded)
  drop-remains    killed right after the first file of a dropped step
                  (2871001/step2000, incomplete) was deleted: the rerun
                  deletes the rest, unchanged since judged as the state
                  "uploaded" records it, and sends none of it to DEST
                  (was: the remains uploaded)
  drop-changed    the same, but after the kill one remaining file of the
                  step is rewritten and a new one written there: both
                  kept at the source, not sent to DEST, the row says so;
                  the unchanged rest deleted; -n predicts the same"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import BUILD, Checker, contents, lapse, plan  # noqa: E402
import gen_runs  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
SHIM = os.path.join(BUILD, "libkill_preload.so")
ARGS = ["--drop-sharded", "--drop-incomplete", "--no-wandb",
        "--no-progress", "--min-age", "0"]


def make(src, rid):
    """The one run rid in src (gen_runs' runs; 2871007 as crash.py's)."""
    if rid == "2871007":
        r = os.path.join(src, rid)
        gen_runs.run_skeleton(r, rid, "ffff7007")
        gen_runs.sharded_step(r, "step1000")
        gen_runs.sharded_step(r, "step2000")
        gen_runs.aborted_step(r, "step3000")
        return
    tmp = src + ".all"
    gen_runs.generate(tmp)
    if rid == "2871001":
        gen_runs.whole_unsharded(os.path.join(tmp, rid))
    shutil.move(os.path.join(tmp, rid), os.path.join(src, rid))
    shutil.rmtree(tmp)


def process(src, dest, dry=False, **kill):
    env = dict(os.environ)
    if kill:
        env.update(LD_PRELOAD=SHIM,
                   ASAN_OPTIONS=(env.get("ASAN_OPTIONS", "") +
                                 ":verify_asan_link_order=0").lstrip(":"))
        env.update(kill)
    r = subprocess.run([CKPT, "process", src, "--dest", dest] + ARGS +
                       (["-n"] if dry else []),
                       env=env, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def snap(root, top):
    """SRC and DEST as {path: bytes or normalised state}; leases left
    out (a finished run's lease is released, a killed one's lapses)."""
    out = {}
    for side in ("R", "D"):
        base = os.path.join(root, side)
        for k, v in contents(base).items() if os.path.isdir(base) else ():
            if k.endswith(".lease"):
                continue
            if k.startswith(".ckpt-process/"):
                o = json.loads(v)
                for x in ("host", "pid", "updated", "freed"):
                    o.pop(x, None)
                o["src"] = o.get("src", "").replace(top, "T")
                v = json.dumps(o, sort_keys=True)
            out[side + "/" + k] = v
        for dp, dns, _ in os.walk(base) if os.path.isdir(base) else ():
            for d in dns:
                out[side + "/" + os.path.relpath(os.path.join(dp, d),
                                                 base) + "/"] = "dir"
    return out


def case(c, tmp, name, rid, kill, killed_check=None, changes=None):
    """Run rid uninterrupted (ref) and killed then rerun (got); compare
    the two ends, unless changes (a function of got's directory, run
    after the kill) changed the run: then the caller checks. Returns the
    rerun's rows."""
    ref, got = os.path.join(tmp, name, "ref"), os.path.join(tmp, name, "got")
    for top in (ref, got):
        os.makedirs(os.path.join(top, "R"))
        make(os.path.join(top, "R"), rid)
    rc, out, err = process(os.path.join(ref, "R"), os.path.join(ref, "D"))
    c.eq("%s: the uninterrupted run exits 0 (%s)" % (name, err[-300:]),
         rc, 0)
    kill = {k: v.replace("@", got) for k, v in kill.items()}
    rc, out, err = process(os.path.join(got, "R"), os.path.join(got, "D"),
                           **kill)
    c.eq("%s: killed by the shim (%s)" % (name, err.strip()[-300:]), rc, -9)
    if killed_check:
        killed_check(got)
    lapse(os.path.join(got, "D"))
    if changes:
        changes(got)
    rc, out, err = process(os.path.join(got, "R"), os.path.join(got, "D"),
                           dry=True)
    predicted = plan(out)
    rc, out, err = process(os.path.join(got, "R"), os.path.join(got, "D"))
    c.eq("%s: the rerun exits 0 (%s%s)" % (name, out, err[-300:]), rc, 0)
    done = rows(out)
    c.eq("%s: -n predicted the rerun's rows" % name, predicted, plan(out))
    if not changes:
        compare(c, name, ref, got)
    return done, got


def rows(out):
    return [line.split("\t") for line in out.splitlines()
            if line and not line.startswith("total\t")]


def compare(c, name, ref, got):
    want, have = snap(ref, ref), snap(got, got)
    diff = sorted(k for k in set(want) | set(have)
                  if want.get(k) != have.get(k))
    c.eq("%s: SRC and DEST as the uninterrupted run's (%s)" % (name, "; ".join(
        "%s: %r != %r" % (k, str(have.get(k))[:300], str(want.get(k))[:300])
        for k in diff)), diff, [])


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        def aside(got):
            names = os.listdir(os.path.join(got, "R"))
            c.true("reason: killed with 2871002 renamed aside (%s)" % names,
                   len(names) == 1 and
                   names[0].startswith(".2871002.ckpt-del-"))
        case(c, tmp, "reason", "2871002",
             {"CKPT_TEST_KILL_AT": "@/R/2871002"}, aside)

        def gone(got):
            c.eq("state-missing: killed with 2871002 deleted whole",
                 os.listdir(os.path.join(got, "R")), [])
        case(c, tmp, "state-missing", "2871002",
             {"CKPT_TEST_KILL_RMDIR": "@/R/.2871002.ckpt-del-"}, gone)

        case(c, tmp, "stuck-uploaded", "2871005",
             {"CKPT_TEST_KILL_RMDIR": "@/R/2871005"})

        def empty(got):
            run = os.path.join(got, "R", "2871005")
            c.eq("done-then-kill: the emptied directory stays",
                 os.listdir(run) if os.path.isdir(run) else None, [])
        case(c, tmp, "done-then-kill", "2871005",
             {"CKPT_TEST_KILL_TO": "@/D/.ckpt-process/2871005.json",
              "CKPT_TEST_KILL_SKIP": "1"}, empty)

        def one_step(got):
            with open(os.path.join(got, "D", ".ckpt-process",
                                   "2871007.json")) as f:
                s = json.load(f)
            c.eq("counts: killed with step1000's output recorded",
                 (s["phase"], sorted({u["path"].split("/")[0]
                                      for u in s.get("unsharded", [])})),
                 ("new", ["step1000-unsharded"]))
        case(c, tmp, "counts", "2871007",
             {"CKPT_TEST_KILL_TO": "@/D/.ckpt-process/2871007.json"},
             one_step)

        def half_dropped(got):
            left = os.listdir(os.path.join(got, "R", "2871001", "step2000",
                                           "model_and_optim"))
            with open(os.path.join(got, "D", ".ckpt-process",
                                   "2871001.json")) as f:
                s = json.load(f)
            c.eq("drop-remains: killed in step2000's delete, state uploaded"
                 " (%s)" % left, (s["phase"], len(left) > 0),
                 ("uploaded", True))
        case(c, tmp, "drop-remains", "2871001",
             {"CKPT_TEST_KILL_AT": "@/R/2871001/step2000"}, half_dropped)

        changed = {}

        def change(got):
            step = os.path.join(got, "R", "2871001", "step2000")
            rest = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(step)
                          for f in fs)
            with open(rest[0], "ab") as f:
                f.write(b"more")
            with open(os.path.join(step, "new.txt"), "w") as f:
                f.write("written after the kill\n")
            changed["files"] = sorted(os.path.relpath(p, step)
                                      for p in (rest[0], os.path.join(
                                          step, "new.txt")))
            changed["run"] = os.path.join(got, "R", "2871001")
        done, got = case(c, tmp, "drop-changed", "2871001",
                         {"CKPT_TEST_KILL_AT": "@/R/2871001/step2000"},
                         changes=change)
        left = sorted(os.path.relpath(os.path.join(dp, f), changed["run"])
                      for dp, _, fs in os.walk(changed["run"]) for f in fs)
        # (and the run's `latest` link: it may name what is kept)
        c.eq("drop-changed: the changed and the new file kept, nothing else",
             left, ["latest"] + ["step2000/" + f for f in changed["files"]])
        dest = os.path.join(got, "D", "2871001")
        c.eq("drop-changed: no step2000 at DEST",
             os.path.exists(os.path.join(dest, "step2000")), False)
        c.true("drop-changed: the row names both kept files (%s)" % done,
               len(done) == 1 and done[0][0] == "process" and
               "kept 2 dropped files" in done[0][-1])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
