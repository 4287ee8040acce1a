/*
 * bz2blk_fuzz - the table-driven bzip2 block decoder (src/archive/
 * zdec_bz2blk.c) against libbz2 on one block, with the CRC out of the way.
 *
 * Mutated blocks almost always fail their CRC, and both decoders then
 * reject them: that tests little of how they read the block. So the
 * harness first lets libbz2 decode the block whatever its CRC (libbz2
 * writes a block's bytes before it checks the CRC), stores the CRC of
 * those bytes in the block, and then runs both decoders on it.
 * Property: whatever zdec_bz2blk_decode accepts, libbz2 accepts too, with
 * the same bytes. (It may decline what libbz2 accepts: libbz2 decides
 * those blocks in zdec_bz2.c.)
 *
 * Input: byte 0 the level (1 + byte % 9), byte 1 the number of pad bits
 * at the end (byte % 8), then the block's bits from its magic (the first
 * 48 bits are forced to the magic). The corpus holds real blocks written
 * by bzip2 -1 .. -9 (tests/fuzz/corpus/bz2blk/README).
 */
#include <bzlib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "archive/zdec.h"

#define CAP (4u << 20)

struct bitw {
    unsigned char *p;
    uint64_t n;
};

static void put(struct bitw *w, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, w->n++) {
        unsigned char m = (unsigned char)(0x80u >> (w->n % 8));
        if (v >> i & 1)
            w->p[w->n / 8] |= m;
        else
            w->p[w->n / 8] &= (unsigned char)~m;
    }
}

static uint64_t get(const unsigned char *p, uint64_t at, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++, at++)
        v = v << 1 | (p[at / 8] >> (7 - at % 8) & 1);
    return v;
}

/* "BZh<level>", the block, the end magic, the block's CRC as the
 * stream's. */
static unsigned char *stream(const unsigned char *blk, uint64_t nbits,
                             int level, size_t *len)
{
    size_t cap = (size_t)(nbits / 8) + 20;
    unsigned char *s = calloc(1, cap);
    memcpy(s, "BZh", 3);
    s[3] = (unsigned char)('0' + level);
    struct bitw w = { s, 32 };
    for (uint64_t i = 0; i < nbits; i++)
        put(&w, get(blk, i, 1), 1);
    put(&w, 0x177245385090ULL, 48);
    put(&w, get(blk, 48, 32), 32);
    *len = (size_t)((w.n + 7) / 8);
    return s;
}

/* libbz2 on one stream: 0 at its proper end, -1 otherwise; the bytes it
 * wrote either way. */
static int libbz2(const unsigned char *s, size_t n, unsigned char *out,
                  size_t *olen)
{
    bz_stream z;
    memset(&z, 0, sizeof(z));
    if (BZ2_bzDecompressInit(&z, 0, 0) != BZ_OK)
        return -1;
    z.next_in = (char *)s;
    z.avail_in = (unsigned)n;
    z.next_out = (char *)out;
    z.avail_out = CAP;
    int rc;
    do
        rc = BZ2_bzDecompress(&z);
    while (rc == BZ_OK && z.avail_in && z.avail_out);
    *olen = CAP - z.avail_out;
    BZ2_bzDecompressEnd(&z);
    return rc == BZ_STREAM_END && !z.avail_in ? 0 : -1;
}

static uint32_t bz_crc(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= (uint32_t)p[i] << 24;
        for (int k = 0; k < 8; k++)
            c = c & 0x80000000u ? c << 1 ^ 0x04c11db7u : c << 1;
    }
    return ~c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 + 11 || size > (1u << 21))
        return 0;
    int level = 1 + data[0] % 9;
    uint64_t nbits = (uint64_t)(size - 2) * 8 - data[1] % 8;
    unsigned char *blk = calloc(1, size - 2 + 8);
    memcpy(blk, data + 2, size - 2);
    struct bitw w = { blk, 0 };
    put(&w, 0x314159265359ULL, 48);
    unsigned char *ref = malloc(CAP);
    size_t rlen = 0, slen;
    unsigned char *s = stream(blk, nbits, level, &slen);
    libbz2(s, slen, ref, &rlen);
    free(s);
    /* The CRC of what libbz2 read, stored in the block: now a block that
     * libbz2 rejects is rejected for how it is coded, not for its CRC. */
    w.n = 48;
    put(&w, bz_crc(ref, rlen), 32);
    s = stream(blk, nbits, level, &slen);
    int ref_ok = libbz2(s, slen, ref, &rlen) == 0;
    free(s);
    unsigned char *out = NULL;
    size_t olen = 0, ocap = 0;
    if (zdec_bz2blk_decode(blk, 0, nbits, level, &out, &olen, &ocap, CAP) ==
        0) {
        if (!ref_ok || olen != rlen || memcmp(out, ref, olen))
            __builtin_trap();
    }
    free(out);
    free(ref);
    free(blk);
    return 0;
}
