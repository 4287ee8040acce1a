/*
 * olmo/plan_local.c - OLMo `local` steps (LocalShardedCheckpointer):
 * model/rank{R}.pt holds rank R's FSDP flat-parameter shards (olmo/flat_params.c),
 * optim/rank{R}.pt its optim.state_dict(), train/rank{R}.pt its trainer
 * state, metadata.yaml the world size (docs/formats/olmo.md; OLMo
 * olmo/checkpoint.py LocalShardedCheckpointer.unshard_checkpoint).
 *
 * The plan is built from the pickles alone, one rank file at a time, each
 * parsed in an arena freed before the next (rank 0's graphs are kept: its
 * model file names the parameters, its param_groups are the output's).
 * Every piece of a parameter a rank holds is a range of the parameter's
 * row-major flattening; engine/flat.c cuts it into boxes, which become chunks
 * located in the rank file (its storage record, the full tensor's
 * strides), so the DCP engine copies the bytes straight from the rank
 * files to the output. Optimizer state (olmo/local_optim.c) lands on the same
 * ranges. Every element must be held exactly once. Output, as OLMo's
 * unsharder:
 * model.pt {fqn: tensor}, optim.pt {"state": {id: {...}}, "param_groups":
 * rank 0's, "_fsdp_wrapped_module." removed from the names}, train.pt a
 * byte copy of train/rank0.pt (outputs/torch_layout.c), config.yaml (unshard.c).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "ckpt/yaml.h"
#include "plan_local.h"
#include "trainers/trainer.h"

#define MAX_PKL (512u << 20)
#define MAX_RANKS 65536
#define MAX_META (1u << 20)

/* --- files ------------------------------------------------------------- */

/* world_size from metadata.yaml (OLMo _LocalShardedCheckpointerMetadata,
 * saved with OmegaConf). */
static int world_size(struct ujob *j, int *n, struct ckpt_err *err)
{
    struct usrc *s;
    char *path = ckpt_path_join(j->src.dir, "metadata.yaml");
    int rc = 0;
    if (!uns_fs_is_file(j, path))
        rc = ckpt_err_set(err, CKPT_ENOTFOUND, "'%s' is missing: the "
                          "checkpoint is incomplete", path);
    else if (uns_src_get(j, "metadata.yaml", &s, err) != 0)
        rc = -1;
    else if (s->size > MAX_META)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' is larger than %u "
                          "bytes", path, MAX_META);
    char *text = rc ? NULL : ckpt_xmalloc((size_t)s->size + 1);
    cJSON *doc = NULL;
    if (rc == 0 && uns_src_read(s, 0, text, (size_t)s->size, err) != 0)
        rc = -1;
    if (rc == 0 && ckpt_yaml_parse(text, (size_t)s->size, path, &doc,
                                   err) != 0)
        rc = -1;
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(doc, "world_size");
    if (rc == 0 && (!cJSON_IsNumber(ws) || ws->valuedouble < 1 ||
                    ws->valuedouble > MAX_RANKS ||
                    ws->valuedouble != (double)(int)ws->valuedouble))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': no world_size between "
                          "1 and %d", path, MAX_RANKS);
    if (rc == 0)
        *n = (int)ws->valuedouble;
    cJSON_Delete(doc);
    free(text);
    free(path);
    return rc;
}

/* Every rank file metadata.yaml promises, before any is read: one
 * listing per directory (a LIST remotely, however many ranks). */
