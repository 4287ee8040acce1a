/*
 * engine/engine.c - the copy: one pool task per band of an output tensor (or
 * piece of a copied record). A task gathers its band from every chunk
 * that intersects it into a buffer in output order, checksums it, and
 * pwrites it at its final offset. With --verify the same task instead
 * reads the band back from the output and compares.
 *
 * The CRC-32 of every zip record read from is checked on the way
 * (sources/crc_check.c).
 *
 * Tensors of decoded chunks (zarr, Orbax; engine/decode.c) go chunk by chunk
 * instead: a task decodes one chunk and writes it from its buffer. To a
 * remote output, those whose chunks are not whole rows go by chunk rows
 * (or through scratch): see uns_engine_remote_plan below.
 *
 * Reads: when a chunk's part of the band is contiguous in both source and
 * output (row sharding, or column sharding of whole rows) it is one pread
 * straight into the band buffer; otherwise the source span is read once
 * and scattered, or, for sparse strided layouts, read run by run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"

/* --- buffers ------------------------------------------------------------ */

int uns_bufpool_init(struct bufpool *b, size_t size)
{
    memset(b, 0, sizeof(*b));
    b->size = size;
    b->mult = 3;
    return pthread_mutex_init(&b->mu, NULL) == 0 ? 0 : -1;
}

/* A buffer of mult * size bytes (band, read space, verify scratch, and
 * for a cast band its cast); reused across tasks so buffers are not
 * mapped and unmapped per band. */
static char *bufpool_get(struct bufpool *b)
{
    char *p = NULL;
    pthread_mutex_lock(&b->mu);
    if (b->nfree)
        p = b->free_[--b->nfree];
    pthread_mutex_unlock(&b->mu);
    return p ? p : ckpt_xmalloc(b->mult * b->size);
}

static void bufpool_put(struct bufpool *b, char *p)
{
    pthread_mutex_lock(&b->mu);
    if (b->nfree == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 16;
        b->free_ = ckpt_xreallocarray(b->free_, b->cap, sizeof(*b->free_));
    }
    b->free_[b->nfree++] = p;
    pthread_mutex_unlock(&b->mu);
}

void uns_bufpool_release(struct bufpool *b)
{
    for (size_t i = 0; i < b->nfree; i++)
        free(b->free_[i]);
    free(b->free_);
    pthread_mutex_destroy(&b->mu);
}

void uns_job_fail(struct ujob *j, const struct ckpt_err *err)
{
    pthread_mutex_lock(&j->mu);
    if (!j->failed) {
        j->err = *err;
        j->failed = 1;
    }
    pthread_mutex_unlock(&j->mu);
    uns_outobj_wake(j);     /* tasks waiting for memory give up */
}

/* --- gathering a band ------------------------------------------------ */

struct box {
    int nd;
    uint64_t lo[CKPT_MAX_DIMS], e[CKPT_MAX_DIMS];  /* intersection */
    int64_t gstride[CKPT_MAX_DIMS];                /* output, elements */
    int64_t base;                                  /* band start, elems */
};

static void swap_elems(char *p, uint64_t n, unsigned size, unsigned unit)
{
    if (unit < 2)
        return;
    for (uint64_t i = 0; i < n * size; i += unit)
        for (unsigned a = 0, z = unit - 1; a < z; a++, z--) {
            char t = p[i + a];
            p[i + a] = p[i + z];
            p[i + z] = t;
        }
}

/* Runs of one chunk's intersection: the innermost dimensions that are
 * contiguous in both source and output merge into one run of `run`
 * elements; dims 0..outer are iterated. */
struct runs {
    int outer;
    uint64_t run, nruns;
    int64_t s0, d0;           /* first run: source / output element */
};

static void make_runs(const struct box *bx, const struct uchunk *c,
                      struct runs *r)
{
    int m = bx->nd - 1;
    r->run = 1;
    while (m >= 0 && (bx->e[m] == 1 || (bx->gstride[m] == (int64_t)r->run &&
                                        c->stride[m] == (int64_t)r->run))) {
        r->run *= bx->e[m];
        m--;
    }
    r->outer = m;
    r->nruns = 1;
    r->s0 = c->soff;
    r->d0 = -bx->base;
    for (int d = 0; d < bx->nd; d++) {
        if (d <= m)
            r->nruns *= bx->e[d];
        r->s0 += (int64_t)(bx->lo[d] - c->meta->offsets[d]) * c->stride[d];
        r->d0 += (int64_t)bx->lo[d] * bx->gstride[d];
    }
}

/* Source span of the intersection, in elements from s0. */
static uint64_t src_span(const struct box *bx, const struct uchunk *c)
{
    uint64_t span = 1;
    for (int d = 0; d < bx->nd; d++)
        span += (bx->e[d] - 1) * (uint64_t)c->stride[d];
    return span;
}

/* Visit every run: fn(ud, source element, output element). */
static int each_run(const struct box *bx, const struct uchunk *c,
                    const struct runs *r,
                    int (*fn)(void *, int64_t, int64_t), void *ud)
{
    uint64_t idx[CKPT_MAX_DIMS] = { 0 };
    int64_t s = r->s0, d = r->d0;
    for (uint64_t n = 0; n < r->nruns; n++) {
        if (fn(ud, s, d) != 0)
            return -1;
        for (int k = r->outer; k >= 0; k--) {
            if (++idx[k] < bx->e[k]) {
                s += c->stride[k];
                d += bx->gstride[k];
                break;
            }
            s -= (int64_t)(idx[k] - 1) * c->stride[k];
            d -= (int64_t)(idx[k] - 1) * bx->gstride[k];
            idx[k] = 0;
        }
    }
    return 0;
}

