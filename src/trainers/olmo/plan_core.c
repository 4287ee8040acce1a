/*
 * olmo/plan_core.c - OLMo `olmo_core` steps: model/ and optim/, each
 * rank_R.safetensors + metadata.json as OLMo-core 0.1's
 * save_model_and_optim_state writes them, train/rank{R}.pt, config.yaml
 * (docs/formats/olmo.md).
 *
 * Every file holds, under each tensor's key, a 1-D tensor: its ranges of
 * the full tensor's row-major flattening, concatenated (flat_boxes cuts
 * each range into boxes read at the full tensor's strides), or a DTensor's
 * local box. metadata.json says which; the pieces must tile every tensor
 * exactly, which is checked on the metadata alone, before any file is
 * opened. The rank files' headers are then read one file at a time (only
 * where each piece's data starts is kept) and the DCP engine copies the
 * bytes with pread/pwrite as for any chunk.
 *
 * The optimizer is flattened (OLMo-core _flatten_optimizer_state): the
 * pickled param groups (param_group{i}, with "_param_names") and the
 * sorted state keys (state_keys) are uint8 tensors, each state tensor is
 * "state.<param name>.__<state key>". Like OLMo-core's
 * _unflatten_optimizer_state, optim.pt becomes {"state": {param id:
 * {state key: tensor}}, "param_groups": groups without "_param_names"};
 * model.pt is {key: tensor}, train.pt a copy of train/rank0.pt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/olmocore.h"
#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/trainer.h"

#define MAX_META (1024u << 20)      /* one metadata.json */
#define MAX_PICKLED (256u << 20)    /* one pickled param group */
#define MAX_RANK 1000000

enum { P_MODEL = 0, P_OPTIM = 1 };
static const char *const parts[] = { "model", "optim" };

/* One rank file, "model/rank_0.safetensors". */
struct ofile {
    const char *rel;        /* meta arena: chunks name it */
    struct usrc *src;       /* once its header is read */
    size_t *pieces;         /* malloced: the pieces it holds */
    size_t n, cap;
};

/* One tensor's piece in one file. */
struct opiece {
    size_t tensor;
    const struct ckpt_olmocore_piece *pc;
    size_t file;
    uint64_t data;          /* where its 1-D tensor starts in the file */
};

/* Where a chunk's elements are: parallel to the entry's chunks. */
struct oloc {
    size_t piece;
    int64_t soff;           /* elements from the piece's data */
    const int64_t *stride;  /* meta arena */
};

/* Every tensor of both metadata.json files. */
struct otensor {
    const struct ckpt_olmocore_tensor *mt;
    int part;
    const struct ckpt_dtype *dtype;
    struct ckpt_dcp_chunk *chunks;  /* meta arena */
    struct oloc *locs;              /* meta arena, parallel */
    size_t nchunks;
};

struct oplan {
    struct ujob *j;
    struct ckpt_olmocore_meta *meta[2];
    struct otensor *ts;             /* malloced; model's, then optim's */
    size_t nts, first[2];           /* first tensor of each part */
    struct strmap bykey[2];         /* key -> tensor index */
    struct ofile *files;            /* malloced */
    size_t nfiles;
    struct strmap byfile;           /* rel -> file index */
    struct opiece *pieces;          /* malloced */
    size_t npieces, piececap;
    size_t *ent;                    /* malloced: output entry -> tensor */
    struct ckpt_pv *groups;         /* LIST: the output param groups */
    struct uns_dir ls[2];           /* listing of model/ and optim/ */
};

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

/* --- files ------------------------------------------------------------- */

/* rank_<N>.safetensors -> N, or -1. */
static long rank_of(const char *name)
{
    uint64_t r;
    size_t l = strlen(name);
    char num[24];
    if (!ckpt_str_startswith(name, "rank_") ||
        !ckpt_str_endswith(name, ".safetensors") || l - 17 < 1 ||
        l - 17 >= sizeof(num))
        return -1;
    memcpy(num, name + 5, l - 17);
    num[l - 17] = 0;
    return ckpt_parse_u64(num, &r) == 0 && r < MAX_RANK ? (long)r : -1;
}

/* The rank files of a part must be rank_0 .. rank_N without a gap
 * (in the part's listing). */