static int check_ranks(struct lplan *p, struct ckpt_err *err)
{
    static const char *const dirs[] = { "model", "optim", "train" };
    int rc = 0;
    for (int d = 0; rc == 0 && d < 3; d++) {
        char *dir = ckpt_path_join(p->j->src.dir, dirs[d]);
        struct uns_dir l;
        if (uns_fs_list(p->j, dir, 0, &l, err) != 0) {
            free(dir);
            return -1;
        }
        for (int r = 0; rc == 0 && r < p->nranks; r++) {
            char name[64];
            snprintf(name, sizeof(name), "rank%d.pt", r);
            if (!uns_fs_has_file(&l, name))
                rc = ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s/%s' is "
                                  "missing (metadata.yaml: world_size %d)",
                                  p->j->src.dir, dirs[d], name, p->nranks);
        }
        /* Model and optimizer files are read rank after rank: remote
         * ones are fetched ahead (sources/prefetch.c). (train/rank0.pt is read
         * and copied whole by outputs/torch_layout.c.) */
        for (int r = 0; rc == 0 && d < 2 && r < p->nranks; r++) {
            char name[64], rel[80];
            snprintf(name, sizeof(name), "rank%d.pt", r);
            snprintf(rel, sizeof(rel), "%s/%s", dirs[d], name);
            const char *key = ckpt_arena_strdup(p->j->plan.meta->arena, rel);
            rc = key ? uns_src_prefetch(p->j, key, uns_fs_find(&l, name), err)
                     : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        }
        uns_fs_free(&l);
        free(dir);
    }
    return rc;
}

/* The name stays in the metadata arena: src_get keeps it as a key. */
int uns_olmolocal_load(struct lplan *p, const char *dir, int r,
                       struct ckpt_arena *a, ckpt_pickle_allow_fn allow,
                       const char **rel, struct usrc **src,
                       struct ckpt_tzip **z, struct ckpt_pv **root,
                       struct ckpt_err *err)
{
    char name[64];
    struct ckpt_rd rd;
    struct src_cache cache;
    const struct ckpt_tzip_entry *pe = NULL;
    char *pkl = NULL;
    size_t plen;
    snprintf(name, sizeof(name), "%s/rank%d.pt", dir, r);
    *rel = ckpt_arena_strdup(p->j->plan.meta->arena, name);
    *z = NULL;
    if (!*rel)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (uns_src_get(p->j, *rel, src, err) != 0)
        return -1;
    /* Remote: the zip's records and data.pkl in a few ranged GETs. */
    uns_src_rd_cached(&rd, &cache, *src, 0, (*src)->size);
    /* A whole rank's state: bounded by the arena. */
    struct ckpt_pickle_opts po = { .name = "data.pkl", .allow = allow,
                                   .max_values = SIZE_MAX,
                                   .max_bytes = SIZE_MAX };
    int rc = ckpt_tzip_open(z, &rd, err);
    if (rc == 0 && !(pe = ckpt_tzip_find(*z, "data.pkl")))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "record 'data.pkl' missing");
    if (rc == 0)
        rc = ckpt_tzip_read(*z, &rd, pe, MAX_PKL, &pkl, &plen, err);
    if (rc == 0)
        rc = ckpt_pickle_load(a, pkl, plen, &po, root, NULL, err);
    free(pkl);
    uns_src_cache_release(&cache);
    if (rc != 0 && !strstr(err->msg, *rel))
        ckpt_err_prefix(err, "%s", *rel);
    return rc;
}

int uns_olmolocal_record(const struct ckpt_tzip *z, const struct ckpt_tensor *t,
                         const char *rel, const char *what,
                         const struct ckpt_tzip_entry **out,
                         struct ckpt_err *err)
{
    char rec[64];
    snprintf(rec, sizeof(rec), "data/%s", t->key);
    *out = ckpt_tzip_find(z, rec);
    if (!*out || ckpt_tensor_check_bounds(t, rel, err) != 0 ||
        (*out)->size < t->storage_nbytes)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': storage record '%s' "
                            "of %s is missing or short", rel, rec, what);
    return 0;
}

struct lslice *uns_olmolocal_add_slice(struct lslices *s)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        s->v = ckpt_xreallocarray(s->v, s->cap, sizeof(*s->v));
    }
    memset(&s->v[s->n], 0, sizeof(s->v[0]));
    return &s->v[s->n++];
}

/* --- model files ------------------------------------------------------- */

/* Rank r's flat parameters must be rank 0's: same modules, parameters,
 * shapes and dtypes; only the ranges differ. */
