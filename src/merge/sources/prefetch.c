/*
 * sources/prefetch.c - small remote files of the source fetched whole, ahead.
 *
 * The OLMo planners (olmo/plan_legacy.c, olmo/plan_local.c, olmo/plan_core.c) read their
 * rank files one after another: each rank's zip directory and pickle (or
 * safetensors header) while planning, then its tensor records during the
 * copy. From object storage every one of those reads was a round trip of
 * its own (a HEAD, a window or two, then the records), in sequence: a
 * 64-rank legacy step of 9 MB took 9-11 s from s3rver, against 0.8 s for
 * fetching the step whole first. Here the planner hands over the files it
 * is about to read, as one listing found them (no HEAD each), and those of
 * at most WHOLE_MAX bytes are fetched whole, one ranged GET each (If-Match
 * the listed ETag), by PF_THREADS threads in the planner's order, while
 * the planner works through the earlier ones. Every later read of such a
 * file, planning or copy, is served from memory. Memory: a budget of its
 * own, the size of the read-ahead's (CKPT_READAHEAD_MB, 64 MiB by
 * default; 0 turns this off); files past it are read as before (windows,
 * then read-ahead blocks, which leave these files out). A failed fetch only means the file is read as before, where
 * its error, if it persists, is reported.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

#define WHOLE_MAX (8u << 20)
#define PF_THREADS 8

enum { W_QUEUED = 1, W_LOADING, W_READY, W_FAILED };

struct src_whole {
    int state;
    char *buf;                  /* W_READY: the whole file */
};

struct src_pf {
    struct ckpt_storage *st;    /* borrowed: the job's source storage */
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* a fetch finished, or stop */
    pthread_cond_t work;        /* the queue grew, or stop */
    struct usrc **q;            /* FIFO: files to fetch, planner order */
    size_t qhead, qn, qcap;
    pthread_t th[PF_THREADS];
    int nth, stop;
    uint64_t budget, held;      /* bytes allowed, bytes taken */
    /* Files read by path (uns_src_file: train/rank0.pt, checked while
     * planning and copied whole into train.pt), fetched on first use. */
    struct pf_file { char *key; char etag[80]; struct src_whole *w; }
        *files;
    size_t nfiles;
};

/* Fetch s whole into w (called unlocked; returns with pf->mu held) and
 * wake its readers. A failed fetch is W_FAILED: readers then read by
 * range, and report the error themselves. */
static void fetch(struct src_pf *pf, struct usrc *s, struct src_whole *w)
{
    char *buf = ckpt_xmalloc((size_t)s->size);
    size_t got = 0;
    struct ckpt_err err;
    if (ckpt_storage_read_if(pf->st, s->key, s->etag, 0, buf,
                             (size_t)s->size, &got, &err) != 0 ||
        got != s->size) {
        free(buf);
        buf = NULL;
    }
    pthread_mutex_lock(&pf->mu);
    w->buf = buf;
    w->state = buf ? W_READY : W_FAILED;
    pthread_cond_broadcast(&pf->cv);
}

static void *fetcher(void *arg)
{
    struct src_pf *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->stop && pf->qhead == pf->qn)
            pthread_cond_wait(&pf->work, &pf->mu);
        if (pf->stop)
            break;
        struct usrc *s = pf->q[pf->qhead++];
        struct src_whole *w = s->whole;
        w->state = W_LOADING;
        pthread_mutex_unlock(&pf->mu);
        fetch(pf, s, w);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

static struct src_pf *pf_of(struct ujob *j)
{
    if (j->src.pf)
        return j->src.pf;
    struct src_pf *pf = ckpt_xcalloc(1, sizeof(*pf));
    pf->st = j->src.st;
    pf->budget = uns_src_ra_budget();
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    pthread_cond_init(&pf->work, NULL);
    j->src.pf = pf;
    return pf;
}

/* Queue s (its size known) if it fits what is left of the budget and a
 * fetcher runs. */
