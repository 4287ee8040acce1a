#!/usr/bin/python3
"""unshard_dcp_variants.py: layouts newer torch writes, built from a real
torch 1.13 checkpoint (tests/support/make_dcp.py --case all) so the values
are known:

  zstd        every item through the stream.zstd/1 extension (torch >= 2.7):
              frames without content size, some items as two frames;
  rank_local  __R.metadata per rank instead of .metadata (torch >= 2.9,
              use_collectives=False), with a replicated tensor stored by
              every rank;
  bigendian   tensor items from a big-endian writer (byteorder record).

Each must unshard to exactly the expected state dict.
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "lib"))
import dcpmod as M  # noqa: E402
from harness import (CKPT, check, compare, error_of, finish,  # noqa: E402
                     generate, run)


def unshard_and_compare(tmp, name, d):
    out = os.path.join(tmp, "out-" + name)
    p = run(CKPT, "unshard", "--verify", "--no-progress", d, out, ok=False)
    check(name + ": exit 0", p.returncode == 0, p.stderr)
    if p.returncode:
        return
    compare(name + ": values equal", os.path.join(out, "checkpoint.pt"),
            os.path.join(tmp, "all", "expected.pt"))


def zstd(tmp):
    d = os.path.join(tmp, "zstd")
    shutil.copytree(os.path.join(tmp, "all", "ckpt"), d)
    m = M.load_meta(d)
    out = {}
    for i, info in enumerate(m.storage_data.values()):
        data = M.item_bytes(d, info)
        comp = M.zstd(data, frames=2 if i % 2 else 1)
        name = info.relative_path.replace(".distcp", ".zst.distcp")
        buf = out.setdefault(name, bytearray())
        info.relative_path, info.offset, info.length = name, len(buf), \
            len(comp)
        info.transform_descriptors = ["stream.zstd/1"]
        buf += comp
    for f in os.listdir(d):
        if f.endswith(".distcp"):
            os.unlink(os.path.join(d, f))
    for name, buf in out.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(buf)
    M.save_meta(d, m)
    unshard_and_compare(tmp, "zstd", d)


def rank_local(tmp):
    d = os.path.join(tmp, "rank_local")
    shutil.copytree(os.path.join(tmp, "all", "ckpt"), d)
    m = M.load_meta(d)
    ranks = sorted({int(i.relative_path.split("_")[2])
                    for i in m.storage_data.values()})
    plain = next(k for k, v in m.state_dict_metadata.items()
                 if type(v).__name__ == "TensorStorageMetadata" and
                 len(v.chunks) == 1)
    for r in ranks:
        mine = lambda info: info.relative_path.startswith("__%d_" % r)
        keep = {k for k, v in m.storage_data.items() if mine(v) or
                k.fqn == plain}
        rm = M.load_meta(d)
        rm.storage_data = {k: v for k, v in rm.storage_data.items()
                           if any(k.fqn == q.fqn and k.offset == q.offset
                                  for q in keep)}
        fqns = {k.fqn for k in rm.storage_data}
        sdm = {}
        for fqn, md in rm.state_dict_metadata.items():
            if fqn not in fqns:
                continue
            if hasattr(md, "chunks"):
                md.chunks = [c for c in md.chunks if any(
                    k.fqn == fqn and tuple(k.offset) == tuple(c.offsets)
                    for k in rm.storage_data)]
            sdm[fqn] = md
        rm.state_dict_metadata = sdm
        M.save_meta(d, rm, "__%d.metadata" % r)
    os.unlink(os.path.join(d, ".metadata"))
    unshard_and_compare(tmp, "rank_local", d)
    diverged(tmp, d, plain, ranks[-1])


def diverged(tmp, d, plain, rank):
    """One rank's replica differs: a plain unshard fails naming the tensor
    and the rank (rank-local replicas are compared as they are copied);
    --rank-values rank0 keeps rank 0's."""
    name = "__%d.metadata" % rank
    with open(os.path.join(d, name), "rb") as f:
        m = M.pickle.load(f)
    _, info = M.find(m, plain)
    recs = M.zip_records(M.item_bytes(d, info))
    key = next(n for n in recs if "/data/" in n)
    recs[key] = bytes([recs[key][0] ^ 1]) + recs[key][1:]
    M.put_item(d, info, M.make_zip(recs), "__diverged.distcp")
    M.save_meta(d, m, name)
    out = os.path.join(tmp, "out-diverged")
    p = run(CKPT, "unshard", d, out, ok=False)
    check("diverged replica: exit 1", p.returncode == 1, p.stderr)
    want = ("%s: tensor '%s': rank %d saved a value different "
            "from rank 0's (--rank-values rank0 keeps rank 0's, per-rank "
            "keeps every rank's as '%s.rankR')" % (d, plain, rank, plain))
    check("diverged replica: message", error_of(p) == want, error_of(p))
    check("diverged replica: nothing at DEST", not os.path.exists(out))
    p = run(CKPT, "unshard", "--verify", "--rank-values", "rank0", d, out,
            ok=False)
    check("diverged replica, rank0: exit 0", p.returncode == 0, p.stderr)


def bigendian(tmp):
    d = os.path.join(tmp, "bigendian")
    shutil.copytree(os.path.join(tmp, "all", "ckpt"), d)
    m = M.load_meta(d)
    n = 0
    for fqn, md in m.state_dict_metadata.items():
        if not hasattr(md, "chunks"):
            continue
        size = md.properties.dtype.itemsize if hasattr(
            md.properties.dtype, "itemsize") else \
            __import__("torch").empty(0, dtype=md.properties.dtype
                                      ).element_size()
        if md.properties.dtype.is_complex:
            continue   # a complex element swaps per half; covered in C
        for c in md.chunks:
            _, info = M.find(m, fqn, tuple(c.offsets))
            data = M.byteswap_item(M.item_bytes(d, info), size)
            M.put_item(d, info, data, "__be%d.distcp" % n)
            n += 1
    M.save_meta(d, m)
    unshard_and_compare(tmp, "bigendian", d)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-dcpvar-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "all"), "--case", "all",
                  "--no-verify"])
        zstd(tmp)
        rank_local(tmp)
        bigendian(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
