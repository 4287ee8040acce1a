/*
 * http.c - libcurl transport for the object-storage client: a pool of easy
 * handles (each keeps its connections alive for the next request), one
 * attempt per call, and the retry policy. Signing and the retry loop live
 * in s3.c because every attempt is signed afresh.
 *
 * Never turn on CURLOPT_VERBOSE here: it would print Authorization headers.
 */
#include "s3_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/rand.h>

#include "ckpt/interrupt.h"
#include "ckpt/util.h"

/* A limit from the environment: whole decimal digits (0: off), else
 * the default. */
static long env_limit(const char *name, long def)
{
    const char *v = getenv(name);
    if (!v || !*v || strlen(v) > 12 || strspn(v, "0123456789") != strlen(v))
        return def;
    return strtol(v, NULL, 10);
}

long http_deadline(const struct http_client *hc, uint64_t bytes)
{
    if (!hc->deadline)
        return 0;
    uint64_t extra = hc->deadline_speed ? bytes / (uint64_t)hc->deadline_speed
                                        : 0;
    return extra > (uint64_t)(LONG_MAX / 2) ? LONG_MAX / 2
                                            : hc->deadline + (long)extra;
}

void http_client_init(struct http_client *hc, int insecure, int verbose)
{
    memset(hc, 0, sizeof(*hc));
    pthread_mutex_init(&hc->mu, NULL);
    hc->insecure = insecure;
    hc->verbose = verbose;
    /* aws-cli's variable for a private CA (on-prem, TLS-inspecting
     * proxies); libcurl itself reads no environment for this. */
    const char *ca = getenv("AWS_CA_BUNDLE");
    hc->ca_bundle = ca && *ca ? ckpt_xstrdup(ca) : NULL;
    hc->min_speed = env_limit("CKPT_HTTP_MIN_SPEED", HTTP_MIN_SPEED);
    hc->slow_time = env_limit("CKPT_HTTP_SLOW_TIME", HTTP_SLOW_TIME);
    hc->deadline = env_limit("CKPT_HTTP_DEADLINE", HTTP_DEADLINE);
    hc->deadline_speed = env_limit("CKPT_HTTP_DEADLINE_SPEED",
                                   HTTP_DEADLINE_SPEED);
}

void http_client_release(struct http_client *hc)
{
    for (size_t i = 0; i < hc->nidle; i++)
        curl_easy_cleanup(hc->idle[i]);
    free(hc->idle);
    free(hc->ca_bundle);
    pthread_mutex_destroy(&hc->mu);
}

CURL *http_get_handle(struct http_client *hc, struct http_resp *resp)
{
    CURL *h = NULL;
    pthread_mutex_lock(&hc->mu);
    if (hc->nidle > 0)
        h = hc->idle[--hc->nidle];
    pthread_mutex_unlock(&hc->mu);
    if (!h)
        h = curl_easy_init();
    if (!h) {
        /* libcurl could not start (its global init, TLS backend): a
         * transport failure of this request, not retried. */
        resp->status = 0;
        resp->curl = CURLE_FAILED_INIT;
        snprintf(resp->curl_msg, sizeof(resp->curl_msg),
                 "cannot start a transfer (curl_easy_init failed)");
    }
    return h;
}

void http_put_handle(struct http_client *hc, CURL *h, int keep)
{
    if (!keep) {
        curl_easy_cleanup(h);
        return;
    }
    pthread_mutex_lock(&hc->mu);
    if (hc->nidle == hc->cap) {
        hc->cap = hc->cap ? 2 * hc->cap : 8;
        hc->idle = ckpt_xreallocarray(hc->idle, hc->cap, sizeof(CURL *));
    }
    hc->idle[hc->nidle++] = h;
    pthread_mutex_unlock(&hc->mu);
}

void http_resp_init(struct http_resp *r)
{
    memset(r, 0, sizeof(*r));
    ckpt_buf_init(&r->body);
    r->content_length = UINT64_MAX;
    r->total_size = UINT64_MAX;
    r->retry_after = -1;
}

void http_resp_release(struct http_resp *r)
{
    ckpt_buf_release(&r->body);
}

