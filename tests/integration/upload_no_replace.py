#!/usr/bin/python3
# ctest-cost: 30
"""upload_no_replace.py - DEST's copy may be the only one (issue 27: an
earlier `upload --delete-source` or `ckpt process` deleted its source),
so plain `ckpt upload` never replaces a file at DEST that holds other
bytes: the file fails as a conflict naming it, DEST keeps its bytes,
`-n` says the same, exit 1; equal bytes are skipped; `--overwrite`
replaces them when asked. Local and s3:// DEST (the accounting oracle
found plain upload replacing DEST's files in 16 random cases)."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import S3Env, Checker, ckpt  # noqa: E402


def write(p, data):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


def dest_bytes(env, dest, name):
    if dest.startswith("s3://"):
        r = subprocess.run(["aws", "s3", "cp", "--quiet", dest + "/" + name,
                            "-"], env=env, capture_output=True, check=True)
        return r.stdout
    with open(os.path.join(dest, name), "rb") as f:
        return f.read()


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp, S3Env() as s3:
        env = s3.env()
        src = os.path.join(tmp, "src")
        write(os.path.join(src, "config.yaml"), b"run: new\n")
        write(os.path.join(src, "same.txt"), b"same\n")
        for kind in ("local", "s3"):
            dest = os.path.join(tmp, "dest") if kind == "local" else \
                "s3://ckpt-test/dest"
            old = os.path.join(tmp, "old")
            write(os.path.join(old, "config.yaml"), b"run: the first one\n")
            write(os.path.join(old, "same.txt"), b"same\n")
            rc, out, err = ckpt("upload", old, dest, env=env)
            c.eq("%s: the first copy" % kind, rc, 0)
            for dry in (["-n"], []):
                rc, out, err = ckpt("upload", *dry, src, dest, env=env)
                rows = [ln.split("\t") for ln in out.splitlines()]
                fails = [r[0:2] for r in rows if r[0] == "error"]
                c.eq("%s %s: other bytes at DEST are a conflict, exit 1"
                     % (kind, " ".join(dry)), (rc, fails),
                     (1, [["error", os.path.join(src, "config.yaml")]]))
                c.eq("%s %s: the row names DEST's file and says it is kept"
                     % (kind, " ".join(dry)),
                     all("conflict" in r[3] and "not replaced" in r[3]
                         for r in rows if r[0] == "error"), True)
                c.eq("%s %s: DEST keeps its bytes" % (kind, " ".join(dry)),
                     dest_bytes(env, dest, "config.yaml"),
                     b"run: the first one\n")
            rc, out, err = ckpt("upload", "--delete-source", src, dest,
                                env=env)
            c.eq("%s --delete-source: the conflict keeps the source" % kind,
                 (rc, sorted(os.listdir(src))),
                 (1, ["config.yaml", "same.txt"]))
            rc, out, err = ckpt("upload", "--overwrite", src, dest, env=env)
            c.eq("%s --overwrite: replaced when asked" % kind,
                 (rc, dest_bytes(env, dest, "config.yaml")),
                 (0, b"run: new\n"))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
