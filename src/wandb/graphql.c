/*
 * graphql.c - the W&B GraphQL client: POST {base}/graphql with HTTP Basic
 * auth "api:KEY", the same Run/Runs queries the official public client
 * sends (fewer fields), cursor pagination, and retries.
 *
 * Retry policy (wandb-core's clients/retry_policy.go, in short): transport
 * errors, 429 and 5xx other than 501 are retried with capped, jittered
 * exponential backoff; Retry-After (seconds or an HTTP date) and
 * RateLimit-Reset override the backoff. 400, 401, 403, 404 and the other
 * client errors the Go client gives up on are final. A 429, or a success
 * with RateLimit-Remaining: 0, pauses every thread sharing the client, so a
 * pool of workers backs off together instead of each burning an attempt.
 *
 * Waits are bounded: one HTTP request may take request_timeout seconds
 * in all (connect to last byte, so a server that trickles a byte now and
 * then still ends), no retry starts later than 3x that after a query's
 * first attempt, and a listing takes at most max_pages pages and never a
 * cursor twice. A query that takes long is reported through cfg.on_wait
 * every notice_every seconds.
 *
 * The key is handed to curl as user/password only; it is never formatted
 * into a message, and curl's verbose output stays off.
 */
#include "wandb_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/text.h"
#include "ckpt/util.h"

#define MAX_BODY (256u << 20)   /* a response larger than this is refused */
#define MAX_HINT 300.0          /* longest server-requested pause, s */
#define DEFAULT_MAX_PAGES 10000
#define DEFAULT_REQUEST_TIMEOUT 60.0
#define QUERY_TIMEOUTS 3        /* a query with retries: 3 requests' time */

static const char RUN_FIELDS[] =
    "name displayName group state createdAt config summaryMetrics";

struct ckpt_wandb_client {
    char *endpoint;        /* owned; {base}/graphql */
    char *api_key;         /* owned; secret */
    char *key_from;        /* owned; "WANDB_API_KEY" or the netrc path */
    char *user_agent;      /* owned */
    char *host;            /* owned; host[:port], for notices */
    int insecure, attempts, max_pages;
    double max_backoff, timeout, request_timeout;
    ckpt_wandb_wait_fn on_wait;
    void *wait_ud;
    double notice_every;
    CURLSH *share;         /* connections, DNS and TLS sessions */
    pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
    pthread_mutex_t mu;    /* guards not_before */
    double not_before;     /* ckpt_now() before which nobody sends */
    _Atomic uint64_t requests;
    _Atomic unsigned seed;
};

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a,
                       void *ud)
{
    struct ckpt_wandb_client *c = ud;
    pthread_mutex_lock(&c->locks[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *ud)
{
    struct ckpt_wandb_client *c = ud;
    pthread_mutex_unlock(&c->locks[d]);
}

/* A positive whole number from the environment, else def. */
static double env_num(const char *name, double def)
{
    const char *s = getenv(name);
    uint64_t v;
    if (s && ckpt_parse_u64(s, &v) == 0 && v > 0 && v < 100000000)
        return (double)v;
    return def;
}

static void set_limits(struct ckpt_wandb_client *c,
                       const struct ckpt_wandb_client_cfg *cfg)
{
    c->insecure = cfg ? cfg->insecure : 0;
    c->attempts = cfg && cfg->attempts > 0 ? cfg->attempts : 8;
    c->max_backoff = cfg && cfg->max_backoff > 0 ? cfg->max_backoff : 60;
    /* 19 s: wandb's default */
    c->timeout = cfg && cfg->timeout > 0 ? cfg->timeout
                                         : env_num("WANDB_HTTP_TIMEOUT", 19);
    c->request_timeout = cfg && cfg->request_timeout > 0
        ? cfg->request_timeout
        : env_num("CKPT_WANDB_TIMEOUT", DEFAULT_REQUEST_TIMEOUT);
    c->max_pages = cfg && cfg->max_pages > 0
        ? cfg->max_pages
        : (int)env_num("CKPT_WANDB_MAX_PAGES", DEFAULT_MAX_PAGES);
    c->on_wait = cfg ? cfg->on_wait : NULL;
    c->wait_ud = cfg ? cfg->wait_ud : NULL;
    c->notice_every = cfg && cfg->notice_every > 0 ? cfg->notice_every : 10;
}

int ckpt_wandb_client_new(struct ckpt_wandb_client **out,
                          const struct ckpt_wandb_client_cfg *cfg,
                          struct ckpt_err *err)
{
    *out = NULL;
    char *base = ckpt_wandb_base_url(cfg ? cfg->base_url : NULL);
    if (!ckpt_str_startswith(base, "http://") &&
        !ckpt_str_startswith(base, "https://")) {
        ckpt_err_set(err, CKPT_EUSAGE, "W&B base URL '%s' is not http(s)",
                     base);
        free(base);
        return -1;
    }
    char *key = NULL, *from = NULL;
    if (cfg && cfg->api_key) {
        key = ckpt_xstrdup(cfg->api_key);
        from = ckpt_xstrdup("the configured key");
    } else if (ckpt_wandb_find_api_key(base, &key, &from, err) != 0) {
        free(base);
        return -1;
    }
    struct ckpt_wandb_client *c = ckpt_xcalloc(1, sizeof(*c));
    c->endpoint = ckpt_xasprintf("%s/graphql", base);
    c->host = ckpt_url_netloc(base);
    free(base);
    c->api_key = key;
    c->key_from = from;
    c->user_agent = ckpt_xasprintf("W&B Public Client (ckpt %s)",
                                   CKPT_VERSION);
    set_limits(c, cfg);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->locks[i], NULL);
    pthread_mutex_init(&c->mu, NULL);
    atomic_store(&c->seed, (unsigned)time(NULL) ^ (unsigned)(uintptr_t)c);
    c->share = curl_share_init();
    if (c->share) {
        curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(c->share, CURLSHOPT_SHARE,
                          CURL_LOCK_DATA_SSL_SESSION);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    }
    *out = c;
    return 0;
}

void ckpt_wandb_client_free(struct ckpt_wandb_client *c)
{
    if (!c)
        return;
    if (c->share)
        curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->locks[i]);
    pthread_mutex_destroy(&c->mu);
    free(c->endpoint);
    free(c->host);
    if (c->api_key) /* do not leave the secret in freed memory */
        memset(c->api_key, 0, strlen(c->api_key));
    free(c->api_key);
    free(c->key_from);
    free(c->user_agent);
    free(c);
}

