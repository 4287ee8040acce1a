/*
 * gcsjson_fuzz - the GCS JSON ckpt reads (src/storage/gcs_oauth.c): the
 * key file (a service account's: client_email, private_key, token_uri, the
 * PEM key then going to OpenSSL to sign the JWT; an authorized user's:
 * client_id, client_secret, refresh_token; other types refused) and the
 * OAuth token endpoint's reply (access_token, expires_in, or an error
 * object).
 *
 * Input: the JSON text (up to the first NUL), given to both readers.
 * Properties: never crashes or leaks; an accepted key has a token URI
 * and a non-empty client email and private key (service account) or
 * client ID, secret and refresh token (authorized user); a signing failure's
 * message does not quote the private key; an accepted token reply yields
 * a non-empty token and a refresh time that is a number; a refused one
 * leaves the cached token as it was.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/util.h"
#include "storage/s3_int.h"

static void key_file(const char *text)
{
    struct gcs_oauth o;
    struct ckpt_err err = { 0 };
    memset(&o, 0, sizeof(o));
    pthread_mutex_init(&o.mu, NULL);
    int rc = gcs_oauth_parse_key(&o, text, "key.json", &err);
    if (rc == 0 && o.kind == GCS_USER) {
        if (!o.client_id[0] || !o.client_secret[0] || !o.refresh_token[0] ||
            !o.token_uri[0])
            __builtin_trap();
    } else if (rc == 0) {
        if (o.kind != GCS_SA || !o.client_email[0] || !o.private_key[0] ||
            !o.token_uri[0])
            __builtin_trap();
        struct ckpt_buf jwt = CKPT_BUF_INIT;
        /* (The message names the key by its client_email, which may
         * itself contain the key's text: only a quote from elsewhere
         * counts.) */
        if (gcs_oauth_jwt(&o, 1700000000, &jwt, &err) != 0 &&
            strlen(o.private_key) >= 8 && strstr(err.msg, o.private_key) &&
            !strstr(o.client_email, o.private_key))
            __builtin_trap();
        ckpt_buf_release(&jwt);
    }
    gcs_oauth_release(&o);
}

static void token_reply(const char *text)
{
    struct gcs_oauth o;
    struct ckpt_err err = { 0 };
    memset(&o, 0, sizeof(o));
    pthread_mutex_init(&o.mu, NULL);
    o.token_uri = ckpt_xstrdup("https://oauth2.example/token");
    o.token = ckpt_xstrdup("old-token");
    if (gcs_oauth_take_token(&o, text, &err) == 0) {
        if (!o.token || !o.token[0] || !(o.expires == o.expires))
            __builtin_trap();
    } else if (strcmp(o.token, "old-token") != 0) {
        __builtin_trap();
    }
    gcs_oauth_release(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    key_file(text);
    token_reply(text);
    free(text);
    return 0;
}
