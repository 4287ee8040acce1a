/*
 * outputs/object_store.c - outputs written straight to object storage (s3://, r2://,
 * gs://): no local copy of any output.
 *
 * Every output's layout is fixed before a byte moves (outputs/torch_layout.c, outputs/safetensors_layout.c),
 * so output f is cut into parts of a fixed size (the last smaller; R2
 * wants every other part the same size), each a byte range of the file.
 * Pool workers write anywhere into the file; a part's buffer is made when
 * first written, and as soon as all its bytes are there it is sent (by
 * the thread whose write completed it) and freed. A file of one part goes
 * as one PUT, larger ones as a multipart upload completed once every part
 * is sent: an object appears whole or not at all. By the write policy,
 * an output up to CKPT_SINGLE_PUT_MAX that fits the room left of the
 * memory budget is one part, the whole file (part_size). The bytes that
 * need CRCs (a zip record's local header) are written as soon as the
 * record's last band is (outputs/torch_layout.c uns_layout_record_done), so the part
 * holding a header is held no longer than its record takes.
 *
 * Memory: part buffers held stay within --memory. A task reserves the
 * parts its range needs before it reads anything (uns_outobj_reserve) and
 * waits while that would exceed the budget, except the oldest task not yet
 * done: tasks run in output order (the pool is FIFO), so the oldest is
 * always running, and letting it through completes the parts its elders
 * started, which frees them. The wait can thus never deadlock, and what
 * the oldest adds beyond the budget is at most the parts of one band.
 *
 * Crash safety: a marker object "<DEST>-unfinished" is written before the
 * first output and deleted after the last one is complete (and verified):
 * the run judge (src/run/judge.c) reads a checkpoint with such a sibling
 * as unfinished, so a kill at any moment never leaves an output that
 * looks complete. A failure aborts the unfinished uploads and leaves the
 * marker; a rerun overwrites the outputs and removes it.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/ratelimit.h"
#include "ckpt/text.h"
#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"

#define MIB (1ULL << 20)
#define MIN_PART (8 * MIB)
#define DEFAULT_MEMORY (96 * MIB)
#define COPY_PIECE (1u << 20)

enum { P_EMPTY = 0, P_FILLING, P_SENDING, P_SENT };

struct opart {
    char *buf;              /* while FILLING/SENDING */
    uint64_t filled;
    int state;
};

struct ofile {
    char *key;              /* owned */
    char *display;          /* owned: s3://bucket/key */
    uint64_t size, psize;
    uint32_t nparts;
    struct opart *parts;    /* owned, nparts */
    char *upload_id;        /* multipart in progress, or NULL */
    char (*etags)[80];      /* owned, nparts */
    unsigned char (*md5s)[16];  /* owned, nparts: each part's MD5 */
    char etag[80];          /* the completed object's */
    char sum[48];           /* what its ETag must be, from md5s */
    uint32_t nsent;
    int created;
};

struct oobj {
    struct ckpt_storage *st;
    int st_borrowed;        /* opts.dest_storage: not closed here */
    char *prefix;           /* DEST's key, no trailing '/' */
    char *marker;           /* "<prefix>-unfinished" */
    char *display;          /* DEST as given */
    struct ofile *files;    /* owned, j->dst.nfiles */
    size_t nfiles;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t budget, held, peak;
    struct ckpt_rate *rate;     /* opts.rate: --bwlimit, or NULL */
    uint64_t whole;         /* bytes of outputs planned as one part that
                               may be held together (part_size) */
    uint64_t ntasks, low;   /* tasks of the run; oldest not done */
    unsigned char *done;
};

static struct oobj *oo(struct ujob *j)
{
    return j->dst.out->impl;
}

static uint32_t part_len(const struct ofile *of, uint32_t i)
{
    uint64_t off = (uint64_t)i * of->psize;
    return (uint32_t)(of->size - off < of->psize ? of->size - off
                                                 : of->psize);
}

