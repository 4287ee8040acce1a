/*
 * test_sigv4.c - SigV4 against AWS's published vectors: the signing test
 * suite (tests/data/sigv4/, files *.req, see its README) and the five
 * examples of the S3 API reference (sig-v4-header-based-auth,
 * sigv4-query-string-auth).
 */
#include <ctype.h>
#include <dirent.h>

#include "ckpt/buf.h"
#include "ckpt/util.h"
#include "storage/sigv4.h"
#include "test.h"

#define SUITE_AKID "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define S3_AKID "AKIAIOSFODNN7EXAMPLE"
#define S3_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct ckpt_buf b = CKPT_BUF_INIT;
    char tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        ckpt_buf_add(&b, tmp, n);
    fclose(f);
    return ckpt_buf_detach(&b, len);
}

static int hexval(int c)
{
    return isdigit(c) ? c - '0' : tolower(c) - 'a' + 10;
}

/* Percent-decode in place (the request line carries encoded bytes). */
static void pct_decode(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '%' && isxdigit((unsigned char)r[1]) &&
            isxdigit((unsigned char)r[2])) {
            *w++ = (char)(hexval(r[1]) * 16 + hexval(r[2]));
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

struct vreq {
    char *text;                       /* owned; everything points in here */
    char *method, *path, *body;
    struct ckpt_sigv4_param q[16];
    size_t nq;
    struct ckpt_sigv4_hdr h[16];
    char *hval[16];                   /* owned joined values */
    size_t nh;
    const char *expect_auth;
    const char *amz_date;
};

static void parse_query(struct vreq *v, char *qs)
{
    for (char *p = qs, *next; p && *p && v->nq < 16; p = next) {
        next = strchr(p, '&');
        if (next)
            *next++ = '\0';
        char *eq = strchr(p, '=');
        if (eq)
            *eq++ = '\0';
        pct_decode(p);
        if (eq)
            pct_decode(eq);
        v->q[v->nq].name = p;
        v->q[v->nq].value = eq ? eq : "";
        v->nq++;
    }
}

/* Header lines "Name:value"; a line starting with whitespace continues the
 * previous header with another value (get-header-value-multiline). */
static void parse_headers(struct vreq *v, char *p)
{
    while (*p && *p != '\n') {
        char *eol = strchr(p, '\n');
        *eol = '\0';
        if (isspace((unsigned char)*p) && v->nh > 0) {
            char *old = v->hval[v->nh - 1];
            while (isspace((unsigned char)*p))
                p++;
            v->hval[v->nh - 1] = ckpt_xasprintf("%s,%s", old, p);
            free(old);
            v->h[v->nh - 1].value = v->hval[v->nh - 1];
        } else {
            char *colon = strchr(p, ':');
            *colon = '\0';
            if (!strcasecmp(p, "Authorization")) {
                v->expect_auth = colon + 1;
            } else {
                if (!strcasecmp(p, "X-Amz-Date"))
                    v->amz_date = colon + 1;
                v->h[v->nh].name = p;
                v->hval[v->nh] = ckpt_xstrdup(colon + 1);
                v->h[v->nh].value = v->hval[v->nh];
                v->nh++;
            }
        }
        p = eol + 1;
    }
    v->body = *p ? p + 1 : p;
}

static void vreq_free(struct vreq *v)
{
    for (size_t i = 0; i < v->nh; i++)
        free(v->hval[i]);
    free(v->text);
}

/* Sign only what the expected SignedHeaders names: one vector file also
 * carries an x-amz-content-sha256 line that its generator added after
 * signing. */
static void keep_signed(struct vreq *v)
{
    const char *sh = strstr(v->expect_auth, "SignedHeaders=");
    size_t w = 0;
    for (size_t i = 0; i < v->nh; i++) {
        char name[64];
        size_t n = strlen(v->h[i].name);
        for (size_t j = 0; j <= n && j < sizeof(name); j++)
            name[j] = (char)tolower((unsigned char)v->h[i].name[j]);
        const char *hit = strstr(sh, name);
        if (hit && (hit[n] == ';' || hit[n] == ',')) {
            v->h[w] = v->h[i];
            v->hval[w++] = v->hval[i];
        } else {
            free(v->hval[i]);
        }
    }
    v->nh = w;
}

static int load_vector(const char *path, struct vreq *v)
{
    memset(v, 0, sizeof(*v));
    v->text = slurp(path, NULL);
    if (!v->text)
        return -1;
    char *eol = strchr(v->text, '\n');
    *eol = '\0';
    v->method = v->text;
    char *sp = strchr(v->text, ' ');
    *sp = '\0';
    v->path = sp + 1;
    *strrchr(v->path, ' ') = '\0';
    char *qm = strchr(v->path, '?');
    if (qm) {
        *qm = '\0';
        parse_query(v, qm + 1);
    }
    pct_decode(v->path);
    parse_headers(v, eol + 1);
    if (!v->expect_auth || !v->amz_date)
        return -1;
    keep_signed(v);
    return 0;
}

static void check_vector(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct vreq v;
    if (load_vector(path, &v) != 0) {
        test_cond(path, 0);
        vreq_free(&v);
        return;
    }
    char hash[65];
    ckpt_sha256_hex(v.body, strlen(v.body), hash);
    struct ckpt_sigv4_req r = { v.method, v.path, v.q, v.nq, v.h, v.nh,
                                hash };
    struct ckpt_sigv4_key k = { SUITE_AKID, SUITE_SECRET, "us-east-1",
                                "service" };
    struct ckpt_buf auth = CKPT_BUF_INIT;
    ckpt_sigv4_authorization(&auth, NULL, &r, &k, v.amz_date);
    if (strcmp(auth.ptr, v.expect_auth) != 0) {
        fprintf(stderr, "  %s:\n    got  %s\n    want %s\n", name, auth.ptr,
                v.expect_auth);
        test_cond(name, 0);
    }
    ckpt_buf_release(&auth);
    vreq_free(&v);
}

static int is_req(const struct dirent *d)
{
    return ckpt_str_endswith(d->d_name, ".req");
}

static void test_sigv4__suite(void)
{
    struct dirent **list;
    int n = scandir("data/sigv4", &list, is_req, alphasort);
    CHECK(n >= 28);
    for (int i = 0; i < n; i++) {
        check_vector("data/sigv4", list[i]->d_name);
        free(list[i]);
    }
    if (n > 0)
        free(list);
}

/* Sign an S3 reference example; return the Signature= value. */
static void s3_example(const char *method, const char *path,
                       const struct ckpt_sigv4_param *q, size_t nq,
                       const struct ckpt_sigv4_hdr *h, size_t nh,
                       const char *payload, const char *want)
{
    struct ckpt_sigv4_req r = { method, path, q, nq, h, nh, payload };
    struct ckpt_sigv4_key k = { S3_AKID, S3_SECRET, "us-east-1", "s3" };
    struct ckpt_buf auth = CKPT_BUF_INIT;
    ckpt_sigv4_authorization(&auth, NULL, &r, &k, "20130524T000000Z");
    const char *sig = strstr(auth.ptr, "Signature=");
    CHECK_STR(sig ? sig + 10 : NULL, want);
    ckpt_buf_release(&auth);
}

#define HOST { "Host", "examplebucket.s3.amazonaws.com" }
#define DATE { "x-amz-date", "20130524T000000Z" }
#define EMPTY { "x-amz-content-sha256", CKPT_SHA256_EMPTY }

static void test_sigv4__s3_get_object(void)
{
    struct ckpt_sigv4_hdr h[] = { HOST, { "Range", "bytes=0-9" }, EMPTY,
                                  DATE };
    s3_example("GET", "/test.txt", NULL, 0, h, 4, CKPT_SHA256_EMPTY,
               "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c60"
               "36bdb41");
}

static void test_sigv4__s3_put_object(void)
{
    const char *body = "Welcome to Amazon S3.";
    char hash[65];
    ckpt_sha256_hex(body, strlen(body), hash);
    CHECK_STR(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a"
                    "8b803f8b072");
    struct ckpt_sigv4_hdr h[] = {
        { "Date", "Fri, 24 May 2013 00:00:00 GMT" }, HOST,
        { "x-amz-content-sha256", hash }, DATE,
        { "x-amz-storage-class", "REDUCED_REDUNDANCY" },
    };
    s3_example("PUT", "/test$file.text", NULL, 0, h, 5, hash,
               "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0e"
               "ce108bd");
}

static void test_sigv4__s3_get_lifecycle(void)
{
    struct ckpt_sigv4_param q[] = { { "lifecycle", NULL } };
    struct ckpt_sigv4_hdr h[] = { HOST, EMPTY, DATE };
    s3_example("GET", "/", q, 1, h, 3, CKPT_SHA256_EMPTY,
               "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a013"
               "6783543");
}

static void test_sigv4__s3_list_objects(void)
{
    struct ckpt_sigv4_param q[] = { { "prefix", "J" }, { "max-keys", "2" } };
    struct ckpt_sigv4_hdr h[] = { HOST, EMPTY, DATE };
    s3_example("GET", "/", q, 2, h, 3, CKPT_SHA256_EMPTY,
               "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef"
               "69dc6f7");
}

static void test_sigv4__s3_presigned(void)
{
    struct ckpt_sigv4_param q[] = {
        { "X-Amz-Algorithm", "AWS4-HMAC-SHA256" },
        { "X-Amz-Credential",
          "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request" },
        { "X-Amz-Date", "20130524T000000Z" },
        { "X-Amz-Expires", "86400" },
        { "X-Amz-SignedHeaders", "host" },
    };
    struct ckpt_sigv4_hdr h[] = { HOST };
    s3_example("GET", "/test.txt", q, 5, h, 1, CKPT_UNSIGNED_PAYLOAD,
               "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f"
               "604d404");
}

/* The rules that trip implementations, on their own. */
static void test_sigv4__encoding(void)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    const char *key = "a b+c~d/é=%/x//./y";
    ckpt_sigv4_encode(&b, key, strlen(key), 1);
    CHECK_STR(b.ptr, "a%20b%2Bc~d/%C3%A9%3D%25/x//./y");
    ckpt_buf_reset(&b);
    ckpt_sigv4_encode(&b, "a/b c", 5, 0);
    CHECK_STR(b.ptr, "a%2Fb%20c");
    ckpt_buf_reset(&b);
    struct ckpt_sigv4_param q[] = { { "uploads", NULL }, { "b", "x y" },
                                    { "a", "2" }, { "a", "1" } };
    ckpt_sigv4_query(&b, q, 4);
    CHECK_STR(b.ptr, "a=1&a=2&b=x%20y&uploads=");
    ckpt_buf_release(&b);
}

