#!/usr/bin/python3
# ctest-cost: 6
"""clean_recheck.py - `ckpt clean` reads a bad run again right before
deleting it, and deletes nothing if the run changed since it was judged
(src/run/clean.c, verify_still_bad): the row is `error RUN run changed
while it was checked; not deleted`, exit 1, and every file stays.

The change comes at an exact moment, while the run is judged: an
LD_PRELOAD shim (tests/support/age_preload.c) acts when clean opens the
step0 `.metadata` of the bad sample run 2871002 (after the run was
listed, before the verdict), as a trainer beside it would:
  * grown: it writes a shard of a new step (the run grew);
  * best: it renames a complete DCP checkpoint from outside the run to
    `step1000/` (a step moved in; one already inside would be judged):
    now a complete checkpoint;
  * unknown: it renames `scratch/` (files of a layout ckpt cannot judge)
    from outside the run to `step3/`: a step that may be good, which
    ckpt cannot tell;
  * archive: the bad run as `2871102.tar.gz`, replaced whole by a copy
    with a newer mtime the moment clean opens it again to re-check it
    (the shim's second open of it; the first is the listing): the same
    bytes, another version;
  * archive, before the re-check: the same replacement at the
    re-check's first stat of the archive (the seventh stat of its path:
    six while it is judged), before it reads a byte: read again it is
    whole and bad, the same size and tree, and only its mtime differs
    from the one judged;
  * damaged: the bad run as a plain `.tar`, replaced the same way by a
    copy of the same size and mtime with one member's header damaged
    (rewritten in place, `touch -r`): read again, it is damaged.
Each condition of the re-check alone makes the difference: without it,
clean deletes what it judged (the new step's files are left, the row
says so, or the archive is gone).

The best and unknown conditions are reached apart from growth too: a
rename inside the run, the moment the re-check starts (the fifth stat of
the run's path: clean_recheck's renames from outside also grow the run,
which the growth check alone refuses):
  * best, renamed: step0 (complete, but step 0) becomes `step1000`: the
    same files and bytes, now a complete checkpoint;
  * unknown, renamed: `train_data/` (debris) becomes `step3/`: the same
    files, now a step ckpt cannot judge.
Without either condition clean deletes the run as it read it again,
the complete step1000 (or the step3 it cannot judge) with it.

And the run's path is checked again right before the delete: the run
swapped for a symlink to its renamed self (mv RUN RUN.real; ln -s) as
the re-check reads step0's `.metadata` (its second open) is refused with
the up-front refusal's row, `error RUN 'RUN' is a symbolic link; not
deleting through it (give the real path)`, and both stay as they are."""
import os
import shutil
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, ckpt, tree  # noqa: E402
from s3test import gen_runs  # noqa: E402

RUN = "2871002"
WHY = "run changed while it was checked; not deleted"


def clean(run, on, write, rename_to=None, nth=1, call="open"):
    # (delproof.ckpt loads the age shim: it also ages the ctimes)
    env = dict(os.environ, CKPT_TEST_WRITE_ON=on, CKPT_TEST_WRITE=write,
               CKPT_TEST_WRITE_ON_NTH=str(nth), CKPT_TEST_WRITE_ON_CALL=call)
    if rename_to:
        env["CKPT_TEST_RENAME_TO"] = rename_to
    return ckpt("clean", "--min-age", "0", run, env=env)


def archive_case(c, tmp, name, arc, change, nth=2, call="open"):
    """The archive arc replaced by change(a copy) as clean opens it the
    second time: its re-check (the first open is its listing); or at the
    nth call (stat) of its path."""
    other = os.path.join(os.path.dirname(arc), "other")
    shutil.copy2(arc, other)
    change(other, os.stat(arc))
    with open(other, "rb") as f:
        want = f.read()
    rc, rows, err = clean(arc, arc, other, arc, nth=nth, call=call)
    c.eq("%s: refused (%s)" % (name, err.strip()[-300:]), (rc, rows),
         (1, [["error", arc, WHY]]))
    c.eq("%s: kept (the new one)" % name,
         (os.path.exists(arc) and open(arc, "rb").read() == want,
          os.path.exists(other)), (True, False))


def newer(path, st):
    os.utime(path, (st.st_atime + 100, st.st_mtime + 100))


