/*
 * tensor.c - recognise tensors in a torch.save pickle graph and locate a
 * DCP tensor item's elements.
 *
 * A tensor is a call of torch._utils._rebuild_tensor_v2 (v3 for dtypes
 * without a typed storage class, plain _rebuild_tensor in old files), maybe
 * wrapped in _rebuild_parameter(_with_state), whose first argument is the
 * persistent id ('storage', storage_type, key, location, numel).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/torchfmt.h"
#include "ckpt/util.h"

/* data.pkl of one tensor is a few hundred bytes; byte items are bigger
 * but still metadata. */
#define MAX_PKL (64u << 20)

static int tbad(struct ckpt_err *err, const char *name, const char *what)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: %s", name, what);
}

/* A tuple of ints (or torch.Size(tuple)) into dims; returns count or -1. */
static int int_tuple(const struct ckpt_pv *v, int64_t *dims)
{
    const struct ckpt_pv *g = ckpt_pv_call_global(v);
    if (g && !strcmp(g->u.global.name, "Size"))
        v = ckpt_pv_item(v->u.call.args, 0);
    if (!v || v->kind != CKPT_PV_TUPLE || v->u.seq.n > CKPT_MAX_DIMS)
        return -1;
    for (size_t i = 0; i < v->u.seq.n; i++)
        if (ckpt_pv_get_int(v->u.seq.v[i], &dims[i]) != 0 || dims[i] < 0)
            return -1;
    return (int)v->u.seq.n;
}

/* The persistent id: ('storage', type, key, location, numel[, view]). */
static int parse_storage(const struct ckpt_pv *st, struct ckpt_tensor *t,
                         const struct ckpt_pv **type, int64_t *numel,
                         const char *name, struct ckpt_err *err)
{
    const struct ckpt_pv *pid = st && st->kind == CKPT_PV_PERSID ?
                                st->u.persid.pid : NULL;
    if (!pid || pid->kind != CKPT_PV_TUPLE || pid->u.seq.n < 5 ||
        !ckpt_pv_str_eq(pid->u.seq.v[0], "storage"))
        return tbad(err, name, "tensor storage is not a persistent id");
    const struct ckpt_pv *key = pid->u.seq.v[2];
    *type = pid->u.seq.v[1];
    if (!key || key->kind != CKPT_PV_STR || !key->u.s.len ||
        key->u.s.len > 20 || strchr(key->u.s.p, '/') ||
        (*type)->kind != CKPT_PV_GLOBAL ||
        ckpt_pv_get_int(pid->u.seq.v[4], numel) != 0 || *numel < 0)
        return tbad(err, name, "malformed storage persistent id");
    t->key = key->u.s.p;
    return 0;
}

/* Storage dtype (v2: from the typed storage class) and its byte count. */
static int storage_dtype(struct ckpt_tensor *t, const struct ckpt_pv *type,
                         int64_t numel, const struct ckpt_pv *v3dtype,
                         const char *name, struct ckpt_err *err)
{
    const char *cls = type->u.global.name;
    if (v3dtype) {
        t->dtype = ckpt_dtype_from_pv(v3dtype);
        if (!t->dtype)
            return ckpt_err_set(err, CKPT_EUNSUPPORTED,
                                "%s: unknown dtype '%s'", name,
                                v3dtype->kind == CKPT_PV_GLOBAL ?
                                v3dtype->u.global.name : "?");
        if (strcmp(cls, "UntypedStorage"))
            return tbad(err, name, "v3 tensor without an UntypedStorage");
        t->storage_nbytes = (uint64_t)numel;
        return 0;
    }
    t->dtype = ckpt_dtype_by_storage(cls);
    if (!t->dtype)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED,
                            "%s: unknown dtype (storage class '%s.%s')",
                            name, type->u.global.module, cls);
    if (ckpt_mul_u64((uint64_t)numel, t->dtype->itemsize,
                     &t->storage_nbytes) != 0)
        return tbad(err, name, "storage size overflows");
    return 0;
}

/* metadata dict of _rebuild_tensor_v2/v3 (torch._utils.get_tensor_metadata):
 * a conj or neg view (c.conj(), x._neg_view()) is saved with its storage
 * as it is, unresolved, and the bit says what the stored bytes mean: the
 * conjugate (imaginary parts negated), the negation. DCP saves such views
 * as they are (its writer clones only views smaller than their storage).
 * With allow, the bits are kept in t for the copy to resolve; dtypes
 * whose negation is not a sign-bit flip are refused. */
