/*
 * olmo/plan_legacy.c - OLMo torch_legacy steps: rank{R}.pt, each a torch.save of
 * {"model": {fqn: ShardedTensor}, "optim": {...}, **trainer_state} from
 * rank R (docs/formats/olmo.md, facts-dcp.md section 4).
 *
 * The plan is built from the pickles alone, one rank at a time: rank 0's
 * graph becomes the output graph; every other rank's graph lives only
 * while its shards are collected and its plain values compared with rank
 * 0's, then its arena is freed. Each ShardedTensor becomes one tensor
 * entry whose chunks are the local shards of all ranks, already located
 * (file, storage record offset, strides), so the DCP engine copies shard
 * bytes straight from the rank files to the output with pread/pwrite.
 * "rng" is dropped, as OLMo's own unsharder does; the other trainer state
 * (pathlib paths, ints, lists) is re-emitted from rank 0's parsed graph.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "legacy.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/trainer.h"

#define MAX_PKL (512u << 20)
#define MAX_RANKS 65536
#define MAX_NEST 16

/* Where one chunk's elements are; parallel to the entry's chunks. */
/* One ShardedTensor of rank 0 and what the ranks told about it. */
struct lst {
    struct ckpt_pv **slot;  /* where it sits in rank 0's graph */
    struct ckpt_pv *path;   /* TUPLE of keys from the root */
    const char *fqn;        /* keys joined with '.' */
    struct ckpt_pv *smeta;  /* rank 0's shards_metadata list, or NULL
                               for a plain tensor of rank 0 */
    /* rank 0's shards_metadata decoded once (arena): per shard, offsets
     * and sizes (ndim each) and the owner rank. Every other rank's list
     * is compared with it: at 1,024 ranks the lists hold 1,024 shards in
     * each of 1,024 files, and decoding rank 0's again per rank was half
     * the planning time. */
    uint64_t *boxes;
    struct uns_zloc *locs;     /* arena; cap = len(smeta) (1 if plain) */
    struct ckpt_tensor *plain; /* malloced: a plain tensor, or NULL */
};

/* A value that is neither a dict nor a tensor: one object entry. */
struct lleaf {
    struct ckpt_pv **slot;
    struct ckpt_pv *path;
    const char *fqn;
};

struct lplan {
    struct ujob *j;
    struct lst *sts;        /* malloced; tensors, sharded or plain */
    size_t n, cap;
    size_t nsharded;        /* of which ShardedTensors */
    struct lleaf *leaves;   /* malloced */
    size_t nleaves, leafcap;
    struct strmap byfqn;    /* fqn -> index */
    int nranks;
    struct ckpt_tzip *z0;   /* rank 0's zip (persid remapping) */
    struct usrc *src0;
};

/* One ShardedTensor found while walking a rank's graph. */
struct found {
    struct ckpt_pv **slot;
    struct ckpt_pv *keys[MAX_NEST];
    int depth;
};

/* --- graph helpers ------------------------------------------------------ */

static int is_st(const struct ckpt_pv *v)
{
    return v && v->kind == CKPT_PV_CALL &&
           ckpt_pv_is_global(ckpt_pv_call_global(v), "torch._tensor",
                             "_rebuild_from_type_v2");
}

typedef int (*found_fn)(void *ud, const struct found *f,
                        struct ckpt_err *err);

/* Call fn for every value below dict-like d that is not itself dict-like
 * (str and int keys; a top-level "rng" is skipped). */
static int walk(struct ckpt_pv *d, struct found *f, found_fn fn, void *ud,
                struct ckpt_err *err)
{
    struct ckpt_pv *items = ckpt_pv_dict_items(d);
    if (!items || f->depth >= MAX_NEST)
        return 0;
    for (size_t i = 0; i < items->u.dict.n; i++) {
        struct ckpt_pv *k = items->u.dict.k[i];
        if ((k->kind != CKPT_PV_STR && k->kind != CKPT_PV_INT) ||
            (f->depth == 0 && ckpt_pv_str_eq(k, "rng")))
            continue;
        f->keys[f->depth++] = k;
        f->slot = &items->u.dict.v[i];
        int rc = ckpt_pv_dict_items(*f->slot) && !is_st(*f->slot)
                 ? walk(*f->slot, f, fn, ud, err) : fn(ud, f, err);
        f->depth--;
        if (rc != 0)
            return rc;
    }
    return 0;
}

