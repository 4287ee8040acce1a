/*
 * zdec_bz2.c - bzip2 decoded on all cores (zdec.h).
 *
 * A bzip2 stream is "BZh<level>", blocks that each start with the 48-bit
 * magic 0x314159265359 and the block's CRC, and an end-of-stream magic
 * 0x177245385090 with the stream's combined CRC; nothing is byte-aligned
 * after the header. Blocks are independent, so, as lbzip2 does, we scan
 * the compressed bits for the magics and give each block to a worker as a
 * standalone stream: "BZh<level>" + the block's bits + end-of-stream magic
 * + the block's CRC as the combined CRC, decoded by libbz2.
 *
 * A magic can occur inside compressed data by chance. libbz2 proves each
 * block: its CRC must match, and its decode must end exactly where the
 * next magic begins. A block that fails is retried merged with the next
 * candidate (the boundary between them was no boundary), up to the largest
 * size a block of that level can have; past that the data is corrupt. The
 * combined CRC of each stream is checked against its trailer. Several
 * streams in a row (lbzip2, pbzip2) are read on; bytes after the last
 * stream that do not start another one are left unread.
 *
 * Memory: at most `window` blocks (2 per worker) are in flight, each its
 * compressed bits (< 2.3 MB) and its output, capped at OUT_CAP: a block
 * that expands further (long runs) is left half-decoded and finished by
 * the reader, in order.
 */
#include "zdec.h"

#include <bzlib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/pool.h"
#include "ckpt/util.h"

#define BLOCK_MAGIC 0x314159265359ULL
#define EOS_MAGIC 0x177245385090ULL
#define OUT_CAP (4u << 20)
#define MAX_WORKERS 256

enum { J_BLOCK, J_EOS, J_END, J_FAIL };
enum { S_HEADER, S_BLOCKS, S_EOS, S_DONE };

struct job {
    int kind;
    uint64_t start, end;        /* BLOCK: bits [start, end) of the file */
    int level;
    uint32_t crc;               /* BLOCK: the block's; EOS: the stream's */
    uint64_t used;              /* EOS: byte offset after the stream */
    unsigned char *raw;         /* BLOCK: bytes start/8 .. (end+7)/8 */
    size_t rawlen;
    char msg[160];              /* FAIL, or why a block failed */
    struct zdec_bz2 *owner;
    /* Set by the worker. */
    int done;
    int rc;                     /* 0 whole, 1 partial (bs still open),
                                   -1 failed */
    unsigned char *src;         /* the standalone stream */
    bz_stream bs;
    int bs_open;
    unsigned char *out;
    size_t olen, ocap, opos;
};

struct zdec_bz2 {
    struct zdec_in *in;         /* borrowed from the zdec */
    struct ckpt_pool *pool;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job **q;             /* ring, in stream order */
    size_t qcap, qhead, qn;
    size_t window;
    /* Scanner. */
    int state, level, streams;
    uint64_t cur;               /* bit offset of the current block */
    uint64_t scan;              /* next bit to look for a magic at */
    uint64_t skip;              /* ignore candidates at or before this */
    uint64_t eos;               /* S_EOS: where the end magic is */
    char last_fail[128];        /* the last block failure, for the error */
    /* Reader. */
    uint32_t comb;              /* combined CRC of the stream so far */
    uint64_t used;
    int ended;
    char err[256];
};

/* ---- bits ---- */

/* Bits of the file [bit, bit+n) (n <= 57) as a number; the bytes must be
 * in the input buffer. */
static uint64_t bits_at(const struct zdec_in *in, uint64_t bit, int n)
{
    size_t i = (size_t)(bit / 8 - in->base);
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = v << 8 | (i + (size_t)k < in->len ? in->buf[i + (size_t)k] : 0);
    return (v << (bit % 8)) >> (64 - n);
}

/* Make the file's bytes up to (not including) byte `upto` available:
 * 1, 0 when the file is shorter, -1 on a read error. */
static int have(struct zdec_bz2 *b, uint64_t upto)
{
    struct zdec_in *in = b->in;
    while (in->base + in->len < upto) {
        int r = zdec_in_more(in, in->pos);
        if (r <= 0)
            return r;
    }
    return 1;
}

/* 16-bit windows (byte-aligned) that lie wholly inside a magic at some
 * bit shift: a magic at bit offset b covers full bytes b/8+1 ..
 * (b+48)/8-1, so the window at a multiple of 4 bytes inside that range
 * is in this table. */
static unsigned char pair_map[65536 / 8];
static pthread_once_t pair_once = PTHREAD_ONCE_INIT;

