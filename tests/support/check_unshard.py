#!/usr/bin/python3
"""check_unshard.py: compare an unsharder's output with the expected state dict.

Runs with Debian bookworm's torch 1.13 (/usr/bin/python3); also works with
torch 2.x (e.g. inside the fixture chroots).

    /usr/bin/python3 tests/support/check_unshard.py ACTUAL EXPECTED [options]

ACTUAL may be
  * a torch.save file (.pt): loaded SAFELY (see below);
  * a .safetensors file, or a model.safetensors.index.json (all shards it
    names are read), read by the small pure-Python reader in this file (no
    safetensors package needed; Debian 12 has none);
  * a directory in OLMo layout: model.pt / model.safetensors, optim.pt,
    train.pt (only the files that exist in EXPECTED's split are required),
    or a directory holding checkpoint.pt.
EXPECTED may be
  * a torch.save file (trusted: loaded with full pickle), e.g. expected.pt
    from make_dcp.py or reference.pt from make_dcp_v2.py;
  * a directory (compared file by file with an ACTUAL directory: every
    model/optim/train .pt or .safetensors in EXPECTED must match).
When ACTUAL is an OLMo directory and EXPECTED a single file, EXPECTED is split
the way `ckpt unshard --layout olmo` splits: model.pt = EXPECTED["model"],
optim.pt = EXPECTED["optim"] (or ["optimizer"]), train.pt = every other
top-level key (when that is the single key "train", train.pt may hold
either {"train": {...}} or the inner dict). With --model-only only model.pt
is compared.

When ACTUAL holds safetensors, EXPECTED's tensors are flattened to
"a.b.0.c" keys (dict keys and list indices joined with "."); the sets of
tensor keys must match exactly. Non-tensor values are then compared only with
--values-json FILE (a JSON object, flattened the same way; tuples compare as
lists, NaN/Infinity as Python's json writes them).

Comparison (recursive, first difference wins):
  * same structure: dict keys (order ignored; dict == OrderedDict), list vs
    tuple distinguished, same lengths;
  * tensors: same dtype, same shape, and bit-identical elements (floats and
    complex compared through an integer view, so NaN payloads, NaN signs and
    -0.0 count; torch.equal for the rest). Parameter == Tensor; requires_grad,
    strides and storage sharing are ignored;
  * other values: same type (bool is not int), equal; floats bit-identical
    (nan == nan, -0.0 != 0.0); with --allow-pickle also numpy arrays
    (dtype, shape, bytes), numpy RNG state tuples, pathlib paths, and any
    other object by == (or by pickle bytes when == is not a bool).

Safe loading of ACTUAL: first torch.load(weights_only=True). torch 1.13's
weights_only unpickler is too narrow (it rejects every Python float and
bytes), so when that fails this script loads with its own restricted
unpickler, which allows only what torch 2.x's weights_only allows: tensors,
storages, torch.Size, dtypes, layouts, devices, OrderedDict, set/frozenset,
bytes (_codecs.encode), bytearray, complex and plain containers/scalars. Any
other global is an error naming it. --allow-pickle loads with full pickle
(for files holding arbitrary objects, e.g. OLMo train.pt with pathlib and
numpy RNG state).

Tensors of dtypes the running torch lacks (torch 1.13 has no uint16/32/64 or
float8: 2.x writes them with _rebuild_tensor_v3 and UntypedStorage) load, in
ACTUAL and EXPECTED alike, as ForeignTensor (dtype name + the raw bits as a
same-shaped int tensor) and are compared by name, shape and bits. So 1.13 can
check every committed torch 2.x reference.pt.

ACTUAL may also be the extra.json that `--format safetensors` writes beside
the tensors: its values ({"__bytes__": base64} turned back into bytes) must
equal EXPECTED's non-tensor values, both flattened as above.

Output: "OK N tensors, M values" and exit 0; otherwise "DIFF <path>: <what>"
(or "ERROR ...") on stderr and exit 1. Exit 2 on usage errors.

Many checks, one torch import:

    /usr/bin/python3 tests/support/check_unshard.py --batch

reads one check per stdin line, a JSON array of the arguments above
(["ACTUAL", "EXPECTED", "--allow-pickle"]), and answers each on one stdout
line as soon as it is made: {"rc": exit status, "output": what the check
printed}, exactly what a run of its own would have given. Used as a
co-process by tests/support/harness.py.

Also importable: compare(actual, expected) -> Result(ok, path, msg, tensors,
values); safe_load(path); load_safetensors(path) -> {name: tensor};
run(argv) -> (exit status, output) for main() in-process.
"""
import argparse
import base64
import collections
import contextlib
import io
import json
import math
import os
import pickle
import struct
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402