static char *join_keys(struct ckpt_arena *a, const struct found *f)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    for (int i = 0; i < f->depth; i++) {
        if (i)
            ckpt_buf_addch(&b, '.');
        if (f->keys[i]->kind == CKPT_PV_STR)
            ckpt_buf_add(&b, f->keys[i]->u.s.p, f->keys[i]->u.s.len);
        else
            ckpt_buf_addf(&b, "%lld", (long long)f->keys[i]->u.i);
    }
    char *s = ckpt_arena_strndup(a, b.ptr, b.len);
    ckpt_buf_release(&b);
    return s;
}

static int int_list(const struct ckpt_pv *v, uint64_t *out, int n)
{
    if (!v || (v->kind != CKPT_PV_LIST && v->kind != CKPT_PV_TUPLE) ||
        (int)v->u.seq.n != n)
        return -1;
    for (int i = 0; i < n; i++) {
        int64_t x;
        if (ckpt_pv_get_int(v->u.seq.v[i], &x) != 0 || x < 0)
            return -1;
        out[i] = (uint64_t)x;
    }
    return 0;
}

/* --- one ShardedTensor --------------------------------------------------- */

struct stparts {
    const struct ckpt_pv *shards;   /* LIST of Shard */
    struct ckpt_pv *smeta;          /* LIST of ShardMetadata */
    const struct ckpt_dtype *dtype;
    int ndim;
    uint64_t size[CKPT_MAX_DIMS];
};

static int st_parts(const struct ckpt_pv *v, struct stparts *p,
                    const char *fqn, struct ckpt_err *err)
{
    const struct ckpt_pv *a = v->u.call.args;
    const struct ckpt_pv *inner = ckpt_pv_item(a, 2);
    const struct ckpt_pv *state = ckpt_pv_item(a, 3);
    const struct ckpt_pv *md = ckpt_pv_attrs(ckpt_pv_item(state, 1));
    const struct ckpt_pv *size = ckpt_pv_item(inner, 2);
    /* A tuple, or torch.Size(tuple). */
    if (size && size->kind == CKPT_PV_CALL &&
        ckpt_pv_is_global(ckpt_pv_call_global(size), "torch", "Size"))
        size = ckpt_pv_item(size->u.call.args, 0);
    p->shards = ckpt_pv_item(state, 0);
    p->smeta = ckpt_pv_dict_get(md, "shards_metadata");
    p->dtype = ckpt_dtype_from_pv(ckpt_pv_item(inner, 1));
    p->ndim = (int)ckpt_pv_len(size);
    if (!p->shards || p->shards->kind != CKPT_PV_LIST || !p->smeta ||
        p->smeta->kind != CKPT_PV_LIST || !p->dtype ||
        p->ndim > CKPT_MAX_DIMS || int_list(size, p->size, p->ndim) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': not a ShardedTensor "
                            "this version understands", fqn);
    return 0;
}

/* Offsets, sizes and owner rank of a ShardMetadata. */
static int shard_box(const struct ckpt_pv *sm, int ndim, uint64_t *off,
                     uint64_t *size, int64_t *rank)
{
    const struct ckpt_pv *a = ckpt_pv_attrs(sm);
    const struct ckpt_pv *pl = ckpt_pv_attrs(ckpt_pv_dict_get(a, "placement"));
    if (int_list(ckpt_pv_dict_get(a, "shard_offsets"), off, ndim) != 0 ||
        int_list(ckpt_pv_dict_get(a, "shard_sizes"), size, ndim) != 0)
        return -1;
    *rank = -1;
    if (pl && ckpt_pv_get_int(ckpt_pv_dict_get(pl, "_rank"), rank) != 0)
        return -1;
    return 0;
}

/* Does shards_metadata list a equal rank 0's, decoded in boxes (n
 * shards)? */
static int same_meta(const struct ckpt_pv *a, const uint64_t *boxes,
                     size_t n, int ndim)
{
    if (a->u.seq.n != n)
        return 0;
    size_t w = 2 * (size_t)ndim + 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t ao[CKPT_MAX_DIMS], as[CKPT_MAX_DIMS];
        int64_t ar;
        const uint64_t *b = boxes + i * w;
        if (shard_box(a->u.seq.v[i], ndim, ao, as, &ar) != 0 ||
            (uint64_t)ar != b[2 * ndim] ||
            memcmp(ao, b, sizeof(*ao) * (size_t)ndim) ||
            memcmp(as, b + ndim, sizeof(*as) * (size_t)ndim))
            return 0;
    }
    return 1;
}

