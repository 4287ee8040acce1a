/*
 * decode.c - chunks the engine decodes itself (zarr v2, Orbax: compressed
 * chunks that cannot be read in place). A band task that needs chunk c
 * gets it decoded from a small cache: the first task decodes it (others
 * wanting it wait), every band that intersects it reads from the same
 * buffer, and the last one frees it. Bands are submitted in output order,
 * so a chunk lives about as long as the few bands that cover it.
 *
 * Most arrays are cut along their first dimension only (each host's
 * shard, whole rows): such a chunk is one contiguous range of the output,
 * so those tensors skip the cache: a band is a chunk, decoded into its
 * own buffer and written from there (uns_dec_bands, engine.c).
 *
 * Memory: the cache holds at most DEC_CAP bytes, or one chunk of any
 * size when it is empty; a task that finds it full decodes a private copy
 * (freed after its band), so no task ever waits for memory (a wait could
 * deadlock: the bands that would free it may be queued behind it).
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "unshard_int.h"

#define DEC_CAP ((uint64_t)64 << 20)

enum { DEC_NONE, DEC_BUSY, DEC_READY };

void uns_dec_init(struct ujob *j)
{
    pthread_mutex_init(&j->dmu, NULL);
    pthread_cond_init(&j->dcv, NULL);
}

/* Bands of t that intersect chunk c (bands: plan.c cut_bands). */
static uint64_t band_uses(const struct utensor *t, const struct uchunk *c)
{
    const struct ckpt_dcp_chunk *m = c->meta;
    int bd = t->bdim;
    if (!t->nbands)
        return 0;
    if (bd < 0)
        return 1;
    uint64_t n = 1;
    for (int d = 0; d < bd; d++)
        n *= m->sizes[d];
    if (!m->sizes[bd])
        return 0;
    uint64_t first = m->offsets[bd] / t->bk;
    uint64_t last = (m->offsets[bd] + m->sizes[bd] - 1) / t->bk;
    return n * (last - first + 1);
}

static void drop(struct ujob *j, struct udec *d)
{
    free(d->buf);
    d->buf = NULL;
    j->dlive -= d->bytes;
    d->state = DEC_NONE;
}

void uns_dec_release(struct ujob *j)
{
    for (size_t i = 0; i < j->ntensors; i++) {
        const struct utensor *t = &j->tensors[i];
        for (size_t k = 0; t->chunks && k < t->e->nchunks; k++) {
            struct udec *d = t->chunks[k].dec;
            if (d && d->state == DEC_READY)
                drop(j, d);
        }
    }
}

void uns_dec_reset(struct ujob *j)
{
    uns_dec_release(j);
    for (size_t i = 0; i < j->ntensors; i++) {
        const struct utensor *t = &j->tensors[i];
        for (size_t k = 0; k < t->e->nchunks; k++)
            if (t->chunks[k].dec)
                t->chunks[k].dec->uses = band_uses(t, &t->chunks[k]);
    }
}

/* Whether chunk k of t holds rows [k * rows, ...) of t, whole and in C
 * order, so that its first bytes are exactly that range of the output. */
static int row_chunk(const struct utensor *t, size_t k, uint64_t rows)
{
    const struct ckpt_dcp_entry *e = t->e;
    const struct uchunk *c = &t->chunks[k];
    int64_t s = 1;
    if (!c->dec || (e->ndim && c->meta->offsets[0] != k * rows))
        return 0;
    for (int d = e->ndim - 1; d >= 0; d--) {
        if ((d > 0 && c->meta->sizes[d] != e->size[d]) || c->stride[d] != s)
            return 0;
        s *= (int64_t)e->size[d];
    }
    return c->soff == 0;
}

void uns_dec_bands(struct ujob *j)
{
    int jobs = ckpt_pool_threads(j->pool);
    for (size_t i = 0; j->decode && i < j->ntensors; i++) {
        struct utensor *t = &j->tensors[i];
        const struct ckpt_dcp_entry *e = t->e;
        if (!t->nbytes || !e->nchunks)
            continue;
        uint64_t rows = e->ndim ? e->chunks[0].sizes[0] : 1;
        uint64_t cb = t->chunks[0].dec ? t->chunks[0].dec->bytes : 0;
        int direct = cb && cb <= DEC_CAP / (uint64_t)(jobs > 0 ? jobs : 1);
        for (size_t k = 0; direct && k < e->nchunks; k++)
            direct = row_chunk(t, k, rows) && t->chunks[k].dec->bytes == cb;
        if (!direct)
            continue;
        t->direct = 1;
        t->bdim = e->ndim ? 0 : -1;
        t->bk = e->ndim ? rows : 1;
        t->per_prefix = e->nchunks;
        t->nbands = e->nchunks;
    }
}

static int decode_new(struct ujob *j, const struct utensor *t,
                      const struct uchunk *c, char **buf,
                      struct ckpt_err *err)
{
    uint64_t n = c->dec->bytes;
    if (n > SIZE_MAX)
        return ckpt_err_set(err, CKPT_ENOMEM, "chunk of %llu bytes",
                            (unsigned long long)n);
    *buf = ckpt_xmalloc(n ? (size_t)n : 1);
    if (j->decode(j, t, c, *buf, err) != 0) {
        free(*buf);
        *buf = NULL;
        return -1;
    }
    return 0;
}

int uns_dec_get(struct ujob *j, const struct utensor *t,
                const struct uchunk *c, char **buf, int *shared,
                struct ckpt_err *err)
{
    struct udec *d = c->dec;
    pthread_mutex_lock(&j->dmu);
    while (d->state == DEC_BUSY)
        pthread_cond_wait(&j->dcv, &j->dmu);
    if (d->state == DEC_READY) {
        *buf = d->buf;
        *shared = 1;
        pthread_mutex_unlock(&j->dmu);
        return 0;
    }
    int cache = d->uses > 1 && (j->dlive == 0 || j->dlive + d->bytes <=
                                DEC_CAP);
    if (cache) {
        d->state = DEC_BUSY;
        j->dlive += d->bytes;
    }
    pthread_mutex_unlock(&j->dmu);
    int rc = decode_new(j, t, c, buf, err);
    *shared = cache && rc == 0;
    if (!cache)
        return rc;
    pthread_mutex_lock(&j->dmu);
    if (rc == 0) {
        d->buf = *buf;
        d->state = DEC_READY;
    } else {
        j->dlive -= d->bytes;
        d->state = DEC_NONE;
    }
    pthread_cond_broadcast(&j->dcv);
    pthread_mutex_unlock(&j->dmu);
    return rc;
}

void uns_dec_put(struct ujob *j, const struct uchunk *c, char *buf,
                 int shared)
{
    struct udec *d = c->dec;
    pthread_mutex_lock(&j->dmu);
    if (d->uses)
        d->uses--;
    if (shared && d->uses == 0 && d->state == DEC_READY)
        drop(j, d);
    pthread_mutex_unlock(&j->dmu);
    if (!shared)
        free(buf);
}
