/*
 * test_zahead - decode ahead (src/archive/zahead.c): the thread decodes
 * before it is asked, the blocks come in order with the two taken last
 * intact, a decoder error and a read failure arrive after exactly the
 * bytes a plain zdec_read loop gives (with the same message), and closing
 * at any point (before the first block, with the ring full, mid-stream)
 * neither hangs nor leaks.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "archive/zahead.h"
#include "archive/zdec.h"
#include "ckpt/buf.h"
#include "ckpt/util.h"
#include "test.h"

#define BLOCK (256u << 10)
#define SLOTS 8
#define PIECE (64u << 10)

/* The compressed input, handed out PIECE bytes a call; fail_at > 0 makes
 * call number fail_at fail. Counts the calls for the test's thread. */
struct src {
    const unsigned char *p;
    size_t len, pos;
    int calls, fail_at;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static int rd(void *ud, void *dst, size_t cap, size_t *got)
{
    struct src *s = ud;
    pthread_mutex_lock(&s->mu);
    int call = ++s->calls;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->fail_at && call >= s->fail_at)
        return -1;
    size_t n = s->len - s->pos < PIECE ? s->len - s->pos : PIECE;
    if (n > cap)
        n = cap;
    memcpy(dst, s->p + s->pos, n);
    *got = n;
    s->pos += n;
    return 0;
}

