/*
 * s3_upload.c - uploads driven by the caller (storage.h "Uploads driven
 * by the caller"): single PUTs and multipart parts with Content-MD5 and
 * ckpt's metadata, HEAD with that metadata, ListMultipartUploads, and a
 * way to hand a same-object throttle back to the caller instead of
 * sleeping on it.
 */
#include "storage_int.h"
#include "s3_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckpt/util.h"
#include "ckpt/text.h"

#include <openssl/evp.h>

#define SIGNED_BODY_MAX (1u << 20)   /* hash bodies up to this size */

/* GCS with OAuth speaks its own header names; SigV4 (S3, R2, GCS HMAC)
 * takes x-amz-meta-. */
static const char *meta_prefix(const struct s3 *s3)
{
    return s3->conf.cred->kind == ST_CRED_GCS ? "x-goog-meta-"
                                              : "x-amz-meta-";
}

/* Header names and values for meta; they must outlive the request. */
struct meta_hdrs {
    char name[3][40];
    char value[3][40];
    int n;
};

static void add_meta(struct s3 *s3, struct s3_req *r, struct meta_hdrs *m,
                     const struct ckpt_obj_meta *meta)
{
    m->n = 0;
    if (!meta)
        return;
    const char *p = meta_prefix(s3);
    if (meta->md5[0]) {
        snprintf(m->name[m->n], sizeof(m->name[0]), "%sckpt-md5", p);
        snprintf(m->value[m->n++], sizeof(m->value[0]), "%s", meta->md5);
    }
    if (meta->part_size) {
        snprintf(m->name[m->n], sizeof(m->name[0]), "%sckpt-part-size", p);
        snprintf(m->value[m->n++], sizeof(m->value[0]), "%llu",
                 (unsigned long long)meta->part_size);
    }
    if (meta->mtime) {
        snprintf(m->name[m->n], sizeof(m->name[0]), "%sckpt-mtime", p);
        snprintf(m->value[m->n++], sizeof(m->value[0]), "%lld",
                 (long long)meta->mtime);
    }
    for (int i = 0; i < m->n; i++)
        s3_req_header(r, m->name[i], m->value[i]);
}

/* R2 (10058) and GCS say so when one object is written too often; the
 * message is the signal, not the code (facts sheet, R2 section). */
static int same_object_throttle(const struct http_resp *resp)
{
    if (resp->curl != CURLE_OK || resp->status < 400)
        return 0;
    struct ckpt_buf msg = CKPT_BUF_INIT;
    s3_error_fields(&resp->body, NULL, &msg);
    int hit = strstr(msg.ptr, "Reduce your concurrent request rate") ||
              strstr(msg.ptr, "rate limit for object mutation") ||
              strstr(msg.ptr, "too quickly");
    ckpt_buf_release(&msg);
    return hit;
}

/* A same-object throttle ends the request at once, res->throttled set,
 * so the caller backs off this object without holding a worker. */
static int throttled(void *ud, const struct http_resp *resp,
                     const char *what, struct ckpt_err *err)
{
    struct ckpt_put_result *res = ud;
    if (!same_object_throttle(resp))
        return 0;
    res->throttled = 1;
    res->retry_after = resp->retry_after;
    ckpt_err_set(err, CKPT_EHTTP, "%s: HTTP %ld: the same object is "
                 "written too often", what, resp->status);
    err->http_status = (int)resp->status;
    return 1;
}

/* s3_exec, except that with CKPT_PUT_THROTTLE_RETURN a same-object
 * throttle fails at once with res->throttled set. */
static int exec_obj(struct s3 *s3, struct s3_req *r, struct http_resp *resp,
                    const char *what, unsigned flags,
                    struct ckpt_put_result *res, struct ckpt_err *err)
{
    int ret = (flags & CKPT_PUT_THROTTLE_RETURN) && res;
    return s3_exec_or_give_up(s3, r, resp, what, ret ? throttled : NULL,
                              res, err);
}

static void res_init(struct ckpt_put_result *res)
{
    if (!res)
        return;
    memset(res, 0, sizeof(*res));
    res->retry_after = -1;
}

