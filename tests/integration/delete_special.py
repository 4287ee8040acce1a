#!/usr/bin/python3
# ctest-cost: 5
"""delete_special.py - only regular files are ever opened for reading
(issue 20 class 9). A FIFO where a step's .metadata belongs made `ls`,
`clean` and `process` block forever in open(2); each must now exit
promptly (a timeout turns a hang into a failure) with an error naming
it, and leave the run alone. And a good run's FIFO and symlink, which
process never copies, stay at the source: the processed row and the
state say so ("kept 2 special files: ...")."""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, age, ckpt, gen, tree  # noqa: E402

META = "step1000/model_and_optim/.metadata"


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        gen(runs)
        dest = os.path.join(tmp, "dest")
        # A copy of the good run whose step1000/.metadata is a FIFO, and
        # no other complete step (step1000-unsharded removed).
        run = os.path.join(tmp, "fiforun")
        shutil.copytree(os.path.join(runs, "2871001"), run, symlinks=True)
        shutil.rmtree(os.path.join(run, "step1000-unsharded"))
        os.unlink(os.path.join(run, META))
        os.mkfifo(os.path.join(run, META))
        age(run)
        before = tree(run)
        err_msg = "%s: '%s' is a FIFO, not a regular file; not read" % (
            run, META)
        rc, out, err = ckpt("ls", run, timeout=20)
        # its row, the error in the verdict's column; nothing on stderr
        c.eq("ls: exits 1 promptly, naming the FIFO", (rc, out, err),
             (1, [[run, "-", "-", "-", "error: " + err_msg, "-", "-"]], ""))
        rc, out, err = ckpt("ls", "--summary", run, timeout=20)
        c.eq("ls --summary: exits 1 promptly, one error run",
             (rc, [r[:2] for r in out if r[0] == "error"], err_msg in err),
             (1, [["error", "1"]], True))
        for args in (["clean", "-n"], ["clean"]):
            rc, out, err = ckpt(*(args + [run]), timeout=20)
            c.eq("%s: error naming the FIFO" % " ".join(args), (rc, out),
                 (1, [["error", run, err_msg]]))
        for args in (["process", "-n"], ["process"]):
            rc, out, err = ckpt(*(args + ["--no-wandb", run, "--dest",
                                          dest]), timeout=20)
            c.eq("%s: failed judge naming the FIFO" % " ".join(args),
                 (rc, out[:1]), (1, [["error", run, "judge: " + err_msg]]))
        c.eq("run untouched", tree(run), before)

        # A good run with a FIFO and a symlink process never copies.
        good = os.path.join(tmp, "goodrun")
        shutil.copytree(os.path.join(runs, "2871005"), good, symlinks=True)
        os.mkfifo(os.path.join(good, "train_data", "fifo"))
        os.symlink("/etc/hostname", os.path.join(good, "hostlink"))
        age(good)
        note = "kept 2 special files: hostlink, train_data/fifo"
        rc, out, err = ckpt("process", "--no-wandb", good, "--dest", dest,
                            timeout=60)
        c.eq("process: processed, the row names what stays",
             (rc, out[0][:2], out[0][-1]), (0, ["process", good], note))
        c.eq("only the special files stay", tree(good),
             {"hostlink": "->/etc/hostname", "train_data/fifo": "fifo"})
        with open(os.path.join(dest, ".ckpt-process", "goodrun.json")) as f:
            st = json.load(f)
        c.eq("the state says so", (st["phase"], st.get("why")),
             ("done", note))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
