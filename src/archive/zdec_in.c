/*
 * zdec_in.c - the compressed input every decoder of zdec.h pulls from:
 * pieces read through the callback and kept until the decoder has used
 * them (zdec_bz2.c's block scanner looks back to a block's start).
 *
 * Read ahead (zdec_in_ahead): a thread of its own reads the file in
 * order into a ring of chunks, so that reading (the kernel's copy out of
 * the page cache, a third of a zstd decoder's time) overlaps decoding.
 * The decoder reads a chunk in place while it keeps nothing from before
 * it (gzip, xz, zstd inside a member); bytes it keeps (a zstd frame's
 * magic split across chunks, bzip2's look-back) and the chunk after them
 * are copied into the input's own buffer, as contiguous as a plain read
 * made them. The end of the file and a failed read come as a chunk does,
 * after every byte read before them, so the decoder meets them exactly
 * where it did without the thread.
 */
#include "zdec.h"

#include <pthread.h>
#include <string.h>

#include "ckpt/util.h"

/* Room kept free for each read: the archive reads 1 MiB at a time
 * locally. */
#define ROOM (1u << 20)

/* Chunks are numbered in file order. The thread may fill chunk k while
 * k < freed + slots; the decoder takes them in order and frees them in
 * order (it holds at most the one it reads in place and the one it is
 * taking). The end or a failure is published like a chunk and ends the
 * thread; it is never taken, so every later call sees it again. */
struct zin_ra {
    zdec_read_fn rd;
    void *ud;
    size_t chunk;
    int slots;
    unsigned char **buf;        /* slots chunks of chunk bytes */
    size_t *len;                /* per slot: bytes read (0: the end) */
    unsigned char *bad;         /* per slot: the read failed */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t room;        /* a chunk was freed, or stop */
    pthread_cond_t ready;       /* a chunk was filled */
    unsigned long long filled, taken, freed;
    int stop, fill_wait, take_wait;
    int held;                   /* the slot in->buf points into, or -1 */
    unsigned char *own;         /* the input's own buffer while a chunk */
    size_t own_cap;             /* is read in place */
};

static void *ra_run(void *arg)
{
    struct zin_ra *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && r->filled >= r->freed + (unsigned)r->slots) {
            r->fill_wait = 1;
            pthread_cond_wait(&r->room, &r->mu);
            r->fill_wait = 0;
        }
        if (r->stop)
            break;
        int i = (int)(r->filled % (unsigned)r->slots);
        pthread_mutex_unlock(&r->mu);
        size_t n = 0;
        int bad = r->rd(r->ud, r->buf[i], r->chunk, &n) != 0;
        pthread_mutex_lock(&r->mu);
        r->len[i] = bad ? 0 : n;
        r->bad[i] = (unsigned char)bad;
        r->filled++;
        if (r->take_wait)
            pthread_cond_signal(&r->ready);
        if (bad || !n)
            break;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void ra_stop(struct zin_ra *r, int started);

/* Start reading ahead: NULL when no thread can be started (the input is
 * then read in the decoder's thread, as without). */
static struct zin_ra *ra_start(const struct zdec_in *in)
{
    struct zin_ra *r = ckpt_xcalloc(1, sizeof(*r));
    r->rd = in->rd;
    r->ud = in->ud;
    r->chunk = in->ra_chunk;
    r->slots = in->ra_slots < 2 ? 2 : in->ra_slots;
    r->buf = ckpt_xcalloc((size_t)r->slots, sizeof(*r->buf));
    r->len = ckpt_xcalloc((size_t)r->slots, sizeof(*r->len));
    r->bad = ckpt_xcalloc((size_t)r->slots, 1);
    for (int i = 0; i < r->slots; i++)
        r->buf[i] = ckpt_xmalloc(r->chunk);
    r->held = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->room, NULL);
    pthread_cond_init(&r->ready, NULL);
    if (pthread_create(&r->th, NULL, ra_run, r) != 0) {
        ra_stop(r, 0);
        return NULL;
    }
    return r;
}

/* The next chunk's slot (*n bytes, 0 at the end; *bad: the read failed).
 * The end and a failure stay where they are. */
static int ra_take(struct zin_ra *r, size_t *n, int *bad)
{
    pthread_mutex_lock(&r->mu);
    while (r->filled <= r->taken) {
        r->take_wait = 1;
        pthread_cond_wait(&r->ready, &r->mu);
        r->take_wait = 0;
    }
    pthread_mutex_unlock(&r->mu);
    int i = (int)(r->taken % (unsigned)r->slots);
    *n = r->len[i];
    *bad = r->bad[i];
    if (*n && !*bad)
        r->taken++;
    return i;
}

