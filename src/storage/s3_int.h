/*
 * s3_int.h - the object-storage client's internals: configuration
 * (creds.c), HTTP transport (http.c), GCS OAuth (gcs_oauth.c), and the
 * small XML reader (s3xml.c). Private to src/storage: do not expose.
 */
#ifndef CKPT_S3_INT_H
#define CKPT_S3_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <curl/curl.h>

#include "ckpt/buf.h"
#include "ckpt/err.h"
#include "ckpt/storage.h"
#include "sigv4.h"

/* ---- credentials (cred.c, cred_aws.c, gcs_oauth.c) ---- */

enum st_cred_kind {
    ST_CRED_KEYS = 0,   /* an access key and secret (and session token)
                           from the environment or a profile: fixed */
    ST_CRED_PROCESS,    /* a profile's credential_process */
    ST_CRED_WEB,        /* web identity: STS AssumeRoleWithWebIdentity */
    ST_CRED_SSO,        /* IAM Identity Center: `aws sso login`'s token */
    ST_CRED_CONTAINER,  /* ECS / EKS Pod Identity credentials endpoint */
    ST_CRED_IMDS,       /* EC2 instance metadata (IMDSv2) */
    ST_CRED_GCS,        /* a Google OAuth bearer token (gcs_oauth.c) */
};

/* What one request signs with, copied out of a st_cred (or what a source
 * gave): owned, wiped by st_keys_release. AWS: ak, sk and token (the
 * session token, or NULL); Google: token alone (a bearer token). */
struct st_keys {
    char *ak, *sk, *token;
    time_t expires;     /* when they stop working (UTC), 0: never */
};
void st_keys_release(struct st_keys *k);

struct gcs_oauth;
struct http_client;
struct http_req;
struct http_resp;

/* Credentials, and where they come from. Fixed keys, or a source asked
 * again shortly before what it gave expires. A source object is shared
 * by every storage and thread of the process that resolved to the same
 * source (st_cred_share). Nothing in it but the keys (and the container
 * token) is a secret; they are only copied out under mu, never formatted
 * into a message. */
struct st_cred {
    pthread_mutex_t mu;
    enum st_cred_kind kind;
    char *id;           /* owned: the same id, the same source */
    char *source;       /* owned: where they come from, for messages:
                           "the environment", "profile 'x'", ... */
    /* The source's settings (owned; NULL where its kind has none). */
    char *url;          /* IMDS, container, STS or SSO portal endpoint */
    char *file;         /* web identity token, SSO token cache, container
                           token, or Google's JSON, read when it is used */
    char *command;      /* credential_process */
    char *role;         /* role ARN (web identity), role name (SSO) */
    char *account;      /* SSO account ID */
    char *session;      /* role session name (web identity) */
    char *profile;      /* the profile it is configured in */
    char *auth;         /* container: the Authorization token itself */
    struct gcs_oauth *oauth;  /* owned: Google's token source, or NULL */
    /* What it gave (under mu). */
    char *ak, *sk, *token;
    time_t expires;     /* UTC; 0: never */
    time_t refresh_at;  /* UTC: asked again from then on; 0: never */
    int shared;         /* in the process's list: never freed */
};

/* Refresh this long before credentials expire (or halfway, when they
 * live less than twice this long). */
#define ST_CRED_EARLY 300
/* Keys whose refresh failed are used no closer to their expiry than this:
 * a request signed with them must reach the service before they end. */
#define ST_CRED_MARGIN 5

/* A new source of kind (id and source: owned now). */
struct st_cred *st_cred_new(enum st_cred_kind kind, char *id, char *source);
/* Free c unless it is shared. NULL-safe. */
void st_cred_free(struct st_cred *c);
/* The process's source with c's id: c itself, now shared, or the one
 * shared before (c is then freed). Fixed keys are never shared. */
