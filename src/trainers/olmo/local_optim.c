/*
 * olmo/local_optim.c - the optimizer files of OLMo local steps: optim/rank{R}.pt
 * is the rank's plain optim.state_dict() (OLMo olmo/checkpoint.py
 * LocalShardedCheckpointer.save_checkpoint).
 *
 * OLMo trains with use_orig_params, so the optimizer holds the original
 * parameters: state[id] per parameter, param_groups[*]["params"] the ids
 * and "param_names" their FSDP names, which name the parameter once
 * "_fsdp_wrapped_module." is removed (OLMo's fqn_to_id). A 0-d value
 * (step, grad_norm_exp_avg) must be bit-equal on every rank that has it;
 * any other tensor is the rank's 1-D local view of the parameter and holds
 * the same range as that rank's model shard; a rank holding no part of
 * the parameter has no state for it, or an empty tensor. Other values are
 * rank 0's and must be equal elsewhere, as must param_groups.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "plan_local.h"

static const char *id_key(struct ckpt_arena *a, int64_t id)
{
    char *k = ckpt_arena_alloc(a, sizeof(id));
    if (k)
        memcpy(k, &id, sizeof(id));
    return k;
}

/* Rank 0's param_groups: which parameter each state id is, by the
 * cleaned "param_names" (OLMo's fqn_to_id). */
static int read_groups(struct lplan *p, struct ckpt_err *err)
{
    struct ckpt_arena *a = p->j->plan.meta->arena;
    const struct ckpt_pv *gs = p->groups;
    size_t cap = 0, n = 0;
    if (!gs || gs->kind != CKPT_PV_LIST)
        return ckpt_err_set(err, CKPT_EFORMAT, "'optim/rank0.pt': no "
                            "param_groups list");
    for (size_t g = 0; g < gs->u.seq.n; g++) {
        struct ckpt_pv *d = ckpt_pv_dict_items(gs->u.seq.v[g]);
        const struct ckpt_pv *ids = ckpt_pv_dict_get(d, "params");
        const struct ckpt_pv *names = ckpt_pv_dict_get(d, "param_names");
        if (!ids || !names || ckpt_pv_len(ids) != ckpt_pv_len(names) ||
            (ids->kind != CKPT_PV_LIST && ids->kind != CKPT_PV_TUPLE) ||
            (names->kind != CKPT_PV_LIST && names->kind != CKPT_PV_TUPLE))
            return ckpt_err_set(err, CKPT_EFORMAT, "'optim/rank0.pt': "
                                "param group %zu lacks matching \"params\" "
                                "and \"param_names\"", g);
        for (size_t i = 0; i < ids->u.seq.n; i++) {
            const struct ckpt_pv *nm = names->u.seq.v[i];
            int64_t id;
            if (ckpt_pv_get_int(ids->u.seq.v[i], &id) != 0 ||
                nm->kind != CKPT_PV_STR)
                return ckpt_err_set(err, CKPT_EFORMAT, "'optim/rank0.pt': "
                                    "param group %zu: malformed id or "
                                    "name %zu", g, i);
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                p->gfqn = ckpt_xreallocarray(p->gfqn, cap, sizeof(*p->gfqn));
            }
            const char *k = id_key(a, id);
            p->gfqn[n] = uns_olmoflat_strip(a, nm->u.s.p);
            if (!k || !p->gfqn[n] ||
                tf_strmap_put(&p->gbyid, k, sizeof(id), n++) != 0)
                return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        }
    }
    return 0;
}

static struct lstate *state_of(struct lplan *p, int64_t id, const char *rel,
                               struct ckpt_err *err)
{
    uint64_t i;
    if (tf_strmap_get(&p->byid, (const char *)&id, sizeof(id), &i))
        return &p->states[i];
    if (!tf_strmap_get(&p->gbyid, (const char *)&id, sizeof(id), &i)) {
        ckpt_err_set(err, CKPT_EFORMAT, "'%s': state %lld is in no param "
                     "group", rel, (long long)id);
        return NULL;
    }
    if (p->nstates == p->statecap) {
        p->statecap = p->statecap ? 2 * p->statecap : 64;
        p->states = ckpt_xreallocarray(p->states, p->statecap,
                                       sizeof(*p->states));
    }
    struct lstate *s = &p->states[p->nstates];
    uint64_t pi;
    const char *k = id_key(p->j->plan.meta->arena, id);
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->fqn = p->gfqn[i];
    s->param = tf_strmap_get(&p->byfqn, s->fqn, strlen(s->fqn), &pi)
               ? (long)pi : -1;
    if (!k || tf_strmap_put(&p->byid, k, sizeof(id), p->nstates) != 0) {
        ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        return NULL;
    }
    p->nstates++;
    return s;
}

/* What one rank file says about one value. */
struct oval {
    struct lplan *p;
    int rank;
    const char *rel;
    struct usrc *src;
    struct ckpt_tzip *z;
    struct lstate *s;
    const char *key;
    struct ckpt_pv *v;
    struct ckpt_tensor t;
    /* The rank file for the scalars' few bytes: through 64 KiB windows
     * when remote, so a parameter's step and grad_norm_exp_avg are not a
     * ranged GET each. */
    struct ckpt_rd rd;
    struct src_cache cache;
};

