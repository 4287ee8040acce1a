/*
 * crc32.c - zip CRC-32 (reflected polynomial 0xedb88320), slicing-by-8,
 * and crc32_combine (zlib's x^(2^n) mod p method), so pieces of a record
 * checksummed by different workers combine in record order.
 */
#include <pthread.h>
#include <string.h>

#include "ckpt/torchfmt.h"

#define POLY 0xedb88320u

static uint32_t table[8][256];
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
}

uint32_t ckpt_crc32(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&once, init);
    const unsigned char *p = buf;
    uint32_t c = ~crc;
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
    return ~c;
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