def damaged(path, st):
    """The header checksum of a member in the middle changed in place,
    the mtime put back (as `touch -r` does): the same size and mtime."""
    with tarfile.open(path) as t:
        ms = t.getmembers()
    with open(path, "r+b") as f:
        f.seek(ms[len(ms) // 2].offset + 148)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 1]))
    os.utime(path, (st.st_atime, st.st_mtime))


def dir_case(c, tmp, runs, name, prepare, act):
    """A copy of RUN, prepared; clean with the shim acting as act(run)
    says, when clean opens step0's .metadata (judging, after the
    listing); the run must be refused whole."""
    run = os.path.join(tmp, name, RUN)
    shutil.copytree(os.path.join(runs, RUN), run, symlinks=True)
    prepare(run)
    meta = os.path.join(run, "step0", "model_and_optim", ".metadata")
    write, rename_to = act(run)
    rc, rows, err = clean(run, meta, write, rename_to)
    c.eq("%s: refused (%s)" % (name, err.strip()[-300:]), (rc, rows),
         (1, [["error", run, WHY]]))
    return run


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        gen_runs(runs, archives=True)
        base = tree(os.path.join(runs, RUN))

        shard = os.path.join("step2000", "model_and_optim", "__0_0.distcp")
        run = dir_case(c, tmp, runs, "grown", lambda r: None,
                       lambda r: (os.path.join(r, shard), None))
        got = tree(run)
        c.eq("grown: every judged file kept, the new shard too",
             ({k: v for k, v in got.items() if k != shard}, shard in got),
             (base, True))

        # (moved in from outside the run: a complete step already in the
        # run is judged, and one no layout owns is unaccounted for)
        good = os.path.join(runs, "2871001", "step1000")
        staged = os.path.join(tmp, "staged")
        os.makedirs(staged)
        run = dir_case(
            c, tmp, runs, "best",
            lambda r: shutil.copytree(good, os.path.join(staged, "step1000")),
            lambda r: (os.path.join(staged, "step1000"),
                       os.path.join(r, "step1000")))
        want = dict(base)
        want.update({"step1000/" + k: v for k, v in
                     tree(good).items()})
        c.eq("best: the run as it now is, step1000 whole", tree(run), want)

        def scratch(r):
            os.makedirs(os.path.join(staged, "scratch"))
            for n in ("weights.npz", "notes.txt"):
                with open(os.path.join(staged, "scratch", n), "wb") as f:
                    f.write(b"not a format ckpt knows\n")
        run = dir_case(c, tmp, runs, "unknown", scratch,
                       lambda r: (os.path.join(staged, "scratch"),
                                  os.path.join(r, "step3")))
        want = dict(base)
        want.update({"step3/weights.npz": b"not a format ckpt knows\n",
                     "step3/notes.txt": b"not a format ckpt knows\n"})
        c.eq("unknown: every file kept", tree(run), want)

        arc = os.path.join(tmp, "archive", "2871102.tar.gz")
        os.makedirs(os.path.dirname(arc))
        shutil.copy2(os.path.join(runs, "2871102.tar.gz"), arc)
        archive_case(c, tmp, "archive", arc, newer)
        arc = os.path.join(tmp, "archive-stat", "2871102.tar.gz")
        os.makedirs(os.path.dirname(arc))
        shutil.copy2(os.path.join(runs, "2871102.tar.gz"), arc)
        archive_case(c, tmp, "archive, before the re-check", arc, newer,
                     nth=7, call="stat")
        arc = os.path.join(tmp, "damaged", RUN + ".tar")
        os.makedirs(os.path.dirname(arc))
        with tarfile.open(arc, "w", format=tarfile.GNU_FORMAT) as t:
            t.add(os.path.join(runs, RUN), arcname=RUN)
        os.utime(arc, (1e9, 1e9))
        archive_case(c, tmp, "damaged", arc, damaged)
        renamed_case(c, tmp, runs, base, "best, renamed", "step0",
                     "step1000")
        renamed_case(c, tmp, runs, base, "unknown, renamed", "train_data",
                     "step3")
        link_case(c, tmp, runs, base)
    return c.finish()


def renamed_case(c, tmp, runs, base, name, frm, to):
    """frm renamed to `to` inside a copy of RUN as the re-check starts:
    refused, every file kept under its new name."""
    run = os.path.join(tmp, name.replace(", ", "-"), RUN)
    shutil.copytree(os.path.join(runs, RUN), run, symlinks=True)
    env = dict(os.environ, CKPT_TEST_WRITE_ON=run, CKPT_TEST_WRITE_ON_NTH="5",
               CKPT_TEST_WRITE_ON_CALL="stat", CKPT_TEST_RUN="mv '%s/%s' "
               "'%s/%s'" % (run, frm, run, to))
    rc, rows, err = ckpt("clean", "--min-age", "0", run, env=env)
    c.eq("%s: refused (%s)" % (name, err.strip()[-300:]), (rc, rows),
         (1, [["error", run, WHY]]))
    want = {(to + k[len(frm):] if k.startswith(frm + "/") else k): v
            for k, v in base.items()}
    c.eq("%s: every file kept, renamed" % name, tree(run), want)


def link_case(c, tmp, runs, base):
    """RUN swapped for a symlink to its renamed self while the re-check
    reads it: refused right before the delete, nothing touched."""
    run = os.path.join(tmp, "link", RUN)
    shutil.copytree(os.path.join(runs, RUN), run, symlinks=True)
    meta = os.path.join(run, "step0", "model_and_optim", ".metadata")
    env = dict(os.environ, CKPT_TEST_WRITE_ON=meta, CKPT_TEST_WRITE_ON_NTH="2",
               CKPT_TEST_RUN="mv '%s' '%s.real' && ln -s '%s.real' '%s'"
               % (run, run, RUN, run))
    rc, rows, err = ckpt("clean", "--min-age", "0", run, env=env)
    c.eq("link: refused again before the delete (%s)" % err.strip()[-300:],
         (rc, rows), (1, [["error", run, "'%s' is a symbolic link; not "
                           "deleting through it (give the real path)"
                           % run]]))
    c.eq("link: the link and the run it names kept",
         (os.readlink(run), tree(run + ".real")), (RUN + ".real", base))


if __name__ == "__main__":
    sys.exit(main())