/* Part size of an output of size bytes, by the write policy `upload` uses
 * too (ckpt_write_plan: equal parts of whole MiB, at least 8 MiB, at most
 * 10,000). The sink assembles an output in memory while its workers make
 * it, so the policy makes it one part, sent as one PUT with no copy at
 * CompleteMultipartUpload, when it is at most CKPT_SINGLE_PUT_MAX and
 * fits the room the budget has left: the outputs planned as one part
 * before it may all be held at once (a zip's central directory is written
 * last), so they count against the budget. A larger one goes as a
 * multipart upload, each part sent as soon as it is filled. */
static uint64_t part_size(const struct oobj *o, uint64_t size)
{
    uint64_t room = o->budget > o->whole ? o->budget - o->whole : 0;
    struct ckpt_write_in in = { .size = size, .files_in_flight = 1,
                                .min_part = MIN_PART,
                                .mem_budget = room, .assembled = room > 0 };
    struct ckpt_write_plan p;
    ckpt_storage_write_plan(o->st, &in, &p);
    return p.multipart || size <= p.part_size ? p.part_size : size;
}

static void note_held(struct oobj *o, uint64_t add)
{
    o->held += add;
    if (o->held > o->peak)
        o->peak = o->held;
}

/* --- sending ------------------------------------------------------------ */

static int send_part(struct oobj *o, struct ofile *of, uint32_t i,
                     struct ckpt_err *err)
{
    struct opart *p = &of->parts[i];
    uint32_t len = part_len(of, i);
    unsigned char md5[16];
    unsigned mdlen = 0;
    struct ckpt_put_result res;
    EVP_Digest(p->buf, len, md5, &mdlen, EVP_md5(), NULL);
    memcpy(of->md5s[i], md5, sizeof(md5));
    if (ckpt_rate_take(o->rate, len) != 0)    /* --bwlimit */
        return ckpt_err_set(err, CKPT_EIO, "interrupted");
    int rc = of->upload_id
        ? ckpt_storage_mpu_part(o->st, of->key, of->upload_id, (int)i + 1,
                                (uint64_t)i * of->psize, p->buf, len, md5, 0,
                                &res, err)
        : ckpt_storage_put_object(o->st, of->key, p->buf, len, md5, NULL, 0,
                                  &res, err);
    pthread_mutex_lock(&o->mu);
    if (rc == 0) {
        snprintf(of->upload_id ? of->etags[i] : of->etag, 80, "%s",
                 res.etag);
        of->nsent++;
    }
    free(p->buf);
    p->buf = NULL;
    p->state = P_SENT;
    o->held -= len;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return rc;
}

/* Parts of of overlapping [off, off+n): first and last index. */
static void part_range(const struct ofile *of, uint64_t off, uint64_t n,
                       uint32_t *a, uint32_t *b)
{
    *a = (uint32_t)(off / of->psize);
    *b = (uint32_t)((off + (n ? n : 1) - 1) / of->psize);
}

static int obj_write(struct ujob *j, struct ufile *f, const void *data,
                     size_t n, uint64_t off, struct ckpt_err *err)
{
    struct oobj *o = oo(j);
    struct ofile *of = f->out;
    uint32_t a, b;
    if (!n)
        return 0;
    if (off + n > of->size)
        return ckpt_err_set(err, CKPT_EIO, "%s: write past the planned "
                            "size", of->display);
    part_range(of, off, n, &a, &b);
    pthread_mutex_lock(&o->mu);
    for (uint32_t i = a; i <= b; i++) {
        struct opart *p = &of->parts[i];
        if (p->state == P_EMPTY) {  /* headers, sequential writes */
            p->buf = ckpt_xmalloc(part_len(of, i));
            p->state = P_FILLING;
            note_held(o, part_len(of, i));
        } else if (p->state != P_FILLING) {
            pthread_mutex_unlock(&o->mu);
            return ckpt_err_set(err, CKPT_EIO, "%s: part %u written after "
                                "it was sent", of->display, i + 1);
        }
    }
    pthread_mutex_unlock(&o->mu);
    uint32_t *ready = ckpt_xcalloc(b - a + 1, sizeof(*ready));
    uint32_t nready = 0;
    for (uint32_t i = a; i <= b; i++) {
        uint64_t lo = (uint64_t)i * of->psize, hi = lo + part_len(of, i);
        uint64_t s = off > lo ? off : lo, e = off + n < hi ? off + n : hi;
        memcpy(of->parts[i].buf + (s - lo), (const char *)data + (s - off),
               (size_t)(e - s));
        pthread_mutex_lock(&o->mu);
        of->parts[i].filled += e - s;
        if (of->parts[i].filled == hi - lo) {
            of->parts[i].state = P_SENDING;
            ready[nready++] = i;
        }
        pthread_mutex_unlock(&o->mu);
    }
    /* Every part complete is sent (and freed), even after a failure. */
    int rc = 0;
    for (uint32_t k = 0; k < nready; k++) {
        struct ckpt_err e2;
        if (send_part(o, of, ready[k], rc == 0 ? err : &e2) != 0)
            rc = -1;
    }
    free(ready);
    return rc;
}

