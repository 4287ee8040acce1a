#!/usr/bin/python3
# ctest-cost: 3
"""upload_same_late.py - `upload --delete-source` checks again, right
before it deletes a source file, that DEST's copy is not the source
itself (src/upload/units.c, still_copied): upload_same.sh covers a DEST
that is SRC when the upload starts (refused at plan time); this covers
one that becomes SRC after the copy was verified, the moment the delete's
re-check first stats DEST's file (tests/support/age_preload.c runs the
change then: the first stat of DEST/a, after its PUT and the listing
that verified it):
  * file: DEST/a replaced by a symlink to SRC/a;
  * dir: DEST renamed away and replaced by a symlink to SRC.
Deleting SRC/a then would leave DEST naming nothing. Each is an error
row, `error SRC/a - not deleted: SRC/a: DEST 'DEST/a' is the same file;
not compared with itself`, exit 1, and SRC/a keeps its bytes."""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, ckpt, tree  # noqa: E402

DATA = b"the only copy\n"


def case(c, tmp, name, change):
    src = os.path.join(tmp, name, "src")
    dest = os.path.join(tmp, name, "dest")
    os.makedirs(src)
    with open(os.path.join(src, "a"), "wb") as f:
        f.write(DATA)
    env = dict(os.environ, CKPT_TEST_WRITE_ON=os.path.join(dest, "a"),
               CKPT_TEST_WRITE_ON_CALL="stat", CKPT_TEST_WRITE_ON_NTH="1",
               CKPT_TEST_RUN=change(src, dest),
               CKPT_STATE_DIR=os.path.join(tmp, name, "state"))
    rc, rows, err = ckpt("upload", "--delete-source", src, dest, env=env)
    a = os.path.join(src, "a")
    c.eq("%s: refused right before the delete (%s)"
         % (name, err.strip()[-300:]),
         (rc, [r for r in rows if r[0] != "total"]),
         (1, [["error", a, "-", "not deleted: %s: DEST '%s' is the same "
               "file; not compared with itself"
               % (a, os.path.join(dest, "a"))]]))
    c.eq("%s: the source kept" % name, tree(src), {"a": DATA})
    try:
        with open(os.path.join(dest, "a"), "rb") as f:
            got = f.read()
    except FileNotFoundError:
        got = None  # (a link to the source deleted)
    c.eq("%s: DEST/a reads the source" % name, got, DATA)


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        case(c, tmp, "file", lambda s, d: "ln -sf '%s/a' '%s/a'" % (s, d))
        case(c, tmp, "dir", lambda s, d: "mv '%s' '%s.old' && ln -s '%s' "
             "'%s'" % (d, d, s, d))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