uint64_t ckpt_wandb_client_requests(const struct ckpt_wandb_client *c)
{
    return atomic_load(&c->requests);
}

/* ---- one HTTP exchange ---- */

/* One query's clock, for notices. */
struct waiter {
    struct ckpt_wandb_client *c;
    const char *what;
    double start;            /* ckpt_now() of the first attempt */
    double next;             /* seconds since start of the next notice */
    int attempt;
};

/* Report the wait when its next notice is due. */
static void tick(struct waiter *w)
{
    if (!w->c->on_wait)
        return;
    double el = ckpt_now() - w->start;
    if (el < w->next)
        return;
    w->c->on_wait(w->c->wait_ud, w->c->host, w->what, floor(el),
                  w->attempt);
    while (w->next <= el)
        w->next += w->c->notice_every;
}

struct exchange {
    struct ckpt_buf body;
    struct waiter *w;
    double timeout;          /* seconds without progress before giving up;
                              * 0: no stall check */
    double last_progress;    /* ckpt_now() of the last byte either way */
    curl_off_t last_dl, last_ul;
    int stalled;
    long status;
    double retry_after;      /* seconds, or -1 */
    double rl_reset;         /* RateLimit-Reset seconds, or -1 */
    long rl_remaining;       /* RateLimit-Remaining, or -1 */
    int too_big;
    char ctype[48];          /* Content-Type's media type, or "" */
};

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct exchange *x = ud;
    size_t len = size * n;
    if (x->body.len + len > MAX_BODY) {
        x->too_big = 1;
        return 0;
    }
    ckpt_buf_add(&x->body, p, len);
    return len;
}