static int disagree(const struct oval *o, const struct lvalue *x,
                    const char *what, struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "ranks %d and %d disagree on %s "
                        "of '%s' of optimizer state %lld (%s)", x->first,
                        o->rank, what, o->key, (long long)o->s->id, o->rel);
}

/* A 0-d tensor: equal on every rank that has it (OLMo: step,
 * grad_norm_exp_avg). */
static int scalar(struct oval *o, struct lvalue *x,
                  const struct ckpt_tzip_entry *ze, struct ckpt_err *err)
{
    unsigned char b[16];
    unsigned size = o->t.dtype->itemsize;
    if (size > sizeof(b))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': dtype %s of "
                            "'%s'", o->rel, o->t.dtype->name, o->key);
    if (ckpt_rd_read(&o->rd, ze->data_off + (uint64_t)o->t.storage_offset *
                     size, b, size, err) != 0)
        return -1;
    if (x->sl.n)
        return x->dtype != o->t.dtype || memcmp(x->bytes, b, size)
               ? disagree(o, x, "the value", err) : 0;
    x->dtype = o->t.dtype;
    memcpy(x->bytes, b, size);
    struct lslice *s = uns_olmolocal_add_slice(&x->sl);
    s->rank = o->rank;
    s->count = 1;
    s->src = o->src;
    s->data = ze->data_off;
    uns_src_note_record(o->src, ze->data_off, ze->size, ze->crc, o->z->prefix,
                        ze->name);
    s->soff = o->t.storage_offset;
    s->big_endian = o->z->big_endian;
    return 0;
}

/* This rank's slice of parameter pi, or NULL. Slices are in rank order. */
static const struct lslice *slice_of(const struct lslices *sl, int rank)
{
    size_t lo = 0, hi = sl->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sl->v[mid].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sl->n && sl->v[lo].rank == rank ? &sl->v[lo] : NULL;
}

/* Any other tensor: this rank's range of the parameter, 1-D. */
static int sharded(const struct oval *o, struct lvalue *x,
                   const struct ckpt_tzip_entry *ze, struct ckpt_err *err)
{
    const struct lstate *s = o->s;
    const struct lslice *ms = s->param >= 0
        ? slice_of(&o->p->params[s->param].sl, o->rank) : NULL;
    uint64_t n;
    if (ckpt_tensor_numel(&o->t, &n) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' is too large",
                            o->rel, o->key);
    if (s->param < 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' of optimizer "
                            "state %lld: '%s' is no parameter of the model "
                            "files", o->rel, o->key, (long long)s->id,
                            s->fqn);
    if (x->dtype && x->dtype != o->t.dtype)
        return disagree(o, x, "the dtype", err);
    x->dtype = o->t.dtype;
    if (!ms && n == 0)      /* nothing of it here, nothing to place */
        return 0;
    if (!ms)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' of optimizer "
                            "state %lld ('%s') has elements, but "
                            "model/rank%d.pt holds no part of the "
                            "parameter", o->rel, o->key, (long long)s->id,
                            s->fqn, o->rank);
    if (o->t.ndim != 1)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' of optimizer "
                            "state %lld ('%s') is not 1-D", o->rel, o->key,
                            (long long)s->id, s->fqn);
    if (n != ms->count)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' of optimizer "
                            "state %lld ('%s') has %llu elements, but "
                            "model/rank%d.pt holds %llu of the parameter",
                            o->rel, o->key, (long long)s->id, s->fqn,
                            (unsigned long long)n, o->rank,
                            (unsigned long long)ms->count);
    struct lslice *c = uns_olmolocal_add_slice(&x->sl);
    c->rank = o->rank;
    c->start = ms->start;
    c->count = ms->count;
    c->src = o->src;
    c->data = ze->data_off;
    uns_src_note_record(o->src, ze->data_off, ze->size, ze->crc, o->z->prefix,
                        ze->name);
    c->step = o->t.stride[0];
    c->soff = o->t.storage_offset;
    c->big_endian = o->z->big_endian;
    return 0;
}

/* Not a tensor: rank 0's value is re-emitted; the others must equal it. */
static int plain(const struct oval *o, struct lvalue *x,
                 struct ckpt_err *err)
{
    if (o->rank == 0) {
        x->plain = o->v;
        return 0;
    }
    if (!x->plain)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': '%s' of "
                            "optimizer state %lld is not a tensor and not "
                            "in optim/rank0.pt", o->rel, o->key,
                            (long long)o->s->id);
    return uns_legacy_same(o->p->oz0, x->plain, o->z, o->v)
           ? 0 : disagree(o, x, "the value", err);
}