struct gather {
    const struct uchunk *c;
    unsigned size;            /* itemsize */
    unsigned unit;            /* byte-swap unit */
    uint64_t run;
    char *dst;                /* band buffer */
    const char *span;         /* source span buffer, or NULL */
    int64_t s0;
    int note;                 /* note CRCs of what is read (sources/crc_check.c) */
    struct ckpt_err *err;
};

static int run_copy(void *ud, int64_t s, int64_t d)
{
    struct gather *g = ud;
    char *out = g->dst + (uint64_t)d * g->size;
    uint64_t n = g->run * g->size;
    if (g->span)
        memcpy(out, g->span + (uint64_t)(s - g->s0) * g->size, n);
    else if ((g->note ? uns_src_read_noted : uns_src_read)(
                 g->c->src, g->c->data + (uint64_t)s * g->size, out, n,
                 g->err) != 0)
        return -1;
    return 0;
}

static int run_swap(void *ud, int64_t s, int64_t d)
{
    struct gather *g = ud;
    (void)s;
    swap_elems(g->dst + (uint64_t)d * g->size, g->run, g->size, g->unit);
    return 0;
}

/* A conj / neg view's values: flip the sign bit (the top bit of each
 * little-endian component) of the imaginary half (conj) or of every
 * component (neg; conj and neg together: the real half only). Exactly
 * what torch's resolve_conj / resolve_neg compute, NaN payloads kept. */
static int run_sign(void *ud, int64_t s, int64_t d)
{
    struct gather *g = ud;
    (void)s;
    unsigned half = g->size / 2;
    int re = g->c->neg, im = g->c->neg != g->c->conj;
    int cplx = g->unit != g->size;
    unsigned char *p = (unsigned char *)g->dst + (uint64_t)d * g->size;
    for (uint64_t i = 0; i < g->run; i++, p += g->size) {
        if (!cplx) {
            p[g->size - 1] ^= 0x80;
            continue;
        }
        if (re)
            p[half - 1] ^= 0x80;
        if (im)
            p[g->size - 1] ^= 0x80;
    }
    return 0;
}

static int copy_box(struct ujob *j, const struct utensor *t,
                    const struct uchunk *c, const struct box *bx, char *buf,
                    char *rbuf, int note, struct ckpt_err *err)
{
    struct runs r;
    unsigned size = t->e->dtype->itemsize;
    make_runs(bx, c, &r);
    struct gather g = { c, size, t->e->dtype->swap, r.run, buf, NULL, r.s0,
                        note, err };
    uint64_t span = src_span(bx, c), vol = r.nruns * r.run;
    if (r.nruns > 1 && span * size <= j->plan.band &&
        span <= 4 * vol + (65536 / size)) {
        /* One read of the whole source span, then scatter. */
        if ((note ? uns_src_read_noted : uns_src_read)(
                c->src, c->data + (uint64_t)r.s0 * size, rbuf, span * size,
                err) != 0)
            return -1;
        g.span = rbuf;
    }
    if (each_run(bx, c, &r, run_copy, &g) != 0)
        return -1;
    /* Big-endian writers: swap in place, per element (complex: per
     * half), so the output is little-endian as its byteorder says. */
    if (c->big_endian)
        each_run(bx, c, &r, run_swap, &g);
    if (c->conj || c->neg)
        each_run(bx, c, &r, run_sign, &g);
    return 0;
}

/* The box of rows [lo[0], hi[0]) of band positions (base) over t's chunks,
 * or (replicas = 1) the skipped replica chunks (only: just that one). */
static int fill_box(struct ujob *j, struct utensor *t, uint64_t *lo,
                    uint64_t *hi, struct box *bx, char *buf, char *rbuf,
                    int replicas, const struct uchunk *only, int note,
                    struct ckpt_err *err)
{
    const struct ckpt_dcp_entry *e = t->e;
    for (size_t i = 0; i < e->nchunks; i++) {
        struct uchunk *c = &t->chunks[i];
        int empty = c->skip != replicas || (only && c != only);
        for (int d = 0; d < bx->nd && !empty; d++) {
            uint64_t clo = c->meta->offsets[d], chi = clo + c->meta->sizes[d];
            uint64_t a = lo[d] > clo ? lo[d] : clo;
            uint64_t b = hi[d] < chi ? hi[d] : chi;
            empty = a >= b;
            bx->lo[d] = a;
            bx->e[d] = b - a;
        }
        if (!empty && (uns_plan_locate(j, t->whole ? t->whole : t, c,
                                       err) != 0 ||
                       copy_box(j, t, c, bx, buf, rbuf, note, err) != 0))
            return -1;
    }
    return 0;
}

/* Fill buf with band `band` of t from its chunks, or (replicas = 1) lay
 * the skipped replica chunks (only: just that one) over buf; with note,
 * the reads count for the records' CRC checks. */
