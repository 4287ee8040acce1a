#!/usr/bin/python3
# ctest-cost: 20
"""process_rows.py - every queued run gets its row, with counts of the
run's own files (issue 27 class 13).

- `--tmp-dir` inside DEST/RUN put the spool's files among the run's at
  DEST, doubling the row's and the state's file count: a --tmp-dir inside
  DEST or inside a SRC is now refused up front (exit 2), naming both.
- `process runs --dest runs/r2/out` left r2 out with no row at all, pass
  after pass: r2 now fails with a row saying DEST is inside it, and the
  other runs are processed.
- `process runs/r1/.` was refused (its run id was "."); clean accepted
  it: it is runs/r1."""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, ckpt, gen, tree  # noqa: E402


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        gen(runs)
        dest = os.path.join(tmp, "dest")
        os.makedirs(os.path.join(dest, "2871001"))
        for tdir, inside in ((os.path.join(dest, "2871001", "tmp"), "DEST"),
                             (os.path.join(runs, "2871005", "tmp"), runs)):
            before = tree(runs)
            rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                                "--tmp-dir", tdir, runs, "--dest", dest)
            c.eq("--tmp-dir inside %s: refused, nothing done"
                 % os.path.basename(inside),
                 (rc, out, "--tmp-dir %s is inside %s" % (tdir, inside) in
                  err, tree(runs) == before), (2, [], True, True))

        r2 = os.path.join(runs, "2871005")
        out_in_r2 = os.path.join(r2, "out")
        for n in (1, 2):
            rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                                runs, "--dest", out_in_r2, timeout=300)
            row = [r for r in out if r[1] == r2]
            c.eq("pass %d: a run holding DEST has its failed row" % n,
                 (rc, row), (1, [["error", r2, "judge: DEST '%s' is inside "
                                  "the run, which would be deleted with what "
                                  "is written there; nothing done"
                                  % out_in_r2]]))
            c.eq("pass %d: the others are processed" % n,
                 sorted(r[0] for r in out if r[0] in ("process", "done")),
                 ["process"] if n == 1 else [])
        c.eq("the run holding DEST is still whole", os.path.isfile(
            os.path.join(r2, "step3000-unsharded", "model.pt")), True)

        gen(os.path.join(tmp, "more"))
        r1 = os.path.join(tmp, "more", "2871001")
        rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                            r1 + "/.", "--dest", dest, timeout=300)
        c.eq("runs/r1/. is runs/r1", (rc, out[0][:3]),
             (0, ["process", r1, os.path.join(dest, "2871001")]))
        shutil.rmtree(dest)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