struct st_cred *st_cred_share(struct st_cred *c);
/* The keys to sign the next request with, fetched or refreshed first
 * when they are due (hc carries the request; attempts: its retries).
 * A refresh that fails while the keys still work keeps them. Thread-safe.
 * 0, or -1 with err. */
int st_cred_get(struct st_cred *c, struct http_client *hc, int attempts,
                struct st_keys *out, struct ckpt_err *err);
/* When keys that expire at expires (fetched at now) are asked again. */
time_t st_cred_refresh_time(time_t now, time_t expires);

/* One request for credentials with its retries (attempts, each within
 * req->timeout_s; quiet: retries are not told, as for a metadata service
 * that is only asked in case it is there): 0 with *resp a 2xx reply, or
 * -1 with err naming what (resp released). With CKPT_TEST_LOOPBACK_ONLY
 * set, a URL whose host is not a loopback address is refused unasked
 * (tests). */
int st_cred_http(struct http_client *hc, const char *what,
                 const struct http_req *req, int attempts, int quiet,
                 struct http_resp *resp, struct ckpt_err *err);

/* Fetch the keys of an AWS source (cred_aws.c): every kind but KEYS and
 * GCS. Called under c->mu. */
int st_aws_fetch(struct st_cred *c, struct http_client *hc, int attempts,
                 struct st_keys *out, struct ckpt_err *err);

/* Readers of what the sources answer (cred_aws.c; fuzzed by credreply).
 * Each fills out (owned) and returns 0, or -1 with err (CKPT_EAUTH)
 * naming what (never quoting the reply). */
enum st_json_style {
    ST_JSON_METADATA,   /* IMDS, container: AccessKeyId, Token, ... */
    ST_JSON_PROCESS,    /* credential_process: Version 1, SessionToken */
    ST_JSON_SSO,        /* GetRoleCredentials: roleCredentials {...} */
};
int st_parse_cred_json(const char *text, enum st_json_style style,
                       const char *what, struct st_keys *out,
                       struct ckpt_err *err);
/* STS AssumeRoleWithWebIdentityResponse XML. */
int st_parse_sts_xml(const char *xml, size_t len, const char *what,
                     struct st_keys *out, struct ckpt_err *err);
/* An SSO token cache file: accessToken into out->token, expiresAt into
 * out->expires. */
int st_parse_sso_cache(const char *text, const char *what,
                       struct st_keys *out, struct ckpt_err *err);
/* ISO 8601 UTC ("2024-05-01T12:00:00Z", fractions, "+00:00", "UTC"):
 * seconds since the epoch, or 0. */
time_t st_parse_time(const char *s);
/* A command line split into words as sh splits them, without expanding
 * anything: blanks separate, '...' and "..." quote, \ escapes. NULL-
 * terminated argv (free each and it), or NULL on an unclosed quote. */
char **st_split_words(const char *s);

/* ---- configuration (creds.c) ---- */

/* Where and as whom a storage talks. */
struct s3_conf {
    char *endpoint;      /* owned: "http[s]://host[:port][/base]", no '/' end */
    char *region;        /* owned */
    struct st_cred *cred; /* owned, or shared (st_cred_free knows) */
    char *looked;        /* owned: the places looked at before a metadata
                            service, the last resort (its failure names
                            them), or NULL */
    int virtual_host;    /* bucket in the host name, not the path */
};

/* Resolve endpoint, region and the source of credentials for a location
 * of scheme in bucket from cfg's flags (NULL: none), the environment and
 * the ~/.aws files (SPEC "Credentials and endpoints"; docs/storage.md);
 * nothing is fetched. display names the location in messages. Returns 0,
 * or -1 with CKPT_EAUTH / CKPT_EUSAGE / CKPT_EUNSUPPORTED. */
int s3_conf_resolve(struct s3_conf *c, enum ckpt_scheme scheme,
                    const char *bucket, const struct ckpt_storage_cfg *cfg,
                    const char *display, struct ckpt_err *err);
void s3_conf_release(struct s3_conf *c);