static void pair_init(void)
{
    const uint64_t m[2] = { BLOCK_MAGIC, EOS_MAGIC };
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < 8; s++) {
            uint64_t v = m[k] << (16 - s); /* magic at bit s of byte 0 */
            unsigned char by[8];
            for (int i = 0; i < 8; i++)
                by[i] = (unsigned char)(v >> (56 - 8 * i));
            for (int i = 0; i + 1 < 8; i++) {
                int lo = 8 * i, hi = 8 * i + 16;
                if (lo >= s && hi <= s + 48) {
                    unsigned w = (unsigned)by[i] << 8 | by[i + 1];
                    pair_map[w / 8] |= (unsigned char)(1u << (w % 8));
                }
            }
        }
}

/* The first magic at a bit >= from (and > b->skip), before bit limit:
 * 1 with *at and *eos set, 0 when none (up to limit or the end of the
 * file), -1 on a read error. */
static int find_magic(struct zdec_bz2 *b, uint64_t from, uint64_t limit,
                      uint64_t *at, int *eos)
{
    struct zdec_in *in = b->in;
    if (b->skip != UINT64_MAX && from <= b->skip)
        from = b->skip + 1;
    uint64_t end = in->base + in->len;
    for (uint64_t j = (from / 8) & ~(uint64_t)3; j * 8 < limit; j += 4) {
        if (j + 8 > end) {
            if (have(b, j + 8) < 0)
                return -1;
            end = in->base + in->len;
            if (j + 2 > end)
                return 0;
        }
        const unsigned char *p = in->buf + (j - in->base);
        unsigned w = (unsigned)p[0] << 8 | p[1];
        if (!(pair_map[w / 8] & (1u << (w % 8))))
            continue;
        /* Magics whose full bytes include j and j+1 start at bits
         * 8j-32 .. 8j. */
        uint64_t lo = j * 8 >= 32 ? j * 8 - 32 : 0;
        for (uint64_t bit = lo < from ? from : lo; bit <= j * 8; bit++) {
            if (bit >= limit || bit + 48 > end * 8)
                break;
            uint64_t v = bits_at(in, bit, 48);
            if (v == BLOCK_MAGIC || v == EOS_MAGIC) {
                *at = bit;
                *eos = v == EOS_MAGIC;
                return 1;
            }
        }
    }
    return 0;
}

/* ---- the worker: one block as a standalone stream ---- */

/* Test hooks: libbz2 only; blocks the fast decoder did. */
static int no_fast;
static _Atomic int fast_blocks;

struct bitw {
    unsigned char *p;
    uint64_t n;                 /* bits written */
};

static void put_bits(struct bitw *w, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        size_t byte = (size_t)(w->n / 8);
        int bit = 7 - (int)(w->n % 8);
        if (bit == 7)
            w->p[byte] = 0;
        if (v >> i & 1)
            w->p[byte] |= (unsigned char)(1u << bit);
        w->n++;
    }
}

static size_t build_src(struct job *j)
{
    uint64_t nbits = j->end - j->start;
    size_t nbytes = (size_t)((nbits + 7) / 8);
    j->src = ckpt_xmalloc(4 + nbytes + 12);
    memcpy(j->src, "BZh", 3);
    j->src[3] = (unsigned char)('0' + j->level);
    int sh = (int)(j->start % 8);
    unsigned char *d = j->src + 4;
    for (size_t k = 0; k < nbytes; k++) {
        unsigned v = (unsigned)j->raw[k] << sh;
        if (sh && k + 1 < j->rawlen)
            v |= j->raw[k + 1] >> (8 - sh);
        d[k] = (unsigned char)v;
    }
    /* Cut at nbits, then the end of the stream. */
    struct bitw w = { j->src, 32 + nbits };
    if (nbits % 8)
        d[nbytes - 1] &= (unsigned char)(0xFF00u >> (nbits % 8));
    /* put_bits zeroes a byte when it starts one; the partial byte keeps
     * its leading bits. */
    put_bits(&w, EOS_MAGIC, 48);
    put_bits(&w, j->crc, 32);
    return (size_t)((w.n + 7) / 8);
}

/* Decode into j->out until it is full (1: partial), the stream ends where
 * it must (0), or it fails (-1, j->msg). */