static int fill_one(struct ujob *j, struct utensor *t, uint64_t band,
                    char *buf, char *rbuf, uint64_t *len, int replicas,
                    const struct uchunk *only, int note,
                    struct ckpt_err *err)
{
    const struct ckpt_dcp_entry *e = t->e;
    uint64_t lo[CKPT_MAX_DIMS], hi[CKPT_MAX_DIMS], dst;
    struct box bx;
    uns_plan_band_box(t, band, lo, hi, &dst, len);
    bx.nd = e->ndim;
    bx.base = (int64_t)(dst / e->dtype->itemsize);
    int64_t s = 1;
    for (int d = e->ndim - 1; d >= 0; d--) {
        bx.gstride[d] = s;
        s *= (int64_t)e->size[d];
    }
    if (!t->whole || !e->ndim)
        return fill_box(j, t, lo, hi, &bx, buf, rbuf, replicas, only, note,
                        err);
    /* A slice (hf/export.c): the band's rows in the whole tensor, whose
     * chunks these are; output positions stay the slice's. Rows in
     * blocks (rblk) are read one block's run at a time. A layer of
     * stacked layers: dim 0 is that index, the rows are along dim 1. */
    int rd = 0;
    uint64_t base = (uint64_t)bx.base;
    if (t->stacked && e->ndim >= 2) {
        rd = 1;
        lo[0] = t->layer;
        hi[0] = lo[0] + 1;
        base += lo[0] * (uint64_t)bx.gstride[0];
    }
    uint64_t r = lo[rd], end = hi[rd];
    while (r < end) {
        uint64_t run = end - r, at = t->row0 + r;
        if (t->rblk) {
            uint64_t left = t->rblk - r % t->rblk;
            run = run < left ? run : left;
            at = t->row0 + (r / t->rblk) * t->rstride + r % t->rblk;
        }
        lo[rd] = at;
        hi[rd] = at + run;
        bx.base = (int64_t)(base + (at - r) * (uint64_t)bx.gstride[rd]);
        if (fill_box(j, t, lo, hi, &bx, buf, rbuf, replicas, only, note,
                     err) != 0)
            return -1;
        r += run;
    }
    return 0;
}

static int fill_band(struct ujob *j, struct utensor *t, uint64_t band,
                     char *buf, char *rbuf, uint64_t *len, int replicas,
                     int note, struct ckpt_err *err)
{
    return fill_one(j, t, band, buf, rbuf, len, replicas, NULL, note, err);
}

/* --- tasks ------------------------------------------------------------- */

/* A band of a tensor or a piece of a copied record; a chunk of a chunked
 * tensor (band = chunk index); the CRC of a chunked tensor's band; a band
 * of chunk rows (uns_engine_remote_plan); a chunk decoded into the
 * tensor's scratch file (band = chunk index). */
enum { TASK_BAND, TASK_CHUNK, TASK_CRC, TASK_ROW, TASK_SCRATCH };

struct task {
    struct ujob *j;
    struct utensor *t;        /* a tensor band, or */
    struct ucopy *c;          /* a piece of a copied record */
    uint64_t band;
    int verify;
    int mode;                 /* TASK_* */
    int gated;                /* remote output: reserve, in seq order */
    uint64_t seq;
};

static uint64_t out_off(struct ujob *j, int file, size_t rec, uint64_t off)
{
    struct ufile *f = &j->dst.files[file];
    if (j->o->format == CKPT_FORMAT_TORCH)
        return f->recs[rec].data_off;
    return off;
}

/* Output offset and source bytes of the task into buf. */
static int task_fill(struct task *k, char *buf, char *rbuf, uint64_t *at,
                     uint64_t *len, struct ckpt_err *err)
{
    struct ujob *j = k->j;
    if (k->t) {
        uint64_t lo[CKPT_MAX_DIMS], hi[CKPT_MAX_DIMS], dst;
        uns_plan_band_box(k->t, k->band, lo, hi, &dst, len);
        *at = out_off(j, k->t->file, k->t->rec, k->t->out_off) +
              uns_hf_cast_size(k->t, dst);
        if (k->t->scratch)      /* decoded there already */
            return uns_src_read(k->t->scratch, dst, buf, (size_t)*len, err);
        return fill_band(j, k->t, k->band, buf, rbuf, len, 0, !k->verify,
                         err);
    }
    uint64_t from = k->band * j->plan.band;
    *len = k->c->nbytes - from < j->plan.band ? k->c->nbytes - from : j->plan.band;
    *at = out_off(j, k->c->file, k->c->rec, k->c->out_off) + from;
    return (k->verify ? uns_src_read : uns_src_read_noted)(
        k->c->src, k->c->off + from, buf, *len, err);
}

static const char *task_what(struct task *k, char *tmp, size_t n)
{
    if (k->t)
        snprintf(tmp, n, "tensor '%s'", k->t->e->fqn);
    else
        snprintf(tmp, n, "object '%s'", k->c->e->fqn);
    return tmp;
}

/* Replicas dropped by --allow-replicas must really be identical: laid
 * over a copy of the band they must change nothing. */
static int check_replicas(struct task *k, const char *buf, char *scratch,
                          char *rbuf, uint64_t len, struct ckpt_err *err)
{
    int any = 0;
    for (size_t i = 0; i < k->t->e->nchunks && !any; i++)
        any = k->t->chunks[i].skip;
    if (!any)
        return 0;
    memcpy(scratch, buf, len);
    if (fill_band(k->j, k->t, k->band, scratch, rbuf, &len, 1, 0, err) != 0)
        return -1;
    if (memcmp(scratch, buf, len) == 0)
        return 0;
    if (!k->j->src.rank_check)
        return ckpt_err_set(err, CKPT_EFORMAT, "verify: tensor '%s': "
                            "replicated chunks differ", k->t->e->fqn);
    /* Rank-local: name the first rank whose copy differs. */
    for (size_t i = 0; i < k->t->e->nchunks; i++) {
        const struct uchunk *c = &k->t->chunks[i];
        if (!c->skip)
            continue;
        memcpy(scratch, buf, len);
        if (fill_one(k->j, k->t, k->band, scratch, rbuf, &len, 1, c, 0,
                     err) != 0)
            return -1;
        if (memcmp(scratch, buf, len) != 0)
            return uns_rank_tensor_error(k->j, k->t, c, err);
    }
    return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': replicated chunks "
                        "differ", k->t->e->fqn);
}