/* --- the memory gate --------------------------------------------------- */

void uns_outobj_tasks(struct ujob *j, uint64_t n)
{
    struct oobj *o = oo(j);
    pthread_mutex_lock(&o->mu);
    free(o->done);
    o->done = ckpt_xcalloc(n ? n : 1, 1);
    o->ntasks = n;
    o->low = 0;
    pthread_mutex_unlock(&o->mu);
}

int uns_outobj_reserve(struct ujob *j, struct ufile *f, uint64_t off,
                       uint64_t len, uint64_t seq)
{
    struct oobj *o = oo(j);
    struct ofile *of = f->out;
    uint32_t a, b;
    if (!len)
        return 0;
    part_range(of, off, len, &a, &b);
    pthread_mutex_lock(&o->mu);
    for (;;) {
        if (j->failed) {
            pthread_mutex_unlock(&o->mu);
            return -1;
        }
        uint64_t need = 0;
        for (uint32_t i = a; i <= b; i++)
            if (of->parts[i].state == P_EMPTY)
                need += part_len(of, i);
        if (!need || o->held + need <= o->budget || seq <= o->low)
            break;
        struct timespec ts;
        ckpt_deadline_in(&ts, 200000000L);
        pthread_cond_timedwait(&o->cv, &o->mu, &ts);
    }
    for (uint32_t i = a; i <= b; i++) {
        struct opart *p = &of->parts[i];
        if (p->state != P_EMPTY)
            continue;
        p->buf = ckpt_xmalloc(part_len(of, i));
        p->state = P_FILLING;
        note_held(o, part_len(of, i));
    }
    pthread_mutex_unlock(&o->mu);
    return 0;
}