static void test_sigv4__canonical_layout(void)
{
    struct ckpt_sigv4_hdr h[] = { { "Host", "127.0.0.1:4568" },
                                  { "X-Amz-Date", "20150830T123600Z" } };
    struct ckpt_sigv4_req r = { "GET", "/bkt/k", NULL, 0, h, 2,
                                CKPT_UNSIGNED_PAYLOAD };
    struct ckpt_buf b = CKPT_BUF_INIT, names = CKPT_BUF_INIT;
    ckpt_sigv4_canonical(&b, &names, &r);
    CHECK_STR(b.ptr, "GET\n/bkt/k\n\nhost:127.0.0.1:4568\n"
                     "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
                     "UNSIGNED-PAYLOAD");
    CHECK_STR(names.ptr, "host;x-amz-date");
    ckpt_buf_release(&b);
    ckpt_buf_release(&names);
}

static void test_sigv4__hashes(void)
{
    char hex[65], b64[25], md5[33];
    ckpt_sha256_hex("", 0, hex);
    CHECK_STR(hex, CKPT_SHA256_EMPTY);
    ckpt_md5_b64("abc", 3, b64, md5);
    CHECK_STR(b64, "kAFQmDzST7DWlj99KOF/cg==");
    CHECK_STR(md5, "900150983cd24fb0d6963f7d28e17f72");
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_base64(&b, "\xfb\xff", 2, 1);
    CHECK_STR(b.ptr, "-_8");
    ckpt_buf_release(&b);
    char d[17];
    ckpt_sigv4_date(1440938160, d);
    CHECK_STR(d, "20150830T123600Z");
}

TEST_MAIN(T(test_sigv4__suite), T(test_sigv4__s3_get_object),
          T(test_sigv4__s3_put_object), T(test_sigv4__s3_get_lifecycle),
          T(test_sigv4__s3_list_objects), T(test_sigv4__s3_presigned),
          T(test_sigv4__encoding), T(test_sigv4__canonical_layout),
          T(test_sigv4__hashes))