static int same_params(struct lplan *p, const struct lmodel *m, int r,
                       const char *rel, struct ckpt_err *err)
{
    const struct lmodel *m0 = &p->m0;
    if (m->nflats != m0->nflats || m->npieces != m0->npieces)
        return ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d hold "
                            "different flat parameters (%zu and %zu, with "
                            "%zu and %zu parameters; %s)", r, m0->nflats,
                            m->nflats, m0->npieces, m->npieces, rel);
    for (size_t i = 0; i < m->nflats; i++) {
        const struct lflat *a = &m0->flats[i], *b = &m->flats[i];
        if (strcmp(a->module, b->module) || a->n != b->n ||
            a->data.dtype != b->data.dtype)
            return ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d "
                                "disagree on flat parameter %zu (module "
                                "'%s', %zu parameters, %s; %s)", r, i,
                                b->module, b->n, b->data.dtype->name, rel);
    }
    for (size_t i = 0; i < m->npieces; i++) {
        const struct lpiece *a = &m0->pieces[i], *b = &m->pieces[i];
        char sa[128], sb[128];
        if (strcmp(a->fqn, b->fqn))
            return ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d "
                                "disagree on parameter %zu: '%s' and '%s' "
                                "(%s)", r, i, a->fqn, b->fqn, rel);
        if (a->ndim != b->ndim ||
            memcmp(a->size, b->size, sizeof(*a->size) * (size_t)a->ndim))
            return ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d "
                                "disagree on the shape of parameter '%s': "
                                "%s and %s (%s)", r, a->fqn,
                                uns_fmt_shape(sa, sizeof(sa), a->size, a->ndim),
                                uns_fmt_shape(sb, sizeof(sb), b->size, b->ndim), rel);
    }
    return 0;
}

/* The pieces rank r holds become slices of their parameters. */
static int add_pieces(struct lplan *p, const struct lmodel *m, int r,
                      const char *rel, struct usrc *src,
                      const struct ckpt_tzip *z, struct ckpt_err *err)
{
    for (size_t i = 0; i < m->nflats; i++) {
        const struct lflat *f = &m->flats[i];
        const struct ckpt_tzip_entry *ze;
        char what[160];
        snprintf(what, sizeof(what), "flat parameter of module '%s'",
                 f->module);
        if (uns_olmolocal_record(z, &f->data, rel, what, &ze, err) != 0)
            return -1;
        for (size_t k = f->first; k < f->first + f->n; k++) {
            const struct lpiece *q = &m->pieces[k];
            if (!q->held)
                continue;
            struct lslice *s = uns_olmolocal_add_slice(&p->params[k].sl);
            s->rank = r;
            s->start = q->start;
            s->count = q->count;
            s->src = src;
            s->data = ze->data_off;
            uns_src_note_record(src, ze->data_off, ze->size, ze->crc, z->prefix,
                                ze->name);
            s->step = f->data.stride[0];
            s->soff = f->data.storage_offset + (int64_t)q->at * s->step;
            s->big_endian = z->big_endian;
        }
    }
    return 0;
}

/* Rank 0 names the parameters: one output tensor per original
 * parameter, in flattening order. */
