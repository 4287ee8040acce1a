/*
 * zdec_bz2blk.c - one bzip2 block decoded in a single pass over bits that
 * are all in memory (zdec.h).
 *
 * Why not only libbz2: its decoder is written to stop and resume at any
 * input byte, so every Huffman symbol is read a bit at a time through a
 * resumable state machine. zdec_bz2.c already holds each block's bits
 * whole, so this decoder reads symbols through a lookup table instead;
 * that is where lbzip2's decoder gets its speed over libbz2's (issue 22:
 * libbz2 needed 1.24x lbzip2's CPU).
 *
 * It only accelerates: its output is used when the block decodes cleanly,
 * its last symbol ends exactly at the block's end, and the CRC computed
 * over the output equals the block's stored CRC. Anything else -- damage,
 * a false block boundary, the deprecated randomised blocks, a code that
 * libbz2 would read differently, output beyond the cap -- returns -1 and
 * zdec_bz2.c decodes the block with libbz2 as before, which then gives
 * the verdict and the message. The fuzz target zdec_bz2 compares both.
 *
 * Format (after the 48-bit block magic): CRC (32), randomised (1),
 * origPtr (24), the bytes in use (16 + 16 per set bit), groups (3),
 * selectors (15, each unary, move-to-front coded), per group the code
 * lengths (5-bit start, then deltas), then Huffman symbols, the table
 * switching every 50 symbols: RUNA/RUNB (bijective base-2 run lengths of
 * the front byte), move-to-front indexes, end of block. The block is the
 * Burrows-Wheeler transform of the run-length-1 encoded data (runs of 4
 * equal bytes followed by a count of 0..255 more).
 */
#include "zdec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

#define LUT_BITS 10
#define MAX_LEN 20
#define MAX_GROUPS 6
#define MAX_SELECTORS 18002     /* libbz2 1.0.8 reads more, uses this many */
#define MAX_ALPHA 258
#define GROUP_SIZE 50
#define RUN_MAX (2u * 1024 * 1024)

struct huff {
    uint16_t lut[1u << LUT_BITS];       /* sym << 5 | len; 0: longer */
    uint32_t first[MAX_LEN + 1];        /* canonical first code per length */
    uint16_t count[MAX_LEN + 1];
    uint16_t offs[MAX_LEN + 1];         /* index of that first in sorted */
    uint16_t sorted[MAX_ALPHA];         /* symbols by (length, symbol) */
    int maxlen;
};

/* ---- CRC: bzip2's CRC-32, polynomial 0x04c11db7, most significant bit
 * first (not zlib's reflected one), eight bytes a step. ---- */

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i << 24;
        for (int k = 0; k < 8; k++)
            c = c & 0x80000000u ? c << 1 ^ 0x04c11db7u : c << 1;
        crc_tab[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) {
            uint32_t c = crc_tab[t - 1][i];
            crc_tab[t][i] = c << 8 ^ crc_tab[0][c >> 24];
        }
}