# --------------------------------------------------------------------------
# Comparison

class Result:
    def __init__(self):
        self.ok = True
        self.path = ""
        self.msg = ""
        self.tensors = 0
        self.values = 0

    def fail(self, path, msg):
        if self.ok:
            self.ok, self.path, self.msg = False, path or "<root>", msg
        return False


_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# dtypes newer than the running torch may lack (torch 1.13 has none of them):
# name -> bytes per element. Tensors of these load as ForeignTensor.
FOREIGN_DTYPE_SIZES = {
    "uint16": 2, "uint32": 4, "uint64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1, "complex32": 4, "bcomplex32": 4,
    "bits8": 1, "bits16": 2, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1,
}


class ForeignDtype:
    def __init__(self, name):
        self.name = name
        self.itemsize = FOREIGN_DTYPE_SIZES[name]

    def __repr__(self):
        return f"torch.{self.name}"


class ForeignTensor:
    """A tensor of a dtype the running torch does not have: the dtype's name
    and its bits as a same-shaped tensor of a same-sized int dtype."""

    def __init__(self, dtype_name, bits):
        self.dtype_name = dtype_name
        self.bits = bits
        self.shape = tuple(bits.shape)

    def __repr__(self):
        return f"ForeignTensor({self.dtype_name}, shape={self.shape})"


def _is_tensorish(x):
    return torch.is_tensor(x) or isinstance(x, ForeignTensor)


def _foreign_eq(a, b, path, res):
    an = a.dtype_name if isinstance(a, ForeignTensor) else str(a.dtype).replace("torch.", "")
    bn = b.dtype_name if isinstance(b, ForeignTensor) else str(b.dtype).replace("torch.", "")
    if an != bn:
        return res.fail(path, f"dtype {an} != expected {bn}")
    ab = a.bits if isinstance(a, ForeignTensor) else a
    bb = b.bits if isinstance(b, ForeignTensor) else b
    if tuple(ab.shape) != tuple(bb.shape):
        return res.fail(path, f"shape {tuple(ab.shape)} != expected {tuple(bb.shape)}")
    if ab.numel() and not torch.equal(_bits(ab), _bits(bb)):
        diff = (_bits(ab) != _bits(bb)).nonzero()
        return res.fail(path, f"{len(diff)} element(s) differ; first at "
                              f"{_unravel(int(diff[0]), tuple(ab.shape))}")
    return True


def _bits(t):
    """The raw bits of t as a 1-D signed-int tensor (so NaN payloads, -0.0,
    float8 and unsigned dtypes all compare exactly)."""
    flat = t.detach().contiguous().reshape(-1)
    size = flat.element_size()
    return flat.view(_INT_OF_SIZE.get(size, torch.int64))


def _tensor_eq(a, b, path, res):
    if a.dtype != b.dtype:
        return res.fail(path, f"dtype {a.dtype} != expected {b.dtype}")
    if tuple(a.shape) != tuple(b.shape):
        return res.fail(path, f"shape {tuple(a.shape)} != expected {tuple(b.shape)}")
    if a.layout != torch.strided or b.layout != torch.strided:
        return res.fail(path, f"layout {a.layout} / expected {b.layout}")
    if a.is_quantized or b.is_quantized:
        return res.fail(path, "quantized tensors are not supported")
    if a.numel() == 0:
        return True
    ba, bb = _bits(a), _bits(b)
    if not torch.equal(ba, bb):
        diff = (ba != bb).nonzero()
        per = ba.numel() // a.numel()
        i = int(diff[0]) // per if len(diff) else -1
        idx = _unravel(i, tuple(a.shape)) if i >= 0 else "?"
        av = a.detach().reshape(-1)[i].item() if i >= 0 else "?"
        bv = b.detach().reshape(-1)[i].item() if i >= 0 else "?"
        return res.fail(path, f"{len(diff)} element(s) differ; first at {idx}: "
                              f"{av!r} != expected {bv!r}")
    return True


