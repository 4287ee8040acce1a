#!/usr/bin/env python3
"""Write the accounting fuzz target's seed corpus: one run per class of
issue 27 that clean's judgement reaches (1 a directory of runs, 2 a
checkpoint outside the recognised names, 9 special files, 10 a partial
safetensors copy, 12 pruning), and runs the rule lets go (bad, every file
accounted for). Input format: tests/fuzz/accounting_fuzz.c.
Usage: accounting_corpus.py DIR"""
import json
import os
import struct
import sys


def rec(t, name, data=b""):
    if isinstance(data, str):
        data = data.encode()
    return t.encode() + name.encode("utf-8", "surrogateescape") + b"\0" + \
        data


def inp(keep_last, *recs):
    return bytes([1 if keep_last else 0]) + b"\xff".join(recs)


SKEL = [rec("f", "config.yaml", "run_name: r\n"),
        rec("f", "wandb/run-1/files/output.log", "loss 2\n"),
        rec("f", "train_data/rank0.npy", b"\x93NUMPY" * 4)]


def partial_safetensors():
    meta = {"DCP_SHARDING_INFO": json.dumps({"w": {"saved_offsets":
                                                   [13, 0]}})}
    head = {"w": {"dtype": "F32", "shape": [2, 13],
                  "data_offsets": [0, 104]}, "__metadata__": meta}
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(104)


SEEDS = {
    # rule-abiding bad runs
    "bad-accounted": inp(0, *SKEL, rec("t", "step0", "zip"),
                         rec("t", "step500", "gap"),
                         rec("l", "latest", "step500"),
                         rec("z", "wandb/run-1/run-1.wandb", "x")),
    "bad-dcp-no-metadata": inp(0, *SKEL, rec("t", "step0", "dcp"),
                               rec("t", "step1000", "dcp")),
    "good-unsharded": inp(0, *SKEL, rec("t", "step0", "zip"),
                          rec("t", "step1000-unsharded", "zip")),
    "cut-model": inp(0, *SKEL, rec("t", "step1000-unsharded", "cut")),
    # class 1: a directory that holds runs, and a stray step at its top
    "class01-queue-stray-step": inp(
        0, rec("f", "2871001/config.yaml", "run_name: a\n"),
        rec("f", "2871001/wandb/x.log", "x"),
        rec("t", "2871001/step1000-unsharded", "zip"),
        rec("t", "step500", "dcp")),
    "class01-nested-run": inp(
        0, *SKEL, rec("t", "step0", "zip"),
        rec("f", "sub/config.yaml", "run_name: inner\n"),
        rec("f", "sub/train_data/rank0.npy", b"\x93NUMPY"),
        rec("t", "sub/step3000-unsharded", "zip")),
    # class 2: checkpoints outside the recognised names and places
    "class02-final": inp(0, *SKEL, rec("t", "step0", "zip"),
                         rec("t", "final", "zip")),
    "class02-step-hf": inp(0, *SKEL, rec("t", "step0", "zip"),
                           rec("f", "step1000-hf/model.safetensors",
                               partial_safetensors())),
    "class02-top-safetensors": inp(0, *SKEL, rec("t", "step0", "zip"),
                                   rec("f", "model.safetensors", b"x" * 64)),
    "class02-lightning": inp(0, *SKEL, rec("t", "step0", "zip"),
                             rec("f", "proj/abc/checkpoints/"
                                 "epoch=3-step=1000.ckpt", b"PK" * 20)),
    "class02-foreign-in-incomplete-step": inp(
        0, *SKEL, rec("t", "step1000", "dcp"),
        rec("f", "step1000/model.safetensors", b"x" * 64)),
    "class02-large-unknown": inp(0, *SKEL, rec("z", "blob.dat", "x")),
    # class 9: special files
    "class09-fifo": inp(0, *SKEL, rec("t", "step0", "zip"),
                        rec("p", "train_data/fifo")),
    "class09-fifo-model": inp(0, *SKEL, rec("p", "step1000-unsharded/"
                                            "model.pt")),
    "class09-symlink": inp(0, *SKEL, rec("l", "data", "/tmp")),
    # class 10: a safetensors copy holding one rank's rows
    "class10-partial-safetensors": inp(
        1, *SKEL, rec("t", "step1000-unsharded", "zip"),
        rec("f", "step2000-unsharded/model-00001-of-00001.safetensors",
            partial_safetensors()),
        rec("f", "step2000-unsharded/model.safetensors.index.json",
            json.dumps({"metadata": {"total_size": 208}, "weight_map":
                        {"w": "model-00001-of-00001.safetensors"}}))),
    # class 12: pruning (the oracle checks what a pruned step holds)
    "class12-prune": inp(1, *SKEL, rec("t", "step1000-unsharded", "zip"),
                         rec("t", "step2000-unsharded", "zip"),
                         rec("f", "step1000-unsharded/extra.pt", b"x" * 9),
                         rec("t", "step3000-unsharded", "zip")),
}


def main(out):
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