static void src_init(struct src *s, const struct ckpt_buf *z, int fail_at)
{
    memset(s, 0, sizeof(*s));
    s->p = (const unsigned char *)z->ptr;
    s->len = z->len;
    s->fail_at = fail_at;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static void src_done(struct src *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

/* Wait (at most 60 s, for a loaded box) until the source was read n
 * times: 1 if it was. */
static int wait_calls(struct src *s, int n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (s->calls < n && rc == 0)
        rc = pthread_cond_timedwait(&s->cv, &s->mu, &until);
    int ok = s->calls >= n;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* frames x 1 MiB of incompressible bytes (so that input and output
 * advance alike), one zstd frame each, with checksums. */
static void make(struct ckpt_buf *plain, struct ckpt_buf *z, int frames)
{
    ckpt_buf_init(plain);
    ckpt_buf_init(z);
    uint64_t x = 88172645463325252ull;
    for (int f = 0; f < frames; f++) {
        size_t at = plain->len;
        for (size_t i = 0; i < (1u << 20); i += 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ckpt_buf_add(plain, &x, 8);
        }
        ZSTD_CCtx *c = ZSTD_createCCtx();
        ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
        size_t cap = ZSTD_compressBound(1u << 20);
        char *out = ckpt_xmalloc(cap);
        size_t n = ZSTD_compress2(c, out, cap, plain->ptr + at, 1u << 20);
        CHECK(!ZSTD_isError(n));
        ckpt_buf_add(z, out, n);
        free(out);
        ZSTD_freeCCtx(c);
    }
}

/* What a plain zdec_read loop (the reader before zahead) gives. */
struct outcome {
    struct ckpt_buf data;
    int rc;
    int failed, io_failed;
    char err[256];
};

static struct outcome plain_read(const struct ckpt_buf *z, int fail_at)
{
    struct outcome o = { CKPT_BUF_INIT, 0, 0, 0, "" };
    struct src s;
    src_init(&s, z, fail_at);
    struct zdec *d = zdec_open(CKPT_ARCHIVE_TAR_ZST, 1, rd, &s);
    char *b = ckpt_xmalloc(BLOCK);
    ssize_t n;
    while ((n = zdec_read(d, b, BLOCK)) > 0)
        ckpt_buf_add(&o.data, b, (size_t)n);
    o.rc = (int)n;
    o.failed = zdec_failed(d);
    o.io_failed = zdec_io_failed(d);
    if (n < 0)
        snprintf(o.err, sizeof(o.err), "%s", zdec_error(d));
    free(b);
    zdec_close(d);
    src_done(&s);
    return o;
}

static struct outcome ahead_read(const struct ckpt_buf *z, int fail_at)
{
    struct outcome o = { CKPT_BUF_INIT, 0, 0, 0, "" };
    struct src s;
    src_init(&s, z, fail_at);
    struct zdec *d = zdec_open(CKPT_ARCHIVE_TAR_ZST, 1, rd, &s);
    struct zahead *h = zahead_open(d, BLOCK, SLOTS);
    char *blk, *prev = NULL;
    size_t prev_len = 0, prev_at = 0;
    ssize_t n;
    while ((n = zahead_next(h, &blk)) > 0) {
        /* The block taken before stays as it was. */
        if (prev)
            CHECK(memcmp(prev, o.data.ptr + prev_at, prev_len) == 0);
        prev = blk;
        prev_at = o.data.len;
        prev_len = (size_t)n;
        ckpt_buf_add(&o.data, blk, (size_t)n);
    }
    o.rc = (int)n;
    o.failed = zahead_failed(h);
    o.io_failed = zahead_io_failed(h);
    if (n < 0)
        snprintf(o.err, sizeof(o.err), "%s", zahead_error(h));
    /* The end and an error stay. */
    CHECK_EQ(zahead_next(h, &blk), n);
    zahead_close(h);
    zdec_close(d);
    src_done(&s);
    return o;
}

static void same(struct outcome *a, struct outcome *b)
{
    CHECK_EQ(a->data.len, b->data.len);
    CHECK(a->data.len == b->data.len &&
          memcmp(a->data.ptr, b->data.ptr, a->data.len) == 0);
    CHECK_EQ(a->rc, b->rc);
    CHECK_EQ(a->failed, b->failed);
    CHECK_EQ(a->io_failed, b->io_failed);
    CHECK_STR(a->err, b->err);
    ckpt_buf_release(&a->data);
    ckpt_buf_release(&b->data);
}

/* Nothing asked yet: the thread reads and decodes ahead, until the ring
 * is full (6 blocks of 256 KiB ahead = 24 pieces), and no further. */
static void test_zahead__ahead(void)
{
    struct ckpt_buf plain, z;
    make(&plain, &z, 4);
    struct src s;
    src_init(&s, &z, 0);
    struct zdec *d = zdec_open(CKPT_ARCHIVE_TAR_ZST, 1, rd, &s);
    struct zahead *h = zahead_open(d, BLOCK, SLOTS);
    CHECK(wait_calls(&s, 20));
    char *blk;
    size_t at = 0;
    ssize_t n;
    while ((n = zahead_next(h, &blk)) > 0) {
        CHECK(at + (size_t)n <= plain.len &&
              memcmp(blk, plain.ptr + at, (size_t)n) == 0);
        at += (size_t)n;
    }
    CHECK_EQ(n, 0);
    CHECK_EQ(at, plain.len);
    CHECK_EQ(zdec_in_used(d), (uint64_t)z.len);
    zahead_close(h);
    zdec_close(d);
    src_done(&s);
    ckpt_buf_release(&plain);
    ckpt_buf_release(&z);
}

/* A frame's checksum broken in the middle of the stream: the same bytes,
 * then the same error, as without the thread. */
static void test_zahead__corrupt_midway(void)
{
    struct ckpt_buf plain, z;
    make(&plain, &z, 4);
    /* The second frame's checksum: its last 4 bytes. */
    size_t f1 = ZSTD_findFrameCompressedSize(z.ptr, z.len);
    size_t f2 = ZSTD_findFrameCompressedSize(z.ptr + f1, z.len - f1);
    z.ptr[f1 + f2 - 1] ^= 0x55;
    struct outcome a = plain_read(&z, 0), b = ahead_read(&z, 0);
    CHECK_EQ(a.rc, -1);
    CHECK_EQ(a.failed, 1);
    CHECK_STR(a.err, "zstd data is corrupt (Restored data doesn't match "
                     "checksum)");
    CHECK(a.data.len >= (1u << 20) && a.data.len <= (2u << 20));
    same(&a, &b);
    ckpt_buf_release(&plain);
    ckpt_buf_release(&z);
}

/* Reading the input fails at its 30th piece (mid-stream): the same bytes
 * before it, then a read failure, not bad data. */
static void test_zahead__io_error(void)
{
    struct ckpt_buf plain, z;
    make(&plain, &z, 4);
    struct outcome a = plain_read(&z, 30), b = ahead_read(&z, 30);
    CHECK_EQ(a.rc, -1);
    CHECK_EQ(a.io_failed, 1);
    CHECK_EQ(a.failed, 0);
    same(&a, &b);
    ckpt_buf_release(&plain);
    ckpt_buf_release(&z);
}

/* A reader that stops early: close before the first block, with the ring
 * full, and after some blocks; the thread stops, nothing leaks (ASan). */
static void test_zahead__early_close(void)
{
    struct ckpt_buf plain, z;
    make(&plain, &z, 4);
    for (int take = 0; take < 4; take++) {
        struct src s;
        src_init(&s, &z, 0);
        struct zdec *d = zdec_open(CKPT_ARCHIVE_TAR_ZST, 1, rd, &s);
        struct zahead *h = zahead_open(d, BLOCK, SLOTS);
        if (take == 1)
            CHECK(wait_calls(&s, 24)); /* the ring is full now */
        char *blk;
        for (int i = 0; i < take * 3; i++)
            CHECK(zahead_next(h, &blk) > 0);
        zahead_close(h);
        zdec_close(d);
        src_done(&s);
    }
    ckpt_buf_release(&plain);
    ckpt_buf_release(&z);
}

TEST_MAIN(T(test_zahead__ahead), T(test_zahead__corrupt_midway),
          T(test_zahead__io_error), T(test_zahead__early_close))