static int decode_some(struct job *j)
{
    for (;;) {
        if (j->olen == j->ocap) {
            if (j->ocap >= OUT_CAP)
                return 1;
            j->ocap = j->ocap * 2 < OUT_CAP ? j->ocap * 2 : OUT_CAP;
            j->out = ckpt_xrealloc(j->out, j->ocap);
        }
        j->bs.next_out = (char *)j->out + j->olen;
        j->bs.avail_out = (unsigned)(j->ocap - j->olen);
        unsigned before = j->bs.avail_out;
        int rc = BZ2_bzDecompress(&j->bs);
        j->olen += before - j->bs.avail_out;
        if (rc == BZ_STREAM_END) {
            if (j->bs.avail_in) {
                snprintf(j->msg, sizeof(j->msg), "block ended early");
                return -1;
            }
            return 0;
        }
        if (rc != BZ_OK) {
            snprintf(j->msg, sizeof(j->msg), "%s",
                     rc == BZ_DATA_ERROR ? "CRC mismatch or corrupt data"
                     : rc == BZ_MEM_ERROR ? "out of memory"
                     : "corrupt data");
            return -1;
        }
        if (j->bs.avail_out && !j->bs.avail_in) {
            snprintf(j->msg, sizeof(j->msg), "block cut short");
            return -1;
        }
    }
}