static int init_params(struct lplan *p, struct ckpt_err *err)
{
    const struct lmodel *m = &p->m0;
    p->params = ckpt_xcalloc(m->npieces + 1, sizeof(*p->params));
    for (size_t i = 0; i < m->npieces; i++) {
        const struct lpiece *q = &m->pieces[i];
        p->params[i].p = q;
        p->params[i].dtype = m->flats[q->flat].data.dtype;
        if (tf_strmap_get(&p->byfqn, q->fqn, strlen(q->fqn), NULL))
            return ckpt_err_set(err, CKPT_EFORMAT, "'model/rank0.pt': "
                                "parameter '%s' is in two flat parameters",
                                q->fqn);
        if (tf_strmap_put(&p->byfqn, q->fqn, strlen(q->fqn), i) != 0)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    return 0;
}

static int model_rank(struct lplan *p, int r, struct ckpt_err *err)
{
    struct ckpt_arena *a = r ? ckpt_arena_new(2048ULL << 20) : p->j->plan.arena;
    struct lmodel m = { 0 };
    struct lmodel *mp = r ? &m : &p->m0;
    const char *rel;
    struct usrc *src;
    struct ckpt_tzip *z = NULL;
    struct ckpt_pv *root;
    int rc = a ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = uns_olmolocal_load(p, "model", r, a, uns_olmoflat_allow, &rel,
                                &src, &z, &root, err);
    if (rc == 0)
        rc = uns_olmoflat_read(a, root, rel, mp, err);
    if (rc == 0)
        rc = r ? same_params(p, mp, r, rel, err) : init_params(p, err);
    if (rc == 0)
        rc = add_pieces(p, mp, r, rel, src, z, err);
    ckpt_tzip_free(z);
    uns_olmoflat_release(&m);
    if (r)
        ckpt_arena_free(a);
    return rc;
}

/* --- coverage ------------------------------------------------------------ */

static int cmp_start(const void *a, const void *b)
{
    const struct lslice *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->rank - y->rank;
}

/* Every element of a tensor of numel elements in exactly one slice; what
 * names the tensor, dir the rank files ("model"). */
static int cover(const struct lslices *sl, uint64_t numel, const char *what,
                 const char *dir, struct ckpt_err *err)
{
    struct lslice *v = ckpt_xmalloc((sl->n + 1) * sizeof(*v));
    uint64_t pos = 0;
    size_t i = 0;
    int prev = -1, rc = 0;
    if (sl->n)
        memcpy(v, sl->v, sl->n * sizeof(*v));
    qsort(v, sl->n, sizeof(*v), cmp_start);
    for (; i < sl->n && rc == 0 && v[i].start <= pos; i++) {
        uint64_t end = v[i].start + v[i].count;
        if (v[i].start < pos && v[i].count)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: elements [%llu, %llu) "
                              "are in both %s/rank%d.pt and %s/rank%d.pt",
                              what, (unsigned long long)v[i].start,
                              (unsigned long long)(pos < end ? pos : end),
                              dir, prev, dir, v[i].rank);
        if (end > pos) {
            pos = end;
            prev = v[i].rank;
        }
    }
    if (rc == 0 && pos < numel)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: elements [%llu, %llu) of "
                          "%llu are in none of %s/rank*.pt", what,
                          (unsigned long long)pos,
                          (unsigned long long)(i < sl->n ? v[i].start
                                                         : numel),
                          (unsigned long long)numel, dir);
    free(v);
    return rc;
}

static int cover_params(struct lplan *p, struct ckpt_err *err)
{
    char what[512];
    for (size_t i = 0; i < p->m0.npieces; i++) {
        const struct lpiece *q = p->params[i].p;
        snprintf(what, sizeof(what), "parameter '%s'", q->fqn);
        if (cover(&p->params[i].sl, q->numel, what, "model", err) != 0)
            return -1;
    }
    return 0;
}

static int cover_values(struct lplan *p, struct ckpt_err *err)
{
    char what[512];
    for (size_t i = 0; i < p->nstates; i++) {
        const struct lstate *s = &p->states[i];
        for (size_t k = 0; k < s->n; k++) {
            const struct lvalue *x = &s->v[k];
            if (x->kind != V_SHARDED)
                continue;
            snprintf(what, sizeof(what), "'%s' of optimizer state %lld "
                     "('%s')", x->key, (long long)s->id, s->fqn);
            if (cover(&x->sl, p->params[s->param].p->numel, what, "optim",
                      err) != 0)
                return -1;
        }
    }
    return 0;
}

/* --- entries ------------------------------------------------------------- */

static struct ckpt_pv *path2(struct ckpt_arena *a, const char *k0,
                             const char *k1)
{
    struct ckpt_pv *t = ckpt_pv_new(a, CKPT_PV_TUPLE);
    if (!t || ckpt_pv_push(a, t, ckpt_pv_str(a, k0, strlen(k0))) != 0 ||
        ckpt_pv_push(a, t, ckpt_pv_str(a, k1, strlen(k1))) != 0)
        return NULL;
    return t;
}

