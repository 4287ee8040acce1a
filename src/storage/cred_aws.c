/*
 * cred_aws.c - the AWS sources of temporary credentials, asked as the
 * SDKs ask them (botocore's credentials.py, aws-sdk-go-v2): a profile's
 * credential_process, web identity (STS AssumeRoleWithWebIdentity), the
 * SSO token `aws sso login` caches, the container credentials endpoint
 * (ECS, EKS Pod Identity) and EC2 instance metadata (IMDSv2). Which one a
 * location uses is creds.c's choice; cred.c asks again before expiry.
 *
 * Every reply is untrusted input: the readers below take only the fields
 * they need, and their messages never quote a reply (it holds secrets).
 */
#include "s3_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/util.h"

extern char **environ;

#define IMDS_TTL "21600"        /* seconds an IMDSv2 token asks for */
#define IMDS_TIMEOUT 1          /* s per request: off EC2 nothing answers */
#define IMDS_ATTEMPTS 2         /* one retry */
#define CONTAINER_TIMEOUT 2
#define CONTAINER_ATTEMPTS 3
#define TOKEN_MAX (64u << 10)   /* a web identity or container token */
#define PROCESS_OUT_MAX (64u << 10)
#define PROCESS_ERR_MAX 512

/* ---- readers ---- */

time_t st_parse_time(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!end)
        return 0;
    if (*end == '.')
        end += 1 + strspn(end + 1, "0123456789");
    time_t t = timegm(&tm);
    /* An offset other than Z: "+01:00" means an hour ahead of UTC. */
    if ((*end == '+' || *end == '-') && strlen(end) >= 6 &&
        end[3] == ':') {
        int h = (end[1] - '0') * 10 + (end[2] - '0');
        int m = (end[4] - '0') * 10 + (end[5] - '0');
        long off = (long)h * 3600 + (long)m * 60;
        t += *end == '+' ? -off : off;
    }
    return t > 0 ? t : 0;
}

static const char *jstr(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

static void take(struct st_keys *out, const char *ak, const char *sk,
                 const char *tok)
{
    out->ak = ckpt_xstrdup(ak);
    out->sk = ckpt_xstrdup(sk);
    out->token = tok ? ckpt_xstrdup(tok) : NULL;
}

int st_parse_cred_json(const char *text, enum st_json_style style,
                       const char *what, struct st_keys *out,
                       struct ckpt_err *err)
{
    memset(out, 0, sizeof(*out));
    cJSON *j = cJSON_Parse(text);
    const cJSON *o = j;
    int rc = -1;
    if (!cJSON_IsObject(j)) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: the reply is not a JSON object",
                     what);
        goto out;
    }
    if (style == ST_JSON_PROCESS) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "Version");
        if (!cJSON_IsNumber(v) || v->valuedouble != 1) {
            ckpt_err_set(err, CKPT_EAUTH, "%s: the output's Version is not "
                         "1 (the only one there is)", what);
            goto out;
        }
    }
    if (style == ST_JSON_METADATA && jstr(j, "Code") &&
        strcmp(jstr(j, "Code"), "Success")) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: the reply's Code is not "
                     "Success", what);
        goto out;
    }
    if (style == ST_JSON_SSO)
        o = cJSON_GetObjectItemCaseSensitive(j, "roleCredentials");
    int sso = style == ST_JSON_SSO;
    const char *ak = jstr(o, sso ? "accessKeyId" : "AccessKeyId");
    const char *sk = jstr(o, sso ? "secretAccessKey" : "SecretAccessKey");
    const char *tok = jstr(o, sso ? "sessionToken" : style == ST_JSON_PROCESS
                                  ? "SessionToken" : "Token");
    if (!ak || !sk) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: the reply has no %s", what,
                     sso ? "roleCredentials with accessKeyId and "
                           "secretAccessKey"
                         : "AccessKeyId and SecretAccessKey");
        goto out;
    }
    if (sso) {
        /* Milliseconds since the epoch. */
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "expiration");
        if (cJSON_IsNumber(e) && e->valuedouble > 0 &&
            e->valuedouble < 1e15)
            out->expires = (time_t)(e->valuedouble / 1000);
    } else {
        const char *e = jstr(j, "Expiration");
        out->expires = e ? st_parse_time(e) : 0;
        if (e && !out->expires) {
            ckpt_err_set(err, CKPT_EAUTH, "%s: the reply's Expiration is "
                         "not a time", what);
            goto out;
        }
    }
    /* Temporary keys without their session token would be refused: the
     * metadata services and SSO always send one. */
    if (!tok && style != ST_JSON_PROCESS) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: the reply has no session token",
                     what);
        goto out;
    }
    take(out, ak, sk, tok);
    rc = 0;