static size_t read_cb(char *dst, size_t size, size_t nmemb, void *ud)
{
    struct http_resp *r = ud;
    size_t room = size * nmemb;
    size_t left = r->req->body_len - r->up_off;
    size_t n = left < room ? left : room;
    if (r->req->body_fn) {
        if (n && r->req->body_fn(r->req->body_ud, r->up_off, dst, n,
                                 r->req->body_err) != 0) {
            r->body_failed = 1;
            return CURL_READFUNC_ABORT;
        }
    } else {
        memcpy(dst, r->req->body + r->up_off, n);
    }
    r->up_off += n;
    atomic_fetch_add(&r->hc->stats.bytes_out, n);
    return n;
}

/* Called by curl at least once a second while a transfer runs: an
 * interrupt (ckpt/interrupt.h) cuts it, unless this thread is cleaning
 * up. */
static int xferinfo_cb(void *ud, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    (void)ud, (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return ckpt_interrupt_stops() != 0;
}

/* curl rewinds the body when it must resend (auth, redirects). */
static int seek_cb(void *ud, curl_off_t off, int origin)
{
    struct http_resp *r = ud;
    if (origin != SEEK_SET || off < 0 || (size_t)off > r->req->body_len)
        return CURL_SEEKFUNC_FAIL;
    r->up_off = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct http_resp *r = ud;
    size_t n = size * nmemb;
    atomic_fetch_add(&r->hc->stats.bytes_in, n);
    const struct http_req *q = r->req;
    if (!q->sink || r->status < 200 || r->status > 299) {
        /* Error documents and listings are small; cap them anyway. */
        if (r->body.len + n > (64u << 20))
            return 0;
        ckpt_buf_add(&r->body, data, n);
        return n;
    }
    /* A 200 to a ranged GET carries the whole object: drop the head. */
    size_t skip = r->status == 200 && r->skip_left < n ? r->skip_left
                : r->status == 200 ? n : 0;
    r->skip_left -= skip;
    size_t room = q->sink_cap - r->sink_len;
    size_t take = n - skip < room ? n - skip : room;
    memcpy(q->sink + r->sink_len, data + skip, take);
    r->sink_len += take;
    if (skip + take < n) {
        /* More than asked for (a server that ignored Range): stop here,
         * which is success for the caller. */
        r->sink_full = 1;
        return 0;
    }
    return n;
}

int http_header_is(const char *line, size_t n, const char *name,
                   const char **val, size_t *vlen)
{
    size_t l = strlen(name);
    if (n <= l || strncasecmp(line, name, l) || line[l] != ':')
        return 0;
    const char *v = line + l + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    *val = v;
    *vlen = (size_t)(end - v);
    return 1;
}

static const char *const known[] = {
    "ETag", "Content-Length", "Content-Range", "Last-Modified", "Retry-After",
    "x-amz-bucket-region", "x-goog-generation", "Metadata-Flavor",
};

static void parse_value(struct http_resp *r, size_t which, char *s)
{
    size_t l = strlen(s);
    char *end;
    switch (which) {
    case 0:
        if (l >= 2 && s[0] == '"' && s[l - 1] == '"') {
            s[l - 1] = '\0';
            s++;
        }
        snprintf(r->etag, sizeof(r->etag), "%s", s);
        break;
    case 1:
        r->content_length = strtoull(s, NULL, 10);
        break;
    case 2:
        end = strchr(s, '/');
        if (end && end[1] != '*')
            r->total_size = strtoull(end + 1, NULL, 10);
        break;
    case 3:
        r->mtime = curl_getdate(s, NULL) > 0 ? curl_getdate(s, NULL) : 0;
        break;
    case 5:
        snprintf(r->bucket_region, sizeof(r->bucket_region), "%s", s);
        break;
    case 6:
        snprintf(r->generation, sizeof(r->generation), "%s", s);
        break;
    case 7:
        snprintf(r->metadata_flavor, sizeof(r->metadata_flavor), "%s", s);
        break;
    default: {
        double sec = strtod(s, &end);
        if (end == s) {
            time_t t = curl_getdate(s, NULL);
            sec = t > 0 ? difftime(t, time(NULL)) : -1;
        }
        r->retry_after = sec;
        break;
    }
    }
}

static void parse_header(struct http_resp *r, const char *line, size_t n)
{
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        const char *v;
        size_t vl;
        if (!http_header_is(line, n, known[i], &v, &vl))
            continue;
        char tmp[256];
        size_t cl = vl < sizeof(tmp) - 1 ? vl : sizeof(tmp) - 1;
        memcpy(tmp, v, cl);
        tmp[cl] = '\0';
        parse_value(r, i, tmp);
        return;
    }
}

