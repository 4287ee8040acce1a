#!/usr/bin/python3
"""upload_tree.py - the trees the upload tests copy, and what to expect.

usage:
  upload_tree.py make DIR [--big-mb N] [--small N] [--seed S]
      DIR/big.bin (N MiB, multipart), 0-byte files, odd names (spaces,
      unicode, '+', '=', '~'), N small files (0..4096 bytes) in 20
      directories; deterministic for a seed.
  upload_tree.py list DIR
      "SIZE<TAB>PATH" per file below DIR, sorted by path (bytes order).
  upload_tree.py awsls
      reads `aws s3 ls --recursive` on stdin, prints "SIZE<TAB>KEY" sorted,
      with the key relative to the first listed prefix given by $PREFIX.
"""
import os
import random
import sys

ODD = ["odd names/a b.txt", "odd names/a+b=c.txt", "odd names/café ሴ.bin",
       "odd names/tilde~x", "odd names/100% sure.txt"]
EMPTY = ["empty", "dir with space/zero"]


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make(root, big_mb, small, seed):
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "big.bin"), "wb") as f:
        left = big_mb << 20
        # Not a multiple of the part size: the last part is short.
        left += 12345
        while left:
            n = min(left, 1 << 20)
            f.write(rng.randbytes(n))
            left -= n
    for name in EMPTY:
        write(os.path.join(root, name), b"")
    for i, name in enumerate(ODD):
        write(os.path.join(root, name), rng.randbytes(100 + i))
    for i in range(small):
        write(os.path.join(root, "small/d%02d/f%05d" % (i % 20, i)),
              rng.randbytes((i * 13) % 4097))


def listing(root):
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out.append((os.path.relpath(p, root), os.path.getsize(p)))
    for rel, size in sorted(out, key=lambda x: x[0].encode()):
        print("%d\t%s" % (size, rel))


def awsls():
    prefix = os.environ.get("PREFIX", "")
    out = []
    for line in sys.stdin:
        parts = line.rstrip("\n").split(None, 3)
        if len(parts) == 4:
            key = parts[3]
            if key.startswith(prefix):
                key = key[len(prefix):]
            out.append((key, int(parts[2])))
    for key, size in sorted(out, key=lambda x: x[0].encode()):
        print("%d\t%s" % (size, key))


def main(argv):
    if argv[0] == "make":
        args = argv[1:]
        opts = {"--big-mb": 100, "--small": 2000, "--seed": 1}
        root = args.pop(0)
        while args:
            opts[args[0]] = int(args[1])
            args = args[2:]
        make(root, opts["--big-mb"], opts["--small"], opts["--seed"])
    elif argv[0] == "list":
        listing(argv[1])
    elif argv[0] == "awsls":
        awsls()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