static int check_ranks(struct oplan *p, int part, struct ckpt_err *err)
{
    const struct uns_dir *l = &p->ls[part];
    long max = -1;
    for (size_t i = 0; i < l->n; i++) {
        long r = rank_of(l->v[i].name);
        max = r > max ? r : max;
    }
    for (long r = 0; r <= max; r++) {
        char name[48];
        snprintf(name, sizeof(name), "rank_%ld.safetensors", r);
        if (!uns_fs_has_file(l, name))
            return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s/%s' is "
                                "missing (rank files up to "
                                "rank_%ld.safetensors exist)", p->j->src.dir,
                                parts[part], name, max);
    }
    return 0;
}

/* The file a piece names (registered once; it must exist). */
static int file_of(struct oplan *p, int part, const char *name, size_t *out,
                   const char *key, struct ckpt_err *err)
{
    char *tmp = ckpt_xasprintf("%s/%s", parts[part], name);
    char *rel = ckpt_arena_strdup(p->j->plan.meta->arena, tmp);
    uint64_t i;
    free(tmp);
    if (!rel)
        return oom(err);
    if (tf_strmap_get(&p->byfile, rel, strlen(rel), &i)) {
        *out = (size_t)i;
        return 0;
    }
    if (!uns_fs_has_file(&p->ls[part], name))
        return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing "
                            "(%s/metadata.json places tensor '%s' in it)",
                            p->j->src.dir, rel, parts[part], key);
    p->files = ckpt_xreallocarray(p->files, p->nfiles + 1,
                                  sizeof(*p->files));
    memset(&p->files[p->nfiles], 0, sizeof(*p->files));
    p->files[p->nfiles].rel = rel;
    if (tf_strmap_put(&p->byfile, rel, strlen(rel), p->nfiles) != 0)
        return oom(err);
    *out = p->nfiles++;
    /* read_headers reads the files in this order: remote ones are
     * fetched ahead (sources/prefetch.c). */
    return uns_src_prefetch(p->j, rel, uns_fs_find(&p->ls[part], name),
                            err);
}

static int add_piece(struct oplan *p, size_t ti,
                     const struct ckpt_olmocore_piece *pc, size_t *out,
                     struct ckpt_err *err)
{
    size_t fi = 0;
    if (file_of(p, p->ts[ti].part, pc->file, &fi, p->ts[ti].mt->key,
                err) != 0)
        return -1;
    if (p->npieces == p->piececap) {
        p->piececap = p->piececap ? 2 * p->piececap : 256;
        p->pieces = ckpt_xreallocarray(p->pieces, p->piececap,
                                       sizeof(*p->pieces));
    }
    p->pieces[p->npieces] = (struct opiece){ ti, pc, fi, 0 };
    struct ofile *f = &p->files[fi];
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->pieces = ckpt_xreallocarray(f->pieces, f->cap,
                                       sizeof(*f->pieces));
    }
    f->pieces[f->n++] = p->npieces;
    *out = p->npieces++;
    return 0;
}

/* --- metadata ------------------------------------------------------------ */

/* List the part's directory, then read its metadata.json. */
static int load_meta(struct oplan *p, int part, struct ckpt_err *err)
{
    char *rel = ckpt_xasprintf("%s/metadata.json", parts[part]);
    char *path = ckpt_path_join(p->j->src.dir, rel);
    char *dir = ckpt_path_join(p->j->src.dir, parts[part]);
    char *text = NULL;
    size_t len;
    int rc = uns_fs_list(p->j, dir, 0, &p->ls[part], err);
    const struct uns_dent *e = rc ? NULL
                                  : uns_fs_find(&p->ls[part], "metadata.json");
    /* Not listed: the stat says why. */
    if (rc == 0)
        rc = uns_fs_read(p->j, path, e, MAX_META, &text, &len, err);
    if (rc == 0)
        rc = ckpt_olmocore_meta_parse(text, len, rel, &p->meta[part], err);
    free(text);
    free(dir);
    free(path);
    free(rel);
    return rc;
}

/* Row-major element strides of a shape (meta arena). Unsigned: a shape
 * with a 0 may have products that wrap, but then nothing is read. */
static int64_t *strides(struct ckpt_arena *a, int nd, const uint64_t *size)
{
    int64_t *s = ckpt_arena_array(a, (size_t)nd + 1, sizeof(*s));
    uint64_t acc = 1;
    for (int d = nd - 1; s && d >= 0; d--) {
        s[d] = (int64_t)acc;
        acc *= size[d];
    }
    return s;
}

