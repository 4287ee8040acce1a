/*
 * crc32.c - zip CRC-32 (reflected polynomial 0xedb88320) and
 * crc32_combine (zlib's x^(2^n) mod p method), so pieces of a record
 * checksummed by different workers combine in record order.
 *
 * Every byte written by unshard is checksummed, so speed matters: on x86-64
 * with PCLMULQDQ the bulk is folded with carry-less multiplies (Intel's
 * "Fast CRC Computation Using PCLMULQDQ", constants as in Linux's
 * crc32-pclmul and Chromium's zlib), ~10x the table method; elsewhere,
 * slicing-by-8 (little-endian hosts).
 */
#include <pthread.h>
#include <string.h>

#include "ckpt/torchfmt.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_CLMUL 1
#include <immintrin.h>
#endif

#define POLY 0xedb88320u

static uint32_t table[8][256];
#ifdef HAVE_CLMUL
static int use_clmul;
#endif
static uint32_t x2n[32];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

static void init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            table[t][i] = (table[t - 1][i] >> 8) ^
                          table[0][table[t - 1][i] & 0xff];
    uint32_t p = 1u << 30;   /* x^1 */
    x2n[0] = p;
    for (int n = 1; n < 32; n++)
        x2n[n] = p = multmodp(p, p);
#ifdef HAVE_CLMUL
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") &&
                __builtin_cpu_supports("sse4.1");
#endif
}

#ifdef HAVE_CLMUL
#define CLMUL __attribute__((target("pclmul,sse4.1")))

CLMUL static __m128i fold(__m128i x, __m128i k, __m128i next)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(hi, lo), next);
}

/* len >= 64, a multiple of 16; c is the inverted running state. */
CLMUL static uint32_t crc_clmul(const unsigned char *p, size_t len,
                                uint32_t c)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i mask = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p);
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
        x1 = fold(x1, k1k2, _mm_loadu_si128((const __m128i *)p));
        x2 = fold(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = fold(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = fold(x4, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x1 = fold(x1, k3k4, x2);
    x1 = fold(x1, k3k4, x3);
    x1 = fold(x1, k3k4, x4);
    for (; len >= 16; p += 16, len -= 16)
        x1 = fold(x1, k3k4, _mm_loadu_si128((const __m128i *)p));
    /* 128 -> 64 bits, then Barrett reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k5, 0x00), x2);
    x2 = _mm_and_si128(x1, mask);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc_table(uint32_t c, const unsigned char *p, size_t n);

uint32_t ckpt_crc32(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&once, init);
    const unsigned char *p = buf;
    uint32_t c = ~crc;
#ifdef HAVE_CLMUL
    if (use_clmul && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        c = crc_clmul(p, bulk, c);
        p += bulk;
        n -= bulk;
    }
#endif
    return ~crc_table(c, p, n);
}

/* Slicing-by-8 over the inverted state c. */
static uint32_t crc_table(uint32_t c, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
            table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
            table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
            table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

/* x^(n * 2^k) mod p(x). */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
    uint32_t p = 1u << 31;   /* x^0 */
    while (n) {
        if (n & 1)
            p = multmodp(x2n[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

uint32_t ckpt_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    pthread_once(&once, init);
    return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;
}
