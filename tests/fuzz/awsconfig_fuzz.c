/*
 * awsconfig_fuzz - the AWS shared files as ckpt reads them (ini_parse and
 * the profile / endpoint / credential resolution of s3_conf_resolve in
 * src/storage/creds.c), for s3://, r2:// and gs:// locations.
 *
 * Input: one file's bytes, used as both ~/.aws/credentials and
 * ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE), resolved
 * with no profile and with AWS_PROFILE / GCS_PROFILE set.
 * Properties: never crashes or leaks; a resolved configuration has an
 * endpoint "http[s]://..." without a trailing '/', a region, and
 * credentials from a named source (fixed keys: both); no error message
 * contains a secret key (SPEC:
 * secrets never appear in output).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "storage/s3_int.h"

static void check(const struct s3_conf *c)
{
    size_t n = strlen(c->endpoint);
    if (strncmp(c->endpoint, "http://", 7) &&
        strncmp(c->endpoint, "https://", 8))
        __builtin_trap();
    if (n && c->endpoint[n - 1] == '/')
        __builtin_trap();
    if (!c->region || !c->region[0])
        __builtin_trap();
    if (!c->cred || !c->cred->source ||
        (c->cred->kind == ST_CRED_KEYS && (!c->cred->ak || !c->cred->sk)))
        __builtin_trap();
}

/* Secrets the file holds: no message may quote one. */
static void no_secret(const struct ini *ini, const char *msg)
{
    static const char *const secs[] = { "default", "fuzz", "profile fuzz" };
    for (size_t i = 0; i < sizeof(secs) / sizeof(secs[0]); i++) {
        const char *v = st_ini_get(ini, secs[i], NULL, "aws_secret_access_key");
        if (v && strlen(v) >= 8 && strstr(msg, v))
            __builtin_trap();
    }
}

static void resolve(const struct ini *ini, enum ckpt_scheme scheme)
{
    struct s3_conf c;
    struct ckpt_err err = { 0 };
    if (s3_conf_resolve(&c, scheme, "bkt.x", NULL, "s3://bkt.x/k",
                        &err) == 0) {
        check(&c);
        s3_conf_release(&c);
    } else {
        no_secret(ini, err.msg);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("aws", 0);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        static const char *const clear[] = {
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
            "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL",
            "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "GCS_ENDPOINT_URL",
            "GOOGLE_APPLICATION_CREDENTIALS", "R2_ENDPOINT_URL",
            "R2_PROFILE", "AWS_PROFILE", "GCS_PROFILE",
        };
        for (size_t i = 0; i < sizeof(clear) / sizeof(clear[0]); i++)
            unsetenv(clear[i]);
        setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
        setenv("AWS_CONFIG_FILE", path, 1);
    }
    if (fd < 0 || ftruncate(fd, 0) != 0 ||
        pwrite(fd, data, size, 0) != (ssize_t)size)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct ini *ini = st_ini_parse(text);
    st_ini_has_section(ini, "default");
    st_ini_get(ini, "profile fuzz", "s3", "endpoint_url");

    resolve(ini, CKPT_SCHEME_S3);
    resolve(ini, CKPT_SCHEME_R2);
    setenv("AWS_PROFILE", "fuzz", 1);
    setenv("GCS_PROFILE", "fuzz", 1);
    resolve(ini, CKPT_SCHEME_S3);
    resolve(ini, CKPT_SCHEME_GS);
    unsetenv("AWS_PROFILE");
    unsetenv("GCS_PROFILE");

    st_ini_free(ini);
    free(text);
    return 0;
}
