/*
 * policy.c - which classes a pickle may name (see ckpt/torchfmt.h).
 *
 * Nothing is ever called, so these lists guard what ckpt interprets and
 * what it writes back out for a later torch.load to execute. Tensor and
 * metadata pickles get the lists their parsers need. Whatever ckpt writes
 * (byte items, OLMo trainer and optimizer values) must stay within what
 * torch.load(weights_only=True) of torch 2.6 allows, plus the pathlib
 * paths and numpy RNG state of OLMo's trainer state: an allow-list,
 * because no list of dangerous callables is ever complete (numpy.testing's
 * os, doctest, _posixsubprocess, ...).
 */
#include <string.h>

#include "ckpt/torchfmt.h"

static int in_list(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(s, *list))
            return 1;
    return 0;
}

static int is_builtins(const char *module)
{
    return !strcmp(module, "builtins") || !strcmp(module, "__builtin__");
}

/* A torch dtype name, known to ckpt or not (qint8, float6_e3m2, int4):
 * a dtype family followed by a digit. Accepting unknown ones lets the
 * interpreter say "unknown dtype" instead of "class not allowed". */
static int dtype_like(const char *name)
{
    static const char *const fam[] = {
        "float", "bfloat", "int", "uint", "qint", "quint", "complex",
        "bcomplex", "bits", NULL
    };
    for (const char *const *f = fam; *f; f++) {
        size_t n = strlen(*f);
        if (!strncmp(name, *f, n) && name[n] >= '0' && name[n] <= '9')
            return 1;
    }
    return 0;
}

int ckpt_torch_allow_tensor(void *ud, const char *module, const char *name)
{
    static const char *const rebuild[] = {
        "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
        "_rebuild_parameter", "_rebuild_parameter_with_state", NULL
    };
    (void)ud;
    if (!strcmp(module, "torch._utils"))
        return in_list(name, rebuild) ? 0 : -1;
    if (!strcmp(module, "torch") || !strcmp(module, "torch.cuda"))
        return (!strcmp(name, "Size") || ckpt_dtype_by_storage(name) ||
                ckpt_dtype_by_name(name) || dtype_like(name)) ? 0 : -1;
    if (!strcmp(module, "torch.storage"))
        return (!strcmp(name, "UntypedStorage") ||
                !strcmp(name, "TypedStorage")) ? 0 : -1;
    if (!strcmp(module, "collections"))
        return !strcmp(name, "OrderedDict") ? 0 : -1;
    if (!strcmp(module, "torch.serialization"))
        return !strcmp(name, "_get_layout") ? 0 : -1;
    return -1;
}

int ckpt_torch_allow_metadata(void *ud, const char *module,
                              const char *name)
{
    static const char *const dcp[] = {
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
        "ChunkStorageMetadata", "MetadataIndex", "TensorProperties",
        "MEM_FORMAT_ENCODING", "_MEM_FORMAT_ENCODING", "_StorageInfo",
        "StorageMeta",
        /* Megatron caches its save plans in planner_data: dataclasses
         * (torch.distributed.checkpoint.planner), read as plain nodes. */
        "SavePlan", "WriteItem", "WriteItemType", "TensorWriteData", NULL
    };
    static const char *const paths[] = {
        "Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath",
        "PureWindowsPath", NULL
    };
    if (ckpt_torch_allow_tensor(ud, module, name) == 0)
        return 0;
    /* Matched by class name: the same classes moved between
     * torch.distributed._shard.* (1.13) and torch.distributed.checkpoint.*
     * (2.x), and old checkpoints keep the old paths forever. */
    if (!strncmp(module, "torch.distributed.", 18))
        return in_list(name, dcp) ? 0 : -1;
    if (is_builtins(module))
        return !strcmp(name, "getattr") ? 0 : -1;
    if (!strcmp(module, "torch"))
        return !strcmp(name, "device") ? 0 : -1;
    if (!strcmp(module, "pathlib") || !strcmp(module, "pathlib._local"))
        return in_list(name, paths) ? 0 : -1;
    return -1;
}

/* --- what ckpt writes: torch.load(weights_only=True)'s list ------------ */

/* torch 2.6 _weights_only_unpickler._get_allowed_globals(), module by
 * module; docs/formats/pickle.md has the table. */