struct rankctx {
    struct lplan *p;
    int rank;
    const char *file;       /* "rank1.pt" (meta arena) */
    struct usrc *src;
    struct ckpt_tzip *z;
    size_t seen;            /* sharded tensors of this rank */
};

/* Add the local shards of one rank's ShardedTensor f to its entry. */
static int add_shards(void *ud, const struct found *f, struct ckpt_err *err)
{
    struct rankctx *rc = ud;
    struct lplan *p = rc->p;
    struct ckpt_arena *ma = p->j->plan.meta->arena;
    if (!is_st(*f->slot))
        return 0;
    char *fqn = join_keys(ma, f);
    uint64_t idx;
    struct stparts sp;
    if (!fqn)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (!tf_strmap_get(&p->byfqn, fqn, strlen(fqn), &idx) ||
        !p->sts[idx].smeta)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': sharded tensor '%s' "
                            "is not in rank0.pt", rc->file, fqn);
    struct lst *s = &p->sts[idx];
    struct ckpt_dcp_entry *e = &p->j->plan.meta->entries[idx];
    if (st_parts(*f->slot, &sp, fqn, err) != 0)
        return -1;
    if (sp.dtype != e->dtype || sp.ndim != e->ndim ||
        memcmp(sp.size, e->size, sizeof(uint64_t) * (size_t)e->ndim) ||
        !same_meta(sp.smeta, s->boxes, e->chunkcap, e->ndim))
        return ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d disagree on "
                            "the metadata of sharded tensor '%s' (%s)",
                            rc->rank, fqn, rc->file);
    rc->seen++;
    for (size_t i = 0; i < sp.shards->u.seq.n; i++) {
        const struct ckpt_pv *sh = ckpt_pv_attrs(sp.shards->u.seq.v[i]);
        struct ckpt_tensor t;
        uint64_t *off = ckpt_arena_array(ma, (size_t)e->ndim + 1, 8);
        uint64_t *sz = ckpt_arena_array(ma, (size_t)e->ndim + 1, 8);
        int64_t owner;
        char rec[64];
        if (!off || !sz)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        if (shard_box(ckpt_pv_dict_get(sh, "metadata"), e->ndim, off, sz,
                      &owner) != 0 ||
            ckpt_tensor_from_pv(ckpt_pv_dict_get(sh, "tensor"), &t,
                                rc->file, err) != 1)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': local shard %zu "
                                "of '%s' is malformed", rc->file, i, fqn);
        if (owner != rc->rank)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': local shard of "
                                "'%s' belongs to rank %lld", rc->file, fqn,
                                (long long)owner);
        if (t.dtype != e->dtype || t.ndim != e->ndim)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': local shard of "
                                "'%s' has another dtype or rank", rc->file,
                                fqn);
        for (int d = 0; d < e->ndim; d++)
            if ((uint64_t)t.size[d] != sz[d])
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': local shard "
                                    "of '%s' differs from its metadata",
                                    rc->file, fqn);
        snprintf(rec, sizeof(rec), "data/%s", t.key);
        const struct ckpt_tzip_entry *ze = ckpt_tzip_find(rc->z, rec);
        if (!ze || ckpt_tensor_check_bounds(&t, rc->file, err) != 0 ||
            ze->size < t.storage_nbytes)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': storage record "
                                "'%s' of '%s' is missing or short",
                                rc->file, rec, fqn);
        if (e->nchunks == e->chunkcap)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': more shards of "
                                "'%s' than its metadata lists", rc->file,
                                fqn);
        struct ckpt_dcp_chunk *c = &e->chunks[e->nchunks];
        struct uns_zloc *l = &s->locs[e->nchunks++];
        int64_t *stride = ckpt_arena_array(ma, (size_t)e->ndim + 1, 8);
        if (!stride)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        memcpy(stride, t.stride, sizeof(int64_t) * (size_t)e->ndim);
        c->offsets = off;
        c->sizes = sz;
        c->st.file = rc->file;
        c->st.offset = ze->data_off;
        c->st.length = ze->size;
        l->src = rc->src;
        l->data = ze->data_off;
        uns_src_note_record(rc->src, ze->data_off, ze->size, ze->crc,
                            rc->z->prefix, ze->name);
        l->stride = stride;
        l->soff = t.storage_offset;
        l->big_endian = rc->z->big_endian;
    }
    /* Compared and collected: the plain-value check sees None here. */
    *f->slot = NULL;
    return 0;
}

/* --- plain values must agree --------------------------------------------- */