/* ("optim", "state", id, key) */
static struct ckpt_pv *state_path(struct ckpt_arena *a, int64_t id,
                                  const char *key)
{
    struct ckpt_pv *t = path2(a, "optim", "state");
    if (!t || ckpt_pv_push(a, t, ckpt_pv_int(a, id)) != 0 ||
        ckpt_pv_push(a, t, ckpt_pv_str(a, key, strlen(key))) != 0)
        return NULL;
    return t;
}

/* Tensor entry e of the given shape from slices: each slice's range cut
 * into boxes (engine/flat.c), each box one chunk read at the full tensor's
 * row-major strides from the slice's start. */
static int tensor_entry(struct lplan *p, struct ckpt_dcp_entry *e,
                        const struct ckpt_dtype *dt, int ndim,
                        const uint64_t *size, const struct lslices *sl,
                        struct ckpt_err *err)
{
    struct ckpt_arena *ma = p->j->plan.meta->arena;
    struct lloc *lt = &p->locs[e - p->j->plan.meta->entries];
    size_t cap = sl->n * (2 * (size_t)(ndim ? ndim : 1)) + 1;
    struct flat_box boxes[2 * CKPT_MAX_DIMS];
    int64_t row[CKPT_MAX_DIMS];
    e->kind = CKPT_DCP_TENSOR;
    e->dtype = dt;
    e->ndim = ndim;
    e->size = size;
    e->chunks = ckpt_arena_array(ma, cap, sizeof(*e->chunks));
    lt->loc = ckpt_xcalloc(cap, sizeof(*lt->loc));
    lt->stride = ckpt_arena_array(ma, cap * ((size_t)ndim + 1), 8);
    if (!e->chunks || !lt->stride)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    e->chunkcap = cap;
    /* Row-major strides; the shape's numel fits (olmo/flat_params.c checked). */
    for (int d = ndim - 1; d >= 0; d--)
        row[d] = d == ndim - 1 ? 1 : row[d + 1] * (int64_t)size[d + 1];
    for (size_t i = 0; i < sl->n; i++) {
        const struct lslice *s = &sl->v[i];
        int nb = uns_flat_boxes(ndim, size, s->start, s->count, boxes,
                                2 * CKPT_MAX_DIMS);
        if (nb < 0)
            return ckpt_err_set(err, CKPT_EINTERNAL, "'%s': range does "
                                "not fit", e->fqn);
        for (int b = 0; b < nb; b++) {
            size_t c = e->nchunks++;
            uint64_t *off = ckpt_arena_array(ma, (size_t)ndim + 1, 8);
            uint64_t *len = ckpt_arena_array(ma, (size_t)ndim + 1, 8);
            int64_t *st = &lt->stride[c * ((size_t)ndim + 1)];
            if (!off || !len)
                return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
            memcpy(off, boxes[b].off, sizeof(*off) * (size_t)ndim);
            memcpy(len, boxes[b].len, sizeof(*len) * (size_t)ndim);
            for (int d = 0; d < ndim; d++)
                st[d] = row[d] * s->step;
            e->chunks[c].offsets = off;
            e->chunks[c].sizes = len;
            e->chunks[c].st.file = s->src->name;
            e->chunks[c].st.offset = s->data;
            lt->loc[c] = *s;
            lt->loc[c].soff = s->soff +
                (int64_t)(boxes[b].first - s->start) * s->step;
        }
    }
    return 0;
}