out:
    cJSON_Delete(j);
    return rc;
}

int st_parse_sts_xml(const char *xml, size_t len, const char *what,
                     struct st_keys *out, struct ckpt_err *err)
{
    memset(out, 0, sizeof(*out));
    size_t pos = 0, n;
    const char *in;
    struct ckpt_buf ak = CKPT_BUF_INIT, sk = CKPT_BUF_INIT,
                    tok = CKPT_BUF_INIT, exp = CKPT_BUF_INIT;
    int rc = -1;
    if (st_xml_next(xml, len, &pos, "Credentials", &in, &n) != 0 ||
        st_xml_text(in, n, "AccessKeyId", &ak) != 0 || !ak.len ||
        st_xml_text(in, n, "SecretAccessKey", &sk) != 0 || !sk.len ||
        st_xml_text(in, n, "SessionToken", &tok) != 0 || !tok.len) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: the reply has no Credentials "
                     "with AccessKeyId, SecretAccessKey and SessionToken",
                     what);
        goto out;
    }
    if (st_xml_text(in, n, "Expiration", &exp) != 0 ||
        !(out->expires = st_parse_time(exp.ptr))) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: the reply's Expiration is not a "
                     "time", what);
        goto out;
    }
    take(out, ak.ptr, sk.ptr, tok.ptr);
    rc = 0;
out:
    memset(sk.ptr, 0, sk.len);
    memset(tok.ptr, 0, tok.len);
    ckpt_buf_release(&ak);
    ckpt_buf_release(&sk);
    ckpt_buf_release(&tok);
    ckpt_buf_release(&exp);
    return rc;
}

int st_parse_sso_cache(const char *text, const char *what,
                       struct st_keys *out, struct ckpt_err *err)
{
    memset(out, 0, sizeof(*out));
    cJSON *j = cJSON_Parse(text);
    const char *tok = jstr(j, "accessToken");
    const char *exp = jstr(j, "expiresAt");
    int rc = 0;
    if (!tok || !exp || !(out->expires = st_parse_time(exp)))
        rc = ckpt_err_set(err, CKPT_EAUTH, "%s: no accessToken with an "
                          "expiresAt in it", what);
    else
        out->token = ckpt_xstrdup(tok);
    cJSON_Delete(j);
    return rc;
}

/* ---- words of a command line ---- */

static void add_word(char ***v, size_t *n, struct ckpt_buf *w)
{
    *v = ckpt_xreallocarray(*v, *n + 2, sizeof(**v));
    (*v)[(*n)++] = ckpt_buf_detach(w, NULL);
    (*v)[*n] = NULL;
}

char **st_split_words(const char *s)
{
    char **v = ckpt_xcalloc(1, sizeof(*v));
    size_t n = 0;
    struct ckpt_buf w = CKPT_BUF_INIT;
    int in_word = 0;
    char quote = 0;
    for (const char *p = s; *p; p++) {
        if (quote == '\'') {
            if (*p == '\'')
                quote = 0;
            else
                ckpt_buf_addch(&w, *p);
        } else if (quote == '"') {
            if (*p == '"')
                quote = 0;
            else if (*p == '\\' && p[1] && strchr("\\\"$`", p[1]))
                ckpt_buf_addch(&w, *++p);
            else
                ckpt_buf_addch(&w, *p);
        } else if (*p == ' ' || *p == '\t' || *p == '\n') {
            if (in_word)
                add_word(&v, &n, &w);
            in_word = 0;
        } else {
            in_word = 1;
            if (*p == '\'' || *p == '"')
                quote = *p;
            else if (*p == '\\' && p[1])
                ckpt_buf_addch(&w, *++p);
            else
                ckpt_buf_addch(&w, *p);
        }
    }
    if (quote) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        ckpt_buf_release(&w);
        return NULL;
    }
    if (in_word)
        add_word(&v, &n, &w);
    ckpt_buf_release(&w);
    return v;
}

