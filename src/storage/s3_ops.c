/*
 * s3_ops.c - stat, list, ranged read and delete on an S3-protocol service.
 */
#include "storage_int.h"
#include "s3_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/util.h"

#define DELETE_BATCH 1000     /* DeleteObjects limit */
#define DELETES_IN_FLIGHT 4   /* batches overlapped with listing */
#define SINGLE_DELETES 16     /* in flight when batches are refused */

int64_t s3_parse_iso8601(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end)
        return 0;
    return (int64_t)timegm(&tm);
}

/* ---- listing ---- */

typedef int (*obj_fn)(void *ud, const char *key, uint64_t size,
                      int64_t mtime, const char *etag, int is_prefix);

static void strip_quotes(struct ckpt_buf *b)
{
    if (b->len >= 2 && b->ptr[0] == '"' && b->ptr[b->len - 1] == '"') {
        memmove(b->ptr, b->ptr + 1, b->len - 2);
        ckpt_buf_setlen(b, b->len - 2);
    }
}

/* A listed key must lie below the prefix asked for, and its rest must be
 * a plain relative path: no empty component (a "//", a leading "/"), no
 * "." or "..". Callers take the rest as a name below the prefix (and
 * delete the key as listed): a key re-based by length, or a name that
 * means another place locally, would be acted on under a name never
 * listed. A trailing "/" (a directory marker, a common prefix) is
 * allowed. NULL when fine, else what is wrong. */
static const char *bad_key(const char *prefix, const char *key)
{
    size_t n = strlen(prefix);
    if (strncmp(key, prefix, n) != 0)
        return "outside the prefix listed";
    const char *c = key + n;
    while (*c) {
        const char *e = strchr(c, '/');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == 0)
            return "an empty path component ('//' or a leading '/')";
        if ((len == 1 && c[0] == '.') ||
            (len == 2 && c[0] == '.' && c[1] == '.'))
            return "a '.' or '..' component";
        if (!e)
            break;
        c = e + 1;
    }
    return NULL;
}

/* Every <Contents> key and <CommonPrefixes> prefix of one page checked
 * (bad_key) before any of them is reported: one bad key fails the page
 * whole, so nothing acts on part of a listing that lies. */
static int check_page(const struct ckpt_buf *xml, const char *prefix,
                      const char *what, struct ckpt_err *err)
{
    static const char *const tags[2][2] = { { "Contents", "Key" },
                                            { "CommonPrefixes", "Prefix" } };
    struct ckpt_buf key = CKPT_BUF_INIT;
    int rc = 0;
    for (int t = 0; t < 2 && rc == 0; t++) {
        size_t pos = 0, n;
        const char *in;
        while (rc == 0 && st_xml_next(xml->ptr, xml->len, &pos, tags[t][0],
                                      &in, &n) == 0) {
            ckpt_buf_reset(&key);
            st_xml_text(in, n, tags[t][1], &key);
            const char *why = bad_key(prefix, key.ptr);
            if (why)
                rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: the listing "
                                  "returned key '%s', %s; not trusted",
                                  what, key.ptr, why);
        }
    }
    ckpt_buf_release(&key);
    return rc;
}

/* Report every <Contents> and <CommonPrefixes> of one page to fn. */
static int parse_page(const struct ckpt_buf *xml, obj_fn fn, void *ud)
{
    size_t pos = 0, n;
    const char *in;
    struct ckpt_buf key = CKPT_BUF_INIT, v = CKPT_BUF_INIT;
    struct ckpt_buf etag = CKPT_BUF_INIT;
    int rc = 0;
    while (rc == 0 &&
           st_xml_next(xml->ptr, xml->len, &pos, "Contents", &in, &n) == 0) {
        ckpt_buf_reset(&key);
        ckpt_buf_reset(&v);
        ckpt_buf_reset(&etag);
        st_xml_text(in, n, "Key", &key);
        st_xml_text(in, n, "ETag", &etag);
        strip_quotes(&etag);
        uint64_t size = 0;
        if (st_xml_text(in, n, "Size", &v) == 0)
            size = strtoull(v.ptr, NULL, 10);
        ckpt_buf_reset(&v);
        int64_t mtime = 0;
        if (st_xml_text(in, n, "LastModified", &v) == 0)
            mtime = s3_parse_iso8601(v.ptr);
        rc = fn(ud, key.ptr, size, mtime, etag.ptr, 0);
    }
    pos = 0;
    while (rc == 0 && st_xml_next(xml->ptr, xml->len, &pos, "CommonPrefixes",
                                  &in, &n) == 0) {
        ckpt_buf_reset(&key);
        st_xml_text(in, n, "Prefix", &key);
        rc = fn(ud, key.ptr, 0, 0, "", 1);
    }
    ckpt_buf_release(&key);
    ckpt_buf_release(&v);
    ckpt_buf_release(&etag);
    return rc;
}

