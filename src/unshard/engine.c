/*
 * engine.c - the copy: one pool task per band of an output tensor (or
 * piece of a copied record). A task gathers its band from every chunk
 * that intersects it into a buffer in output order, checksums it, and
 * pwrites it at its final offset. With --verify the same task instead
 * reads the band back from the output and compares.
 *
 * The CRC-32 of every zip record read from is checked on the way
 * (crccheck.c).
 *
 * Tensors of decoded chunks (zarr, Orbax; decode.c) go chunk by chunk
 * instead: a task decodes one chunk and writes it from its buffer.
 *
 * Reads: when a chunk's part of the band is contiguous in both source and
 * output (row sharding, or column sharding of whole rows) it is one pread
 * straight into the band buffer; otherwise the source span is read once
 * and scattered, or, for sparse strided layouts, read run by run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "unshard_int.h"

/* --- buffers ------------------------------------------------------------ */

int uns_bufpool_init(struct bufpool *b, size_t size)
{
    memset(b, 0, sizeof(*b));
    b->size = size;
    return pthread_mutex_init(&b->mu, NULL) == 0 ? 0 : -1;
}

/* A buffer of 3 * size bytes (band, read space, verify scratch); reused
 * across tasks so buffers are not mapped and unmapped per band. */
static char *bufpool_get(struct bufpool *b)
{
    char *p = NULL;
    pthread_mutex_lock(&b->mu);
    if (b->nfree)
        p = b->free_[--b->nfree];
    pthread_mutex_unlock(&b->mu);
    return p ? p : ckpt_xmalloc(3 * b->size);
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
    int note;                 /* note CRCs of what is read (crccheck.c) */
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
    return 0;
}

/* Fill buf with band `band` of t from its chunks, or (replicas = 1) lay
 * the skipped replica chunks over buf; with note, the reads count for the
 * records' CRC checks. */
static int fill_band(struct ujob *j, const struct utensor *t, uint64_t band,
                     char *buf, char *rbuf, uint64_t *len, int replicas,
                     int note, struct ckpt_err *err)
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
    for (size_t i = 0; i < e->nchunks; i++) {
        const struct uchunk *c = &t->chunks[i];
        int empty = c->skip != replicas;
        for (int d = 0; d < bx.nd && !empty; d++) {
            uint64_t clo = c->meta->offsets[d], chi = clo + c->meta->sizes[d];
            uint64_t a = lo[d] > clo ? lo[d] : clo;
            uint64_t b = hi[d] < chi ? hi[d] : chi;
            empty = a >= b;
            bx.lo[d] = a;
            bx.e[d] = b - a;
        }
        if (!empty && copy_box(j, t, c, &bx, buf, rbuf, note, err) != 0)
            return -1;
    }
    return 0;
}

/* --- tasks ------------------------------------------------------------- */

/* A band of a tensor or a piece of a copied record; a chunk of a chunked
 * tensor (band = chunk index); or the CRC of a chunked tensor's band. */
enum { TASK_BAND, TASK_CHUNK, TASK_CRC };

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
        *at = out_off(j, k->t->file, k->t->rec, k->t->out_off) + dst;
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
    if (memcmp(scratch, buf, len) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "verify: tensor '%s': "
                            "replicated chunks differ", k->t->e->fqn);
    return 0;
}

