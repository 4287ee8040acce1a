/*
 * engine/plan.c - everything decided before a byte is written: where each chunk's
 * elements are (its item's zip, parsed in pool tasks), whether the chunks
 * of each tensor tile it exactly, and how the tensor is cut into bands.
 *
 * A DCP read from object storage is planned from its metadata alone: the
 * output layout needs only shapes and dtypes, which the metadata holds.
 * Its chunks are located by the copy instead (uns_plan_locate), which
 * fetches every item's bytes anyway in large read-ahead blocks: probing
 * up front cost one ranged GET per item (1,290 for a 1 GiB step of 1,250
 * items, half of the unshard's time on s3rver) on top of those blocks.
 * The checks are the same, item by item, before any of its bytes are
 * copied, and chunks the copy does not read are located after it.
 *
 * A band is a run of the tensor that is contiguous in the output: fixed
 * indices on the dimensions before bdim, a range of bk indices on bdim,
 * everything after. Bands are the unit of work: a task assembles one band
 * from every chunk that intersects it, so it can checksum and write it in
 * output order, and memory per task is bounded by the band size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

static void fmt_box(char *buf, size_t n, const uint64_t *off,
                    const uint64_t *size, int ndim)
{
    size_t o = 0;
    o += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu:%llu", d ? ", " : "",
                              (unsigned long long)off[d],
                              (unsigned long long)(off[d] + size[d]));
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

const char *uns_fmt_shape(char *buf, size_t n, const uint64_t *size,
                          int ndim)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", d ? ", " : "",
                              (unsigned long long)size[d]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
    return buf;
}

/* --- probing: locate every chunk's elements ---------------------------- */

struct probe {
    struct ujob *j;
    struct utensor *t;
};

static int probe_chunk(struct ujob *j, struct utensor *t, struct uchunk *c,
                       struct ckpt_err *err)
{
    const struct ckpt_dcp_entry *e = t->e;
    uint64_t bytes = e->dtype->itemsize, off, len;
    for (int d = 0; d < e->ndim; d++)
        if (ckpt_mul_u64(bytes, c->meta->sizes[d], &bytes) != 0)
            return ckpt_err_set(err, CKPT_EFORMAT, "chunk size overflows");
    struct ckpt_tensor_loc loc;
    struct ckpt_rd rd;
    if (j->plan.locate)
        return j->plan.locate(j, t, c, err);
    if (uns_src_item(j, &c->meta->st, bytes + (16u << 20), &c->src, &off, &len,
                     err) != 0)
        return -1;
    int st = uns_st_item_locate(j, t, c, c->src, off, err);
    if (st != 0)
        return st < 0 ? -1 : 0;
    struct src_cache cache;
    if (j->src.ra && c->src->st == j->src.ra) {
        /* Located by the copy: the read-ahead blocks hold the item. */
        memset(&cache, 0, sizeof(cache));
        uns_src_rd(&rd, c->src, off, len);
    } else {
        uns_src_rd_cached(&rd, &cache, c->src, off, len);
    }
    int rc = ckpt_tensor_item_load(&rd, &loc, err);
    uns_src_cache_release(&cache);
    if (rc != 0)
        return -1;
    if (loc.t.dtype != e->dtype)
        return ckpt_err_set(err, CKPT_EFORMAT, "stored dtype %s differs "
                            "from the metadata's %s", loc.t.dtype->name,
                            e->dtype->name);
    if (loc.t.ndim != e->ndim)
        return ckpt_err_set(err, CKPT_EFORMAT, "stored tensor has %d "
                            "dimensions, the metadata %d", loc.t.ndim,
                            e->ndim);
    for (int d = 0; d < e->ndim; d++)
        if ((uint64_t)loc.t.size[d] != c->meta->sizes[d])
            return ckpt_err_set(err, CKPT_EFORMAT, "stored shape differs "
                                "from the chunk's");
    memcpy(c->stride, loc.t.stride, sizeof(int64_t) * (size_t)e->ndim);
    c->soff = loc.t.storage_offset;
    c->item_off = off;
    c->data = off + loc.data_off;
    c->big_endian = loc.big_endian;
    c->conj = loc.t.conj;
    c->neg = loc.t.neg;
    uns_src_note_record(c->src, c->data, loc.data_size, loc.crc, NULL, loc.rec);
    return 0;
}

