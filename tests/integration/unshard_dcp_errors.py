#!/usr/bin/python3
"""unshard_dcp_errors.py: bad input gives one clear error line naming the
file, exit status 1, and nothing at DEST (no temporary files left either).

Starts from real torch 1.13 checkpoints (tests/support/make_dcp.py cases
rows and objects) and breaks one thing per test with lib/dcpmod.py.
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "lib"))
import dcpmod as M  # noqa: E402
from harness import (CKPT, check, error_of, finish, generate,  # noqa: E402
                     run)


def fresh(tmp, case, name):
    d = os.path.join(tmp, name)
    shutil.copytree(os.path.join(tmp, case, "ckpt"), d)
    return d


def expect_error(tmp, name, d, want, code=1, args=()):
    """Run ckpt on d; want is a substring of its error row's message (and
    no message on stderr: error_of)."""
    dest = os.path.join(tmp, "out-" + name)
    p = run(CKPT, "unshard", "--no-progress", *args, d, dest, ok=False)
    line = error_of(p)
    check(name + ": exit %d" % code, p.returncode == code,
          "exit %d: %s" % (p.returncode, p.stderr))
    check(name + ": message", want in line, "got %r, want %r" % (line, want))
    left = [f for f in os.listdir(tmp) if f.startswith("out-" + name) or
            f.startswith(".ckpt-")]
    check(name + ": nothing left at DEST", not left, str(left))


def truncated(tmp):
    d = fresh(tmp, "rows", "truncated")
    p = os.path.join(d, "__1_0.distcp")
    os.truncate(p, os.path.getsize(p) - 10)
    expect_error(tmp, "truncated", d, "'%s' is truncated: %d bytes, the "
                 "metadata needs %d" % (p, os.path.getsize(p),
                                        os.path.getsize(p) + 10))


def missing(tmp):
    d = fresh(tmp, "rows", "missing")
    os.unlink(os.path.join(d, "__2_1.distcp"))
    expect_error(tmp, "missing", d, "open '%s/__2_1.distcp': No such file "
                 "or directory" % d)


def offset_past_end(tmp):
    d = fresh(tmp, "rows", "offset")
    m = M.load_meta(d)
    _, info = M.find(m, "weight", (0, 0))
    info.offset = 1 << 20
    M.save_meta(d, m)
    expect_error(tmp, "offset", d, "'%s/%s' is truncated" % (
        d, info.relative_path))


def overlapping(tmp):
    d = fresh(tmp, "rows", "overlap")
    m = M.load_meta(d)
    md = m.state_dict_metadata["weight"]
    # Move the second chunk up by one row (and its storage key with it).
    c = md.chunks[1]
    k, info = M.find(m, "weight", tuple(c.offsets))
    del m.storage_data[k]
    c.offsets = torch_size([c.offsets[0] - 1] + list(c.offsets[1:]))
    object.__setattr__(k, "offset", c.offsets)  # frozen dataclass
    m.storage_data[k] = info
    M.save_meta(d, m)
    expect_error(tmp, "overlap", d, "tensor 'weight': chunks [")
    expect_error(tmp, "overlap-replicas", d, "overlap",
                 args=["--allow-replicas"])


def torch_size(v):
    import torch
    return torch.Size(v)


def unknown_dtype(tmp):
    import torch
    d = fresh(tmp, "rows", "dtype")
    m = M.load_meta(d)
    m.state_dict_metadata["bias"].properties.dtype = torch.qint8
    M.save_meta(d, m)
    expect_error(tmp, "dtype", d, ".metadata: tensor 'bias': unknown dtype "
                 "'torch.qint8'")


def os_system(tmp):
    d = fresh(tmp, "rows", "ossystem")
    with open(os.path.join(d, ".metadata"), "wb") as f:
        f.write(b"\x80\x04cos\nsystem\n\x8c\x02id\x85R.")
    expect_error(tmp, "ossystem", d, ".metadata: pickle global 'os.system' "
                 "is not allowed")


def eval_in_object(tmp):
    d = fresh(tmp, "objects", "eval")
    m = M.load_meta(d)
    _, info = M.find(m, "str")
    recs = M.zip_records(M.item_bytes(d, info))
    pre = next(iter(recs)).split("/")[0]
    recs[pre + "/data.pkl"] = b"\x80\x02cbuiltins\neval\nX\x03\x00\x00\x001+1\x85R."
    M.put_item(d, info, M.make_zip(recs), "__evil.distcp")
    M.save_meta(d, m)
    expect_error(tmp, "eval", d, "checkpoint.pt['str']: pickle global "
                 "'builtins.eval' is not allowed (use --allow-unsafe-pickle "
                 "to pass it through)")


def deep_object(tmp):
    d = fresh(tmp, "objects", "deep")
    m = M.load_meta(d)
    _, info = M.find(m, "int")
    recs = M.zip_records(M.item_bytes(d, info))
    pre = next(iter(recs)).split("/")[0]
    recs[pre + "/data.pkl"] = b"\x80\x02" + b"(" * 100000 + b"l" * 100000 + b"."
    M.put_item(d, info, M.make_zip(recs), "__deep.distcp")
    M.save_meta(d, m)
    expect_error(tmp, "deep", d, "value nested deeper than 512 levels")


def huge_length(tmp):
    d = fresh(tmp, "rows", "huge")
    with open(os.path.join(d, ".metadata"), "wb") as f:
        f.write(b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7fabc")
    expect_error(tmp, "huge", d, ".metadata: truncated pickle at offset 2")


def not_a_zip(tmp):
    d = fresh(tmp, "rows", "notzip")
    m = M.load_meta(d)
    _, info = M.find(m, "weight", (0, 0))
    M.put_item(d, info, b"\0" * 300, "__junk.distcp")
    M.save_meta(d, m)
    expect_error(tmp, "notzip", d, "tensor 'weight' chunk [0:4, 0:6]: %s/"
                 "__junk.distcp: not a torch.save zip (no end of central "
                 "directory)" % d)


def zstd_unknown_transform(tmp):
    d = fresh(tmp, "rows", "xform")
    m = M.load_meta(d)
    _, info = M.find(m, "bias", (0,))
    info.transform_descriptors = ["stream.rot13/1"]
    M.save_meta(d, m)
    expect_error(tmp, "xform", d, "uses stream extension 'stream.rot13/1' "
                 "(only stream.zstd/1 is supported)")


def usage(tmp):
    p = run(CKPT, "unshard", "--layout", "flat", "a", "b", ok=False)
    check("usage: exit 2", p.returncode == 2, p.stderr)
    check("usage: message", "unknown --layout 'flat'" in p.stderr, p.stderr)
    p = run(CKPT, "unshard", "a", ok=False)
    check("usage: one argument", p.returncode == 2, p.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-dcperr-")
    try:
        generate(*[["make_dcp.py", os.path.join(tmp, case), "--case", case,
                    "--no-verify", "--no-expected"]
                   for case in ["rows", "objects"]])
        for t in [truncated, missing, offset_past_end, overlapping,
                  unknown_dtype, os_system, eval_in_object, deep_object,
                  huge_length, not_a_zip, zstd_unknown_transform, usage]:
            t(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