def _unravel(i, shape):
    out = []
    for s in reversed(shape):
        out.append(i % s)
        i //= s
    return tuple(reversed(out))


def _float_eq(a, b):
    return struct.pack("<d", a) == struct.pack("<d", b)


def _join(path, key):
    return f"{path}[{key!r}]"


def _cmp(a, b, path, res, allow_objects):
    if isinstance(a, ForeignTensor) or isinstance(b, ForeignTensor):
        if not (_is_tensorish(a) and _is_tensorish(b)):
            return res.fail(path, f"{type(a).__name__} where {type(b).__name__} was expected")
        res.tensors += 1
        return _foreign_eq(a, b, path, res)
    if torch.is_tensor(b):
        if not torch.is_tensor(a):
            return res.fail(path, f"{type(a).__name__} where a tensor was expected")
        res.tensors += 1
        return _tensor_eq(a, b, path, res)
    if torch.is_tensor(a):
        return res.fail(path, f"tensor where {type(b).__name__} was expected")
    if isinstance(b, dict):
        if not isinstance(a, dict):
            return res.fail(path, f"{type(a).__name__} where a dict was expected")
        ka, kb = set(a.keys()), set(b.keys())
        if ka != kb:
            missing = [k for k in b if k not in ka]
            extra = [k for k in a if k not in kb]
            return res.fail(path, f"keys differ: missing {missing[:5]!r}"
                                  f"{'...' if len(missing) > 5 else ''}, "
                                  f"unexpected {extra[:5]!r}{'...' if len(extra) > 5 else ''}")
        for k in b:
            if not _cmp(a[k], b[k], _join(path, k), res, allow_objects):
                return False
        return True
    if isinstance(b, (list, tuple)) and type(b) in (list, tuple):
        if type(a) is not type(b):
            return res.fail(path, f"{type(a).__name__} where {type(b).__name__} was expected")
        if len(a) != len(b):
            return res.fail(path, f"length {len(a)} != expected {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            if not _cmp(x, y, f"{path}[{i}]", res, allow_objects):
                return False
        return True
    # leaves
    res.values += 1
    if type(a) is not type(b):
        # namedtuple / subclasses etc. must match exactly too
        return res.fail(path, f"{type(a).__name__} {a!r:.60} where "
                              f"{type(b).__name__} {b!r:.60} was expected")
    if isinstance(b, float):
        if not _float_eq(a, b):
            return res.fail(path, f"{a!r} != expected {b!r}")
        return True
    if isinstance(b, complex):
        if not (_float_eq(a.real, b.real) and _float_eq(a.imag, b.imag)):
            return res.fail(path, f"{a!r} != expected {b!r}")
        return True
    if b is None or isinstance(b, (bool, int, str, bytes, bytearray, torch.Size,
                                   torch.dtype, torch.device, torch.layout)):
        if a != b:
            return res.fail(path, f"{a!r:.80} != expected {b!r:.80}")
        return True
    if isinstance(b, (set, frozenset)):
        if a != b:
            return res.fail(path, f"{a!r:.80} != expected {b!r:.80}")
        return True
    if not allow_objects:
        return res.fail(path, f"unexpected object of type {type(b).__module__}."
                              f"{type(b).__qualname__} (use --allow-pickle)")
    try:
        import numpy as np
        if isinstance(b, np.ndarray):
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                return res.fail(path, f"numpy array differs ({a.dtype}{a.shape} vs "
                                      f"{b.dtype}{b.shape})")
            return True
        if isinstance(b, np.generic):
            if a.dtype != b.dtype or a.tobytes() != b.tobytes():
                return res.fail(path, f"{a!r} != expected {b!r}")
            return True
    except ImportError:
        pass
    try:
        eq = a == b
    except Exception:  # noqa: BLE001
        eq = None
    if not isinstance(eq, bool):
        eq = pickle.dumps(a, 4) == pickle.dumps(b, 4)
    if not eq:
        return res.fail(path, f"{a!r:.80} != expected {b!r:.80}")
    return True


def compare(actual, expected, allow_objects=True):
    """Compare two loaded objects; returns a Result."""
    res = Result()
    _cmp(actual, expected, "", res, allow_objects)
    return res


# --------------------------------------------------------------------------
# Safe loading

_STORAGE_DTYPES = {
    "DoubleStorage": torch.float64, "FloatStorage": torch.float32,
    "HalfStorage": torch.float16, "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8,
    "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
    "ComplexFloatStorage": torch.complex64, "ComplexDoubleStorage": torch.complex128,
}


class _StorageType:
    def __init__(self, dtype):
        self.dtype = dtype


def _as_strided(flat, storage_offset, size, stride):
    if flat.numel() == 0 and math.prod(size) == 0:
        return torch.empty(tuple(size), dtype=flat.dtype)
    return torch.as_strided(flat, tuple(size), tuple(stride), storage_offset)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    if metadata:
        raise pickle.UnpicklingError(f"tensor metadata flags {metadata!r} are not supported")
    return _as_strided(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad,
                       backward_hooks, dtype, metadata=None):
    if metadata:
        raise pickle.UnpicklingError(f"tensor metadata flags {metadata!r} are not supported")
    if isinstance(dtype, ForeignDtype):
        it = _INT_OF_SIZE[dtype.itemsize]
        flat = storage.view(it) if storage.numel() else torch.empty(0, dtype=it)
        return ForeignTensor(dtype.name, _as_strided(flat, storage_offset, size, stride))
    flat = storage.view(dtype) if storage.numel() else torch.empty(0, dtype=dtype)
    return _as_strided(flat, storage_offset, size, stride)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _as_strided(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    return torch.nn.Parameter(data, requires_grad)


def _allowed_globals():
    """The globals torch 2.x's weights_only unpickler accepts (rebuild
    functions replaced by local, side-effect-free versions)."""
    rc = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("collections", "Counter"): collections.Counter,
        ("torch", "Size"): torch.Size,
        ("torch", "device"): torch.device,
        ("torch.serialization", "_get_layout"): torch.serialization._get_layout,
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("builtins", "bytearray"): bytearray,
        ("builtins", "complex"): complex,
        ("_codecs", "encode"): __import__("_codecs").encode,
        ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
        ("torch.storage", "UntypedStorage"): _StorageType(torch.uint8),
        ("torch", "UntypedStorage"): _StorageType(torch.uint8),
    }
    for name in dir(torch):
        v = getattr(torch, name)
        if isinstance(v, torch.dtype):
            rc[("torch", name)] = v
    for name in FOREIGN_DTYPE_SIZES:
        if not isinstance(getattr(torch, name, None), torch.dtype):
            rc[("torch", name)] = ForeignDtype(name)
    for name, dt in _STORAGE_DTYPES.items():
        rc[("torch", name)] = _StorageType(dt)
        rc[("torch.cuda", name)] = _StorageType(dt)
    return rc


class _SafeUnpickler(pickle.Unpickler):
    def __init__(self, file, records, **kw):
        super().__init__(file, **kw)
        self._allowed = _allowed_globals()
        self._records = records
        self._storages = {}

    def find_class(self, module, name):
        # Protocol 2 names Python 2 modules; torch maps them first too.
        module = {"__builtin__": "builtins"}.get(module, module)
        f = self._allowed.get((module, name))
        if f is None:
            raise pickle.UnpicklingError(
                f"global {module}.{name} is not allowed in a weights-only file")
        return f

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r:.100}")
        _, st, key, _location, numel = pid[:5]
        if key not in self._storages:
            self._storages[key] = self._records(str(key), st.dtype, numel)
        return self._storages[key]


