/*
 * s3.c - the object-storage backend for s3://, r2:// and gs://: one S3
 * protocol client. This file opens a storage, builds and signs requests,
 * judges responses and retries; s3_ops.c and s3_write.c hold the
 * operations. docs/storage.md describes the behaviour users see.
 */
#include "storage_int.h"
#include "s3_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/util.h"

#define DEFAULT_ATTEMPTS 10

char *s3_what(const struct ckpt_storage *st, const char *key)
{
    return ckpt_loc_format(&st->loc, key ? key : "");
}

void s3_req_init(struct s3_req *r, const char *method, const char *key)
{
    memset(r, 0, sizeof(*r));
    r->method = method;
    r->key = key;
}

void s3_req_param(struct s3_req *r, const char *name, const char *value)
{
    if (r->nq < S3_MAX_PARAMS)
        r->q[r->nq++] = (struct ckpt_sigv4_param){ name, value };
}

void s3_req_header(struct s3_req *r, const char *name, const char *value)
{
    if (r->nh < S3_MAX_HDRS)
        r->h[r->nh++] = (struct ckpt_sigv4_hdr){ name, value };
}

/* Raw (unencoded) request path: endpoint base, bucket unless it is in the
 * host name, key. */
static void raw_path(struct s3 *s3, const struct s3_req *r,
                     struct ckpt_buf *out)
{
    ckpt_buf_addstr(out, s3->base_path);
    if (!s3->conf.virtual_host)
        ckpt_buf_addf(out, "/%s", s3->bucket);
    ckpt_buf_addch(out, '/');
    if (r->key)
        ckpt_buf_addstr(out, r->key);
}

static struct curl_slist *add_hdr(struct curl_slist *l, const char *name,
                                  const char *value)
{
    char *line = ckpt_xasprintf("%s: %s", name, value);
    struct curl_slist *n = curl_slist_append(l, line);
    free(line);
    if (!n)
        ckpt_die_oom("adding an HTTP header");
    return n;
}

static const char *payload_hash(struct s3_req *r)
{
    if (r->unsigned_payload)
        return CKPT_UNSIGNED_PAYLOAD;
    if (!r->payload_hash[0])
        ckpt_sha256_hex(r->body ? r->body : "", r->body_len, r->payload_hash);
    return r->payload_hash;
}

/* Sign with SigV4: returns the header list (caller frees). */
static struct curl_slist *sign_v4(struct s3 *s3, struct s3_req *r,
                                  const char *path,
                                  const struct st_keys *k)
{
    char date[17];
    ckpt_sigv4_date(time(NULL), date);
    const char *ph = payload_hash(r);
    struct ckpt_sigv4_hdr h[S3_MAX_HDRS + 4];
    size_t n = 0;
    h[n++] = (struct ckpt_sigv4_hdr){ "host", s3->host };
    h[n++] = (struct ckpt_sigv4_hdr){ "x-amz-date", date };
    h[n++] = (struct ckpt_sigv4_hdr){ "x-amz-content-sha256", ph };
    if (k->token)
        h[n++] = (struct ckpt_sigv4_hdr){ "x-amz-security-token", k->token };
    for (size_t i = 0; i < r->nh; i++)
        h[n++] = r->h[i];
    struct ckpt_sigv4_req sr = { r->method, path, r->q, r->nq, h, n, ph };
    struct ckpt_sigv4_key key = { k->ak, k->sk, s3->conf.region, "s3" };
    struct ckpt_buf auth = CKPT_BUF_INIT;
    ckpt_sigv4_authorization(&auth, NULL, &sr, &key, date);
    struct curl_slist *l = NULL;
    for (size_t i = 0; i < n; i++)
        l = add_hdr(l, h[i].name, h[i].value);
    l = add_hdr(l, "Authorization", auth.ptr);
    ckpt_buf_release(&auth);
    return l;
}

