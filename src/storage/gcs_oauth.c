/*
 * gcs_oauth.c - bearer tokens for GCS's XML API, from Google's sources as
 * google-auth takes them: a service-account key (an RS256 JWT assertion,
 * OpenSSL, exchanged at the key's token_uri: "oauth2/service-account"), an
 * authorized user's refresh token (gcloud auth application-default login:
 * a refresh_token grant at its token_uri), or the GCE metadata server's
 * default service account (Metadata-Flavor: Google both ways). A token is
 * cached until shortly before it expires.
 */
#include "s3_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "ckpt/util.h"

#define SCOPE "https://www.googleapis.com/auth/devstorage.read_write"
#define GOOGLE_TOKEN_URI "https://oauth2.googleapis.com/token"
#define LIFETIME 3600      /* seconds a JWT asks for (the maximum) */
#define EARLY 300          /* refresh this long before expiry */
#define PROBE_TIMEOUT 1    /* s: off GCE nothing answers */
#define PROBE_ATTEMPTS 2

static char *json_str(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) && v->valuestring[0]
         ? ckpt_xstrdup(v->valuestring) : NULL;
}

int gcs_oauth_load(struct gcs_oauth *o, const char *path,
                   struct ckpt_err *err)
{
    memset(o, 0, sizeof(*o));
    pthread_mutex_init(&o->mu, NULL);
    char *text = ckpt_read_small_file(path, 1 << 20);
    if (!text)
        return ckpt_err_sys(err, "open '%s'", path);
    int rc = gcs_oauth_parse_key(o, text, path, err);
    memset(text, 0, strlen(text)); /* holds the private key */
    free(text);
    return rc;
}

static int parse_user(struct gcs_oauth *o, const cJSON *j, const char *path,
                      struct ckpt_err *err)
{
    o->kind = GCS_USER;
    o->client_id = json_str(j, "client_id");
    o->client_secret = json_str(j, "client_secret");
    o->refresh_token = json_str(j, "refresh_token");
    o->token_uri = json_str(j, "token_uri");
    if (!o->client_id || !o->client_secret || !o->refresh_token)
        return ckpt_err_set(err, CKPT_EAUTH, "'%s': an authorized_user "
                            "file needs client_id, client_secret and "
                            "refresh_token", path);
    return 0;
}

int gcs_oauth_parse_key(struct gcs_oauth *o, const char *text,
                        const char *path, struct ckpt_err *err)
{
    cJSON *j = cJSON_Parse(text);
    int rc = 0;
    char *type = j ? json_str(j, "type") : NULL;
    if (type && !strcmp(type, "authorized_user")) {
        rc = parse_user(o, j, path, err);
    } else if (type && strcmp(type, "service_account")) {
        /* external_account (workload identity federation),
         * impersonated_service_account, ...: not done. */
        char shown[40];
        snprintf(shown, sizeof(shown), "%s", type);
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': credentials of "
                          "type '%s' are not supported: give ckpt a "
                          "service_account or authorized_user key, or HMAC "
                          "keys (GCS_PROFILE)", path, shown);
    } else if (j) {
        o->kind = GCS_SA;
        o->client_email = json_str(j, "client_email");
        o->private_key = json_str(j, "private_key");
        o->token_uri = json_str(j, "token_uri");
    }
    free(type);
    cJSON_Delete(j);
    if (rc != 0)
        return rc;
    if (o->kind == GCS_SA && (!o->client_email || !o->private_key))
        return ckpt_err_set(err, CKPT_EAUTH, "'%s': not a service-account "
                            "key (needs client_email and private_key)",
                            path);
    if (!o->token_uri)
        o->token_uri = ckpt_xstrdup(GOOGLE_TOKEN_URI);
    return 0;
}

void gcs_oauth_metadata(struct gcs_oauth *o, const char *token_url,
                        const char *probe_url)
{
    memset(o, 0, sizeof(*o));
    pthread_mutex_init(&o->mu, NULL);
    o->kind = GCS_METADATA;
    o->token_uri = ckpt_xstrdup(token_url);
    o->probe_url = ckpt_xstrdup(probe_url);
}

static void wipe_free(char *s)
{
    if (s) {
        memset(s, 0, strlen(s));
        free(s);
    }
}