/* An INI file as the AWS tools read it (sections, `key = value`, and one
 * level of indented sub-keys below a `key =` line). */
struct ini;
struct ini *st_ini_parse(const char *text);
void st_ini_free(struct ini *ini);
/* Value of key in section (sub: the parent key of a nested block, or NULL).
 * Borrowed; NULL if absent. */
const char *st_ini_get(const struct ini *ini, const char *section,
                    const char *sub, const char *key);
int st_ini_has_section(const struct ini *ini, const char *section);

/* ---- HTTP (http.c) ---- */

struct http_stats {
    _Atomic uint64_t requests;   /* attempts sent */
    _Atomic uint64_t retries;    /* attempts that were retries */
    _Atomic uint64_t bytes_in;   /* response body bytes received */
    _Atomic uint64_t bytes_out;  /* request body bytes sent */
};

/* A pool of curl easy handles: each keeps its connections alive, so a
 * handle taken again reuses them. Thread-safe. */
struct http_client {
    pthread_mutex_t mu;
    CURL **idle;          /* owned handles not in use */
    size_t nidle, cap;
    int insecure;
    int verbose;
    char *ca_bundle;      /* owned: AWS_CA_BUNDLE, or NULL (system CAs) */
    struct http_stats stats;
    /* Every request's limits (docs/storage.md): slower than min_speed
     * bytes/s for slow_time s fails it, and so does taking longer than
     * deadline s plus one per deadline_speed bytes of its body. */
    long min_speed, slow_time, deadline, deadline_speed;
    ckpt_storage_retry_fn on_retry;   /* NULL: silent */
    void *retry_ud;
};

#define HTTP_MIN_SPEED 1024L        /* CKPT_HTTP_MIN_SPEED, bytes/s */
#define HTTP_SLOW_TIME 60L          /* CKPT_HTTP_SLOW_TIME, s */
#define HTTP_DEADLINE 600L          /* CKPT_HTTP_DEADLINE, s */
#define HTTP_DEADLINE_SPEED 65536L  /* CKPT_HTTP_DEADLINE_SPEED, bytes/s */

/* The time limit of one request whose body (sent and expected back) is
 * bytes long, in seconds (0: none). */
long http_deadline(const struct http_client *hc, uint64_t bytes);

struct http_resp;

void http_client_init(struct http_client *hc, int insecure, int verbose);
void http_client_release(struct http_client *hc);
/* A handle for one request; NULL (resp says why, as a transport error)
 * when libcurl cannot make one. */
CURL *http_get_handle(struct http_client *hc, struct http_resp *resp);
/* Give h back for reuse (keep != 0), or close it (after a transport error
 * a connection may be poisoned). */
void http_put_handle(struct http_client *hc, CURL *h, int keep);

/* One request attempt. The caller owns every pointer. */
struct http_req {
    const char *method;
    const char *url;              /* fully encoded */
    struct curl_slist *headers;   /* borrowed */
    const char *body;             /* request body, or NULL */
    size_t body_len;
    /* Or the body pulled by offset while it is sent (body NULL,
     * body_len its size); a failure stops the transfer and lands in
     * *body_err (resp->body_failed set). */
    ckpt_body_fn body_fn;
    void *body_ud;
    struct ckpt_err *body_err;
    /* Response body: into sink[0..sink_cap) when sink is set (a ranged
     * read), else appended to resp->body. */
    char *sink;
    size_t sink_cap;
    size_t sink_skip;             /* bytes of a 200 body to drop first */
    long timeout_s;               /* whole-request limit, 0: none (the
                                     client's deadline applies anyway) */
};