struct eqctx {
    const struct ckpt_tzip *za, *zb;
};

static const struct ckpt_tzip_entry *record(const struct ckpt_tzip *z,
                                            const struct ckpt_pv *pid)
{
    const struct ckpt_pv *k = ckpt_pv_item(pid, 2);
    char rec[64];
    if (!k || k->kind != CKPT_PV_STR || k->u.s.len > 32)
        return NULL;
    snprintf(rec, sizeof(rec), "data/%s", k->u.s.p);
    return ckpt_tzip_find(z, rec);
}

/* Structural equality; storages compare by record size and CRC. */
static int equal(const struct eqctx *q, const struct ckpt_pv *a,
                 const struct ckpt_pv *b, int depth)
{
    if (a == b && q->za == q->zb)
        return 1;
    if (!a || !b)
        return !a && !b;
    if (a->kind != b->kind || depth > CKPT_PICKLE_MAX_DEPTH)
        return 0;
    switch (a->kind) {
    case CKPT_PV_NONE:
        return 1;
    case CKPT_PV_BOOL:
        return a->u.b == b->u.b;
    case CKPT_PV_INT:
        return a->u.i == b->u.i;
    case CKPT_PV_FLOAT:
        return !memcmp(&a->u.f, &b->u.f, sizeof(a->u.f));
    case CKPT_PV_BIGINT: case CKPT_PV_STR: case CKPT_PV_BYTES:
    case CKPT_PV_BYTEARRAY:
        return a->u.s.len == b->u.s.len &&
               !memcmp(a->u.s.p, b->u.s.p, a->u.s.len);
    case CKPT_PV_TUPLE: case CKPT_PV_LIST: case CKPT_PV_SET:
    case CKPT_PV_FROZENSET:
        if (a->u.seq.n != b->u.seq.n)
            return 0;
        for (size_t i = 0; i < a->u.seq.n; i++)
            if (!equal(q, a->u.seq.v[i], b->u.seq.v[i], depth + 1))
                return 0;
        return 1;
    case CKPT_PV_DICT:
        if (a->u.dict.n != b->u.dict.n)
            return 0;
        for (size_t i = 0; i < a->u.dict.n; i++)
            if (!equal(q, a->u.dict.k[i], b->u.dict.k[i], depth + 1) ||
                !equal(q, a->u.dict.v[i], b->u.dict.v[i], depth + 1))
                return 0;
        return 1;
    case CKPT_PV_GLOBAL:
        return !strcmp(a->u.global.module, b->u.global.module) &&
               !strcmp(a->u.global.name, b->u.global.name);
    case CKPT_PV_CALL:
        return a->u.call.how == b->u.call.how &&
               equal(q, a->u.call.fn, b->u.call.fn, depth + 1) &&
               equal(q, a->u.call.args, b->u.call.args, depth + 1) &&
               equal(q, a->u.call.kwargs, b->u.call.kwargs, depth + 1) &&
               equal(q, a->u.call.state, b->u.call.state, depth + 1) &&
               equal(q, a->u.call.listitems, b->u.call.listitems,
                     depth + 1) &&
               equal(q, a->u.call.dictitems, b->u.call.dictitems,
                     depth + 1);
    case CKPT_PV_BUILD:
        return equal(q, a->u.build.obj, b->u.build.obj, depth + 1) &&
               equal(q, a->u.build.state, b->u.build.state, depth + 1);
    case CKPT_PV_PERSID: {
        const struct ckpt_tzip_entry *ra = record(q->za, a->u.persid.pid);
        const struct ckpt_tzip_entry *rb = record(q->zb, b->u.persid.pid);
        const struct ckpt_pv *pa = a->u.persid.pid, *pb = b->u.persid.pid;
        return ra && rb && ra->size == rb->size && ra->crc == rb->crc &&
               equal(q, ckpt_pv_item(pa, 1), ckpt_pv_item(pb, 1),
                     depth + 1) &&
               equal(q, ckpt_pv_item(pa, 4), ckpt_pv_item(pb, 4),
                     depth + 1);
    }
    }
    return 0;
}

int uns_legacy_same(const struct ckpt_tzip *za, const struct ckpt_pv *a,
                    const struct ckpt_tzip *zb, const struct ckpt_pv *b)
{
    struct eqctx q = { za, zb };
    return equal(&q, a, b, 0);
}

/* Top-level values of rank r (sharded tensors already None) against rank
 * 0's. "rng" differs per rank by design and is dropped. */
