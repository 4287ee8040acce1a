/*
 * olmo/core_metadata.c - OLMo-core 0.1 metadata.json (allenai/OLMo-core
 * src/olmo_core/distributed/checkpoint.py: TensorStorageMetadata,
 * TensorShardSpec, Checkpointer.get_metadata; docs/formats/olmo.md).
 *
 * {"tensors": {key: {"shape": [...], "is_sharded": bool, "dtype": "F32",
 *   "shard_spec_per_file": {"rank_R.safetensors": {"flattened_offsets":
 *   [[start, end], ...] | null, "local_shape": [...] | null,
 *   "global_offset": [...] | null}}}}}
 * Earlier writers had "flattened_offsets_per_file": {file: [start, end]}
 * (later a list of pairs) instead, and the earliest no dtype; OLMo-core
 * still reads those, so ckpt does too. flattened_offsets wins over
 * local_shape when both are set, as in TensorShardSpec.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/olmocore.h"
#include "ckpt/util.h"

#define MAX_EXACT 9007199254740992.0
/* Row ranges a DTensor box may expand to while checking the tiling. */
#define MAX_RANGES (1u << 22)

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

static int get_u64(const cJSON *x, uint64_t *out)
{
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) ||
        x->valuedouble >= MAX_EXACT || x->valuedouble != floor(x->valuedouble))
        return -1;
    *out = (uint64_t)x->valuedouble;
    return 0;
}

/* A JSON array of n non-negative integers into an arena array. */
static uint64_t *u64_array(struct ckpt_arena *a, const cJSON *v, int *n)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > CKPT_MAX_DIMS)
        return NULL;
    int k = cJSON_GetArraySize(v);
    uint64_t *out = ckpt_arena_array(a, (size_t)k + 1, sizeof(*out));
    for (int i = 0; out && i < k; i++)
        if (get_u64(cJSON_GetArrayItem(v, i), &out[i]) != 0)
            return NULL;
    *n = k;
    return out;
}

static int plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

struct ctx {
    struct ckpt_arena *a;
    const char *name;       /* metadata.json, for messages */
    struct ckpt_err *err;
};

static int bad(struct ctx *c, const char *key, const char *file,
               const char *what)
{
    if (file)
        return ckpt_err_set(c->err, CKPT_EFORMAT, "%s: tensor '%s': %s: %s",
                            c->name, key, file, what);
    return ckpt_err_set(c->err, CKPT_EFORMAT, "%s: tensor '%s': %s",
                        c->name, key, what);
}

/* flattened_offsets: [[s, e], ...], or the old single [s, e]. */
static int parse_ranges(struct ctx *c, const struct ckpt_olmocore_tensor *t,
                        struct ckpt_olmocore_piece *p, const cJSON *v)
{
    const cJSON *first = cJSON_GetArrayItem(v, 0);
    int single = cJSON_IsNumber(first);
    size_t n = single ? 1 : (size_t)cJSON_GetArraySize(v);
    uint64_t *r = ckpt_arena_array(c->a, 2 * n + 1, sizeof(*r));
    if (!r)
        return oom(c->err);
    for (size_t i = 0; i < n; i++) {
        const cJSON *pair = single ? v : cJSON_GetArrayItem(v, (int)i);
        if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 ||
            get_u64(cJSON_GetArrayItem(pair, 0), &r[2 * i]) != 0 ||
            get_u64(cJSON_GetArrayItem(pair, 1), &r[2 * i + 1]) != 0)
            return bad(c, t->key, p->file, "flattened_offsets must be "
                       "[start, end] pairs");
        if (r[2 * i] > r[2 * i + 1] || r[2 * i + 1] > t->numel) {
            char what[160];
            snprintf(what, sizeof(what), "range [%llu, %llu) outside the "
                     "tensor's %llu elements",
                     (unsigned long long)r[2 * i],
                     (unsigned long long)r[2 * i + 1],
                     (unsigned long long)t->numel);
            return bad(c, t->key, p->file, what);
        }
        if (ckpt_add_u64(p->numel, r[2 * i + 1] - r[2 * i], &p->numel))
            return bad(c, t->key, p->file, "too many elements");
    }
    p->ranges = r;
    p->nranges = n;
    return 0;
}