static void free_words(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* ---- credential_process ---- */

/* Read fd into b (at most max bytes kept, the rest drained): 0 at end of
 * file, 1 while more may come. */
static int drain(int fd, struct ckpt_buf *b, size_t max)
{
    char chunk[4096];
    ssize_t got = read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR)
        return 1;
    if (got <= 0)
        return 0;
    size_t keep = b->len < max ? max - b->len : 0;
    ckpt_buf_add(b, chunk, (size_t)got < keep ? (size_t)got : keep);
    return 1;
}

/* Run argv (no shell), its stdout into out and stderr into errb; its wait
 * status, or -1 with err when it could not be started. */
static int run_command(char **argv, struct ckpt_buf *out,
                       struct ckpt_buf *errb, const char *what,
                       struct ckpt_err *err)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return ckpt_err_sys(err, "%s: pipe", what);
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        return ckpt_err_sys(err, "%s: pipe", what);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    pid_t pid;
    int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(po[1]);
    close(pe[1]);
    if (e != 0) {
        close(po[0]);
        close(pe[0]);
        errno = e;
        return ckpt_err_sys(err, "%s: cannot run '%s'", what, argv[0]);
    }
    struct pollfd p[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
    int open_fds = 2;
    while (open_fds) {
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            if (!drain(p[i].fd, i ? errb : out,
                       i ? PROCESS_ERR_MAX : PROCESS_OUT_MAX)) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (p[i].fd >= 0)
            close(p[i].fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return status;
}

static int process_fetch(struct st_cred *c, struct st_keys *out,
                         struct ckpt_err *err)
{
    char **argv = st_split_words(c->command);
    if (!argv || !argv[0]) {
        free_words(argv);
        return ckpt_err_set(err, CKPT_EAUTH, "%s: credential_process is %s",
                            c->source, argv ? "empty" : "not a command "
                            "line (a quote is not closed)");
    }
    struct ckpt_buf o = CKPT_BUF_INIT, e = CKPT_BUF_INIT;
    int rc = 0;
    int st = run_command(argv, &o, &e, c->source, err);
    if (st < 0) {
        rc = -1;
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        /* Its first line of stderr says why (its output is never shown:
         * it holds the keys). */
        size_t line = strcspn(e.ptr, "\n");
        rc = ckpt_err_set(err, CKPT_EAUTH, "%s: '%s' %s %d%s%.*s", c->source,
                          argv[0], WIFEXITED(st) ? "exited with"
                          : "was killed by signal", WIFEXITED(st)
                          ? WEXITSTATUS(st) : WTERMSIG(st), line ? ": " : "",
                          (int)(line > 200 ? 200 : line), e.ptr);
    } else {
        rc = st_parse_cred_json(o.ptr, ST_JSON_PROCESS, c->source, out,
                                err);
    }
    memset(o.ptr, 0, o.len);
    ckpt_buf_release(&o);
    ckpt_buf_release(&e);
    free_words(argv);
    return rc;
}

/* ---- requests ---- */

static struct curl_slist *header(struct curl_slist *l, const char *name,
                                 const char *value)
{
    char *line = ckpt_xasprintf("%s: %s", name, value);
    struct curl_slist *n = curl_slist_append(l, line);
    memset(line, 0, strlen(line));
    free(line);
    if (!n)
        ckpt_die_oom("adding an HTTP header");
    return n;
}

/* A small text file (a token) with its trailing blanks cut; NULL with err
 * (what names it). */
static char *read_token(const char *path, const char *what,
                        struct ckpt_err *err)
{
    char *t = ckpt_read_small_file(path, TOKEN_MAX);
    if (!t) {
        ckpt_err_sys(err, "%s: open '%s'", what, path);
        return NULL;
    }
    size_t n = strlen(t);
    while (n && strchr(" \t\r\n", t[n - 1]))
        t[--n] = '\0';
    if (!n) {
        free(t);
        ckpt_err_set(err, CKPT_EAUTH, "%s: '%s' is empty", what, path);
        return NULL;
    }
    return t;
}

static void wipe_free(char *s)
{
    if (s) {
        memset(s, 0, strlen(s));
        free(s);
    }
}

/* GET or PUT url with headers h (freed here): the reply's body, or NULL
 * with err. */
static char *ask(struct http_client *hc, const char *what, const char *method,
                 const char *url, struct curl_slist *h, long timeout_s,
                 int attempts, int quiet, struct ckpt_err *err)
{
    /* (A PUT without a body still sends one, empty.) */
    struct http_req req = { .method = method, .url = url, .headers = h,
                            .body = strcmp(method, "PUT") ? NULL : "",
                            .timeout_s = timeout_s };
    struct http_resp resp;
    char *body = NULL;
    if (st_cred_http(hc, what, &req, attempts, quiet, &resp, err) == 0) {
        body = ckpt_buf_detach(&resp.body, NULL);
        http_resp_release(&resp);
    }
    curl_slist_free_all(h);
    return body;
}

/* EC2 instance metadata, IMDSv2: a session token (PUT, with the TTL it
 * asks for), then the role's name, then the role's credentials. */
static int imds_fetch(struct st_cred *c, struct http_client *hc,
                      struct st_keys *out, struct ckpt_err *err)
{
    char *what = ckpt_xasprintf("EC2 instance metadata %s", c->url);
    char *url = ckpt_xasprintf("%s/latest/api/token", c->url);
    char *tok = ask(hc, what, "PUT", url, header(NULL,
                    "X-aws-ec2-metadata-token-ttl-seconds", IMDS_TTL),
                    IMDS_TIMEOUT, IMDS_ATTEMPTS, 1, err);
    char *role = NULL, *json = NULL;
    int rc = -1;
    free(url);
    if (!tok)
        goto out;
    url = ckpt_xasprintf("%s/latest/meta-data/iam/security-credentials/",
                         c->url);
    role = ask(hc, what, "GET", url, header(NULL, "X-aws-ec2-metadata-"
               "token", tok), IMDS_TIMEOUT, IMDS_ATTEMPTS, 0, err);
    free(url);
    if (!role) {
        if (err->http_status == 404)
            ckpt_err_set(err, CKPT_EAUTH, "%s: no IAM role is attached to "
                         "this instance", what);
        goto out;
    }
    role[strcspn(role, "\r\n")] = '\0';
    if (!*role) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: no IAM role is attached to this "
                     "instance", what);
        goto out;
    }
    struct ckpt_buf u = CKPT_BUF_INIT;
    ckpt_buf_addf(&u, "%s/latest/meta-data/iam/security-credentials/",
                  c->url);
    ckpt_sigv4_encode(&u, role, strlen(role), 0);
    json = ask(hc, what, "GET", u.ptr, header(NULL, "X-aws-ec2-metadata-"
               "token", tok), IMDS_TIMEOUT, IMDS_ATTEMPTS, 0, err);
    ckpt_buf_release(&u);
    if (json)
        rc = st_parse_cred_json(json, ST_JSON_METADATA, what, out, err);
out:
    wipe_free(tok);
    free(role);
    wipe_free(json);
    free(what);
    return rc;
}