static int count_chunks(const struct ckpt_olmocore_tensor *mt, size_t *n)
{
    struct flat_box b[2 * CKPT_MAX_DIMS];
    *n = 0;
    for (size_t i = 0; i < mt->npieces; i++) {
        const struct ckpt_olmocore_piece *pc = &mt->pieces[i];
        if (!pc->ranges) {
            *n += pc->numel != 0;
            continue;
        }
        for (size_t k = 0; k < pc->nranges; k++) {
            int nb = uns_flat_boxes(mt->ndim, mt->shape, pc->ranges[2 * k],
                                    pc->ranges[2 * k + 1] - pc->ranges[2 * k],
                                    b, 2 * CKPT_MAX_DIMS);
            if (nb < 0)
                return -1;
            *n += (size_t)nb;
        }
    }
    return 0;
}

/* One chunk: a box of the tensor read from piece pi at soff, strides. */
static int add_chunk(struct oplan *p, struct otensor *t, size_t pi,
                     const uint64_t *off, const uint64_t *len, int64_t soff,
                     const int64_t *stride, struct ckpt_err *err)
{
    struct ckpt_arena *a = p->j->plan.meta->arena;
    int nd = t->mt->ndim;
    uint64_t *o = ckpt_arena_array(a, (size_t)nd + 1, 8);
    uint64_t *z = ckpt_arena_array(a, (size_t)nd + 1, 8);
    if (!o || !z)
        return oom(err);
    memcpy(o, off, sizeof(*o) * (size_t)nd);
    memcpy(z, len, sizeof(*z) * (size_t)nd);
    struct ckpt_dcp_chunk *c = &t->chunks[t->nchunks];
    c->offsets = o;
    c->sizes = z;
    c->st.file = p->files[p->pieces[pi].file].rel;
    t->locs[t->nchunks++] = (struct oloc){ pi, soff, stride };
    return 0;
}

/* The chunks of one piece: its ranges cut into boxes, or its box. */
static int piece_chunks(struct oplan *p, struct otensor *t, size_t pi,
                        const int64_t *full, struct ckpt_err *err)
{
    const struct ckpt_olmocore_tensor *mt = t->mt;
    const struct ckpt_olmocore_piece *pc = p->pieces[pi].pc;
    struct flat_box b[2 * CKPT_MAX_DIMS];
    uint64_t pos = 0;
    if (!pc->ranges) {
        const int64_t *local = strides(p->j->plan.meta->arena, mt->ndim, pc->box);
        if (!local)
            return oom(err);
        return pc->numel ? add_chunk(p, t, pi, pc->offset, pc->box, 0,
                                     local, err) : 0;
    }
    for (size_t k = 0; k < pc->nranges; k++) {
        uint64_t s = pc->ranges[2 * k], n = pc->ranges[2 * k + 1] - s;
        int nb = uns_flat_boxes(mt->ndim, mt->shape, s, n, b,
                                2 * CKPT_MAX_DIMS);
        for (int i = 0; i < nb; i++)
            if (add_chunk(p, t, pi, b[i].off, b[i].len,
                          (int64_t)(pos + b[i].first - s), full, err) != 0)
                return -1;
        pos += n;
    }
    return 0;
}

static int plan_tensor(struct oplan *p, size_t ti, struct ckpt_err *err)
{
    struct otensor *t = &p->ts[ti];
    const struct ckpt_olmocore_tensor *mt = t->mt;
    struct ckpt_arena *a = p->j->plan.meta->arena;
    size_t n;
    if (ckpt_olmocore_check_tiling(mt, p->j->src.allow_replicas, err) != 0 ||
        (count_chunks(mt, &n) != 0 &&
         ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': bad range",
                      mt->key))) {
        ckpt_err_prefix(err, "%s/metadata.json", parts[t->part]);
        return -1;
    }
    const int64_t *full = strides(a, mt->ndim, mt->shape);
    t->chunks = ckpt_arena_array(a, n + 1, sizeof(*t->chunks));
    t->locs = ckpt_arena_array(a, n + 1, sizeof(*t->locs));
    if (!full || !t->chunks || !t->locs)
        return oom(err);
    for (size_t i = 0; i < mt->npieces; i++) {
        size_t pi;
        if (add_piece(p, ti, &mt->pieces[i], &pi, err) != 0 ||
            piece_chunks(p, t, pi, full, err) != 0)
            return -1;
    }
    return 0;
}

