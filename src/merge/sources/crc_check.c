/*
 * sources/crc_check.c - the CRC-32 of every torch zip record a source is read
 * from, checked against its central directory entry as the bytes stream
 * through the copy: a record corrupted without changing its size fails the
 * run, naming file and record, instead of becoming a silent wrong output.
 *
 * Planning, or for a remote DCP the copy as it locates each chunk,
 * registers each record (src_note_record) before its bytes are read. The copy notes the
 * CRC of every range it reads inside a record (pieces; adjacent ones are
 * merged as they come). At the end (src_check_records) the pieces of a
 * record are combined in offset order (crc32_combine); what the copy did
 * not read (padding, the elements of other tensors, overlapping strided
 * spans) is read then, only those gaps, so the common case costs no extra
 * I/O. A record of which nothing was read does not reach the output and
 * is not checked.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

#define MAX_PIECES 4096   /* beyond: the record is read whole at the end */

struct upiece {
    uint64_t off, len;    /* relative to the record's data */
    uint32_t crc;
};

struct urec {
    uint64_t off, size;   /* absolute data range in the source */
    uint32_t want;
    char *name;           /* "archive/data/0"; malloced */
    pthread_mutex_t mu;
    struct upiece *p;     /* malloced */
    size_t n, cap;
    int whole;            /* too many pieces: read it whole */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

/* Index of the first record of s at or after off. */
static size_t lower_bound(const struct usrc *s, uint64_t off)
{
    size_t lo = 0, hi = s->nrecs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->recs[mid]->off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Records are kept in offset order as they come: items are located in
 * about file order, so an insert is nearly always an append. */
void uns_src_note_record(struct usrc *s, uint64_t off, uint64_t size,
                         uint32_t crc, const char *prefix, const char *name)
{
    pthread_mutex_lock(&reg_mu);
    size_t at = lower_bound(s, off);
    if (at < s->nrecs && s->recs[at]->off == off) {
        pthread_mutex_unlock(&reg_mu);
        return;
    }
    if (s->nrecs == s->reccap) {
        s->reccap = s->reccap ? 2 * s->reccap : 8;
        s->recs = ckpt_xreallocarray(s->recs, s->reccap, sizeof(*s->recs));
    }
    struct urec *r = ckpt_xcalloc(1, sizeof(*r));
    r->off = off;
    r->size = size;
    r->want = crc;
    r->name = ckpt_xasprintf("%s%s%s", prefix ? prefix : "",
                             prefix && *prefix ? "/" : "", name);
    pthread_mutex_init(&r->mu, NULL);
    memmove(&s->recs[at + 1], &s->recs[at],
            (s->nrecs - at) * sizeof(*s->recs));
    s->recs[at] = r;
    s->nrecs++;
    pthread_mutex_unlock(&reg_mu);
}

/* Before the copy (single-threaded): reads are noted from now on, for
 * sources added later too (a zstd item decompressed by the copy). */
void uns_src_records_ready(struct ujob *j)
{
    int live = j->plan.lazy ? 2 : 1;
    pthread_mutex_lock(&j->mu);
    j->src.recs_live = live;
    for (size_t i = 0; i < j->src.nsrcs; i++)
        j->src.srcs[i]->recs_live = live;
    pthread_mutex_unlock(&j->mu);
}

/* The record holding [off, off+len), or NULL. */
static struct urec *find(const struct usrc *s, uint64_t off, uint64_t len)
{
    size_t lo = lower_bound(s, off + 1);    /* records starting <= off */
    if (!lo)
        return NULL;
    struct urec *r = s->recs[lo - 1];
    return off + len <= r->off + r->size ? r : NULL;
}

static void add_piece(struct urec *r, uint64_t off, uint64_t len,
                      uint32_t crc)
{
    pthread_mutex_lock(&r->mu);
    struct upiece *last = r->n ? &r->p[r->n - 1] : NULL;
    if (last && last->off + last->len == off) {
        last->crc = ckpt_crc32_combine(last->crc, crc, len);
        last->len += len;
    } else if (r->n == MAX_PIECES || r->whole) {
        r->whole = 1;
    } else {
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 8;
            r->p = ckpt_xreallocarray(r->p, r->cap, sizeof(*r->p));
        }
        r->p[r->n++] = (struct upiece){ off, len, crc };
    }
    pthread_mutex_unlock(&r->mu);
}

int uns_src_read_noted(struct usrc *s, uint64_t off, void *buf, size_t len,
                       struct ckpt_err *err)
{
    if (uns_src_read(s, off, buf, len, err) != 0)
        return -1;
    if (!s->recs_live || !len)
        return 0;
    /* Records found later are added as others read: look up under the
     * lock then (a record, once added, stays until the job ends). */
    if (s->recs_live == 2)
        pthread_mutex_lock(&reg_mu);
    struct urec *r = find(s, off, len);
    if (s->recs_live == 2)
        pthread_mutex_unlock(&reg_mu);
    if (r)
        add_piece(r, off - r->off, len, ckpt_crc32(0, buf, len));
    return 0;
}

/* CRC of [off, off+len) of r's data, read now. */
static int read_crc(struct usrc *s, const struct urec *r, uint64_t off,
                    uint64_t len, char *buf, size_t cap, uint32_t *crc,
                    struct ckpt_err *err)
{
    while (len) {
        size_t n = len < cap ? (size_t)len : cap;
        if (uns_src_read(s, r->off + off, buf, n, err) != 0)
            return -1;
        *crc = ckpt_crc32_combine(*crc, ckpt_crc32(0, buf, n), n);
        off += n;
        len -= n;
    }
    return 0;
}

static int cmp_piece(const void *a, const void *b)
{
    const struct upiece *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int check_one(struct usrc *s, struct urec *r, char *buf, size_t cap,
                     struct ckpt_err *err)
{
    uint32_t crc = 0;
    uint64_t pos = 0;
    int rc = 0;
    if (r->whole)
        r->n = 0;
    qsort(r->p, r->n, sizeof(*r->p), cmp_piece);
    for (size_t i = 0; rc == 0 && i < r->n; i++) {
        const struct upiece *p = &r->p[i];
        uint64_t end = p->off + p->len;
        if (p->off > pos) {               /* a gap: read it now */
            rc = read_crc(s, r, pos, p->off - pos, buf, cap, &crc, err);
            pos = p->off;
        }
        if (rc == 0 && p->off == pos)
            crc = ckpt_crc32_combine(crc, p->crc, p->len);
        else if (rc == 0 && end > pos)    /* overlaps: read the rest anew */
            rc = read_crc(s, r, pos, end - pos, buf, cap, &crc, err);
        pos = end > pos ? end : pos;
    }
    if (rc == 0 && pos < r->size)
        rc = read_crc(s, r, pos, r->size - pos, buf, cap, &crc, err);
    if (rc == 0 && crc != r->want)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': record '%s' fails its "
                          "CRC-32 check (stored %08x, read %08x): the file "
                          "is corrupted", s->name, r->name, (unsigned)r->want,
                          (unsigned)crc);
    return rc;
}

int uns_src_check_records(struct ujob *j, struct ckpt_err *err)
{
    size_t cap = (size_t)j->plan.band;
    char *buf = NULL;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < j->src.nsrcs; i++) {
        struct usrc *s = j->src.srcs[i];
        for (size_t k = 0; rc == 0 && k < s->nrecs; k++) {
            struct urec *r = s->recs[k];
            if (!r->n && !r->whole)
                continue;             /* nothing of it was used */
            if (!buf)
                buf = ckpt_xmalloc(cap);
            rc = check_one(s, r, buf, cap, err);
        }
    }
    free(buf);
    return rc;
}

void uns_src_records_free(struct usrc *s)
{
    for (size_t i = 0; i < s->nrecs; i++) {
        free(s->recs[i]->p);
        free(s->recs[i]->name);
        pthread_mutex_destroy(&s->recs[i]->mu);
        free(s->recs[i]);
    }
    free(s->recs);
    s->recs = NULL;
    s->nrecs = s->reccap = 0;
}
