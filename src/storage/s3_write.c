/*
 * s3_write.c - streaming writes: one PUT for small objects, multipart
 * upload with several parts in flight for large ones, and the conditional
 * create (If-None-Match: *).
 */
#include "storage_int.h"
#include "s3_int.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

#define MIB (1024ull * 1024)
#define MIN_PART (8 * MIB)           /* S3's floor is 5 MiB */
#define MAX_PARTS 10000ull
#define MAX_OBJECT (5ull << 40)      /* 5 TiB: S3, R2 and GCS all take it */
#define INFLIGHT_BYTES (512 * MIB)   /* part buffers in flight per writer */
#define MAX_INFLIGHT 8
#define SIGNED_BODY_MAX (1 * MIB)    /* hash bodies up to this size */

uint64_t s3_part_size(uint64_t size_hint, uint64_t cfg)
{
    uint64_t total = size_hint == UINT64_MAX ? MAX_OBJECT : size_hint;
    uint64_t need = (total + MAX_PARTS - 1) / MAX_PARTS;
    uint64_t p = cfg ? cfg : MIN_PART;
    if (p < need)
        p = need;
    /* Whole MiB: every part but the last the same size (R2 insists). */
    return (p + MIB - 1) / MIB * MIB;
}

struct part {
    struct s3_job job;
    int num;
    char *data;                 /* owned until the part is done */
    size_t len;
    char md5[25];
    char numstr[16];
};

struct s3_writer {
    struct ckpt_writer base;
    struct ckpt_storage *st;
    char *key;                  /* owned */
    char *what;                 /* owned: for messages */
    uint64_t part_size;
    size_t max_inflight;
    char *buf;                  /* owned: the part being filled */
    size_t len, cap;
    char *upload_id;            /* owned, NULL until multipart starts */
    struct s3_batch batch;
    int batch_live;
    struct part **parts;        /* owned, by part number - 1 */
    size_t nparts;
    uint64_t total;
    int failed;
    struct ckpt_err err;        /* first part failure */
};

/* PUT key with body; extra headers (If-None-Match) from hdr/val. */
static int put_object(struct ckpt_storage *st, const char *key,
                      const char *body, size_t len, const char *hdr,
                      const char *val, struct http_resp *resp,
                      struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "PUT", key);
    char md5[25];
    ckpt_md5_b64(body, len, md5, NULL);
    s3_req_header(&r, "Content-MD5", md5);
    if (hdr)
        s3_req_header(&r, hdr, val);
    /* GCS's own spelling of "create only" (XML API preconditions). */
    struct s3 *s3 = st->impl;
    if (hdr && s3->scheme == CKPT_SCHEME_GS)
        s3_req_header(&r, "x-goog-if-generation-match", "0");
    r.body = body;
    r.body_len = len;
    r.unsigned_payload = len > SIGNED_BODY_MAX;
    char *what = s3_what(st, key);
    int rc = s3_exec(st->impl, &r, resp, what, err);
    free(what);
    return rc;
}

static int start_multipart(struct s3_writer *w, struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "POST", w->key);
    s3_req_param(&r, "uploads", NULL);
    struct http_resp resp;
    http_resp_init(&resp);
    int rc = s3_exec(w->st->impl, &r, &resp, w->what, err);
    struct ckpt_buf id = CKPT_BUF_INIT;
    if (rc == 0 && st_xml_text(resp.body.ptr, resp.body.len, "UploadId",
                               &id) != 0)
        rc = ckpt_err_set(err, CKPT_EHTTP, "%s: CreateMultipartUpload "
                          "reply has no UploadId", w->what);
    if (rc == 0)
        w->upload_id = ckpt_buf_detach(&id, NULL);
    ckpt_buf_release(&id);
    http_resp_release(&resp);
    if (rc == 0) {
        s3_batch_init(&w->batch, w->st->impl);
        w->batch_live = 1;
    }
    return rc;
}

/* Free the data of finished parts; note the first failure. */
static void reap(struct s3_writer *w)
{
    for (size_t i = 0; i < w->nparts; i++) {
        struct part *p = w->parts[i];
        if (!p->job.done || !p->data)
            continue;
        free(p->data);
        p->data = NULL;
        if (p->job.rc != 0 && !w->failed) {
            w->failed = 1;
            w->err = p->job.err;
        }
    }
}