static int task_verify(struct task *k, char *buf, char *rbuf, uint64_t at,
                       uint64_t len, struct ckpt_err *err)
{
    struct ujob *j = k->j;
    struct ufile *f = &j->dst.files[k->t ? k->t->file : k->c->file];
    struct usrc out;
    char what[300];
    uns_out_reader(j, f, &out);
    /* --rank-values rank0 of a rank-local save took rank 0's on purpose. */
    if (k->t && !j->src.rank0 &&
        check_replicas(k, buf, rbuf + j->plan.band, rbuf, len, err) != 0)
        return -1;
    /* A cast band is compared as cast (the buffer has room after the
     * three bands: bufpool.mult). */
    if (k->t && k->t->cast) {
        char *cast = buf + 3 * j->plan.band;
        len = uns_hf_cast_band(k->t, buf, len, cast);
        buf = cast;
    }
    if (uns_src_read(&out, at, rbuf, len, err) != 0)
        return -1;
    if (memcmp(buf, rbuf, len) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "verify: %s: '%s' differs "
                            "from the source at offset %llu",
                            task_what(k, what, sizeof(what)), f->name,
                            (unsigned long long)at);
    uint32_t *crcs = k->t ? k->t->crcs : k->c->crcs;
    if (j->o->format == CKPT_FORMAT_TORCH &&
        ckpt_crc32(0, rbuf, len) != crcs[k->band])
        return ckpt_err_set(err, CKPT_EFORMAT, "verify: %s: '%s' checksum "
                            "mismatch at offset %llu",
                            task_what(k, what, sizeof(what)), f->name,
                            (unsigned long long)at);
    return 0;
}

/* --- decoded chunks (engine/decode.c) ------------------------------------------ */

/* Chunk k->band of a chunked tensor, decoded into its own buffer, then
 * written from it run by run (one run for whole rows: the band), or with
 * verify compared with what the output holds; TASK_SCRATCH writes the
 * runs into the tensor's scratch file instead. */
struct crun {
    struct ujob *j;
    const char *buf;
    char *back;               /* verify: read-back space, or NULL */
    unsigned size;
    uint64_t run, at;         /* run elements; tensor's output offset */
    struct ufile *f;
    struct usrc *scratch;     /* TASK_SCRATCH: written there, at 0 */
    struct ckpt_err *err;
};

static int chunk_run(void *ud, int64_t s, int64_t d)
{
    struct crun *x = ud;
    const char *p = x->buf + (uint64_t)s * x->size;
    uint64_t n = x->run * x->size, at = x->at + (uint64_t)d * x->size;
    if (x->scratch)
        return ckpt_pwrite_all(x->scratch->fd, p, (size_t)n, at,
                               x->scratch->name, x->err);
    if (!x->back)
        return uns_out_write(x->j, x->f, p, (size_t)n, at, x->err);
    struct usrc out;
    uns_out_reader(x->j, x->f, &out);
    if (uns_src_read(&out, at, x->back, (size_t)n, x->err) != 0)
        return -1;
    if (memcmp(p, x->back, (size_t)n) != 0)
        return ckpt_err_set(x->err, CKPT_EFORMAT, "verify: '%s' differs "
                            "from the source at offset %llu", x->f->name,
                            (unsigned long long)at);
    return 0;
}

/* The box of chunk c in tensor t (output elements counted from base) and
 * its runs: what chunk_task and lay_chunk walk. */
static void chunk_box(const struct utensor *t, const struct uchunk *c,
                      uint64_t base, struct box *bx, struct runs *r)
{
    int64_t s = 1;
    bx->nd = t->e->ndim;
    bx->base = (int64_t)base;
    for (int d = bx->nd - 1; d >= 0; d--) {
        bx->lo[d] = c->meta->offsets[d];
        bx->e[d] = c->meta->sizes[d];
        bx->gstride[d] = s;
        s *= (int64_t)t->e->size[d];
    }
    make_runs(bx, c, r);
}