static void b64_md5(const unsigned char md5[16], char out[25])
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_base64(&b, md5, 16, 0);
    snprintf(out, 25, "%s", b.ptr);
    ckpt_buf_release(&b);
}

static int plain_md5(const char *etag)
{
    if (strlen(etag) != 32)
        return 0;
    for (int i = 0; i < 32; i++)
        if (ckpt_hexval(etag[i]) < 0)
            return 0;
    return 1;
}

/* After the last attempt still stored other bytes than ours: take that
 * object away again (only if it is still the one we wrote), so nothing
 * reads bytes that were damaged on the way, and no rerun finds them
 * under ckpt's metadata of the bytes meant. */
static int reject_stored(struct ckpt_storage *st, const char *key,
                         const char *etag, const char *hex, int attempts,
                         const char *what, struct ckpt_err *err)
{
    struct ckpt_err e2;
    ckpt_storage_delete_if_match(st, key, etag, &e2);
    return ckpt_err_set(err, CKPT_EHTTP, "%s: DEST reports ETag %s, but "
                        "the bytes sent have MD5 %s (%d attempts)", what,
                        etag, hex, attempts);
}

int s3_up_put(struct ckpt_storage *st, const char *key, const void *data,
              size_t len, const unsigned char md5[16],
              const struct ckpt_obj_meta *meta, unsigned flags,
              struct ckpt_put_result *res, struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    struct s3_req r;
    struct meta_hdrs mh;
    char b64[25];
    res_init(res);
    s3_req_init(&r, "PUT", key);
    b64_md5(md5, b64);
    s3_req_header(&r, "Content-MD5", b64);
    add_meta(s3, &r, &mh, meta);
    r.body = len ? data : "";
    r.body_len = len;
    r.unsigned_payload = len > SIGNED_BODY_MAX;
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    char hex[33];
    for (int k = 0; k < 16; k++)
        snprintf(hex + 2 * k, 3, "%02x", md5[k]);
    int rc;
    for (int attempt = 1;; attempt++) {
        http_resp_release(&resp);
        http_resp_init(&resp);
        rc = exec_obj(s3, &r, &resp, what, flags, res, err);
        if (rc != 0 || !plain_md5(resp.etag) ||
            !strcasecmp(resp.etag, hex))
            break;
        /* Damaged on the way (the service hashed other bytes): the next
         * PUT replaces it, and after the last one it is taken away. */
        if (attempt >= s3->attempts) {
            rc = reject_stored(st, key, resp.etag, hex, attempt, what, err);
            break;
        }
        atomic_fetch_add(&s3->hc.stats.retries, 1);
        http_sleep(http_backoff(attempt, -1));
    }
    if (rc == 0 && res)
        snprintf(res->etag, sizeof(res->etag), "%s", resp.etag);
    free(what);
    http_resp_release(&resp);
    return rc;
}

/* ---- streamed PUT ---- */

int s3_up_put_stream(struct ckpt_storage *st, const char *key,
                     uint64_t size, ckpt_body_fn body, void *ud,
                     const unsigned char md5[16],
                     const struct ckpt_obj_meta *meta, unsigned flags,
                     struct ckpt_put_result *res, struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    struct s3_req r;
    struct meta_hdrs mh;
    struct ckpt_put_result own;
    struct ckpt_err body_err = CKPT_ERR_INIT;
    char b64[25], hex[33];
    if (!res)
        res = &own;
    res_init(res);
    s3_req_init(&r, "PUT", key);
    b64_md5(md5, b64);
    for (int k = 0; k < 16; k++)
        snprintf(hex + 2 * k, 3, "%02x", md5[k]);
    s3_req_header(&r, "Content-MD5", b64);
    add_meta(s3, &r, &mh, meta);
    r.body_fn = body;
    r.body_ud = ud;
    r.body_err = &body_err;
    r.body_len = (size_t)size;
    r.unsigned_payload = 1;  /* Content-MD5 guards the bytes */
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc;
    for (int attempt = 1;; attempt++) {
        http_resp_release(&resp);
        http_resp_init(&resp);
        if ((rc = s3_attempt(s3, &r, &resp, err)) != 0)
            break;
        if (resp.body_failed) {
            *err = body_err;  /* the source, not the service: no retry */
            rc = -1;
            break;
        }
        double delay = 0;
        int v = s3_judge(s3, &resp, attempt, what, &delay, err);
        if (v == 0 && plain_md5(resp.etag) && strcasecmp(resp.etag, hex)) {
            if (attempt >= s3->attempts) {
                rc = reject_stored(st, key, resp.etag, hex, attempt, what,
                                   err);
                break;
            }
            /* Damaged on the way: the next PUT replaces it. */
            atomic_fetch_add(&s3->hc.stats.retries, 1);
            http_sleep(http_backoff(attempt, -1));
            continue;
        }
        if (v <= 0) {
            rc = v;
            break;
        }
        if ((flags & CKPT_PUT_THROTTLE_RETURN) &&
            throttled(res, &resp, what, err)) {
            rc = -1;
            break;
        }
        http_sleep(delay);
    }
    if (rc == 0)
        snprintf(res->etag, sizeof(res->etag), "%s", resp.etag);
    free(what);
    http_resp_release(&resp);
    return rc;
}