void gcs_oauth_release(struct gcs_oauth *o)
{
    free(o->client_email);
    wipe_free(o->private_key);
    free(o->client_id);
    wipe_free(o->client_secret);
    wipe_free(o->refresh_token);
    free(o->token_uri);
    free(o->probe_url);
    wipe_free(o->token);
    pthread_mutex_destroy(&o->mu);
}

static int rs256(const char *pem, const char *msg, size_t len,
                 struct ckpt_buf *out)
{
    BIO *bio = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL)
                        : NULL;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *sig = NULL;
    size_t slen = 0;
    int ok = key && ctx &&
             EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, key) == 1 &&
             EVP_DigestSign(ctx, NULL, &slen, (const unsigned char *)msg,
                            len) == 1;
    if (ok) {
        sig = ckpt_xmalloc(slen);
        ok = EVP_DigestSign(ctx, sig, &slen, (const unsigned char *)msg,
                            len) == 1;
    }
    if (ok)
        ckpt_base64(out, sig, slen, 1);
    free(sig);
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(key);
    BIO_free(bio);
    return ok ? 0 : -1;
}

int gcs_oauth_jwt(const struct gcs_oauth *o, time_t now,
                  struct ckpt_buf *out, struct ckpt_err *err)
{
    static const char hdr[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "iss", o->client_email);
    cJSON_AddStringToObject(c, "scope", SCOPE);
    cJSON_AddStringToObject(c, "aud", o->token_uri);
    cJSON_AddNumberToObject(c, "iat", (double)now);
    cJSON_AddNumberToObject(c, "exp", (double)(now + LIFETIME));
    char *claims = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    size_t start = out->len;
    ckpt_base64(out, hdr, strlen(hdr), 1);
    ckpt_buf_addch(out, '.');
    ckpt_base64(out, claims, strlen(claims), 1);
    free(claims);
    size_t signed_len = out->len - start;
    char *msg = ckpt_xstrndup(out->ptr + start, signed_len);
    ckpt_buf_addch(out, '.');
    int rc = rs256(o->private_key, msg, signed_len, out);
    free(msg);
    if (rc != 0)
        return ckpt_err_set(err, CKPT_EAUTH, "service-account key of '%s': "
                            "cannot sign with its private_key",
                            o->client_email);
    return 0;
}

/* Parse the token endpoint's JSON reply into o. */
int gcs_oauth_take_token(struct gcs_oauth *o, const char *body,
                         struct ckpt_err *err)
{
    cJSON *j = cJSON_Parse(body);
    char *tok = j ? json_str(j, "access_token") : NULL;
    const cJSON *exp = j ? cJSON_GetObjectItemCaseSensitive(j, "expires_in")
                         : NULL;
    double life = cJSON_IsNumber(exp) ? exp->valuedouble : 3600;
    cJSON_Delete(j);
    if (!tok)
        return ckpt_err_set(err, CKPT_EAUTH, "%s: token reply has no "
                            "access_token", o->token_uri);
    wipe_free(o->token);
    o->token = tok;
    /* Refresh early, but never loop on a token shorter than EARLY. */
    o->expires = ckpt_now() + (life > 2 * EARLY ? life - EARLY : life / 2);
    return 0;
}

static void form(struct ckpt_buf *b, const char *name, const char *value)
{
    ckpt_buf_addf(b, "%s%s=", b->len ? "&" : "", name);
    ckpt_sigv4_encode(b, value, strlen(value), 0);
}

/* The request that gets a token: a POST of a form to the token endpoint
 * (SA, USER), a GET of the metadata server (METADATA). */
static int ask(struct gcs_oauth *o, struct http_client *hc, int retries,
               const char *what, struct ckpt_buf *body,
               struct http_resp *resp, struct ckpt_err *err)
{
    struct curl_slist *h = NULL;
    struct http_req req = { .url = o->token_uri, .timeout_s = 60 };
    if (o->kind == GCS_METADATA) {
        req.method = "GET";
        h = curl_slist_append(h, "Metadata-Flavor: Google");
    } else {
        req.method = "POST";
        req.body = body->ptr;
        req.body_len = body->len;
        h = curl_slist_append(h, "Content-Type: application/x-www-form-"
                              "urlencoded");
        h = curl_slist_append(h, "Expect:");
    }
    req.headers = h;
    int rc = st_cred_http(hc, what, &req, retries > 0 ? retries : 1, 0,
                          resp, err);
    curl_slist_free_all(h);
    return rc;
}

