/*
 * zahead.c - decode ahead: a decoder thread filling a ring of blocks
 * (zahead.h).
 *
 * Blocks are numbered in stream order. The thread may decode block p
 * while p < taken + slots - 2: the caller holds blocks taken-1 and
 * taken-2 (the two it took last), so block p's slot is free. The end of
 * the stream or an error is published like a block (its length 0 or -1)
 * and ends the thread.
 */
#include "zahead.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/util.h"

#define ZA_FAILED 1
#define ZA_IO 2

struct zahead {
    struct zdec *z;             /* borrowed; the thread's until the end */
    size_t block;
    int slots;
    char **buf;                 /* slots blocks */
    ssize_t *len;               /* per slot: the block's length (<= 0: end) */
    unsigned char *st;          /* per slot: ZA_* as of that block */
    char err[256];              /* why the data is bad: written by the
                                   thread before it publishes ZA_FAILED */
    int err_set;                /* the thread's */
    pthread_t th;
    int threaded;
    pthread_mutex_t mu;
    pthread_cond_t room;        /* the caller released a slot, or stop */
    pthread_cond_t ready;       /* the thread published a block */
    unsigned long long filled;  /* blocks published */
    unsigned long long taken;   /* blocks taken (the end is never taken) */
    int stop, fill_waits, take_waits;
    /* The caller's view, as of the last block taken. */
    int state;
    int ended;
    ssize_t end_len;
};

/* Decode block number seq into its slot and record the decoder's state
 * then. The slot is the caller's only after publish(). */
static void decode(struct zahead *h, unsigned long long seq)
{
    int i = (int)(seq % (unsigned long long)h->slots);
    ssize_t n = zdec_read(h->z, h->buf[i], h->block);
    int st = (zdec_failed(h->z) ? ZA_FAILED : 0) |
             (zdec_io_failed(h->z) ? ZA_IO : 0);
    if ((st & ZA_FAILED || n < 0) && !h->err_set) {
        snprintf(h->err, sizeof(h->err), "%s", zdec_error(h->z));
        h->err_set = 1;
    }
    h->len[i] = n;
    h->st[i] = (unsigned char)st;
}

static void *run(void *arg)
{
    struct zahead *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && h->filled >= h->taken + (unsigned)h->slots - 2) {
            h->fill_waits++;
            pthread_cond_wait(&h->room, &h->mu);
            h->fill_waits--;
        }
        if (h->stop)
            break;
        unsigned long long seq = h->filled;
        pthread_mutex_unlock(&h->mu);
        decode(h, seq);
        pthread_mutex_lock(&h->mu);
        h->filled++;
        int last = h->len[seq % (unsigned long long)h->slots] <= 0;
        /* The same the other way: a waiting reader once a quarter of
         * the ring is ready (or the stream ended). */
        if (h->take_waits &&
            (last || h->filled - h->taken >= (unsigned)h->slots / 4))
            pthread_cond_signal(&h->ready);
        if (last)
            break; /* the end, or an error: the decoder is done */
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

struct zahead *zahead_open(struct zdec *z, size_t block, int slots)
{
    struct zahead *h = ckpt_xcalloc(1, sizeof(*h));
    h->z = z;
    h->block = block;
    h->slots = slots < 3 ? 3 : slots;
    h->buf = ckpt_xcalloc((size_t)h->slots, sizeof(*h->buf));
    h->len = ckpt_xcalloc((size_t)h->slots, sizeof(*h->len));
    h->st = ckpt_xcalloc((size_t)h->slots, 1);
    for (int i = 0; i < h->slots; i++)
        h->buf[i] = ckpt_xmalloc(block);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->room, NULL);
    pthread_cond_init(&h->ready, NULL);
    h->threaded = pthread_create(&h->th, NULL, run, h) == 0;
    return h;
}

ssize_t zahead_next(struct zahead *h, char **out)
{
    if (h->ended)
        return h->end_len;
    unsigned long long seq;
    if (h->threaded) {
        pthread_mutex_lock(&h->mu);
        while (h->taken >= h->filled) {
            h->take_waits++;
            pthread_cond_wait(&h->ready, &h->mu);
            h->take_waits--;
        }
        seq = h->taken;
        pthread_mutex_unlock(&h->mu);
    } else {
        seq = h->taken;
        decode(h, seq);
    }
    int i = (int)(seq % (unsigned long long)h->slots);
    ssize_t n = h->len[i];
    h->state |= h->st[i];
    if (n <= 0) {
        h->ended = 1;
        h->end_len = n;
        return n;
    }
    if (h->threaded) {
        pthread_mutex_lock(&h->mu);
        h->taken++;
        /* Wake a waiting thread only once half the ring is free: a
         * wake-up per block costs more than the block on a busy box. */
        if (h->fill_waits &&
            h->taken + (unsigned)h->slots - 2 - h->filled >=
                (unsigned)h->slots / 2)
            pthread_cond_signal(&h->room);
        pthread_mutex_unlock(&h->mu);
    } else {
        h->taken++;
    }
    *out = h->buf[i];
    return n;
}

int zahead_failed(const struct zahead *h)
{
    return (h->state & ZA_FAILED) != 0;
}

int zahead_io_failed(const struct zahead *h)
{
    return (h->state & ZA_IO) != 0;
}

const char *zahead_error(const struct zahead *h)
{
    /* err is the thread's until a block taken says it was written. */
    int seen = (h->state & ZA_FAILED) || (h->ended && h->end_len < 0);
    return seen && h->err_set ? h->err : "decompression failed";
}

void zahead_close(struct zahead *h)
{
    if (!h)
        return;
    if (h->threaded) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_signal(&h->room);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->th, NULL);
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->room);
    pthread_cond_destroy(&h->ready);
    for (int i = 0; i < h->slots; i++)
        free(h->buf[i]);
    free(h->buf);
    free(h->len);
    free(h->st);
    free(h);
}