void uns_outobj_done(struct ujob *j, uint64_t seq)
{
    struct oobj *o = oo(j);
    pthread_mutex_lock(&o->mu);
    if (seq < o->ntasks)
        o->done[seq] = 1;
    while (o->low < o->ntasks && o->done[o->low])
        o->low++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

void uns_outobj_wake(struct ujob *j)
{
    if (!j->dst.out || !j->dst.out->remote)
        return;
    struct oobj *o = oo(j);
    pthread_mutex_lock(&o->mu);
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

uint64_t uns_outobj_peak(const struct ujob *j)
{
    return j->dst.out && j->dst.out->remote
        ? ((struct oobj *)j->dst.out->impl)->peak : 0;
}

uint64_t uns_outobj_budget(const struct ujob *j)
{
    return ((const struct oobj *)j->dst.out->impl)->budget;
}

/* --- the output as a whole ------------------------------------------- */

static char *out_key(const struct oobj *o, const char *name)
{
    return *o->prefix ? ckpt_xasprintf("%s/%s", o->prefix, name)
                      : ckpt_xstrdup(name);
}

/* Unfinished uploads of our outputs left by a killed run go (services
 * that cannot list them, such as s3rver, keep them until their own
 * lifecycle rules drop them). */
struct stale {
    struct oobj *o;
    struct ujob *j;
};

static int abort_stale(void *ud, const char *key, const char *upload_id,
                       int64_t initiated)
{
    struct stale *s = ud;
    struct ckpt_err e;
    (void)initiated;
    for (size_t i = 0; i < s->o->nfiles; i++)
        if (!strcmp(s->o->files[i].key, key))
            ckpt_storage_mpu_abort(s->o->st, key, upload_id, &e);
    return 0;
}

static int obj_begin(struct ujob *j, struct ckpt_err *err)
{
    struct oobj *o = oo(j);
    o->nfiles = j->dst.nfiles;
    o->files = ckpt_xcalloc(j->dst.nfiles ? j->dst.nfiles : 1, sizeof(*o->files));
    /* As for a local DEST: an output replaces an object of its name,
     * never a "directory" (objects below name/). */
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        struct ofile *of = &o->files[i];
        struct ckpt_stat sb;
        struct ckpt_err e;
        of->key = out_key(o, j->dst.files[i].name);
        of->display = ckpt_storage_display(o->st, of->key);
        j->dst.files[i].out = of;
        if (ckpt_storage_stat(o->st, of->key, &sb, &e) == 0 &&
            sb.type == CKPT_ENTRY_DIR)
            return ckpt_err_set(err, CKPT_EEXIST, "'%s' is a directory: "
                                "not replaced by an output file",
                                of->display);
    }
    const char *note = "ckpt unshard is writing the outputs next to this "
                       "object; they are incomplete until it is gone\n";
    if (ckpt_storage_put(o->st, o->marker, note, strlen(note), err) != 0)
        return -1;
    struct stale s = { o, j };
    struct ckpt_err e;
    char *dir = ckpt_xasprintf("%s/", o->prefix);
    ckpt_storage_mpu_list(o->st, dir, abort_stale, &s, &e);
    free(dir);
    return 0;
}

/* Copy a whole source file (train.pt of OLMo steps, config.yaml) in. */
static int copy_in(struct ujob *j, struct ufile *f, struct usrc *s,
                   struct ckpt_err *err)
{
    char *buf = ckpt_xmalloc(COPY_PIECE);
    int rc = 0;
    for (uint64_t off = 0; rc == 0 && off < s->size; off += COPY_PIECE) {
        size_t n = s->size - off < COPY_PIECE ? (size_t)(s->size - off)
                                              : COPY_PIECE;
        rc = uns_src_read(s, off, buf, n, err);
        if (rc == 0)
            rc = obj_write(j, f, buf, n, off, err);
    }
    free(buf);
    return rc;
}

/* transient: the file is written whole and sent before the next one is
 * created (a copied file, a JSON file), so its buffer is never held with
 * the others'. */
static int start(struct oobj *o, struct ofile *of, uint64_t size,
                 int transient, struct ckpt_err *err)
{
    of->size = size;
    of->psize = part_size(o, size);
    of->nparts = (uint32_t)((size + of->psize - 1) / of->psize);
    if (of->nparts == 1 && !transient)
        o->whole += size;
    of->parts = ckpt_xcalloc(of->nparts ? of->nparts : 1,
                             sizeof(*of->parts));
    of->md5s = ckpt_xcalloc(of->nparts ? of->nparts : 1, sizeof(*of->md5s));
    of->created = 1;
    if (of->nparts <= 1)
        return 0;
    of->etags = ckpt_xcalloc(of->nparts, sizeof(*of->etags));
    return ckpt_storage_mpu_start(o->st, of->key, size, NULL,
                                  &of->upload_id, err);
}

static int obj_create(struct ujob *j, struct ufile *f, struct ckpt_err *err)
{
    struct oobj *o = oo(j);
    struct ofile *of = f->out;
    if (f->copy_from) {
        struct usrc s;
        if (uns_src_file_whole(j, f->copy_from, f->copy_local, &s,
                               err) != 0)
            return -1;
        f->size = s.size;
        int rc = start(o, of, s.size, 1, err);
        if (rc == 0)
            rc = copy_in(j, f, &s, err);
        if (s.fd >= 0)
            close(s.fd);
        return rc;
    }
    if (start(o, of, f->size, f->raw, err) != 0)
        return -1;
    /* JSON files, and safetensors headers: known already. */
    if (f->raw || j->o->format != CKPT_FORMAT_TORCH)
        return obj_write(j, f, f->head.ptr, f->head.len, 0, err);
    return 0;
}

/* The ETag the bytes sent must have: one PUT's is their MD5, a multipart
 * upload's the MD5 of its parts' MD5s, "-N". */
static void expected_sum(struct ofile *of)
{
    unsigned char d[16];
    unsigned dlen = 0;
    if (of->nparts == 0)
        EVP_Digest("", 0, d, &dlen, EVP_md5(), NULL);
    else if (!of->upload_id)
        memcpy(d, of->md5s[0], sizeof(d));
    else
        EVP_Digest(of->md5s, (size_t)of->nparts * sizeof(*of->md5s), d,
                   &dlen, EVP_md5(), NULL);
    ckpt_hex_encode(d, sizeof(d), of->sum);
    if (of->upload_id)
        snprintf(of->sum + 32, sizeof(of->sum) - 32, "-%u", of->nparts);
}

/* A store that states MD5 ETags of our form (one PUT: the MD5; multipart:
 * "-N") must state ours: else the object is not the bytes we sent. Some
 * (s3rver) state a plain MD5 for a multipart object, which cannot be
 * compared with the parts' hashes. */
static int check_etag(const struct ofile *of, struct ckpt_err *err)
{
    const char *e = of->etag;
    int multi = strchr(of->sum, '-') != NULL, emulti;
    if (!ckpt_etag_is_md5(e, &emulti) || emulti != multi ||
        !strcasecmp(e, of->sum))
        return 0;
    return ckpt_err_set(err, CKPT_EIO, "%s: the store states ETag %s, "
                        "but the bytes sent make %s", of->display, e,
                        of->sum);
}

static int finish_file(struct oobj *o, struct ofile *of, struct ckpt_err *err)
{
    struct ckpt_put_result res;
    if (of->nparts == 0) {
        unsigned char md5[16];
        unsigned mdlen = 0;
        EVP_Digest("", 0, md5, &mdlen, EVP_md5(), NULL);
        if (ckpt_storage_put_object(o->st, of->key, "", 0, md5, NULL, 0,
                                    &res, err) != 0)
            return -1;
        snprintf(of->etag, sizeof(of->etag), "%s", res.etag);
        expected_sum(of);
        return check_etag(of, err);
    }
    if (of->nsent != of->nparts)
        return ckpt_err_set(err, CKPT_EIO, "%s: %u of %u parts written",
                            of->display, of->nsent, of->nparts);
    if (!of->upload_id) {
        expected_sum(of);
        return check_etag(of, err);
    }
    expected_sum(of);   /* while upload_id says it was multipart */
    const char **etags = ckpt_xcalloc(of->nparts, sizeof(*etags));
    for (uint32_t i = 0; i < of->nparts; i++)
        etags[i] = of->etags[i];
    /* Complete, and the object is checked to have the planned size. */
    int rc = ckpt_storage_mpu_finish(o->st, of->key, of->upload_id,
                                     (int)of->nparts, etags, of->size, NULL,
                                     &res, err);
    free(etags);
    if (rc != 0)
        return -1;
    snprintf(of->etag, sizeof(of->etag), "%s", res.etag);
    free(of->upload_id);
    of->upload_id = NULL;
    return check_etag(of, err);
}

static int obj_close(struct ujob *j, struct ckpt_err *err)
{
    struct oobj *o = oo(j);
    for (size_t i = 0; i < o->nfiles; i++) {
        if (finish_file(o, &o->files[i], err) != 0)
            return -1;
        snprintf(j->dst.files[i].sum, sizeof(j->dst.files[i].sum), "%s",
                 o->files[i].sum);
        snprintf(j->dst.files[i].etag, sizeof(j->dst.files[i].etag), "%s",
                 o->files[i].etag);
    }
    return 0;
}

/* Every output complete (and verified): the marker goes, last. */
static int obj_commit(struct ujob *j, struct ckpt_err *err)
{
    struct oobj *o = oo(j);
    return ckpt_gate_delete(CKPT_GATE_OWN(CKPT_GATE_OWN_STATE, "the marker "
                                          "of an unfinished output"),
                            o->st, o->marker, err);
}

static void obj_abort(struct ujob *j)
{
    struct oobj *o = oo(j);
    struct ckpt_err e;
    for (size_t i = 0; i < o->nfiles; i++)
        if (o->files[i].upload_id)
            ckpt_storage_mpu_abort(o->st, o->files[i].key,
                                   o->files[i].upload_id, &e);
}

static void obj_release(struct ujob *j)
{
    struct oobj *o = oo(j);
    for (size_t i = 0; i < o->nfiles; i++) {
        struct ofile *of = &o->files[i];
        for (uint32_t p = 0; p < of->nparts && of->parts; p++)
            free(of->parts[p].buf);
        free(of->parts);
        free(of->etags);
        free(of->md5s);
        free(of->upload_id);
        free(of->key);
        free(of->display);
    }
    for (size_t i = 0; i < j->dst.nfiles; i++)
        j->dst.files[i].out = NULL;
    free(o->files);
    free(o->done);
    free(o->prefix);
    free(o->marker);
    free(o->display);
    if (o->st && !o->st_borrowed)
        ckpt_storage_close(o->st);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o);
}

