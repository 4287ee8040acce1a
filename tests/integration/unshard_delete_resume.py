#!/usr/bin/python3
# ctest-cost: 15
"""unshard_delete_resume.py: `ckpt unshard --delete-sharded` converges after
a kill at any point of a step's delete (docs/reliability.md, finding 2).

- killed while deleting: the run's step10 (the OLMo torch_new step of
  tests/fixtures plus 30,000 small files, so that the delete takes long
  enough) is watched and SIGKILLed as soon as the delete changes it. The
  delete starts by renaming the step to .step10.ckpt-del-HOST-PID, so the
  kill leaves that name, never a half-deleted step10; the rerun finishes
  it, says so, and exits 0 (before the fix: a half-deleted step10 that
  every rerun reports as an error, exit 1);
- killed after the output was renamed into place, before the delete:
  the rerun deletes the sharded step, whose -unsharded copy at DEST (or
  in the run) is complete; an incomplete copy keeps it (error, exit 1),
  as does a `-unsharded` directory that is a sharded checkpoint;
- the siblings of live pids and of other hosts are left alone; -n
  changes nothing.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, SRC, check, finish, run  # noqa: E402

FIX = os.path.join(SRC, "tests", "fixtures", "runs", "olmo-torch-new-1.13",
                   "step")
HOST = socket.gethostname()
JUNK = 30000


def tree(root):
    out = []
    for d, dirs, fs in os.walk(root):
        for n in dirs + fs:
            out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def make_run(root, steps=(10,), junk=False):
    os.makedirs(os.path.join(root, "wandb"))
    with open(os.path.join(root, "config.yaml"), "w") as f:
        f.write("run: resume\n")
    for s in steps:
        shutil.copytree(FIX, os.path.join(root, "step%d" % s))
    if junk:
        j = os.path.join(root, "step10", "junk")
        os.makedirs(j)
        for i in range(JUNK):
            open(os.path.join(j, "f%05d" % i), "w").close()


def unshard(*args):
    p = run(CKPT, "unshard", "--no-progress", *args, ok=False)
    return p.returncode, p.stdout.splitlines(), p.stderr


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def watched(step):
    """A fingerprint of step that any unlink or rename changes."""
    out = []
    for sub in ("", "junk", "model_and_optim", "train"):
        try:
            out.append(os.lstat(os.path.join(step, sub)).st_mtime_ns)
        except FileNotFoundError:
            out.append(None)
    return out


def kill_during_delete(run_dir, dest):
    """Start unshard --delete-sharded and SIGKILL it the moment step10
    changes (renamed away or a file unlinked). True if the kill came while
    ckpt still ran."""
    step = os.path.join(run_dir, "step10")
    before = watched(step)
    p = subprocess.Popen([CKPT, "unshard", "--delete-sharded", "-q",
                          "--no-progress", run_dir, dest],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        if watched(step) != before:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return p.returncode == -signal.SIGKILL
    p.kill()
    p.wait()
    return False


def case_killed(tmp):
    r = os.path.join(tmp, "k", "run")
    dest = os.path.join(tmp, "k", "out")
    make_run(r, junk=True)
    hit = kill_during_delete(r, dest)
    left = [n for n in os.listdir(r) if n not in ("config.yaml", "wandb")]
    check("killed: the kill came during step10's delete",
          hit and left != [], "hit %s, left %s" % (hit, left))
    check("killed: no half-deleted step10 under its name (renamed first)",
          "step10" not in left, str(left))
    check("killed: the output is complete at DEST",
          sorted(os.listdir(os.path.join(dest, "step10-unsharded"))) ==
          ["config.yaml", "model.pt", "optim.pt", "train.pt"],
          str(tree(dest)))
    rc, lines, err = unshard("-n", "--delete-sharded", r, dest)
    sib = left[0] if len(left) == 1 else "?"
    check("killed -n: would finish", rc == 0 and lines == [
        "would-delete\tstep10\tfinishes an interrupted delete (%s)" % sib,
        "skip\t-\tno sharded checkpoint"], "%d %s %s" % (rc, lines, err))
    check("killed -n: nothing changed", sorted(os.listdir(r)) ==
          sorted(left + ["config.yaml", "wandb"]), str(os.listdir(r)))
    rc, lines, err = unshard("--delete-sharded", r, dest)
    check("killed: the rerun finishes the delete and says so", rc == 0 and
          lines == ["delete\tstep10\tfinished an interrupted delete (%s)" %
                    sib, "skip\t-\tno sharded checkpoint"],
          "%d %s %s" % (rc, lines, err))
    check("killed: the rerun converges", sorted(os.listdir(r)) ==
          ["config.yaml", "wandb"], str(os.listdir(r)))


def case_before_delete(tmp):
    """Killed between the rename of the output into place and the delete:
    the state is exactly that of a run unsharded without --delete-sharded."""
    r = os.path.join(tmp, "b", "run")
    dest = os.path.join(tmp, "b", "out")
    make_run(r, steps=(10, 20, 30))
    rc, _, err = unshard(r, dest)
    check("before: unsharded, nothing deleted", rc == 0 and
          sorted(os.listdir(r)) == ["config.yaml", "step10", "step20",
                                    "step30", "wandb"], err)
    # step30's copy is not complete: its model.pt is empty.
    open(os.path.join(dest, "step30-unsharded", "model.pt"), "w").close()
    before, dest_before = tree(tmp), tree(dest)
    rc, lines, err = unshard("-n", "--delete-sharded", r, dest)
    d = lambda s: "%s/step%d-unsharded" % (dest, s)  # noqa: E731
    bad = ("already unsharded: %s exists, but it is not complete (model.pt "
           "is empty); step30 not deleted" % d(30))
    check("before -n: plan", rc == 1 and lines == [
        "would-delete\tstep10\talready unsharded: %s is complete" % d(10),
        "would-delete\tstep20\talready unsharded: %s is complete" % d(20),
        "error\tstep30\t" + bad], "%d %s %s" % (rc, lines, err))
    check("before -n: nothing changed", tree(tmp) == before)
    rc, lines, err = unshard("--delete-sharded", r, dest)
    check("before: complete copies at DEST: sharded steps deleted", rc == 1
          and lines == [
              "delete\tstep10\talready unsharded: %s is complete; deleted "
              "%s/step10" % (d(10), r),
              "delete\tstep20\talready unsharded: %s is complete; deleted "
              "%s/step20" % (d(20), r),
              "error\tstep30\t" + bad], "%d %s %s" % (rc, lines, err))
    check("before: step30 (incomplete copy) kept, no temporaries",
          sorted(os.listdir(r)) == ["config.yaml", "step30", "wandb"],
          str(os.listdir(r)))
    check("before: DEST untouched", tree(dest) == dest_before,
          str(tree(dest)))
    # The copy in the run itself (DEST is the run, as OLMo keeps them).
    r2 = os.path.join(tmp, "b", "run2")
    make_run(r2, steps=(10,))
    rc, _, err = unshard(r2, r2)
    rc, lines, err = unshard("--delete-sharded", r2, r2)
    check("in the run: the sharded step deleted", rc == 0 and lines == [
        "delete\tstep10\talready unsharded: step10-unsharded in the run is "
        "complete; deleted %s/step10" % r2] and
          sorted(os.listdir(r2)) == ["config.yaml", "step10-unsharded",
                                     "wandb"],
          "%d %s %s %s" % (rc, lines, err, os.listdir(r2)))
    # A step10-unsharded in the run that is not an unsharded checkpoint
    # (a copy of the sharded step under that name): complete, but no copy
    # of step10's tensors in one file; step10 stays.
    r3 = os.path.join(tmp, "b", "run3")
    make_run(r3, steps=(10,))
    shutil.copytree(os.path.join(r3, "step10"),
                    os.path.join(r3, "step10-unsharded"))
    rc, lines, err = unshard("--delete-sharded", r3, r3)
    check("not unsharded: step10 kept", rc == 1 and lines == [
        "error\tstep10\talready unsharded: step10-unsharded in the run "
        "exists, but it is not complete (it is a dcp checkpoint, not "
        "unsharded); step10 not deleted"] and
          sorted(os.listdir(r3)) == ["config.yaml", "step10",
                                     "step10-unsharded", "wandb"],
          "%d %s %s %s" % (rc, lines, err, os.listdir(r3)))


def case_not_ours(tmp):
    """Siblings of a live pid or of another host are never touched."""
    r = os.path.join(tmp, "n", "run")
    make_run(r, steps=())
    os.makedirs(os.path.join(r, "step10-unsharded"))
    with open(os.path.join(r, "step10-unsharded", "model.pt"), "w") as f:
        f.write("x")
    live = ".step10.ckpt-del-%s-%d" % (HOST, os.getpid())
    other = ".step20.ckpt-del-otherhost-%d" % dead_pid()
    for n in (live, other):
        shutil.copytree(FIX, os.path.join(r, n))
    before = tree(r)
    rc, lines, err = unshard("--delete-sharded", r, r)
    check("not ours: left alone", rc == 0 and tree(r) == before and
          lines == ["skip\t-\tno sharded checkpoint"], "%d %s %s" % (
              rc, lines, err))
    # A dead pid's sibling of this host without --delete-sharded: named in
    # a warning, left.
    dead = ".step30.ckpt-del-%s-%d" % (HOST, dead_pid())
    shutil.copytree(FIX, os.path.join(r, dead))
    before = tree(r)
    rc, lines, err = unshard(r, r)
    check("without --delete-sharded: a warning, nothing deleted", rc == 0
          and tree(r) == before and lines == [
              "skip\t-\tno sharded checkpoint"] and
          "ckpt: warning: %s/%s: left by an interrupted delete of step30; "
          "--delete-sharded finishes it\n" % (r, dead) in err,
          "%d %s %s" % (rc, lines, err))


def case_dry_run(tmp):
    """-n --delete-sharded names the delete the real run then does."""
    r = os.path.join(tmp, "dry", "run")
    dest = os.path.join(tmp, "dry", "out")
    make_run(r, steps=(10,))
    rc, dry, err = unshard("-n", "--delete-sharded", r, dest)
    check("-n: nothing changed", rc == 0 and not os.path.exists(dest) and
          sorted(os.listdir(r)) == ["config.yaml", "step10", "wandb"], err)
    rc, real, err = unshard("--delete-sharded", r, dest)
    check("-n: the real run's row, as a prediction", rc == 0 and
          len(dry) == len(real) == 1 and
          real[0].startswith("unshard\tstep10\t") and
          real[0].endswith("; deleted %s/step10" % r) and
          dry[0] == real[0].replace("unshard\t", "would-unshard\t", 1)
          .replace("; deleted ", "; would delete "), "%s %s" % (dry, real))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-resume-")
    try:
        case_dry_run(tmp)
        case_killed(tmp)
        case_before_delete(tmp)
        case_not_ours(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
