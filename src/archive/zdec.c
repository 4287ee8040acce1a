/*
 * zdec.c - gzip, xz and zstd decoders and the compressed input they share
 * (zdec.h). bzip2 lives in zdec_bz2.c.
 */
#include "zdec.h"

#include <lzma.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#ifdef CKPT_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#else
#include <zlib.h>
#endif

#include "ckpt/util.h"

/* liblzma's threaded decoder keeps each thread's block whole in memory
 * (xz -T0 -6 writes 24 MiB blocks: ~55 MiB a thread with the dictionary
 * and the compressed block): past threads x this it decodes on fewer
 * threads (never fails). */
#define XZ_MEM_PER_THREAD (64ull << 20)
#define XZ_MEM_MAX (1ull << 30)
#define GZ_CHECKSUM "gzip checksum mismatch (CRC-32 or length in the " \
                    "trailer does not match the data)"

struct zdec {
    enum ckpt_archive_kind kind;
    struct zdec_in in;
    char err[256];
    int failed;                 /* err is set; returned by the next read */
    int ended;                  /* the last stream ended */
    uint64_t used;              /* input offset where the last stream ended */
#ifdef CKPT_HAVE_ISAL
    struct inflate_state *gz;
#else
    z_stream gz;
#endif
    int gz_open;                /* inside a gzip member */
    lzma_stream xz;
    int xz_open;
    ZSTD_DStream *zs;
    int zs_open;                /* inside a zstd frame */
    struct zdec_bz2 *bz;
};