static const char *const w_rebuild[] = {
    "_rebuild_parameter", "_rebuild_parameter_with_state",
    "_rebuild_qtensor", "_rebuild_tensor", "_rebuild_tensor_v2",
    "_rebuild_tensor_v3", "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor", NULL
};

/* torch._storage_classes (legacy typed storages, also under torch.cuda). */
static const char *const w_storages[] = {
    "DoubleStorage", "FloatStorage", "LongStorage", "IntStorage",
    "ShortStorage", "CharStorage", "ByteStorage", "HalfStorage",
    "BoolStorage", "BFloat16Storage", "ComplexDoubleStorage",
    "ComplexFloatStorage", "QUInt8Storage", "QInt8Storage",
    "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage", NULL
};

/* torch._tensor_classes: the legacy tensor types (torch.FloatTensor, also
 * under torch.cuda, torch.sparse, torch.cuda.sparse). */
static const char *const w_tensor_types[] = {
    "DoubleTensor", "FloatTensor", "HalfTensor", "BFloat16Tensor",
    "LongTensor", "IntTensor", "ShortTensor", "CharTensor", "ByteTensor",
    "BoolTensor", NULL
};

static const char *const w_torch[] = {
    "Size", "Tensor", "device", "per_tensor_affine", "per_tensor_symmetric",
    "per_channel_affine", "per_channel_symmetric",
    "per_channel_affine_float_qparams", "qint8", "quint8", "qint32",
    "quint4x2", "quint2x4", NULL
};

static int torch_module_allowed(const char *module, const char *name)
{
    if (!strcmp(module, "torch"))
        /* Every dtype ckpt knows: torch lists all of its own dtypes. */
        return in_list(name, w_torch) || in_list(name, w_storages) ||
               in_list(name, w_tensor_types) ||
               ckpt_dtype_by_name(name) != NULL ||
               !strcmp(name, "UntypedStorage") ||
               !strcmp(name, "TypedStorage");
    if (!strcmp(module, "torch.cuda"))
        return in_list(name, w_storages) || in_list(name, w_tensor_types);
    if (!strcmp(module, "torch.sparse") ||
        !strcmp(module, "torch.cuda.sparse"))
        return in_list(name, w_tensor_types);
    if (!strcmp(module, "torch.storage"))
        return !strcmp(name, "UntypedStorage") ||
               !strcmp(name, "TypedStorage");
    if (!strcmp(module, "torch._utils"))
        return in_list(name, w_rebuild);
    if (!strcmp(module, "torch._tensor"))
        return !strcmp(name, "_rebuild_from_type_v2");
    if (!strcmp(module, "torch.nn.parameter"))
        return !strcmp(name, "Parameter");
    if (!strcmp(module, "torch.serialization"))
        return !strcmp(name, "_get_layout");
    return 0;
}

int ckpt_torch_allow_weights(void *ud, const char *module, const char *name)
{
    (void)ud;
    if (!strcmp(module, "torch") || !strncmp(module, "torch.", 6))
        return torch_module_allowed(module, name) ? 0 : -1;
    if (!strcmp(module, "collections"))
        return (!strcmp(name, "OrderedDict") ||
                !strcmp(name, "Counter")) ? 0 : -1;
    if (!strcmp(module, "_codecs"))
        return !strcmp(name, "encode") ? 0 : -1;
    /* torch maps Python 2's __builtin__ to builtins before looking up.
     * complex: a Python complex value, complex(real, imag), on torch's own
     * list since pytorch issue #141537 (torch 2.14 loads it). */
    if (is_builtins(module))
        return (!strcmp(name, "set") || !strcmp(name, "bytearray") ||
                !strcmp(name, "complex")) ? 0 : -1;
    return -1;
}

int ckpt_torch_allow_object(void *ud, const char *module, const char *name)
{
    /* OLMo's trainer state keeps checkpoint paths as pathlib paths
     * (pathlib._local since Python 3.13) and numpy's RNG state, an array
     * (numpy._core since numpy 2): what its train.pt holds. */
    static const char *const paths[] = {
        "Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath",
        "PureWindowsPath", NULL
    };
    if (ckpt_torch_allow_weights(ud, module, name) == 0)
        return 0;
    if (!strcmp(module, "pathlib") || !strcmp(module, "pathlib._local"))
        return in_list(name, paths) ? 0 : -1;
    if (!strcmp(module, "numpy.core.multiarray") ||
        !strcmp(module, "numpy._core.multiarray"))
        return !strcmp(name, "_reconstruct") ? 0 : -1;
    if (!strcmp(module, "numpy"))
        return (!strcmp(name, "ndarray") || !strcmp(name, "dtype")) ? 0 : -1;
    return -1;
}