static struct lvalue *value_of(struct lstate *s, const struct oval *o,
                               int kind)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i].key, o->key))
            return &s->v[i];
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        s->v = ckpt_xreallocarray(s->v, s->cap, sizeof(*s->v));
    }
    struct lvalue *x = &s->v[s->n];
    memset(x, 0, sizeof(*x));
    x->key = ckpt_arena_strdup(o->p->j->plan.arena, o->key);
    if (!x->key)
        return NULL;
    x->kind = kind;
    x->first = o->rank;
    s->n++;
    return x;
}

static int one_value(struct oval *o, struct ckpt_err *err)
{
    const struct ckpt_tzip_entry *ze = NULL;
    int t = ckpt_tensor_from_pv(o->v, &o->t, o->rel, err);
    if (t < 0)
        return -1;
    int kind = !t ? V_PLAIN : o->t.ndim == 0 ? V_SCALAR : V_SHARDED;
    struct lvalue *x = value_of(o->s, o, kind);
    char what[128];
    if (!x)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (x->kind != kind)
        return disagree(o, x, "the kind (0-d, sharded tensor or other)",
                        err);
    snprintf(what, sizeof(what), "'%s' of optimizer state %lld", o->key,
             (long long)o->s->id);
    if (t && uns_olmolocal_record(o->z, &o->t, o->rel, what, &ze, err) != 0)
        return -1;
    if (kind == V_SCALAR)
        return scalar(o, x, ze, err);
    return kind == V_SHARDED ? sharded(o, x, ze, err) : plain(o, x, err);
}

static int read_state(struct lplan *p, struct oval *o, struct ckpt_pv *root,
                      struct ckpt_err *err)
{
    struct ckpt_pv *st = ckpt_pv_dict_items(ckpt_pv_dict_get(ckpt_pv_dict_items(root), "state"));
    if (!st)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': no \"state\" dict "
                            "(not an optimizer state_dict)", o->rel);
    for (size_t i = 0; i < st->u.dict.n; i++) {
        int64_t id;
        struct ckpt_pv *vals = ckpt_pv_dict_items(st->u.dict.v[i]);
        if (ckpt_pv_get_int(st->u.dict.k[i], &id) != 0 || !vals)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': state %zu is not "
                                "an id with a dict", o->rel, i);
        if (!(o->s = state_of(p, id, o->rel, err)))
            return -1;
        for (size_t k = 0; k < vals->u.dict.n; k++) {
            const struct ckpt_pv *key = vals->u.dict.k[k];
            if (key->kind != CKPT_PV_STR)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': state %lld "
                                    "has a key that is not a string",
                                    o->rel, (long long)id);
            o->key = key->u.s.p;
            o->v = vals->u.dict.v[k];
            if (one_value(o, err) != 0)
                return -1;
        }
    }
    return 0;
}

int uns_olmooptim_rank(struct lplan *p, int r, struct ckpt_err *err)
{
    struct ckpt_arena *a = r ? ckpt_arena_new(2048ULL << 20) : p->j->plan.arena;
    struct oval o = { .p = p, .rank = r };
    struct ckpt_pv *root = NULL;
    int rc = a ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0)
        /* Any class: what is written is checked in outputs/torch_layout.c. */
        rc = uns_olmolocal_load(p, "optim", r, a, NULL, &o.rel, &o.src, &o.z,
                                &root, err);
    struct ckpt_pv *groups = ckpt_pv_dict_get(ckpt_pv_dict_items(root), "param_groups");
    if (rc == 0 && r == 0) {
        p->groups = groups;
        p->oz0 = o.z;
        p->osrc0 = o.src;
        rc = read_groups(p, err);
    } else if (rc == 0 && !uns_legacy_same(p->oz0, p->groups, o.z, groups)) {
        rc = ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d disagree on "
                          "param_groups (%s)", r, o.rel);
    }
    if (rc == 0) {
        uns_src_rd_cached(&o.rd, &o.cache, o.src, 0, o.src->size);
        rc = read_state(p, &o, root, err);
        uns_src_cache_release(&o.cache);
    }
    if (r) {
        ckpt_tzip_free(o.z);
        ckpt_arena_free(a);
    } else if (rc != 0 && !p->oz0) {
        ckpt_tzip_free(o.z);
    }
    return rc;
}

/* OLMo's unsharder writes param_names cleaned like the model's fqns. */
int uns_olmooptim_clean_names(struct lplan *p, struct ckpt_err *err)
{
    struct ckpt_arena *a = p->j->plan.arena;
    for (size_t g = 0; g < p->groups->u.seq.n; g++) {
        struct ckpt_pv *names =
            ckpt_pv_dict_get(ckpt_pv_dict_items(p->groups->u.seq.v[g]), "param_names");
        for (size_t i = 0; i < names->u.seq.n; i++) {
            const char *s = names->u.seq.v[i]->u.s.p;
            if (!strstr(s, OLMOFLAT_WRAPPED))
                continue;
            char *c = uns_olmoflat_strip(a, s);
            if (!c || !(names->u.seq.v[i] = ckpt_pv_str(a, c, strlen(c))))
                return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        }
    }
    return 0;
}