static int plan_part(struct oplan *p, int part, struct ckpt_err *err)
{
    const struct ckpt_olmocore_meta *m = p->meta[part];
    p->first[part] = p->nts;
    p->ts = ckpt_xreallocarray(p->ts, p->nts + m->n + 1, sizeof(*p->ts));
    for (size_t i = 0; i < m->n; i++) {
        size_t ti = p->nts++;
        struct otensor *t = &p->ts[ti];
        memset(t, 0, sizeof(*t));
        t->mt = &m->tensors[i];
        t->part = part;
        t->dtype = t->mt->dtype;
        if (tf_strmap_put(&p->bykey[part], t->mt->key, strlen(t->mt->key),
                          ti) != 0)
            return oom(err);
        if (plan_tensor(p, ti, err) != 0)
            return -1;
    }
    return 0;
}

/* --- rank file headers, one file at a time ------------------------------- */

static int check_piece(struct oplan *p, struct opiece *o,
                       const struct ckpt_safetensors *h, const char *name,
                       struct ckpt_err *err)
{
    struct otensor *t = &p->ts[o->tensor];
    const char *key = t->mt->key, *mj = parts[t->part];
    const struct ckpt_safetensors_tensor *st = ckpt_safetensors_find(h, key);
    if (!st && !o->pc->numel)
        return 0;   /* an empty piece need not be stored */
    if (!st)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: no tensor '%s' (%s/"
                            "metadata.json places %llu elements there)",
                            name, key, mj,
                            (unsigned long long)o->pc->numel);
    if (!t->dtype)
        t->dtype = st->dtype;   /* metadata without dtypes: files agree */
    if (st->dtype != t->dtype)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: tensor '%s' is %s, "
                            "%s/metadata.json says %s", name, key,
                            st->dtype->st, mj, t->dtype->st);
    if (st->ndim != 1 || st->numel != o->pc->numel)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: tensor '%s' holds %llu "
                            "elements%s, %s/metadata.json places %llu there",
                            name, key, (unsigned long long)st->numel,
                            st->ndim != 1 ? " (not 1-D)" : "", mj,
                            (unsigned long long)o->pc->numel);
    o->data = st->offset;
    return 0;
}

static int read_headers(struct oplan *p, struct ckpt_err *err)
{
    for (size_t fi = 0; fi < p->nfiles; fi++) {
        struct ofile *f = &p->files[fi];
        struct usrc *src;
        struct ckpt_safetensors *h = NULL;
        struct ckpt_rd rd;
        struct src_cache cache;
        if (uns_src_get(p->j, f->rel, &src, err) != 0)
            return -1;
        f->src = src;
        /* Remote: length and header in one ranged GET. */
        uns_src_rd_cached(&rd, &cache, src, 0, src->size);
        int rc = ckpt_safetensors_open(&h, &rd, err);
        uns_src_cache_release(&cache);
        for (size_t k = 0; rc == 0 && k < f->n; k++)
            rc = check_piece(p, &p->pieces[f->pieces[k]], h, src->name, err);
        ckpt_safetensors_free(h);
        if (rc != 0)
            return -1;
    }
    for (size_t i = 0; i < p->nts; i++)
        if (!p->ts[i].dtype)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s/metadata.json: "
                                "tensor '%s' has no dtype and no file holds "
                                "it", parts[p->ts[i].part],
                                p->ts[i].mt->key);
    return 0;
}

/* Probe tasks (pool threads) only read the finished plan. */
static int locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                  struct ckpt_err *err)
{
    struct oplan *p = j->plan.fmtplan;
    const struct otensor *ot = &p->ts[p->ent[t->e - j->plan.meta->entries]];
    const struct oloc *l = &ot->locs[c->meta - t->e->chunks];
    const struct opiece *pc = &p->pieces[l->piece];
    (void)err;
    c->src = p->files[pc->file].src;
    c->item_off = 0;
    c->data = pc->data;
    memcpy(c->stride, l->stride, sizeof(int64_t) * (size_t)t->e->ndim);
    c->soff = l->soff;
    c->big_endian = 0;      /* safetensors is little-endian */
    return 0;
}

/* --- the flattened optimizer ------------------------------------------- */

static int optim_tensor(struct oplan *p, const char *key, size_t *ti)
{
    uint64_t i;
    if (!tf_strmap_get(&p->bykey[P_OPTIM], key, strlen(key), &i))
        return 0;
    *ti = (size_t)i;
    return 1;
}

/* A small 0-d or 1-D tensor's bytes, gathered from its chunks (which tile
 * it: checked). *out is malloced, *len bytes. */