static int make_entries(struct lplan *p, struct ckpt_err *err)
{
    static const uint64_t zero = 0;     /* shape of 0-d tensors */
    struct ckpt_dcp_meta *m = p->j->plan.meta;
    struct ckpt_arena *a = p->j->plan.arena;
    size_t n = p->m0.npieces + 1;
    for (size_t i = 0; i < p->nstates; i++)
        n += p->states[i].n;
    m->entries = ckpt_arena_array(m->arena, n + 1, sizeof(*m->entries));
    p->locs = ckpt_xcalloc(n + 1, sizeof(*p->locs));
    if (!m->entries)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    /* Tensors first: plan_tensors numbers them in entry order. */
    for (size_t i = 0; i < p->m0.npieces; i++) {
        const struct lpiece *q = p->params[i].p;
        struct ckpt_dcp_entry *e = &m->entries[m->n++];
        e->fqn = ckpt_arena_strdup(a, q->fqn);
        e->path = path2(a, "model", q->fqn);
        if (!e->fqn || !e->path)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        if (tensor_entry(p, e, p->params[i].dtype, q->ndim, q->size,
                         &p->params[i].sl, err) != 0)
            return -1;
    }
    for (int pass = 0; pass < 2; pass++)    /* tensors, then the rest */
        for (size_t i = 0; i < p->nstates; i++) {
            const struct lstate *s = &p->states[i];
            for (size_t k = 0; k < s->n; k++) {
                struct lvalue *x = &s->v[k];
                if ((x->kind == V_PLAIN) != pass)
                    continue;
                struct ckpt_dcp_entry *e = &m->entries[m->n];
                const struct lpiece *q = s->param >= 0 && x->kind ==
                    V_SHARDED ? p->params[s->param].p : NULL;
                x->entry = m->n++;
                char *fqn = ckpt_xasprintf("optim.state.%lld.%s",
                                           (long long)s->id, x->key);
                e->fqn = ckpt_arena_strdup(a, fqn);
                free(fqn);
                e->path = state_path(a, s->id, x->key);
                if (!e->fqn || !e->path)
                    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
                if (pass) {
                    e->kind = CKPT_DCP_BYTES;
                } else if (tensor_entry(p, e, x->dtype, q ? q->ndim : 0,
                                        q ? q->size : &zero, &x->sl,
                                        err) != 0) {
                    return -1;
                }
            }
        }
    struct ckpt_dcp_entry *e = &m->entries[m->n++];
    e->fqn = "optim.param_groups";
    e->kind = CKPT_DCP_BYTES;
    e->path = path2(a, "optim", "param_groups");
    return e->path ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

static int locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                  struct ckpt_err *err)
{
    struct lplan *p = j->plan.fmtplan;
    size_t ei = (size_t)(t->e - j->plan.meta->entries);
    size_t ci = (size_t)(c->meta - t->e->chunks);
    const struct lslice *l = &p->locs[ei].loc[ci];
    (void)err;
    c->src = l->src;
    c->item_off = 0;
    c->data = l->data;
    memcpy(c->stride, &p->locs[ei].stride[ci * ((size_t)t->e->ndim + 1)],
           sizeof(int64_t) * (size_t)t->e->ndim);
    c->soff = l->soff;
    c->big_endian = l->big_endian;
    return 0;
}

/* --- output graph -------------------------------------------------------- */

static int put(struct ckpt_arena *a, struct ckpt_pv *d, struct ckpt_pv *k,
               struct ckpt_pv *v)
{
    return k && v ? ckpt_pv_dict_add(a, d, k, v) : -1;
}

static struct ckpt_pv *str(struct ckpt_arena *a, const char *s)
{
    return ckpt_pv_str(a, s, strlen(s));
}

/* {"model": {fqn: tensor}, "optim": {"state": {id: {key: value}},
 * "param_groups": rank 0's}}; values and paths of every entry. */
