#!/usr/bin/env python3
"""Write the mghf fuzz target's seed corpus: the TP=2 legacy and
torch_dist steps of tests/fixtures/megatron_llama, each with the model's
config.json in the step. Input format: tests/fuzz/mghf_fuzz.c.
Usage: mghf_corpus.py DIR"""
import os
import struct
import sys

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                   "fixtures", "megatron_llama")


def step(case):
    top = os.path.join(FIX, case, "checkpoints")
    d = os.path.join(top, "iter_0000010")
    files = [("config.json", os.path.join(top, "config.json"))]
    for root, _, names in sorted(os.walk(d)):
        for n in sorted(names):
            p = os.path.join(root, n)
            files.append((os.path.relpath(p, d), p))
    out = b""
    for name, p in files:
        data = open(p, "rb").read()
        out += bytes([len(name)]) + name.encode() + \
            struct.pack("<I", len(data)) + data
    return out


def main():
    os.makedirs(sys.argv[1], exist_ok=True)
    for case in ("tp2", "dist_tp2"):
        with open(os.path.join(sys.argv[1], case), "wb") as f:
            f.write(step(case))


if __name__ == "__main__":
    main()