static int read_small(struct oplan *p, size_t ti, size_t limit, char **out,
                      size_t *len, struct ckpt_err *err)
{
    const struct otensor *t = &p->ts[ti];
    uint64_t isz = t->dtype->itemsize;
    if (t->mt->ndim > 1 || t->mt->numel > limit / isz)
        return ckpt_err_set(err, CKPT_EFORMAT, "optim/metadata.json: "
                            "tensor '%s' is not a 1-D tensor of at most %zu "
                            "bytes", t->mt->key, limit);
    char *b = ckpt_xmalloc((size_t)(t->mt->numel * isz) + 1);
    int rc = 0;
    for (size_t i = 0; i < t->nchunks && rc == 0; i++) {
        const struct oloc *l = &t->locs[i];
        const struct opiece *pc = &p->pieces[l->piece];
        uint64_t off = t->mt->ndim ? t->chunks[i].offsets[0] : 0;
        uint64_t n = t->mt->ndim ? t->chunks[i].sizes[0] : 1;
        rc = uns_src_read(p->files[pc->file].src,
                          pc->data + (uint64_t)l->soff * isz, b + off * isz,
                          (size_t)(n * isz), err);
    }
    if (rc != 0) {
        free(b);
        return -1;
    }
    *out = b;
    *len = (size_t)(t->mt->numel * isz);
    return 0;
}

/* An integer scalar such as num_param_groups. */
static int read_int(struct oplan *p, size_t ti, int64_t *v,
                    struct ckpt_err *err)
{
    *v = 0;
    const struct otensor *t = &p->ts[ti];
    const char *dt = t->dtype->name;
    char *b;
    size_t len;
    if (t->mt->numel != 1 || !strstr(dt, "int"))
        return ckpt_err_set(err, CKPT_EFORMAT, "optim/metadata.json: "
                            "'%s' is not an integer scalar", t->mt->key);
    if (read_small(p, ti, 8, &b, &len, err) != 0)
        return -1;
    uint64_t u = 0;
    for (size_t i = len; i-- > 0;)
        u = (u << 8) | (unsigned char)b[i];
    /* Sign-extend the signed types narrower than 64 bits. */
    if (len < 8 && dt[0] == 'i' && (u >> (8 * len - 1)) & 1)
        u |= ~0ULL << (8 * len);
    free(b);
    *v = (int64_t)u;
    return 0;
}

/* Unpickle a uint8 tensor of pickle bytes (serialize_to_tensor) into the
 * output arena, within the default caps of a load. */
static int unpickle(struct oplan *p, const char *key, struct ckpt_pv **v,
                    struct ckpt_err *err)
{
    size_t ti, len;
    char *b;
    char name[96];
    snprintf(name, sizeof(name), "optim/%s", key);
    if (!optim_tensor(p, key, &ti))
        return ckpt_err_set(err, CKPT_EFORMAT, "optim/metadata.json: no "
                            "'%s'", key);
    if (p->ts[ti].dtype != ckpt_dtype_by_name("uint8"))
        return ckpt_err_set(err, CKPT_EFORMAT, "optim/metadata.json: '%s' "
                            "is not a uint8 tensor of pickle bytes", key);
    if (read_small(p, ti, MAX_PICKLED, &b, &len, err) != 0)
        return -1;
    /* Any class: what is written is checked in outputs/torch_layout.c. */
    struct ckpt_pickle_opts po = { .name = name };
    int rc = ckpt_pickle_load(p->j->plan.arena, b, len, &po, v, NULL, err);
    free(b);
    return rc;
}

/* Parameter names and ids from the param groups, in order. */
struct pname {
    const char *name;       /* output arena */
    int64_t id;
};

struct unflat {
    struct pname *v;        /* malloced */
    size_t n, cap;
    struct strmap names;    /* name -> index in v */
    const struct ckpt_pv *keys;   /* state_keys: LIST of str */
};

static int is_seq(const struct ckpt_pv *v)
{
    return v && (v->kind == CKPT_PV_LIST || v->kind == CKPT_PV_TUPLE);
}

static int add_name(struct unflat *u, const struct ckpt_pv *name,
                    const struct ckpt_pv *id, const char *g,
                    struct ckpt_err *err)
{
    int64_t x;
    if (!name || name->kind != CKPT_PV_STR || !id ||
        id->kind != CKPT_PV_INT || ckpt_pv_get_int(id, &x) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: _param_names and "
                            "params must be names and ids", g);
    /* torch refuses a parameter in two groups. */
    if (tf_strmap_get(&u->names, name->u.s.p, name->u.s.len, NULL))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: parameter '%s' "
                            "appears twice", g, name->u.s.p);
    if (u->n == u->cap) {
        u->cap = u->cap ? 2 * u->cap : 64;
        u->v = ckpt_xreallocarray(u->v, u->cap, sizeof(*u->v));
    }
    u->v[u->n] = (struct pname){ name->u.s.p, x };
    if (tf_strmap_put(&u->names, name->u.s.p, name->u.s.len, u->n) != 0)
        return oom(err);
    u->n++;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Two names for one id would merge two parameters' state. */