/* Value of header `name` in the line p[0..len), or NULL; copied to buf. */
static const char *header_value(const char *p, size_t len, const char *name,
                                char *buf, size_t cap)
{
    size_t nl = strlen(name);
    if (len <= nl || strncasecmp(p, name, nl) != 0 || p[nl] != ':')
        return NULL;
    p += nl + 1;
    len -= nl + 1;
    while (len && (*p == ' ' || *p == '\t'))
        p++, len--;
    while (len && (p[len - 1] == '\r' || p[len - 1] == '\n' ||
                   p[len - 1] == ' '))
        len--;
    if (len >= cap)
        len = cap - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

static double seconds_value(const char *v, int allow_date)
{
    uint64_t n;
    if (ckpt_parse_u64(v, &n) == 0)
        return (double)n;
    if (allow_date) {
        time_t t = curl_getdate(v, NULL);
        if (t != -1)
            return difftime(t, time(NULL)) > 0 ? difftime(t, time(NULL)) : 0;
    }
    return -1;
}

/* "text/html; charset=x" -> "text/html"; "" unless it looks like a
 * media type (it is repeated in messages). */
static void media_type(const char *v, char *out, size_t cap)
{
    size_t n = strcspn(v, "; ");
    out[0] = '\0';
    if (n == 0 || n >= cap)
        return;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && !strchr("/+-.", v[i]))
            return;
    memcpy(out, v, n);
    out[n] = '\0';
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct exchange *x = ud;
    size_t len = size * n;
    char v[128];
    uint64_t num;
    if (len > 5 && !strncmp(p, "HTTP/", 5)) { /* a new response starts */
        x->retry_after = x->rl_reset = -1;
        x->rl_remaining = -1;
        x->ctype[0] = '\0';
    } else if (header_value(p, len, "Content-Type", v, sizeof(v))) {
        media_type(v, x->ctype, sizeof(x->ctype));
    } else if (header_value(p, len, "Retry-After", v, sizeof(v))) {
        x->retry_after = seconds_value(v, 1);
    } else if (header_value(p, len, "RateLimit-Reset", v, sizeof(v))) {
        x->rl_reset = seconds_value(v, 0);
    } else if (header_value(p, len, "RateLimit-Remaining", v, sizeof(v)) &&
               ckpt_parse_u64(v, &num) == 0) {
        x->rl_remaining = (long)(num > 1000000 ? 1000000 : num);
    }
    return len;
}

/* A read timeout, as Python's requests has: no byte in either direction
 * for `timeout` seconds. (CURLOPT_LOW_SPEED_TIME averages over a window,
 * so the request body just sent keeps a silent server "fast" for a while.)
 */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    struct exchange *x = ud;
    double now = ckpt_now();
    tick(x->w);
    if (!x->timeout)
        return 0;
    if (dlnow != x->last_dl || ulnow != x->last_ul || !x->last_progress) {
        x->last_dl = dlnow;
        x->last_ul = ulnow;
        x->last_progress = now;
        return 0;
    }
    x->stalled = now - x->last_progress > x->timeout;
    return x->stalled;
}

/* One attempt, abandoned after `limit` seconds in all. */
static CURLcode perform(struct ckpt_wandb_client *c, const char *body,
                        double limit, struct exchange *x)
{
    CURL *h = curl_easy_init();
    if (!h)
        return CURLE_OUT_OF_MEMORY;
    struct curl_slist *hdr = NULL;
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    hdr = curl_slist_append(hdr, "Accept: application/json");
    curl_easy_setopt(h, CURLOPT_URL, c->endpoint);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERNAME, "api");
    curl_easy_setopt(h, CURLOPT_PASSWORD, c->api_key);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(fmin(c->timeout, limit) * 1000) + 1);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(limit * 1000) + 1);
    /* A stalled server is a timeout (retried); a slow big page is not,
     * until the request's whole limit. A stall limit at or past that
     * limit never decides (the message names the one that did). */
    x->timeout = c->timeout < limit ? c->timeout : 0;
    x->last_progress = 0;
    x->last_dl = x->last_ul = 0;
    x->stalled = 0;
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (c->share)
        curl_easy_setopt(h, CURLOPT_SHARE, c->share);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    atomic_fetch_add(&c->requests, 1);
    return rc;
}

