#!/usr/bin/env python3
"""Write archives that `tar`/`zip` refuse to create, for archive tests.

usage: make_archives.py DIR

Writes into DIR:
  dotdot.tar       member 'run/../evil'          (escapes the archive)
  absolute.tar     member '/etc/evil'            (absolute path)
  symlink.tar      'run/link' -> '../../outside' (link escaping)
  hardlink.tar     hard link to '../x'           (link escaping)
  okaylink.tar     'run/step1/link' -> '../config.yaml' (stays inside)
  truncated.tar.gz a valid .tar.gz cut in half
  garbage.tar      512 bytes of non-tar junk
Python's tarfile/gzip only: no torch needed.
"""
import gzip
import io
import os
import sys
import tarfile


def add_file(tf, name, data=b"x"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def add_link(tf, name, target, kind):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tf.addfile(info)


def main(out):
    os.makedirs(out, exist_ok=True)
    with tarfile.open(os.path.join(out, "dotdot.tar"), "w") as tf:
        add_file(tf, "run/config.yaml")
        add_file(tf, "run/../evil")
    with tarfile.open(os.path.join(out, "absolute.tar"), "w") as tf:
        add_file(tf, "/etc/evil")
    with tarfile.open(os.path.join(out, "symlink.tar"), "w") as tf:
        add_file(tf, "run/config.yaml")
        add_link(tf, "run/link", "../../outside", tarfile.SYMTYPE)
    with tarfile.open(os.path.join(out, "hardlink.tar"), "w") as tf:
        add_file(tf, "run/config.yaml")
        add_link(tf, "run/hard", "../x", tarfile.LNKTYPE)
    with tarfile.open(os.path.join(out, "okaylink.tar"), "w") as tf:
        add_file(tf, "run/config.yaml")
        add_file(tf, "run/step1/model.pt", b"weights")
        add_link(tf, "run/step1/link", "../config.yaml", tarfile.SYMTYPE)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for i in range(50):
            add_file(tf, "run/step%d/model.pt" % i, os.urandom(4096))
    gz = gzip.compress(buf.getvalue())
    with open(os.path.join(out, "truncated.tar.gz"), "wb") as f:
        f.write(gz[: len(gz) // 2])
    with open(os.path.join(out, "garbage.tar"), "wb") as f:
        f.write(b"this is not a tar archive\n" * 20)


if __name__ == "__main__":
    main(sys.argv[1])