static int build_root(struct lplan *p, struct ckpt_pv **root,
                      struct ckpt_err *err)
{
    struct ujob *j = p->j;
    struct ckpt_arena *a = j->plan.arena;
    struct ckpt_dcp_meta *m = j->plan.meta;
    struct ckpt_pv *model = ckpt_pv_new(a, CKPT_PV_DICT);
    struct ckpt_pv *optim = ckpt_pv_new(a, CKPT_PV_DICT);
    struct ckpt_pv *state = ckpt_pv_new(a, CKPT_PV_DICT);
    struct ckpt_rd rd;
    int rc = 0;
    j->plan.values = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.values));
    j->plan.paths = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.paths));
    *root = ckpt_pv_new(a, CKPT_PV_DICT);
    if (!model || !optim || !state || !*root)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < m->n; i++)
        j->plan.paths[i] = m->entries[i].path;
    for (size_t i = 0; rc == 0 && i < p->m0.npieces; i++)
        rc = put(a, model, str(a, m->entries[i].fqn),
                 j->plan.values[i] = uns_tree_tensor(j, &j->plan.tensors[i]));
    for (size_t i = 0; rc == 0 && i < p->nstates; i++) {
        const struct lstate *s = &p->states[i];
        struct ckpt_pv *d = ckpt_pv_new(a, CKPT_PV_DICT);
        rc = put(a, state, ckpt_pv_int(a, s->id), d);
        for (size_t k = 0; rc == 0 && k < s->n; k++) {
            const struct lvalue *x = &s->v[k];
            struct ckpt_pv *v = x->kind == V_PLAIN ? x->plain
                                : uns_tree_tensor(j, &j->plan.tensors[x->entry]);
            j->plan.values[x->entry] = v;
            rc = put(a, d, str(a, x->key), v);
        }
    }
    if (rc == 0)
        rc = put(a, optim, str(a, "state"), state);
    if (rc == 0)
        rc = put(a, optim, str(a, "param_groups"), p->groups);
    if (rc == 0)
        rc = put(a, *root, str(a, "model"), model);
    if (rc == 0)
        rc = put(a, *root, str(a, "optim"), optim);
    if (rc != 0)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    j->plan.values[m->n - 1] = p->groups;
    /* Byte items keep rank 0's storages (a tensor among the param_groups)
     * as records of optim.pt. */
    uns_src_rd(&rd, p->osrc0, 0, p->osrc0->size);
    for (size_t i = 0; i < m->n; i++) {
        if (m->entries[i].kind != CKPT_DCP_BYTES)
            continue;
        j->plan.objects++;
        if (uns_tree_remap(j, &m->entries[i], j->plan.values[i], p->oz0, &rd,
                           p->osrc0, err) != 0)
            return -1;
    }
    return 0;
}

static void plan_release(struct lplan *p)
{
    for (size_t i = 0; p->params && i < p->m0.npieces; i++)
        free(p->params[i].sl.v);
    free(p->params);
    for (size_t i = 0; i < p->nstates; i++) {
        for (size_t k = 0; k < p->states[i].n; k++)
            free(p->states[i].v[k].sl.v);
        free(p->states[i].v);
    }
    free(p->states);
    if (p->locs && p->j->plan.meta)
        for (size_t i = 0; i < p->j->plan.meta->n; i++)
            free(p->locs[i].loc);
    free(p->locs);
    free(p->gfqn);
    tf_strmap_release(&p->byfqn);
    tf_strmap_release(&p->byid);
    tf_strmap_release(&p->gbyid);
    ckpt_tzip_free(p->oz0);
    uns_olmoflat_release(&p->m0);
}

int uns_olmolocal_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct lplan p;
    struct ckpt_pv *root;
    memset(&p, 0, sizeof(p));
    p.j = j;
    int rc = uns_plan_own_init(j, src, "metadata.yaml", &p, locate, err);
    if (rc == 0)
        rc = world_size(j, &p.nranks, err);
    if (rc == 0)
        rc = check_ranks(&p, err);
    /* Model files first: the optimizer's ranges are their ranges. */
    for (int r = 0; rc == 0 && r < p.nranks; r++)
        rc = model_rank(&p, r, err);
    if (rc == 0)
        rc = cover_params(&p, err);
    for (int r = 0; rc == 0 && r < p.nranks; r++)
        rc = uns_olmooptim_rank(&p, r, err);
    if (rc == 0)
        rc = cover_values(&p, err);
    if (rc == 0)
        rc = uns_olmooptim_clean_names(&p, err);
    if (rc == 0)
        rc = make_entries(&p, err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = build_root(&p, &root, err);
    if (rc == 0)
        rc = trainer_layout(j, root, err);
    if (rc != 0 && err->msg[0] && !strstr(err->msg, src))
        ckpt_err_prefix(err, "%s", src);
    plan_release(&p);
    j->plan.fmtplan = NULL;
    return rc;
}