/* Is the metadata server there? One short GET of its root, as
 * google-auth's ping: its reply must say Metadata-Flavor: Google. */
static int probe(struct gcs_oauth *o, struct http_client *hc,
                 const char *what, struct ckpt_err *err)
{
    struct curl_slist *h = curl_slist_append(NULL, "Metadata-Flavor: "
                                             "Google");
    struct http_req req = { .method = "GET", .url = o->probe_url,
                            .headers = h, .timeout_s = PROBE_TIMEOUT };
    struct http_resp resp;
    int rc = st_cred_http(hc, what, &req, PROBE_ATTEMPTS, 1, &resp, err);
    curl_slist_free_all(h);
    if (rc != 0)
        return -1;
    if (strcmp(resp.metadata_flavor, "Google"))
        rc = ckpt_err_set(err, CKPT_EAUTH, "%s: the reply is not a GCE "
                          "metadata server's (no Metadata-Flavor: Google)",
                          what);
    http_resp_release(&resp);
    return rc;
}

static int fetch(struct gcs_oauth *o, struct http_client *hc, int retries,
                 struct ckpt_err *err)
{
    struct ckpt_buf body = CKPT_BUF_INIT;
    char *what;
    if (o->kind == GCS_METADATA) {
        what = ckpt_xasprintf("GCE metadata server %s", o->probe_url);
        if (!o->probed && probe(o, hc, what, err) != 0) {
            free(what);
            return -1;
        }
        o->probed = 1;
        free(what);
        what = ckpt_xasprintf("GCE metadata server %s", o->token_uri);
    } else if (o->kind == GCS_USER) {
        what = ckpt_xasprintf("OAuth token endpoint %s", o->token_uri);
        form(&body, "grant_type", "refresh_token");
        form(&body, "client_id", o->client_id);
        form(&body, "client_secret", o->client_secret);
        form(&body, "refresh_token", o->refresh_token);
    } else {
        what = ckpt_xasprintf("OAuth token endpoint %s", o->token_uri);
        struct ckpt_buf jwt = CKPT_BUF_INIT;
        if (gcs_oauth_jwt(o, time(NULL), &jwt, err) != 0) {
            ckpt_buf_release(&jwt);
            free(what);
            return -1;
        }
        /* base64url needs no form-encoding. */
        ckpt_buf_addf(&body, "grant_type=urn%%3Aietf%%3Aparams%%3Aoauth%%3A"
                      "grant-type%%3Ajwt-bearer&assertion=%s", jwt.ptr);
        ckpt_buf_release(&jwt);
    }
    struct http_resp resp;
    int rc = ask(o, hc, retries, what, &body, &resp, err);
    if (rc == 0 && o->kind == GCS_METADATA &&
        strcmp(resp.metadata_flavor, "Google"))
        rc = ckpt_err_set(err, CKPT_EAUTH, "%s: the reply is not a GCE "
                          "metadata server's (no Metadata-Flavor: Google)",
                          what);
    else if (rc == 0)
        rc = gcs_oauth_take_token(o, resp.body.ptr, err);
    if (resp.body.ptr)
        memset(resp.body.ptr, 0, resp.body.len);
    http_resp_release(&resp);
    memset(body.ptr, 0, body.len);
    ckpt_buf_release(&body);
    free(what);
    return rc;
}

int gcs_oauth_token(struct gcs_oauth *o, struct http_client *hc,
                    int retries, struct ckpt_buf *out, struct ckpt_err *err)
{
    pthread_mutex_lock(&o->mu);
    int rc = 0;
    /* One fetch at a time; the others wait for its token. */
    if (!o->token || ckpt_now() >= o->expires)
        rc = fetch(o, hc, retries, err);
    if (rc == 0)
        ckpt_buf_addstr(out, o->token);
    pthread_mutex_unlock(&o->mu);
    return rc;
}