static size_t header_cb(char *line, size_t size, size_t nmemb, void *ud)
{
    struct http_resp *r = ud;
    size_t n = size * nmemb;
    if (n > 5 && !memcmp(line, "HTTP/", 5)) {
        /* A new response (after 100 Continue): forget the last one's. */
        const char *sp = memchr(line, ' ', n);
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->etag[0] = '\0';
        r->bucket_region[0] = '\0';
        r->generation[0] = '\0';
        r->metadata_flavor[0] = '\0';
        r->content_length = UINT64_MAX;
        r->total_size = UINT64_MAX;
        r->retry_after = -1;
        return n;
    }
    parse_header(r, line, n);
    return n;
}

void http_setup(struct http_client *hc, CURL *h, const struct http_req *req,
                struct http_resp *resp)
{
    curl_easy_reset(h);
    resp->hc = hc;
    resp->req = req;
    resp->skip_left = req->sink_skip;
    curl_easy_setopt(h, CURLOPT_URL, req->url);
    /* S3 keys are sent exactly as signed: no "/./" or "//" squashing. */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ckpt/" CKPT_VERSION);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, req->headers);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, resp->curl_msg);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 20L);
    /* A stalled or trickling transfer (under 1 KiB/s for a minute) is a
     * transient fault; so is one past its deadline (a reply that keeps
     * coming just fast enough would otherwise never end). */
    if (hc->min_speed && hc->slow_time) {
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, hc->min_speed);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, hc->slow_time);
    }
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
    /* Bigger than curl's 16/64 KiB defaults: fewer callbacks and syscalls
     * for shard-sized bodies. */
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 256L * 1024);
    resp->deadline = http_deadline(hc, (uint64_t)req->body_len +
                                           req->sink_cap);
    if (req->timeout_s > 0 && (!resp->deadline ||
                               req->timeout_s < resp->deadline))
        resp->deadline = req->timeout_s;
    if (resp->deadline > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT, resp->deadline);
    if (hc->ca_bundle)
        curl_easy_setopt(h, CURLOPT_CAINFO, hc->ca_bundle);
    if (hc->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, resp);
    if (!strcmp(req->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (req->body || req->body_fn || !strcmp(req->method, "PUT") ||
               !strcmp(req->method, "POST")) {
        /* Every body goes through the read callback so a retry or a
         * curl-internal resend can rewind it. */
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, resp);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_cb);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, resp);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                         (curl_off_t)req->body_len);
        if (strcmp(req->method, "PUT"))
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    } else if (strcmp(req->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    }
    atomic_fetch_add(&hc->stats.requests, 1);
}

/* curl's words for the two limits name neither the limit nor the knob. */
static void say_timeout(struct http_resp *resp)
{
    const struct http_client *hc = resp->hc;
    if (!strncmp(resp->curl_msg, "Operation too slow", 18))
        snprintf(resp->curl_msg, sizeof(resp->curl_msg), "transfer slower "
                 "than %ld bytes/s for %ld s (CKPT_HTTP_MIN_SPEED, "
                 "CKPT_HTTP_SLOW_TIME)", hc->min_speed, hc->slow_time);
    else if (!strncmp(resp->curl_msg, "Operation timed out", 19) &&
             resp->req->timeout_s == resp->deadline)
        /* The request's own limit (a metadata service's second). */
        snprintf(resp->curl_msg, sizeof(resp->curl_msg), "no answer "
                 "within %ld s", resp->deadline);
    else if (!strncmp(resp->curl_msg, "Operation timed out", 19))
        snprintf(resp->curl_msg, sizeof(resp->curl_msg), "request not "
                 "finished within its deadline of %ld s (CKPT_HTTP_DEADLINE "
                 "plus 1 s per CKPT_HTTP_DEADLINE_SPEED bytes)",
                 resp->deadline);
}

void http_finish(CURL *h, CURLcode cc, struct http_resp *resp)
{
    if (cc == CURLE_WRITE_ERROR && resp->sink_full)
        cc = CURLE_OK;
    resp->curl = cc;
    long st = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    /* A transfer cut mid-body has a status but no complete response. */
    resp->status = st;
    if (cc != CURLE_OK && !resp->curl_msg[0])
        snprintf(resp->curl_msg, sizeof(resp->curl_msg), "%s",
                 curl_easy_strerror(cc));
    if (cc == CURLE_OPERATION_TIMEDOUT)
        say_timeout(resp);
    if (cc == CURLE_ABORTED_BY_CALLBACK && ckpt_interrupted())
        snprintf(resp->curl_msg, sizeof(resp->curl_msg), "interrupted");
}