/* local_shape + global_offset: a box inside the tensor. */
static int parse_box(struct ctx *c, const struct ckpt_olmocore_tensor *t,
                     struct ckpt_olmocore_piece *p, const cJSON *ls,
                     const cJSON *go)
{
    int nb = -1, no = -1;
    uint64_t *box = u64_array(c->a, ls, &nb);
    uint64_t *off = u64_array(c->a, go, &no);
    if (!box || !off || nb != t->ndim || no != t->ndim)
        return bad(c, t->key, p->file, "local_shape and global_offset "
                   "must have one entry per dimension");
    p->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (off[d] > t->shape[d] || box[d] > t->shape[d] - off[d])
            return bad(c, t->key, p->file, "local shard outside the "
                       "tensor");
        p->numel *= box[d];     /* bounded by the tensor's numel */
    }
    p->box = box;
    p->offset = off;
    return 0;
}

static int parse_spec(struct ctx *c, const struct ckpt_olmocore_tensor *t,
                      struct ckpt_olmocore_piece *p, const cJSON *spec)
{
    const cJSON *fo = cJSON_GetObjectItemCaseSensitive(spec,
                                                       "flattened_offsets");
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(spec, "local_shape");
    const cJSON *go = cJSON_GetObjectItemCaseSensitive(spec,
                                                       "global_offset");
    if (cJSON_IsArray(fo))
        return parse_ranges(c, t, p, fo);
    if (ls && !cJSON_IsNull(ls) && go && !cJSON_IsNull(go))
        return parse_box(c, t, p, ls, go);
    return bad(c, t->key, p->file, "neither flattened_offsets nor "
               "local_shape and global_offset");
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name twice in a JSON object (Python would keep the last silently). */
static const char *repeated(const char **names, size_t n)
{
    qsort(names, n, sizeof(*names), by_str);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i]))
            return names[i];
    return NULL;
}

static int parse_pieces(struct ctx *c, struct ckpt_olmocore_tensor *t,
                        const cJSON *o)
{
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(
        o, "flattened_offsets_per_file");
    const cJSON *map = old ? old : cJSON_GetObjectItemCaseSensitive(
        o, "shard_spec_per_file");
    const cJSON *f;
    if (!cJSON_IsObject(map))
        return bad(c, t->key, NULL, "no shard_spec_per_file");
    size_t n = (size_t)cJSON_GetArraySize(map);
    t->pieces = ckpt_arena_array(c->a, n + 1, sizeof(*t->pieces));
    const char **names = ckpt_xcalloc(n + 1, sizeof(*names));
    int rc = t->pieces ? 0 : oom(c->err);
    for (f = rc ? NULL : map->child; f && rc == 0; f = f->next) {
        struct ckpt_olmocore_piece *p = &t->pieces[t->npieces];
        p->file = ckpt_arena_strdup(c->a, f->string);
        if (!p->file) {
            rc = oom(c->err);
            break;
        }
        if (!plain_name(p->file))
            rc = bad(c, t->key, p->file, "not a plain file name");
        else if (old && !cJSON_IsArray(f))
            rc = bad(c, t->key, p->file, "flattened_offsets must be "
                     "[start, end] pairs");
        else
            rc = old ? parse_ranges(c, t, p, f) : parse_spec(c, t, p, f);
        names[t->npieces++] = p->file;
    }
    const char *dup = rc == 0 ? repeated(names, t->npieces) : NULL;
    if (dup)
        rc = bad(c, t->key, dup, "named twice");
    free(names);
    return rc;
}

