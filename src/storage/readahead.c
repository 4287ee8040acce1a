/*
 * readahead.c - a read-only storage that serves reads of another from
 * large blocks, fetched ahead of sequential readers (storage.h
 * ckpt_storage_open_readahead).
 *
 * Readers of object storage that go through a file in pieces (unshard
 * gathers each output band from small ranges of every rank file) would
 * otherwise send one small ranged GET per piece, as many at a time as
 * they have threads. Here a read is cut into aligned blocks of `block`
 * bytes; a block is fetched whole with one ranged GET (If-Match the ETag
 * the read names, so every byte is of that version) and kept in one of
 * `nblocks` slots (the memory bound), and a reader of block k of a key has
 * blocks k+1..k+depth fetched meanwhile by `threads` fetchers: several
 * large GETs in flight, as aws-cli's downloads do (8 MiB, 10 in flight).
 *
 * Slots: FREE, LOADING (one fetcher; readers of the block wait), READY.
 * A block is "behind" once a later block of its key was read: sequential
 * readers are past it. A fetch ahead only takes a free slot or a block
 * behind: it never pushes out a block in use or fetched ahead and not yet
 * read, so a working set larger than the slots degrades to fetching on
 * demand instead of fetching the same blocks again and again. A reader
 * that finds no free slot takes, least recently used first, a block
 * behind, then one being read, then one fetched ahead. A failed fetch
 * ahead just frees its slot: the reader fetches the block itself and sees
 * its own error.
 */
#include "storage_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

enum { SLOT_FREE, SLOT_LOADING, SLOT_READY };

struct slot {
    int state;
    char *key;                  /* owned; NULL when FREE */
    char etag[80];
    uint64_t idx;               /* block number in key */
    char *buf;                  /* block bytes (allocated on first use) */
    size_t len;                 /* bytes of the block (short at the end) */
    int pins;                   /* readers copying out */
    int read;                   /* a reader used it */
    int behind;                 /* a later block of its key was read:
                                   sequential readers are past it */
    uint64_t used;              /* clock at the last use */
};

struct want {                   /* a block to fetch ahead */
    char *key;                  /* owned */
    char etag[80];
    uint64_t idx;
};

struct ra {
    struct ckpt_storage *under; /* borrowed */
    size_t block, nslots;
    int depth;
    struct slot *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* a slot changed state */
    pthread_cond_t work;        /* the queue got a block, or stop */
    struct want *q;             /* FIFO ring of wanted blocks */
    size_t qcap, qhead, qn;
    pthread_t *th;
    int nth, stop;
    uint64_t clock;
};

static const char *etag_of(const char *etag)
{
    return etag ? etag : "";
}

static struct slot *find(struct ra *r, const char *key, const char *etag,
                         uint64_t idx)
{
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *s = &r->s[i];
        if (s->state != SLOT_FREE && s->idx == idx && !strcmp(s->key, key) &&
            !strcmp(s->etag, etag))
            return s;
    }
    return NULL;
}

static int queued(const struct ra *r, const char *key, uint64_t idx)
{
    for (size_t i = 0; i < r->qn; i++) {
        const struct want *w = &r->q[(r->qhead + i) % r->qcap];
        if (w->idx == idx && !strcmp(w->key, key))
            return 1;
    }
    return 0;
}

/* A block known to be short ends key: nothing after it to fetch. */
static int past_end(const struct ra *r, const char *key, uint64_t idx)
{
    for (size_t i = 0; i < r->nslots; i++) {
        const struct slot *s = &r->s[i];
        if (s->state == SLOT_READY && s->idx < idx && s->len < r->block &&
            !strcmp(s->key, key))
            return 1;
    }
    return 0;
}

/* How much a ready block is still worth keeping: blocks readers are past
 * go first, then blocks being read, then blocks fetched ahead. */
static int worth(const struct slot *s)
{
    return s->behind ? 0 : s->read ? 1 : 2;
}

/* A slot to load into, or NULL. ahead: only free ones, or blocks the
 * readers are past (a fetch ahead never pushes out a block still in
 * use or fetched ahead and not yet read). */
static struct slot *victim(struct ra *r, int ahead)
{
    struct slot *best = NULL;
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *s = &r->s[i];
        if (s->state == SLOT_FREE)
            return s;
        if (s->state != SLOT_READY || s->pins || (ahead && !s->behind))
            continue;
        /* The least worth, then the least recently used. */
        if (!best || worth(s) < worth(best) ||
            (worth(s) == worth(best) && s->used < best->used))
            best = s;
    }
    return best;
}