static int compare_plain(struct lplan *p, struct ckpt_pv *root0,
                         struct ckpt_pv *root, struct rankctx *rc,
                         struct ckpt_err *err)
{
    struct ckpt_pv *a = ckpt_pv_dict_items(root0), *b = ckpt_pv_dict_items(root);
    struct eqctx q = { p->z0, rc->z };
    for (size_t i = 0; i < a->u.dict.n; i++) {
        const struct ckpt_pv *k = a->u.dict.k[i];
        if (ckpt_pv_str_eq(k, "rng"))
            continue;
        const struct ckpt_pv *bv = NULL;
        for (size_t m = 0; m < b->u.dict.n && !bv; m++)
            if (equal(&q, k, b->u.dict.k[m], 0))
                bv = b->u.dict.v[m];
        struct ckpt_buf kb = CKPT_BUF_INIT;
        ckpt_pv_repr(k, &kb, 80);
        int same = bv && equal(&q, a->u.dict.v[i], bv, 0);
        if (!same)
            ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d disagree on "
                         "%s (%s)", rc->rank, kb.ptr, rc->file);
        ckpt_buf_release(&kb);
        if (!same)
            return -1;
    }
    if (a->u.dict.n != b->u.dict.n)
        return ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d hold "
                            "different top-level keys (%s)", rc->rank,
                            rc->file);
    return 0;
}

/* --- ranks --------------------------------------------------------------- */

/* rankN.pt -> N, or -1. */
static long rank_file(const char *s)
{
    uint64_t r;
    size_t l = strlen(s);
    char num[32];
    if (l < 8 || strncmp(s, "rank", 4) || strcmp(s + l - 3, ".pt") ||
        l - 7 >= sizeof(num))
        return -1;
    memcpy(num, s + 4, l - 7);
    num[l - 7] = 0;
    return ckpt_parse_u64(num, &r) == 0 && r < MAX_RANKS ? (long)r : -1;
}

/* Number of rank files: rank0.pt .. rank{N-1}.pt must all exist. One
 * listing of the step (a LIST remotely, however many ranks). */
static int count_ranks(struct ujob *j, const char *dir, int *n,
                       struct ckpt_err *err)
{
    struct uns_dir d;
    long max = -1;
    if (uns_fs_list(j, dir, 0, &d, err) != 0)
        return -1;
    for (size_t i = 0; i < d.n; i++) {
        long r = rank_file(d.v[i].name);
        max = r > max ? r : max;
    }
    int rc = max < 0 ? ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': no rank*.pt "
                                    "files", dir) : 0;
    for (long r = 0; rc == 0 && r <= max; r++) {
        char name[32];
        snprintf(name, sizeof(name), "rank%ld.pt", r);
        if (!uns_fs_has_file(&d, name))
            rc = ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing "
                              "(rank files up to rank%ld.pt exist)", dir,
                              name, max);
    }
    /* Every rank file is read, rank after rank: remote ones are fetched
     * ahead (sources/prefetch.c). */
    for (long r = 0; rc == 0 && r <= max; r++) {
        char name[32];
        snprintf(name, sizeof(name), "rank%ld.pt", r);
        const char *rel = ckpt_arena_strdup(j->plan.meta->arena, name);
        rc = rel ? uns_src_prefetch(j, rel, uns_fs_find(&d, name), err)
                 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    uns_fs_free(&d);
    if (rc == 0)
        *n = (int)max + 1;
    return rc;
}