void uns_outobj_reader(struct ujob *j, struct ufile *f, struct usrc *s)
{
    struct ofile *of = f->out;
    s->name = of->display;
    s->st = oo(j)->st;
    s->key = of->key;
    s->size = of->size;
    snprintf(s->etag, sizeof(s->etag), "%s", of->etag);
}

static const struct uns_out_ops obj_ops = {
    obj_begin, obj_create, obj_write, obj_close, obj_commit, obj_abort,
    obj_release,
};

int uns_outobj_open(struct ujob *j, const char *dest, struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct oobj *o = ckpt_xcalloc(1, sizeof(*o));
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->budget = j->o->memory ? j->o->memory : DEFAULT_MEMORY;
    o->rate = j->o->rate;
    j->dst.out = ckpt_xcalloc(1, sizeof(*j->dst.out));
    j->dst.out->ops = &obj_ops;
    j->dst.out->remote = 1;
    j->dst.out->impl = o;
    if (j->o->dest_storage) {   /* the caller's: dest is a key */
        o->st = j->o->dest_storage;
        o->st_borrowed = 1;
        o->prefix = ckpt_xstrdup(dest);
        size_t n = strlen(o->prefix);
        while (n && o->prefix[n - 1] == '/')
            o->prefix[--n] = '\0';
        o->display = ckpt_storage_display(o->st, o->prefix);
    } else {
        if (ckpt_loc_parse(&loc, dest, err) != 0)
            return -1;
        struct ckpt_storage_cfg cfg = uns_storage_cfg(j->o);
        int rc = ckpt_storage_open(&o->st, &loc, &cfg, err);
        o->prefix = ckpt_xstrdup(loc.key);
        o->display = ckpt_xstrdup(dest);
        ckpt_loc_release(&loc);
        if (rc != 0)
            return -1;
    }
    if (!*o->prefix)
        return ckpt_err_set(err, CKPT_EUSAGE, "'%s': DEST must name a "
                            "prefix inside the bucket", dest);
    o->marker = ckpt_xasprintf("%s-unfinished", o->prefix);
    struct ckpt_stat sb;
    struct ckpt_err e;
    if (ckpt_storage_stat(o->st, o->prefix, &sb, &e) == 0 &&
        sb.type == CKPT_ENTRY_FILE)
        return ckpt_err_set(err, CKPT_EEXIST, "'%s' exists and is not a "
                            "directory", dest);
    return 0;
}
