#!/usr/bin/python3
# ctest-cost: 20
"""unshard_dest_safety.py: what `ckpt unshard` does to DEST and around it.

- A remote DEST (s3://, r2://, gs://) is object storage: with none to
  reach, exit 1 and nothing is created locally (it used to make a local
  directory named `s3:`).
- A multi-file output replaces an existing DEST as a whole or not at all:
  an output name that DEST holds as a directory fails the run (exit 1)
  with every old file intact (it used to rename model.pt and optim.pt
  into place, then fail on train.pt: a mix of new and old); a successful
  run replaces the outputs and keeps DEST's other files and directories.
- A DEST whose name is 250 bytes long (legal: up to 255) works: the
  temporary directory has a short name of its own (it used to be the
  name plus a suffix: "File name too long").

Fixtures: real torch 1.13 checkpoints from tests/support (make_dcp.py).
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import (CKPT, check, compare, error_of, finish,  # noqa: E402
                     generate, run)


def unshard(*args, cwd=None):
    import subprocess
    return subprocess.run([CKPT, "unshard", "--no-progress"] + list(args),
                          capture_output=True, text=True, cwd=cwd)


def strip_ts(text):
    """stderr without the timestamps ckpt puts before lines off a tty."""
    return re.sub(r"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", "", text)


def remote_dest(tmp):
    """A remote DEST is object storage, never a local path: with no
    storage to reach it fails (exit 1) and creates nothing locally (it
    used to make a directory named `s3:`)."""
    ck = os.path.join(tmp, "rows", "ckpt")
    env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:9",
               AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y",
               AWS_REGION="us-east-1", CKPT_GCS_ENDPOINT="http://127.0.0.1:9",
               R2_ENDPOINT="http://127.0.0.1:9")
    import subprocess
    for scheme in ("s3", "r2", "gs"):
        cwd = os.path.join(tmp, "cwd-" + scheme)
        os.mkdir(cwd)
        dest = "%s://bucket/out" % scheme
        p = subprocess.run([CKPT, "unshard", "--no-progress", "--retries",
                            "1", ck, dest], capture_output=True, text=True,
                           cwd=cwd, env=env, timeout=120)
        check("%s DEST: exit 1" % scheme, p.returncode == 1,
              "%d %s" % (p.returncode, p.stderr))
        check("%s DEST: nothing written locally" % scheme,
              os.listdir(cwd) == [], str(os.listdir(cwd)))


def read_tree(root):
    """{relative path: bytes, or 'dir'} of everything below root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), root)] = "dir"
        for n in files:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def old_dest(path):
    os.makedirs(os.path.join(path, "tok"))
    for name in ("model.pt", "optim.pt", "config.yaml", "notes.txt",
                 "tok/vocab.json"):
        with open(os.path.join(path, name), "w") as f:
            f.write("old " + name)


def litter(tmp):
    return [x for x in os.listdir(tmp) if x.startswith(".ckpt-")]


def replace_whole(tmp):
    """An existing DEST: all outputs replaced at once, or none."""
    ck = os.path.join(tmp, "leg", "ckpt")
    dest = os.path.join(tmp, "into", "dest")
    old_dest(dest)
    os.makedirs(os.path.join(dest, "train.pt"))
    with open(os.path.join(dest, "train.pt", "x"), "w") as f:
        f.write("a directory named like an output")
    before = read_tree(dest)
    p = unshard(ck, dest)
    check("existing DEST, train.pt a directory: exit 1", p.returncode == 1,
          "%d %s" % (p.returncode, p.stderr))
    check("existing DEST, train.pt a directory: message", error_of(p) ==
          "'%s/train.pt' is a directory: not replaced by an "
          "output file" % dest, error_of(p))
    check("existing DEST, train.pt a directory: old DEST intact",
          read_tree(dest) == before, str(sorted(read_tree(dest))))
    check("existing DEST, train.pt a directory: no litter",
          litter(os.path.dirname(dest)) == [] and litter(dest) == [],
          str(os.listdir(os.path.dirname(dest))))

    os.remove(os.path.join(dest, "train.pt", "x"))
    os.rmdir(os.path.join(dest, "train.pt"))
    p = unshard(ck, dest)
    check("existing DEST: exit 0", p.returncode == 0, p.stderr)
    got = read_tree(dest)
    check("existing DEST: outputs and other files", sorted(got) ==
          ["config.yaml", "model.pt", "notes.txt", "optim.pt", "tok",
           "tok/vocab.json", "train.pt"], str(sorted(got)))
    check("existing DEST: other files kept", got.get("notes.txt") ==
          b"old notes.txt" and got.get("tok/vocab.json") ==
          b"old tok/vocab.json")
    compare("existing DEST: outputs new", dest,
            os.path.join(tmp, "leg", "expected"))
    check("existing DEST: no litter", litter(os.path.dirname(dest)) == []
          and litter(dest) == [], str(os.listdir(os.path.dirname(dest))))


def long_name(tmp):
    ck = os.path.join(tmp, "rows", "ckpt")
    dest = os.path.join(tmp, "long", "d" * 250)
    p = unshard(ck, dest)
    check("250-byte DEST name: exit 0", p.returncode == 0, p.stderr)
    check("250-byte DEST name: output", os.path.isdir(dest) and
          os.listdir(dest) == ["checkpoint.pt"])
    if os.path.isdir(dest):
        compare("250-byte DEST name: bit-exact",
                os.path.join(dest, "checkpoint.pt"),
                os.path.join(tmp, "rows", "expected.pt"))
    check("250-byte DEST name: no litter",
          litter(os.path.join(tmp, "long")) == [])


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-dest-safety-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "rows"), "--case", "rows",
                  "--no-verify"],
                 ["make_olmo_legacy.py", os.path.join(tmp, "leg"), "--ranks",
                  "2", "--no-verify"])
        remote_dest(tmp)
        replace_whole(tmp)
        long_name(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
