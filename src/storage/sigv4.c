/*
 * sigv4.c - AWS Signature Version 4 for S3 (AWS IAM guide
 * "create-signed-request"; S3 API "sig-v4-header-based-auth").
 */
#include "sigv4.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ckpt/util.h"

static const char hexd[] = "0123456789ABCDEF";
static const char hexl[] = "0123456789abcdef";

static int unreserved(unsigned char c)
{
    return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

void ckpt_sigv4_encode(struct ckpt_buf *out, const char *s, size_t n,
                       int keep_slash)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        /* isalnum() is locale-dependent; bytes >= 0x80 must be encoded. */
        if ((c < 0x80 && unreserved(c)) || (keep_slash && c == '/')) {
            ckpt_buf_addch(out, (char)c);
            continue;
        }
        char e[3] = { '%', hexd[c >> 4], hexd[c & 15] };
        ckpt_buf_add(out, e, 3);
    }
}

struct enc_pair {
    char *name;   /* owned, encoded */
    char *value;  /* owned, encoded */
};

static int pair_cmp(const void *a, const void *b)
{
    const struct enc_pair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static char *encode_str(const char *s)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_sigv4_encode(&b, s ? s : "", s ? strlen(s) : 0, 0);
    return ckpt_buf_detach(&b, NULL);
}

void ckpt_sigv4_query(struct ckpt_buf *out,
                      const struct ckpt_sigv4_param *q, size_t n)
{
    if (n == 0)
        return;
    struct enc_pair *p = ckpt_xreallocarray(NULL, n, sizeof(*p));
    for (size_t i = 0; i < n; i++) {
        p[i].name = encode_str(q[i].name);
        p[i].value = encode_str(q[i].value);
    }
    /* Sorted by encoded name, then value: byte order of the encoded form. */
    ckpt_sort(p, n, sizeof(*p), pair_cmp);
    for (size_t i = 0; i < n; i++) {
        ckpt_buf_addf(out, "%s%s=%s", i ? "&" : "", p[i].name, p[i].value);
        free(p[i].name);
        free(p[i].value);
    }
    free(p);
}

struct canon_hdr {
    char *name;          /* owned, lowercase */
    struct ckpt_buf val; /* trimmed, spaces collapsed */
    size_t order;        /* input position: keeps repeated values in order */
};

static int hdr_cmp(const void *a, const void *b)
{
    const struct canon_hdr *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Trimall: strip both ends, collapse inner runs of whitespace to one space
 * (a folded multi-line value becomes "v1 v2"; see get-header-value-trim). */
static void trimall(struct ckpt_buf *out, const char *v)
{
    int pending = 0;
    for (; *v; v++) {
        if (isspace((unsigned char)*v)) {
            pending = out->len > 0;
            continue;
        }
        if (pending)
            ckpt_buf_addch(out, ' ');
        pending = 0;
        ckpt_buf_addch(out, *v);
    }
}

static struct canon_hdr *canon_headers(const struct ckpt_sigv4_req *req)
{
    size_t n = req->nheaders;
    struct canon_hdr *h = ckpt_xreallocarray(NULL, n ? n : 1, sizeof(*h));
    for (size_t i = 0; i < n; i++) {
        h[i].name = ckpt_xstrdup(req->headers[i].name);
        for (char *c = h[i].name; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        ckpt_buf_init(&h[i].val);
        trimall(&h[i].val, req->headers[i].value);
        h[i].order = i;
    }
    ckpt_sort(h, n, sizeof(*h), hdr_cmp);
    return h;
}

void ckpt_sigv4_canonical(struct ckpt_buf *out, struct ckpt_buf *signed_hdrs,
                          const struct ckpt_sigv4_req *req)
{
    ckpt_buf_addf(out, "%s\n", req->method);
    ckpt_sigv4_encode(out, req->path, strlen(req->path), 1);
    ckpt_buf_addch(out, '\n');
    ckpt_sigv4_query(out, req->query, req->nquery);
    ckpt_buf_addch(out, '\n');
    struct canon_hdr *h = canon_headers(req);
    struct ckpt_buf names = CKPT_BUF_INIT;
    for (size_t i = 0; i < req->nheaders; i++) {
        /* Repeated names become one line, values joined by ','. */
        int repeat = i > 0 && !strcmp(h[i].name, h[i - 1].name);
        if (repeat) {
            ckpt_buf_setlen(out, out->len - 1);
            ckpt_buf_addf(out, ",%s\n", h[i].val.ptr);
        } else {
            ckpt_buf_addf(out, "%s:%s\n", h[i].name, h[i].val.ptr);
            ckpt_buf_addf(&names, "%s%s", names.len ? ";" : "", h[i].name);
        }
    }
    for (size_t i = 0; i < req->nheaders; i++) {
        free(h[i].name);
        ckpt_buf_release(&h[i].val);
    }
    free(h);
    ckpt_buf_addf(out, "\n%s\n%s", names.ptr, req->payload_hash);
    if (signed_hdrs)
        ckpt_buf_addstr(signed_hdrs, names.ptr);
    ckpt_buf_release(&names);
}

static void hex_encode(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexl[d[i] >> 4];
        out[2 * i + 1] = hexl[d[i] & 15];
    }
    out[2 * n] = '\0';
}

void ckpt_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    hex_encode(md, 32, out);
}