/* Open rank r's zip and parse its data.pkl into arena a. */
static int load_rank(struct lplan *p, int r, struct ckpt_arena *a,
                     struct rankctx *rc, struct ckpt_pv **root,
                     struct ckpt_err *err)
{
    char name[32];
    struct ckpt_rd rd;
    struct src_cache cache;
    char *pkl = NULL;
    size_t plen;
    snprintf(name, sizeof(name), "rank%d.pt", r);
    memset(rc, 0, sizeof(*rc));
    rc->p = p;
    rc->rank = r;
    rc->file = ckpt_arena_strndup(p->j->plan.meta->arena, name, strlen(name));
    if (!rc->file)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (uns_src_get(p->j, rc->file, &rc->src, err) != 0)
        return -1;
    /* Remote: the zip's records and data.pkl in a few ranged GETs. */
    uns_src_rd_cached(&rd, &cache, rc->src, 0, rc->src->size);
    const struct ckpt_tzip_entry *pe;
    /* A whole rank's state: bounded by the arena. */
    struct ckpt_pickle_opts po = { .name = "data.pkl", .allow = NULL,
                                   .max_values = SIZE_MAX,
                                   .max_bytes = SIZE_MAX };
    int rcode = ckpt_tzip_open(&rc->z, &rd, err);
    if (rcode == 0 && !(pe = ckpt_tzip_find(rc->z, "data.pkl")))
        rcode = ckpt_err_set(err, CKPT_EFORMAT, "record 'data.pkl' missing");
    if (rcode == 0)
        rcode = ckpt_tzip_read(rc->z, &rd, pe, MAX_PKL, &pkl, &plen, err);
    if (rcode == 0)
        rcode = ckpt_pickle_load(a, pkl, plen, &po, root, NULL, err);
    if (rcode == 0 && !ckpt_pv_dict_items(*root))
        rcode = ckpt_err_set(err, CKPT_EFORMAT, "not a state dict");
    free(pkl);
    uns_src_cache_release(&cache);
    if (rcode != 0 && rc->src && !strstr(err->msg, rc->src->name))
        ckpt_err_prefix(err, "%s", rc->src->name);
    return rcode;
}

static struct ckpt_pv *path_of(struct ckpt_arena *a, const struct found *f)
{
    struct ckpt_pv *t = ckpt_pv_new(a, CKPT_PV_TUPLE);
    for (int i = 0; t && i < f->depth; i++)
        if (ckpt_pv_push(a, t, f->keys[i]) != 0)
            return NULL;
    return t;
}

static int add_leaf(struct lplan *p, const struct found *f,
                    struct ckpt_err *err)
{
    if (p->nleaves == p->leafcap) {
        p->leafcap = p->leafcap ? 2 * p->leafcap : 64;
        p->leaves = ckpt_xreallocarray(p->leaves, p->leafcap,
                                       sizeof(*p->leaves));
    }
    struct lleaf *l = &p->leaves[p->nleaves++];
    l->slot = f->slot;
    l->fqn = join_keys(p->j->plan.meta->arena, f);
    l->path = path_of(p->j->plan.arena, f);
    return l->fqn && l->path ? 0 : ckpt_err_set(err, CKPT_ENOMEM,
                                                "out of memory");
}

/* Rank 0: one tensor entry per ShardedTensor or plain tensor, one object
 * entry per other value, in graph order. */
static int add_entry(void *ud, const struct found *f, struct ckpt_err *err)
{
    struct lplan *p = ud;
    struct ckpt_arena *ma = p->j->plan.meta->arena;
    struct stparts sp;
    struct ckpt_tensor t;
    int st = is_st(*f->slot), plain = 0;
    if (!st) {
        plain = ckpt_tensor_from_pv(*f->slot, &t, "rank0.pt", err);
        if (plain < 0)
            return -1;
        if (!plain)
            return add_leaf(p, f, err);
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->sts = ckpt_xreallocarray(p->sts, p->cap, sizeof(*p->sts));
    }
    struct lst *s = &p->sts[p->n];
    memset(s, 0, sizeof(*s));
    s->slot = f->slot;
    s->fqn = join_keys(ma, f);
    s->path = path_of(p->j->plan.arena, f);
    if (!s->fqn || !s->path)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (plain) {
        s->plain = ckpt_xmalloc(sizeof(t));
        *s->plain = t;
    } else if (st_parts(*f->slot, &sp, s->fqn, err) != 0) {
        return -1;
    } else {
        s->smeta = sp.smeta;
        p->nsharded++;
    }
    if (tf_strmap_put(&p->byfqn, s->fqn, strlen(s->fqn), p->n) != 0)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    p->n++;
    return 0;
}

