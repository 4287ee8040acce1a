#!/usr/bin/env python3
# ctest-cost: 15
"""The live-run guard of clean and process reads the newer of mtime and
ctime, applies again to a run already processed whose source is written
to once more, and a file written while `process` runs is left at the
source and said so (issue 20, class 6: "Age is mtime and ctime").

- A run copied in by a tool that keeps mtimes (here: touch -d 3 days
  back) has ctime now: process and -n skip it as live, nothing deleted.
- A requeued job: the run was processed (state "done", source deleted),
  then written to again: the rerun skips it as live instead of
  uploading its new files over DEST's copy and deleting them.
- A step written while process uploads the run (made exact by
  tests/support/age_preload.c, which writes it the moment the upload
  opens train_data/rank0.npy): the run fails "delete: ... left at the
  source", exit 1, the new file stays, and the state stays "uploaded"
  with the reason; a rerun finds it live.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (Checker, age_tree, ckpt, gen_runs,  # noqa: E402
                    old_ctime)
from process_s3 import rows  # noqa: E402


def names(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def secs(row):
    """The live reason with its seconds made N (the clock may tick)."""
    import re
    return [re.sub(r"written \d+ s ago", "written N s ago", f) for f in row]


def copied_in(c, tmp):
    runs, dest = os.path.join(tmp, "copied"), os.path.join(tmp, "d1")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "support",
                                                 "gen_runs.py"), runs,
                    "--archives"], check=True, capture_output=True)
    subprocess.run(["find", runs, "-exec", "touch", "-h", "-d",
                    "3 days ago", "{}", "+"], check=True)
    before = names(runs)
    want = [["skip", os.path.join(runs, "2871002"),
             "live: newest file written N s ago"],
            ["skip", os.path.join(runs, "2871102.tar.gz"),
             "live: archive written N s ago"]]
    for dry in (["-n"], []):
        rc, out, _ = ckpt("process", *dry, "--no-wandb", "--no-progress",
                          os.path.join(runs, "2871002"),
                          os.path.join(runs, "2871102.tar.gz"),
                          "--dest", dest)
        c.eq("copied in %s: exit, rows" % dry, (rc, sorted(secs(r) for r in
                                                         rows(out)[:-1])),
             (0, want))
    c.eq("copied in: nothing deleted", names(runs), before)


def requeued(c, tmp):
    runs, dest = os.path.join(tmp, "rq"), os.path.join(tmp, "d2")
    gen_runs(runs)
    run = os.path.join(runs, "2871005")
    rc, out, _ = ckpt("process", "--no-wandb", "--no-progress", run,
                      "--dest", dest)
    c.eq("requeue: first pass processed", (rc, rows(out)[0][:2]),
         (0, ["process", run]))
    c.true("requeue: source gone", not os.path.exists(run))
    at_dest = names(os.path.join(dest, "2871005"))
    # The job is requeued and writes to the run again.
    os.makedirs(os.path.join(run, "step4000-unsharded"))
    for n in ("config.yaml", "step4000-unsharded/model.pt"):
        with open(os.path.join(run, n), "w") as f:
            f.write("written again\n")
    with open(os.path.join(dest, "2871005", "config.yaml"), "rb") as f:
        dest_config = f.read()
    for dry in (["-n"], []):
        rc, out, _ = ckpt("process", *dry, "--no-wandb", "--no-progress",
                          run, "--dest", dest)
        why = ("live: newest file written N s ago (written to since it "
               "was processed)")
        c.eq("requeue %s: skipped live, exit 0" % dry,
             (rc, secs(rows(out)[0])), (0, ["skip", run, why]))
    c.eq("requeue: source untouched", names(run),
         ["config.yaml", "step4000-unsharded/model.pt"])
    c.eq("requeue: DEST as the first pass left it",
         names(os.path.join(dest, "2871005")), at_dest)
    with open(os.path.join(dest, "2871005", "config.yaml"), "rb") as f:
        c.eq("requeue: DEST's config.yaml not overwritten", f.read(),
             dest_config)


def written_during(c, tmp):
    runs, dest = os.path.join(tmp, "wd"), os.path.join(tmp, "d3")
    gen_runs(runs)
    run = os.path.join(runs, "2871005")
    new = "step4000-unsharded/model.pt"
    env = dict(os.environ,
               CKPT_TEST_WRITE_ON=os.path.join(run, "train_data/rank0.npy"),
               CKPT_TEST_WRITE=os.path.join(run, new))
    rc, out, err = ckpt("process", "--no-wandb", "--no-progress", run,
                        "--dest", dest, env=env)
    why = ("delete: 1 file(s) written while the run was processed are left "
           "at the source (%s); a rerun takes them once they are older "
           "than --min-age" % new)
    c.eq("written during: exit 1, row", (rc, rows(out)[0]),
         (1, ["error", run, why]))
    c.eq("written during: only the new file left", names(run), [new])
    c.true("written during: the rest at DEST",
           os.path.isfile(os.path.join(dest, "2871005", "train_data",
                                       "rank0.npy")))
    with open(os.path.join(dest, ".ckpt-process", "2871005.json")) as f:
        st = json.load(f)
    c.eq("written during: state", (st.get("phase"), st.get("why")),
         ("uploaded", why[len("delete: "):]))
    rc, out, _ = ckpt("process", "--no-wandb", "--no-progress", run,
                      "--dest", dest)
    c.eq("written during: rerun skips it live",
         (rc, secs(rows(out)[0])),
         (0, ["skip", run, "live: newest file written N s ago (written "
              "to since it was uploaded)"]))
    c.eq("written during: rerun keeps it", names(run), [new])
    # Once older than --min-age, a rerun takes it and the run is done.
    age_tree(run)
    rc, out, _ = ckpt("process", "--no-wandb", "--no-progress", run,
                      "--dest", dest)
    c.eq("written during: older, rerun done", (rc, rows(out)[0][:2]),
         (0, ["process", run]))
    c.true("written during: new file at DEST",
           os.path.isfile(os.path.join(dest, "2871005", new)))
    with open(os.path.join(dest, ".ckpt-process", "2871005.json")) as f:
        st = json.load(f)
    c.eq("written during: state done", (st.get("phase"), st.get("why")),
         ("done", None))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-age-")
    try:
        os.environ["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        copied_in(c, tmp)
        # The rest ages its trees with utime(): ctimes aged too.
        os.environ.update(old_ctime())
        requeued(c, tmp)
        written_during(c, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