static int chunk_task(struct task *k, uint64_t *len, struct ckpt_err *err)
{
    struct ujob *j = k->j;
    const struct utensor *t = k->t;
    const struct uchunk *c = &t->chunks[k->band];
    const struct ckpt_dtype *dt = t->e->dtype;
    uint64_t cb = c->dec;
    struct box bx;
    struct runs r;
    chunk_box(t, c, 0, &bx, &r);
    *len = r.nruns * r.run * dt->itemsize;
    uns_dec_acquire(j, cb);
    char *buf = ckpt_xmalloc((size_t)cb + 1);
    char *back = k->verify ? ckpt_xmalloc((size_t)(r.run * dt->itemsize))
                           : NULL;
    int scratch = k->mode == TASK_SCRATCH;
    struct crun x = { j, buf, back, dt->itemsize, r.run,
                      scratch ? 0 : out_off(j, t->file, t->rec, t->out_off),
                      &j->dst.files[t->file], scratch ? t->scratch : NULL,
                      err };
    int rc = j->plan.decode(j, t, c, buf, err);
    if (rc == 0 && c->big_endian)
        swap_elems(buf, cb / dt->itemsize, dt->itemsize, dt->swap);
    if (rc == 0)
        rc = each_run(&bx, c, &r, chunk_run, &x);
    /* Whole rows are one run, the band: its CRC for the zip record. */
    if (rc == 0 && t->rows && j->o->format == CKPT_FORMAT_TORCH) {
        uint32_t crc = ckpt_crc32(0, buf + (uint64_t)r.s0 * dt->itemsize,
                                  (size_t)*len);
        if (!k->verify)
            t->crcs[k->band] = crc;
        else if (crc != t->crcs[k->band])
            rc = ckpt_err_set(err, CKPT_EFORMAT, "verify: tensor '%s': "
                              "checksum mismatch", t->e->fqn);
    }
    free(back);
    free(buf);
    uns_dec_release(j, cb);
    if (scratch)
        *len = 0;       /* progress counted by the bands sent */
    return rc;
}

/* Chunk c (decoded in cbuf) laid into band, the output range that starts
 * at element base: run by run, as fill_band does from a source span. */
static void lay_chunk(const struct utensor *t, const struct uchunk *c,
                      const char *cbuf, char *band, uint64_t base)
{
    const struct ckpt_dtype *dt = t->e->dtype;
    struct box bx;
    struct runs r;
    chunk_box(t, c, base, &bx, &r);
    struct gather g = { c, dt->itemsize, dt->swap, r.run, band, cbuf, 0, 0,
                        NULL };
    each_run(&bx, c, &r, run_copy, &g);
}

/* Band k->band of a tensor banded by chunk rows (uns_engine_remote_plan):
 * its chunks decoded one after another into one chunk buffer and laid
 * into the band in output order, then the band written (its CRC for the
 * zip record) or with verify compared with the output. Band, chunk
 * buffer and read-back space are held through the decode gate, taken at
 * once. */
static int row_task(struct task *k, uint64_t *len, struct ckpt_err *err)
{
    struct ujob *j = k->j;
    struct utensor *t = k->t;
    const struct ckpt_dtype *dt = t->e->dtype;
    uint64_t lo[CKPT_MAX_DIMS], hi[CKPT_MAX_DIMS], dst, cmax = 0;
    uint64_t first = k->band * t->rowchunks;
    uns_plan_band_box(t, k->band, lo, hi, &dst, len);
    for (uint64_t i = first; i < first + t->rowchunks; i++)
        if (t->chunks[i].dec > cmax)
            cmax = t->chunks[i].dec;
    uint64_t hold = (k->verify ? 2 : 1) * *len + cmax;
    uns_dec_acquire(j, hold);
    char *band = ckpt_xmalloc((size_t)((k->verify ? 2 : 1) * *len) + 1);
    char *cbuf = ckpt_xmalloc((size_t)cmax + 1);
    int rc = 0;
    for (uint64_t i = first; rc == 0 && i < first + t->rowchunks; i++) {
        const struct uchunk *c = &t->chunks[i];
        rc = j->plan.decode(j, t, c, cbuf, err);
        if (rc == 0 && c->big_endian)
            swap_elems(cbuf, c->dec / dt->itemsize, dt->itemsize, dt->swap);
        if (rc == 0)
            lay_chunk(t, c, cbuf, band, dst / dt->itemsize);
    }
    uint64_t at = out_off(j, t->file, t->rec, t->out_off) + dst;
    if (rc == 0 && k->verify) {
        rc = task_verify(k, band, band + *len, at, *len, err);
    } else if (rc == 0) {
        if (j->o->format == CKPT_FORMAT_TORCH)
            t->crcs[k->band] = ckpt_crc32(0, band, (size_t)*len);
        rc = uns_out_write(j, &j->dst.files[t->file], band, (size_t)*len,
                           at, err);
    }
    free(cbuf);
    free(band);
    uns_dec_release(j, hold);
    return rc;
}

/* Band k->band of a chunked tensor written run by run: its CRC-32 for the
 * zip record, read back once every chunk is in place. */
static int crc_task(struct task *k, char *buf, uint64_t *len,
                    struct ckpt_err *err)
{
    struct ujob *j = k->j;
    const struct utensor *t = k->t;
    struct usrc out;
    uint64_t lo[CKPT_MAX_DIMS], hi[CKPT_MAX_DIMS], dst;
    uns_out_reader(j, &j->dst.files[t->file], &out);
    uns_plan_band_box(t, k->band, lo, hi, &dst, len);
    if (uns_src_read(&out, out_off(j, t->file, t->rec, t->out_off) + dst,
                     buf, (size_t)*len, err) != 0)
        return -1;
    t->crcs[k->band] = ckpt_crc32(0, buf, (size_t)*len);
    *len = 0;           /* progress counted by the chunks */
    return 0;
}

