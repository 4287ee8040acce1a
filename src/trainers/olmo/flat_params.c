/*
 * olmo/flat_params.c - what one rank's model file of an OLMo `local` step holds.
 *
 * LocalShardedCheckpointer saves, per FSDP module, each handle's
 * flat_param.data (this rank's 1-D shard of the flat parameter: the
 * original parameters flattened and concatenated, padded at the right end
 * to a multiple of the world size) and the FlatParameter attributes that
 * say which parameters it holds (OLMo olmo/checkpoint.py
 * _get_flat_param_state_to_save, _iter_flat_param_shards):
 *   torch >= 2.1  _shard_param_infos: one _ShardParamInfo(in_shard,
 *                 offset_in_shard, numel_in_shard, intra_param_start_idx,
 *                 intra_param_end_idx inclusive) per parameter; offsets
 *                 may skip alignment padding between parameters.
 *   torch <= 2.0.1 _shard_indices (first, last parameter held) and
 *                 _shard_param_offsets ((start, end inclusive) per held
 *                 parameter); the held slices follow each other from
 *                 element 0 of the data.
 * Both name the parameters by _fqns (relative to the module) and _shapes.
 * As in OLMo, a torch <= 2.0.1 file is recognised by _shard_indices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "flat_params.h"

int uns_olmoflat_allow(void *ud, const char *module, const char *name)
{
    /* The NamedTuple is pickled by reference to its class: torch >= 2.1
     * keeps it in _flat_param, torch 2.0 in flat_param. */
    if ((!strcmp(module, "torch.distributed.fsdp._flat_param") ||
         !strcmp(module, "torch.distributed.fsdp.flat_param")) &&
        !strcmp(name, "_ShardParamInfo"))
        return 0;
    return ckpt_torch_allow_tensor(ud, module, name);
}

/* --- small readers -------------------------------------------------------- */

static const struct ckpt_pv *seq_of(const struct ckpt_pv *v)
{
    return v && (v->kind == CKPT_PV_TUPLE || v->kind == CKPT_PV_LIST)
           ? v : NULL;
}

static int get_u64(const struct ckpt_pv *v, uint64_t *out)
{
    int64_t x;
    if (!v || v->kind == CKPT_PV_BOOL || ckpt_pv_get_int(v, &x) != 0 ||
        x < 0)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

/* A torch.Size(tuple) or a plain tuple/list of sizes. */
static int shape_of(struct ckpt_arena *a, const struct ckpt_pv *v,
                    struct lpiece *p)
{
    if (v && v->kind == CKPT_PV_CALL &&
        ckpt_pv_is_global(ckpt_pv_call_global(v), "torch", "Size"))
        v = ckpt_pv_item(v->u.call.args, 0);
    if (!seq_of(v) || v->u.seq.n > CKPT_MAX_DIMS)
        return -1;
    uint64_t *size = ckpt_arena_array(a, v->u.seq.n + 1, sizeof(*size));
    if (!size)
        return -1;
    p->ndim = (int)v->u.seq.n;
    p->numel = 1;
    for (int d = 0; d < p->ndim; d++)
        if (get_u64(v->u.seq.v[d], &size[d]) != 0 ||
            ckpt_mul_u64(p->numel, size[d], &p->numel) != 0)
            return -1;
    p->size = size;
    return 0;
}

char *uns_olmoflat_strip(struct ckpt_arena *a, const char *s)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    const char *hit;
    while ((hit = strstr(s, OLMOFLAT_WRAPPED)) != NULL) {
        ckpt_buf_add(&b, s, (size_t)(hit - s));
        s = hit + strlen(OLMOFLAT_WRAPPED);
    }
    ckpt_buf_addstr(&b, s);
    char *out = ckpt_arena_strndup(a, b.ptr, b.len);
    ckpt_buf_release(&b);
    return out;
}

/* The module's name stripped, then "." and rel unless it is empty. */
static char *root_fqn(struct ckpt_arena *a, const char *name,
                      const struct ckpt_pv *rel)
{
    const char *prefix = uns_olmoflat_strip(a, name);
    if (!prefix)
        return NULL;
    size_t pl = strlen(prefix), at = pl ? pl + 1 : 0;
    char *s = ckpt_arena_alloc(a, at + rel->u.s.len + 1);
    if (!s)
        return NULL;
    memcpy(s, prefix, pl);
    if (pl)
        s[pl] = '.';
    memcpy(s + at, rel->u.s.p, rel->u.s.len);
    s[at + rel->u.s.len] = '\0';
    return s;
}

/* --- one handle ----------------------------------------------------------- */

struct rdr {
    struct ckpt_arena *a;
    const char *file;
    struct lmodel *m;
    struct ckpt_err *err;
};