/* The container credentials endpoint (ECS task role, EKS Pod Identity):
 * the token file is read again each time (it rotates). */
static int container_fetch(struct st_cred *c, struct http_client *hc,
                           struct st_keys *out, struct ckpt_err *err)
{
    char *what = ckpt_xasprintf("container credentials %s", c->url);
    char *auth = c->file ? read_token(c->file, what, err)
                         : c->auth ? ckpt_xstrdup(c->auth) : NULL;
    int rc = -1;
    if (c->file && !auth)
        goto out;
    if (auth && strpbrk(auth, "\r\n")) {
        ckpt_err_set(err, CKPT_EAUTH, "%s: the authorization token has a "
                     "line break in it", what);
        goto out;
    }
    char *json = ask(hc, what, "GET", c->url, auth ? header(NULL,
                     "Authorization", auth) : NULL, CONTAINER_TIMEOUT,
                     CONTAINER_ATTEMPTS, 0, err);
    if (json)
        rc = st_parse_cred_json(json, ST_JSON_METADATA, what, out, err);
    wipe_free(json);
out:
    wipe_free(auth);
    free(what);
    return rc;
}

static void form(struct ckpt_buf *b, const char *name, const char *value)
{
    ckpt_buf_addf(b, "%s%s=", b->len ? "&" : "", name);
    ckpt_sigv4_encode(b, value, strlen(value), 0);
}

/* Web identity: the token file (read again each time: it rotates) for
 * temporary keys of the role, an unsigned STS call. */