/* A reader is at block idx of key: the blocks before it are behind. */
static void pass(struct ra *r, const char *key, uint64_t idx)
{
    for (size_t i = 0; i < r->nslots; i++) {
        struct slot *s = &r->s[i];
        if (s->state == SLOT_READY && s->idx < idx && !s->behind &&
            !strcmp(s->key, key))
            s->behind = 1;
    }
}

static void claim(struct ra *r, struct slot *s, const char *key,
                  const char *etag, uint64_t idx)
{
    free(s->key);
    s->key = ckpt_xstrdup(key);
    snprintf(s->etag, sizeof(s->etag), "%s", etag);
    s->idx = idx;
    s->state = SLOT_LOADING;
    s->read = 0;
    s->behind = 0;
    s->len = 0;
    s->used = ++r->clock;
    if (!s->buf)
        s->buf = ckpt_xmalloc(r->block);
}

/* Fetch s's block (claimed LOADING by this thread); the lock is dropped
 * for the request. On failure the slot is freed. */
static int load(struct ra *r, struct slot *s, struct ckpt_err *err)
{
    char *key = ckpt_xstrdup(s->key);
    char etag[80];
    uint64_t off = s->idx * r->block;
    size_t got = 0;
    snprintf(etag, sizeof(etag), "%s", s->etag);
    pthread_mutex_unlock(&r->mu);
    int rc = ckpt_storage_read_if(r->under, key, etag, off, s->buf, r->block,
                                  &got, err);
    pthread_mutex_lock(&r->mu);
    free(key);
    if (rc == 0) {
        s->len = got;
        s->state = SLOT_READY;
    } else {
        free(s->key);
        s->key = NULL;
        s->state = SLOT_FREE;
    }
    pthread_cond_broadcast(&r->cv);
    return rc;
}

static void want_ahead(struct ra *r, const char *key, const char *etag,
                       uint64_t idx)
{
    for (int d = 1; d <= r->depth; d++) {
        uint64_t k = idx + (uint64_t)d;
        if (find(r, key, etag, k) || queued(r, key, k) ||
            past_end(r, key, k))
            continue;
        if (r->qn == r->qcap) {
            /* Full: the oldest want is the least likely still useful. */
            free(r->q[r->qhead].key);
            r->qhead = (r->qhead + 1) % r->qcap;
            r->qn--;
        }
        struct want *w = &r->q[(r->qhead + r->qn++) % r->qcap];
        w->key = ckpt_xstrdup(key);
        snprintf(w->etag, sizeof(w->etag), "%s", etag);
        w->idx = k;
        pthread_cond_signal(&r->work);
    }
}

static void *fetcher(void *arg)
{
    struct ra *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && !r->qn)
            pthread_cond_wait(&r->work, &r->mu);
        if (r->stop)
            break;
        struct want w = r->q[r->qhead];
        r->qhead = (r->qhead + 1) % r->qcap;
        r->qn--;
        struct slot *s = NULL;
        if (!find(r, w.key, w.etag, w.idx) && !past_end(r, w.key, w.idx))
            s = victim(r, 1);
        if (s) {
            struct ckpt_err e2;
            claim(r, s, w.key, w.etag, w.idx);
            load(r, s, &e2);
        }
        free(w.key);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The READY slot of block idx, pinned; NULL with err on failure. */
static struct slot *get_block(struct ra *r, const char *key,
                              const char *etag, uint64_t idx,
                              struct ckpt_err *err)
{
    for (;;) {
        struct slot *s = find(r, key, etag, idx);
        if (s && s->state == SLOT_READY) {
            s->pins++;
            s->read = 1;
            s->used = ++r->clock;
            return s;
        }
        if (!s && (s = victim(r, 0)) != NULL) {
            claim(r, s, key, etag, idx);
            if (load(r, s, err) != 0)
                return NULL;
            continue;
        }
        /* Being fetched, or every slot busy: wait for a change. */
        pthread_cond_wait(&r->cv, &r->mu);
    }
}