/* Where the listing goes on, from one page: 0 at its end, 1 with *next
 * the token of the next page, -1 (err) when the page says there is more
 * but gives no token, or one already used (a service that loops, or
 * lies): the listing is incomplete and must not be taken for all. */
static int next_page(const struct ckpt_buf *xml, char *const *used,
                     size_t nused, struct ckpt_buf *next, const char *what,
                     struct ckpt_err *err)
{
    struct ckpt_buf trunc = CKPT_BUF_INIT;
    int rc = 0;
    st_xml_text(xml->ptr, xml->len, "IsTruncated", &trunc);
    st_xml_text(xml->ptr, xml->len, "NextContinuationToken", next);
    if (trunc.len && strcmp(trunc.ptr, "true") && strcmp(trunc.ptr, "false"))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: listing page says "
                          "IsTruncated '%s'; not trusted", what, trunc.ptr);
    else if (!strcmp(trunc.ptr, "true") && !next->len)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: listing page is "
                          "truncated but gives no continuation token: the "
                          "listing is incomplete", what);
    else if (!strcmp(trunc.ptr, "true"))
        rc = 1;
    for (size_t i = 0; rc == 1 && i < nused; i++)
        if (!strcmp(used[i], next->ptr))
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: listing page is "
                              "truncated but gives a continuation token "
                              "already used: the listing is incomplete",
                              what);
    ckpt_buf_release(&trunc);
    return rc;
}

int s3_list_check(const struct ckpt_buf *xml, const char *prefix,
                  char *const *used, size_t nused, struct ckpt_buf *next,
                  const char *what, struct ckpt_err *err)
{
    int more = next_page(xml, used, nused, next, what, err);
    if (more < 0 || check_page(xml, prefix, what, err) != 0)
        return -1;
    return more;
}

/* ListObjectsV2 over every page below prefix (max_keys: one page of at
 * most that many). Returns 0, -1 (err), or the callback's stop value.
 * A page is checked whole (check_page, next_page) before any of its keys
 * is reported: a listing that cannot be trusted to be complete and below
 * the prefix fails, never ends as if it were. */
static int list_objects(struct ckpt_storage *st, const char *prefix,
                        int delimit, const char *max_keys, obj_fn fn,
                        void *ud, struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    struct ckpt_buf token = CKPT_BUF_INIT;
    char **used = NULL;         /* tokens sent so far */
    size_t nused = 0;
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, prefix);
    int rc = 0;
    for (;;) {
        struct s3_req r;
        s3_req_init(&r, "GET", NULL);
        s3_req_param(&r, "list-type", "2");
        s3_req_param(&r, "prefix", prefix);
        s3_req_param(&r, "max-keys", max_keys ? max_keys : "1000");
        if (delimit)
            s3_req_param(&r, "delimiter", "/");
        if (token.len)
            s3_req_param(&r, "continuation-token", token.ptr);
        rc = s3_exec(s3, &r, &resp, what, err);
        if (rc != 0)
            break;
        struct ckpt_buf next = CKPT_BUF_INIT;
        int more = max_keys ? check_page(&resp.body, prefix, what, err)
                            : s3_list_check(&resp.body, prefix, used, nused,
                                            &next, what, err);
        rc = more < 0 ? -1 : 0;
        if (rc == 0)
            rc = parse_page(&resp.body, fn, ud);
        if (token.len) {
            used = ckpt_xreallocarray(used, nused + 1, sizeof(*used));
            used[nused++] = ckpt_buf_detach(&token, NULL);
        }
        ckpt_buf_release(&token);
        token = next;
        if (rc != 0 || more != 1)
            break;
    }
    if (rc == -1 && err->code == CKPT_ENOTFOUND)
        ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no such bucket", what);
    for (size_t i = 0; i < nused; i++)
        free(used[i]);
    free(used);
    free(what);
    ckpt_buf_release(&token);
    http_resp_release(&resp);
    return rc;
}

static char *dir_prefix(const char *dir)
{
    return *dir ? ckpt_xasprintf("%s/", dir) : ckpt_xstrdup("");
}