struct http_resp {
    long status;                  /* 0 when no response */
    CURLcode curl;                /* transport result */
    struct ckpt_buf body;         /* non-sink body (error XML, listings) */
    size_t sink_len;              /* bytes written into req->sink */
    uint64_t content_length;      /* Content-Length, or UINT64_MAX */
    uint64_t total_size;          /* from Content-Range, or UINT64_MAX */
    int64_t mtime;                /* Last-Modified, or 0 */
    double retry_after;           /* seconds, or -1 */
    char etag[80];                /* unquoted, or "" */
    char bucket_region[32];       /* x-amz-bucket-region, or "" */
    char generation[24];          /* x-goog-generation (GCS), or "" */
    char metadata_flavor[16];     /* Metadata-Flavor (GCE), or "" */
    char curl_msg[CURL_ERROR_SIZE];
    /* Transfer state, private to http.c. */
    struct http_client *hc;
    const struct http_req *req;
    size_t up_off;                /* request body bytes handed to curl */
    int body_failed;              /* req->body_fn failed: not retried */
    size_t skip_left;             /* sink bytes still to drop */
    int sink_full;                /* stopped: the sink had no more room */
    long deadline;                /* this attempt's time limit (s), or 0 */
};

/* 1 when the header line (n bytes, CRLF included or not) is "name: ..."
 * (name in any case); *val, *vlen: the value, trimmed. */
int http_header_is(const char *line, size_t n, const char *name,
                   const char **val, size_t *vlen);
void http_resp_init(struct http_resp *r);
void http_resp_release(struct http_resp *r);
/* Prepare h for req/resp (resets h first). */
void http_setup(struct http_client *hc, CURL *h, const struct http_req *req,
                struct http_resp *resp);
/* Collect the status after h finished with result cc. */
void http_finish(CURL *h, CURLcode cc, struct http_resp *resp);
/* Run one attempt synchronously on a pooled handle. */
void http_perform(struct http_client *hc, const struct http_req *req,
                  struct http_resp *resp);

/* Retry policy (docs/storage.md "Retries"): 1 if an attempt with this
 * outcome is worth repeating. code/message: from the error body or "". */
int http_retryable(const struct http_resp *r, const char *code,
                   const char *message);
/* Seconds to wait before attempt n+1 (n >= 1): full jitter over
 * min(cap, base * 2^(n-1)), or the server's Retry-After when larger. */
double http_backoff(int attempt, double retry_after);
void http_sleep(double seconds);
/* The name of an HTTP status, for replies without an error code (HEAD):
 * "Forbidden", "NotFound", ..., "Error". */
const char *http_status_name(long status);
/* Tell hc's on_retry that attempt n of what (of at most attempts) failed
 * with resp and is repeated after delay seconds; code names an HTTP
 * failure ("SlowDown", or the status's name). */
void http_tell_retry(struct http_client *hc, const char *what, int attempt,
                     int attempts, double delay,
                     const struct http_resp *resp, const char *code);

/* ---- XML (s3xml.c) ---- */

/* Find the next <tag>...</tag> at or after *pos in xml[0..len). On success
 * returns 0, sets [*in, *in_len) to the element's content and *pos past it.
 * Not a general parser: S3 replies are flat and never use CDATA. */
int st_xml_next(const char *xml, size_t len, size_t *pos, const char *tag,
             const char **in, size_t *in_len);
/* Decoded text of the first <tag> in xml[0..len), appended to out.
 * Returns 0, or -1 if absent. */
int st_xml_text(const char *xml, size_t len, const char *tag,
             struct ckpt_buf *out);
/* Append s with XML's five special characters escaped. */
void st_xml_escape(struct ckpt_buf *out, const char *s);

/* ---- GCS OAuth (gcs_oauth.c) ---- */

enum gcs_kind {
    GCS_SA = 0,       /* a service-account key: an RS256 JWT assertion */
    GCS_USER,         /* authorized_user (gcloud auth application-default
                         login): a refresh token */
    GCS_METADATA,     /* the GCE metadata server's default account */
};