/* A band, a copied piece or a CRC task, in a pooled buffer. */
static int band_work(struct task *k, uint64_t *len, struct ckpt_err *err)
{
    struct ujob *j = k->j;
    char *buf = bufpool_get(&j->bufs), *rbuf = buf + j->plan.band;
    uint64_t at;
    int rc;
    if (k->mode == TASK_CRC) {
        rc = crc_task(k, buf, len, err);
    } else {
        rc = task_fill(k, buf, rbuf, &at, len, err);
        /* Rank-local replicas are compared as they are copied, --verify
         * or not (engine/rank_values.c). */
        if (rc == 0 && k->t && !k->verify && j->src.rank_check)
            rc = check_replicas(k, buf, rbuf + j->plan.band, rbuf, *len,
                                err);
        if (rc == 0 && k->verify) {
            rc = task_verify(k, buf, rbuf, at, *len, err);
        } else if (rc == 0) {
            struct ufile *f = &j->dst.files[k->t ? k->t->file : k->c->file];
            uint32_t *crcs = k->t ? k->t->crcs : k->c->crcs;
            uint64_t n = *len;
            const char *p = buf;
            if (k->t && k->t->cast) {   /* safetensors only: no CRC */
                p = buf + 3 * j->plan.band;
                n = uns_hf_cast_band(k->t, buf, n, buf + 3 * j->plan.band);
            } else if (j->o->format == CKPT_FORMAT_TORCH) {
                crcs[k->band] = ckpt_crc32(0, buf, *len);
            }
            rc = uns_out_write(j, f, p, n, at, err);
        }
    }
    bufpool_put(&j->bufs, buf);
    return rc;
}

/* --- remote output (outputs/object_store.c) ------------------------------------------ */

/* The output file and byte range a writing task fills. */
static struct ufile *task_range(struct task *k, uint64_t *at, uint64_t *len)
{
    struct ujob *j = k->j;
    if (k->c) {
        uint64_t from = k->band * j->plan.band;
        *len = k->c->nbytes - from < j->plan.band ? k->c->nbytes - from : j->plan.band;
        *at = out_off(j, k->c->file, k->c->rec, k->c->out_off) + from;
        return &j->dst.files[k->c->file];
    }
    const struct utensor *t = k->t;
    uint64_t lo[CKPT_MAX_DIMS], hi[CKPT_MAX_DIMS], dst;
    if (k->mode == TASK_CHUNK) {
        /* Whole rows (t->rows): the chunk is one run of the output. */
        const struct uchunk *c = &t->chunks[k->band];
        uint64_t first = 0, n = 1, s = 1;
        for (int d = t->e->ndim - 1; d >= 0; d--) {
            first += c->meta->offsets[d] * s;
            n *= c->meta->sizes[d];
            s *= t->e->size[d];
        }
        dst = first * t->e->dtype->itemsize;
        *len = n * t->e->dtype->itemsize;
    } else {
        uns_plan_band_box(t, k->band, lo, hi, &dst, len);
        dst = uns_hf_cast_size(t, dst);
        *len = uns_hf_cast_size(t, *len);
    }
    *at = out_off(j, t->file, t->rec, t->out_off) + dst;
    return &j->dst.files[t->file];
}

/* Before reading anything: room for the part buffers the task fills. */
static int gate(struct task *k)
{
    uint64_t at, len;
    struct ufile *f = task_range(k, &at, &len);
    return uns_outobj_reserve(k->j, f, at, len, k->seq);
}

/* The task's record has one band fewer to go; the last one writes its
 * zip header, so the part holding it goes without waiting for the end. */
static int record_progress(struct task *k, struct ckpt_err *err)
{
    atomic_uint_fast64_t *left = k->t ? &k->t->left : &k->c->left;
    if (atomic_fetch_sub(left, 1) != 1)
        return 0;
    /* Every band read: the disk goes (--verify decodes into it again). */
    if (k->t && k->t->scratch && k->t->scratch->fd >= 0 &&
        !k->j->o->verify) {
        close(k->t->scratch->fd);
        k->t->scratch->fd = -1;
    }
    return uns_layout_record_done(k->j, k->t, k->c, err);
}

static void band_task(void *arg)
{
    struct task *k = arg;
    struct ujob *j = k->j;
    struct ckpt_err err = CKPT_ERR_INIT;
    uint64_t len = 0;
    if (j->o->cancel && *j->o->cancel && !j->failed) {
        ckpt_err_set(&err, CKPT_EIO, "interrupted");
        uns_job_fail(j, &err);
    }
    int rc = j->failed ? -1 : 0;
    if (rc == 0 && k->gated)
        rc = gate(k);
    if (rc == 0) {
        rc = k->mode == TASK_CHUNK || k->mode == TASK_SCRATCH
                 ? chunk_task(k, &len, &err)
             : k->mode == TASK_ROW ? row_task(k, &len, &err)
                                   : band_work(k, &len, &err);
        if (rc == 0 && k->gated)
            rc = record_progress(k, &err);
        if (rc != 0)
            uns_job_fail(j, &err);
        else if (j->o->progress && len)
            j->o->progress(j->o->progress_ud, len);
    }
    if (k->gated)
        uns_outobj_done(j, k->seq);
    free(k);
}

static void submit(struct ujob *j, struct utensor *t, struct ucopy *c,
                   uint64_t band, int verify, int mode)
{
    struct task *k = ckpt_xmalloc(sizeof(*k));
    k->j = j;
    k->t = t;
    k->c = c;
    k->band = band;
    k->verify = verify;
    k->mode = mode;
    k->gated = 0;
    k->seq = 0;
    ckpt_pool_submit(j->pool, band_task, k);
}

/* Torch records of chunked tensors written run by run: their band CRCs,
 * from the output, once the chunks are all in place. */