/* Build URL and headers for one attempt. 0, or -1 (OAuth token failed). */
void s3_url(struct s3 *s3, const struct s3_req *r, struct ckpt_buf *url)
{
    struct ckpt_buf path = CKPT_BUF_INIT;
    raw_path(s3, r, &path);
    ckpt_buf_addstr(url, s3->scheme_host);
    ckpt_sigv4_encode(url, path.ptr, path.len, 1);
    if (r->nq) {
        /* The canonical query string is a valid query string. */
        ckpt_buf_addch(url, '?');
        ckpt_sigv4_query(url, r->q, r->nq);
    }
    ckpt_buf_release(&path);
}

static int build(struct s3 *s3, struct s3_req *r, struct ckpt_buf *url,
                 struct curl_slist **hdrs, struct ckpt_err *err)
{
    struct st_keys k;
    if (st_cred_get(s3->conf.cred, &s3->hc, s3->attempts, &k, err) != 0) {
        /* (A refresh that failed once the keys expired.) */
        ckpt_err_prefix(err, "%s%s/%s", ckpt_scheme_prefix(s3->scheme),
                        s3->bucket, r->key ? r->key : "");
        return -1;
    }
    struct ckpt_buf path = CKPT_BUF_INIT;
    raw_path(s3, r, &path);
    s3_url(s3, r, url);
    struct curl_slist *l;
    if (!k.ak) {
        /* A bearer token (Google OAuth). */
        l = add_hdr(NULL, "Host", s3->host);
        char *b = ckpt_xasprintf("Bearer %s", k.token);
        l = add_hdr(l, "Authorization", b);
        memset(b, 0, strlen(b));
        free(b);
        for (size_t i = 0; i < r->nh; i++)
            l = add_hdr(l, r->h[i].name, r->h[i].value);
    } else {
        l = sign_v4(s3, r, path.ptr, &k);
    }
    st_keys_release(&k);
    ckpt_buf_release(&path);
    /* No 100-continue round trip; no curl-chosen Content-Type. */
    l = add_hdr(l, "Expect", "");
    l = curl_slist_append(l, "Content-Type:");
    *hdrs = l;
    return 0;
}

static void fill_http_req(struct http_req *hr, const struct s3_req *r,
                          const char *url, struct curl_slist *hdrs)
{
    memset(hr, 0, sizeof(*hr));
    hr->method = r->method;
    hr->url = url;
    hr->headers = hdrs;
    hr->body = r->body;
    hr->body_len = r->body_len;
    hr->body_fn = r->body_fn;
    hr->body_ud = r->body_ud;
    hr->body_err = r->body_err;
    hr->sink = r->sink;
    hr->sink_cap = r->sink_cap;
    hr->sink_skip = r->sink_skip;
}

int s3_attempt(struct s3 *s3, struct s3_req *r, struct http_resp *resp,
               struct ckpt_err *err)
{
    struct ckpt_buf url = CKPT_BUF_INIT;
    struct curl_slist *hdrs = NULL;
    if (build(s3, r, &url, &hdrs, err) != 0) {
        ckpt_buf_release(&url);
        return -1;
    }
    struct http_req hr;
    fill_http_req(&hr, r, url.ptr, hdrs);
    http_perform(&s3->hc, &hr, resp);
    curl_slist_free_all(hdrs);
    ckpt_buf_release(&url);
    return 0;
}

void s3_error_fields(const struct ckpt_buf *body, struct ckpt_buf *code,
                     struct ckpt_buf *msg)
{
    size_t pos = 0, n;
    const char *in;
    if (st_xml_next(body->ptr, body->len, &pos, "Error", &in, &n) != 0)
        return;
    if (code)
        st_xml_text(in, n, "Code", code);
    if (msg)
        st_xml_text(in, n, "Message", msg);
}

static int status_code(long status)
{
    switch (status) {
    case 404: return CKPT_ENOTFOUND;
    case 401: case 403: return CKPT_EAUTH;
    case 412: return CKPT_EEXIST;
    default: return CKPT_EHTTP;
    }
}