/* One of Google's sources of bearer tokens and the token it gave. */
struct gcs_oauth {
    pthread_mutex_t mu;
    enum gcs_kind kind;
    char *client_email;   /* owned (SA) */
    char *private_key;    /* owned PEM (SA) */
    char *client_id;      /* owned (USER) */
    char *client_secret;  /* owned (USER) */
    char *refresh_token;  /* owned (USER) */
    char *token_uri;      /* owned: the token endpoint (SA, USER), the
                             metadata server's token URL (METADATA) */
    char *probe_url;      /* owned (METADATA): asked first, briefly */
    int probed;           /* (METADATA) the probe answered */
    char *token;          /* owned bearer token, or NULL */
    double expires;       /* ckpt_now() when token stops being used */
};

/* Load a JSON key file: a service account's or an authorized user's
 * (type "external_account" and others are refused, naming the type).
 * 0 or -1 (CKPT_EAUTH; CKPT_ENOTFOUND/CKPT_EIO when it cannot be read). */
int gcs_oauth_load(struct gcs_oauth *o, const char *path,
                   struct ckpt_err *err);
/* The key file's text (path names it in messages); o as from _load's
 * start (zeroed, mutex initialised). Exposed for the fuzz target. */
int gcs_oauth_parse_key(struct gcs_oauth *o, const char *text,
                        const char *path, struct ckpt_err *err);
/* o for the metadata server: its token URL and probe URL (copied). */
void gcs_oauth_metadata(struct gcs_oauth *o, const char *token_url,
                        const char *probe_url);
/* Take the token endpoint's JSON reply body (NUL-terminated) into o.
 * 0, or -1 (CKPT_EAUTH) without an access_token. */
int gcs_oauth_take_token(struct gcs_oauth *o, const char *body,
                         struct ckpt_err *err);
void gcs_oauth_release(struct gcs_oauth *o);
/* A valid access token (fetched or cached) appended to out. */
int gcs_oauth_token(struct gcs_oauth *o, struct http_client *hc,
                    int retries, struct ckpt_buf *out, struct ckpt_err *err);
/* The signed JWT assertion for o at time now (exposed for tests). */
int gcs_oauth_jwt(const struct gcs_oauth *o, time_t now,
                  struct ckpt_buf *out, struct ckpt_err *err);

/* One ListObjectsV2 page checked whole before any key of it is used:
 * every key (and common prefix) below prefix, its rest a plain relative
 * path (no empty, "." or ".." component); a truncated page gives a
 * continuation token (into next) not among used[nused]. 0 at the
 * listing's end, 1 when it goes on at *next, -1 (err) when the page is
 * not to be trusted. */
int s3_list_check(const struct ckpt_buf *xml, const char *prefix,
                  char *const *used, size_t nused, struct ckpt_buf *next,
                  const char *what, struct ckpt_err *err);
/* The value of an x-goog-hash header ("crc32c=BASE64,md5=BASE64"): the
 * hashes the service states for the bytes it holds, into meta's
 * dest_md5 / dest_crc32c (others untouched). */
void s3_goog_hash(const char *value, struct ckpt_obj_meta *meta);

#endif

/* ---- the client (s3.c) ---- */

#define S3_MAX_PARAMS 8
#define S3_MAX_HDRS 8

struct s3 {
    struct s3_conf conf;
    struct http_client hc;
    const char *bucket;        /* borrowed from the storage's loc */
    enum ckpt_scheme scheme;
    char *scheme_host;         /* owned: "http://host[:port]" as sent */
    char *host;                /* owned: Host header value */
    char *base_path;           /* owned: endpoint path ("" or "/base") */
    int attempts;              /* per request, >= 1 */
    uint64_t part_size;        /* 0: chosen per object */
    _Atomic int no_batch_delete; /* learned: DeleteObjects refused */
};

