#!/usr/bin/python3
"""unshard_olmo_legacy.py: `ckpt unshard` on OLMo torch_legacy steps.

Fixtures are written at test time by tests/support/make_olmo_legacy.py with
real torch 1.13 (2 and 4 ranks: uneven dim-0 chunks, ranks without a
shard, a 2-D block-sharded tensor, optimizer state with global
placements, trainer state with pathlib paths and numpy RNG state). The
outputs must equal what OLMo's own unsharder writes (expected/), checked
by tests/support/check_unshard.py. Bad input: a missing rank, ranks that
disagree on a ShardedTensor's metadata or on a plain value, a truncated
rank file: one error line naming the file, nothing at DEST.
"""
import os
import re
import shutil
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import (check, compare, finish, generate,  # noqa: E402
                     refused, unshard)


def case_ok(tmp, ranks):
    fx = os.path.join(tmp, "r%d" % ranks)
    ck = os.path.join(fx, "ckpt")
    out = os.path.join(tmp, "out%d" % ranks)
    p = unshard("--verify", ck, out)
    check("%d ranks: exit 0" % ranks, p.returncode == 0, p.stderr)
    f = p.stdout.rstrip("\n").split("\t")
    check("%d ranks: one row" % ranks, len(f) == 4 and f[0] == "unshard" and
          f[3].startswith("44 tensors, 9 objects, "), p.stdout)
    check("%d ranks: files" % ranks, sorted(os.listdir(out)) ==
          ["config.yaml", "model.pt", "optim.pt", "train.pt"],
          str(os.listdir(out)))
    compare("%d ranks: values equal OLMo's unshard" % ranks, out,
            os.path.join(fx, "expected"))
    with open(os.path.join(out, "config.yaml"), "rb") as a, \
            open(os.path.join(ck, "config.yaml"), "rb") as b:
        check("%d ranks: config.yaml copied" % ranks, a.read() == b.read())
    st = os.path.join(tmp, "st%d" % ranks)
    p = unshard("--format", "safetensors", ck, st)
    check("%d ranks: safetensors" % ranks, p.returncode == 0 and
          sorted(os.listdir(st)) == ["config.yaml", "extra.json",
                                     "model.safetensors",
                                     "optim.safetensors"],
          p.stderr + str(os.listdir(st) if os.path.isdir(st) else ""))
    compare("%d ranks: safetensors model" % ranks,
            os.path.join(st, "model.safetensors"),
            os.path.join(fx, "expected", "model.pt"))
    single = os.path.join(tmp, "single%d" % ranks)
    p = unshard("--layout", "single", ck, single)
    check("%d ranks: --layout single" % ranks, p.returncode == 0 and
          sorted(os.listdir(single)) == ["checkpoint.pt", "config.yaml"],
          p.stderr)


def bad(tmp, name, mutate, want):
    refused(tmp, name, os.path.join(tmp, "r4", "ckpt"), mutate, want,
            snapshot=lambda ck: sorted(os.listdir(ck)))


def patch_step(ck):
    """rank1.pt with another global_step (zip rewritten, pickle patched)."""
    path = os.path.join(ck, "rank1.pt")
    with zipfile.ZipFile(path) as z:
        items = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    out = []
    for name, data in items:
        if name.endswith("data.pkl"):
            data, n = re.subn(rb"(global_step(?:q.|r....))K.",
                              lambda m: m.group(1) + b"K\x07", data,
                              count=1, flags=re.S)
            assert n == 1
        out.append((name, data))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in out:
            z.writestr(name, data)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-olmo-legacy-")
    try:
        generate(*[["make_olmo_legacy.py", os.path.join(tmp, "r%d" % ranks),
                    "--ranks", str(ranks), "--no-verify"]
                   for ranks in (2, 4)])
        for ranks in (2, 4):
            case_ok(tmp, ranks)
        bad(tmp, "missing-rank",
            lambda d: os.remove(os.path.join(d, "rank2.pt")),
            "'%(d)s/rank2.pt' is missing (rank files up to rank3.pt exist)")
        bad(tmp, "missing-rank0",
            lambda d: os.remove(os.path.join(d, "rank0.pt")),
            "'%(d)s/rank0.pt' is missing (rank files up to rank3.pt exist)")
        bad(tmp, "missing-last-rank",
            lambda d: os.remove(os.path.join(d, "rank3.pt")),
            "'%(d)s/rank3.pt' is missing (sharded tensor "
            "'model.transformer.wte.weight' has a shard on rank 3)")
        bad(tmp, "foreign-rank",
            lambda d: shutil.copy(os.path.join(tmp, "r2", "ckpt",
                                               "rank1.pt"),
                                  os.path.join(d, "rank1.pt")),
            "%(d)s: ranks 0 and 1 disagree on the metadata of sharded "
            "tensor 'model.transformer.wte.weight' (rank1.pt)")
        bad(tmp, "step-differs", patch_step,
            "%(d)s: ranks 0 and 1 disagree on 'global_step' (rank1.pt)")

        def truncate(d):
            with open(os.path.join(d, "rank3.pt"), "r+b") as f:
                f.truncate(1000)
        bad(tmp, "truncated", truncate,
            "%(d)s/rank3.pt: not a torch.save zip (no end of central "
            "directory)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