int s3_up_start(struct ckpt_storage *st, const char *key,
                const struct ckpt_obj_meta *meta, char **upload_id,
                struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    struct s3_req r;
    struct meta_hdrs mh;
    s3_req_init(&r, "POST", key);
    s3_req_param(&r, "uploads", NULL);
    add_meta(s3, &r, &mh, meta);
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc = s3_exec(s3, &r, &resp, what, err);
    struct ckpt_buf id = CKPT_BUF_INIT;
    if (rc == 0 && (st_xml_text(resp.body.ptr, resp.body.len, "UploadId",
                                &id) != 0 || !id.len))
        rc = ckpt_err_set(err, CKPT_EHTTP, "%s: CreateMultipartUpload "
                          "reply has no UploadId", what);
    if (rc == 0)
        *upload_id = ckpt_buf_detach(&id, NULL);
    ckpt_buf_release(&id);
    free(what);
    http_resp_release(&resp);
    return rc;
}

int s3_up_part(struct ckpt_storage *st, const char *key,
               const char *upload_id, int num, const void *data, size_t len,
               const unsigned char md5[16], unsigned flags,
               struct ckpt_put_result *res, struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    struct s3_req r;
    char b64[25], numstr[16];
    res_init(res);
    snprintf(numstr, sizeof(numstr), "%d", num);
    s3_req_init(&r, "PUT", key);
    s3_req_param(&r, "partNumber", numstr);
    s3_req_param(&r, "uploadId", upload_id);
    b64_md5(md5, b64);
    s3_req_header(&r, "Content-MD5", b64);
    r.body = len ? data : "";
    r.body_len = len;
    r.unsigned_payload = 1;  /* Content-MD5 guards the bytes */
    struct http_resp resp;
    http_resp_init(&resp);
    char *base = s3_what(st, key);
    char *what = ckpt_xasprintf("%s: part %d", base, num);
    int rc = exec_obj(s3, &r, &resp, what, flags, res, err);
    if (rc != 0 && err->code == CKPT_ENOTFOUND)
        ckpt_err_set(err, CKPT_ENOTFOUND, "%s: multipart upload is gone "
                     "(NoSuchUpload)", what);
    if (rc == 0 && res)
        snprintf(res->etag, sizeof(res->etag), "%s", resp.etag);
    free(base);
    free(what);
    http_resp_release(&resp);
    return rc;
}

static void complete_xml(struct ckpt_buf *b, int n, const char *const *etags)
{
    ckpt_buf_addstr(b, "<CompleteMultipartUpload>");
    for (int i = 0; i < n; i++) {
        ckpt_buf_addf(b, "<Part><PartNumber>%d</PartNumber><ETag>\"",
                      i + 1);
        st_xml_escape(b, etags[i]);
        ckpt_buf_addstr(b, "\"</ETag></Part>");
    }
    ckpt_buf_addstr(b, "</CompleteMultipartUpload>");
}

/* The completed object must be there with size bytes; its ETag (when the
 * Complete reply had none) is taken from the HEAD. */