static int parse_tensor(struct ctx *c, struct ckpt_olmocore_tensor *t,
                        const cJSON *o)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    uint64_t *shape;
    t->key = ckpt_arena_strdup(c->a, o->string);
    if (!t->key)
        return oom(c->err);
    if (!cJSON_IsObject(o))
        return bad(c, t->key, NULL, "not an object");
    shape = u64_array(c->a, cJSON_GetObjectItemCaseSensitive(o, "shape"),
                      &t->ndim);
    if (!shape)
        return bad(c, t->key, NULL, "shape missing or malformed");
    t->shape = shape;
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++)
        if (ckpt_mul_u64(t->numel, shape[d], &t->numel) != 0)
            return bad(c, t->key, NULL, "too many elements");
    if (dt && !cJSON_IsNull(dt)) {
        t->dtype = cJSON_IsString(dt) ? ckpt_dtype_by_st(dt->valuestring)
                                      : NULL;
        if (!t->dtype)
            return ckpt_err_set(c->err, CKPT_EUNSUPPORTED, "%s: tensor "
                                "'%s': dtype %s not supported", c->name,
                                t->key, cJSON_IsString(dt) ?
                                dt->valuestring : "(not a string)");
    }
    return parse_pieces(c, t, o);
}

static int parse_doc(struct ctx *c, struct ckpt_olmocore_meta *m,
                     const cJSON *doc)
{
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(doc, "tensors");
    const cJSON *o;
    if (!cJSON_IsObject(doc) || !cJSON_IsObject(ts))
        return ckpt_err_set(c->err, CKPT_EFORMAT, "%s: not OLMo-core "
                            "metadata (no \"tensors\" object)", c->name);
    size_t n = (size_t)cJSON_GetArraySize(ts);
    m->tensors = ckpt_arena_array(c->a, n + 1, sizeof(*m->tensors));
    if (!m->tensors)
        return oom(c->err);
    cJSON_ArrayForEach(o, ts) {
        if (parse_tensor(c, &m->tensors[m->n], o) != 0)
            return -1;
        m->n++;
    }
    const char **keys = ckpt_xcalloc(m->n + 1, sizeof(*keys));
    for (size_t i = 0; i < m->n; i++)
        keys[i] = m->tensors[i].key;
    const char *dup = repeated(keys, m->n);
    int rc = dup ? ckpt_err_set(c->err, CKPT_EFORMAT, "%s: tensor '%s' "
                                "appears twice", c->name, dup) : 0;
    free(keys);
    return rc;
}