/* Give the oldest chunk taken back to the thread. A waiting thread is
 * woken once half the ring is free, to read several chunks a wake-up. */
static void ra_free(struct zin_ra *r)
{
    pthread_mutex_lock(&r->mu);
    r->freed++;
    unsigned long long room = r->freed + (unsigned)r->slots - r->filled;
    if (r->fill_wait && room >= (unsigned)(r->slots / 2))
        pthread_cond_signal(&r->room);
    pthread_mutex_unlock(&r->mu);
}

/* Stop the thread (it finishes the read it is making) and free all. */
static void ra_stop(struct zin_ra *r, int started)
{
    if (started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_signal(&r->room);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->room);
    pthread_cond_destroy(&r->ready);
    for (int i = 0; i < r->slots; i++)
        free(r->buf[i]);
    free(r->buf);
    free(r->len);
    free(r->bad);
    free(r->own);
    free(r);
}

/* Room for n more bytes after buf[len] in the input's own buffer,
 * dropping buf[0..keep) only when room is short: a move per read would
 * copy the retained bytes again and again. */
static void make_room(struct zdec_in *in, size_t keep, size_t n)
{
    if (keep && in->cap - in->len < n) {
        memmove(in->buf, in->buf + keep, in->len - keep);
        in->len -= keep;
        in->pos -= keep;
        in->base += keep;
    }
    if (in->cap - in->len < n) {
        size_t c = in->cap ? in->cap : ROOM;
        while (c - in->len < n)
            c *= 2;
        in->buf = ckpt_xrealloc(in->buf, c);
        in->cap = c;
    }
}

/* Nothing kept: read chunk i in place. */
static void read_in_place(struct zdec_in *in, int i, size_t n)
{
    struct zin_ra *r = in->ra;
    if (r->held >= 0) {
        ra_free(r);
    } else {
        r->own = in->buf;
        r->own_cap = in->cap;
    }
    in->base += in->len;
    in->pos = 0;
    in->buf = r->buf[i];
    in->cap = r->chunk;
    in->len = n;
    r->held = i;
}

/* Bytes kept: back to the own buffer, from buf[keep] on. */
static void to_own(struct zdec_in *in, size_t keep)
{
    struct zin_ra *r = in->ra;
    const unsigned char *kept = in->buf + keep;
    size_t rest = in->len - keep;
    in->base += keep;
    in->pos -= keep;
    in->buf = r->own;
    in->cap = r->own_cap;
    in->len = 0;
    r->own = NULL;
    r->own_cap = 0;
    make_room(in, 0, rest);
    memcpy(in->buf, kept, rest);
    in->len = rest;
    ra_free(r);
    r->held = -1;
}

static int more_ahead(struct zdec_in *in, size_t keep)
{
    struct zin_ra *r = in->ra;
    size_t n;
    int bad;
    int i = ra_take(r, &n, &bad);
    if (bad) {
        in->io_failed = 1;
        return -1;
    }
    if (!n) {
        in->eof = 1;
        return 0;
    }
    if (keep == in->len) {
        read_in_place(in, i, n);
        return 1;
    }
    if (r->held >= 0) {
        to_own(in, keep);
        keep = 0;
    }
    make_room(in, keep, n);
    memcpy(in->buf + in->len, r->buf[i], n);
    in->len += n;
    ra_free(r);
    return 1;
}

void zdec_in_ahead(struct zdec_in *in, size_t chunk, int slots)
{
    in->ra_chunk = chunk;
    in->ra_slots = slots;
}

int zdec_in_more(struct zdec_in *in, size_t keep)
{
    if (in->eof)
        return 0;
    if (in->ra_chunk && !in->ra) {
        in->ra = ra_start(in);
        in->ra_chunk = 0; /* one try */
    }
    if (in->ra)
        return more_ahead(in, keep);
    make_room(in, keep, ROOM);
    size_t n = 0;
    if (in->rd(in->ud, in->buf + in->len, in->cap - in->len, &n) != 0) {
        in->io_failed = 1;
        return -1;
    }
    if (!n) {
        in->eof = 1;
        return 0;
    }
    in->len += n;
    return 1;
}

int zdec_in_need(struct zdec_in *in, size_t n)
{
    while (in->len - in->pos < n) {
        int r = zdec_in_more(in, in->pos);
        if (r <= 0)
            return r;
    }
    return 1;
}

void zdec_in_release(struct zdec_in *in)
{
    if (in->ra) {
        if (in->ra->held >= 0)
            in->buf = NULL; /* a chunk: ra_stop frees it */
        ra_stop(in->ra, 1);
        in->ra = NULL;
    }
    free(in->buf);
    in->buf = NULL;
    in->cap = in->len = in->pos = 0;
}