static int is_complex(const struct ckpt_dtype *d)
{
    return !strncmp(d->name, "complex", 7) || !strncmp(d->name, "bcomplex", 8);
}

static int sign_flips(const struct ckpt_dtype *d)
{
    static const char *const ok[] = { "float16", "bfloat16", "float32",
                                      "float64" };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!strcmp(d->name, ok[i]))
            return 1;
    return is_complex(d);
}

static int check_flags(const struct ckpt_pv *md, struct ckpt_tensor *t,
                       int allow, const char *name, struct ckpt_err *err)
{
    if (!md || md->kind != CKPT_PV_DICT)
        return 0;
    for (size_t i = 0; i < md->u.dict.n; i++) {
        const struct ckpt_pv *val = md->u.dict.v[i];
        const struct ckpt_pv *k = md->u.dict.k[i];
        const char *key = k->kind == CKPT_PV_STR ? k->u.s.p : "?";
        if (!val || val->kind != CKPT_PV_BOOL || !val->u.b)
            continue;
        int conj = !strcmp(key, "conj_bit"), neg = !strcmp(key, "neg_bit");
        if (!allow || (!conj && !neg) ||
            (conj && !is_complex(t->dtype)) ||
            (neg && !sign_flips(t->dtype)))
            return ckpt_err_set(err, CKPT_EUNSUPPORTED,
                                "%s: %s tensor with the '%s' bit set is "
                                "not supported", name, t->dtype->name, key);
        t->conj |= conj;
        t->neg |= neg;
    }
    return 0;
}

static int rebuild(const struct ckpt_pv *args, int version, int allow,
                   struct ckpt_tensor *t, const char *name,
                   struct ckpt_err *err)
{
    size_t n = ckpt_pv_len(args);
    size_t want = version == 1 ? 4 : version == 2 ? 6 : 7;
    if (n < want || n > want + 1)
        return tbad(err, name, "tensor rebuild call has wrong arguments");
    const struct ckpt_pv *type = NULL;
    int64_t numel = 0, sdims[CKPT_MAX_DIMS];
    if (parse_storage(ckpt_pv_item(args, 0), t, &type, &numel, name,
                      err) != 0)
        return -1;
    if (storage_dtype(t, type, numel,
                      version == 3 ? ckpt_pv_item(args, 6) : NULL, name,
                      err) != 0)
        return -1;
    int nd = int_tuple(ckpt_pv_item(args, 2), t->size);
    int ns = int_tuple(ckpt_pv_item(args, 3), sdims);
    if (nd < 0 || ns != nd ||
        ckpt_pv_get_int(ckpt_pv_item(args, 1), &t->storage_offset) != 0 ||
        t->storage_offset < 0)
        return tbad(err, name, "bad tensor size, stride or offset");
    memcpy(t->stride, sdims, sizeof(int64_t) * (size_t)nd);
    t->ndim = nd;
    int64_t rg = 0;
    if (version > 1)
        ckpt_pv_get_int(ckpt_pv_item(args, 4), &rg);
    t->requires_grad = rg != 0;
    return n > want ? check_flags(ckpt_pv_item(args, want), t, allow, name,
                                  err) : 0;
}

static int rebuild_version(const struct ckpt_pv *g)
{
    if (!g || strcmp(g->u.global.module, "torch._utils"))
        return 0;
    const char *fn = g->u.global.name;
    return !strcmp(fn, "_rebuild_tensor") ? 1 :
           !strcmp(fn, "_rebuild_tensor_v2") ? 2 :
           !strcmp(fn, "_rebuild_tensor_v3") ? 3 : 0;
}

static int from_pv(const struct ckpt_pv *v, struct ckpt_tensor *t, int allow,
                   const char *name, struct ckpt_err *err)
{
    const struct ckpt_pv *g = ckpt_pv_call_global(v);
    if (!g || strcmp(g->u.global.module, "torch._utils"))
        return 0;
    memset(t, 0, sizeof(*t));
    if (!strcmp(g->u.global.name, "_rebuild_parameter") ||
        !strcmp(g->u.global.name, "_rebuild_parameter_with_state")) {
        /* One level: a Parameter wraps a tensor, never a Parameter. */
        v = ckpt_pv_item(v->u.call.args, 0);
        if (!rebuild_version(ckpt_pv_call_global(v)))
            return tbad(err, name, "malformed parameter");
    }
    int version = rebuild_version(ckpt_pv_call_global(v));
    if (!version)
        return 0;
    return rebuild(v->u.call.args, version, allow, t, name, err) ? -1 : 1;
}