static void crc_pass(struct ujob *j)
{
    if (j->o->format != CKPT_FORMAT_TORCH || j->dst.out->remote)
        return;
    for (size_t i = 0; i < j->plan.ntensors && !j->failed; i++) {
        struct utensor *t = &j->plan.tensors[i];
        if (t->file < 0 || j->dst.files[t->file].copy_from || !t->chunked ||
            t->rows)
            continue;
        for (uint64_t b = 0; b < t->nbands && !j->failed; b++)
            submit(j, t, NULL, b, 0, TASK_CRC);
    }
    ckpt_pool_wait(j->pool);
}

struct ordered {
    size_t file;
    uint64_t at;
    struct task k;
};

static int by_offset(const void *a, const void *b)
{
    const struct ordered *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

static void add_ordered(struct ordered **v, size_t *n, size_t *cap,
                        struct task *k)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        *v = ckpt_xreallocarray(*v, *cap, sizeof(**v));
    }
    struct ordered *o = &(*v)[(*n)++];
    uint64_t len;
    o->k = *k;
    o->file = (size_t)(task_range(&o->k, &o->at, &len) - k->j->dst.files);
}

/* --- remote output of chunks that are not whole rows ------------------ */

/*
 * A remote output is sent part by part as its byte ranges fill, so a task
 * must write one contiguous range: chunk_task's run-by-run writes of a
 * chunk that is not whole rows (a column block, a cell of a 2-D grid)
 * would start every part the tensor spans and hold them all until its
 * last chunk is in, and the torch CRC of the record could not be read
 * back from the output. Such a tensor's bands become its chunk rows
 * instead: d is the first dimension along which chunks are wider than
 * one index (one index per chunk before it), and band b holds the
 * chunks of one grid index along d with the indices before d fixed: a
 * contiguous range of the output (whole rows after d), tiled exactly by
 * those chunks, each of which lies in that one band. So every chunk is
 * still decoded exactly once; a task decodes its band's chunks in turn
 * and lays them out in memory (row_task), and the band is written and
 * checksummed like any other.
 *
 * A band plus one chunk must fit in half of --memory and in the decode
 * cap: together with the part buffers (--memory, overshot by at most
 * one band's parts) memory stays bounded. A tensor whose chunk rows are
 * larger (chunks spanning every row, say) is decoded first, chunk by
 * chunk (one chunk buffer per worker), into an anonymous scratch file in
 * --tmp-dir, and its ordinary bands (cut_bands) are read from there:
 * disk of the tensor's size instead of memory, freed once it is sent.
 */
struct crows {
    int bdim;
    uint64_t bk, per_prefix, nbands, per_band;
    uint64_t band, dec;     /* largest band, largest decoded chunk */
};

/* Chunk-row bands of t (see above): 0, or -1 when its chunks do not sit
 * in such bands in grid (C) order. */
static int chunk_rows(const struct utensor *t, struct crows *g)
{
    const struct ckpt_dcp_entry *e = t->e;
    const uint64_t *ck = t->chunks[0].meta->sizes;
    int nd = e->ndim, bd = nd - 1;
    for (int d = nd - 1; d >= 0; d--)
        if (ck[d] > 1)
            bd = d;
    if (nd == 0 || !ck[bd])
        return -1;
    uint64_t row = e->dtype->itemsize;
    g->bdim = bd;
    g->bk = ck[bd];
    g->per_prefix = (e->size[bd] + g->bk - 1) / g->bk;
    g->nbands = g->per_prefix;
    for (int d = 0; d < bd; d++)
        g->nbands *= e->size[d];
    for (int d = bd + 1; d < nd; d++)
        row *= e->size[d];
    g->band = g->bk * row;
    g->dec = 0;
    if (e->nchunks % g->nbands)
        return -1;
    g->per_band = e->nchunks / g->nbands;
    for (size_t k = 0; k < e->nchunks; k++) {
        const struct ckpt_dcp_chunk *c = t->chunks[k].meta;
        uint64_t p = 0;
        for (int d = 0; d < bd; d++) {
            if (c->sizes[d] != 1)
                return -1;
            p = p * e->size[d] + c->offsets[d];
        }
        if (c->offsets[bd] % g->bk || c->sizes[bd] > g->bk ||
            p * g->per_prefix + c->offsets[bd] / g->bk != k / g->per_band)
            return -1;
        if (t->chunks[k].dec > g->dec)
            g->dec = t->chunks[k].dec;
    }
    return 0;
}

int uns_engine_remote_plan(struct ujob *j, struct ckpt_err *err)
{
    uint64_t cap = uns_outobj_budget(j) / 2;
    cap = cap < UNS_DEC_CAP ? cap : UNS_DEC_CAP;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        struct utensor *t = &j->plan.tensors[i];
        struct crows g;
        if (t->file < 0 || j->dst.files[t->file].copy_from || !t->chunked ||
            t->rows || !t->nbytes)
            continue;
        if (chunk_rows(t, &g) == 0 && g.band + g.dec <= cap) {
            t->bdim = g.bdim;
            t->bk = g.bk;
            t->per_prefix = g.per_prefix;
            t->nbands = g.nbands;
            t->rowchunks = g.per_band;
            continue;
        }
        int fd = uns_src_tmp_fd(j, err);
        if (fd < 0)
            return -1;
        t->scratch = uns_src_add(j, ckpt_xasprintf(
                                     "%s (scratch of tensor '%s')",
                                     j->dst.tmpdir, t->e->fqn),
                                 fd, t->nbytes);
    }
    return 0;
}

