/*
 * dcp.c - interpret a DCP `.metadata` pickle graph (see ckpt/dcp.h).
 *
 * Classes are matched by name, never by module: Metadata & co. lived in
 * torch.distributed._shard.checkpoint in 1.13 and in
 * torch.distributed.checkpoint since 2.0, and old checkpoints keep their
 * paths. Fields are read from the BUILD state by key, so added fields
 * (storage_meta, version, transform_descriptors) and missing ones (None
 * values dropped by __getstate__) are both fine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dcp.h"
#include "ckpt/util.h"
#include "dcp_int.h"

/* A metadata pickle of a huge checkpoint holds a few hundred thousand
 * chunks; this bounds hostile input, not real checkpoints. */
#define META_ARENA_LIMIT (2048u << 20)

const struct ckpt_pv *dcp_field(const struct ckpt_pv *obj, const char *name)
{
    if (!obj || obj->kind != CKPT_PV_CALL)
        return NULL;
    const struct ckpt_pv *st = obj->u.call.state, *v;
    if (!st)
        return NULL;
    if (st->kind == CKPT_PV_DICT)
        return ckpt_pv_dict_get(st, name);
    /* (dict, slots dict) from classes with __slots__. */
    if (st->kind == CKPT_PV_TUPLE && st->u.seq.n == 2) {
        v = ckpt_pv_dict_get(st->u.seq.v[0], name);
        return v ? v : ckpt_pv_dict_get(st->u.seq.v[1], name);
    }
    return NULL;
}

const char *dcp_class(const struct ckpt_pv *v)
{
    const struct ckpt_pv *g = ckpt_pv_call_global(v);
    return g ? g->u.global.name : NULL;
}

int dcp_is_none(const struct ckpt_pv *v)
{
    return !v || v->kind == CKPT_PV_NONE;
}

/* torch.Size((...)) or a plain tuple/list of non-negative ints into an
 * arena array. Returns the count, or -1. */
int dcp_dims(struct ckpt_arena *a, const struct ckpt_pv *v,
             const uint64_t **out)
{
    const struct ckpt_pv *g = ckpt_pv_call_global(v);
    if (g && !strcmp(g->u.global.name, "Size"))
        v = ckpt_pv_item(v->u.call.args, 0);
    if (!v || (v->kind != CKPT_PV_TUPLE && v->kind != CKPT_PV_LIST) ||
        v->u.seq.n > CKPT_MAX_DIMS)
        return -1;
    uint64_t *d = ckpt_arena_array(a, v->u.seq.n ? v->u.seq.n : 1,
                                   sizeof(*d));
    if (!d)
        return -1;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        int64_t x;
        if (ckpt_pv_get_int(v->u.seq.v[i], &x) != 0 || x < 0)
            return -1;
        d[i] = (uint64_t)x;
    }
    *out = d;
    return (int)v->u.seq.n;
}

/* "P\0fqn\0o1,o2" (tensor chunk) or "P\0fqn\0-" (byte item): the
 * storage_data lookup key; MetadataIndex equality ignores `index`. P is
 * the metadata file it came from, so replicas listed by several rank-local
 * files keep their own storage. */
const char *dcp_key(struct ckpt_arena *a, unsigned part, const char *fqn,
                    const uint64_t *offs, int ndim, size_t *len)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addf(&b, "%u", part);
    ckpt_buf_addch(&b, '\0');
    ckpt_buf_add(&b, fqn, strlen(fqn) + 1);
    if (ndim < 0)
        ckpt_buf_addch(&b, '-');
    for (int i = 0; i < ndim; i++)
        ckpt_buf_addf(&b, i ? ",%llu" : "%llu",
                      (unsigned long long)offs[i]);
    char *k = ckpt_arena_strndup(a, b.ptr, b.len);
    *len = b.len;
    ckpt_buf_release(&b);
    return k;
}

struct ckpt_dcp_meta *ckpt_dcp_meta_new(void)
{
    struct ckpt_dcp_meta *m = calloc(1, sizeof(*m));
    struct dcp_index *ix = calloc(1, sizeof(*ix));
    if (m)
        m->arena = ckpt_arena_new(META_ARENA_LIMIT);
    if (!m || !ix || !m->arena) {
        free(ix);
        ckpt_dcp_meta_free(m);
        return NULL;
    }
    m->index = ix;
    return m;
}