static int unique_ids(const struct unflat *u, struct ckpt_err *err)
{
    int64_t *ids = ckpt_xcalloc(u->n + 1, sizeof(*ids));
    int rc = 0;
    for (size_t i = 0; i < u->n; i++)
        ids[i] = u->v[i].id;
    qsort(ids, u->n, sizeof(*ids), cmp_i64);
    for (size_t i = 1; i < u->n && rc == 0; i++)
        if (ids[i] == ids[i - 1])
            rc = ckpt_err_set(err, CKPT_EFORMAT, "optim: parameter id %lld "
                              "belongs to two parameter names",
                              (long long)ids[i]);
    free(ids);
    return rc;
}

/* One param group: its names and ids recorded, the group without
 * "_param_names" appended to the output groups. */
static int add_group(struct oplan *p, struct unflat *u, size_t gi,
                     struct ckpt_err *err)
{
    char key[48], g[64];
    struct ckpt_pv *v;
    snprintf(key, sizeof(key), "param_group%zu", gi);
    snprintf(g, sizeof(g), "optim/%s", key);
    if (unpickle(p, key, &v, err) != 0)
        return -1;
    const struct ckpt_pv *names = ckpt_pv_dict_get(v, "_param_names");
    const struct ckpt_pv *ids = ckpt_pv_dict_get(v, "params");
    if (!v || v->kind != CKPT_PV_DICT || !is_seq(names) || !is_seq(ids) ||
        names->u.seq.n != ids->u.seq.n)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: not a param group "
                            "with as many params as _param_names", g);
    for (size_t i = 0; i < ids->u.seq.n; i++)
        if (add_name(u, names->u.seq.v[i], ids->u.seq.v[i], g, err) != 0)
            return -1;
    struct ckpt_pv *out = ckpt_pv_new(p->j->plan.arena, CKPT_PV_DICT);
    for (size_t i = 0; out && i < v->u.dict.n; i++)
        if (!ckpt_pv_str_eq(v->u.dict.k[i], "_param_names") &&
            ckpt_pv_dict_add(p->j->plan.arena, out, v->u.dict.k[i],
                             v->u.dict.v[i]) != 0)
            out = NULL;
    if (!out || ckpt_pv_push(p->j->plan.arena, p->groups, out) != 0)
        return oom(err);
    return 0;
}

/* num_param_groups, else as many param_group{i} as there are. */
static int count_groups(struct oplan *p, int64_t *n, struct ckpt_err *err)
{
    size_t ti;
    char key[48];
    if (optim_tensor(p, "num_param_groups", &ti)) {
        if (read_int(p, ti, n, err) != 0)
            return -1;
        if (*n < 0 || *n > MAX_RANK)
            return ckpt_err_set(err, CKPT_EFORMAT, "optim: "
                                "num_param_groups is %lld", (long long)*n);
        return 0;
    }
    for (*n = 0;; (*n)++) {
        snprintf(key, sizeof(key), "param_group%lld", (long long)*n);
        if (!optim_tensor(p, key, &ti))
            return 0;
    }
}

static int unflatten(struct oplan *p, struct unflat *u, struct ckpt_err *err)
{
    int64_t n = 0;
    struct ckpt_pv *keys;
    p->groups = ckpt_pv_new(p->j->plan.arena, CKPT_PV_LIST);
    if (!p->groups)
        return oom(err);
    if (count_groups(p, &n, err) != 0)
        return -1;
    for (int64_t i = 0; i < n; i++)
        if (add_group(p, u, (size_t)i, err) != 0)
            return -1;
    if (unique_ids(u, err) != 0 || unpickle(p, "state_keys", &keys,
                                            err) != 0)
        return -1;
    for (size_t i = 0; is_seq(keys) && i < keys->u.seq.n; i++)
        if (keys->u.seq.v[i]->kind != CKPT_PV_STR)
            keys = NULL;
    if (!is_seq(keys))
        return ckpt_err_set(err, CKPT_EFORMAT, "optim/state_keys: not a "
                            "list of names");
    u->keys = keys;
    return 0;
}