int ckpt_torch_allow_megatron(void *ud, const char *module,
                              const char *name)
{
    /* megatron/core/safe_globals.py SAFE_GLOBALS (megatron.core 0.20),
     * by the module their classes pickle under. */
    static const struct { const char *module, *name; } mg[] = {
        { "argparse", "Namespace" },
        { "types", "SimpleNamespace" },
        { "signal", "Signals" },
        { "_io", "BytesIO" },
        { "io", "BytesIO" },
        { "numpy.dtypes", "UInt32DType" },
        { "torch._C", "Generator" },
        { "megatron.core.enums", "ModelType" },
        { "megatron.core.optimizer.optimizer_config", "OptimizerConfig" },
        { "megatron.core.rerun_state_machine", "RerunDiagnostic" },
        { "megatron.core.rerun_state_machine", "RerunMode" },
        { "megatron.core.rerun_state_machine", "RerunState" },
        { "megatron.core.transformer.enums", "AttnBackend" },
        { "megatron.core.transformer.enums", "CudaGraphModule" },
        { "megatron.core.transformer.enums", "CudaGraphScope" },
        { "megatron.core.transformer.enums", "InferenceCudaGraphScope" },
    };
    (void)ud;
    for (size_t i = 0; i < sizeof(mg) / sizeof(mg[0]); i++)
        if (!strcmp(module, mg[i].module) && !strcmp(name, mg[i].name))
            return 0;
    return ckpt_torch_allow_object(ud, module, name);
}

struct gate_walk {
    const char *item;
    const struct ckpt_pickle_gate *g;
    struct ckpt_err *err;
};

static int gate_visit(void *ud, const struct ckpt_pv *v)
{
    struct gate_walk *w = ud;
    if (v->kind != CKPT_PV_GLOBAL ||
        ckpt_torch_allow_object(NULL, v->u.global.module,
                                v->u.global.name) == 0 ||
        (w->g && w->g->also &&
         w->g->also(NULL, v->u.global.module, v->u.global.name) == 0))
        return 0;
    if (w->g && w->g->allow_unsafe) {
        if (w->g->warn)
            w->g->warn(w->g->ud, w->item, v->u.global.module,
                       v->u.global.name);
        return 0;
    }
    ckpt_err_set(w->err, CKPT_EUNSAFE, "%s: pickle global '%s.%s' is not "
                 "allowed (use --allow-unsafe-pickle to pass it through)",
                 w->item, v->u.global.module, v->u.global.name);
    return 1;
}

int ckpt_torch_check_written(const struct ckpt_pv *root, const char *item,
                             const struct ckpt_pickle_gate *g,
                             struct ckpt_err *err)
{
    struct gate_walk w = { item, g, err };
    int rc = ckpt_pv_walk(root, gate_visit, &w);
    if (rc < 0)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    return rc ? -1 : 0;
}

struct getattr_check {
    const char *name;
    struct ckpt_err *err;
};

static int check_getattr(void *ud, const struct ckpt_pv *v)
{
    struct getattr_check *c = ud;
    const struct ckpt_pv *fn = ckpt_pv_call_global(v);
    if (!fn || !is_builtins(fn->u.global.module) ||
        strcmp(fn->u.global.name, "getattr"))
        return 0;
    const struct ckpt_pv *obj = ckpt_pv_item(v->u.call.args, 0);
    const struct ckpt_pv *attr = ckpt_pv_item(v->u.call.args, 1);
    if (ckpt_pv_len(v->u.call.args) == 2 && obj &&
        obj->kind == CKPT_PV_GLOBAL && attr && attr->kind == CKPT_PV_STR &&
        attr->u.s.len && attr->u.s.p[0] != '_')
        return 0;
    ckpt_err_set(c->err, CKPT_EUNSAFE,
                 "%s: class 'builtins.getattr' not allowed here (only "
                 "getattr(Class, 'MEMBER'))", c->name);
    return 1;
}

int ckpt_torch_check_object(const struct ckpt_pv *root, const char *name,
                            struct ckpt_err *err)
{
    struct getattr_check c = { name, err };
    int rc = ckpt_pv_walk(root, check_getattr, &c);
    if (rc < 0)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    return rc ? -1 : 0;
}