def _zip_safe_load(path):
    """Restricted load of a zip torch.save file without torch.load."""
    import zipfile
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        prefix = names[0].split("/")[0]
        byteorder = "little"
        if f"{prefix}/byteorder" in names:
            byteorder = zf.read(f"{prefix}/byteorder").decode().strip()

        def records(key, dtype, numel):
            raw = zf.read(f"{prefix}/data/{key}")
            item = torch.empty(0, dtype=dtype).element_size()
            if len(raw) % item:
                raise pickle.UnpicklingError(f"record data/{key}: {len(raw)} bytes is not "
                                             f"a multiple of {item}")
            if not raw:
                return torch.empty(0, dtype=dtype)
            t = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            if byteorder == "big" and item > 1:
                part = item // 2 if dtype.is_complex else item
                t = t.reshape(-1, part).flip(1).reshape(-1).contiguous()
            return t.view(dtype)

        with zf.open(f"{prefix}/data.pkl") as f:
            return _SafeUnpickler(f, records, encoding="utf-8").load()


class UnsafeContent(Exception):
    pass


def _torch_major():
    return int(torch.__version__.split(".")[0])


def safe_load(path):
    """Load like weights_only=True in torch 2.x, whatever torch this is.
    torch >= 2: torch.load(weights_only=True) decides. torch 1.13: its own
    weights_only loader, and when that rejects the file (it rejects every
    float and bytes), _zip_safe_load with the 2.x allow-list."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e1:  # noqa: BLE001
        first = str(e1).splitlines()[-1][-300:] if str(e1) else repr(e1)
        if _torch_major() >= 2:
            raise UnsafeContent(f"{path}: torch.load(weights_only=True) failed: {first}") \
                from None
    try:
        return _zip_safe_load(path)
    except pickle.UnpicklingError as e:
        raise UnsafeContent(f"{path}: {e} (torch.load weights_only: {first})") from None


def load_any(path, allow_pickle):
    if path.endswith(".safetensors") or path.endswith(".safetensors.index.json"):
        return load_safetensors(path)
    if allow_pickle:
        return torch.load(path, map_location="cpu", weights_only=False)
    return safe_load(path)


def load_trusted(path):
    """EXPECTED files: full torch.load; if this torch cannot (e.g. torch 1.13
    reading a 2.x reference.pt with uint16/float8 tensors), the restricted
    loader, which represents such tensors as ForeignTensor."""
    if path.endswith(".safetensors") or path.endswith(".safetensors.index.json"):
        return load_safetensors(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001
        try:
            return _zip_safe_load(path)
        except Exception:  # noqa: BLE001
            raise e from None


# --------------------------------------------------------------------------
# safetensors (pure Python)

_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
    "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
    "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
    "C64": torch.complex64, "C128": torch.complex128,
}
for _n, _a in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
               ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
               ("F8_E8M0", "float8_e8m0fnu")):
    _ST_DTYPES[_n] = getattr(torch, _a) if isinstance(getattr(torch, _a, None), torch.dtype) \
        else ForeignDtype(_a)


class SafetensorsError(Exception):
    pass


def read_safetensors(path):
    """Returns (metadata dict or None, {name: tensor}). Validates the header:
    8-byte LE length, JSON object, offsets inside the data, no overlaps, no
    holes, sizes = numel * itemsize."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: too short")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if hlen > len(raw) - 8 or hlen > 100_000_000:
        raise SafetensorsError(f"{path}: header length {hlen} out of range")
    try:
        header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    except Exception as e:  # noqa: BLE001
        raise SafetensorsError(f"{path}: bad header JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not an object")
    data = memoryview(raw)[8 + hlen:]
    meta = header.pop("__metadata__", None)
    out = collections.OrderedDict()
    spans = []
    for name, info in header.items():
        try:
            dt = _ST_DTYPES[info["dtype"]]
        except KeyError:
            raise SafetensorsError(f"{path}: {name}: unsupported dtype {info.get('dtype')!r}") \
                from None
        shape = [int(x) for x in info["shape"]]
        b, e = (int(x) for x in info["data_offsets"])
        n = math.prod(shape)
        isz = dt.itemsize if isinstance(dt, ForeignDtype) else torch.empty(0, dtype=dt).element_size()
        if not (0 <= b <= e <= len(data)) or e - b != n * isz:
            raise SafetensorsError(f"{path}: {name}: bad data_offsets {[b, e]} for "
                                   f"{info['dtype']}{shape}")
        spans.append((b, e, name))
        real = _INT_OF_SIZE[dt.itemsize] if isinstance(dt, ForeignDtype) else dt
        if n == 0:
            t = torch.empty(shape, dtype=real)
        else:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=real).reshape(shape)
        out[name] = ForeignTensor(dt.name, t) if isinstance(dt, ForeignDtype) else t
    pos = 0
    for b, e, name in sorted(spans):
        if b != pos:
            raise SafetensorsError(f"{path}: {name}: data at {b}, expected {pos} "
                                   f"(hole or overlap)")
        pos = e
    if pos != len(data):
        raise SafetensorsError(f"{path}: {len(data) - pos} trailing bytes after tensors")
    return meta, out