static int bad(struct rdr *r, const struct lflat *f, const char *what)
{
    return ckpt_err_set(r->err, CKPT_EFORMAT, "'%s': flat parameter of "
                        "module '%s': %s", r->file, f->module, what);
}

/* Piece p holds its elements [start, end] (inclusive), stored from
 * element `at` of f's data on. */
static int hold(struct rdr *r, const struct lflat *f, struct lpiece *p,
                uint64_t start, uint64_t end, uint64_t at)
{
    uint64_t usable = f->numel - f->padded, count;
    if (end < start || end >= p->numel)
        return ckpt_err_set(r->err, CKPT_EFORMAT, "'%s': range [%llu, "
                            "%llu] of parameter '%s' is outside its %llu "
                            "elements", r->file, (unsigned long long)start,
                            (unsigned long long)end, p->fqn,
                            (unsigned long long)p->numel);
    count = end - start + 1;
    if (at > usable || count > usable - at)
        return ckpt_err_set(r->err, CKPT_EFORMAT, "'%s': parameter '%s' "
                            "would lie at elements [%llu, %llu) of "
                            "flat_param.data, which holds %llu (and %llu "
                            "of padding)", r->file, p->fqn,
                            (unsigned long long)at,
                            (unsigned long long)(at + count),
                            (unsigned long long)usable,
                            (unsigned long long)f->padded);
    p->held = 1;
    p->start = start;
    p->count = count;
    p->at = at;
    return 0;
}

/* torch >= 2.1: one _ShardParamInfo per parameter. */
static int new_layout(struct rdr *r, const struct lflat *f,
                      const struct ckpt_pv *infos)
{
    if (!seq_of(infos) || infos->u.seq.n != f->n)
        return bad(r, f, "_shard_param_infos does not list every "
                   "parameter");
    for (size_t i = 0; i < f->n; i++) {
        const struct ckpt_pv *v = infos->u.seq.v[i], *in;
        uint64_t x[4];
        if (v->kind == CKPT_PV_CALL)    /* _ShardParamInfo(*args) */
            v = v->u.call.args;
        in = ckpt_pv_item(v, 0);
        if (!seq_of(v) || v->u.seq.n != 5 || !in ||
            (in->kind != CKPT_PV_BOOL && in->kind != CKPT_PV_INT))
            return bad(r, f, "malformed _ShardParamInfo");
        if (!(in->kind == CKPT_PV_BOOL ? in->u.b : in->u.i != 0))
            continue;
        for (int k = 0; k < 4; k++)
            if (get_u64(v->u.seq.v[k + 1], &x[k]) != 0)
                return bad(r, f, "malformed _ShardParamInfo");
        struct lpiece *p = &r->m->pieces[f->first + i];
        if (hold(r, f, p, x[2], x[3], x[0]) != 0)
            return -1;
        if (p->count != x[1])
            return ckpt_err_set(r->err, CKPT_EFORMAT, "'%s': parameter "
                                "'%s': numel_in_shard %llu, but its range "
                                "[%llu, %llu] holds %llu", r->file, p->fqn,
                                (unsigned long long)x[1],
                                (unsigned long long)x[2],
                                (unsigned long long)x[3],
                                (unsigned long long)p->count);
    }
    return 0;
}

/* torch <= 2.0.1: parameters s.. hold the consecutive slices that
 * _shard_param_offsets lists. */
static int old_layout(struct rdr *r, const struct lflat *f,
                      const struct ckpt_pv *indices,
                      const struct ckpt_pv *offsets)
{
    uint64_t s, at = 0;
    if (!seq_of(indices) || indices->u.seq.n != 2 ||
        get_u64(indices->u.seq.v[0], &s) != 0 || !seq_of(offsets))
        return bad(r, f, "malformed _shard_indices or "
                   "_shard_param_offsets");
    size_t n = offsets->u.seq.n;
    if (n && (s >= f->n || n > f->n - s))
        return bad(r, f, "_shard_param_offsets names more parameters than "
                   "_fqns");
    for (size_t i = 0; i < n; i++) {
        const struct ckpt_pv *o = seq_of(offsets->u.seq.v[i]);
        uint64_t a, b;
        if (!o || o->u.seq.n != 2 || get_u64(o->u.seq.v[0], &a) != 0 ||
            get_u64(o->u.seq.v[1], &b) != 0)
            return bad(r, f, "malformed _shard_param_offsets");
        struct lpiece *p = &r->m->pieces[f->first + s + i];
        if (hold(r, f, p, a, b, at) != 0)
            return -1;
        at += p->count;
    }
    return 0;
}