static int check_completed(struct ckpt_storage *st, const char *key,
                           uint64_t size, const char *what,
                           struct ckpt_put_result *res, struct ckpt_err *err)
{
    struct ckpt_stat sb;
    struct ckpt_obj_meta meta;
    if (s3_up_head(st, key, &sb, &meta, err) != 0)
        return -1;
    if (sb.size != size)
        return ckpt_err_set(err, CKPT_EHTTP, "%s: completed object has %llu "
                            "bytes, expected %llu", what,
                            (unsigned long long)sb.size,
                            (unsigned long long)size);
    if (res && !res->etag[0])
        snprintf(res->etag, sizeof(res->etag), "%s", sb.etag);
    return 0;
}

static void strip_quotes(char *s)
{
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        memmove(s, s + 1, n - 2);
        s[n - 2] = '\0';
    }
}

/* md5(binary part MD5s)-N, from the parts' hex ETags; "" if one is no
 * MD5 (then the service's own form cannot be predicted). */
static void composite_of(int n, const char *const *etags, char out[48])
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char d[16], sum[16];
    unsigned int len = 16;
    int ok = c && EVP_DigestInit_ex(c, EVP_md5(), NULL) == 1;
    for (int i = 0; i < n && ok; i++) {
        ok = strlen(etags[i]) == 32;
        for (int k = 0; k < 16 && ok; k++) {
            const char *x = etags[i] + 2 * k;
            int hi = ckpt_hexval(x[0]), lo = ckpt_hexval(x[1]);
            ok = hi >= 0 && lo >= 0;
            d[k] = (unsigned char)(hi << 4 | lo);
        }
        if (ok)
            EVP_DigestUpdate(c, d, 16);
    }
    out[0] = '\0';
    if (ok && EVP_DigestFinal_ex(c, sum, &len) == 1) {
        for (int k = 0; k < 16; k++)
            snprintf(out + 2 * k, 3, "%02x", sum[k]);
        snprintf(out + 32, 16, "-%d", n);
    }
    EVP_MD_CTX_free(c);
}

/* After an attempt whose outcome we never saw, a repeated Complete is
 * refused because the first one worked (S3: NoSuchUpload; s3rver: 500).
 * The object decides: our size, and our composite ETag, or an ETag other
 * than the one the key had before we started (services that answer a
 * plain MD5 for multipart objects). */
static int completed_earlier(struct ckpt_storage *st, const char *key,
                             uint64_t size, const char *want,
                             const struct ckpt_stat *before,
                             struct ckpt_put_result *res)
{
    struct ckpt_stat sb;
    struct ckpt_obj_meta meta;
    struct ckpt_err e2;
    if (s3_up_head(st, key, &sb, &meta, &e2) != 0 || sb.size != size)
        return 0;
    int ours = strchr(sb.etag, '-')
             ? *want && !strcasecmp(sb.etag, want)
             : !before->etag[0] || strcmp(sb.etag, before->etag);
    if (ours && res)
        snprintf(res->etag, sizeof(res->etag), "%s", sb.etag);
    return ours;
}

struct complete {
    struct ckpt_storage *st;
    const char *key, *what;
    uint64_t size;
    char want[48];
    struct ckpt_stat before;
};

static int complete_loop(struct complete *c, struct s3_req *r,
                         struct http_resp *resp, struct ckpt_put_result *res,
                         struct ckpt_err *err)
{
    struct s3 *s3 = c->st->impl;
    int unseen = 0;
    for (int attempt = 1;; attempt++) {
        http_resp_release(resp);
        http_resp_init(resp);
        if (s3_attempt(s3, r, resp, err) != 0)
            return -1;
        int failed = resp->curl != CURLE_OK || resp->status >= 300 ||
                     memmem(resp->body.ptr, resp->body.len, "<Error>", 7);
        if (failed && unseen && (resp->status == 404 ||
                                 resp->status >= 500) &&
            completed_earlier(c->st, c->key, c->size, c->want, &c->before,
                              res))
            return 0;
        double delay = 0;
        int v = s3_judge(s3, resp, attempt, c->what, &delay, err);
        if (v <= 0)
            return v;
        unseen |= resp->curl != CURLE_OK || resp->status >= 500;
        http_sleep(delay);
    }
}