def load_safetensors(path):
    """A .safetensors file, a *.safetensors.index.json, or a directory of
    *.safetensors files -> {name: tensor}."""
    files = []
    if os.path.isdir(path):
        idx = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(idx):
            return load_safetensors(idx)
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if f.endswith(".safetensors"))
    elif path.endswith(".index.json"):
        with open(path) as f:
            index = json.load(f)
        wm = index["weight_map"]
        base = os.path.dirname(path)
        files = sorted(set(os.path.join(base, v) for v in wm.values()))
        out = collections.OrderedDict()
        for fn in files:
            for k, v in read_safetensors(fn)[1].items():
                if k in out:
                    raise SafetensorsError(f"{fn}: duplicate tensor {k}")
                if wm.get(k) != os.path.basename(fn):
                    raise SafetensorsError(f"{fn}: {k} not mapped to this file in index")
                out[k] = v
        if set(out) != set(wm):
            raise SafetensorsError(f"{path}: index names {len(wm)} tensors, files hold "
                                   f"{len(out)}")
        return out
    else:
        files = [path]
    out = collections.OrderedDict()
    for fn in files:
        for k, v in read_safetensors(fn)[1].items():
            if k in out:
                raise SafetensorsError(f"{fn}: duplicate tensor {k}")
            out[k] = v
    return out