void ckpt_dcp_meta_free(struct ckpt_dcp_meta *m)
{
    if (!m)
        return;
    struct dcp_index *ix = m->index;
    if (ix) {
        tf_strmap_release(&ix->fqns);
        tf_strmap_release(&ix->storage);
        tf_strmap_release(&ix->files);
        free(ix);
    }
    ckpt_arena_free(m->arena);
    free(m);
}

const struct ckpt_dcp_entry *ckpt_dcp_find(const struct ckpt_dcp_meta *m,
                                           const char *fqn)
{
    const struct dcp_index *ix = m->index;
    uint64_t i;
    if (!tf_strmap_get(&ix->fqns, fqn, strlen(fqn), &i))
        return NULL;
    return &m->entries[i];
}

/* --- per-rank copies (ckpt_dcp_split_parts) ----------------------------- */

/* path with its last key suffixed (".rankP"), or NULL (no path: the fqn is
 * the key; *bad when the last key is a list index). */
static const struct ckpt_pv *suffixed_path(struct ckpt_arena *a,
                                           const struct ckpt_pv *path,
                                           const char *sfx, int *bad)
{
    if (!path)
        return NULL;
    size_t n = path->u.seq.n;
    const struct ckpt_pv *last = path->u.seq.v[n - 1];
    if (last->kind != CKPT_PV_STR) {
        *bad = 1;
        return NULL;
    }
    struct ckpt_pv *t = ckpt_pv_new(a, CKPT_PV_TUPLE);
    char *k = ckpt_xasprintf("%.*s%s", (int)last->u.s.len, last->u.s.p, sfx);
    struct ckpt_pv *ks = t ? ckpt_pv_str(a, k, strlen(k)) : NULL;
    free(k);
    for (size_t i = 0; ks && i + 1 < n; i++)
        if (ckpt_pv_push(a, t, path->u.seq.v[i]) != 0)
            return NULL;
    return ks && ckpt_pv_push(a, t, ks) == 0 ? t : NULL;
}

/* Entry e as part P stored it: renamed, its own storage or chunk. */
static int part_entry(struct ckpt_dcp_meta *m, const struct ckpt_dcp_entry *e,
                      size_t k, struct ckpt_dcp_entry *out,
                      struct ckpt_err *err)
{
    unsigned part = e->kind == CKPT_DCP_BYTES
                        ? (k ? e->copies[k - 1].part : e->part)
                        : e->chunks[k].part;
    char sfx[24];
    snprintf(sfx, sizeof(sfx), ".rank%u", part);
    *out = *e;
    char *fqn = ckpt_xasprintf("%s%s", e->fqn, sfx);
    out->fqn = ckpt_arena_strndup(m->arena, fqn, strlen(fqn));
    free(fqn);
    int bad = 0;
    out->path = suffixed_path(m->arena, e->path, sfx, &bad);
    if (bad)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': per-rank copies need a "
                            "key to rename, the last key of its path is a "
                            "list index", e->fqn);
    if (!out->fqn || (e->path && !out->path))
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (ckpt_dcp_find(m, out->fqn))
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': its per-rank copy "
                            "'%s' would replace the key of that name",
                            e->fqn, out->fqn);
    out->copies = NULL;
    out->ncopies = out->copycap = 0;
    out->part = part;
    if (e->kind == CKPT_DCP_BYTES) {
        out->st = k ? e->copies[k - 1].st : e->st;
        return 0;
    }
    out->chunks = &e->chunks[k];
    out->nchunks = out->chunkcap = 1;
    return 0;
}