/* One logical request; signed afresh for every attempt. */
struct s3_req {
    const char *method;
    const char *key;           /* raw object key, or NULL: the bucket */
    struct ckpt_sigv4_param q[S3_MAX_PARAMS];
    size_t nq;
    struct ckpt_sigv4_hdr h[S3_MAX_HDRS];
    size_t nh;
    const char *body;          /* borrowed */
    size_t body_len;
    ckpt_body_fn body_fn;      /* or pulled by offset (http_req) */
    void *body_ud;
    struct ckpt_err *body_err;
    int unsigned_payload;      /* large bodies: don't hash */
    char *sink;                /* GET body destination (ranged read) */
    size_t sink_cap;
    size_t sink_skip;
    char payload_hash[65];     /* computed on first use */
};

void s3_req_init(struct s3_req *r, const char *method, const char *key);
void s3_req_param(struct s3_req *r, const char *name, const char *value);
void s3_req_header(struct s3_req *r, const char *name, const char *value);

/* Derive scheme_host, host and base_path from conf.endpoint, bucket and
 * conf.virtual_host. 0, or -1 (CKPT_EUSAGE). */
int s3_parse_endpoint(struct s3 *s3, const char *display,
                      struct ckpt_err *err);
/* Append r's URL (encoded path, sorted query) to url. */
void s3_url(struct s3 *s3, const struct s3_req *r, struct ckpt_buf *url);

/* One attempt: sign, send, wait. resp must be initialised. */
int s3_attempt(struct s3 *s3, struct s3_req *r, struct http_resp *resp,
               struct ckpt_err *err);
/* Judge an attempt's outcome: 0 success, 1 retry after *delay seconds,
 * -1 failed (err set, naming `what`). A 2xx whose body is an <Error>
 * document (CompleteMultipartUpload) is a failure too. */
int s3_judge(struct s3 *s3, const struct http_resp *resp, int attempt,
             const char *what, double *delay, struct ckpt_err *err);
/* Attempts with retries until success or failure. */
int s3_exec(struct s3 *s3, struct s3_req *r, struct http_resp *resp,
            const char *what, struct ckpt_err *err);
/* s3_exec, asking give_up before each retry: non-zero fails the request
 * at once (give_up sets err). */
typedef int (*s3_give_up_fn)(void *ud, const struct http_resp *resp,
                             const char *what, struct ckpt_err *err);
int s3_exec_or_give_up(struct s3 *s3, struct s3_req *r,
                       struct http_resp *resp, const char *what,
                       s3_give_up_fn give_up, void *ud,
                       struct ckpt_err *err);
/* "s3://bucket/key" for messages. Malloced. */
char *s3_what(const struct ckpt_storage *st, const char *key);

/* Many requests in flight on one thread (curl multi): parts of one
 * upload, deletes of one tree. Jobs are owned by the caller. */
struct s3_job {
    struct s3_req req;
    struct http_resp resp;
    char *what;                /* owned */
    int rc;                    /* valid when done: 0 or -1 */
    struct ckpt_err err;
    int done;
    /* driver state */
    int attempt;
    double not_before;
    CURL *h;
    struct curl_slist *hdrs;
    struct ckpt_buf url;
    struct http_req hreq;      /* lives as long as the transfer */
    void *ud;                  /* caller's */
};

struct s3_batch {
    struct s3 *s3;
    CURLM *m;
    struct s3_job **jobs;      /* borrowed: not yet done */
    size_t n, cap;
};

void s3_batch_init(struct s3_batch *b, struct s3 *s3);
/* Wait for every job, then free the multi handle. */
void s3_batch_release(struct s3_batch *b);
/* Start j (owned by the caller until it is done). */
void s3_batch_add(struct s3_batch *b, struct s3_job *j);
/* Drive transfers until at most `left` jobs are unfinished. */
void s3_batch_wait(struct s3_batch *b, size_t left);
void s3_job_init(struct s3_job *j, const char *method, const char *key,
                 char *what);
void s3_job_release(struct s3_job *j);

/* Error code and message of an S3 error document, appended to the bufs. */
void s3_error_fields(const struct ckpt_buf *body, struct ckpt_buf *code,
                     struct ckpt_buf *msg);