def flatten(obj, prefix="", tensors=None, values=None):
    """Nested dict/list -> ({'a.b.0': tensor}, {'a.c': value})."""
    tensors = collections.OrderedDict() if tensors is None else tensors
    values = collections.OrderedDict() if values is None else values
    if _is_tensorish(obj):
        tensors[prefix] = obj
    elif isinstance(obj, dict) and obj:
        for k, v in obj.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), tensors, values)
    elif isinstance(obj, (list, tuple)) and obj and any(
            _is_tensorish(x) or isinstance(x, (dict, list, tuple)) for x in obj):
        for i, v in enumerate(obj):
            flatten(v, f"{prefix}.{i}" if prefix else str(i), tensors, values)
    else:
        values[prefix] = obj
    return tensors, values


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


def compare_safetensors(actual_tensors, expected_obj, values_json=None):
    exp_t, exp_v = flatten(expected_obj)
    res = compare(dict(actual_tensors), dict(exp_t))
    if res.ok and values_json:
        with open(values_json) as f:
            got = json.load(f)
        got_t, got_v = flatten(got)
        want = {k: _jsonable(v) for k, v in exp_v.items()}
        r2 = compare(got_v, want)
        r2.tensors += res.tensors
        return r2
    return res


# --------------------------------------------------------------------------
# OLMo directories

OLMO_PARTS = ("model", "optim", "train")


def split_olmo(expected):
    if not isinstance(expected, dict):
        raise SystemExit("check_unshard: EXPECTED is not a dict; cannot split for OLMo layout")
    parts = collections.OrderedDict()
    if "model" in expected:
        parts["model"] = expected["model"]
    okey = "optim" if "optim" in expected else "optimizer" if "optimizer" in expected else None
    if okey:
        parts["optim"] = expected[okey]
    rest = collections.OrderedDict((k, v) for k, v in expected.items()
                                   if k not in ("model", okey))
    if rest:
        parts["train"] = rest
    return parts


def _part_file(d, part):
    for ext in (".pt", ".safetensors"):
        p = os.path.join(d, part + ext)
        if os.path.exists(p):
            return p
    if part == "model" and os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        return os.path.join(d, "model.safetensors.index.json")
    return None


def compare_dirs(actual_dir, expected, args):
    """Returns (Result, description)."""
    total = Result()
    if isinstance(expected, str):  # expected is a directory
        pairs = []
        for part in OLMO_PARTS + ("checkpoint",):
            ef = _part_file(expected, part)
            if ef:
                pairs.append((part, ef))
        if not pairs:
            raise SystemExit(f"check_unshard: {expected}: no model/optim/train/checkpoint files")
        exp_parts = [(p, load_trusted(f)) for p, f in pairs]
    else:
        if os.path.exists(os.path.join(actual_dir, "checkpoint.pt")) and \
                not _part_file(actual_dir, "model"):
            exp_parts = [("checkpoint", expected)]
        else:
            exp_parts = list(split_olmo(expected).items())
    if args.model_only:
        exp_parts = [(p, v) for p, v in exp_parts if p == "model"]
    for part, exp in exp_parts:
        af = _part_file(actual_dir, part)
        if af is None:
            total.fail(part, f"missing {part}.pt / {part}.safetensors in {actual_dir}")
            return total
        if af.endswith(".json") or af.endswith(".safetensors"):
            r = compare_safetensors(load_safetensors(af), exp, args.values_json)
        else:
            allow = args.allow_pickle or part == "train"
            got = load_any(af, allow)
            r = compare(got, exp, allow_objects=allow)
            if (not r.ok and part == "train" and isinstance(exp, dict)
                    and list(exp) == ["train"] and isinstance(exp["train"], dict)):
                # the only "other" key is "train": accept train.pt holding
                # either {"train": {...}} or its contents
                r2 = compare(got, exp["train"], allow_objects=allow)
                if r2.ok:
                    r = r2
        if not r.ok:
            r.path = f"{os.path.basename(af)}:{r.path}"
            return r
        total.tensors += r.tensors
        total.values += r.values
    return total