void http_perform(struct http_client *hc, const struct http_req *req,
                  struct http_resp *resp)
{
    if (ckpt_interrupt_stops()) {
        /* Interrupted: no new request (not retried either). */
        resp->status = 0;
        resp->curl = CURLE_ABORTED_BY_CALLBACK;
        snprintf(resp->curl_msg, sizeof(resp->curl_msg), "interrupted");
        return;
    }
    CURL *h = http_get_handle(hc, resp);
    if (!h)
        return;
    http_setup(hc, h, req, resp);
    CURLcode cc = curl_easy_perform(h);
    http_finish(h, cc, resp);
    http_put_handle(hc, h, cc == CURLE_OK);
}

static int transient_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static const char *const retry_codes[] = {
    "SlowDown", "RequestTimeout", "RequestTimeoutException",
    "PriorRequestNotComplete", "Throttling", "ThrottlingException",
    "ThrottledException", "TooManyRequests", "TooManyRequestsException",
    "RequestLimitExceeded", "RequestThrottled", "InternalError",
    "ServiceUnavailable", "BandwidthLimitExceeded",
};

int http_retryable(const struct http_resp *r, const char *code,
                   const char *message)
{
    if (r->curl != CURLE_OK)
        return transient_curl(r->curl);
    switch (r->status) {
    case 429: case 500: case 502: case 503: case 504:
        return 1;
    default:
        break;
    }
    for (size_t i = 0; i < sizeof(retry_codes) / sizeof(retry_codes[0]); i++)
        if (code && !strcmp(code, retry_codes[i]))
            return 1;
    /* R2's same-key throttle; key on the message, not its code. */
    return message && strstr(message, "Reduce your concurrent request rate");
}

static double uniform01(void)
{
    uint32_t v = 0;
    if (RAND_bytes((unsigned char *)&v, sizeof(v)) != 1)
        v = (uint32_t)rand();
    return (double)v / 4294967296.0;
}

double http_backoff(int attempt, double retry_after)
{
    const double base = 0.1, cap = 20.0;
    double ceiling = base * ldexp(1.0, attempt > 30 ? 30 : attempt - 1);
    if (ceiling > cap)
        ceiling = cap;
    double d = uniform01() * ceiling;
    /* Honour Retry-After, within reason: a buggy header must not park a
     * worker for an hour. */
    if (retry_after > d)
        d = retry_after < 120 ? retry_after : 120;
    return d;
}

void http_sleep(double seconds)
{
    /* In slices, so that an interrupt ends a back-off within 0.1 s. */
    double end = ckpt_now() + seconds;
    while (!ckpt_interrupt_stops()) {
        double left = end - ckpt_now();
        if (left <= 0)
            return;
        if (left > 0.1)
            left = 0.1;
        struct timespec ts = { 0, (long)(left * 1e9) };
        nanosleep(&ts, NULL);
    }
}

void http_tell_retry(struct http_client *hc, const char *what, int attempt,
                     int attempts, double delay,
                     const struct http_resp *resp, const char *code)
{
    if (!hc->on_retry)
        return;
    char why[CURL_ERROR_SIZE + 80];
    int transport = resp->curl != CURLE_OK;
    if (transport)
        snprintf(why, sizeof(why), "%s", resp->curl_msg);
    else
        snprintf(why, sizeof(why), "HTTP %ld %s", resp->status, code);
    struct ckpt_storage_retry r = { what, attempt + 1, attempts, delay, why,
                                    transport };
    hc->on_retry(hc->retry_ud, &r);
}

/* HEAD replies have no body: name the status instead. */
const char *http_status_name(long status)
{
    switch (status) {
    case 301: return "PermanentRedirect";
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 409: return "Conflict";
    case 412: return "PreconditionFailed";
    case 416: return "InvalidRange";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 501: return "NotImplemented";
    case 502: return "BadGateway";
    case 503: return "ServiceUnavailable";
    case 504: return "GatewayTimeout";
    default: return "Error";
    }
}
