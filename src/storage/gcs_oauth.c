/*
 * gcs_oauth.c - OAuth2 for GCS with a service-account key: an RS256 JWT
 * assertion (OpenSSL) exchanged at the key's token_uri for a bearer token,
 * cached until shortly before it expires (Google "oauth2/service-account").
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
#define LIFETIME 3600      /* seconds a JWT asks for (the maximum) */
#define EARLY 300          /* refresh this long before expiry */

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

int gcs_oauth_parse_key(struct gcs_oauth *o, const char *text,
                        const char *path, struct ckpt_err *err)
{
    cJSON *j = cJSON_Parse(text);
    if (j) {
        o->client_email = json_str(j, "client_email");
        o->private_key = json_str(j, "private_key");
        o->token_uri = json_str(j, "token_uri");
        cJSON_Delete(j);
    }
    if (!o->client_email || !o->private_key)
        return ckpt_err_set(err, CKPT_EAUTH, "'%s': not a service-account "
                            "key (needs client_email and private_key)",
                            path);
    if (!o->token_uri)
        o->token_uri = ckpt_xstrdup("https://oauth2.googleapis.com/token");
    return 0;
}

void gcs_oauth_release(struct gcs_oauth *o)
{
    free(o->client_email);
    if (o->private_key)
        memset(o->private_key, 0, strlen(o->private_key));
    free(o->private_key);
    free(o->token_uri);
    if (o->token)
        memset(o->token, 0, strlen(o->token));
    free(o->token);
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
    free(o->token);
    o->token = tok;
    /* Refresh early, but never loop on a token shorter than EARLY. */
    o->expires = ckpt_now() + (life > 2 * EARLY ? life - EARLY : life / 2);
    return 0;
}

static int fetch(struct gcs_oauth *o, struct http_client *hc, int retries,
                 struct ckpt_err *err)
{
    struct ckpt_buf body = CKPT_BUF_INIT, jwt = CKPT_BUF_INIT;
    if (gcs_oauth_jwt(o, time(NULL), &jwt, err) != 0) {
        ckpt_buf_release(&jwt);
        return -1;
    }
    /* base64url needs no form-encoding. */
    ckpt_buf_addf(&body, "grant_type=urn%%3Aietf%%3Aparams%%3Aoauth%%3A"
                  "grant-type%%3Ajwt-bearer&assertion=%s", jwt.ptr);
    ckpt_buf_release(&jwt);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: "
                                             "application/x-www-form-"
                                             "urlencoded");
    h = curl_slist_append(h, "Expect:");
    struct http_req req = { .method = "POST", .url = o->token_uri,
                            .headers = h, .body = body.ptr,
                            .body_len = body.len, .timeout_s = 60 };
    struct http_resp resp;
    int rc = -1, max = retries > 0 ? retries : 1;
    for (int attempt = 1;; attempt++) {
        http_resp_init(&resp);
        http_perform(hc, &req, &resp);
        if (resp.curl == CURLE_OK && resp.status == 200) {
            rc = gcs_oauth_take_token(o, resp.body.ptr, err);
            http_resp_release(&resp);
            break;
        }
        if (!http_retryable(&resp, "", "") || attempt >= max) {
            if (resp.curl != CURLE_OK)
                ckpt_err_set(err, CKPT_ENET, "%s: %s", o->token_uri,
                             resp.curl_msg);
            else
                ckpt_err_set(err, CKPT_EAUTH, "%s: HTTP %ld from the token "
                             "endpoint", o->token_uri, resp.status);
            http_resp_release(&resp);
            break;
        }
        double delay = http_backoff(attempt, resp.retry_after);
        http_tell_retry(hc, o->token_uri, attempt, max, delay, &resp,
                        "from the token endpoint");
        http_resp_release(&resp);
        http_sleep(delay);
    }
    curl_slist_free_all(h);
    memset(body.ptr, 0, body.len);
    ckpt_buf_release(&body);
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