/* probe_chunk, its error naming tensor and chunk; c marked located. */
static int locate_one(struct ujob *j, struct utensor *t, struct uchunk *c,
                      struct ckpt_err *err)
{
    if (probe_chunk(j, t, c, err) != 0) {
        char box[256];
        fmt_box(box, sizeof(box), c->meta->offsets, c->meta->sizes,
                t->e->ndim);
        ckpt_err_prefix(err, "tensor '%s' chunk %s", t->e->fqn, box);
        return -1;
    }
    atomic_store_explicit(&c->located, 1, memory_order_release);
    return 0;
}

/* Every chunk of p->t not yet located. */
static void probe_task(void *arg)
{
    struct probe *p = arg;
    struct ckpt_err err = CKPT_ERR_INIT;
    for (size_t i = 0; i < p->t->e->nchunks && !p->j->failed; i++) {
        struct uchunk *c = &p->t->chunks[i];
        if (atomic_load_explicit(&c->located, memory_order_acquire))
            continue;
        if (locate_one(p->j, p->t, c, &err) != 0) {
            uns_job_fail(p->j, &err);
            break;
        }
    }
    free(p);
}

/* One probe task per tensor; 0, or -1 with the first failure. */
static int probe_all(struct ujob *j, struct ckpt_err *err)
{
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        struct probe *p = ckpt_xmalloc(sizeof(*p));
        p->j = j;
        p->t = &j->plan.tensors[i];
        ckpt_pool_submit(j->pool, probe_task, p);
    }
    ckpt_pool_wait(j->pool);
    if (j->failed) {
        *err = j->err;
        return -1;
    }
    return 0;
}

/* Chunks located by the copy: two workers wanting the same chunk (bands
 * of one tensor) locate it once, the second waiting for the first. Locks
 * striped over chunks, so chunks of other items go on meanwhile. */
#define LOC_LOCKS 16
static pthread_mutex_t loc_mu[LOC_LOCKS];
static pthread_once_t loc_once = PTHREAD_ONCE_INIT;

static void loc_init(void)
{
    for (int i = 0; i < LOC_LOCKS; i++)
        pthread_mutex_init(&loc_mu[i], NULL);
}

void uns_chunk_at(struct uchunk *c, const struct uns_zloc *l, int ndim)
{
    c->src = l->src;
    c->item_off = 0;
    c->data = l->data;
    memcpy(c->stride, l->stride, sizeof(int64_t) * (size_t)ndim);
    c->soff = l->soff;
    c->big_endian = l->big_endian;
}

int uns_plan_locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                    struct ckpt_err *err)
{
    if (atomic_load_explicit(&c->located, memory_order_acquire))
        return 0;
    pthread_once(&loc_once, loc_init);
    pthread_mutex_t *mu = &loc_mu[((uintptr_t)c / sizeof(*c)) % LOC_LOCKS];
    pthread_mutex_lock(mu);
    int rc = atomic_load_explicit(&c->located, memory_order_acquire)
                 ? 0
                 : locate_one(j, t, c, err);
    pthread_mutex_unlock(mu);
    return rc;
}

int uns_plan_locate_rest(struct ujob *j, struct ckpt_err *err)
{
    return j->plan.lazy ? probe_all(j, err) : 0;
}

/* --- coverage ------------------------------------------------------------ */

static int cmp_chunk(const void *a, const void *b, void *ud)
{
    const struct uchunk *x = *(struct uchunk *const *)a;
    const struct uchunk *y = *(struct uchunk *const *)b;
    int nd = *(const int *)ud;
    for (int d = 0; d < nd; d++)
        if (x->meta->offsets[d] != y->meta->offsets[d])
            return x->meta->offsets[d] < y->meta->offsets[d] ? -1 : 1;
    for (int d = 0; d < nd; d++)
        if (x->meta->sizes[d] != y->meta->sizes[d])
            return x->meta->sizes[d] < y->meta->sizes[d] ? -1 : 1;
    return 0;
}