/* How the tensor's pieces are written: TASK_ROW, TASK_CHUNK (one per
 * chunk) or TASK_BAND (chunks read in place, or from scratch). */
static int write_mode(const struct utensor *t)
{
    if (t->rowchunks)
        return TASK_ROW;
    return t->chunked && !t->scratch ? TASK_CHUNK : TASK_BAND;
}

/* Tensors decoded through scratch (uns_engine_remote_plan): every chunk
 * decoded into its file before the copy, whose bands then read it;
 * --verify decodes them again and compares band by band (one ranged read
 * each, where chunk_task's verify would read a column chunk back row by
 * row). */
static int scratch_pass(struct ujob *j, struct ckpt_err *err)
{
    for (size_t i = 0; i < j->plan.ntensors && !j->failed; i++) {
        struct utensor *t = &j->plan.tensors[i];
        for (size_t c = 0; t->scratch && c < t->e->nchunks && !j->failed;
             c++)
            submit(j, t, NULL, c, 0, TASK_SCRATCH);
    }
    ckpt_pool_wait(j->pool);
    if (j->failed) {
        *err = j->err;
        return -1;
    }
    return 0;
}

/* A remote output's copy: every task in output order, so that the
 * oldest task not done is always running (outputs/object_store.c's memory gate). Empty
 * records have no task: their headers went first (uns_layout_early). */
static int run_remote(struct ujob *j, struct ckpt_err *err)
{
    struct ordered *v = NULL;
    size_t n = 0, cap = 0;
    if (scratch_pass(j, err) != 0)
        return -1;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        struct utensor *t = &j->plan.tensors[i];
        if (t->file < 0 || j->dst.files[t->file].copy_from)
            continue;
        t->crcs = ckpt_xcalloc(t->nbands ? t->nbands : 1, 4);
        int mode = write_mode(t);
        uint64_t nt = !t->nbytes ? 0 : mode == TASK_CHUNK ? t->e->nchunks
                                                          : t->nbands;
        atomic_store(&t->left, nt);
        for (uint64_t b = 0; b < nt; b++) {
            struct task k = { j, t, NULL, b, 0, mode, 1, 0 };
            add_ordered(&v, &n, &cap, &k);
        }
    }
    for (size_t i = 0; i < j->plan.ncopies; i++) {
        struct ucopy *c = &j->plan.copies[i];
        if (c->file < 0 || j->dst.files[c->file].copy_from)
            continue;
        c->nbands = (c->nbytes + j->plan.band - 1) / j->plan.band;
        c->crcs = ckpt_xcalloc(c->nbands ? c->nbands : 1, 4);
        atomic_store(&c->left, c->nbands);
        for (uint64_t b = 0; b < c->nbands; b++) {
            struct task k = { j, NULL, c, b, 0, TASK_BAND, 1, 0 };
            add_ordered(&v, &n, &cap, &k);
        }
    }
    qsort(v, n, sizeof(*v), by_offset);
    uns_outobj_tasks(j, n);
    for (size_t i = 0; i < n; i++) {
        struct task *k = ckpt_xmalloc(sizeof(*k));
        *k = v[i].k;
        k->seq = i;
        ckpt_pool_submit(j->pool, band_task, k);
    }
    free(v);
    ckpt_pool_wait(j->pool);
    if (j->failed) {
        *err = j->err;
        return -1;
    }
    if (uns_plan_locate_rest(j, err) != 0)
        return -1;
    return uns_src_check_records(j, err);
}

int uns_engine_run(struct ujob *j, int verify, struct ckpt_err *err)
{
    uns_src_readahead(j);
    if (!verify)
        uns_src_records_ready(j);
    if (!verify && j->dst.out->remote)
        return run_remote(j, err);
    if (verify && scratch_pass(j, err) != 0)
        return -1;
    for (size_t i = 0; i < j->plan.ntensors && !j->failed; i++) {
        struct utensor *t = &j->plan.tensors[i];
        if (t->file < 0 || j->dst.files[t->file].copy_from)
            continue;
        if (!verify)
            t->crcs = ckpt_xcalloc(t->nbands ? t->nbands : 1, 4);
        int mode = write_mode(t);
        uint64_t n = mode == TASK_CHUNK ? (t->nbytes ? t->e->nchunks : 0)
                                        : t->nbands;
        for (uint64_t b = 0; b < n && !j->failed; b++)
            submit(j, t, NULL, b, verify, mode);
    }
    for (size_t i = 0; i < j->plan.ncopies && !j->failed; i++) {
        struct ucopy *c = &j->plan.copies[i];
        if (c->file < 0 || j->dst.files[c->file].copy_from)
            continue;
        c->nbands = (c->nbytes + j->plan.band - 1) / j->plan.band;
        if (!verify)
            c->crcs = ckpt_xcalloc(c->nbands ? c->nbands : 1, 4);
        for (uint64_t b = 0; b < c->nbands && !j->failed; b++)
            submit(j, NULL, c, b, verify, TASK_BAND);
    }
    ckpt_pool_wait(j->pool);
    if (!verify && !j->failed)
        crc_pass(j);
    if (j->failed) {
        *err = j->err;
        return -1;
    }
    if (verify)
        return 0;
    if (uns_plan_locate_rest(j, err) != 0)
        return -1;
    return uns_src_check_records(j, err);
}
