#!/usr/bin/python3
"""unshard_zarr.py: `ckpt unshard` on zarr v2 pytree checkpoints (seqax).

Fixtures are written at test time by tests/support/make_zarr.py with
Debian's python3-zarr + python3-numcodecs: blosc (lz4, zstd, blosclz;
byte-, bit- and no shuffle), zstd and uncompressed arrays, edge chunks, C
and F order, a big-endian dtype, a 0-d array, chunks never written
(fill_value), dot- and bracket-named leaves. Values are compared with
numpy's view of the same arrays by tests/support/check_unshard.py. Bad
input: write_completed missing, a corrupt blosc chunk, a missing chunk
without fill_value, an unsupported compressor: one error line naming the
file, nothing at DEST.
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import (check, compare, finish, generate,  # noqa: E402
                     refused, unshard)


def case_ok(tmp):
    fx = os.path.join(tmp, "z")
    out = os.path.join(tmp, "out")
    p = unshard("--verify", os.path.join(fx, "ckpt"), out)
    f = p.stdout.rstrip("\n").split("\t")
    check("torch: exit 0, one row", p.returncode == 0 and len(f) == 4 and
          f[3].startswith("10 tensors, 0 objects, 41 chunks, 1 files"),
          p.stdout + p.stderr)
    check("torch: files", os.listdir(out) == ["checkpoint.pt"],
          str(os.listdir(out)))
    compare("torch: values", os.path.join(out, "checkpoint.pt"),
            os.path.join(fx, "expected.pt"))
    st = os.path.join(tmp, "st")
    p = unshard("--format", "safetensors", os.path.join(fx, "ckpt"), st)
    check("safetensors: exit 0", p.returncode == 0, p.stderr)
    compare("safetensors: values", os.path.join(st, "model.safetensors"),
            os.path.join(fx, "expected.pt"))
    p = unshard("-n", os.path.join(fx, "ckpt"), os.path.join(tmp, "dry"))
    check("dry-run: nothing written", p.returncode == 0 and
          not os.path.exists(os.path.join(tmp, "dry")), p.stderr)


def bad(tmp, name, mutate, want, src="z"):
    refused(tmp, name, os.path.join(tmp, src, "ckpt"), mutate, want)


def corrupt(path, at=20):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(8)
        f.seek(at)
        f.write(bytes(x ^ 0x5a for x in b))


def set_zarray(d, arr, **kw):
    p = os.path.join(d, arr, ".zarray")
    with open(p) as f:
        z = json.load(f)
    z.update(kw)
    with open(p, "w") as f:
        json.dump(z, f)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-zarr-")
    try:
        generate(["make_zarr.py", os.path.join(tmp, "z")],
                 ["make_zarr.py", os.path.join(tmp, "inc"), "--incomplete",
                  "--no-expected"])
        case_ok(tmp)
        bad(tmp, "incomplete", lambda d: None,
            "'%(d)s/.zattrs' missing: the checkpoint is incomplete "
            "(no write_completed)", src="inc")

        def attrs_only(d):
            with open(os.path.join(d, ".zattrs"), "w") as f:
                f.write('{"step": 3}')
        bad(tmp, "no-write-completed", attrs_only,
            "'%(d)s/.zattrs': write_completed missing: the checkpoint is "
            "incomplete", src="inc")
        bad(tmp, "corrupt-header",
            lambda d: corrupt(os.path.join(d, ".params.w", "1.1"), 4),
            "%(d)s/.params.w/1.1: corrupt blosc frame (1515870826 bytes in "
            "64, the chunk needs 48 in 64)")
        bad(tmp, "corrupt-blocks",
            lambda d: corrupt(os.path.join(d, "ramp", "0"), 16),
            "%(d)s/ramp/0: corrupt blosc frame (decompression failed)")

        def truncate(d):
            with open(os.path.join(d, "ramp", "1"), "r+b") as f:
                f.truncate(100)
        bad(tmp, "truncated-chunk", truncate,
            "%(d)s/ramp/1: corrupt blosc frame (8192 bytes in 624, the "
            "chunk needs 8192 in 100)")

        def missing(d):
            set_zarray(d, "raw", fill_value=None)
            os.remove(os.path.join(d, "raw", "0.0"))
        bad(tmp, "missing-chunk", missing,
            "'%(d)s/raw/0.0' missing and the array has no fill_value")
        bad(tmp, "codec",
            lambda d: set_zarray(d, "raw", compressor={"id": "lzma"}),
            "%(d)s/raw/.zarray: compressor 'lzma' not supported "
            "(blosc, zstd, null)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