/* Hand the filled buffer to the batch as the next part. */
static int send_part(struct s3_writer *w, struct ckpt_err *err)
{
    if (w->nparts == MAX_PARTS)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: more than %llu "
                            "parts of %llu bytes (the size announced was "
                            "too small)", w->what, MAX_PARTS,
                            (unsigned long long)w->part_size);
    if (!w->upload_id && start_multipart(w, err) != 0)
        return -1;
    struct part *p = ckpt_xcalloc(1, sizeof(*p));
    p->num = (int)w->nparts + 1;
    p->data = w->buf;
    p->len = w->len;
    w->buf = NULL;
    w->len = w->cap = 0;
    w->parts = ckpt_xreallocarray(w->parts, w->nparts + 1, sizeof(*w->parts));
    w->parts[w->nparts++] = p;
    snprintf(p->numstr, sizeof(p->numstr), "%d", p->num);
    ckpt_md5_b64(p->data, p->len, p->md5, NULL);
    s3_job_init(&p->job, "PUT", w->key, ckpt_xasprintf("%s: part %d",
                w->what, p->num));
    s3_req_param(&p->job.req, "partNumber", p->numstr);
    s3_req_param(&p->job.req, "uploadId", w->upload_id);
    s3_req_header(&p->job.req, "Content-MD5", p->md5);
    p->job.req.body = p->data;
    p->job.req.body_len = p->len;
    p->job.req.unsigned_payload = 1;
    /* Bounded memory: wait for a slot before adding. */
    s3_batch_wait(&w->batch, w->max_inflight - 1);
    s3_batch_add(&w->batch, &p->job);
    reap(w);
    if (w->failed) {
        *err = w->err;
        return -1;
    }
    return 0;
}

static int sw_write(struct ckpt_writer *w_, const void *data, size_t len,
                    struct ckpt_err *err)
{
    struct s3_writer *w = (struct s3_writer *)w_;
    const char *p = data;
    if (w->failed) {
        *err = w->err;
        return -1;
    }
    while (len > 0) {
        if (w->len == w->part_size && send_part(w, err) != 0)
            return -1;
        if (w->cap == w->len) {
            /* Grow geometrically up to one part: small objects stay
             * small in memory. */
            size_t want = w->cap ? 2 * w->cap : 64 * 1024;
            if (want > w->part_size)
                want = (size_t)w->part_size;
            w->buf = ckpt_xrealloc(w->buf, want);
            w->cap = want;
        }
        size_t n = w->cap - w->len < len ? w->cap - w->len : len;
        memcpy(w->buf + w->len, p, n);
        w->len += n;
        w->total += n;
        p += n;
        len -= n;
    }
    return 0;
}

static void abort_upload(struct s3_writer *w)
{
    if (!w->upload_id)
        return;
    struct s3_req r;
    s3_req_init(&r, "DELETE", w->key);
    s3_req_param(&r, "uploadId", w->upload_id);
    struct http_resp resp;
    http_resp_init(&resp);
    struct ckpt_err ignored;
    /* Best effort: a lifecycle rule cleans up what this misses. */
    s3_exec(w->st->impl, &r, &resp, w->what, &ignored);
    http_resp_release(&resp);
}

static void sw_free(struct s3_writer *w)
{
    if (w->batch_live)
        s3_batch_release(&w->batch);
    for (size_t i = 0; i < w->nparts; i++) {
        free(w->parts[i]->data);
        s3_job_release(&w->parts[i]->job);
        free(w->parts[i]);
    }
    free(w->parts);
    free(w->buf);
    free(w->upload_id);
    free(w->key);
    free(w->what);
    free(w);
}

static void complete_body(struct s3_writer *w, struct ckpt_buf *b)
{
    ckpt_buf_addstr(b, "<CompleteMultipartUpload>");
    for (size_t i = 0; i < w->nparts; i++) {
        ckpt_buf_addf(b, "<Part><PartNumber>%d</PartNumber><ETag>\"",
                      w->parts[i]->num);
        st_xml_escape(b, w->parts[i]->job.resp.etag);
        ckpt_buf_addstr(b, "\"</ETag></Part>");
    }
    ckpt_buf_addstr(b, "</CompleteMultipartUpload>");
}

/* A retried Complete whose first try succeeded answers NoSuchUpload:
 * accept it when the object is there with our size. */
static int completed_anyway(struct s3_writer *w)
{
    struct ckpt_stat sb;
    struct ckpt_err e2;
    memset(&sb, 0, sizeof(sb));
    return s3_op_stat(w->st, w->key, &sb, &e2) == 0 &&
           sb.type == CKPT_ENTRY_FILE && sb.size == w->total;
}