/* An S3 error code is a short word ("NoSuchKey", "SlowDown"); anything
 * else in <Code> is not repeated: a server may quote the request there,
 * signature and session token included. */
static int plain_code(const char *code)
{
    size_t n = strlen(code);
    if (n == 0 || n > 64)
        return 0;
    for (; *code; code++)
        if (!isalnum((unsigned char)*code) && *code != '.')
            return 0;
    return 1;
}

/* What a refusal's code tells the user to check, after ": ", or "".
 * The codes are S3's (and GCS's XML API's); a HEAD reply has none. */
static void refusal_hint(const struct s3 *s3, long status, const char *code,
                         char *out, size_t n)
{
    const char *src = s3->conf.cred->source;
    if (!strcmp(code, "SignatureDoesNotMatch"))
        snprintf(out, n, ": the secret key is not the access key ID's "
                 "(credentials from %s)", src);
    else if (!strcmp(code, "InvalidAccessKeyId"))
        snprintf(out, n, ": %s knows no such access key ID (credentials "
                 "from %s)", s3->conf.endpoint, src);
    else if (!strcmp(code, "AccessDenied"))
        snprintf(out, n, ": the credentials from %s are not allowed this "
                 "(check the bucket policy and the permissions of their "
                 "user or role)", src);
    else if (!strcmp(code, "ExpiredToken") ||
             !strcmp(code, "TokenRefreshRequired"))
        snprintf(out, n, ": the session token from %s has expired: renew "
                 "it", src);
    else if (!strcmp(code, "InvalidToken"))
        snprintf(out, n, ": the session token from %s is not valid", src);
    else if (!strcmp(code, "RequestTimeTooSkewed"))
        snprintf(out, n, ": this host's clock is more than 15 minutes off "
                 "the service's (check NTP)");
    else if (status == 401 || status == 403)
        snprintf(out, n, ": refused with the credentials from %s (check "
                 "them and their permissions)", src);
    else
        out[0] = '\0';
}

static int fail(const struct s3 *s3, const struct http_resp *resp,
                int attempt, const char *what, const char *code,
                struct ckpt_err *err)
{
    char tries[48] = "";
    if (attempt > 1)
        snprintf(tries, sizeof(tries), " (after %d attempts)", attempt);
    if (resp->curl != CURLE_OK) {
        ckpt_err_set(err, CKPT_ENET, "%s: %s%s", what, resp->curl_msg,
                     tries);
        return -1;
    }
    /* A bucket in another region (301, or 400 AuthorizationHeader-
     * Malformed): say where it is, the one fix the user needs. */
    const char *name = plain_code(code) ? code
                                        : http_status_name(resp->status);
    char hint[320] = "";
    if (resp->bucket_region[0] && (resp->status == 301 ||
                                   resp->status == 400))
        snprintf(hint, sizeof(hint), " (the bucket is in region %s: set "
                 "AWS_REGION)", resp->bucket_region);
    else
        refusal_hint(s3, resp->status, name, hint, sizeof(hint));
    ckpt_err_set(err, status_code(resp->status), "%s: HTTP %ld %s%s%s",
                 what, resp->status, name, hint, tries);
    err->http_status = (int)resp->status;
    return -1;
}

/* 1 if the document's root element is <Error>: a 2xx can carry one
 * (CompleteMultipartUpload, after whitespace keep-alives), while a
 * DeleteResult's per-key <Error> elements are not a failed request. */
static int root_is_error(const struct ckpt_buf *body)
{
    const char *p = body->ptr, *end = body->ptr + body->len;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' ||
                           *p == '\t'))
            p++;
        if (end - p >= 2 && p[0] == '<' && p[1] == '?') {
            const char *q = memchr(p, '>', (size_t)(end - p));
            if (!q)
                return 0;
            p = q + 1;
            continue;
        }
        return end - p >= 7 && !memcmp(p, "<Error>", 7);
    }
}