static uint64_t volume(const uint64_t *size, int nd)
{
    uint64_t v = 1;
    for (int d = 0; d < nd; d++)
        v *= size[d];   /* bounded: chunks lie inside the tensor */
    return v;
}

/* 1 if the boxes intersect, 2 if they are the same box. */
static int overlap(const struct uchunk *a, const struct uchunk *b, int nd)
{
    int same = 1;
    for (int d = 0; d < nd; d++) {
        uint64_t alo = a->meta->offsets[d], ahi = alo + a->meta->sizes[d];
        uint64_t blo = b->meta->offsets[d], bhi = blo + b->meta->sizes[d];
        if (alo >= bhi || blo >= ahi)
            return 0;
        same &= alo == blo && ahi == bhi;
    }
    return same ? 2 : 1;
}

static int overlap_error(const struct utensor *t, const struct uchunk *a,
                         const struct uchunk *b, int same,
                         struct ckpt_err *err)
{
    char x[256], y[256];
    int nd = t->e->ndim;
    fmt_box(x, sizeof(x), a->meta->offsets, a->meta->sizes, nd);
    fmt_box(y, sizeof(y), b->meta->offsets, b->meta->sizes, nd);
    if (same)
        return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': chunk %s is "
                            "stored twice (--allow-replicas accepts "
                            "identical replicas)", t->e->fqn, x);
    return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': chunks %s and %s "
                        "overlap", t->e->fqn, x, y);
}

/* Sweep along dimension 0: only chunks whose first ranges intersect can
 * overlap, so typical row/block shardings cost O(n log n). */
static int check_overlaps(struct utensor *t, struct uchunk **v, size_t n,
                          int allow, struct ckpt_err *err)
{
    int nd = t->e->ndim;
    for (size_t i = 0; i < n; i++) {
        if (v[i]->skip || !volume(v[i]->meta->sizes, nd))
            continue;
        for (size_t k = i + 1; k < n; k++) {
            if (nd && v[k]->meta->offsets[0] >=
                      v[i]->meta->offsets[0] + v[i]->meta->sizes[0])
                break;
            if (v[k]->skip || !volume(v[k]->meta->sizes, nd))
                continue;
            int o = overlap(v[i], v[k], nd);
            if (o == 2 && allow)
                v[k]->skip = 1;
            else if (o)
                return overlap_error(t, v[i], v[k], o == 2, err);
        }
    }
    return 0;
}

static int coverage(struct ujob *j, struct utensor *t, struct ckpt_err *err)
{
    const struct ckpt_dcp_entry *e = t->e;
    int nd = e->ndim;
    size_t n = e->nchunks;
    struct uchunk **v = ckpt_xcalloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = &t->chunks[i];
    qsort_r(v, n, sizeof(*v), cmp_chunk, &nd);
    int rc = check_overlaps(t, v, n, j->src.allow_replicas, err);
    uint64_t covered = 0, total = volume(e->size, nd);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!v[i]->skip)
            covered += volume(v[i]->meta->sizes, nd);
    if (rc == 0 && covered != total)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': chunks cover "
                          "%llu of %llu elements", e->fqn,
                          (unsigned long long)covered,
                          (unsigned long long)total);
    free(v);
    return rc;
}

/* --- bands ----------------------------------------------------------------- */

void uns_plan_cut_bands(struct utensor *t, uint64_t target)
{
    const struct ckpt_dcp_entry *e = t->e;
    int nd = e->ndim;
    t->bdim = -1;
    t->bk = 1;
    t->per_prefix = 1;
    t->nbands = t->nbytes ? 1 : 0;
    if (!t->nbytes || t->nbytes <= target)
        return;
    /* row[d]: bytes of one step along d. The first d whose step fits. */
    uint64_t row = t->nbytes;
    int d = 0;
    for (; d < nd; d++) {
        row /= e->size[d];
        if (row <= target)
            break;
    }
    uint64_t prefixes = 1;
    for (int k = 0; k < d; k++)
        prefixes *= e->size[k];
    t->bdim = d;
    t->bk = target / row;
    if (t->bk > e->size[d])
        t->bk = e->size[d];
    t->per_prefix = (e->size[d] + t->bk - 1) / t->bk;
    t->nbands = prefixes * t->per_prefix;
}