/* A plain tensor of rank 0: one chunk, the whole tensor, where it is. */
static int plain_entry(struct lplan *p, struct lst *s,
                       struct ckpt_dcp_entry *e, struct ckpt_err *err)
{
    struct ckpt_arena *ma = p->j->plan.meta->arena;
    const struct ckpt_tensor *t = s->plain;
    size_t nd = (size_t)t->ndim + 1;
    uint64_t *size = ckpt_arena_array(ma, nd, 8);
    uint64_t *off = ckpt_arena_array(ma, nd, 8);
    int64_t *stride = ckpt_arena_array(ma, nd, 8);
    char rec[64];
    e->chunks = ckpt_arena_array(ma, 1, sizeof(*e->chunks));
    s->locs = ckpt_arena_array(ma, 1, sizeof(*s->locs));
    if (!size || !off || !stride || !e->chunks || !s->locs)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    snprintf(rec, sizeof(rec), "data/%s", t->key);
    const struct ckpt_tzip_entry *ze = ckpt_tzip_find(p->z0, rec);
    if (!ze || ckpt_tensor_check_bounds(t, "rank0.pt", err) != 0 ||
        ze->size < t->storage_nbytes)
        return ckpt_err_set(err, CKPT_EFORMAT, "'rank0.pt': storage record "
                            "'%s' of '%s' is missing or short", rec, s->fqn);
    for (int d = 0; d < t->ndim; d++)
        size[d] = (uint64_t)t->size[d];
    memcpy(stride, t->stride, sizeof(int64_t) * (size_t)t->ndim);
    e->fqn = s->fqn;
    e->kind = CKPT_DCP_TENSOR;
    e->dtype = t->dtype;
    e->ndim = t->ndim;
    e->size = size;
    e->nchunks = e->chunkcap = 1;
    e->path = s->path;
    e->chunks[0].offsets = off;
    e->chunks[0].sizes = size;
    e->chunks[0].st.file = "rank0.pt";
    e->chunks[0].st.offset = ze->data_off;
    e->chunks[0].st.length = ze->size;
    s->locs[0] = (struct uns_zloc){ p->src0, ze->data_off, stride,
                                    t->storage_offset, p->z0->big_endian };
    return 0;
}

/* Entries: tensors first (plan_tensors numbers them in entry order, so
 * tensor i is entry i), then one object entry per other value. */
static int make_entries(struct lplan *p, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = p->j->plan.meta;
    size_t n = p->n + p->nleaves;
    m->entries = ckpt_arena_array(m->arena, n + 1, sizeof(*m->entries));
    if (!m->entries)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        struct lst *s = &p->sts[i];
        struct ckpt_dcp_entry *e = &m->entries[m->n++];
        struct stparts sp;
        if (s->plain) {
            if (plain_entry(p, s, e, err) != 0)
                return -1;
            continue;
        }
        if (st_parts(*s->slot, &sp, s->fqn, err) != 0)
            return -1;
        size_t cap = sp.smeta->u.seq.n, w = 2 * (size_t)sp.ndim + 1;
        s->boxes = ckpt_arena_array(m->arena, cap * w + 1, 8);
        if (!s->boxes)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        /* The last rank file missing looks like a smaller world: the
         * metadata still names its shards. */
        for (size_t k = 0; k < cap; k++) {
            uint64_t *o = s->boxes + k * w, *z = o + sp.ndim;
            int64_t owner;
            if (shard_box(sp.smeta->u.seq.v[k], sp.ndim, o, z, &owner) != 0)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': malformed "
                                    "shards_metadata", s->fqn);
            z[sp.ndim] = (uint64_t)owner;
            if (owner >= p->nranks)
                return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/rank%lld.pt' "
                                    "is missing (sharded tensor '%s' has a "
                                    "shard on rank %lld)", p->j->src.dir,
                                    (long long)owner, s->fqn,
                                    (long long)owner);
        }
        uint64_t *size = ckpt_arena_array(m->arena, (size_t)sp.ndim + 1, 8);
        e->chunks = ckpt_arena_array(m->arena, cap + 1, sizeof(*e->chunks));
        s->locs = ckpt_arena_array(m->arena, cap + 1, sizeof(*s->locs));
        if (!size || !e->chunks || !s->locs)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        memcpy(size, sp.size, sizeof(uint64_t) * (size_t)sp.ndim);
        e->fqn = s->fqn;
        e->kind = CKPT_DCP_TENSOR;
        e->dtype = sp.dtype;
        e->ndim = sp.ndim;
        e->size = size;
        e->chunkcap = cap;
        e->path = s->path;
    }
    for (size_t i = 0; i < p->nleaves; i++) {
        struct ckpt_dcp_entry *e = &m->entries[m->n++];
        e->fqn = p->leaves[i].fqn;
        e->kind = CKPT_DCP_BYTES;
        e->path = p->leaves[i].path;
    }
    return 0;
}

static int locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                  struct ckpt_err *err)
{
    struct lplan *p = j->plan.fmtplan;
    const struct uns_zloc *l = &p->sts[t->e - j->plan.meta->entries]
                                    .locs[c->meta - t->e->chunks];
    (void)err;
    uns_chunk_at(c, l, t->e->ndim);
    return 0;
}

