/*
 * policy.c - which classes a pickle may name (see ckpt/torchfmt.h).
 *
 * Nothing is ever called, so these lists guard what ckpt interprets and
 * what it writes back out for a later torch.load to execute. Tensor and
 * metadata pickles get strict allow-lists. Byte items (arbitrary user
 * objects: numpy arrays, pathlib paths, config classes) are passed through
 * unless they name something that executes code or touches the system.
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
        "StorageMeta", NULL
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

/* Top-level packages whose callables execute code or touch the system. */
static const char *const denied_modules[] = {
    "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "sys",
    "shutil", "importlib", "runpy", "pty", "socket", "ctypes", "code",
    "codeop", "commands", "webbrowser", "multiprocessing", "signal",
    "pickle", "_pickle", "cPickle", "marshal", "types", "tempfile", "io",
    "_io", "fileinput", "glob", "asyncio", "threading", "_thread", "urllib",
    "http", "ftplib", "smtplib", "telnetlib", "platform", "pdb", "bdb",
    "inspect", "gc", "operator", "_operator", "functools", "_functools",
    "timeit", "trace", "profile", "cProfile", "pydoc", "zipimport",
    "pkgutil", "site", "sysconfig", "distutils", "setuptools", "pip",
    "dill", "cloudpickle", "joblib", "yaml", "requests", "urllib3", NULL
};

/* Builtins that are plain constructors of data. */
static const char *const safe_builtins[] = {
    "set", "frozenset", "bytearray", "bytes", "complex", "slice", "range",
    "object", "int", "float", "str", "list", "tuple", "dict", "bool",
    "getattr", NULL
};

/* Names that execute or load things wherever they live. */
static const char *const denied_names[] = {
    "eval", "exec", "execfile", "compile", "open", "system", "popen",
    "__import__", "import_module", "setattr", "delattr", "load", "loads",
    "load_state_dict_from_url", "input", "breakpoint", "apply", "spawn",
    "fromfile", "memmap", "unlink", "remove", "rmtree", "write_text",
    "write_bytes", NULL
};

static int top_level_denied(const char *module)
{
    size_t n = strcspn(module, ".");
    for (const char *const *p = denied_modules; *p; p++)
        if (strlen(*p) == n && !strncmp(*p, module, n))
            return 1;
    return 0;
}

static int torch_object_allowed(const char *module, const char *name)
{
    if (ckpt_torch_allow_metadata(NULL, module, name) == 0)
        return 1;
    if (!strcmp(module, "torch._utils") || !strcmp(module, "torch._tensor"))
        return !strncmp(name, "_rebuild_", 9);
    if (!strcmp(module, "torch.nn.parameter"))
        return !strcmp(name, "Parameter");
    /* Data classes of sharded tensors and DTensors, never functions. */
    return !strncmp(module, "torch.distributed.", 18) &&
           name[0] >= 'A' && name[0] <= 'Z';
}

int ckpt_torch_allow_object(void *ud, const char *module, const char *name)
{
    (void)ud;
    if (is_builtins(module))
        return in_list(name, safe_builtins) ? 0 : -1;
    if (!strcmp(module, "copyreg") || !strcmp(module, "copy_reg"))
        return !strcmp(name, "_reconstructor") ? 0 : -1;
    if (!strcmp(module, "_codecs"))
        return !strcmp(name, "encode") ? 0 : -1;
    if (!strcmp(module, "torch") || !strncmp(module, "torch.", 6))
        return torch_object_allowed(module, name) ? 0 : -1;
    if (top_level_denied(module))
        return -1;
    const char *last = strrchr(name, '.');
    return in_list(last ? last + 1 : name, denied_names) ? -1 : 0;
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