/* --- output entries and graph -------------------------------------------- */

static struct ckpt_pv *path_of(struct ckpt_arena *a, struct ckpt_pv *k0,
                               struct ckpt_pv *k1, struct ckpt_pv *k2,
                               struct ckpt_pv *k3)
{
    struct ckpt_pv *t = ckpt_pv_new(a, CKPT_PV_TUPLE);
    struct ckpt_pv *k[4] = { k0, k1, k2, k3 };
    for (int i = 0; t && i < 4 && k[i]; i++)
        if (ckpt_pv_push(a, t, k[i]) != 0)
            t = NULL;
    return t;
}

static int add_entry(struct oplan *p, size_t ti, char *fqn,
                     struct ckpt_pv *path, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = p->j->plan.meta;
    const struct otensor *t = &p->ts[ti];
    struct ckpt_dcp_entry *e = &m->entries[m->n];
    uint64_t *size = ckpt_arena_array(m->arena, (size_t)t->mt->ndim + 1, 8);
    char *f = fqn ? ckpt_arena_strdup(m->arena, fqn) : NULL;
    free(fqn);
    if (!size || !f || !path)
        return oom(err);
    memcpy(size, t->mt->shape, sizeof(*size) * (size_t)t->mt->ndim);
    e->fqn = f;
    e->kind = CKPT_DCP_TENSOR;
    e->dtype = t->dtype;
    e->ndim = t->mt->ndim;
    e->size = size;
    e->chunks = t->chunks;
    e->nchunks = e->chunkcap = t->nchunks;
    e->path = path;
    p->ent[m->n++] = ti;
    return 0;
}

/* Model tensors in metadata order, then each parameter's state in
 * param-group order, keys in state_keys order (OLMo-core's order), then
 * one object entry: the param groups. */
static int make_entries(struct oplan *p, const struct unflat *u,
                        struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = p->j->plan.meta;
    struct ckpt_arena *a = p->j->plan.arena;
    struct ckpt_pv *sm = ckpt_pv_str(a, "model", 5);
    struct ckpt_pv *so = ckpt_pv_str(a, "optim", 5);
    struct ckpt_pv *ss = ckpt_pv_str(a, "state", 5);
    m->entries = ckpt_arena_array(m->arena, p->nts + 2, sizeof(*m->entries));
    p->ent = ckpt_xcalloc(p->nts + 2, sizeof(*p->ent));
    if (!sm || !so || !ss || !m->entries)
        return oom(err);
    for (size_t i = p->first[P_MODEL]; i < p->first[P_OPTIM]; i++) {
        const char *k = p->ts[i].mt->key;
        if (add_entry(p, i, ckpt_xasprintf("model.%s", k),
                      path_of(a, sm, ckpt_pv_str(a, k, strlen(k)), NULL,
                              NULL), err) != 0)
            return -1;
    }
    for (size_t i = 0; i < u->n; i++) {
        struct ckpt_pv *id = ckpt_pv_int(a, u->v[i].id);
        for (size_t k = 0; k < u->keys->u.seq.n; k++) {
            struct ckpt_pv *sk = u->keys->u.seq.v[k];
            char *key = ckpt_xasprintf("state.%s.__%s", u->v[i].name,
                                       sk->u.s.p);
            size_t ti;
            int found = optim_tensor(p, key, &ti);
            char *fqn = ckpt_xasprintf("optim.%s", key);
            free(key);
            if (!found) {
                free(fqn);
                continue;
            }
            if (add_entry(p, ti, fqn, path_of(a, so, ss, id, sk), err) != 0)
                return -1;
        }
    }
    struct ckpt_dcp_entry *e = &m->entries[m->n++];
    e->fqn = "optim.param_groups";
    e->kind = CKPT_DCP_BYTES;
    e->path = path_of(a, so, ckpt_pv_str(a, "param_groups", 12), NULL,
                      NULL);
    return e->path ? 0 : oom(err);
}

static int add_kv(struct ckpt_arena *a, struct ckpt_pv *d, const char *k,
                  struct ckpt_pv *v)
{
    struct ckpt_pv *ks = ckpt_pv_str(a, k, strlen(k));
    return ks && v ? ckpt_pv_dict_add(a, d, ks, v) : -1;
}

/* {"model": {key: tensor}, "optim": {"state": {id: {key: tensor}},
 * "param_groups": [...]}}; train.pt is copied (outputs/torch_layout.c). */
