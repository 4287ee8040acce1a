#!/usr/bin/python3
# ctest-cost: 15
"""test_clean_race.py: a checkpoint written into a local run while `ckpt
clean` deletes it survives (docs/commands/clean.md, "Safety"; the s3
counterpart is in test_clean_remote.sh).

The run is tests/support/gen_runs.py's bad run 2871002 plus 30,000 small
log files, so that the delete takes a while. A writer that holds the run
open (as a trainer whose working directory is the run does) waits for
clean's commit point, the rename of the run to .2871002.ckpt-del-HOST-PID,
then writes step1000/model.pt into it. Exact outcome: the row is
`error 2871002 run changed during delete; left in place:
step1000/model.pt`, exit 1; the judged files are gone; the new file is
back under the run's name, and no .ckpt-del name is left.
"""
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, SUP, check, finish  # noqa: E402

LOGS = 30000


# A whole torch.save-style zip: clean checks model.pt's structure.
_b = io.BytesIO()
with zipfile.ZipFile(_b, "w") as _z:
    _z.writestr("archive/data.pkl", b"weights")
WEIGHTS = _b.getvalue()

def tree(root):
    out = []
    for d, dirs, fs in os.walk(root):
        for n in dirs + fs:
            out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-clean-race-")
    try:
        subprocess.run([sys.executable, os.path.join(SUP, "gen_runs.py"),
                        tmp], check=True, capture_output=True)
        run = os.path.join(tmp, "2871002")
        logs = os.path.join(run, "logs")
        os.makedirs(logs)
        for i in range(LOGS):
            with open(os.path.join(logs, "rank%05d.log" % i), "w") as f:
                f.write("x")
        # The writer's handle on the run: it follows the rename.
        fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
        p = subprocess.Popen([CKPT, "clean", "--min-age", "0", "2871002"],
                             cwd=tmp, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        wrote = renamed = None
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            if not os.path.lexists(run):
                renamed = [n for n in os.listdir(tmp) if ".ckpt-del-" in n]
                os.mkdir("step1000", dir_fd=fd)
                w = os.open("step1000/model.pt", os.O_WRONLY | os.O_CREAT,
                            0o644, dir_fd=fd)
                os.write(w, WEIGHTS)
                os.close(w)
                # Still being deleted when the file landed: the judged logs
                # were not all gone yet.
                try:
                    lfd = os.open("logs", os.O_RDONLY | os.O_DIRECTORY,
                                  dir_fd=fd)
                    wrote = len(os.listdir(lfd))
                    os.close(lfd)
                except FileNotFoundError:
                    wrote = 0
                break
        out, err = p.communicate(timeout=300)
        os.close(fd)
        check("the writer wrote during the delete, after the rename",
              renamed and renamed[0].startswith(".2871002.ckpt-del-")
              and wrote, "renamed %s, logs left %s" % (renamed, wrote))
        check("exit 1", p.returncode == 1, "%d %s" % (p.returncode, err))
        check("row", out == "error\t2871002\trun changed during delete; left "
              "in place: step1000/model.pt\n", out)
        check("the new file survives under the run's name, nothing else",
              tree(run) == ["step1000", "step1000/model.pt"], str(tree(run)))
        with open(os.path.join(run, "step1000", "model.pt"), "rb") as f:
            check("its bytes", f.read() == WEIGHTS)
        check("no .ckpt-del name left",
              not [n for n in os.listdir(tmp) if ".ckpt-del-" in n],
              str(os.listdir(tmp)))
        # A rerun judges what is there now: a run with step1000 only.
        p = subprocess.run([CKPT, "clean", "--min-age", "0", "-n",
                            "2871002"], cwd=tmp, capture_output=True,
                           text=True)
        check("rerun -n: judges the new state", p.returncode == 0 and
              p.stdout == "keep\t2871002\tcomplete checkpoint step1000 "
              "(unsharded)\n", p.stdout + p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
