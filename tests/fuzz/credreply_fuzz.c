/*
 * credreply_fuzz - what the AWS credential sources answer, as ckpt reads
 * it (src/storage/cred_aws.c): the JSON of EC2 instance metadata and the
 * container endpoint, credential_process's output, SSO's
 * GetRoleCredentials reply and token cache file, STS's
 * AssumeRoleWithWebIdentity XML, a time, and a credential_process
 * command line split into words.
 *
 * Input: the bytes (up to the first NUL), given to every reader.
 * Properties: never crashes or leaks; accepted keys have an access key
 * and a secret (and the session token where the source always sends one;
 * SSO's cache: a token); no message quotes the input (it holds secrets);
 * every word of a split line is a string, and the list ends with NULL.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/s3_int.h"

/* The fixed words of the readers' messages: an input that is a piece of
 * them ("Credentials") is found in a message without being quoted. */
static const char *const words[] = {
    "fuzz: the reply is not a JSON object",
    "fuzz: the output's Version is not 1 (the only one there is)",
    "fuzz: the reply's Code is not Success",
    "fuzz: the reply has no roleCredentials with accessKeyId and "
    "secretAccessKey",
    "fuzz: the reply has no AccessKeyId and SecretAccessKey",
    "fuzz: the reply's Expiration is not a time",
    "fuzz: the reply has no session token",
    "fuzz: the reply has no Credentials with AccessKeyId, SecretAccessKey "
    "and SessionToken",
    "fuzz: no accessToken with an expiresAt in it",
};

static void refused(const char *text, const struct ckpt_err *err)
{
    if (strlen(text) < 8 || !strstr(err->msg, text))
        return;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(words[i], text))
            return;
    __builtin_trap();
}

static void json(const char *text, enum st_json_style style)
{
    struct st_keys k;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (st_parse_cred_json(text, style, "fuzz", &k, &err) == 0) {
        if (!k.ak || !k.ak[0] || !k.sk || !k.sk[0] ||
            (style != ST_JSON_PROCESS && (!k.token || !k.token[0])))
            __builtin_trap();
        st_keys_release(&k);
    } else {
        refused(text, &err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    json(text, ST_JSON_METADATA);
    json(text, ST_JSON_PROCESS);
    json(text, ST_JSON_SSO);

    struct st_keys k;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (st_parse_sts_xml(text, strlen(text), "fuzz", &k, &err) == 0) {
        if (!k.ak || !k.sk || !k.token || !k.expires)
            __builtin_trap();
        st_keys_release(&k);
    } else {
        refused(text, &err);
    }
    if (st_parse_sso_cache(text, "fuzz", &k, &err) == 0) {
        if (!k.token || !k.expires)
            __builtin_trap();
        st_keys_release(&k);
    } else {
        refused(text, &err);
    }
    (void)st_parse_time(text);
    char **w = st_split_words(text);
    for (size_t i = 0; w && w[i]; i++)
        free(w[i]);
    free(w);
    free(text);
    return 0;
}