/* The parameters of a handle, none held yet. */
static int add_pieces(struct rdr *r, struct lflat *f, const char *name,
                      const struct ckpt_pv *fqns, const struct ckpt_pv *shp)
{
    struct lmodel *m = r->m;
    if (!seq_of(fqns) || !seq_of(shp) || fqns->u.seq.n != shp->u.seq.n)
        return bad(r, f, "_fqns and _shapes missing or of different "
                   "lengths");
    f->first = m->npieces;
    f->n = fqns->u.seq.n;
    if (m->npieces + f->n > m->piececap) {
        m->piececap = 2 * (m->npieces + f->n);
        m->pieces = ckpt_xreallocarray(m->pieces, m->piececap,
                                       sizeof(*m->pieces));
    }
    for (size_t i = 0; i < f->n; i++) {
        struct lpiece *p = &m->pieces[m->npieces++];
        const struct ckpt_pv *rel = fqns->u.seq.v[i];
        memset(p, 0, sizeof(*p));
        p->flat = m->nflats;
        if (rel->kind != CKPT_PV_STR)
            return bad(r, f, "_fqns holds a non-string");
        if (!(p->fqn = root_fqn(r->a, name, rel)) ||
            shape_of(r->a, shp->u.seq.v[i], p) != 0)
            return bad(r, f, "malformed _shapes");
    }
    return 0;
}

static int add_handle(struct rdr *r, const char *name,
                      const struct ckpt_pv *h)
{
    struct lmodel *m = r->m;
    const struct ckpt_pv *d = ckpt_pv_dict_items(h);
    if (m->nflats == m->flatcap) {
        m->flatcap = m->flatcap ? 2 * m->flatcap : 16;
        m->flats = ckpt_xreallocarray(m->flats, m->flatcap,
                                      sizeof(*m->flats));
    }
    struct lflat *f = &m->flats[m->nflats];
    memset(f, 0, sizeof(*f));
    f->module = name;
    if (!d)
        return bad(r, f, "handle is not a dict");
    int t = ckpt_tensor_from_pv(ckpt_pv_dict_get(d, "flat_param.data"),
                                &f->data, r->file, r->err);
    if (t < 0)
        return -1;
    if (t == 0 || f->data.ndim != 1)
        return bad(r, f, "flat_param.data is not a 1-D tensor");
    f->numel = (uint64_t)f->data.size[0];
    if (get_u64(ckpt_pv_dict_get(d, "flat_param._shard_numel_padded"),
                &f->padded) != 0 || f->padded > f->numel)
        return bad(r, f, "_shard_numel_padded missing or larger than the "
                   "data");
    if (add_pieces(r, f, name, ckpt_pv_dict_get(d, "flat_param._fqns"),
                   ckpt_pv_dict_get(d, "flat_param._shapes")) != 0)
        return -1;
    const struct ckpt_pv *idx = ckpt_pv_dict_get(d,
                                                 "flat_param._shard_indices");
    const struct ckpt_pv *inf =
        ckpt_pv_dict_get(d, "flat_param._shard_param_infos");
    int rc;
    if (idx)
        rc = old_layout(r, f, idx, ckpt_pv_dict_get(d,
                        "flat_param._shard_param_offsets"));
    else if (inf)
        rc = new_layout(r, f, inf);
    else
        rc = bad(r, f, "neither _shard_param_infos nor _shard_indices "
                 "(not a sharded flat parameter)");
    m->nflats++;
    return rc;
}

int uns_olmoflat_read(struct ckpt_arena *a, const struct ckpt_pv *root,
                      const char *file, struct lmodel *m, struct ckpt_err *err)
{
    struct rdr r = { a, file, m, err };
    const struct ckpt_pv *mods = seq_of(ckpt_pv_dict_get(ckpt_pv_dict_items(root),
                                                         "modules"));
    if (!mods)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': no \"modules\" list "
                            "(not an OLMo local model file)", file);
    for (size_t i = 0; i < mods->u.seq.n; i++) {
        const struct ckpt_pv *md = ckpt_pv_dict_items(mods->u.seq.v[i]);
        const struct ckpt_pv *name = ckpt_pv_dict_get(md, "name");
        const struct ckpt_pv *hs = seq_of(ckpt_pv_dict_get(md, "handles"));
        if (!name || name->kind != CKPT_PV_STR || !hs)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': module %zu lacks "
                                "\"name\" or \"handles\"", file, i);
        for (size_t k = 0; k < hs->u.seq.n; k++)
            if (add_handle(&r, name->u.s.p, hs->u.seq.v[k]) != 0)
                return -1;
    }
    return 0;
}

void uns_olmoflat_release(struct lmodel *m)
{
    if (!m)
        return;
    free(m->flats);
    free(m->pieces);
    memset(m, 0, sizeof(*m));
}