struct list_ctx {
    size_t plen;
    ckpt_list_fn fn;
    void *ud;
    int recursive;
    size_t seen;
};

static int list_one(void *ud, const char *key, uint64_t size, int64_t mtime,
                    const char *etag, int is_prefix)
{
    struct list_ctx *c = ud;
    const char *name = key + c->plen;
    size_t n = strlen(name);
    c->seen++;
    /* "dir/" marker objects (consoles create them) are not files. */
    if (n == 0 || (!is_prefix && name[n - 1] == '/'))
        return 0;
    char *nm = ckpt_xstrndup(name, is_prefix ? n - 1 : n);
    struct ckpt_entry e = {
        .name = nm, .size = size, .mtime = mtime,
        .type = is_prefix ? CKPT_ENTRY_DIR : CKPT_ENTRY_FILE, .etag = etag,
        .ctime = mtime,
    };
    int rc = c->fn(c->ud, &e);
    free(nm);
    return rc;
}

int s3_op_list(struct ckpt_storage *st, const char *dir, unsigned flags,
               ckpt_list_fn fn, void *ud, struct ckpt_err *err)
{
    char *prefix = dir_prefix(dir);
    struct list_ctx c = { strlen(prefix), fn, ud,
                          (flags & CKPT_LIST_RECURSIVE) != 0, 0 };
    int rc = list_objects(st, prefix, !c.recursive, NULL, list_one, &c, err);
    /* Like a missing local directory: nothing at all under the prefix. */
    if (rc == 0 && c.seen == 0 && *dir) {
        char *what = s3_what(st, dir);
        rc = ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no such object or "
                          "prefix", what);
        free(what);
    }
    free(prefix);
    return rc;
}

/* ---- stat ---- */

static int any_object(void *ud, const char *key, uint64_t size,
                      int64_t mtime, const char *etag, int is_prefix)
{
    *(int *)ud = 1;
    return 0;
}

/* 1 if objects exist below key/, 0 if not, -1 on error. */
static int is_prefix(struct ckpt_storage *st, const char *key,
                     struct ckpt_err *err)
{
    char *prefix = dir_prefix(key);
    int found = 0;
    int rc = list_objects(st, prefix, 1, "1", any_object, &found, err);
    free(prefix);
    return rc != 0 ? -1 : found;
}

/* Codes no request with these credentials can get past. */
static int fatal_refusal(const char *code)
{
    static const char *const fatal[] = {
        "NoSuchBucket", "InvalidAccessKeyId", "SignatureDoesNotMatch",
        "ExpiredToken", "TokenRefreshRequired", "InvalidToken",
        "RequestTimeTooSkewed",
    };
    for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
        if (!strcmp(code, fatal[i]))
            return 1;
    return 0;
}

int s3_op_probe(struct ckpt_storage *st, const char *key,
                struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    char *prefix = dir_prefix(key);
    char *what = s3_what(st, key);
    struct s3_req r;
    s3_req_init(&r, "GET", NULL);
    s3_req_param(&r, "list-type", "2");
    s3_req_param(&r, "prefix", prefix);
    s3_req_param(&r, "max-keys", "1");
    struct http_resp resp;
    http_resp_init(&resp);
    int rc = s3_exec(s3, &r, &resp, what, err);
    if (rc != 0 && resp.curl == CURLE_OK) {
        struct ckpt_buf code = CKPT_BUF_INIT;
        s3_error_fields(&resp.body, &code, NULL);
        if (!strcmp(code.ptr, "NoSuchBucket"))
            ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no such bucket", what);
        else if (!fatal_refusal(code.ptr))
            rc = 0;
        ckpt_buf_release(&code);
    }
    if (rc == 0)
        ckpt_err_clear(err);
    http_resp_release(&resp);
    free(what);
    free(prefix);
    return rc;
}

/* A refused HEAD has no body, so no error code says why: ask for the
 * object's first byte, whose refusal has one (SignatureDoesNotMatch,
 * AccessDenied, ExpiredToken ...), and report that instead. */
static void refusal_code(struct s3 *s3, const char *key, const char *what,
                         struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "GET", key);
    s3_req_header(&r, "Range", "bytes=0-0");
    struct http_resp resp;
    http_resp_init(&resp);
    struct ckpt_err e2 = CKPT_ERR_INIT;
    if (s3_exec(s3, &r, &resp, what, &e2) != 0 && e2.http_status &&
        e2.code == err->code)
        *err = e2;
    http_resp_release(&resp);
}