static int task_verify(struct task *k, char *buf, char *rbuf, uint64_t at,
                       uint64_t len, struct ckpt_err *err)
{
    struct ujob *j = k->j;
    struct ufile *f = &j->dst.files[k->t ? k->t->file : k->c->file];
    struct usrc out;
    char what[300];
    uns_out_reader(j, f, &out);
    if (k->t && check_replicas(k, buf, rbuf + j->plan.band, rbuf, len, err) != 0)
        return -1;
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

/* --- decoded chunks (decode.c) ------------------------------------------ */

/* Chunk k->band of a chunked tensor, decoded into its own buffer, then
 * written from it run by run (one run for whole rows: the band), or with
 * verify compared with what the output holds. */
struct crun {
    struct ujob *j;
    const char *buf;
    char *back;               /* verify: read-back space, or NULL */
    unsigned size;
    uint64_t run, at;         /* run elements; tensor's output offset */
    struct ufile *f;
    struct ckpt_err *err;
};

static int chunk_run(void *ud, int64_t s, int64_t d)
{
    struct crun *x = ud;
    const char *p = x->buf + (uint64_t)s * x->size;
    uint64_t n = x->run * x->size, at = x->at + (uint64_t)d * x->size;
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

static int chunk_task(struct task *k, uint64_t *len, struct ckpt_err *err)
{
    struct ujob *j = k->j;
    const struct utensor *t = k->t;
    const struct uchunk *c = &t->chunks[k->band];
    const struct ckpt_dtype *dt = t->e->dtype;
    uint64_t cb = c->dec;
    struct box bx = { .nd = t->e->ndim, .base = 0 };
    struct runs r;
    int64_t s = 1;
    for (int d = bx.nd - 1; d >= 0; d--) {
        bx.lo[d] = c->meta->offsets[d];
        bx.e[d] = c->meta->sizes[d];
        bx.gstride[d] = s;
        s *= (int64_t)t->e->size[d];
    }
    make_runs(&bx, c, &r);
    *len = r.nruns * r.run * dt->itemsize;
    uns_dec_acquire(j, cb);
    char *buf = ckpt_xmalloc((size_t)cb + 1);
    char *back = k->verify ? ckpt_xmalloc((size_t)(r.run * dt->itemsize))
                           : NULL;
    struct crun x = { j, buf, back, dt->itemsize, r.run,
                      out_off(j, t->file, t->rec, t->out_off),
                      &j->dst.files[t->file], err };
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
        if (rc == 0 && k->verify) {
            rc = task_verify(k, buf, rbuf, at, *len, err);
        } else if (rc == 0) {
            struct ufile *f = &j->dst.files[k->t ? k->t->file : k->c->file];
            uint32_t *crcs = k->t ? k->t->crcs : k->c->crcs;
            if (j->o->format == CKPT_FORMAT_TORCH)
                crcs[k->band] = ckpt_crc32(0, buf, *len);
            rc = uns_out_write(j, f, buf, *len, at, err);
        }
    }
    bufpool_put(&j->bufs, buf);
    return rc;
}

/* --- remote output (outobj.c) ------------------------------------------ */

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
        rc = k->mode == TASK_CHUNK ? chunk_task(k, &len, &err)
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

/* Tensors decoded chunk by chunk whose chunks are not whole rows are
 * written run by run all over their range (and, for torch, checksummed by
 * reading the output back): not into parts sent as they fill. Checked
 * before anything is written. */
int uns_engine_remote_ok(struct ujob *j, struct ckpt_err *err)
{
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        const struct utensor *t = &j->plan.tensors[i];
        if (t->file >= 0 && !j->dst.files[t->file].copy_from && t->chunked &&
            !t->rows && t->nbytes)
            return ckpt_err_set(err, CKPT_EUNSUPPORTED, "tensor '%s': its "
                                "stored chunks are not whole rows, which a "
                                "remote DEST cannot take; unshard to a "
                                "local directory", t->e->fqn);
    }
    return 0;
}

/* A remote output's copy: every task in output order, so that the
 * oldest task not done is always running (outobj.c's memory gate). Empty
 * records have no task: their headers went first (uns_layout_early). */
static int run_remote(struct ujob *j, struct ckpt_err *err)
{
    struct ordered *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        struct utensor *t = &j->plan.tensors[i];
        if (t->file < 0 || j->dst.files[t->file].copy_from)
            continue;
        t->crcs = ckpt_xcalloc(t->nbands ? t->nbands : 1, 4);
        uint64_t nt = !t->nbytes ? 0 : t->chunked ? t->e->nchunks
                                                  : t->nbands;
        atomic_store(&t->left, nt);
        for (uint64_t b = 0; b < nt; b++) {
            struct task k = { j, t, NULL, b, 0,
                              t->chunked ? TASK_CHUNK : TASK_BAND, 1, 0 };
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
    return uns_src_check_records(j, err);
}

int uns_engine_run(struct ujob *j, int verify, struct ckpt_err *err)
{
    uns_src_readahead(j);
    if (!verify)
        uns_src_records_ready(j);
    if (!verify && j->dst.out->remote)
        return run_remote(j, err);
    for (size_t i = 0; i < j->plan.ntensors && !j->failed; i++) {
        struct utensor *t = &j->plan.tensors[i];
        if (t->file < 0 || j->dst.files[t->file].copy_from)
            continue;
        if (!verify)
            t->crcs = ckpt_xcalloc(t->nbands ? t->nbands : 1, 4);
        uint64_t n = t->chunked ? (t->nbytes ? t->e->nchunks : 0)
                                : t->nbands;
        for (uint64_t b = 0; b < n && !j->failed; b++)
            submit(j, t, NULL, b, verify,
                   t->chunked ? TASK_CHUNK : TASK_BAND);
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
    return verify ? 0 : uns_src_check_records(j, err);
}