static int complete(struct s3_writer *w, struct ckpt_err *err)
{
    s3_batch_wait(&w->batch, 0);
    reap(w);
    if (w->failed) {
        *err = w->err;
        return -1;
    }
    struct ckpt_buf body = CKPT_BUF_INIT;
    complete_body(w, &body);
    struct s3_req r;
    s3_req_init(&r, "POST", w->key);
    s3_req_param(&r, "uploadId", w->upload_id);
    s3_req_header(&r, "Content-Type", "application/xml");
    r.body = body.ptr;
    r.body_len = body.len;
    struct http_resp resp;
    http_resp_init(&resp);
    int rc = s3_exec(w->st->impl, &r, &resp, w->what, err);
    if (rc != 0 && strstr(err->msg, "NoSuchUpload") && completed_anyway(w))
        rc = 0;
    http_resp_release(&resp);
    ckpt_buf_release(&body);
    return rc;
}

static int sw_commit(struct ckpt_writer *w_, struct ckpt_err *err)
{
    struct s3_writer *w = (struct s3_writer *)w_;
    int rc;
    if (w->failed) {
        *err = w->err;
        rc = -1;
    } else if (!w->upload_id) {
        struct http_resp resp;
        http_resp_init(&resp);
        rc = put_object(w->st, w->key, w->buf ? w->buf : "", w->len, NULL,
                        NULL, &resp, err);
        http_resp_release(&resp);
    } else {
        rc = w->len ? send_part(w, err) : 0;
        if (rc == 0)
            rc = complete(w, err);
    }
    if (rc != 0) {
        if (w->batch_live) {
            s3_batch_wait(&w->batch, 0);
        }
        abort_upload(w);
    }
    sw_free(w);
    return rc;
}

static void sw_abort(struct ckpt_writer *w_)
{
    struct s3_writer *w = (struct s3_writer *)w_;
    if (w->batch_live)
        s3_batch_wait(&w->batch, 0);
    abort_upload(w);
    sw_free(w);
}

static const struct ckpt_writer_ops s3_writer_ops = {
    sw_write, sw_commit, sw_abort
};

int s3_op_writer_open(struct ckpt_storage *st, const char *key,
                      uint64_t size_hint, struct ckpt_writer **out,
                      struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    struct s3_writer *w = ckpt_xcalloc(1, sizeof(*w));
    w->base.ops = &s3_writer_ops;
    w->st = st;
    w->key = ckpt_xstrdup(key);
    w->what = s3_what(st, key);
    w->part_size = s3_part_size(size_hint, s3->part_size);
    if (size_hint != UINT64_MAX && size_hint > MAX_OBJECT) {
        int rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: %llu bytes is "
                              "more than the 5 TiB an object can hold",
                              w->what, (unsigned long long)size_hint);
        sw_free(w);
        return rc;
    }
    w->max_inflight = (size_t)(INFLIGHT_BYTES / w->part_size);
    if (w->max_inflight < 1)
        w->max_inflight = 1;
    if (w->max_inflight > MAX_INFLIGHT)
        w->max_inflight = MAX_INFLIGHT;
    *out = &w->base;
    return 0;
}

int s3_op_put_if_absent(struct ckpt_storage *st, const char *key,
                        const void *data, size_t len, struct ckpt_err *err)
{
    struct http_resp resp;
    http_resp_init(&resp);
    int rc = put_object(st, key, data, len, "If-None-Match", "*", &resp,
                        err);
    if (rc != 0 && err->code == CKPT_EEXIST) {
        /* After a retry, the 412 may answer our own first attempt, which
         * succeeded unseen: the object then holds exactly our bytes. */
        struct ckpt_stat sb;
        struct ckpt_err e2;
        char hex[33], b64[25];
        ckpt_md5_b64(data, len, b64, hex);
        memset(&sb, 0, sizeof(sb));
        int retried = strstr(err->msg, "attempts") != NULL;
        if (retried && s3_op_stat(st, key, &sb, &e2) == 0 &&
            !strcmp(sb.etag, hex) && sb.size == len) {
            rc = 0;
        } else {
            char *what = s3_what(st, key);
            ckpt_err_set(err, CKPT_EEXIST, "%s: already exists", what);
            err->http_status = 412;
            free(what);
        }
    }
    http_resp_release(&resp);
    return rc;
}