int s3_op_stat(struct ckpt_storage *st, const char *key,
               struct ckpt_stat *out, struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    if (!*key) {
        /* The bucket itself: a directory if we can list it. */
        out->type = CKPT_ENTRY_DIR;
        return is_prefix(st, key, err) < 0 ? -1 : 0;
    }
    struct s3_req r;
    s3_req_init(&r, "HEAD", key);
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc = s3_exec(s3, &r, &resp, what, err);
    if (rc == 0) {
        out->type = CKPT_ENTRY_FILE;
        out->size = resp.content_length == UINT64_MAX ? 0
                                                      : resp.content_length;
        out->mtime = out->ctime = resp.mtime;
        snprintf(out->etag, sizeof(out->etag), "%s", resp.etag);
    } else if (err->http_status == 400 || err->http_status == 401 ||
               err->http_status == 403) {
        refusal_code(s3, key, what, err);
    } else if (err->code == CKPT_ENOTFOUND) {
        int p = is_prefix(st, key, err);
        if (p == 1) {
            out->type = CKPT_ENTRY_DIR;
            rc = 0;
        } else if (p == 0) {
            ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no such object or "
                         "prefix", what);
            err->http_status = 404;
        }
    }
    free(what);
    http_resp_release(&resp);
    return rc;
}

/* ---- ranged read ---- */

struct rd {
    char range[64];
    char if_match[84];
    size_t done;
};

/* If-Match failed: the object is no longer the one the read is of. */
static int changed(struct ckpt_err *err, const char *what, const char *tag)
{
    ckpt_err_set(err, CKPT_EHTTP, "'%s' changed during read (its ETag is "
                 "no longer %s)", what, tag);
    err->http_status = 412;
    return -1;
}

/* One attempt at the rest of the range. Returns 0 done, 1 retry after
 * *delay, -1 failed. */
static int read_attempt(struct ckpt_storage *st, const char *key,
                        uint64_t off, char *buf, size_t len, struct rd *rd,
                        int attempt, double *delay, const char *what,
                        struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    uint64_t from = off + rd->done, to = off + len - 1;
    snprintf(rd->range, sizeof(rd->range), "bytes=%llu-%llu",
             (unsigned long long)from, (unsigned long long)to);
    struct s3_req r;
    s3_req_init(&r, "GET", key);
    s3_req_header(&r, "Range", rd->range);
    /* A resumed read must see the same object it started on. */
    if (rd->if_match[0])
        s3_req_header(&r, "If-Match", rd->if_match);
    r.sink = buf + rd->done;
    r.sink_cap = len - rd->done;
    r.sink_skip = (size_t)from;
    struct http_resp resp;
    http_resp_init(&resp);
    int v = s3_attempt(s3, &r, &resp, err);
    if (v == 0) {
        rd->done += resp.sink_len;
        if (resp.etag[0] && !rd->if_match[0] && resp.sink_len)
            snprintf(rd->if_match, sizeof(rd->if_match), "\"%s\"",
                     resp.etag);
        if (resp.status == 416 && resp.curl == CURLE_OK)
            v = 0;  /* at or past the end */
        else if (resp.status == 412 && resp.curl == CURLE_OK)
            v = changed(err, what, rd->if_match);
        else
            v = s3_judge(s3, &resp, attempt, what, delay, err);
    }
    http_resp_release(&resp);
    return v;
}

int s3_op_read(struct ckpt_storage *st, const char *key, uint64_t off,
               void *buf, size_t len, size_t *nread, struct ckpt_err *err)
{
    return s3_op_read_if(st, key, NULL, off, buf, len, nread, err);
}

/* With etag, every GET (the first too, not only resumes) carries
 * If-Match: bytes of another version of the object never mix in. */
int s3_op_read_if(struct ckpt_storage *st, const char *key, const char *etag,
                  uint64_t off, void *buf, size_t len, size_t *nread,
                  struct ckpt_err *err)
{
    if (len == 0)
        return 0;
    struct rd rd;
    memset(&rd, 0, sizeof(rd));
    if (etag && *etag)
        snprintf(rd.if_match, sizeof(rd.if_match), "\"%s\"", etag);
    char *what = s3_what(st, key);
    int rc = 0;
    for (int attempt = 1;; attempt++) {
        size_t before = rd.done;
        double delay = 0;
        int v = read_attempt(st, key, off, buf, len, &rd, attempt, &delay,
                             what, err);
        if (v <= 0) {
            rc = v;
            break;
        }
        /* Progress resets the count: a long read on a flaky link resumes
         * from the byte it reached as often as it keeps moving. */
        if (rd.done > before)
            attempt = 0;
        if (rd.done == len)
            break;
        http_sleep(delay);
    }
    free(what);
    *nread = rd.done;
    return rc;
}

