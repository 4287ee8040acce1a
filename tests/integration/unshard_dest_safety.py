#!/usr/bin/python3
# ctest-cost: 20
"""unshard_dest_safety.py: what `ckpt unshard` does to DEST and around it.

- A remote DEST (s3://, r2://, gs://) is a usage error (exit 2), and
  nothing is created (it used to make a local directory named `s3:`).

Fixtures: real torch 1.13 checkpoints from tests/support (make_dcp.py).
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, check, compare, finish, generate, run  # noqa: E402


def unshard(*args, cwd=None):
    import subprocess
    return subprocess.run([CKPT, "unshard", "--no-progress"] + list(args),
                          capture_output=True, text=True, cwd=cwd)


def remote_dest(tmp):
    """A remote DEST is refused before anything is read or created."""
    ck = os.path.join(tmp, "rows", "ckpt")
    for scheme in ("s3", "r2", "gs"):
        cwd = os.path.join(tmp, "cwd-" + scheme)
        os.mkdir(cwd)
        dest = "%s://bucket/out" % scheme
        p = unshard(ck, dest, cwd=cwd)
        check("%s DEST: exit 2" % scheme, p.returncode == 2,
              "%d %s" % (p.returncode, p.stderr))
        check("%s DEST: message" % scheme, p.stderr.startswith(
            "ckpt unshard: error: DEST '%s' is remote: unshard writes to a "
            "local directory only (unshard there, then ckpt upload)\n" % dest),
            p.stderr)
        check("%s DEST: nothing written" % scheme, p.stdout == "" and
              os.listdir(cwd) == [], p.stdout + str(os.listdir(cwd)))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-dest-safety-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "rows"), "--case", "rows",
                  "--no-verify"])
        remote_dest(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