void ckpt_hmac_sha256(const void *key, size_t klen, const void *msg,
                      size_t mlen, unsigned char out[32])
{
    unsigned int olen = 32;
    HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &olen);
}

void ckpt_md5_b64(const void *data, size_t len, char out[25], char *hex)
{
    unsigned char md[16];
    unsigned int mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_md5(), NULL);
    EVP_EncodeBlock((unsigned char *)out, md, 16);
    if (hex)
        hex_encode(md, 16, hex);
}

void ckpt_base64(struct ckpt_buf *out, const void *data, size_t len, int url)
{
    size_t start = out->len;
    ckpt_buf_grow(out, 4 * ((len + 2) / 3) + 1);
    int n = EVP_EncodeBlock((unsigned char *)out->ptr + start, data,
                            (int)len);
    ckpt_buf_setlen(out, start + (size_t)n);
    if (!url)
        return;
    size_t w = start;
    for (size_t r = start; r < out->len; r++) {
        char c = out->ptr[r];
        if (c == '=')
            continue;
        out->ptr[w++] = c == '+' ? '-' : c == '/' ? '_' : c;
    }
    ckpt_buf_setlen(out, w);
}

void ckpt_sigv4_date(time_t t, char out[17])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

/* key = HMAC(key, msg), through a copy: no aliasing of in and out. */
static void hmac_chain(unsigned char key[32], const char *msg)
{
    unsigned char in[32];
    memcpy(in, key, 32);
    ckpt_hmac_sha256(in, 32, msg, strlen(msg), key);
}

void ckpt_sigv4_authorization(struct ckpt_buf *out, struct ckpt_buf *sts,
                              const struct ckpt_sigv4_req *req,
                              const struct ckpt_sigv4_key *key,
                              const char *amz_date)
{
    struct ckpt_buf creq = CKPT_BUF_INIT, names = CKPT_BUF_INIT;
    struct ckpt_buf s = CKPT_BUF_INIT;
    ckpt_sigv4_canonical(&creq, &names, req);
    char day[9], hash[65];
    memcpy(day, amz_date, 8);
    day[8] = '\0';
    ckpt_sha256_hex(creq.ptr, creq.len, hash);
    ckpt_buf_addf(&s, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
                  amz_date, day, key->region, key->service, hash);

    /* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, day), region),
     * service), "aws4_request"). The secret never leaves this frame. */
    char *k0 = ckpt_xasprintf("AWS4%s", key->secret_key);
    unsigned char k[32], sig[32];
    ckpt_hmac_sha256(k0, strlen(k0), day, 8, k);
    memset(k0, 0, strlen(k0));
    free(k0);
    hmac_chain(k, key->region);
    hmac_chain(k, key->service);
    hmac_chain(k, "aws4_request");
    ckpt_hmac_sha256(k, 32, s.ptr, s.len, sig);
    char sighex[65];
    hex_encode(sig, 32, sighex);
    ckpt_buf_addf(out, "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request"
                  ", SignedHeaders=%s, Signature=%s", key->access_key, day,
                  key->region, key->service, names.ptr, sighex);
    if (sts)
        ckpt_buf_add(sts, s.ptr, s.len);
    ckpt_buf_release(&creq);
    ckpt_buf_release(&names);
    ckpt_buf_release(&s);
}
