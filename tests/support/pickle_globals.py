"""pickle_globals.py: which globals the pickles of a torch.save file name,
read with pickletools (nothing is loaded or called), and torch 2.6's
default torch.load(weights_only=True) list to hold them against.

Python 3 standard library only; usable from any test:

    from pickle_globals import file_globals, pickle_globals, TORCH26
    g = file_globals("out/checkpoint.pt")  # {"torch.Size", ...}
    assert g <= TORCH26

torch 1.13's own weights_only loader cannot read floats, so ckpt's outputs
are checked this way instead of by loading them. TORCH26 is transcribed
from torch 2.6's torch/_weights_only_unpickler.py, _get_allowed_globals()
(with the dtypes, storages and legacy tensor types that its loops add), and
kept independent of ckpt's C list on purpose.
"""
import io
import pickletools
import zipfile

_DTYPES = [
    # torch.storage._dtype_to_storage_type_map()
    "float64", "float32", "float16", "int64", "int32", "int16", "int8",
    "uint8", "bool", "bfloat16", "complex128", "complex64", "qint8",
    "qint32", "quint8", "quint4x2", "quint2x4",
    # torch.storage._new_dtypes()
    "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
    "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "complex32",
    "uint16", "uint32", "uint64",
]
_STORAGES = [
    "DoubleStorage", "FloatStorage", "LongStorage", "IntStorage",
    "ShortStorage", "CharStorage", "ByteStorage", "HalfStorage",
    "BoolStorage", "BFloat16Storage", "ComplexDoubleStorage",
    "ComplexFloatStorage", "QUInt8Storage", "QInt8Storage", "QInt32Storage",
    "QUInt4x2Storage", "QUInt2x4Storage",
]
_TENSOR_TYPES = [
    "DoubleTensor", "FloatTensor", "HalfTensor", "BFloat16Tensor",
    "LongTensor", "IntTensor", "ShortTensor", "CharTensor", "ByteTensor",
    "BoolTensor",
]
_REBUILD = [
    "_rebuild_parameter", "_rebuild_parameter_with_state",
    "_rebuild_qtensor", "_rebuild_tensor", "_rebuild_tensor_v2",
    "_rebuild_tensor_v3", "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor",
]

TORCH26 = frozenset(
    ["collections.OrderedDict", "collections.Counter",
     "torch.nn.parameter.Parameter", "torch.serialization._get_layout",
     "torch.Size", "torch.Tensor", "torch.device", "_codecs.encode",
     "builtins.bytearray", "builtins.set",
     "torch.storage.TypedStorage", "torch.storage.UntypedStorage",
     "torch._tensor._rebuild_from_type_v2",
     "torch.per_tensor_affine", "torch.per_tensor_symmetric",
     "torch.per_channel_affine", "torch.per_channel_symmetric",
     "torch.per_channel_affine_float_qparams"]
    + ["torch." + d for d in _DTYPES]
    + ["torch." + s for s in _STORAGES]
    + ["torch.cuda." + s for s in _STORAGES]
    + [m + t for m in ("torch.", "torch.cuda.", "torch.sparse.",
                       "torch.cuda.sparse.") for t in _TENSOR_TYPES]
    + ["torch._utils." + f for f in _REBUILD])

# torch's loader maps Python 2 names first (IMPORT_MAPPING).
_PY2 = {"__builtin__": "builtins", "copy_reg": "copyreg"}


def pickle_globals(data):
    """The set of "module.name" that pickle `data` names (GLOBAL, INST,
    STACK_GLOBAL), Python 2 module names mapped as torch maps them."""
    out, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            mod, name = arg.split(" ", 1)
        elif op.name == "STACK_GLOBAL":
            mod, name = strings[-2], strings[-1]
        else:
            if isinstance(arg, str):
                strings.append(arg)
            continue
        out.add("%s.%s" % (_PY2.get(mod, mod), name))
    return out


def file_globals(path):
    """The globals of every data.pkl in the torch.save zip at path."""
    with zipfile.ZipFile(path) as z:
        pkls = [n for n in z.namelist() if n.endswith("/data.pkl")]
        assert pkls, "%s: no data.pkl" % path
        out = set()
        for n in pkls:
            out |= pickle_globals(z.read(n))
    return out


def zip_pickle(path):
    """The bytes of the one data.pkl of the torch.save zip at path."""
    with zipfile.ZipFile(io.BytesIO(open(path, "rb").read())) as z:
        return z.read(next(n for n in z.namelist()
                           if n.endswith("/data.pkl")))