int ckpt_olmocore_meta_parse(const char *json, size_t len, const char *name,
                             struct ckpt_olmocore_meta **out,
                             struct ckpt_err *err)
{
    struct ckpt_olmocore_meta *m = ckpt_xcalloc(1, sizeof(*m));
    /* Everything parsed comes from the document: bounded by its size. */
    size_t limit = len < SIZE_MAX / 32 ? 16 * len + (1u << 20) : 0;
    struct ctx c = { NULL, name, err };
    cJSON *doc = NULL;
    int rc = 0;
    *out = NULL;
    m->arena = c.a = ckpt_arena_new(limit);
    if (!m->arena)
        rc = oom(err);
    else if (!(doc = cJSON_ParseWithLength(json, len)))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: not JSON", name);
    if (rc == 0)
        rc = parse_doc(&c, m, doc);
    cJSON_Delete(doc);
    if (rc != 0) {
        ckpt_olmocore_meta_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void ckpt_olmocore_meta_free(struct ckpt_olmocore_meta *m)
{
    if (!m)
        return;
    ckpt_arena_free(m->arena);
    free(m);
}

/* --- tiling -------------------------------------------------------------- */

struct range {
    uint64_t s, e;
    size_t piece;
};

struct ranges {
    struct range *v;
    size_t n, cap;
};

static int push(struct ranges *r, uint64_t s, uint64_t e, size_t piece)
{
    if (s == e)
        return 0;
    if (r->n == MAX_RANGES)
        return -1;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->v = ckpt_xreallocarray(r->v, r->cap, sizeof(*r->v));
    }
    r->v[r->n++] = (struct range){ s, e, piece };
    return 0;
}

/* A box as runs of the flattening: the innermost dimensions it spans
 * whole merge into one run per index of the dimensions before them. */
static int box_ranges(const struct ckpt_olmocore_tensor *t, size_t pi,
                      struct ranges *r)
{
    const struct ckpt_olmocore_piece *p = &t->pieces[pi];
    uint64_t inner[CKPT_MAX_DIMS], idx[CKPT_MAX_DIMS] = { 0 };
    int nd = t->ndim, m = nd - 1;
    if (!p->numel)
        return 0;
    if (nd == 0)
        return push(r, 0, 1, pi);
    /* Elements per index of each dimension; no overflow: the box is not
     * empty, so no dimension is 0 and these stay below numel. */
    inner[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--)
        inner[d] = inner[d + 1] * t->shape[d + 1];
    while (m > 0 && p->box[m] == t->shape[m])
        m--;
    uint64_t run = p->box[m] * inner[m];
    for (;;) {
        uint64_t s = p->offset[m] * inner[m];
        for (int d = 0; d < m; d++)
            s += (p->offset[d] + idx[d]) * inner[d];
        if (push(r, s, s + run, pi) != 0)
            return -1;
        int d = m - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < p->box[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return 0;
    }
}

static int by_start(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    if (x->s != y->s)
        return x->s < y->s ? -1 : 1;
    if (x->e != y->e)
        return x->e < y->e ? -1 : 1;
    return x->piece < y->piece ? -1 : x->piece > y->piece;
}

static int overlap(const struct ckpt_olmocore_tensor *t,
                   const struct range *a, const struct range *b,
                   uint64_t end, int same, struct ckpt_err *err)
{
    const char *fa = t->pieces[a->piece].file;
    const char *fb = t->pieces[b->piece].file;
    const char *hint = same ? " (--allow-replicas accepts identical "
                              "replicas)" : "";
    if (a->piece == b->piece)
        return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': elements "
                            "[%llu, %llu) are stored twice in %s", t->key,
                            (unsigned long long)b->s,
                            (unsigned long long)end, fa);
    return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': elements [%llu, "
                        "%llu) are stored in both %s and %s%s", t->key,
                        (unsigned long long)b->s, (unsigned long long)end,
                        fa, fb, hint);
}

static int gap(const struct ckpt_olmocore_tensor *t, uint64_t s, uint64_t e,
               struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': elements [%llu, "
                        "%llu) are in no file", t->key,
                        (unsigned long long)s, (unsigned long long)e);
}

static int sweep(const struct ckpt_olmocore_tensor *t, struct ranges *r,
                 int allow, struct ckpt_err *err)
{
    const struct range *prev = NULL;
    uint64_t at = 0;
    if (r->n)       /* v is NULL when nothing was pushed */
        qsort(r->v, r->n, sizeof(*r->v), by_start);
    for (size_t i = 0; i < r->n; i++) {
        const struct range *x = &r->v[i];
        if (prev && x->s < at) {
            int same = x->s == prev->s && x->e == prev->e;
            if (same && allow && x->piece != prev->piece)
                continue;
            return overlap(t, prev, x, x->e < at ? x->e : at, same, err);
        }
        if (x->s > at)
            return gap(t, at, x->s, err);
        at = x->e;
        prev = x;
    }
    return at < t->numel ? gap(t, at, t->numel, err) : 0;
}

int ckpt_olmocore_check_tiling(const struct ckpt_olmocore_tensor *t,
                               int allow_replicas, struct ckpt_err *err)
{
    struct ranges r = { NULL, 0, 0 };
    int rc = 0;
    for (size_t i = 0; i < t->npieces && rc == 0; i++) {
        const struct ckpt_olmocore_piece *p = &t->pieces[i];
        if (!p->ranges) {
            rc = box_ranges(t, i, &r);
            continue;
        }
        for (size_t k = 0; k < p->nranges && rc == 0; k++)
            rc = push(&r, p->ranges[2 * k], p->ranges[2 * k + 1], i);
    }
    if (rc != 0)
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "tensor '%s': more than "
                          "%u pieces", t->key, MAX_RANGES);
    else
        rc = sweep(t, &r, allow_replicas, err);
    free(r.v);
    return rc;
}
