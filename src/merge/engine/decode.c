/*
 * engine/decode.c - chunks the engine decodes itself (zarr v2, Orbax: compressed
 * chunks that cannot be read in place). Such a tensor is written chunk by
 * chunk: one task decodes one chunk into a buffer of its own and writes
 * it to the output from there, in one piece when the chunk is whole rows
 * of a C-order tensor (each host's shard, the usual layout), else run by
 * run (engine/engine.c, chunk_task). Every chunk is decoded once, whatever its
 * shape, and nothing decoded goes anywhere but the output (a remote
 * DEST's scratch file aside: engine/engine.c uns_engine_remote_plan).
 *
 * Memory: tasks hold at most DEC_CAP bytes of decoded chunks together (one
 * chunk of any size when none is held); a task waits for room before
 * decoding. A waiting task holds nothing and the holders wait on nothing,
 * so this cannot deadlock.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"

#define DEC_CAP UNS_DEC_CAP

void uns_dec_init(struct ujob *j)
{
    pthread_mutex_init(&j->dmu, NULL);
    pthread_cond_init(&j->dcv, NULL);
}

void uns_dec_acquire(struct ujob *j, uint64_t bytes)
{
    pthread_mutex_lock(&j->dmu);
    while (j->dlive && j->dlive + bytes > DEC_CAP)
        pthread_cond_wait(&j->dcv, &j->dmu);
    j->dlive += bytes;
    pthread_mutex_unlock(&j->dmu);
}

void uns_dec_release(struct ujob *j, uint64_t bytes)
{
    pthread_mutex_lock(&j->dmu);
    j->dlive -= bytes;
    pthread_cond_broadcast(&j->dcv);
    pthread_mutex_unlock(&j->dmu);
}

/* Whether chunk k of t holds rows [k * rows, ...) of t, whole and in C
 * order, so that its first bytes are exactly that range of the output. */
static int row_chunk(const struct utensor *t, size_t k, uint64_t rows)
{
    const struct ckpt_dcp_entry *e = t->e;
    const struct uchunk *c = &t->chunks[k];
    int64_t s = 1;
    if (e->ndim && c->meta->offsets[0] != k * rows)
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
    for (size_t i = 0; j->plan.decode && i < j->plan.ntensors; i++) {
        struct utensor *t = &j->plan.tensors[i];
        const struct ckpt_dcp_entry *e = t->e;
        int all = e->nchunks > 0;
        for (size_t k = 0; all && k < e->nchunks; k++)
            all = t->chunks[k].dec != 0;
        if (!all)
            continue;
        t->chunked = 1;
        uint64_t rows = e->ndim ? e->chunks[0].sizes[0] : 1;
        int r = 1;
        for (size_t k = 0; r && k < e->nchunks; k++)
            r = row_chunk(t, k, rows);
        if (!r || !t->nbytes)
            continue;
        /* Bands are the chunks: each task's piece is one band, whose
         * CRC-32 it computes for the torch zip record. */
        t->rows = 1;
        t->bdim = e->ndim ? 0 : -1;
        t->bk = e->ndim ? rows : 1;
        t->per_prefix = e->nchunks;
        t->nbands = e->nchunks;
    }
}