int ckpt_tensor_from_pv(const struct ckpt_pv *v, struct ckpt_tensor *t,
                        const char *name, struct ckpt_err *err)
{
    return from_pv(v, t, 0, name, err);
}

int ckpt_tensor_numel(const struct ckpt_tensor *t, uint64_t *out)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (ckpt_mul_u64(n, (uint64_t)t->size[i], &n) != 0)
            return -1;
    *out = n;
    return 0;
}

int ckpt_tensor_check_bounds(const struct ckpt_tensor *t, const char *name,
                             struct ckpt_err *err)
{
    uint64_t numel, last = (uint64_t)t->storage_offset, end;
    if (ckpt_tensor_numel(t, &numel) != 0)
        return tbad(err, name, "tensor size overflows");
    if (numel == 0)
        return 0;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t span;
        if (ckpt_mul_u64((uint64_t)(t->size[i] - 1), (uint64_t)t->stride[i],
                         &span) != 0 || ckpt_add_u64(last, span, &last))
            return tbad(err, name, "tensor strides overflow");
    }
    if (ckpt_add_u64(last, 1, &end) != 0 ||
        ckpt_mul_u64(end, t->dtype->itemsize, &end) != 0 ||
        end > t->storage_nbytes)
        return tbad(err, name, "tensor reaches past its storage");
    return 0;
}

static int locate(const struct ckpt_tzip *z, const struct ckpt_rd *rd,
                  struct ckpt_tensor_loc *out, struct ckpt_err *err)
{
    char rec[40];
    snprintf(rec, sizeof(rec), "data/%s", out->key);
    const struct ckpt_tzip_entry *e = ckpt_tzip_find(z, rec);
    if (!e)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: record '%s/%s' missing",
                            rd->name, z->prefix, rec);
    if (e->size < out->t.storage_nbytes)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: record '%s' shorter than its storage",
                            rd->name, rec);
    out->data_off = e->data_off;
    out->data_size = e->size;
    out->crc = e->crc;
    snprintf(out->rec, sizeof(out->rec), "%s/%s", z->prefix, rec);
    out->big_endian = z->big_endian;
    return ckpt_tensor_check_bounds(&out->t, rd->name, err);
}

int ckpt_tensor_item_load(const struct ckpt_rd *rd,
                          struct ckpt_tensor_loc *out, struct ckpt_err *err)
{
    struct ckpt_tzip *z = NULL;
    struct ckpt_arena *a = NULL;
    char *pkl = NULL;
    size_t len;
    int rc = -1;
    if (ckpt_tzip_open(&z, rd, err) != 0)
        return -1;
    const struct ckpt_tzip_entry *e = ckpt_tzip_find(z, "data.pkl");
    if (!e) {
        ckpt_err_set(err, CKPT_EFORMAT, "%s: record 'data.pkl' missing",
                     rd->name);
        goto out;
    }
    if (ckpt_tzip_read(z, rd, e, MAX_PKL, &pkl, &len, err) != 0)
        goto out;
    a = ckpt_arena_new(MAX_PKL * 4);
    struct ckpt_pickle_opts po = { .name = "data.pkl",
                                   .allow = ckpt_torch_allow_tensor };
    struct ckpt_pv *v;
    if (!a) {
        ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        goto out;
    }
    if (ckpt_pickle_load(a, pkl, len, &po, &v, NULL, err) != 0)
        goto prefix;
    int is = from_pv(v, &out->t, 1, "data.pkl", err);
    if (is <= 0) {
        if (is == 0)
            ckpt_err_set(err, CKPT_EFORMAT, "data.pkl: not a tensor (%s)",
                         ckpt_pv_kind_name(v->kind));
        goto prefix;
    }
    snprintf(out->key, sizeof(out->key), "%s", out->t.key);
    out->t.key = out->key;
    rc = locate(z, rd, out, err);
    goto out;
prefix:
    ckpt_err_prefix(err, "%s", rd->name);
out:
    ckpt_arena_free(a);
    free(pkl);
    ckpt_tzip_free(z);
    return rc;
}
