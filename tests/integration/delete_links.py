#!/usr/bin/python3
# ctest-cost: 5
"""delete_links.py - symlinks never license a deletion (issue 20 class
5). A bad run whose step1000 is a symlink to a complete checkpoint
elsewhere is an error in clean (-n predicts it) and process, and neither
the run nor the target is touched. A run given as a symlink is refused by
clean and process alike, with one message. `upload -L --delete-source`
copies a file reached through a link out of SRC but never deletes it: a
`kept` row and the summary say so."""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, age, ckpt, gen, tree  # noqa: E402

LINKED = "step1000 is a symbolic link, not judged; not deleted"


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        gen(runs)
        dest = os.path.join(tmp, "dest")
        # A bad run (step0 only) whose step1000 is a link to a complete
        # checkpoint kept elsewhere.
        elsewhere = os.path.join(tmp, "elsewhere", "step1000")
        shutil.copytree(os.path.join(runs, "2871001", "step1000"), elsewhere)
        run = os.path.join(runs, "2871002")
        os.symlink(elsewhere, os.path.join(run, "step1000"))
        age(runs)
        before, target = tree(run), tree(elsewhere)
        rc, out, err = ckpt("clean", "-n", run)
        c.eq("clean -n: error, exit 1", (rc, out), (1, [["error", run,
                                                         LINKED]]))
        rc, out, err = ckpt("clean", run)
        c.eq("clean: error, exit 1", (rc, out), (1, [["error", run, LINKED]]))
        rc, out, err = ckpt("process", "-n", "--no-wandb", run, "--dest",
                            dest)
        c.eq("process -n: failed judge", (rc, out[0]),
             (1, ["error", run, "judge: " + LINKED]))
        rc, out, err = ckpt("process", "--no-wandb", run, "--dest", dest)
        c.eq("process: failed judge", (rc, out[0]),
             (1, ["error", run, "judge: " + LINKED]))
        c.eq("run untouched", tree(run), before)
        c.eq("link target untouched", tree(elsewhere), target)

        # A run given as a symlink: one rule, one message, for a bad run
        # and a good one, in clean and process.
        for name, to in (("badlink", "2871003"), ("goodlink", "2871005")):
            link = os.path.join(tmp, name)
            os.symlink(os.path.join(runs, to), link)
            msg = ("'%s' is a symbolic link; not deleting through it (give "
                   "the real path)" % link)
            before = tree(os.path.join(runs, to))
            rc, out, err = ckpt("clean", link)
            c.eq("clean %s: error" % name, (rc, out),
                 (1, [["error", link, msg]]))
            rc, out, err = ckpt("process", "-n", "--no-wandb", link,
                                "--dest", dest)
            c.eq("process -n %s: failed judge" % name, (rc, out[0]),
                 (1, ["error", link, "judge: " + msg]))
            rc, out, err = ckpt("process", "--no-wandb", link, "--dest",
                                dest)
            c.eq("process %s: failed judge" % name, (rc, out[0]),
                 (1, ["error", link, "judge: " + msg]))
            c.eq("%s: target untouched" % name,
                 tree(os.path.join(runs, to)), before)
        c.eq("nothing reached DEST but state", [
             os.path.relpath(os.path.join(d, f), dest)
             for d, _, fs in os.walk(dest) for f in fs
             if not f.endswith((".json", ".lease"))], [])

        # upload -L --delete-source: a file reached through a link out of
        # SRC is copied and kept; SRC's own files (and the link to a file,
        # which is SRC's) go.
        src, out_dir = os.path.join(tmp, "src"), os.path.join(tmp, "up")
        outside = os.path.join(tmp, "outside")
        os.makedirs(os.path.join(outside, "dir"))
        os.makedirs(src)
        for p, data in ((os.path.join(src, "own"), b"own"),
                        (os.path.join(outside, "dir", "f"), b"precious"),
                        (os.path.join(outside, "file"), b"shared")):
            with open(p, "wb") as f:
                f.write(data)
        os.symlink(os.path.join(outside, "dir"), os.path.join(src, "ldir"))
        os.symlink(os.path.join(outside, "file"), os.path.join(src, "lfile"))
        rc, out, err = ckpt("upload", "-L", "--delete-source", src, out_dir)
        c.eq("upload -L: exit 0, a kept row",
             (rc, [r for r in out if r[0] != "total"]),
             (0, [["keep", os.path.join(src, "ldir", "f"),
                   os.path.join(out_dir, "ldir", "f"),
                   "copied from outside SRC (reached through a symbolic "
                   "link); kept"]]))
        c.true("upload -L: the summary says so",
               "1 file(s) kept at SRC: see the 'keep' rows" in err)
        c.eq("outside files intact", tree(outside),
             {"dir/f": b"precious", "file": b"shared"})
        c.eq("copied", tree(out_dir), {"own": b"own", "ldir/f": b"precious",
                                       "lfile": b"shared"})
        c.eq("SRC keeps the link to the outside directory", tree(src),
             {"ldir": "->" + os.path.join(outside, "dir")})
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