/* Rank 0's graph minus "rng", sharded tensors replaced by the output
 * tensors, its own storages (plain tensors) remapped to output records. */
static int build_root(struct lplan *p, struct ckpt_pv *root0,
                      struct ckpt_pv **root, struct ckpt_err *err)
{
    struct ujob *j = p->j;
    struct ckpt_dcp_meta *m = j->plan.meta;
    struct ckpt_pv *items = ckpt_pv_dict_items(root0);
    struct ckpt_rd rd;
    uns_src_rd(&rd, p->src0, 0, p->src0->size);
    j->plan.values = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.values));
    j->plan.paths = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.paths));
    if (!(*root = ckpt_pv_new(j->plan.arena, CKPT_PV_DICT)))
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->nleaves; i++) {
        size_t ei = p->n + i;
        struct ckpt_pv *v = *p->leaves[i].slot;
        j->plan.paths[ei] = m->entries[ei].path;
        j->plan.values[ei] = v;
        j->plan.objects++;
        if (uns_tree_remap(j, &m->entries[ei], v, p->z0, &rd, p->src0,
                           err) != 0)
            return -1;
    }
    for (size_t i = 0; i < p->n; i++) {
        struct ckpt_pv *v = uns_tree_tensor(j, &j->plan.tensors[i]);
        if (!v)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        *p->sts[i].slot = v;
        j->plan.paths[i] = m->entries[i].path;
        j->plan.values[i] = v;
    }
    for (size_t i = 0; i < items->u.dict.n; i++)
        if (!ckpt_pv_str_eq(items->u.dict.k[i], "rng") &&
            ckpt_pv_dict_add(j->plan.arena, *root, items->u.dict.k[i],
                             items->u.dict.v[i]) != 0)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    return 0;
}

static int other_ranks(struct lplan *p, struct ckpt_pv *root0,
                       struct ckpt_err *err)
{
    for (int r = 1; r < p->nranks; r++) {
        struct ckpt_arena *a = ckpt_arena_new(2048ULL << 20);
        struct rankctx rc;
        struct ckpt_pv *root;
        struct found f;
        memset(&f, 0, sizeof(f));
        int rcode = a ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        if (rcode == 0)
            rcode = load_rank(p, r, a, &rc, &root, err);
        if (rcode == 0)
            rcode = walk(root, &f, add_shards, &rc, err);
        if (rcode == 0 && rc.seen != p->nsharded)
            rcode = ckpt_err_set(err, CKPT_EFORMAT, "'%s' holds %zu "
                                 "sharded tensors, rank0.pt %zu", rc.file,
                                 rc.seen, p->nsharded);
        if (rcode == 0)
            rcode = compare_plain(p, root0, root, &rc, err);
        ckpt_tzip_free(rc.z);
        ckpt_arena_free(a);
        if (rcode != 0)
            return -1;
    }
    return 0;
}

int uns_legacy_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct lplan p;
    struct rankctx rc0;
    struct ckpt_pv *root0 = NULL, *root;
    struct found f;
    memset(&p, 0, sizeof(p));
    memset(&rc0, 0, sizeof(rc0));
    memset(&f, 0, sizeof(f));
    p.j = j;
    int rc = uns_plan_own_init(j, src, "rank*.pt", &p, locate, err);
    if (rc == 0)
        rc = count_ranks(j, src, &p.nranks, err);
    if (rc == 0)
        rc = load_rank(&p, 0, j->plan.arena, &rc0, &root0, err);
    p.z0 = rc0.z;
    p.src0 = rc0.src;
    if (rc == 0)
        rc = walk(root0, &f, add_entry, &p, err);
    if (rc == 0)
        rc = make_entries(&p, err);
    /* Rank 0's shards are collected like everyone's; its slots then hold
     * None until build_root puts the output tensors there. */
    if (rc == 0)
        rc = walk(root0, &f, add_shards, &rc0, err);
    if (rc == 0)
        rc = other_ranks(&p, root0, err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = build_root(&p, root0, &root, err);
    if (rc == 0)
        rc = trainer_layout(j, root, err);
    if (rc != 0 && err->msg[0] && !strstr(err->msg, src))
        ckpt_err_prefix(err, "%s", src);
    ckpt_tzip_free(p.z0);
    tf_strmap_release(&p.byfqn);
    for (size_t i = 0; i < p.n; i++)
        free(p.sts[i].plain);
    free(p.sts);
    free(p.leaves);
    j->plan.fmtplan = NULL;
    return rc;
}