static void fail(struct zdec *z, const char *fmt, ...) CKPT_PRINTF(2, 3);
static void fail(struct zdec *z, const char *fmt, ...)
{
    if (z->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(z->err, sizeof(z->err), fmt, ap);
    va_end(ap);
    z->failed = 1;
}

static uint64_t in_off(const struct zdec *z)
{
    return z->in.base + z->in.pos;
}

/* Between members/frames: does another one start here? 1 yes, 0 the
 * stream ended (nothing, or bytes that are not one), -1 read error. */
static int next_member(struct zdec *z, const unsigned char *magic, size_t n)
{
    int r = zdec_in_need(&z->in, n);
    if (r < 0)
        return -1;
    return r == 1 && !memcmp(z->in.buf + z->in.pos, magic, n);
}

/* ---- gzip ---- */

#ifdef CKPT_HAVE_ISAL
static void gz_start(struct zdec *z)
{
    isal_inflate_init(z->gz);
    z->gz->crc_flag = ISAL_GZIP;
    z->gz_open = 1;
}

/* One step of inflate: 1 progress, 0 member ended, -1 error. */
static int gz_step(struct zdec *z, unsigned char **out, size_t *left)
{
    struct inflate_state *s = z->gz;
    size_t avail = z->in.len - z->in.pos;
    s->next_in = z->in.buf + z->in.pos;
    s->avail_in = avail > UINT32_MAX ? UINT32_MAX : (uint32_t)avail;
    s->next_out = *out;
    s->avail_out = *left > UINT32_MAX ? UINT32_MAX : (uint32_t)*left;
    uint32_t before_in = s->avail_in, before_out = s->avail_out;
    int rc = isal_inflate(s);
    z->in.pos += before_in - s->avail_in;
    *out += before_out - s->avail_out;
    *left -= before_out - s->avail_out;
    if (rc == ISAL_INCORRECT_CHECKSUM) {
        fail(z, GZ_CHECKSUM);
        return -1;
    }
    if (rc != ISAL_DECOMP_OK) {
        fail(z, "gzip data is corrupt (inflate error %d)", rc);
        return -1;
    }
    return s->block_state == ISAL_BLOCK_FINISH ? 0 : 1;
}
#else
static void gz_start(struct zdec *z)
{
    if (z->gz_open == 0 && z->gz.state == NULL)
        inflateInit2(&z->gz, 16 + MAX_WBITS);
    else
        inflateReset(&z->gz);
    z->gz_open = 1;
}

static int gz_step(struct zdec *z, unsigned char **out, size_t *left)
{
    z_stream *s = &z->gz;
    size_t avail = z->in.len - z->in.pos;
    s->next_in = z->in.buf + z->in.pos;
    s->avail_in = avail > UINT32_MAX ? UINT32_MAX : (uInt)avail;
    s->next_out = *out;
    s->avail_out = *left > UINT32_MAX ? UINT32_MAX : (uInt)*left;
    uInt before_in = s->avail_in, before_out = s->avail_out;
    int rc = inflate(s, Z_NO_FLUSH);
    z->in.pos += before_in - s->avail_in;
    *out += before_out - s->avail_out;
    *left -= before_out - s->avail_out;
    if (rc == Z_STREAM_END)
        return 0;
    if (rc == Z_OK || rc == Z_BUF_ERROR)
        return 1;
    if (s->msg && strstr(s->msg, "check"))
        fail(z, GZ_CHECKSUM);
    else
        fail(z, "gzip data is corrupt (%s)", s->msg ? s->msg : "inflate");
    return -1;
}
#endif

static const unsigned char gz_magic[] = { 0x1f, 0x8b };

static ssize_t gz_read(struct zdec *z, unsigned char *out, size_t len)
{
    unsigned char *p = out;
    size_t left = len;
    while (left && !z->failed && !z->ended) {
        if (!z->gz_open) {
            int r = next_member(z, gz_magic, sizeof(gz_magic));
            if (r < 0)
                break;
            if (r == 0) {
                z->ended = 1;
                break;
            }
            gz_start(z);
        }
        if (z->in.pos == z->in.len) {
            int r = zdec_in_more(&z->in, z->in.pos);
            if (r < 0)
                break;
            if (r == 0) {
                fail(z, "truncated gzip input");
                break;
            }
        }
        int r = gz_step(z, &p, &left);
        if (r == 0) {
            z->gz_open = 0;
            z->used = in_off(z);
        }
    }
    return (ssize_t)(len - left);
}

/* ---- xz ---- */

static int xz_start(struct zdec *z, int threads)
{
    lzma_mt mt = { 0 };
    mt.flags = LZMA_CONCATENATED;
    mt.threads = threads > 0 ? (uint32_t)threads : 1;
    mt.memlimit_threading = mt.threads * XZ_MEM_PER_THREAD < XZ_MEM_MAX
                          ? mt.threads * XZ_MEM_PER_THREAD : XZ_MEM_MAX;
    mt.memlimit_stop = UINT64_MAX;
    z->xz = (lzma_stream)LZMA_STREAM_INIT;
    if (lzma_stream_decoder_mt(&z->xz, &mt) != LZMA_OK)
        return -1;
    z->xz_open = 1;
    return 0;
}

static const char *xz_msg(lzma_ret rc)
{
    switch (rc) {
    case LZMA_FORMAT_ERROR: return "not an xz stream (or data after it)";
    case LZMA_DATA_ERROR: return "xz data is corrupt";
    case LZMA_BUF_ERROR: return "truncated xz input";
    case LZMA_MEM_ERROR: return "out of memory";
    case LZMA_OPTIONS_ERROR: return "unsupported xz options";
    case LZMA_UNSUPPORTED_CHECK: return "unsupported xz integrity check";
    default: return "xz decompression failed";
    }
}

static ssize_t xz_read(struct zdec *z, unsigned char *out, size_t len)
{
    lzma_stream *s = &z->xz;
    s->next_out = out;
    s->avail_out = len;
    while (s->avail_out && !z->failed && !z->ended) {
        lzma_action act = LZMA_RUN;
        if (z->in.pos == z->in.len) {
            int r = zdec_in_more(&z->in, z->in.pos);
            if (r < 0)
                break;
            if (r == 0)
                act = LZMA_FINISH;
        }
        s->next_in = z->in.buf + z->in.pos;
        s->avail_in = z->in.len - z->in.pos;
        lzma_ret rc = lzma_code(s, act);
        z->in.pos = (size_t)(s->next_in - z->in.buf);
        if (rc == LZMA_STREAM_END) {
            z->ended = 1;
            z->used = in_off(z);
        } else if (rc != LZMA_OK) {
            fail(z, "%s", xz_msg(rc));
        }
    }
    return (ssize_t)(len - s->avail_out);
}

/* ---- zstd ---- */

/* A zstd frame or a skippable frame starts here. */
static int zs_next(struct zdec *z)
{
    int r = zdec_in_need(&z->in, 4);
    if (r <= 0)
        return r;
    const unsigned char *p = z->in.buf + z->in.pos;
    uint32_t m = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
               | (uint32_t)p[3] << 24;
    return m == 0xFD2FB528u || (m & 0xFFFFFFF0u) == 0x184D2A50u;
}

static ssize_t zs_read(struct zdec *z, unsigned char *out, size_t len)
{
    ZSTD_outBuffer ob = { out, len, 0 };
    while (ob.pos < ob.size && !z->failed && !z->ended) {
        if (!z->zs_open) {
            int r = zs_next(z);
            if (r < 0)
                break;
            if (r == 0) {
                z->ended = 1;
                break;
            }
            z->zs_open = 1;
        }
        if (z->in.pos == z->in.len) {
            int r = zdec_in_more(&z->in, z->in.pos);
            if (r < 0)
                break;
            if (r == 0) {
                fail(z, "truncated zstd input");
                break;
            }
        }
        ZSTD_inBuffer ib = { z->in.buf, z->in.len, z->in.pos };
        size_t rc = ZSTD_decompressStream(z->zs, &ob, &ib);
        z->in.pos = ib.pos;
        if (ZSTD_isError(rc)) {
            fail(z, "zstd data is corrupt (%s)", ZSTD_getErrorName(rc));
        } else if (rc == 0) {
            z->zs_open = 0;
            z->used = in_off(z);
        }
    }
    return (ssize_t)ob.pos;
}

/* ---- the decoder ---- */

struct zdec *zdec_open(enum ckpt_archive_kind kind, int threads,
                       zdec_read_fn rd, void *ud)
{
    struct zdec *z = ckpt_xcalloc(1, sizeof(*z));
    z->kind = kind;
    z->in.rd = rd;
    z->in.ud = ud;
    int ok = 1;
    switch (kind) {
    case CKPT_ARCHIVE_TAR_GZ:
#ifdef CKPT_HAVE_ISAL
        z->gz = ckpt_xmalloc(sizeof(*z->gz));
#endif
        break;
    case CKPT_ARCHIVE_TAR_BZ2:
        z->bz = zdec_bz2_open(&z->in, threads);
        ok = z->bz != NULL;
        break;
    case CKPT_ARCHIVE_TAR_XZ:
        ok = xz_start(z, threads) == 0;
        break;
    case CKPT_ARCHIVE_TAR_ZST:
        z->zs = ZSTD_createDStream();
        ok = z->zs && !ZSTD_isError(ZSTD_initDStream(z->zs));
        break;
    default:
        ok = 0;
    }
    if (!ok) {
        zdec_close(z);
        return NULL;
    }
    return z;
}

void zdec_read_ahead(struct zdec *z, size_t chunk, int slots)
{
    zdec_in_ahead(&z->in, chunk, slots);
}

ssize_t zdec_read(struct zdec *z, void *buf, size_t len)
{
    if (z->bz)
        return zdec_bz2_read(z->bz, buf, len);
    if (z->failed || z->in.io_failed)
        return -1;
    if (z->ended || !len)
        return 0;
    ssize_t n = 0;
    switch (z->kind) {
    case CKPT_ARCHIVE_TAR_GZ: n = gz_read(z, buf, len); break;
    case CKPT_ARCHIVE_TAR_XZ: n = xz_read(z, buf, len); break;
    case CKPT_ARCHIVE_TAR_ZST: n = zs_read(z, buf, len); break;
    default: break;
    }
    if (n > 0)
        return n; /* an error waits for the next call */
    return z->failed || z->in.io_failed ? -1 : 0;
}

const char *zdec_error(const struct zdec *z)
{
    if (z->bz)
        return zdec_bz2_error(z->bz);
    return z->err[0] ? z->err : "decompression failed";
}

int zdec_failed(const struct zdec *z)
{
    return z->bz ? zdec_bz2_failed(z->bz) : z->failed;
}

int zdec_io_failed(const struct zdec *z)
{
    return z->in.io_failed;
}

uint64_t zdec_in_used(const struct zdec *z)
{
    return z->bz ? zdec_bz2_in_used(z->bz) : z->used;
}

void zdec_close(struct zdec *z)
{
    if (!z)
        return;
    zdec_bz2_close(z->bz);
#ifdef CKPT_HAVE_ISAL
    free(z->gz);
#else
    if (z->gz.state)
        inflateEnd(&z->gz);
#endif
    if (z->xz_open)
        lzma_end(&z->xz);
    ZSTD_freeDStream(z->zs);
    zdec_in_release(&z->in);
    free(z);
}