void uns_plan_band_box(const struct utensor *t, uint64_t band, uint64_t *lo,
                       uint64_t *hi, uint64_t *dst_off, uint64_t *len)
{
    const struct ckpt_dcp_entry *e = t->e;
    int nd = e->ndim, bd = t->bdim;
    for (int d = 0; d < nd; d++) {
        lo[d] = 0;
        hi[d] = e->size[d];
    }
    if (bd < 0) {
        *dst_off = 0;
        *len = t->nbytes;
        return;
    }
    uint64_t p = band / t->per_prefix, a = (band % t->per_prefix) * t->bk;
    for (int d = bd - 1; d >= 0; d--) {
        lo[d] = p % e->size[d];
        hi[d] = lo[d] + 1;
        p /= e->size[d];
    }
    lo[bd] = a;
    hi[bd] = a + t->bk < e->size[bd] ? a + t->bk : e->size[bd];
    uint64_t elem = 0, stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        elem += lo[d] * stride;
        stride *= e->size[d];
    }
    uint64_t row = e->dtype->itemsize;
    for (int d = bd + 1; d < nd; d++)
        row *= e->size[d];
    *dst_off = elem * e->dtype->itemsize;
    *len = (hi[bd] - lo[bd]) * row;
}

int uns_plan_own_init(struct ujob *j, const char *src, const char *metaname,
                       void *plan, ujob_locate_fn locate, struct ckpt_err *err)
{
    j->src.dir = ckpt_xstrdup(src);
    j->src.olmo_step = 1;
    j->src.metaname = metaname;
    j->plan.meta = ckpt_dcp_meta_new();
    j->plan.fmtplan = plan;
    j->plan.locate = locate;
    j->plan.olmo = j->o->layout != CKPT_LAYOUT_SINGLE;
    return j->plan.meta ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

/* --- entry point --------------------------------------------------------- */

static int init_tensor(struct ujob *j, struct utensor *t,
                       const struct ckpt_dcp_entry *e, struct ckpt_err *err)
{
    t->e = e;
    t->file = -1;
    t->nbytes = e->dtype->itemsize;
    for (int d = 0; d < e->ndim; d++)
        if (ckpt_mul_u64(t->nbytes, e->size[d], &t->nbytes) != 0)
            return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s' is too "
                                "large", e->fqn);
    t->chunks = ckpt_arena_array(j->plan.arena, e->nchunks ? e->nchunks : 1,
                                 sizeof(*t->chunks));
    if (!t->chunks)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < e->nchunks; i++) {
        t->chunks[i].meta = &e->chunks[i];
        t->chunks[i].stride = ckpt_arena_array(j->plan.arena, (size_t)e->ndim + 1,
                                               sizeof(int64_t));
        if (!t->chunks[i].stride)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    return 0;
}

int uns_plan_tensors(struct ujob *j, struct ckpt_err *err)
{
    const struct ckpt_dcp_meta *m = j->plan.meta;
    j->plan.tensors = ckpt_xcalloc(m->n ? m->n : 1, sizeof(*j->plan.tensors));
    for (size_t i = 0; i < m->n; i++) {
        if (m->entries[i].kind != CKPT_DCP_TENSOR)
            continue;
        struct utensor *t = &j->plan.tensors[j->plan.ntensors++];
        if (init_tensor(j, t, &m->entries[i], err) != 0 ||
            coverage(j, t, err) != 0) {
            ckpt_err_prefix(err, "%s", j->src.dir);
            return -1;
        }
        uns_plan_cut_bands(t, j->plan.band);
    }
    /* Coverage is checked on the metadata alone, so a bad plan fails
     * before the (slower) probing reads any item. A DCP read through the
     * storage API (object storage, a plain tar) is located by the copy;
     * a dry run, which copies nothing, probes. */
    j->plan.lazy = j->src.st && !j->plan.locate && j->dst.out;
    if (!j->plan.lazy && probe_all(j, err) != 0)
        return -1;
    uns_dec_bands(j);
    return 0;
}
