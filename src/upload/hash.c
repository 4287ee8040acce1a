/*
 * hash.c - MD5 as S3 uses it (Content-MD5, ETags) and part sizing.
 */
#include "upload_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "ckpt/text.h"

int up_md5_check(struct ckpt_err *err)
{
    /* OpenSSL may be built or configured without MD5 (FIPS mode); S3's
     * Content-MD5 and ETags need it. */
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_md5(), NULL) == 1;
    EVP_MD_CTX_free(c);
    if (!ok)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "MD5 is not available "
                            "in this OpenSSL (FIPS mode?); upload needs it "
                            "for S3 checksums and ETags");
    return 0;
}

void up_md5c_init(struct md5c *m)
{
    /* MD5 itself was checked (up_md5_check): what is left is memory. */
    m->c = EVP_MD_CTX_new();
    if (!m->c || EVP_DigestInit_ex(m->c, EVP_md5(), NULL) != 1)
        ckpt_die_oom("starting an MD5 digest");
}

void up_md5c_update(struct md5c *m, const void *p, size_t n)
{
    EVP_DigestUpdate(m->c, p, n);
}

void up_md5c_final(struct md5c *m, unsigned char out[16])
{
    unsigned int len = 16;
    EVP_DigestFinal_ex(m->c, out, &len);
    EVP_MD_CTX_free(m->c);
    m->c = NULL;
}

void up_md5_buf(const void *p, size_t n, unsigned char out[16])
{
    struct md5c m;
    up_md5c_init(&m);
    up_md5c_update(&m, p, n);
    up_md5c_final(&m, out);
}

int up_hex_md5_parse(const char *hex, unsigned char out[16])
{
    if (strlen(hex) != 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        int a = ckpt_hexval(hex[2 * i]), b = ckpt_hexval(hex[2 * i + 1]);
        if (a < 0 || b < 0)
            return -1;
        out[i] = (unsigned char)(a << 4 | b);
    }
    return 0;
}

void up_composite_etag(const unsigned char (*md5)[16], int n, char out[48])
{
    unsigned char d[16];
    up_md5_buf(md5, (size_t)n * 16, d);
    ckpt_hex_encode(d, 16, out);
    snprintf(out + 32, 16, "-%d", n);
}

uint64_t up_part_size_for(uint64_t size, uint64_t min)
{
    uint64_t p = min ? min : DEFAULT_PART;
    uint64_t need = (size + MAX_PARTS - 1) / MAX_PARTS;
    if (p < need)
        p = need;
    /* Whole MiB: every part but the last the same size (R2 insists). */
    return (p + MIB - 1) / MIB * MIB;
}

int up_parts_for(uint64_t size, uint64_t part)
{
    if (size == 0)
        return 1;
    return (int)((size + part - 1) / part);
}

/* ---- composite ETag guesses ---- */

void up_cand_init(struct up_cand *c, uint64_t part)
{
    memset(c, 0, sizeof(*c));
    c->part = part;
    up_md5c_init(&c->outer);
    up_md5c_init(&c->cur);
}

void up_cand_feed(struct up_cand *c, const char *p, size_t len)
{
    while (len > 0) {
        size_t take = c->part - c->in_part < len ? c->part - c->in_part
                                                 : len;
        up_md5c_update(&c->cur, p, take);
        c->in_part += take;
        p += take;
        len -= take;
        if (c->in_part == c->part) {
            unsigned char d[16];
            up_md5c_final(&c->cur, d);
            up_md5c_update(&c->outer, d, 16);
            up_md5c_init(&c->cur);
            c->in_part = 0;
            c->n++;
        }
    }
}

void up_cand_final(struct up_cand *c)
{
    unsigned char d[16];
    if (c->in_part > 0 || c->n == 0) {
        up_md5c_final(&c->cur, d);
        up_md5c_update(&c->outer, d, 16);
        c->n++;
    } else {
        up_md5c_final(&c->cur, d);
    }
    up_md5c_final(&c->outer, d);
    ckpt_hex_encode(d, 16, c->etag);
    snprintf(c->etag + 32, 16, "-%d", c->n);
}

int up_cand_guesses(uint64_t size, uint64_t ours, int n, uint64_t meta_part,
                    uint64_t out[4])
{
    uint64_t try[4] = { ours, meta_part, 8 * MIB, 5 * MIB };
    int k = 0;
    for (int i = 0; i < 4; i++) {
        if (!try[i] || up_parts_for(size, try[i]) != n)
            continue;
        int dup = 0;
        for (int j = 0; j < k; j++)
            dup |= out[j] == try[i];
        if (!dup)
            out[k++] = try[i];
    }
    return k;
}