/* ---- delete ---- */

int s3_op_del(struct ckpt_storage *st, const char *key,
              struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "DELETE", key);
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc = s3_exec(st->impl, &r, &resp, what, err);
    if (rc != 0 && err->code == CKPT_ENOTFOUND)
        rc = 0; /* already gone */
    free(what);
    http_resp_release(&resp);
    return rc;
}

/* One DeleteObjects batch: the keys and the request built from them. */
struct del_batch {
    struct s3_job job;
    char **keys;              /* owned */
    size_t n;
    struct ckpt_buf body;
    char md5[25];
};

static void del_batch_free(struct del_batch *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->keys[i]);
    free(d->keys);
    ckpt_buf_release(&d->body);
    s3_job_release(&d->job);
    free(d);
}

static void del_batch_build(struct ckpt_storage *st, struct del_batch *d)
{
    ckpt_buf_addstr(&d->body, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
                    "<Delete><Quiet>true</Quiet>");
    for (size_t i = 0; i < d->n; i++) {
        ckpt_buf_addstr(&d->body, "<Object><Key>");
        st_xml_escape(&d->body, d->keys[i]);
        ckpt_buf_addstr(&d->body, "</Key></Object>");
    }
    ckpt_buf_addstr(&d->body, "</Delete>");
    ckpt_md5_b64(d->body.ptr, d->body.len, d->md5, NULL);
    s3_job_init(&d->job, "POST", NULL, s3_what(st, d->keys[0]));
    s3_req_param(&d->job.req, "delete", NULL);
    s3_req_header(&d->job.req, "Content-MD5", d->md5);
    s3_req_header(&d->job.req, "Content-Type", "application/xml");
    d->job.req.body = d->body.ptr;
    d->job.req.body_len = d->body.len;
}

struct tree {
    struct ckpt_storage *st;
    struct s3_batch batch;
    struct del_batch *cur;         /* filling */
    struct del_batch **sent;       /* owned, in flight or done */
    size_t nsent, capsent;
    struct ckpt_err err;
    int failed;
};

/* Single DELETEs of d's keys, SINGLE_DELETES at a time: the fallback for
 * services without DeleteObjects and for keys a batch did not delete. */
static int delete_singly(struct tree *t, char **keys, size_t n)
{
    struct s3_batch b;
    s3_batch_init(&b, t->st->impl);
    struct s3_job *jobs = ckpt_xcalloc(n ? n : 1, sizeof(*jobs));
    for (size_t i = 0; i < n; i++) {
        s3_job_init(&jobs[i], "DELETE", keys[i], s3_what(t->st, keys[i]));
        s3_batch_wait(&b, SINGLE_DELETES - 1);
        s3_batch_add(&b, &jobs[i]);
    }
    s3_batch_release(&b);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].rc != 0 && jobs[i].err.code != CKPT_ENOTFOUND &&
            rc == 0) {
            t->err = jobs[i].err;
            rc = -1;
        }
        s3_job_release(&jobs[i]);
    }
    free(jobs);
    return rc;
}

/* Keys that a 200 DeleteResult lists under <Error>. */
static void failed_keys(const struct ckpt_buf *xml, char ***keys, size_t *n)
{
    size_t pos = 0, len;
    const char *in;
    *n = 0;
    *keys = NULL;
    while (st_xml_next(xml->ptr, xml->len, &pos, "Error", &in, &len) == 0) {
        struct ckpt_buf k = CKPT_BUF_INIT;
        if (st_xml_text(in, len, "Key", &k) == 0) {
            *keys = ckpt_xreallocarray(*keys, *n + 1, sizeof(char *));
            (*keys)[(*n)++] = ckpt_buf_detach(&k, NULL);
        }
        ckpt_buf_release(&k);
    }
}

static int refused(const struct s3_job *j)
{
    if (j->err.http_status == 501)
        return 1;
    /* GCS before DeleteObjects: "400 InvalidArgument". */
    return j->err.http_status == 400 && strstr(j->err.msg, "InvalidArgument");
}