/* ---- retries ---- */

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = { (time_t)s, (long)((s - floor(s)) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void pause_all(struct ckpt_wandb_client *c, double s)
{
    pthread_mutex_lock(&c->mu);
    double until = ckpt_now() + s;
    if (until > c->not_before)
        c->not_before = until;
    pthread_mutex_unlock(&c->mu);
}

/* 2^n s times U(1, 1.25), capped: wandb-core's backoff with a 1 s base. */
static double backoff(struct ckpt_wandb_client *c, int attempt)
{
    unsigned s = atomic_fetch_add(&c->seed, 0x9E3779B9u);
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    double jitter = 1.0 + 0.25 * (double)(s % 10000) / 10000.0;
    double d = ldexp(1.0, attempt < 30 ? attempt : 30) * jitter;
    return d < c->max_backoff ? d : c->max_backoff;
}

static int retryable_status(long st)
{
    if (st == 429 || (st >= 500 && st != 501))
        return 1;
    /* Client errors the Go client gives up on; other 4xx (408, 425, ...)
     * may pass. */
    static const long final[] = { 400, 401, 403, 404, 409, 410, 413, 422 };
    for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++)
        if (st == final[i])
            return 0;
    return st >= 400 && st < 500;
}

static int retryable_curl(CURLcode rc)
{
    return rc != CURLE_UNSUPPORTED_PROTOCOL && rc != CURLE_URL_MALFORMAT &&
           rc != CURLE_OUT_OF_MEMORY && rc != CURLE_FUNCTION_NOT_FOUND &&
           rc != CURLE_PEER_FAILED_VERIFICATION &&
           rc != CURLE_SSL_CACERT_BADFILE && rc != CURLE_WRITE_ERROR;
}

/* What the server said: its JSON error messages, redacted; a body of
 * any other kind is described, never repeated. */
static void server_said(struct exchange *x, struct ckpt_buf *m)
{
    ckpt_gql_error_message(x->body.ptr, x->body.len, m);
    if (m->len)
        return;
    if (!x->body.len)
        ckpt_buf_addstr(m, "(empty response)");
    else if (x->ctype[0])
        ckpt_buf_addf(m, "(a %s body, not shown)", x->ctype);
    else
        ckpt_buf_addstr(m, "(a body without Content-Type, not shown)");
}

/* The error for a final HTTP status. */
static int status_error(struct ckpt_wandb_client *c, struct exchange *x,
                        int tries, struct ckpt_err *err)
{
    struct ckpt_buf m = CKPT_BUF_INIT;
    server_said(x, &m);
    const char *msg = m.ptr;
    const char *sep = msg[0] == '(' ? " " : ": "; /* "HTTP 502 (a ...)" */
    long st = x->status;
    if (st == 401)
        ckpt_err_set(err, CKPT_EAUTH, "W&B API rejected the API key from "
                     "%s (HTTP 401): check WANDB_API_KEY or ~/.netrc",
                     c->key_from);
    else if (st == 403)
        ckpt_err_set(err, CKPT_EAUTH, "W&B API: permission denied (HTTP "
                     "403)%s%s", sep, msg);
    else if (st == 404)
        ckpt_err_set(err, CKPT_EHTTP, "W&B API: %s: HTTP 404 (is "
                     "WANDB_BASE_URL right?)", c->endpoint);
    else if (tries > 1)
        ckpt_err_set(err, CKPT_EHTTP, "W&B API: HTTP %ld%s%s (gave up "
                     "after %d attempts)", st, sep, msg, tries);
    else
        ckpt_err_set(err, CKPT_EHTTP, "W&B API: HTTP %ld%s%s", st, sep,
                     msg);
    if (err)
        err->http_status = (int)st;
    ckpt_buf_release(&m);
    return -1;
}

/* Sleep s seconds, reporting the wait as it goes. */
static void sleep_ticking(double s, struct waiter *w)
{
    double end = ckpt_now() + s;
    for (double left = s; left > 0; left = end - ckpt_now()) {
        sleep_s(fmin(left, 0.5));
        tick(w);
    }
}

static double turn_wait(struct ckpt_wandb_client *c)
{
    pthread_mutex_lock(&c->mu);
    double wait = c->not_before - ckpt_now();
    pthread_mutex_unlock(&c->mu);
    return wait;
}

/* The error for a transport failure (or timeout) of the last attempt. */
static int transport_error(struct ckpt_wandb_client *c, struct exchange *x,
                           CURLcode rc, int tries, struct ckpt_err *err)
{
    char why[96], how[48] = "";
    if (x->stalled)
        snprintf(why, sizeof(why), "no data for %g s", c->timeout);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        snprintf(why, sizeof(why), "no complete response within %g s",
                 c->request_timeout);
    else
        snprintf(why, sizeof(why), "%s", curl_easy_strerror(rc));
    if (tries > 1)
        snprintf(how, sizeof(how), "; gave up after %d attempts", tries);
    return ckpt_err_set(err, CKPT_ENET, "W&B API %s: %s (%s%s)",
                        c->endpoint, why, x->w->what, how);
}

/* POST body; on a 2xx *x holds the response. Attempts stop at
 * c->attempts, or when the next one would start more than
 * QUERY_TIMEOUTS request timeouts after the first. */
static int post(struct ckpt_wandb_client *c, const char *body,
                struct exchange *x, struct ckpt_err *err)
{
    double deadline = x->w->start + QUERY_TIMEOUTS * c->request_timeout;
    for (int attempt = 1;; attempt++) {
        ckpt_buf_reset(&x->body);
        x->status = 0;
        x->too_big = 0;
        x->retry_after = x->rl_reset = -1;
        x->rl_remaining = -1;
        x->w->attempt = attempt;
        sleep_ticking(turn_wait(c), x->w);
        CURLcode rc = perform(c, body, c->request_timeout, x);
        int last = attempt >= c->attempts;
        if (rc == CURLE_OK && x->status >= 200 && x->status < 300) {
            if (x->rl_remaining == 0 && x->rl_reset > 0)
                pause_all(c, fmin(x->rl_reset, MAX_HINT));
            return 0;
        }
        if (rc != CURLE_OK && x->too_big)
            return ckpt_err_set(err, CKPT_EFORMAT, "W&B API: response "
                                "larger than %u MiB", MAX_BODY >> 20);
        double hint = x->retry_after >= 0 ? x->retry_after : x->rl_reset;
        double wait = hint >= 0 ? fmin(hint, MAX_HINT)
                                : backoff(c, attempt - 1);
        last |= ckpt_now() + wait > deadline;
        if (rc != CURLE_OK) {
            if (last || !retryable_curl(rc))
                return transport_error(c, x, rc, attempt, err);
        } else if (last || !retryable_status(x->status)) {
            return status_error(c, x, attempt, err);
        }
        if (x->status == 429)
            pause_all(c, wait);
        else
            sleep_ticking(wait, x->w);
    }
}

/* Send a query; on success *doc is the response document (caller
 * deletes) and *data its `data` object. */
static int query(struct ckpt_wandb_client *c, const char *what,
                 const char *q, cJSON *vars, cJSON **doc, cJSON **data,
                 struct ckpt_err *err)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "query", q);
    cJSON_AddItemToObject(req, "variables", vars);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    struct waiter w = { c, what, ckpt_now(), c->notice_every, 1 };
    struct exchange x = { .body = CKPT_BUF_INIT, .w = &w };
    int rc = body ? post(c, body, &x, err)
                  : ckpt_err_set(err, CKPT_ENOMEM, "W&B API: no memory");
    free(body);
    if (rc == 0)
        rc = ckpt_gql_parse_response(x.body.ptr, x.body.len, doc, data, err);
    /* Server text was redacted by pattern; the key itself never leaves,
     * whatever shape a server quoted it in. */
    if (rc != 0 && err)
        ckpt_redact_secret(err->msg, sizeof(err->msg), c->api_key);
    ckpt_buf_release(&x.body);
    return rc;
}

