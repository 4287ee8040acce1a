#!/usr/bin/python3
"""make_orbax.py: write Orbax checkpoint steps without JAX, byte for byte
as the formats are specified (TensorStore's OCDBT format,
tensorstore/kvstore/ocdbt/index.rst with the field order of its codecs;
zarr v2 and v3 as TensorStore writes them; Orbax's step layout and
_METADATA tree), plus the expected unsharded state dict.

    /usr/bin/python3 tests/support/make_orbax.py OUTDIR [--big MIB]

Writes under OUTDIR/run/:
  1/state/   OCDBT, zarr v2 inside (Orbax's use_zarr3=False default):
             root manifest -> interior B+tree node -> leaf nodes in
             ocdbt.process_0/ and ocdbt.process_1/ (base paths), inline
             and indirect values, zstd and uncompressed nodes
  2/state/   OCDBT, zarr3 inside (bytes + zstd; one sharding_indexed
             array with a crc32c index; one big-endian array)
  3/default/ the old format: one zarr v2 directory per array
  4/default/ the legacy msgpack `checkpoint` file (flax.serialization
             ndarray extensions inline; a placeholder string and a plain
             int that are not arrays)
expected(step) gives the arrays each step must unshard to (numpy).
--big MIB writes only OUTDIR/run/1/state/ with ~MIB MiB of float32
arrays (for bench/), and no expected file.

The generator is checked against the same upstream constants as the C
decoder (magic numbers, CRC-32C check value) at import; see
docs/formats/orbax.md for what is verified against upstream bytes.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import numcodecs

MANIFEST_MAGIC = 0x0CDB3A2A
VTREE_MAGIC = 0x0CDB1234
BTREE_MAGIC = 0x0CDB20DE
MISSING = (1 << 64) - 1

# --- primitives ------------------------------------------------------------

_T = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _T.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ _T[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


# RFC 3720 B.4 check value: the same the C unit test asserts.
assert crc32c(b"123456789") == 0xE3069283


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def zstd(data):
    return bytes(numcodecs.Zstd(level=1).encode(data))


def envelope(magic, body, compress):
    content = zstd(body) if compress else body
    head = struct.pack(">I", magic)
    rest = varint(0) + varint(1 if compress else 0) + content
    total = 4 + 8 + len(rest) + 4
    blob = head + struct.pack("<Q", total) + rest
    return blob + struct.pack("<I", crc32c(blob))


def common(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def file_table(files):
    """files: [(base_path, relative_path)] as bytes; prefix-compressed."""
    out = bytearray(varint(len(files)))
    paths = [b + r for b, r in files]
    pre = [0] + [common(paths[i - 1], paths[i]) for i in range(1, len(paths))]
    # The prefix may not cross a base path unless the base paths are equal.
    for i in range(1, len(paths)):
        pb, cb = len(files[i - 1][0]), len(files[i][0])
        if pb != cb and pre[i] > min(pb, cb):
            pre[i] = min(pb, cb)
    for i in range(1, len(paths)):
        out += varint(pre[i])
    for i in range(len(paths)):
        out += varint(len(paths[i]) - pre[i])
    for b, _ in files:
        out += varint(len(b))
    for i in range(len(paths)):
        out += paths[i][pre[i]:]
    return bytes(out)


def refs(ids, locs):
    out = bytearray()
    for i in ids:
        out += varint(i)
    for off, _ in locs:
        out += varint(off)
    for _, ln in locs:
        out += varint(ln)
    return bytes(out)


def keys_block(keys, scp=None):
    out = bytearray()
    pre = [0] + [common(keys[i - 1], keys[i]) for i in range(1, len(keys))]
    for i in range(1, len(keys)):
        out += varint(pre[i])
    for i, k in enumerate(keys):
        out += varint(len(k) - pre[i])
    if scp is not None:
        for s in scp:
            out += varint(s)
    for i, k in enumerate(keys):
        out += k[pre[i]:]
    return bytes(out)


def leaf_node(entries, files, compress):
    """entries: sorted [(key, ('inline', bytes) | ('ref', fid, off, len))]."""
    body = bytearray(b"\x00")                  # height 0
    body += file_table(files)
    body += varint(len(entries))
    body += keys_block([k for k, _ in entries])
    for _, v in entries:
        body += varint(len(v[1]) if v[0] == "inline" else v[3])
    for _, v in entries:
        body.append(0 if v[0] == "inline" else 1)
    for _, v in entries:
        if v[0] == "ref":
            body += varint(v[1])
    for _, v in entries:
        if v[0] == "ref":
            body += varint(v[2])
    for _, v in entries:
        if v[0] == "inline":
            body += v[1]
    return envelope(BTREE_MAGIC, bytes(body), compress)


def interior_node(height, children, files, compress):
    """children: [(key, subtree_prefix_len, fid, off, len, stats3)]."""
    body = bytearray(bytes([height]))
    body += file_table(files)
    body += varint(len(children))
    body += keys_block([c[0] for c in children], [c[1] for c in children])
    body += refs([c[2] for c in children], [(c[3], c[4]) for c in children])
    for k in range(3):
        for c in children:
            body += varint(c[5][k])
    return envelope(BTREE_MAGIC, bytes(body), compress)


def config(kind, uuid=bytes(range(16))):
    body = bytearray(uuid)
    body.append(kind)                           # manifest_kind
    body += varint(100) + varint(8 << 20)       # TensorStore defaults
    body.append(4)                              # version_tree_arity_log2
    body += varint(1) + struct.pack("<i", 0)    # zstd, level 0
    return body


def config_manifest():
    """manifest.ocdbt of a database with numbered manifests: the config
    alone, manifest_kind 1 (TensorStore format/manifest.cc)."""
    return envelope(MANIFEST_MAGIC, bytes(config(1)), True)


def manifest(files, versions, compress, uuid=bytes(range(16))):
    """versions: [(gen, root_height, fid, off, len, stats3, commit_ms)]."""
    body = config(0, uuid)
    body += file_table(files)
    body += varint(len(versions))
    for v in versions:
        body += varint(v[0])
    for v in versions:
        body.append(v[1])
    body += refs([v[2] for v in versions], [(v[3], v[4]) for v in versions])
    for k in range(3):
        for v in versions:
            body += varint(v[5][k])
    for v in versions:
        body += struct.pack("<Q", v[6])
    body += varint(0)                           # no version tree nodes
    return envelope(MANIFEST_MAGIC, bytes(body), compress)

# --- zarr documents and chunks ---------------------------------------------


NP_TS = {"float32": "<f4", "float64": "<f8", "float16": "<f2",
         "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
         "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
         "bool": "|b1"}


def ts_dtype(a, bf16):
    return "bfloat16" if bf16 else str(a.dtype)


def zarray(a, chunks, bf16):
    typestr = "bfloat16" if bf16 else NP_TS[str(a.dtype)]
    return json.dumps({
        "zarr_format": 2, "shape": list(a.shape), "chunks": list(chunks),
        "dtype": typestr, "compressor": {"id": "zstd", "level": 1},
        "fill_value": None if a.dtype == np.bool_ else 0, "order": "C",
        "filters": None, "dimension_separator": "."}).encode()


def zarr3_json(a, chunks, bf16, shard=None, big=False):
    endian = {"name": "bytes", "configuration": {"endian":
                                                 "big" if big else "little"}}
    inner = [endian, {"name": "zstd", "configuration": {"level": 1,
                                                        "checksum": False}}]
    if shard:
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(shard), "codecs": inner,
            "index_codecs": [{"name": "bytes", "configuration":
                              {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}]
    else:
        codecs = inner
    return json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": list(a.shape),
        "data_type": ts_dtype(a, bf16),
        "chunk_grid": {"name": "regular",
                       "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": False if a.dtype == np.bool_ else 0,
        "codecs": codecs, "dimension_names": None}).encode()


def grid(shape, chunks):
    idx = [()]
    for s, c in zip(shape, chunks):
        idx = [i + (k,) for i in idx for k in range((s + c - 1) // c)]
    return idx


def chunk_data(a, idx, chunks):
    """The full-size chunk at idx (edge chunks padded with zeros)."""
    out = np.zeros(chunks, dtype=a.dtype)
    sl = tuple(slice(i * c, min((i + 1) * c, s))
               for i, c, s in zip(idx, chunks, a.shape))
    part = a[sl]
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out


def raw(x, big=False):
    if x.dtype.itemsize > 1:
        x = x.astype(x.dtype.newbyteorder(">" if big else "<"))
    return np.ascontiguousarray(x).tobytes()


def v2_chunks(a, chunks, skip=()):
    for idx in grid(a.shape, chunks):
        if idx in skip:
            continue
        key = ".".join(map(str, idx)) if idx else "0"
        yield key, zstd(raw(chunk_data(a, idx, chunks)))


def v3_chunks(a, chunks, shard=None, big=False):
    for idx in grid(a.shape, chunks):
        key = "c" + "".join("/%d" % i for i in idx)
        block = chunk_data(a, idx, chunks)
        if not shard:
            yield key, zstd(raw(block, big))
            continue
        body, index = bytearray(), []
        for j in grid(chunks, shard):
            piece = zstd(raw(chunk_data(block, j, shard), big))
            index.append((len(body), len(piece)))
            body += piece
        ix = b"".join(struct.pack("<QQ", o, n) for o, n in index)
        yield key, bytes(body) + ix + struct.pack("<I", crc32c(ix))

# --- pytrees ---------------------------------------------------------------


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns (round to nearest even)."""
    u = x.astype("<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def leaves(rng):
    """[(path tuple, array, chunks, is_bf16)] in several dtypes."""
    f = rng.standard_normal
    return [
        (("params", "dense", "kernel"), f((6, 5)).astype("<f4"), (4, 2), 0),
        (("params", "dense", "bias"), f((5,)).astype("<f8"), (5,), 0),
        (("params", "emb"), bf16_bits(f((3, 4))), (3, 4), 1),
        (("params", "ln", "scale"), f((7,)).astype("<f2"), (3,), 0),
        (("opt", "0", "count"), np.array(12345678901, dtype="<i8"), (), 0),
        (("opt", "1", "mu"), rng.integers(-100, 100, (4, 3)).astype("i1"),
         (2, 3), 0),
        (("opt", "1", "i16"), rng.integers(-3e4, 3e4, (5,)).astype("<i2"),
         (2,), 0),
        (("opt", "1", "i32"), rng.integers(-2e9, 2e9, (3, 2)).astype("<i4"),
         (3, 1), 0),
        (("opt", "1", "u8"), rng.integers(0, 255, (9,)).astype("u1"), (4,), 0),
        (("opt", "1", "u16"), rng.integers(0, 6e4, (4,)).astype("<u2"),
         (4,), 0),
        (("opt", "1", "u32"), rng.integers(0, 4e9, (2, 2)).astype("<u4"),
         (1, 2), 0),
        (("opt", "1", "u64"), rng.integers(0, 2**63, (3,), dtype=np.uint64),
         (2,), 0),
        (("opt", "1", "flags"), rng.integers(0, 2, (6,)).astype(bool), (6,),
         0),
    ]


def tree_metadata(items, use_zarr3):
    tree = {}
    for path, a, _, _ in items:
        tree[str(tuple(path))] = {
            "key_metadata": [{"key": k, "key_type": 2} for k in path],
            "value_metadata": {"value_type": "jax.Array",
                               "skip_deserialize": False,
                               "write_shape": list(a.shape)}}
    return json.dumps({"tree_metadata": tree, "use_zarr3": use_zarr3,
                       "store_array_data_equal_to_fill_value": False,
                       "custom_metadata": None}).encode()


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def step_meta(step_dir, item):
    write(os.path.join(step_dir, "_CHECKPOINT_METADATA"), json.dumps({
        "item_handlers": {item: "orbax.checkpoint._src.handlers."
                          "pytree_checkpoint_handler.PyTreeCheckpointHandler"},
        "metrics": {}, "performance_metrics": {},
        "init_timestamp_nsecs": 1700000000000000000,
        "commit_timestamp_nsecs": 1700000005000000000,
        "custom_metadata": {}}).encode())

# --- OCDBT database --------------------------------------------------------


class DataFile:
    """A log-structured data file: values and nodes appended (written
    straight to disk, so big steps do not sit in memory twice)."""

    def __init__(self, base_dir, rel):
        self.rel = rel
        path = os.path.join(base_dir, rel.decode())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.f = open(path, "wb")
        self.size = 0

    def add(self, blob):
        off = self.size
        self.f.write(blob)
        self.size += len(blob)
        return off, len(blob)

    def close(self):
        self.f.close()


def write_ocdbt(item_dir, kv, nproc=2, numbered=False):
    """kv: {key bytes: value bytes}. Keys are split across nproc
    'processes', each with its own sub-database; the root B+tree's
    interior node points into them through base paths. numbered: the
    merged database keeps its generations in numbered manifests
    (manifest.0000000000000001 empty, ...2 the tree) behind a config-only
    manifest.ocdbt, as TensorStore's manifest_kind numbered writes them."""
    keys = sorted(kv)
    per = (len(keys) + nproc - 1) // nproc
    children = []
    for p in range(nproc):
        part = keys[p * per:(p + 1) * per]
        if not part:
            continue
        base = ("ocdbt.process_%d/" % p).encode()
        sub = os.path.join(item_dir, base.decode())
        df = DataFile(sub, b"d/%032x" % (0xABC0 + p))
        entries = []
        # Strip the subtree's common prefix (a key prefix held by the
        # parent entry) to exercise subtree_common_prefix_length.
        scp = len(part[0])
        for k in part[1:]:
            scp = min(scp, common(part[0], k))
        scp = min(scp, len(part[0]))
        ind = 0
        for k in part:
            v = kv[k]
            if len(v) > 100:
                off, ln = df.add(v)
                entries.append((k[scp:], ("ref", 0, off, ln)))
                ind += ln
            else:
                entries.append((k[scp:], ("inline", v)))
        node = leaf_node(entries, [(b"", df.rel)], compress=p % 2 == 0)
        noff, nlen = df.add(node)
        df.close()
        stats = (len(part), nlen, ind)
        write(os.path.join(sub, "manifest.ocdbt"), manifest(
            [(b"", df.rel)], [(1, 0, 0, noff, nlen, stats, 1700000001000)],
            compress=True))
        children.append((part[0], scp, base, df.rel, noff, nlen, stats))
    root = DataFile(item_dir, b"d/%032x" % 0xF00D)
    files = sorted({(c[2], c[3]) for c in children})
    node = interior_node(1, [(c[0], c[1], files.index((c[2], c[3])), c[4],
                              c[5], c[6]) for c in children], files,
                         compress=False)
    off, ln = root.add(node)
    root.close()
    tot = (sum(c[6][0] for c in children),
           ln + sum(c[6][1] for c in children),
           sum(c[6][2] for c in children))
    # Generation 1: the empty database (missing root); 2: the merged tree.
    gens = [(1, 0, 0, MISSING, MISSING, (0, 0, 0), 1700000000000),
            (2, 1, 0, off, ln, tot, 1700000002000)]
    if not numbered:
        write(os.path.join(item_dir, "manifest.ocdbt"), manifest(
            [(b"", root.rel)], gens, compress=True))
        return
    write(os.path.join(item_dir, "manifest.ocdbt"), config_manifest())
    for n in (1, 2):
        write(os.path.join(item_dir, "manifest.%016x" % n), manifest(
            [(b"", root.rel)], gens[:n], compress=True))


def name_of(path):
    return ".".join(path)


def build_ocdbt(item_dir, items, use_zarr3, numbered=False):
    kv = {}
    for path, a, chunks, bf16 in items:
        name = name_of(path).encode()
        if not use_zarr3:
            kv[name + b"/.zarray"] = zarray(a, chunks, bf16)
            for k, v in v2_chunks(a, chunks):
                kv[name + b"/" + k.encode()] = v
            continue
        shard = None
        big = path[-1] == "i32"
        if path[-1] == "kernel":
            chunks, shard = (4, 4), (2, 2)
        kv[name + b"/zarr.json"] = zarr3_json(a, chunks, bf16, shard, big)
        for k, v in v3_chunks(a, chunks, shard, big):
            kv[name + b"/" + k.encode()] = v
    write_ocdbt(item_dir, kv, numbered=numbered)
    write(os.path.join(item_dir, "_METADATA"), tree_metadata(items,
                                                            use_zarr3))
    write(os.path.join(item_dir, "_sharding"), b"{}")


def build_old(item_dir, items):
    for path, a, chunks, bf16 in items:
        d = os.path.join(item_dir, name_of(path))
        write(os.path.join(d, ".zarray"), zarray(a, chunks, bf16))
        # The opt.1.u8 array leaves one chunk unwritten: fill_value 0.
        skip = {(1,)} if path[-1] == "u8" else ()
        for k, v in v2_chunks(a, chunks, skip):
            write(os.path.join(d, k), v)
    write(os.path.join(item_dir, "_METADATA"), tree_metadata(items, False))


def expected(step):
    """{dotted name: numpy array} that step (1, 2 or 3) must unshard to
    (bfloat16 as its uint16 bit patterns)."""
    out = {}
    for path, a, _, _ in leaves(np.random.default_rng(5)):
        if step == 3 and path[-1] == "u8":
            a = a.copy()
            a[4:8] = 0          # the chunk never written: fill_value 0
        out[name_of(path)] = a
    return out


# --- legacy msgpack `checkpoint` (flax.serialization) -----------------------


def mp_len(small, base8, n, limit):
    if n < limit:
        return bytes([small | n])
    for code, fmt in ((base8, ">B"), (base8 + 1, ">H"), (base8 + 2, ">I")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([code]) + struct.pack(fmt, n)
    raise ValueError(n)


def mp(x):
    """MessagePack (spec.md) of str, int >= 0, bytes, list, dict, or
    ('ext', type, payload)."""
    if isinstance(x, str):
        b = x.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return bytes([0xD9 if len(b) < 256 else 0xDA]) + (
            struct.pack(">B", len(b)) if len(b) < 256
            else struct.pack(">H", len(b))) + b
    if isinstance(x, bool):
        return b"\xc3" if x else b"\xc2"
    if isinstance(x, int):
        if x < 128:
            return bytes([x])
        return b"\xcf" + struct.pack(">Q", x)
    if isinstance(x, bytes):
        if len(x) < 256:
            return b"\xc4" + struct.pack(">B", len(x)) + x
        return b"\xc6" + struct.pack(">I", len(x)) + x
    if isinstance(x, list):
        return mp_len(0x90, 0xDC, len(x), 16)[:1] + b"".join(
            mp(v) for v in x) if len(x) < 16 else (
            b"\xdc" + struct.pack(">H", len(x)) + b"".join(mp(v) for v in x))
    if isinstance(x, dict):
        head = bytes([0x80 | len(x)]) if len(x) < 16 else (
            b"\xde" + struct.pack(">H", len(x)))
        return head + b"".join(mp(k) + mp(v) for k, v in x.items())
    if isinstance(x, tuple) and x[0] == "ext":
        _, t, payload = x
        return b"\xc7" + struct.pack(">B", len(payload)) + bytes([t]) + \
            payload if len(payload) < 256 else (
                b"\xc9" + struct.pack(">I", len(payload)) + bytes([t]) +
                payload)
    raise TypeError(type(x))


def flax_ndarray(a, bf16):
    """flax.serialization's ndarray extension: type 1 (3 for a 0-d numpy
    scalar), payload msgpack [shape, dtype name, C-order bytes]."""
    name = "bfloat16" if bf16 else a.dtype.name
    payload = mp([list(a.shape), name, np.ascontiguousarray(a).tobytes()])
    return ("ext", 3 if a.ndim == 0 else 1, payload)


def build_msgpack(item_dir, items):
    tree = {"step": 7, "note": "PLACEHOLDER://not-an-array"}
    for path, a, _, bf16 in items:
        node = tree
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = flax_ndarray(a, bf16)
    write(os.path.join(item_dir, "checkpoint"), mp(tree))


def big(out, mib):
    rng = np.random.default_rng(1)
    items, total, i = [], 0, 0
    while total < mib << 20:
        a = rng.standard_normal((1024, 4096)).astype("<f4")
        items.append((("params", "layer%03d" % i, "w"), a, (256, 4096), 0))
        total += a.nbytes
        i += 1
    item = os.path.join(out, "run", "1", "state")
    build_ocdbt(item, items, False)
    step_meta(os.path.dirname(item), "state")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--big", type=int, default=0)
    a = ap.parse_args()
    if a.big:
        return big(a.out, a.big)
    items = leaves(np.random.default_rng(5))
    run = os.path.join(a.out, "run")
    build_ocdbt(os.path.join(run, "1", "state"), items, False)
    step_meta(os.path.join(run, "1"), "state")
    build_ocdbt(os.path.join(run, "2", "state"), items, True)
    step_meta(os.path.join(run, "2"), "state")
    build_old(os.path.join(run, "3", "default"), items)
    write(os.path.join(run, "3", "commit_success.txt"), b"done")
    build_msgpack(os.path.join(run, "4", "default"), items)
    write(os.path.join(run, "4", "commit_success.txt"), b"done")


if __name__ == "__main__":
    sys.exit(main())