static int ra_read_if(struct ckpt_storage *st, const char *key,
                      const char *etag, uint64_t off, void *buf, size_t len,
                      size_t *nread, struct ckpt_err *err)
{
    struct ra *r = st->impl;
    char *out = buf;
    *nread = 0;
    etag = etag_of(etag);
    pthread_mutex_lock(&r->mu);
    while (len > 0) {
        uint64_t idx = off / r->block;
        size_t in = (size_t)(off % r->block);
        struct slot *s = get_block(r, key, etag, idx, err);
        if (!s) {
            pthread_mutex_unlock(&r->mu);
            return -1;
        }
        pass(r, key, idx);
        want_ahead(r, key, etag, idx);
        size_t have = s->len > in ? s->len - in : 0;
        size_t n = have < len ? have : len;
        pthread_mutex_unlock(&r->mu);
        memcpy(out, s->buf + in, n);
        pthread_mutex_lock(&r->mu);
        s->pins--;
        pthread_cond_broadcast(&r->cv);
        *nread += n;
        out += n;
        off += n;
        len -= n;
        if (s->len < r->block && in + n >= s->len)
            break;  /* the end of the object */
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int ra_read(struct ckpt_storage *st, const char *key, uint64_t off,
                   void *buf, size_t len, size_t *nread,
                   struct ckpt_err *err)
{
    return ra_read_if(st, key, NULL, off, buf, len, nread, err);
}

static int ra_stat(struct ckpt_storage *st, const char *key,
                   struct ckpt_stat *out, struct ckpt_err *err)
{
    struct ra *r = st->impl;
    return ckpt_storage_stat(r->under, key, out, err);
}

static int ra_list(struct ckpt_storage *st, const char *dir, unsigned flags,
                   ckpt_list_fn fn, void *ud, struct ckpt_err *err)
{
    struct ra *r = st->impl;
    return ckpt_storage_list(r->under, dir, flags, fn, ud, err);
}

static int ra_readonly(struct ckpt_storage *st, const char *key,
                       struct ckpt_err *err)
{
    (void)st;
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': read-ahead view is "
                        "read-only", key);
}

static int ra_writer_open(struct ckpt_storage *st, const char *key,
                          uint64_t size_hint, struct ckpt_writer **out,
                          struct ckpt_err *err)
{
    (void)size_hint;
    (void)out;
    return ra_readonly(st, key, err);
}

static int ra_put_if_absent(struct ckpt_storage *st, const char *key,
                            const void *data, size_t len,
                            struct ckpt_err *err)
{
    (void)data;
    (void)len;
    return ra_readonly(st, key, err);
}

static void ra_close(struct ckpt_storage *st)
{
    struct ra *r = st->impl;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->nth; i++)
        pthread_join(r->th[i], NULL);
    for (size_t i = 0; i < r->nslots; i++) {
        free(r->s[i].key);
        free(r->s[i].buf);
    }
    for (size_t i = 0; i < r->qn; i++)
        free(r->q[(r->qhead + i) % r->qcap].key);
    free(r->q);
    free(r->s);
    free(r->th);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->work);
    free(r);
}

static const struct ckpt_storage_ops ra_ops = {
    .name = "read-ahead",
    .stat = ra_stat,
    .list = ra_list,
    .read = ra_read,
    .read_if = ra_read_if,
    .writer_open = ra_writer_open,
    .put_if_absent = ra_put_if_absent,
    .del = ra_readonly,
    .delete_tree = ra_readonly,
    .close = ra_close,
};

int ckpt_storage_open_readahead(struct ckpt_storage **out,
                                struct ckpt_storage *under, size_t block,
                                size_t nblocks, int threads, int depth,
                                struct ckpt_err *err)
{
    if (!block || nblocks < 2 || threads < 0 || depth < 0)
        return ckpt_err_set(err, CKPT_EUSAGE, "read-ahead: bad settings "
                            "(block %zu, %zu blocks, %d threads, depth %d)",
                            block, nblocks, threads, depth);
    struct ra *r = ckpt_xcalloc(1, sizeof(*r));
    r->under = under;
    r->block = block;
    r->nslots = nblocks;
    r->depth = threads ? depth : 0;
    r->s = ckpt_xcalloc(nblocks, sizeof(*r->s));
    r->qcap = 4 * nblocks;
    r->q = ckpt_xcalloc(r->qcap, sizeof(*r->q));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_cond_init(&r->work, NULL);
    r->th = ckpt_xcalloc(threads ? (size_t)threads : 1, sizeof(*r->th));
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&r->th[r->nth], NULL, fetcher, r) != 0)
            break;  /* fewer fetchers: still correct, less ahead */
        r->nth++;
    }
    if (!r->nth)
        r->depth = 0;
    struct ckpt_storage *st = ckpt_xcalloc(1, sizeof(*st));
    st->loc.scheme = under->loc.scheme;
    st->loc.bucket = under->loc.bucket ? ckpt_xstrdup(under->loc.bucket)
                                       : NULL;
    st->loc.key = ckpt_xstrdup(under->loc.key ? under->loc.key : "");
    st->loc.display = ckpt_xstrdup(under->loc.display ? under->loc.display
                                                      : "");
    st->cfg = under->cfg;
    st->ops = &ra_ops;
    st->impl = r;
    *out = st;
    return 0;
}