static cJSON *project_vars(const char *entity, const char *project)
{
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "entity", entity);
    cJSON_AddStringToObject(v, "project", project);
    return v;
}

int ckpt_wandb_get_run(struct ckpt_wandb_client *c, const char *entity,
                       const char *project, const char *name,
                       struct ckpt_wandb_run *out, int *found,
                       struct ckpt_err *err)
{
    char *q = ckpt_xasprintf(
        "query Run($project: String!, $entity: String!, $name: String!) { "
        "project(name: $project, entityName: $entity) { run(name: $name) "
        "{ %s } } }", RUN_FIELDS);
    cJSON *vars = project_vars(entity, project);
    cJSON_AddStringToObject(vars, "name", name);
    cJSON *doc, *data;
    *found = 0;
    char *what = ckpt_xasprintf("run %s/%s/%s", entity, project, name);
    int rc = query(c, what, q, vars, &doc, &data, err);
    free(what);
    free(q);
    if (rc != 0)
        return -1;
    cJSON *proj = cJSON_GetObjectItemCaseSensitive(data, "project");
    cJSON *run = cJSON_IsObject(proj)
                     ? cJSON_GetObjectItemCaseSensitive(proj, "run") : NULL;
    if (cJSON_IsObject(run)) {
        rc = ckpt_gql_parse_run(run, out, err);
        *found = rc == 0;
    }
    cJSON_Delete(doc);
    return rc;
}

static cJSON *runs_vars(const char *entity, const char *project,
                        const char *filters, const char *cursor)
{
    cJSON *v = project_vars(entity, project);
    /* JSONString: the filters travel as a string, not an object. */
    cJSON_AddStringToObject(v, "filters", filters);
    cJSON_AddStringToObject(v, "order", "+created_at");
    cJSON_AddNumberToObject(v, "perPage", 50);
    if (cursor)
        cJSON_AddStringToObject(v, "cursor", cursor);
    else
        cJSON_AddNullToObject(v, "cursor");
    return v;
}