int s3_judge(struct s3 *s3, const struct http_resp *resp, int attempt,
             const char *what, double *delay, struct ckpt_err *err)
{
    int ok = resp->curl == CURLE_OK && resp->status >= 200 &&
             resp->status < 300;
    if (ok && !root_is_error(&resp->body))
        return 0;
    struct ckpt_buf code = CKPT_BUF_INIT, msg = CKPT_BUF_INIT;
    s3_error_fields(&resp->body, &code, &msg);
    /* A 2xx <Error> is retried on its code alone (InternalError...). */
    int retry = http_retryable(resp, code.ptr, msg.ptr) &&
                attempt < s3->attempts;
    if (retry) {
        *delay = http_backoff(attempt, resp->retry_after);
        atomic_fetch_add(&s3->hc.stats.retries, 1);
        http_tell_retry(&s3->hc, what, attempt, s3->attempts, *delay, resp,
                        plain_code(code.ptr)
                            ? code.ptr : http_status_name(resp->status));
    } else {
        fail(s3, resp, attempt, what, code.ptr, err);
    }
    ckpt_buf_release(&code);
    ckpt_buf_release(&msg);
    return retry ? 1 : -1;
}

int s3_exec_or_give_up(struct s3 *s3, struct s3_req *r,
                       struct http_resp *resp, const char *what,
                       s3_give_up_fn give_up, void *ud,
                       struct ckpt_err *err)
{
    for (int attempt = 1;; attempt++) {
        http_resp_release(resp);
        http_resp_init(resp);
        if (s3_attempt(s3, r, resp, err) != 0)
            return -1;
        double delay = 0;
        int v = s3_judge(s3, resp, attempt, what, &delay, err);
        if (v <= 0)
            return v;
        if (give_up && give_up(ud, resp, what, err))
            return -1;
        http_sleep(delay);
    }
}

int s3_exec(struct s3 *s3, struct s3_req *r, struct http_resp *resp,
            const char *what, struct ckpt_err *err)
{
    return s3_exec_or_give_up(s3, r, resp, what, NULL, NULL, err);
}

/* ---- batches: many requests on one thread ---- */

void s3_job_init(struct s3_job *j, const char *method, const char *key,
                 char *what)
{
    memset(j, 0, sizeof(*j));
    s3_req_init(&j->req, method, key);
    http_resp_init(&j->resp);
    ckpt_buf_init(&j->url);
    j->what = what;
}

void s3_job_release(struct s3_job *j)
{
    http_resp_release(&j->resp);
    ckpt_buf_release(&j->url);
    curl_slist_free_all(j->hdrs);
    free(j->what);
    j->hdrs = NULL;
    j->what = NULL;
}

void s3_batch_init(struct s3_batch *b, struct s3 *s3)
{
    memset(b, 0, sizeof(*b));
    b->s3 = s3;
    /* NULL when libcurl cannot start: then each job fails in start(). */
    b->m = curl_multi_init();
}

void s3_batch_release(struct s3_batch *b)
{
    s3_batch_wait(b, 0);
    curl_multi_cleanup(b->m);
    free(b->jobs);
}

/* Sign and start the next attempt of j now. */
static void start(struct s3_batch *b, struct s3_job *j)
{
    j->attempt++;
    http_resp_release(&j->resp);
    http_resp_init(&j->resp);
    ckpt_buf_reset(&j->url);
    curl_slist_free_all(j->hdrs);
    j->hdrs = NULL;
    if (build(b->s3, &j->req, &j->url, &j->hdrs, &j->err) != 0) {
        j->rc = -1;
        j->done = 1;
        return;
    }
    struct http_req hr;
    fill_http_req(&hr, &j->req, j->url.ptr, j->hdrs);
    j->h = b->m ? http_get_handle(&b->s3->hc, &j->resp) : NULL;
    if (!j->h) {
        j->rc = ckpt_err_set(&j->err, CKPT_ENET, "%s: cannot start a "
                             "transfer (%s failed)", j->what, b->m
                             ? "curl_easy_init" : "curl_multi_init");
        j->done = 1;
        return;
    }
    j->hreq = hr;
    http_setup(&b->s3->hc, j->h, &j->hreq, &j->resp);
    curl_easy_setopt(j->h, CURLOPT_PRIVATE, j);
    curl_multi_add_handle(b->m, j->h);
}