static uint32_t block_crc(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (; n >= 8; p += 8, n -= 8) {
        c ^= (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
             (uint32_t)p[2] << 8 | p[3];
        c = crc_tab[7][c >> 24] ^ crc_tab[6][c >> 16 & 0xff] ^
            crc_tab[5][c >> 8 & 0xff] ^ crc_tab[4][c & 0xff] ^
            crc_tab[3][p[4]] ^ crc_tab[2][p[5]] ^ crc_tab[1][p[6]] ^
            crc_tab[0][p[7]];
    }
    for (; n; p++, n--)
        c = c << 8 ^ crc_tab[0][(c >> 24) ^ *p];
    return ~c;
}

/* ---- bits ---- */

struct bits {
    const unsigned char *p;     /* readable to end/8 + 8 */
    uint64_t pos, end;
};

/* The next 57+ bits at pos, most significant first. */
static inline uint64_t peek(const struct bits *b)
{
    uint64_t v;
    memcpy(&v, b->p + (b->pos >> 3), 8);
    return __builtin_bswap64(v) << (b->pos & 7);
}

/* n (1..32) bits; -1 past the end. */
static inline int64_t get(struct bits *b, int n)
{
    if (b->pos + (uint64_t)n > b->end)
        return -1;
    uint64_t v = peek(b) >> (64 - n);
    b->pos += (uint64_t)n;
    return (int64_t)v;
}

/* ---- Huffman tables ---- */

/* Canonical codes as bzip2 assigns them: by length, then by symbol. -1
 * for an over-subscribed code (libbz2 would decode it its own way). */
static int huff_build(struct huff *h, const unsigned char *len, int n)
{
    memset(h->count, 0, sizeof(h->count));
    for (int i = 0; i < n; i++)
        h->count[len[i]]++;
    int64_t left = 1;
    uint32_t code = 0;
    uint16_t off = 0;
    h->maxlen = 0;
    for (int l = 1; l <= MAX_LEN; l++) {
        left = left * 2 - h->count[l];
        if (left < 0)
            return -1;
        h->first[l] = code;
        h->offs[l] = off;
        code = (code + h->count[l]) << 1;
        off = (uint16_t)(off + h->count[l]);
        if (h->count[l])
            h->maxlen = l;
    }
    uint16_t next[MAX_LEN + 1];
    memcpy(next, h->offs, sizeof(next));
    for (int i = 0; i < n; i++)
        h->sorted[next[len[i]]++] = (uint16_t)i;
    memset(h->lut, 0, sizeof(h->lut));
    for (int l = 1; l <= LUT_BITS; l++)
        for (int k = 0; k < h->count[l]; k++) {
            uint32_t c = h->first[l] + (uint32_t)k;
            uint16_t e = (uint16_t)(h->sorted[h->offs[l] + k] << 5 | l);
            uint32_t lo = c << (LUT_BITS - l), hi = (c + 1) << (LUT_BITS - l);
            for (uint32_t x = lo; x < hi; x++)
                h->lut[x] = e;
        }
    return 0;
}

/* The next symbol, or -1 (no code matches, or past the end). */
static inline int huff_get(const struct huff *h, struct bits *b)
{
    if (b->pos > b->end)
        return -1;
    uint64_t v = peek(b);
    unsigned e = h->lut[v >> (64 - LUT_BITS)];
    if (e) {
        b->pos += e & 31;
        return (int)(e >> 5);
    }
    for (int l = LUT_BITS + 1; l <= h->maxlen; l++) {
        uint32_t c = (uint32_t)(v >> (64 - l)) - h->first[l];
        if (c < h->count[l]) {
            b->pos += (uint64_t)l;
            return h->sorted[h->offs[l] + c];
        }
    }
    return -1;
}

/* ---- the block ---- */

struct hdr {
    uint32_t crc, orig;
    int nsym;                   /* bytes in use */
    unsigned char sym[256];     /* their values, ascending */
    int ngroups, nsel;
    unsigned char *sel;
    struct huff *tab;
};

static int read_map(struct bits *b, struct hdr *h)
{
    int64_t l1 = get(b, 16);
    if (l1 < 0)
        return -1;
    h->nsym = 0;
    for (int i = 0; i < 16; i++) {
        if (!(l1 >> (15 - i) & 1))
            continue;
        int64_t l2 = get(b, 16);
        if (l2 < 0)
            return -1;
        for (int k = 0; k < 16; k++)
            if (l2 >> (15 - k) & 1)
                h->sym[h->nsym++] = (unsigned char)(i * 16 + k);
    }
    return h->nsym ? 0 : -1;
}

static int read_selectors(struct bits *b, struct hdr *h)
{
    int64_t g = get(b, 3), s = get(b, 15);
    if (g < 2 || g > MAX_GROUPS || s < 1 || s > MAX_SELECTORS)
        return -1;
    h->ngroups = (int)g;
    h->nsel = (int)s;
    h->sel = ckpt_xmalloc((size_t)s);
    unsigned char mtf[MAX_GROUPS] = { 0, 1, 2, 3, 4, 5 };
    for (int i = 0; i < h->nsel; i++) {
        int j = 0;
        for (;;) {
            int64_t bit = get(b, 1);
            if (bit < 0)
                return -1;
            if (!bit)
                break;
            if (++j >= h->ngroups)
                return -1;
        }
        unsigned char v = mtf[j];
        memmove(mtf + 1, mtf, (size_t)j);
        mtf[0] = v;
        h->sel[i] = v;
    }
    return 0;
}

static int read_tables(struct bits *b, struct hdr *h)
{
    int alpha = h->nsym + 2;
    h->tab = ckpt_xmalloc((size_t)h->ngroups * sizeof(*h->tab));
    for (int t = 0; t < h->ngroups; t++) {
        unsigned char len[MAX_ALPHA];
        int64_t cur = get(b, 5);
        for (int i = 0; i < alpha; i++) {
            for (;;) {
                if (cur < 1 || cur > MAX_LEN)
                    return -1;
                int64_t bit = get(b, 1);
                if (bit < 0)
                    return -1;
                if (!bit)
                    break;
                bit = get(b, 1);
                if (bit < 0)
                    return -1;
                cur += bit ? -1 : 1;
            }
            len[i] = (unsigned char)cur;
        }
        if (huff_build(&h->tab[t], len, alpha) != 0)
            return -1;
    }
    return 0;
}

static int read_header(struct bits *b, struct hdr *h)
{
    int64_t crc, rnd, orig;
    if (get(b, 24) != 0x314159 || get(b, 24) != 0x265359)
        return -1;
    if ((crc = get(b, 32)) < 0 || (rnd = get(b, 1)) != 0 ||
        (orig = get(b, 24)) < 0)
        return -1;              /* randomised blocks: libbz2's job */
    h->crc = (uint32_t)crc;
    h->orig = (uint32_t)orig;
    if (read_map(b, h) != 0 || read_selectors(b, h) != 0)
        return -1;
    return read_tables(b, h);
}

/* The move-to-front and run decoding: the BWT block into tt (low bytes),
 * byte counts into cnt. The number of bytes, or -1. */
static int64_t read_symbols(struct bits *b, const struct hdr *h,
                            uint32_t *tt, uint32_t max, uint32_t *cnt)
{
    unsigned char mtf[256];
    memcpy(mtf, h->sym, (size_t)h->nsym);
    const int eob = h->nsym + 1;
    uint32_t n = 0, run = 0, weight = 1;
    int gno = -1, left = 0;
    const struct huff *tab = NULL;
    for (;;) {
        if (!left) {
            if (++gno >= h->nsel)
                return -1;
            tab = &h->tab[h->sel[gno]];
            left = GROUP_SIZE;
        }
        left--;
        int s = huff_get(tab, b);
        if (s < 0)
            return -1;
        if (s <= 1) {           /* RUNA, RUNB */
            if (weight >= RUN_MAX)
                return -1;
            run += (uint32_t)(s + 1) * weight;
            weight <<= 1;
            continue;
        }
        if (run) {
            unsigned char c = mtf[0];
            if (run > max - n)
                return -1;
            cnt[c] += run;
            for (uint32_t k = 0; k < run; k++)
                tt[n++] = c;
            run = 0;
        }
        weight = 1;
        if (s == eob)
            return n;
        if (n >= max)
            return -1;
        int k = s - 1;
        unsigned char c = mtf[k];
        memmove(mtf + 1, mtf, (size_t)k);
        mtf[0] = c;
        cnt[c]++;
        tt[n++] = c;
    }
}

/* Room for one more byte (or n more) in the output, growing it to cap. */
static int room(unsigned char **out, size_t *ocap, size_t o, size_t n,
                size_t cap)
{
    if (o + n <= *ocap)
        return 0;
    if (o + n > cap)
        return -1;
    size_t c = *ocap ? *ocap : 4096;
    while (c < o + n)
        c *= 2;
    if (c > cap)
        c = cap;
    *out = ckpt_xrealloc(*out, c);
    *ocap = c;
    return 0;
}

/* Undo the BWT, then the run-length-1 coding, into out. */
static int unbwt(uint32_t *tt, uint32_t n, uint32_t orig, const uint32_t *cnt,
                 unsigned char **out, size_t *olen, size_t *ocap, size_t cap)
{
    uint32_t cum[256], sum = 0;
    for (int i = 0; i < 256; i++) {
        cum[i] = sum;
        sum += cnt[i];
    }
    for (uint32_t i = 0; i < n; i++)
        tt[cum[tt[i] & 0xff]++] |= i << 8;
    uint32_t pos = tt[orig] >> 8;
    size_t o = 0;
    unsigned prev = 256, same = 0;
    for (uint32_t i = 0; i < n; i++) {
        pos = tt[pos];
        unsigned c = pos & 0xff;
        pos >>= 8;
        if (same == 4) {        /* c counts more copies of prev */
            if (room(out, ocap, o, c, cap) != 0)
                return -1;
            memset(*out + o, (int)prev, c);
            o += c;
            same = 0;
            prev = 256;
            continue;
        }
        same = c == prev ? same + 1 : 1;
        prev = c;
        if (o == *ocap && room(out, ocap, o, 1, cap) != 0)
            return -1;
        (*out)[o++] = (unsigned char)c;
    }
    if (same == 4)
        return -1;              /* a run of 4 without its count */
    *olen = o;
    return 0;
}

int zdec_bz2blk_decode(const unsigned char *raw, uint64_t from,
                       uint64_t nbits, int level, unsigned char **out,
                       size_t *olen, size_t *ocap, size_t cap)
{
    pthread_once(&crc_once, crc_init);
    struct bits b = { raw, from, from + nbits };
    struct hdr h;
    memset(&h, 0, sizeof(h));
    uint32_t max = (uint32_t)level * 100000, cnt[256] = { 0 };
    uint32_t *tt = NULL;
    int rc = -1;
    if (read_header(&b, &h) != 0)
        goto out;
    tt = ckpt_xmalloc((size_t)max * sizeof(*tt));
    int64_t n = read_symbols(&b, &h, tt, max, cnt);
    if (n <= 0 || h.orig >= (uint64_t)n || b.pos != b.end)
        goto out;
    if (unbwt(tt, (uint32_t)n, h.orig, cnt, out, olen, ocap, cap) != 0)
        goto out;
    rc = block_crc(*out, *olen) == h.crc ? 0 : -1;
out:
    free(tt);
    free(h.sel);
    free(h.tab);
    return rc;
}