static void enqueue(struct ujob *j, struct usrc *s)
{
    struct src_pf *pf = pf_of(j);
    if (!s->size || s->size > WHOLE_MAX)
        return;
    pthread_mutex_lock(&pf->mu);
    /* Threads as the queue needs them, up to PF_THREADS. */
    if (pf->held + s->size <= pf->budget && pf->nth < PF_THREADS &&
        pf->nth <= (int)(pf->qn - pf->qhead) &&
        pthread_create(&pf->th[pf->nth], NULL, fetcher, pf) == 0)
        pf->nth++;
    if (!pf->nth || pf->held + s->size > pf->budget) {
        pthread_mutex_unlock(&pf->mu);
        return;     /* read as before */
    }
    if (pf->qn == pf->qcap) {
        pf->qcap = pf->qcap ? 2 * pf->qcap : 64;
        pf->q = ckpt_xreallocarray(pf->q, pf->qcap, sizeof(*pf->q));
    }
    s->whole = ckpt_xcalloc(1, sizeof(*s->whole));
    s->whole->state = W_QUEUED;
    s->pf = pf;
    pf->q[pf->qn++] = s;
    pf->held += s->size;
    pthread_cond_signal(&pf->work);
    pthread_mutex_unlock(&pf->mu);
}

int uns_src_prefetch(struct ujob *j, const char *relpath,
                     const struct uns_dent *e, struct ckpt_err *err)
{
    if (!e || e->type != CKPT_ENTRY_FILE || !j->src.st ||
        ckpt_storage_is_local(j->src.st) || !uns_src_ra_budget())
        return 0;
    struct usrc *s;
    if (uns_src_get_listed(j, relpath, e->size, e->etag, &s, err) != 0)
        return -1;
    if (!s->pf)
        enqueue(j, s);
    return 0;
}

int uns_src_whole_read(struct usrc *s, uint64_t off, void *buf, size_t len,
                       struct ckpt_err *err)
{
    struct src_pf *pf = s->pf;
    if (!pf)
        return 0;
    pthread_mutex_lock(&pf->mu);
    while (s->whole->state == W_QUEUED || s->whole->state == W_LOADING)
        pthread_cond_wait(&pf->cv, &pf->mu);
    const char *p = s->whole->buf;
    pthread_mutex_unlock(&pf->mu);
    if (!p)
        return 0;   /* the fetch failed: read as before */
    if (off > s->size || len > s->size - off)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: truncated (needs %llu "
                            "bytes at offset %llu)", s->name,
                            (unsigned long long)len,
                            (unsigned long long)off);
    memcpy(buf, p + off, len);
    return 1;
}

void uns_src_whole_file(struct ujob *j, struct usrc *s)
{
    if (!s->st || ckpt_storage_is_local(s->st) || !s->size ||
        s->size > WHOLE_MAX || !uns_src_ra_budget())
        return;
    struct src_pf *pf = pf_of(j);
    struct src_whole *w = NULL;
    pthread_mutex_lock(&pf->mu);
    for (size_t i = 0; i < pf->nfiles && !w; i++)
        if (!strcmp(pf->files[i].key, s->key) &&
            !strcmp(pf->files[i].etag, s->etag))
            w = pf->files[i].w;
    if (!w && pf->held + s->size <= pf->budget) {
        pf->files = ckpt_xreallocarray(pf->files, pf->nfiles + 1,
                                       sizeof(*pf->files));
        struct pf_file *f = &pf->files[pf->nfiles++];
        f->key = ckpt_xstrdup(s->key);
        snprintf(f->etag, sizeof(f->etag), "%s", s->etag);
        f->w = w = ckpt_xcalloc(1, sizeof(*w));
        w->state = W_LOADING;
        pf->held += s->size;
        pthread_mutex_unlock(&pf->mu);
        /* Fetched here, by the first reader; others wait for it. */
        fetch(pf, s, w);
    }
    pthread_mutex_unlock(&pf->mu);
    if (w) {
        s->pf = pf;
        s->whole = w;
    }
}

void uns_src_whole_free(struct ujob *j)
{
    struct src_pf *pf = j->src.pf;
    if (!pf)
        return;
    pthread_mutex_lock(&pf->mu);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->work);
    pthread_mutex_unlock(&pf->mu);
    for (int i = 0; i < pf->nth; i++)
        pthread_join(pf->th[i], NULL);
    for (size_t i = 0; i < pf->qn; i++) {
        struct usrc *s = pf->q[i];
        free(s->whole->buf);
        free(s->whole);
        s->whole = NULL;
        s->pf = NULL;
    }
    for (size_t i = 0; i < pf->nfiles; i++) {
        free(pf->files[i].key);
        free(pf->files[i].w->buf);
        free(pf->files[i].w);
    }
    free(pf->files);
    free(pf->q);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    pthread_cond_destroy(&pf->work);
    free(pf);
    j->src.pf = NULL;
}