void s3_batch_add(struct s3_batch *b, struct s3_job *j)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->jobs = ckpt_xreallocarray(b->jobs, b->cap, sizeof(*b->jobs));
    }
    b->jobs[b->n++] = j;
    j->done = 0;
    j->attempt = 0;
    start(b, j);
}

/* A transfer finished: judge it, retry later or mark the job done. */
static void finished(struct s3_batch *b, CURL *h, CURLcode cc)
{
    struct s3_job *j = NULL;
    curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&j);
    curl_multi_remove_handle(b->m, h);
    http_finish(h, cc, &j->resp);
    http_put_handle(&b->s3->hc, h, cc == CURLE_OK);
    j->h = NULL;
    double delay = 0;
    int v = s3_judge(b->s3, &j->resp, j->attempt, j->what, &delay, &j->err);
    if (v == 1) {
        j->not_before = ckpt_now() + delay;
        return;
    }
    j->rc = v;
    j->done = 1;
}

/* Drop done jobs from the list; start retries that are due. Returns the
 * seconds until the next due retry (or 1). */
static double sweep(struct s3_batch *b)
{
    double now = ckpt_now(), next = 1.0;
    size_t w = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct s3_job *j = b->jobs[i];
        if (j->done)
            continue;
        if (!j->h && j->not_before <= now)
            start(b, j);
        else if (!j->h && j->not_before - now < next)
            next = j->not_before - now;
        if (!j->done)
            b->jobs[w++] = j;
    }
    b->n = w;
    return next;
}

void s3_batch_wait(struct s3_batch *b, size_t left)
{
    for (;;) {
        double next = sweep(b);
        if (b->n <= left)
            return;
        int running = 0;
        curl_multi_perform(b->m, &running);
        CURLMsg *msg;
        int q, got = 0;
        while ((msg = curl_multi_info_read(b->m, &q)) != NULL) {
            if (msg->msg == CURLMSG_DONE) {
                finished(b, msg->easy_handle, msg->data.result);
                got = 1;
            }
        }
        /* Something finished: re-sweep before sleeping, or a retry due
         * now (or a caller waiting for this job) would wait a poll. */
        if (got)
            continue;
        int ms = (int)(next * 1000) + 1;
        curl_multi_poll(b->m, NULL, 0, ms > 1000 ? 1000 : ms, NULL);
    }
}

/* ---- open ---- */

/* Split the endpoint into what curl is given and what Host it sends. */
int s3_parse_endpoint(struct s3 *s3, const char *display,
                      struct ckpt_err *err)
{
    const char *ep = s3->conf.endpoint;
    int https = !strncmp(ep, "https://", 8);
    const char *auth = ep + (https ? 8 : 7);
    const char *slash = strchr(auth, '/');
    size_t alen = slash ? (size_t)(slash - auth) : strlen(auth);
    if (alen == 0)
        return ckpt_err_set(err, CKPT_EUSAGE, "%s: endpoint '%s' has no "
                            "host", display, ep);
    char *hostport = ckpt_xstrndup(auth, alen);
    /* curl leaves a default port out of Host; sign what it sends. */
    const char *defport = https ? ":443" : ":80";
    if (ckpt_str_endswith(hostport, defport))
        hostport[alen - strlen(defport)] = '\0';
    s3->base_path = ckpt_xstrdup(slash ? slash : "");
    if (s3->conf.virtual_host)
        s3->host = ckpt_xasprintf("%s.%s", s3->bucket, hostport);
    else
        s3->host = ckpt_xstrdup(hostport);
    s3->scheme_host = ckpt_xasprintf("%s://%s", https ? "https" : "http",
                                     s3->host);
    free(hostport);
    return 0;
}