def _unbytes(v):
    """extra.json's {"__bytes__": base64} back into bytes (JSON has none)."""
    if isinstance(v, dict) and list(v) == ["__bytes__"]:
        return base64.b64decode(v["__bytes__"])
    if isinstance(v, dict):
        return {k: _unbytes(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_unbytes(x) for x in v]
    return v


def compare_extra_json(path, expected_obj):
    """An extra.json (the non-tensor values `--format safetensors` writes)
    against EXPECTED's non-tensor values, both flattened."""
    with open(path) as f:
        got = _unbytes(json.load(f))
    _, want = flatten(expected_obj)
    _, got = flatten(got)
    return compare(got, {k: _jsonable(v) for k, v in want.items()})


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Compare unsharder output with the expected state dict.")
    ap.add_argument("actual")
    ap.add_argument("expected")
    ap.add_argument("--allow-pickle", action="store_true",
                    help="load ACTUAL with full pickle (arbitrary objects)")
    ap.add_argument("--model-only", action="store_true",
                    help="OLMo directory: compare model only")
    ap.add_argument("--values-json", metavar="FILE",
                    help="safetensors: JSON file holding the non-tensor values")
    args = ap.parse_args(argv)
    try:
        if os.path.isdir(args.actual):
            exp = args.expected if os.path.isdir(args.expected) else load_trusted(args.expected)
            res = compare_dirs(args.actual, exp, args)
        else:
            if os.path.isdir(args.expected):
                raise SystemExit("check_unshard: EXPECTED is a directory but ACTUAL is a file")
            exp = load_trusted(args.expected)
            if args.actual.endswith(".safetensors") or args.actual.endswith(".index.json"):
                res = compare_safetensors(load_safetensors(args.actual), exp, args.values_json)
            elif args.actual.endswith(".json"):
                res = compare_extra_json(args.actual, exp)
            else:
                act = load_any(args.actual, args.allow_pickle)
                res = compare(act, exp, allow_objects=args.allow_pickle)
    except (UnsafeContent, SafetensorsError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    if not res.ok:
        print(f"DIFF {res.path}: {res.msg}", file=sys.stderr)
        return 1
    print(f"OK {res.tensors} tensors, {res.values} values")
    return 0


def run(argv):
    """main(argv) in this process, as if it ran alone: returns (exit
    status, what it printed on stdout and stderr). Never raises: a crash
    is exit status 1 with its traceback."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            # as the interpreter would exit: argparse's usage errors are 2,
            # SystemExit("message") prints the message and is 1
            if e.code is None or isinstance(e.code, int):
                rc = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            rc = 1
    return rc, buf.getvalue()


def batch(inp, out):
    """--batch: one check per input line (a JSON array of main()'s
    arguments), one answer per output line, flushed as soon as it is made,
    so a test can keep this process as a co-process."""
    for line in inp:
        if not line.strip():
            continue
        try:
            argv = json.loads(line)
            if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
                raise ValueError("not a JSON array of strings")
        except ValueError as e:
            rc, text = 2, f"check_unshard --batch: bad request {line.strip()[:200]!r}: {e}\n"
        else:
            rc, text = run(argv)
        out.write(json.dumps({"rc": rc, "output": text}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--batch"]:
        # Answers go to a private copy of stdout; fd 1 itself goes to stderr
        # so that nothing else (a C library, a stray print) can corrupt them.
        answers = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        sys.exit(batch(sys.stdin, answers))
    sys.exit(main())
