/*
 * cred.c - the credentials a storage signs with: fixed keys, or a source
 * that is asked again shortly before what it gave expires (cred_aws.c:
 * credential_process, web identity, SSO, container, EC2 instance
 * metadata; gcs_oauth.c: Google's OAuth tokens).
 *
 * A source is one object per process, shared by every storage and thread
 * that resolved to it, as the SDKs keep one session's credentials: a
 * command that opens the same bucket once per run or per checkpoint must
 * not ask STS or a metadata server again each time, and the upload
 * threads of one storage refresh it once, not once each. The list lives
 * as long as the process (a handful of sources at most).
 */
#include "s3_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "ckpt/util.h"

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct st_cred **shared;     /* owned, never freed */
static size_t nshared, shared_cap;

static void wipe(char **s)
{
    if (*s) {
        memset(*s, 0, strlen(*s));
        free(*s);
        *s = NULL;
    }
}

void st_keys_release(struct st_keys *k)
{
    wipe(&k->ak);
    wipe(&k->sk);
    wipe(&k->token);
    k->expires = 0;
}

struct st_cred *st_cred_new(enum st_cred_kind kind, char *id, char *source)
{
    struct st_cred *c = ckpt_xcalloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->kind = kind;
    c->id = id;
    c->source = source;
    return c;
}