/* Settle a finished batch: fall back or retry singly where needed. */
static void settle(struct tree *t, struct del_batch *d)
{
    struct s3 *s3 = t->st->impl;
    int rc = 0;
    if (d->job.rc != 0 && refused(&d->job)) {
        atomic_store(&s3->no_batch_delete, 1);
        rc = delete_singly(t, d->keys, d->n);
    } else if (d->job.rc != 0) {
        t->err = d->job.err;
        rc = -1;
    } else {
        char **keys;
        size_t n;
        failed_keys(&d->job.resp.body, &keys, &n);
        rc = delete_singly(t, keys, n);
        for (size_t i = 0; i < n; i++)
            free(keys[i]);
        free(keys);
    }
    if (rc != 0)
        t->failed = 1;
}

static void flush(struct tree *t)
{
    struct del_batch *d = t->cur;
    t->cur = NULL;
    if (!d)
        return;
    struct s3 *s3 = t->st->impl;
    if (atomic_load(&s3->no_batch_delete)) {
        if (delete_singly(t, d->keys, d->n) != 0)
            t->failed = 1;
        del_batch_free(d);
        return;
    }
    del_batch_build(t->st, d);
    if (t->nsent == t->capsent) {
        t->capsent = t->capsent ? 2 * t->capsent : 8;
        t->sent = ckpt_xreallocarray(t->sent, t->capsent, sizeof(*t->sent));
    }
    t->sent[t->nsent++] = d;
    s3_batch_wait(&t->batch, DELETES_IN_FLIGHT - 1);
    s3_batch_add(&t->batch, &d->job);
    /* Settle what finished, so memory stays bounded on huge trees. */
    size_t w = 0;
    for (size_t i = 0; i < t->nsent; i++) {
        if (t->sent[i]->job.done) {
            settle(t, t->sent[i]);
            del_batch_free(t->sent[i]);
        } else {
            t->sent[w++] = t->sent[i];
        }
    }
    t->nsent = w;
}

static int tree_key(void *ud, const char *key, uint64_t size, int64_t mtime,
                    const char *etag, int is_prefix)
{
    struct tree *t = ud;
    if (!t->cur)
        t->cur = ckpt_xcalloc(1, sizeof(*t->cur));
    struct del_batch *d = t->cur;
    if (d->n % 64 == 0)
        d->keys = ckpt_xreallocarray(d->keys, d->n + 64, sizeof(char *));
    d->keys[d->n++] = ckpt_xstrdup(key);
    if (d->n == DELETE_BATCH)
        flush(t);
    return t->failed ? 1 : 0;
}

/* Send what is left in the batch, wait for every batch and settle it. */
static int tree_finish(struct tree *t, struct ckpt_err *err)
{
    flush(t);
    s3_batch_wait(&t->batch, 0);
    for (size_t i = 0; i < t->nsent; i++) {
        settle(t, t->sent[i]);
        del_batch_free(t->sent[i]);
    }
    free(t->sent);
    s3_batch_release(&t->batch);
    if (t->failed) {
        *err = t->err;
        return -1;
    }
    return 0;
}

int s3_op_delete_keys(struct ckpt_storage *st, const char *dir,
                      char *const *keys, size_t n, struct ckpt_err *err)
{
    (void)dir; /* objects have no directories to remove */
    struct tree t;
    memset(&t, 0, sizeof(t));
    t.st = st;
    s3_batch_init(&t.batch, st->impl);
    for (size_t i = 0; i < n && !t.failed; i++)
        tree_key(&t, keys[i], 0, 0, "", 0);
    return tree_finish(&t, err);
}

int s3_op_delete_tree(struct ckpt_storage *st, const char *dir,
                      struct ckpt_err *err)
{
    struct tree t;
    memset(&t, 0, sizeof(t));
    t.st = st;
    s3_batch_init(&t.batch, st->impl);
    char *prefix = dir_prefix(dir);
    /* Deleting while listing is safe: the continuation token names the
     * last key returned, not a position. */
    int rc = list_objects(st, prefix, 0, NULL, tree_key, &t, err);
    /* A listing that failed is not the tree: keys of its pages not yet
     * sent stay (the batches sent were of pages checked whole). */
    if (rc == -1 && t.cur) {
        del_batch_free(t.cur);
        t.cur = NULL;
    }
    struct ckpt_err ferr = CKPT_ERR_INIT;
    int frc = tree_finish(&t, &ferr);
    free(prefix);
    if (rc == -1)
        return -1;
    if (frc != 0) {
        *err = ferr;
        return -1;
    }
    return *dir ? s3_op_del(st, dir, err) : 0;
}