/* Operations (s3_ops.c, s3_write.c), behind the storage vtable. */
int s3_op_stat(struct ckpt_storage *st, const char *key,
               struct ckpt_stat *out, struct ckpt_err *err);
int s3_op_probe(struct ckpt_storage *st, const char *key,
                struct ckpt_err *err);
int s3_op_list(struct ckpt_storage *st, const char *dir, unsigned flags,
               ckpt_list_fn fn, void *ud, struct ckpt_err *err);
int s3_op_read(struct ckpt_storage *st, const char *key, uint64_t off,
               void *buf, size_t len, size_t *nread, struct ckpt_err *err);
int s3_op_read_if(struct ckpt_storage *st, const char *key, const char *etag,
                  uint64_t off, void *buf, size_t len, size_t *nread,
                  struct ckpt_err *err);
int s3_op_del(struct ckpt_storage *st, const char *key,
              struct ckpt_err *err);
int s3_op_delete_keys(struct ckpt_storage *st, const char *dir,
                      char *const *keys, size_t n, struct ckpt_err *err);
int s3_op_delete_tree(struct ckpt_storage *st, const char *dir,
                      struct ckpt_err *err);
int s3_op_writer_open(struct ckpt_storage *st, const char *key,
                      uint64_t size_hint, struct ckpt_writer **out,
                      struct ckpt_err *err);
int s3_op_put_if_absent(struct ckpt_storage *st, const char *key,
                        const void *data, size_t len, struct ckpt_err *err);

/* Part size for an object of size_hint (UINT64_MAX: unknown) so that
 * 5 TiB fits in 10,000 parts; cfg (0: auto) raises the floor. */
uint64_t s3_part_size(uint64_t size_hint, uint64_t cfg);

/* ISO 8601 "2024-01-02T03:04:05.000Z" to seconds since the epoch. */
int64_t s3_parse_iso8601(const char *s);

/* URL and signed header list (caller frees) for one attempt of r, as
 * s3_attempt sends them; for transfers driven by the caller. */
int s3_sign_request(struct s3 *s3, struct s3_req *r, struct ckpt_buf *url,
                    struct curl_slist **hdrs, struct ckpt_err *err);

/* Uploads driven by the caller (s3_upload.c), behind storage.h's
 * ckpt_storage_put_object / ckpt_storage_mpu_* (dispatched in upload.c). */
int s3_up_head(struct ckpt_storage *st, const char *key,
               struct ckpt_stat *out, struct ckpt_obj_meta *meta,
               struct ckpt_err *err);
int s3_up_put(struct ckpt_storage *st, const char *key, const void *data,
              size_t len, const unsigned char md5[16],
              const struct ckpt_obj_meta *meta, unsigned flags,
              struct ckpt_put_result *res, struct ckpt_err *err);
int s3_up_put_stream(struct ckpt_storage *st, const char *key,
                     uint64_t size, ckpt_body_fn body, void *ud,
                     const unsigned char md5[16],
                     const struct ckpt_obj_meta *meta, unsigned flags,
                     struct ckpt_put_result *res, struct ckpt_err *err);
int s3_up_start(struct ckpt_storage *st, const char *key,
                const struct ckpt_obj_meta *meta, char **upload_id,
                struct ckpt_err *err);
int s3_up_part(struct ckpt_storage *st, const char *key,
               const char *upload_id, int num, const void *data, size_t len,
               const unsigned char md5[16], unsigned flags,
               struct ckpt_put_result *res, struct ckpt_err *err);
int s3_up_finish(struct ckpt_storage *st, const char *key,
                 const char *upload_id, int nparts, const char *const *etags,
                 uint64_t size, struct ckpt_put_result *res,
                 struct ckpt_err *err);
int s3_up_abort(struct ckpt_storage *st, const char *key,
                const char *upload_id, struct ckpt_err *err);
int s3_up_list(struct ckpt_storage *st, const char *prefix,
               ckpt_upload_list_fn fn, void *ud, struct ckpt_err *err);