int s3_up_finish(struct ckpt_storage *st, const char *key,
                 const char *upload_id, int nparts, const char *const *etags,
                 uint64_t size, struct ckpt_put_result *res,
                 struct ckpt_err *err)
{
    struct ckpt_buf body = CKPT_BUF_INIT, etag = CKPT_BUF_INIT;
    struct complete c;
    struct ckpt_obj_meta meta;
    struct ckpt_err e2;
    memset(&c, 0, sizeof(c));
    c.st = st;
    c.key = key;
    c.size = size;
    composite_of(nparts, etags, c.want);
    /* What the key held before, to recognise our own completed object
     * if a reply is lost (see completed_earlier). */
    if (s3_up_head(st, key, &c.before, &meta, &e2) != 0)
        memset(&c.before, 0, sizeof(c.before));
    complete_xml(&body, nparts, etags);
    struct s3_req r;
    s3_req_init(&r, "POST", key);
    s3_req_param(&r, "uploadId", upload_id);
    s3_req_header(&r, "Content-Type", "application/xml");
    r.body = body.ptr;
    r.body_len = body.len;
    res_init(res);
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    c.what = what;
    int rc = complete_loop(&c, &r, &resp, res, err);
    if (rc == 0 && res && !res->etag[0] &&
        st_xml_text(resp.body.ptr, resp.body.len, "ETag", &etag) == 0) {
        snprintf(res->etag, sizeof(res->etag), "%s", etag.ptr);
        strip_quotes(res->etag);
    }
    if (rc == 0)
        rc = check_completed(st, key, size, what, res, err);
    free(what);
    ckpt_buf_release(&etag);
    ckpt_buf_release(&body);
    http_resp_release(&resp);
    return rc;
}

int s3_up_abort(struct ckpt_storage *st, const char *key,
                const char *upload_id, struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "DELETE", key);
    s3_req_param(&r, "uploadId", upload_id);
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc = s3_exec(st->impl, &r, &resp, what, err);
    if (rc != 0 && err->code == CKPT_ENOTFOUND)
        rc = 0;  /* NoSuchUpload: already gone */
    free(what);
    http_resp_release(&resp);
    return rc;
}

/* ---- HEAD with metadata: a transfer of our own, to see its headers ---- */

struct head_cap {
    struct http_resp *resp;
    struct ckpt_obj_meta *meta;
};

static int hdr_value(const char *line, size_t n, const char *name,
                     char *out, size_t outlen)
{
    const char *v;
    size_t vl;
    if (!http_header_is(line, n, name, &v, &vl))
        return 0;
    size_t len = vl < outlen - 1 ? vl : outlen - 1;
    memcpy(out, v, len);
    out[len] = '\0';
    return 1;
}

static void meta_header(struct head_cap *c, const char *line, size_t n,
                        const char *prefix)
{
    char name[64], v[64];
    snprintf(name, sizeof(name), "%sckpt-md5", prefix);
    if (hdr_value(line, n, name, v, sizeof(v)) && strlen(v) == 32)
        memcpy(c->meta->md5, v, 33);
    snprintf(name, sizeof(name), "%sckpt-part-size", prefix);
    if (hdr_value(line, n, name, v, sizeof(v)))
        c->meta->part_size = strtoull(v, NULL, 10);
    snprintf(name, sizeof(name), "%sckpt-mtime", prefix);
    if (hdr_value(line, n, name, v, sizeof(v)))
        c->meta->mtime = strtoll(v, NULL, 10);
}

void s3_goog_hash(const char *value, struct ckpt_obj_meta *meta)
{
    char v[256];
    snprintf(v, sizeof(v), "%s", value);
    char *save = NULL;
    for (char *t = strtok_r(v, ",", &save); t; t = strtok_r(NULL, ",",
                                                             &save)) {
        while (*t == ' ')
            t++;
        unsigned char out[64];
        int md5 = !strncmp(t, "md5=", 4), crc = !strncmp(t, "crc32c=", 7);
        const char *b64 = t + (md5 ? 4 : 7);
        int len = md5 || crc ? EVP_DecodeBlock(out, (const unsigned char *)
                                               b64, (int)strlen(b64)) : -1;
        if (md5 && len >= 16 && strlen(b64) == 24)
            for (int k = 0; k < 16; k++)
                snprintf(meta->dest_md5 + 2 * k, 3, "%02x", out[k]);
        if (crc && len >= 4 && strlen(b64) == 8) {
            meta->dest_crc32c = (uint32_t)out[0] << 24 |
                                (uint32_t)out[1] << 16 |
                                (uint32_t)out[2] << 8 | out[3];
            meta->has_crc32c = 1;
        }
    }
}