static int build_root(struct oplan *p, struct ckpt_pv **root,
                      struct ckpt_err *err)
{
    struct ujob *j = p->j;
    struct ckpt_arena *a = j->plan.arena;
    const struct ckpt_dcp_meta *m = j->plan.meta;
    struct ckpt_pv *model = ckpt_pv_new(a, CKPT_PV_DICT);
    struct ckpt_pv *optim = ckpt_pv_new(a, CKPT_PV_DICT);
    struct ckpt_pv *state = ckpt_pv_new(a, CKPT_PV_DICT), *cur = NULL;
    const struct ckpt_pv *cur_id = NULL;
    *root = ckpt_pv_new(a, CKPT_PV_DICT);
    j->plan.values = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.values));
    j->plan.paths = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.paths));
    if (!model || !optim || !state || !*root)
        return oom(err);
    for (size_t i = 0; i < m->n; i++) {
        const struct ckpt_dcp_entry *e = &m->entries[i];
        const struct ckpt_pv *path = e->path;
        j->plan.paths[i] = path;
        if (e->kind == CKPT_DCP_BYTES) {
            j->plan.values[i] = p->groups;
            j->plan.objects++;
            continue;
        }
        struct ckpt_pv *v = uns_tree_tensor(j, &j->plan.tensors[i]);
        int rc = v ? 0 : -1;
        if (rc == 0 && path->u.seq.n == 2) {
            rc = ckpt_pv_dict_add(a, model, path->u.seq.v[1], v);
        } else if (rc == 0) {
            if (path->u.seq.v[2] != cur_id) {   /* the next parameter */
                cur_id = path->u.seq.v[2];
                cur = ckpt_pv_new(a, CKPT_PV_DICT);
                rc = cur ? ckpt_pv_dict_add(a, state, path->u.seq.v[2],
                                            cur) : -1;
            }
            if (rc == 0)
                rc = ckpt_pv_dict_add(a, cur, path->u.seq.v[3], v);
        }
        if (rc != 0)
            return oom(err);
        j->plan.values[i] = v;
    }
    if (add_kv(a, optim, "state", state) || add_kv(a, optim, "param_groups",
                                                   p->groups) ||
        add_kv(a, *root, "model", model) || add_kv(a, *root, "optim", optim))
        return oom(err);
    return 0;
}

/* OLMo's unsharder reads train/rank0.pt; train.pt is its copy. */
static int check_train(struct ujob *j, struct ckpt_err *err)
{
    char *p = ckpt_path_join(j->src.dir, "train/rank0.pt");
    int ok = uns_fs_is_file(j, p);
    free(p);
    if (ok)
        return 0;
    return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/train/rank0.pt' is "
                        "missing", j->src.dir);
}

static void plan_release(struct oplan *p)
{
    for (int i = 0; i < 2; i++) {
        ckpt_olmocore_meta_free(p->meta[i]);
        tf_strmap_release(&p->bykey[i]);
    }
    for (size_t i = 0; i < p->nfiles; i++)
        free(p->files[i].pieces);
    free(p->files);
    tf_strmap_release(&p->byfile);
    uns_fs_free(&p->ls[0]);
    uns_fs_free(&p->ls[1]);
    free(p->pieces);
    free(p->ts);
    free(p->ent);
}

int uns_olmocore_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct oplan p;
    struct unflat u;
    struct ckpt_pv *root;
    memset(&p, 0, sizeof(p));
    memset(&u, 0, sizeof(u));
    p.j = j;
    int rc = uns_plan_own_init(j, src, "metadata.json", &p, locate, err);
    if (rc == 0)
        rc = check_train(j, err);
    for (int part = 0; rc == 0 && part < 2; part++)
        rc = load_meta(&p, part, err) || check_ranks(&p, part, err) ? -1 : 0;
    for (int part = 0; rc == 0 && part < 2; part++)
        rc = plan_part(&p, part, err);
    if (rc == 0)
        rc = read_headers(&p, err);
    if (rc == 0)
        rc = unflatten(&p, &u, err);
    if (rc == 0)
        rc = make_entries(&p, &u, err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = build_root(&p, &root, err);
    if (rc == 0)
        rc = trainer_layout(j, root, err);
    if (rc != 0 && err->msg[0] && !strstr(err->msg, src))
        ckpt_err_prefix(err, "%s", src);
    free(u.v);
    tf_strmap_release(&u.names);
    plan_release(&p);
    j->plan.fmtplan = NULL;
    return rc;
}