void st_cred_free(struct st_cred *c)
{
    if (!c || c->shared)
        return;
    if (c->oauth) {
        gcs_oauth_release(c->oauth);
        free(c->oauth);
    }
    free(c->id);
    free(c->source);
    free(c->url);
    free(c->file);
    free(c->command);
    free(c->role);
    free(c->account);
    free(c->session);
    free(c->profile);
    wipe(&c->auth);
    wipe(&c->ak);
    wipe(&c->sk);
    wipe(&c->token);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

struct st_cred *st_cred_share(struct st_cred *c)
{
    if (c->kind == ST_CRED_KEYS)
        return c;
    pthread_mutex_lock(&shared_mu);
    struct st_cred *found = NULL;
    for (size_t i = 0; i < nshared && !found; i++)
        if (!strcmp(shared[i]->id, c->id))
            found = shared[i];
    if (!found) {
        if (nshared == shared_cap) {
            shared_cap = shared_cap ? 2 * shared_cap : 8;
            shared = ckpt_xreallocarray(shared, shared_cap,
                                        sizeof(*shared));
        }
        c->shared = 1;
        shared[nshared++] = c;
        found = c;
    }
    pthread_mutex_unlock(&shared_mu);
    if (found != c)
        st_cred_free(c);
    return found;
}

time_t st_cred_refresh_time(time_t now, time_t expires)
{
    if (!expires)
        return 0;
    time_t life = expires - now;
    /* Early, but never in a loop on keys that live less than EARLY. */
    return now + (life > 2 * ST_CRED_EARLY ? life - ST_CRED_EARLY
                                           : life / 2);
}

static char *dup_or_null(const char *s)
{
    return s ? ckpt_xstrdup(s) : NULL;
}

/* Google: the OAuth token source, loaded on first use. */
static int gcs_get(struct st_cred *c, struct http_client *hc, int attempts,
                   struct st_keys *out, struct ckpt_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (!c->oauth) {
        struct gcs_oauth *o = ckpt_xcalloc(1, sizeof(*o));
        rc = gcs_oauth_load(o, c->file, err);
        if (rc == 0) {
            c->oauth = o;
        } else {
            gcs_oauth_release(o);
            free(o);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (rc != 0)
        return -1;
    struct ckpt_buf tok = CKPT_BUF_INIT;
    rc = gcs_oauth_token(c->oauth, hc, attempts, &tok, err);
    if (rc == 0)
        out->token = ckpt_buf_detach(&tok, NULL);
    else
        ckpt_buf_release(&tok);
    return rc;
}

/* An AWS source: asked when it has given nothing yet or its keys are due
 * for a refresh; one thread asks, the others wait for its keys. */
static int aws_due(struct st_cred *c, struct http_client *hc, int attempts,
                   struct ckpt_err *err)
{
    time_t now = time(NULL);
    if (c->ak && (!c->refresh_at || now < c->refresh_at))
        return 0;
    struct st_keys got;
    memset(&got, 0, sizeof(got));
    int rc = st_aws_fetch(c, hc, attempts, &got, err);
    if (rc == 0) {
        wipe(&c->ak);
        wipe(&c->sk);
        wipe(&c->token);
        c->ak = got.ak;
        c->sk = got.sk;
        c->token = got.token;
        c->expires = got.expires;
        c->refresh_at = st_cred_refresh_time(now, got.expires);
        memset(&got, 0, sizeof(got));
    } else if (c->ak && now < c->expires - ST_CRED_MARGIN) {
        /* The keys it gave still work: keep them, ask again halfway to
         * their end (the SDKs' advisory refresh). */
        c->refresh_at = now + (c->expires - ST_CRED_MARGIN - now) / 2;
        ckpt_err_clear(err);
        rc = 0;
    }
    st_keys_release(&got);
    return rc;
}

int st_cred_get(struct st_cred *c, struct http_client *hc, int attempts,
                struct st_keys *out, struct ckpt_err *err)
{
    memset(out, 0, sizeof(*out));
    if (c->kind == ST_CRED_GCS)
        return gcs_get(c, hc, attempts, out, err);
    pthread_mutex_lock(&c->mu);
    int rc = c->kind == ST_CRED_KEYS ? 0 : aws_due(c, hc, attempts, err);
    if (rc == 0) {
        out->ak = dup_or_null(c->ak);
        out->sk = dup_or_null(c->sk);
        out->token = dup_or_null(c->token);
        out->expires = c->expires;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- requests ---- */

/* The host of an http[s] URL into out ("" if none). */
static void url_host(const char *url, char *out, size_t n)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t len = strcspn(p, "/?#");
    const char *at = memchr(p, '@', len);
    if (at) {
        len -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    if (*p == '[') {
        const char *close = memchr(p, ']', len);
        len = close ? (size_t)(close + 1 - p) : len;
    } else {
        const char *colon = memchr(p, ':', len);
        if (colon)
            len = (size_t)(colon - p);
    }
    snprintf(out, n, "%.*s", (int)len, p);
}

static int is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcasecmp(host, "localhost") ||
           !strcmp(host, "[::1]");
}

/* Tests set CKPT_TEST_LOOPBACK_ONLY (tests/support/offline.env): a
 * source that would reach past the loopback is a test's mistake, and on
 * a cloud machine it would reach a real metadata service or STS. */
static int refused_host(const char *url, const char *what,
                        struct ckpt_err *err)
{
    const char *v = getenv("CKPT_TEST_LOOPBACK_ONLY");
    char host[256];
    if (!v || !*v || !strcmp(v, "0"))
        return 0;
    url_host(url, host, sizeof(host));
    if (is_loopback(host))
        return 0;
    return ckpt_err_set(err, CKPT_EAUTH, "%s: not asked: %s is not a "
                        "loopback address and CKPT_TEST_LOOPBACK_ONLY is "
                        "set", what, host);
}

/* The error code of a refusal: S3's and STS's XML <Code>, or an OAuth
 * endpoint's JSON "error" ("invalid_grant"). */
static void error_code(const struct http_resp *resp, struct ckpt_buf *code)
{
    s3_error_fields(&resp->body, code, NULL);
    if (code->len || resp->body.len < 2 || resp->body.ptr[0] != '{')
        return;
    cJSON *j = cJSON_Parse(resp->body.ptr);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(e))
        ckpt_buf_addstr(code, e->valuestring);
    cJSON_Delete(j);
}

int st_cred_http(struct http_client *hc, const char *what,
                 const struct http_req *req, int attempts, int quiet,
                 struct http_resp *resp, struct ckpt_err *err)
{
    http_resp_init(resp);
    if (refused_host(req->url, what, err) != 0)
        return -1;
    int max = attempts > 0 ? attempts : 1;
    for (int attempt = 1;; attempt++) {
        http_resp_release(resp);
        http_resp_init(resp);
        http_perform(hc, req, resp);
        if (resp->curl == CURLE_OK && resp->status >= 200 &&
            resp->status < 300)
            return 0;
        struct ckpt_buf code = CKPT_BUF_INIT;
        if (resp->curl == CURLE_OK)
            error_code(resp, &code);
        /* STS: the identity provider did not answer it in time. */
        int retry = attempt < max &&
                    (http_retryable(resp, code.ptr, "") ||
                     !strcmp(code.ptr, "IDPCommunicationError"));
        const char *name = code.len && code.len <= 64 &&
                           strspn(code.ptr, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "abcdefghijklmnopqrstuvwxyz0123456789._")
                           == code.len ? code.ptr
                                       : http_status_name(resp->status);
        if (retry) {
            double delay = http_backoff(attempt, resp->retry_after);
            if (!quiet)
                http_tell_retry(hc, what, attempt, max, delay, resp, name);
            ckpt_buf_release(&code);
            http_sleep(delay);
            continue;
        }
        if (resp->curl != CURLE_OK)
            ckpt_err_set(err, CKPT_ENET, "%s: %s", what, resp->curl_msg);
        else    /* a source that refuses: no credentials */
            ckpt_err_set(err, CKPT_EAUTH, "%s: HTTP %ld %s", what,
                         resp->status, name);
        err->http_status = (int)resp->status;
        ckpt_buf_release(&code);
        http_resp_release(resp);
        return -1;
    }
}