static void goog_hash(struct head_cap *c, const char *line, size_t n)
{
    char v[256];
    if (hdr_value(line, n, "x-goog-hash", v, sizeof(v)))
        s3_goog_hash(v, c->meta);
}

static size_t head_hdr(char *line, size_t size, size_t nmemb, void *ud)
{
    struct head_cap *c = ud;
    size_t n = size * nmemb;
    char v[256];
    if (n > 5 && !memcmp(line, "HTTP/", 5)) {
        /* A new response: forget what an earlier one said. */
        memset(c->meta, 0, sizeof(*c->meta));
        c->resp->etag[0] = '\0';
        c->resp->content_length = UINT64_MAX;
        c->resp->retry_after = -1;
    } else if (hdr_value(line, n, "ETag", v, sizeof(v))) {
        strip_quotes(v);
        snprintf(c->resp->etag, sizeof(c->resp->etag), "%s", v);
    } else if (hdr_value(line, n, "Content-Length", v, sizeof(v))) {
        c->resp->content_length = strtoull(v, NULL, 10);
    } else if (hdr_value(line, n, "Last-Modified", v, sizeof(v))) {
        time_t t = curl_getdate(v, NULL);
        c->resp->mtime = t > 0 ? t : 0;
    } else if (hdr_value(line, n, "Retry-After", v, sizeof(v))) {
        c->resp->retry_after = strtod(v, NULL);
    } else {
        meta_header(c, line, n, "x-amz-meta-");
        meta_header(c, line, n, "x-goog-meta-");
        goog_hash(c, line, n);
    }
    return n;
}

static int head_attempt(struct s3 *s3, struct s3_req *r,
                        struct http_resp *resp, struct head_cap *cap,
                        struct ckpt_err *err)
{
    struct ckpt_buf url = CKPT_BUF_INIT;
    struct curl_slist *hdrs = NULL;
    if (s3_sign_request(s3, r, &url, &hdrs, err) != 0) {
        ckpt_buf_release(&url);
        return -1;
    }
    struct http_req hr;
    memset(&hr, 0, sizeof(hr));
    hr.method = "HEAD";
    hr.url = url.ptr;
    hr.headers = hdrs;
    CURL *h = http_get_handle(&s3->hc, resp);
    if (h) {
        http_setup(&s3->hc, h, &hr, resp);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, head_hdr);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, cap);
        CURLcode cc = curl_easy_perform(h);
        http_finish(h, cc, resp);
        http_put_handle(&s3->hc, h, cc == CURLE_OK);
    }
    curl_slist_free_all(hdrs);
    ckpt_buf_release(&url);
    return 0;
}

int s3_up_head(struct ckpt_storage *st, const char *key,
               struct ckpt_stat *out, struct ckpt_obj_meta *meta,
               struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    memset(out, 0, sizeof(*out));
    memset(meta, 0, sizeof(*meta));
    struct s3_req r;
    s3_req_init(&r, "HEAD", key);
    struct http_resp resp;
    struct head_cap cap = { &resp, meta };
    char *what = s3_what(st, key);
    int rc;
    for (int attempt = 1;; attempt++) {
        http_resp_init(&resp);
        rc = head_attempt(s3, &r, &resp, &cap, err);
        double delay = 0;
        int v = rc != 0 ? -1 : s3_judge(s3, &resp, attempt, what, &delay,
                                        err);
        if (v <= 0) {
            rc = v;
            break;
        }
        http_resp_release(&resp);
        http_sleep(delay);
    }
    if (rc == 0) {
        out->type = CKPT_ENTRY_FILE;
        out->size = resp.content_length == UINT64_MAX ? 0
                                                      : resp.content_length;
        out->mtime = out->ctime = resp.mtime;
        snprintf(out->etag, sizeof(out->etag), "%s", resp.etag);
    }
    http_resp_release(&resp);
    free(what);
    return rc;
}

