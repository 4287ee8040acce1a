#!/usr/bin/env python3
"""Write the bz2blk fuzz corpus: single-block bzip2 streams of varied
content (text, random bytes, runs of 4+ equal bytes, few symbols, all 256
byte values), each cut to its one block as bz2blk_fuzz.c reads it.
Usage: bz2blk_corpus.py DIR"""
import bz2
import hashlib
import os
import random
import sys

EOS = 0x177245385090


def block_of(stream):
    """(level, pad, block bytes) of a one-block stream."""
    bits = int.from_bytes(stream, "big")
    total = len(stream) * 8
    for pad in range(8):
        eos_at = total - pad - 80  # end magic + CRC, then pad bits
        if (bits >> (total - eos_at - 48)) & ((1 << 48) - 1) == EOS:
            break
    else:
        raise SystemExit("no end magic")
    nbits = eos_at - 32
    blk = (bits >> (total - eos_at)) & ((1 << nbits) - 1)
    nbytes = (nbits + 7) // 8
    blk <<= nbytes * 8 - nbits
    return stream[3] - ord("0"), nbytes * 8 - nbits, blk.to_bytes(nbytes, "big")


def samples():
    r = random.Random(11)
    yield 1, b"step 100 loss 2.5\n" * 40
    yield 9, bytes(r.getrandbits(8) for _ in range(3000))
    yield 2, b"a" * 5 + b"b" * 300 + b"cccc" + b"d" * 4 + b"e" * 259
    yield 3, b"x"
    yield 5, bytes(range(256)) * 3
    yield 1, bytes(r.choice(b"ab") for _ in range(2000))
    yield 9, b"".join(bytes([r.getrandbits(8)]) * r.randint(1, 9)
                      for _ in range(600))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for level, data in samples():
        s = bz2.compress(data, level)
        lv, pad, blk = block_of(s)
        rec = bytes([lv - 1, pad]) + blk
        name = "blk-" + hashlib.sha1(rec).hexdigest()[:16]
        with open(os.path.join(out, name), "wb") as f:
            f.write(rec)


if __name__ == "__main__":
    main()