static int web_fetch(struct st_cred *c, struct http_client *hc, int attempts,
                     struct st_keys *out, struct ckpt_err *err)
{
    char *what = ckpt_xasprintf("web identity (STS %s)", c->url);
    char *tok = read_token(c->file, what, err);
    if (!tok) {
        free(what);
        return -1;
    }
    struct ckpt_buf body = CKPT_BUF_INIT;
    char *session = c->session ? ckpt_xstrdup(c->session)
                               : ckpt_xasprintf("ckpt-%lld",
                                                (long long)time(NULL));
    form(&body, "Action", "AssumeRoleWithWebIdentity");
    form(&body, "Version", "2011-06-15");
    form(&body, "RoleArn", c->role);
    form(&body, "RoleSessionName", session);
    form(&body, "WebIdentityToken", tok);
    free(session);
    wipe_free(tok);
    struct curl_slist *h = header(NULL, "Content-Type",
                                  "application/x-www-form-urlencoded");
    h = curl_slist_append(h, "Expect:");
    char *url = ckpt_xasprintf("%s/", c->url);
    struct http_req req = { .method = "POST", .url = url, .headers = h,
                            .body = body.ptr, .body_len = body.len,
                            .timeout_s = 60 };
    struct http_resp resp;
    int rc = st_cred_http(hc, what, &req, attempts, 0, &resp, err);
    if (rc == 0) {
        rc = st_parse_sts_xml(resp.body.ptr, resp.body.len, what, out, err);
        memset(resp.body.ptr, 0, resp.body.len);
        http_resp_release(&resp);
    }
    memset(body.ptr, 0, body.len);
    ckpt_buf_release(&body);
    curl_slist_free_all(h);
    free(url);
    free(what);
    return rc;
}

/* SSO: the access token `aws sso login` cached, traded at the SSO portal
 * for the role's temporary keys. */
static int sso_fetch(struct st_cred *c, struct http_client *hc, int attempts,
                     struct st_keys *out, struct ckpt_err *err)
{
    char *text = ckpt_read_small_file(c->file, 1u << 20);
    struct st_keys cache;
    memset(&cache, 0, sizeof(cache));
    if (!text)
        return ckpt_err_set(err, CKPT_EAUTH, "%s: no SSO token cached in "
                            "'%s': run 'aws sso login --profile %s'",
                            c->source, c->file, c->profile);
    int rc = st_parse_sso_cache(text, c->source, &cache, err);
    wipe_free(text);
    if (rc != 0)
        return -1;
    if (cache.expires <= time(NULL)) {
        st_keys_release(&cache);
        return ckpt_err_set(err, CKPT_EAUTH, "%s: the SSO token cached in "
                            "'%s' has expired: run 'aws sso login --profile "
                            "%s'", c->source, c->file, c->profile);
    }
    char *what = ckpt_xasprintf("%s (SSO portal %s)", c->source, c->url);
    struct ckpt_buf u = CKPT_BUF_INIT;
    ckpt_buf_addf(&u, "%s/federation/credentials?account_id=", c->url);
    ckpt_sigv4_encode(&u, c->account, strlen(c->account), 0);
    ckpt_buf_addstr(&u, "&role_name=");
    ckpt_sigv4_encode(&u, c->role, strlen(c->role), 0);
    char *json = ask(hc, what, "GET", u.ptr, header(NULL,
                     "x-amz-sso_bearer_token", cache.token), 0, attempts,
                     0, err);
    st_keys_release(&cache);
    if (json) {
        rc = st_parse_cred_json(json, ST_JSON_SSO, what, out, err);
    } else {
        rc = -1;
        if (err->http_status == 401 || err->http_status == 403)
            ckpt_err_set(err, CKPT_EAUTH, "%s: the SSO token was refused: "
                         "run 'aws sso login --profile %s'", what,
                         c->profile);
    }
    wipe_free(json);
    ckpt_buf_release(&u);
    free(what);
    return rc;
}

int st_aws_fetch(struct st_cred *c, struct http_client *hc, int attempts,
                 struct st_keys *out, struct ckpt_err *err)
{
    switch (c->kind) {
    case ST_CRED_PROCESS:
        return process_fetch(c, out, err);
    case ST_CRED_WEB:
        return web_fetch(c, hc, attempts, out, err);
    case ST_CRED_SSO:
        return sso_fetch(c, hc, attempts, out, err);
    case ST_CRED_CONTAINER:
        return container_fetch(c, hc, out, err);
    case ST_CRED_IMDS:
        return imds_fetch(c, hc, out, err);
    default:
        return ckpt_err_set(err, CKPT_EINTERNAL, "%s: not a source to ask",
                            c->source);
    }
}