/* ---- ListMultipartUploads ---- */

static int parse_uploads(const struct ckpt_buf *xml, ckpt_upload_list_fn fn,
                         void *ud)
{
    size_t pos = 0, n;
    const char *in;
    int rc = 0;
    struct ckpt_buf key = CKPT_BUF_INIT, id = CKPT_BUF_INIT;
    struct ckpt_buf when = CKPT_BUF_INIT;
    while (rc == 0 &&
           st_xml_next(xml->ptr, xml->len, &pos, "Upload", &in, &n) == 0) {
        ckpt_buf_reset(&key);
        ckpt_buf_reset(&id);
        ckpt_buf_reset(&when);
        st_xml_text(in, n, "Key", &key);
        st_xml_text(in, n, "UploadId", &id);
        st_xml_text(in, n, "Initiated", &when);
        if (id.len)
            rc = fn(ud, key.ptr, id.ptr, s3_parse_iso8601(when.ptr));
    }
    ckpt_buf_release(&key);
    ckpt_buf_release(&id);
    ckpt_buf_release(&when);
    return rc;
}

/* One page; *more set when the listing goes on at the markers. */
static int uploads_page(struct ckpt_storage *st, const char *prefix,
                        struct ckpt_buf *kmark, struct ckpt_buf *imark,
                        int *more, ckpt_upload_list_fn fn, void *ud,
                        const char *what, struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "GET", NULL);
    s3_req_param(&r, "uploads", NULL);
    s3_req_param(&r, "prefix", prefix);
    if (kmark->len)
        s3_req_param(&r, "key-marker", kmark->ptr);
    if (imark->len)
        s3_req_param(&r, "upload-id-marker", imark->ptr);
    struct http_resp resp;
    http_resp_init(&resp);
    int rc = s3_exec(st->impl, &r, &resp, what, err);
    if (rc != 0 && (err->http_status == 501 || err->http_status == 405 ||
                    err->http_status == 400))
        err->code = CKPT_EUNSUPPORTED;
    if (rc == 0)
        rc = parse_uploads(&resp.body, fn, ud);
    *more = 0;
    if (rc == 0) {
        struct ckpt_buf t = CKPT_BUF_INIT, k = CKPT_BUF_INIT;
        struct ckpt_buf i = CKPT_BUF_INIT;
        st_xml_text(resp.body.ptr, resp.body.len, "IsTruncated", &t);
        st_xml_text(resp.body.ptr, resp.body.len, "NextKeyMarker", &k);
        st_xml_text(resp.body.ptr, resp.body.len, "NextUploadIdMarker", &i);
        /* A truncated page whose markers do not move would loop
         * forever, and ending there would take part for all. */
        *more = !strcmp(t.ptr, "true");
        if (*more && !((k.len || i.len) && (strcmp(k.ptr, kmark->ptr) ||
                                            strcmp(i.ptr, imark->ptr))))
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: multipart upload "
                              "listing is truncated but its markers do not "
                              "move: the listing is incomplete", what);
        ckpt_buf_reset(kmark);
        ckpt_buf_reset(imark);
        ckpt_buf_add(kmark, k.ptr, k.len);
        ckpt_buf_add(imark, i.ptr, i.len);
        ckpt_buf_release(&t);
        ckpt_buf_release(&k);
        ckpt_buf_release(&i);
    }
    http_resp_release(&resp);
    return rc;
}

int s3_up_list(struct ckpt_storage *st, const char *prefix,
               ckpt_upload_list_fn fn, void *ud, struct ckpt_err *err)
{
    struct ckpt_buf kmark = CKPT_BUF_INIT, imark = CKPT_BUF_INIT;
    char *what = s3_what(st, prefix);
    int rc, more = 1;
    do {
        rc = uploads_page(st, prefix, &kmark, &imark, &more, fn, ud, what,
                          err);
    } while (rc == 0 && more);
    free(what);
    ckpt_buf_release(&kmark);
    ckpt_buf_release(&imark);
    return rc;
}