static void s3_close(struct ckpt_storage *st)
{
    struct s3 *s3 = st->impl;
    if (!s3)
        return;
    http_client_release(&s3->hc);
    s3_conf_release(&s3->conf);
    free(s3->scheme_host);
    free(s3->host);
    free(s3->base_path);
    free(s3);
    st->impl = NULL;
}

static void s3_stats(const struct ckpt_storage *st,
                     struct ckpt_storage_stats *out)
{
    const struct s3 *s3 = st->impl;
    out->requests = atomic_load(&s3->hc.stats.requests);
    out->retries = atomic_load(&s3->hc.stats.retries);
    out->bytes_in = atomic_load(&s3->hc.stats.bytes_in);
    out->bytes_out = atomic_load(&s3->hc.stats.bytes_out);
}

static const struct ckpt_storage_ops s3_ops = {
    .name = "s3",
    .stat = s3_op_stat,
    .list = s3_op_list,
    .read = s3_op_read,
    .read_if = s3_op_read_if,
    .writer_open = s3_op_writer_open,
    .put_if_absent = s3_op_put_if_absent,
    .del = s3_op_del,
    .delete_tree = s3_op_delete_tree,
    .delete_keys = s3_op_delete_keys,
    .close = s3_close,
    .stats = s3_stats,
    .probe = s3_op_probe,
};

/* The credentials, fetched at the open: what no source gives is one
 * error of the open, not one per request. A metadata service is the last
 * resort: when it gives nothing either, say every place looked at. */
static int first_keys(struct s3 *s3, const char *disp, struct ckpt_err *err)
{
    struct st_keys k;
    s3->conf.cred = st_cred_share(s3->conf.cred);
    int rc = st_cred_get(s3->conf.cred, &s3->hc, s3->attempts, &k, err);
    st_keys_release(&k);
    if (rc != 0 && s3->conf.looked) {
        char *why = ckpt_xstrdup(err->msg);
        ckpt_err_set(err, CKPT_EAUTH, "%s: no credentials: none in %s; %s",
                     disp, s3->conf.looked, why);
        free(why);
    } else if (rc != 0) {
        ckpt_err_prefix(err, "%s", disp);
    }
    return rc;
}

int ckpt_s3_open(struct ckpt_storage *st, struct ckpt_err *err)
{
    struct s3 *s3 = ckpt_xcalloc(1, sizeof(*s3));
    st->impl = s3;
    s3->bucket = st->loc.bucket;
    s3->scheme = st->loc.scheme;
    s3->attempts = st->cfg.retries > 0 ? st->cfg.retries : DEFAULT_ATTEMPTS;
    http_client_init(&s3->hc, st->cfg.insecure, st->cfg.verbose);
    s3->hc.on_retry = st->cfg.on_retry;
    s3->hc.retry_ud = st->cfg.retry_ud;
    char *disp = s3_what(st, NULL);
    int rc = s3_conf_resolve(&s3->conf, s3->scheme, s3->bucket, &st->cfg,
                             disp, err);
    if (rc == 0)
        rc = s3_parse_endpoint(s3, disp, err);
    if (rc == 0)
        rc = first_keys(s3, disp, err);
    const char *ps = getenv("CKPT_S3_PART_SIZE");
    if (rc == 0 && ps && *ps &&
        ckpt_parse_size(ps, &s3->part_size, err) != 0)
        rc = -1;
    free(disp);
    if (rc != 0) {
        s3_close(st);
        return -1;
    }
    st->ops = &s3_ops;
    return 0;
}

/* For callers that drive a transfer themselves (s3_upload.c reads
 * x-amz-meta-* response headers): the URL and signed headers of one
 * attempt, exactly as s3_attempt would send them. */
int s3_sign_request(struct s3 *s3, struct s3_req *r, struct ckpt_buf *url,
                    struct curl_slist **hdrs, struct ckpt_err *err)
{
    return build(s3, r, url, hdrs, err);
}