int ckpt_dcp_split_parts(struct ckpt_dcp_meta *m, size_t i,
                         struct ckpt_err *err)
{
    struct dcp_index *ix = m->index;
    const struct ckpt_dcp_entry *e = &m->entries[i];
    size_t k = e->kind == CKPT_DCP_BYTES ? 1 + e->ncopies : e->nchunks;
    if (e->kind == CKPT_DCP_TENSOR)
        for (size_t c = 0; c < e->nchunks; c++)
            for (int d = 0; d < e->ndim; d++)
                if (e->chunks[c].offsets[d] ||
                    e->chunks[c].sizes[d] != e->size[d])
                    return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': "
                                        "per-rank copies need every rank's "
                                        "chunk to be the whole tensor",
                                        e->fqn);
    size_t n = m->n - 1 + k;
    struct ckpt_dcp_entry *v = ckpt_arena_array(m->arena, n,
                                                sizeof(*v));
    if (!v)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    memcpy(v, m->entries, i * sizeof(*v));
    for (size_t p = 0; p < k; p++)
        if (part_entry(m, e, p, &v[i + p], err) != 0)
            return -1;
    memcpy(v + i + k, m->entries + i + 1, (m->n - i - 1) * sizeof(*v));
    m->entries = v;
    m->n = m->cap = n;
    tf_strmap_release(&ix->fqns);
    for (size_t x = 0; x < n; x++)
        if (tf_strmap_put(&ix->fqns, v[x].fqn, strlen(v[x].fqn), x) != 0)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    return 0;
}

static int root_object(const struct ckpt_pv *root, const char *name,
                       struct ckpt_err *err)
{
    const char *cls = dcp_class(root);
    if (!cls || strcmp(cls, "Metadata"))
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: not DCP metadata (top-level %s %s)", name,
                            ckpt_pv_kind_name(root->kind), cls ? cls : "");
    return 0;
}

static int parse(struct ckpt_dcp_meta *m, const void *data, size_t len,
                 const char *name, int sizes_only, struct ckpt_err *err)
{
    /* Metadata grows with tensors times chunks: the arena bounds it. */
    struct ckpt_pickle_opts po = { .name = name,
                                   .allow = ckpt_torch_allow_metadata,
                                   .max_values = SIZE_MAX,
                                   .max_bytes = SIZE_MAX };
    struct ckpt_pv *root;
    if (ckpt_pickle_load(m->arena, data, len, &po, &root, NULL, err) != 0)
        return -1;
    if (ckpt_torch_check_object(root, name, err) != 0 ||
        root_object(root, name, err) != 0)
        return -1;
    if (dcp_storage_data(m, dcp_field(root, "storage_data"), name,
                         err) != 0)
        return -1;
    if (sizes_only)
        return 0;
    int rc;
    const struct ckpt_pv *ver = dcp_field(root, "version");
    if (ver && ver->kind == CKPT_PV_STR && !m->version)
        m->version = ver->u.s.p;
    rc = dcp_state_dict(m, dcp_field(root, "state_dict_metadata"),
                        dcp_field(root, "planner_data"), name, err);
    ((struct dcp_index *)m->index)->part++;
    return rc;
}

int ckpt_dcp_meta_add(struct ckpt_dcp_meta *m, const void *data, size_t len,
                      const char *name, struct ckpt_err *err)
{
    return parse(m, data, len, name, 0, err);
}

void ckpt_dcp_filereqs_free(struct ckpt_dcp_filereq *reqs, size_t n)
{
    if (!reqs)
        return;
    for (size_t i = 0; i < n; i++)
        free(reqs[i].name);
    free(reqs);
}

int ckpt_dcp_required_sizes(const void *data, size_t len,
                            struct ckpt_dcp_filereq **out, size_t *n,
                            struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = ckpt_dcp_meta_new();
    *out = NULL;
    *n = 0;
    if (!m)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    int rc = parse(m, data, len, ".metadata", 1, err);
    if (rc == 0) {
        dcp_sort_files(m);
        *out = ckpt_xcalloc(m->nfiles ? m->nfiles : 1, sizeof(**out));
        for (size_t i = 0; i < m->nfiles; i++) {
            (*out)[i].name = ckpt_xstrdup(m->files[i].name);
            (*out)[i].min_size = m->files[i].min_size;
        }
        *n = m->nfiles;
    }
    ckpt_dcp_meta_free(m);
    return rc;
}