static void job_decode(void *arg)
{
    struct job *j = arg;
    struct zdec_bz2 *b = j->owner;
    int rc = -1;
    j->ocap = 0;
    if (!no_fast && zdec_bz2blk_decode(j->raw, j->start % 8,
                                       j->end - j->start, j->level, &j->out,
                                       &j->olen, &j->ocap, OUT_CAP) == 0) {
        fast_blocks++;
        rc = 0;
        goto done;
    }
    j->olen = 0;
    size_t n = build_src(j);
    memset(&j->bs, 0, sizeof(j->bs));
    if (BZ2_bzDecompressInit(&j->bs, 0, 0) == BZ_OK) {
        j->bs_open = 1;
        j->bs.next_in = (char *)j->src;
        j->bs.avail_in = (unsigned)n;
        j->ocap = (size_t)j->level * 100000 + 4096;
        j->out = ckpt_xrealloc(j->out, j->ocap);
        rc = decode_some(j);
    } else {
        snprintf(j->msg, sizeof(j->msg), "out of memory");
    }
    if (rc != 1 && j->bs_open) {
        BZ2_bzDecompressEnd(&j->bs);
        j->bs_open = 0;
    }
done:
    pthread_mutex_lock(&b->mu);
    j->rc = rc;
    j->done = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void job_free(struct job *j)
{
    if (!j)
        return;
    if (j->bs_open)
        BZ2_bzDecompressEnd(&j->bs);
    free(j->raw);
    free(j->src);
    free(j->out);
    free(j);
}

/* ---- the scanner: cut the input into jobs, in order ---- */

static void push(struct zdec_bz2 *b, struct job *j)
{
    if (b->qn == b->qcap) {
        size_t nc = b->qcap ? b->qcap * 2 : 16;
        struct job **q = ckpt_xcalloc(nc, sizeof(*q));
        for (size_t i = 0; i < b->qn; i++)
            q[i] = b->q[(b->qhead + i) % b->qcap];
        free(b->q);
        b->q = q;
        b->qcap = nc;
        b->qhead = 0;
    }
    b->q[(b->qhead + b->qn++) % b->qcap] = j;
}

static struct job *new_job(int kind)
{
    struct job *j = ckpt_xcalloc(1, sizeof(*j));
    j->kind = kind;
    return j;
}

static struct job *fail_job(const char *msg)
{
    struct job *j = new_job(J_FAIL);
    snprintf(j->msg, sizeof(j->msg), "%s", msg);
    j->done = 1;
    return j;
}

#define TRUNCATED "truncated bzip2 input"

/* Test hook: report a false boundary inside each block first. */
static int fake_boundaries;
static _Atomic int retries;

int zdec_bz2_test_libbz2_only(int on)
{
    no_fast = on;
    return atomic_exchange(&fast_blocks, 0);
}

int zdec_bz2_test_fake_boundaries(int on)
{
    fake_boundaries = on;
    return atomic_exchange(&retries, 0);
}

static uint64_t max_block_bits(int level)
{
    /* 100k symbols per level, Huffman codes of at most 20 bits, tables. */
    return ((uint64_t)level * 250000 + 65536) * 8;
}

/* Where a stream may start (byte offset at): "BZh1".."BZh9" followed by
 * a block or end magic. 1 yes, 0 no, -1 read error. */
static int stream_at(struct zdec_bz2 *b, uint64_t at)
{
    int r = have(b, at + 10);
    if (r < 0)
        return -1;
    struct zdec_in *in = b->in;
    if (in->base + in->len < at + 10)
        return 0;
    const unsigned char *p = in->buf + (at - in->base);
    if (memcmp(p, "BZh", 3) || p[3] < '1' || p[3] > '9')
        return 0;
    uint64_t v = bits_at(in, (at + 4) * 8, 48);
    return v == BLOCK_MAGIC || v == EOS_MAGIC;
}

/* Copy the bytes of a block's bits into the job. */
static void take_raw(struct zdec_bz2 *b, struct job *j)
{
    uint64_t lo = j->start / 8, hi = (j->end + 7) / 8;
    j->rawlen = (size_t)(hi - lo);
    /* Zero padding: zdec_bz2blk_decode reads 8 bytes at a time. */
    j->raw = ckpt_xmalloc(j->rawlen + 8);
    memcpy(j->raw, b->in->buf + (lo - b->in->base), j->rawlen);
    memset(j->raw + j->rawlen, 0, 8);
}

/* The next job, or NULL on a read error. */
static struct job *scan_one(struct zdec_bz2 *b)
{
    if (b->state == S_HEADER) {
        uint64_t at = b->scan / 8;
        int r = stream_at(b, at);
        if (r < 0)
            return NULL;
        if (r == 0) {
            b->state = S_DONE;
            if (!b->streams)
                return fail_job("not a bzip2 stream");
            struct job *j = new_job(J_END);
            j->used = at;
            j->done = 1;
            return j;
        }
        b->streams++;
        b->level = b->in->buf[at + 3 - b->in->base] - '0';
        b->cur = (at + 4) * 8;
        b->skip = UINT64_MAX;
        if (bits_at(b->in, b->cur, 48) == EOS_MAGIC) {
            b->eos = b->cur;
            b->state = S_EOS;
        } else {
            b->state = S_BLOCKS;
            b->scan = b->cur + 48;
        }
    }
    if (b->state == S_EOS) {
        uint64_t end = b->eos + 80;
        int r = have(b, (end + 7) / 8);
        if (r < 0)
            return NULL;
        if (r == 0) {
            b->state = S_DONE;
            return fail_job(TRUNCATED);
        }
        struct job *j = new_job(J_EOS);
        j->crc = (uint32_t)bits_at(b->in, b->eos + 48, 32);
        j->used = (end + 7) / 8;
        j->done = 1;
        b->state = S_HEADER;
        b->scan = j->used * 8;
        return j;
    }
    /* S_BLOCKS: the current block runs to the next magic. */
    uint64_t at = 0, limit = b->cur + max_block_bits(b->level);
    int eos = 0;
    int r = find_magic(b, b->scan, limit, &at, &eos);
    if (r < 0)
        return NULL;
    if (r == 0) {
        b->state = S_DONE;
        char m[200];
        r = have(b, limit / 8);
        if (r < 0)
            return NULL;
        if (b->last_fail[0])
            snprintf(m, sizeof(m), "bzip2 data is corrupt (%s, block at "
                     "byte %llu)", b->last_fail,
                     (unsigned long long)(b->cur / 8));
        else if (r == 1)
            snprintf(m, sizeof(m), "bzip2 data is corrupt (no block end "
                     "within %llu bytes)",
                     (unsigned long long)(max_block_bits(b->level) / 8));
        else
            snprintf(m, sizeof(m), TRUNCATED);
        return fail_job(m);
    }
    int fresh = b->skip == UINT64_MAX || b->skip < b->cur;
    if (fake_boundaries && !eos && fresh && at > b->cur + 2048)
        at = b->cur + 1024; /* the test hook's false boundary */
    struct job *j = new_job(J_BLOCK);
    j->start = b->cur;
    j->end = at;
    j->level = b->level;
    j->crc = (uint32_t)bits_at(b->in, b->cur + 48, 32);
    take_raw(b, j);
    if (eos) {
        b->eos = at;
        b->state = S_EOS;
    } else {
        b->cur = at;
        b->scan = at + 48;
    }
    return j;
}

static void submit(struct zdec_bz2 *b, struct job *j)
{
    push(b, j);
    if (j->kind != J_BLOCK)
        return;
    j->owner = b;
    ckpt_pool_submit(b->pool, job_decode, j);
}

/* Keep only the input that a retry could need: from the oldest queued
 * block (or the scanner's position) on. */
static void trim_input(struct zdec_bz2 *b)
{
    uint64_t keep = b->state == S_BLOCKS ? b->cur / 8
                  : b->state == S_EOS ? b->eos / 8 : b->scan / 8;
    for (size_t i = 0; i < b->qn; i++) {
        struct job *j = b->q[(b->qhead + i) % b->qcap];
        if (j->kind == J_BLOCK && j->start / 8 < keep)
            keep = j->start / 8;
    }
    if (keep > b->in->base + b->in->pos && keep <= b->in->base + b->in->len)
        b->in->pos = (size_t)(keep - b->in->base);
}

static int fill(struct zdec_bz2 *b)
{
    while (b->qn < b->window && b->state != S_DONE) {
        trim_input(b);
        struct job *j = scan_one(b);
        if (!j)
            return -1;
        submit(b, j);
    }
    return 0;
}

/* ---- the reader ---- */

static void set_err(struct zdec_bz2 *b, const char *m)
{
    if (!b->err[0])
        snprintf(b->err, sizeof(b->err), "%s", m);
}

static struct job *pop(struct zdec_bz2 *b)
{
    struct job *j = b->q[b->qhead];
    b->qhead = (b->qhead + 1) % b->qcap;
    b->qn--;
    return j;
}

/* Block j failed: drop what was scanned after it and scan again from its
 * start, past the boundary that proved false. */
static void retry(struct zdec_bz2 *b, struct job *j)
{
    ckpt_pool_wait(b->pool);
    retries++;
    snprintf(b->last_fail, sizeof(b->last_fail), "%s", j->msg);
    uint64_t start = j->start, end = j->end;
    int level = j->level;
    while (b->qn)
        job_free(pop(b));
    b->state = S_BLOCKS;
    b->level = level;
    b->cur = start;
    b->scan = start + 48;
    b->skip = end;
}

ssize_t zdec_bz2_read(struct zdec_bz2 *b, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len && !b->err[0] && !b->ended) {
        if (fill(b) != 0)
            break;
        if (!b->qn)
            break;
        struct job *j = b->q[b->qhead];
        pthread_mutex_lock(&b->mu);
        while (!j->done)
            pthread_cond_wait(&b->cv, &b->mu);
        pthread_mutex_unlock(&b->mu);
        if (j->kind == J_FAIL) {
            set_err(b, j->msg);
            break;
        }
        if (j->kind == J_END) {
            b->ended = 1;
            b->used = j->used;
            break;
        }
        if (j->kind == J_EOS) {
            if (j->crc != b->comb) {
                set_err(b, "bzip2 stream CRC mismatch");
                break;
            }
            b->comb = 0;
            b->used = j->used;
            job_free(pop(b));
            continue;
        }
        if (j->rc < 0 && !j->opos) {
            retry(b, j);
            continue;
        }
        size_t n = j->olen - j->opos;
        if (n > len - got)
            n = len - got;
        memcpy((char *)buf + got, j->out + j->opos, n);
        got += n;
        j->opos += n;
        if (j->opos < j->olen)
            continue;
        if (j->rc == 1) {
            /* A long block: go on decoding it here. */
            j->olen = j->opos = 0;
            j->rc = decode_some(j);
            if (j->rc < 0) {
                char m[200];
                snprintf(m, sizeof(m), "bzip2 data is corrupt (%s, block "
                         "at byte %llu)", j->msg,
                         (unsigned long long)(j->start / 8));
                set_err(b, m);
            }
            continue;
        }
        if (j->rc < 0) {
            set_err(b, "bzip2 data is corrupt");
            continue;
        }
        b->comb = (b->comb << 1 | b->comb >> 31) ^ j->crc;
        b->last_fail[0] = '\0';
        job_free(pop(b));
    }
    if (got)
        return (ssize_t)got;
    return b->err[0] || b->in->io_failed ? -1 : 0;
}

struct zdec_bz2 *zdec_bz2_open(struct zdec_in *in, int threads)
{
    pthread_once(&pair_once, pair_init);
    if (threads < 1)
        threads = 1;
    if (threads > MAX_WORKERS)
        threads = MAX_WORKERS;
    struct zdec_bz2 *b = ckpt_xcalloc(1, sizeof(*b));
    b->in = in;
    b->window = 2 * (size_t)threads;
    b->pool = ckpt_pool_new(threads, b->window + 1);
    if (!b->pool) {
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->state = S_HEADER;
    b->skip = UINT64_MAX;
    return b;
}

const char *zdec_bz2_error(const struct zdec_bz2 *b)
{
    return b->err[0] ? b->err : "decompression failed";
}

int zdec_bz2_failed(const struct zdec_bz2 *b)
{
    return b->err[0] != '\0';
}

uint64_t zdec_bz2_in_used(const struct zdec_bz2 *b)
{
    return b->used;
}

void zdec_bz2_close(struct zdec_bz2 *b)
{
    if (!b)
        return;
    ckpt_pool_free(b->pool);
    while (b->qn)
        job_free(pop(b));
    free(b->q);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}