/* The cursors a listing has had: an open-addressing set of strings. */
struct cursor_set {
    char **v;              /* owned strings; NULL slots are free */
    size_t cap, n;
};

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot of s in the table v (cap a power of two): where it is, or
 * the free slot where it goes. */
static size_t cursor_slot(char **v, size_t cap, const char *s)
{
    size_t k = str_hash(s) & (cap - 1);
    while (v[k] && strcmp(v[k], s))
        k = (k + 1) & (cap - 1);
    return k;
}

/* Add cursor; 1 if it was there already. Kept at most half full. */
static int cursor_seen(struct cursor_set *cs, const char *cursor)
{
    if (2 * (cs->n + 1) > cs->cap) {
        size_t cap = cs->cap ? 2 * cs->cap : 64;
        char **v = ckpt_xcalloc(cap, sizeof(*v));
        for (size_t i = 0; i < cs->cap; i++)
            if (cs->v[i])
                v[cursor_slot(v, cap, cs->v[i])] = cs->v[i];
        free(cs->v);
        cs->v = v;
        cs->cap = cap;
    }
    size_t k = cursor_slot(cs->v, cs->cap, cursor);
    if (cs->v[k])
        return 1;
    cs->v[k] = ckpt_xstrdup(cursor);
    cs->n++;
    return 0;
}

static void cursor_set_free(struct cursor_set *cs)
{
    for (size_t i = 0; i < cs->cap; i++)
        free(cs->v[i]);
    free(cs->v);
}

int ckpt_wandb_list_runs(struct ckpt_wandb_client *c, const char *entity,
                         const char *project, const char *filters,
                         struct ckpt_wandb_runs *out, struct ckpt_err *err)
{
    char *q = ckpt_xasprintf(
        "query Runs($project: String!, $entity: String!, $cursor: String, "
        "$perPage: Int = 50, $order: String, $filters: JSONString) { "
        "project(name: $project, entityName: $entity) { runs(filters: "
        "$filters, after: $cursor, first: $perPage, order: $order) { edges "
        "{ node { %s } cursor } pageInfo { endCursor hasNextPage } } } }",
        RUN_FIELDS);
    char *cursor = NULL;
    struct cursor_set seen = { 0 };
    int rc = 0;
    for (int page = 1; rc == 0; page++) {
        cJSON *doc, *data;
        char *what = ckpt_xasprintf("runs of %s/%s (page %d)", entity,
                                    project, page);
        rc = query(c, what, q, runs_vars(entity, project, filters, cursor),
                   &doc, &data, err);
        free(what);
        if (rc != 0)
            break;
        char *next = NULL;
        int more, found;
        rc = ckpt_gql_parse_runs_page(data, out, &next, &more, &found, err);
        cJSON_Delete(doc);
        if (rc == 0 && !found)
            rc = ckpt_err_set(err, CKPT_ENOTFOUND, "W&B project '%s/%s' "
                              "not found (or no access)", entity, project);
        free(cursor);
        cursor = next;
        if (rc != 0 || !more || !cursor)
            break;
        /* A server that hands out old cursors, or new ones forever, must
         * not keep us listing. */
        if (cursor_seen(&seen, cursor))
            rc = ckpt_err_set(err, CKPT_EFORMAT, "W&B API: runs of %s/%s: "
                              "page %d repeats an earlier cursor (the "
                              "listing loops)", entity, project, page);
        else if (page >= c->max_pages)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "W&B API: runs of %s/%s: "
                              "more than %d pages (CKPT_WANDB_MAX_PAGES "
                              "allows more)", entity, project, c->max_pages);
    }
    cursor_set_free(&seen);
    free(cursor);
    free(q);
    return rc;
}

int ckpt_wandb_default_entity(struct ckpt_wandb_client *c, char **entity,
                              struct ckpt_err *err)
{
    cJSON *doc, *data;
    *entity = NULL;
    if (query(c, "the default entity",
              "query GetDefaultEntity { viewer { id entity } }",
              cJSON_CreateObject(), &doc, &data, err) != 0)
        return -1;
    const char *e = ckpt_json_str(
        cJSON_GetObjectItemCaseSensitive(data, "viewer"), "entity");
    if (e && *e)
        *entity = ckpt_xstrdup(e);
    cJSON_Delete(doc);
    if (!*entity)
        return ckpt_err_set(err, CKPT_ENOTFOUND,
                            "W&B API: the API key has no default entity");
    return 0;
}
