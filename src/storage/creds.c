/*
 * creds.c - endpoint, region and credentials for s3://, r2:// and gs://,
 * following aws-cli's conventions (sdkref file-format, feature-ss-endpoints)
 * and the OLMo scripts' R2_/GCS_/S3_PROFILE variables. docs/storage.md is
 * the user-facing description; keep the two in step.
 */
#include "s3_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

/* ---- INI ---- */

struct ini_ent {
    char *section;  /* owned */
    char *sub;      /* owned parent key of a nested block, or NULL */
    char *key;      /* owned */
    char *value;    /* owned */
};

struct ini {
    struct ini_ent *e;
    size_t n, cap;
};

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static void ini_add(struct ini *ini, const char *sec, const char *sub,
                    const char *key, const char *val)
{
    if (ini->n == ini->cap) {
        ini->cap = ini->cap ? 2 * ini->cap : 16;
        ini->e = ckpt_xreallocarray(ini->e, ini->cap, sizeof(*ini->e));
    }
    struct ini_ent *e = &ini->e[ini->n++];
    e->section = ckpt_xstrdup(sec);
    e->sub = sub ? ckpt_xstrdup(sub) : NULL;
    e->key = ckpt_xstrdup(key);
    e->value = ckpt_xstrdup(val);
}

/* One line; *sec and *parent carry state between lines (owned). */
static void ini_line(struct ini *ini, char *line, char **sec, char **parent)
{
    int indented = isspace((unsigned char)line[0]);
    char *s = trim(line);
    if (!*s || *s == '#' || *s == ';')
        return;
    if (*s == '[') {
        char *end = strchr(s, ']');
        if (!end)
            return;
        *end = '\0';
        free(*sec);
        /* "[profile  x]" and "[profile x]" name the same section. */
        char *name = trim(s + 1);
        if (!strncmp(name, "profile", 7) && isspace((unsigned char)name[7]))
            *sec = ckpt_xasprintf("profile %s", trim(name + 8));
        else if (!strncmp(name, "services", 8) &&
                 isspace((unsigned char)name[8]))
            *sec = ckpt_xasprintf("services %s", trim(name + 9));
        else
            *sec = ckpt_xstrdup(name);
        free(*parent);
        *parent = NULL;
        return;
    }
    char *eq = strchr(s, '=');
    if (!eq || !*sec)
        return;
    *eq = '\0';
    char *key = trim(s), *val = trim(eq + 1);
    for (char *c = key; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    if (indented && *parent) {
        ini_add(ini, *sec, *parent, key, val);
        return;
    }
    free(*parent);
    /* "s3 =" with nothing after it opens a nested block. */
    *parent = *val ? NULL : ckpt_xstrdup(key);
    ini_add(ini, *sec, NULL, key, val);
}

struct ini *st_ini_parse(const char *text)
{
    struct ini *ini = ckpt_xcalloc(1, sizeof(*ini));
    char *copy = ckpt_xstrdup(text);
    char *sec = NULL, *parent = NULL;
    for (char *p = copy, *next; p && *p; p = next) {
        next = strchr(p, '\n');
        if (next)
            *next++ = '\0';
        size_t n = strlen(p);
        if (n && p[n - 1] == '\r')
            p[n - 1] = '\0';
        ini_line(ini, p, &sec, &parent);
    }
    free(sec);
    free(parent);
    free(copy);
    return ini;
}

static struct ini *ini_load(const char *path)
{
    char *text = ckpt_read_small_file(path, 1u << 22);
    if (!text)
        return NULL;
    struct ini *ini = st_ini_parse(text);
    free(text);
    return ini;
}

void st_ini_free(struct ini *ini)
{
    if (!ini)
        return;
    for (size_t i = 0; i < ini->n; i++) {
        free(ini->e[i].section);
        free(ini->e[i].sub);
        free(ini->e[i].key);
        /* Values may be secrets: wipe before freeing. */
        memset(ini->e[i].value, 0, strlen(ini->e[i].value));
        free(ini->e[i].value);
    }
    free(ini->e);
    free(ini);
}

const char *st_ini_get(const struct ini *ini, const char *section,
                       const char *sub, const char *key)
{
    if (!ini)
        return NULL;
    const char *found = NULL;
    for (size_t i = 0; i < ini->n; i++) {
        const struct ini_ent *e = &ini->e[i];
        if (strcmp(e->section, section) || strcmp(e->key, key))
            continue;
        if ((sub == NULL) != (e->sub == NULL) ||
            (sub && strcmp(sub, e->sub)))
            continue;
        found = e->value; /* the last one wins, as in configparser */
    }
    return found;
}

int st_ini_has_section(const struct ini *ini, const char *section)
{
    for (size_t i = 0; ini && i < ini->n; i++)
        if (!strcmp(ini->e[i].section, section))
            return 1;
    return 0;
}

/* ---- resolution ---- */

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

struct files {
    struct ini *creds;   /* ~/.aws/credentials */
    struct ini *config;  /* ~/.aws/config */
};

static struct ini *load_aws_file(const char *var, const char *name)
{
    const char *p = env(var);
    if (p)
        return ini_load(p);
    const char *home = env("HOME");
    if (!home)
        return NULL;
    char *path = ckpt_xasprintf("%s/.aws/%s", home, name);
    struct ini *ini = ini_load(path);
    free(path);
    return ini;
}

/* Section name of profile in the config file ("default" has no prefix). */
static char *config_section(const char *profile)
{
    if (!strcmp(profile, "default"))
        return ckpt_xstrdup("default");
    return ckpt_xasprintf("profile %s", profile);
}

/* key from the profile: credentials file first, then the config file. */
static const char *profile_get(const struct files *f, const char *profile,
                               const char *key)
{
    const char *v = st_ini_get(f->creds, profile, NULL, key);
    if (v && *v)
        return v;
    char *sec = config_section(profile);
    v = st_ini_get(f->config, sec, NULL, key);
    free(sec);
    return v && *v ? v : NULL;
}

static int profile_exists(const struct files *f, const char *profile)
{
    char *sec = config_section(profile);
    int r = st_ini_has_section(f->creds, profile) ||
            st_ini_has_section(f->config, sec);
    free(sec);
    return r;
}

/* The profile's S3 endpoint: its services section, a nested "s3 =" block,
 * then its top-level endpoint_url. */
static const char *profile_endpoint(const struct files *f, const char *prof)
{
    char *sec = config_section(prof);
    const char *svc = st_ini_get(f->config, sec, NULL, "services");
    const char *v = NULL;
    if (svc && *svc) {
        char *ss = ckpt_xasprintf("services %s", svc);
        v = st_ini_get(f->config, ss, "s3", "endpoint_url");
        free(ss);
    }
    if (!v || !*v)
        v = st_ini_get(f->config, sec, "s3", "endpoint_url");
    if (!v || !*v)
        v = st_ini_get(f->config, sec, NULL, "endpoint_url");
    free(sec);
    return v && *v ? v : NULL;
}

static int endpoints_ignored(void)
{
    const char *v = env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
    return v && !strcasecmp(v, "true");
}

static void set_keys(struct s3_conf *c, const char *ak, const char *sk,
                     const char *tok, char *source)
{
    c->cred_source = source;
    c->access_key = ckpt_xstrdup(ak);
    c->secret_key = ckpt_xstrdup(sk);
    c->session_token = tok ? ckpt_xstrdup(tok) : NULL;
}

/* Keys from the named profile. 0, or -1 with err. */
static int keys_from_profile(struct s3_conf *c, const struct files *f,
                             const char *profile, const char *display,
                             struct ckpt_err *err)
{
    const char *ak = profile_get(f, profile, "aws_access_key_id");
    const char *sk = profile_get(f, profile, "aws_secret_access_key");
    if (!profile_exists(f, profile))
        return ckpt_err_set(err, CKPT_EAUTH,
                            "%s: profile '%s' not found in the AWS "
                            "credentials or config file", display, profile);
    if (!ak || !sk)
        return ckpt_err_set(err, CKPT_EAUTH,
                            "%s: profile '%s' has no aws_access_key_id and "
                            "aws_secret_access_key", display, profile);
    set_keys(c, ak, sk, profile_get(f, profile, "aws_session_token"),
             ckpt_xasprintf("profile '%s'", profile));
    return 0;
}

/* The default chain: environment keys, then AWS_PROFILE or "default". */
static int keys_default(struct s3_conf *c, const struct files *f,
                        const char *display, struct ckpt_err *err)
{
    const char *ak = env("AWS_ACCESS_KEY_ID");
    const char *sk = env("AWS_SECRET_ACCESS_KEY");
    if (ak && sk) {
        set_keys(c, ak, sk, env("AWS_SESSION_TOKEN"),
                 ckpt_xstrdup("the environment"));
        return 0;
    }
    const char *prof = env("AWS_PROFILE");
    if (prof)
        return keys_from_profile(c, f, prof, display, err);
    if (profile_get(f, "default", "aws_access_key_id"))
        return keys_from_profile(c, f, "default", display, err);
    return ckpt_err_set(err, CKPT_EAUTH,
                        "%s: no credentials: set AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE", display);
}

/* Keys: the scheme's own profile variable wins (like --profile), then the
 * default chain. Returns the profile whose config applies. */
static int resolve_keys(struct s3_conf *c, const struct files *f,
                        const char *pvar, const char *display,
                        const char **profile, struct ckpt_err *err)
{
    const char *p = pvar ? env(pvar) : NULL;
    *profile = p ? p : env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
    if (p)
        return keys_from_profile(c, f, p, display, err);
    return keys_default(c, f, display, err);
}

static int bucket_dns_safe(const char *b)
{
    for (const char *p = b; *p; p++)
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) ||
              *p == '-'))
            return 0;
    return 1;
}

static int set_endpoint(struct s3_conf *c, const char *url,
                        const char *display, struct ckpt_err *err)
{
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
        return ckpt_err_set(err, CKPT_EUSAGE,
                            "%s: endpoint '%s' must start with http:// or "
                            "https://", display, url);
    c->endpoint = ckpt_xstrdup(url);
    size_t n = strlen(c->endpoint);
    while (n > 0 && c->endpoint[n - 1] == '/')
        c->endpoint[--n] = '\0';
    return 0;
}

static int resolve_s3(struct s3_conf *c, const struct files *f,
                      const char *bucket, const char *display,
                      struct ckpt_err *err)
{
    const char *prof;
    if (resolve_keys(c, f, "S3_PROFILE", display, &prof, err) != 0)
        return -1;
    char *sec = config_section(prof);
    const char *region = env("AWS_REGION");
    if (!region)
        region = env("AWS_DEFAULT_REGION");
    if (!region)
        region = st_ini_get(f->config, sec, NULL, "region");
    c->region = ckpt_xstrdup(region && *region ? region : "us-east-1");
    const char *style = st_ini_get(f->config, sec, "s3", "addressing_style");
    free(sec);
    const char *ep = NULL;
    if (!endpoints_ignored()) {
        ep = env("AWS_ENDPOINT_URL_S3");
        if (!ep)
            ep = env("AWS_ENDPOINT_URL");
        if (!ep)
            ep = profile_endpoint(f, prof);
    }
    if (ep)
        return set_endpoint(c, ep, display, err);
    /* AWS itself: virtual-hosted unless the name breaks DNS or TLS. */
    c->virtual_host = bucket_dns_safe(bucket) &&
                      !(style && !strcmp(style, "path"));
    c->endpoint = ckpt_xasprintf("https://s3.%s.amazonaws.com", c->region);
    return 0;
}

static int resolve_r2(struct s3_conf *c, const struct files *f,
                      const char *display, struct ckpt_err *err)
{
    const char *prof;
    if (resolve_keys(c, f, "R2_PROFILE", display, &prof, err) != 0)
        return -1;
    c->region = ckpt_xstrdup("auto");
    const char *ep = env("R2_ENDPOINT_URL");
    if (!ep)
        ep = profile_endpoint(f, prof);
    if (!ep)
        return ckpt_err_set(err, CKPT_EUSAGE,
                            "%s: no R2 endpoint: set R2_ENDPOINT_URL "
                            "(https://ACCOUNT.r2.cloudflarestorage.com)",
                            display);
    return set_endpoint(c, ep, display, err);
}

static int resolve_gs(struct s3_conf *c, const struct files *f,
                      const char *display, struct ckpt_err *err)
{
    const char *prof = env("GCS_PROFILE");
    const char *sa = env("GOOGLE_APPLICATION_CREDENTIALS");
    c->region = ckpt_xstrdup("auto");
    const char *ep = env("GCS_ENDPOINT_URL");
    if (prof) {
        if (keys_from_profile(c, f, prof, display, err) != 0)
            return -1;
        if (!ep)
            ep = profile_endpoint(f, prof);
    } else if (sa) {
        c->sa_key_file = ckpt_xstrdup(sa);
        c->cred_source = ckpt_xstrdup("the service-account key in "
                                      "GOOGLE_APPLICATION_CREDENTIALS");
    } else {
        return ckpt_err_set(err, CKPT_EAUTH,
                            "%s: no credentials: set GCS_PROFILE (HMAC keys)"
                            " or GOOGLE_APPLICATION_CREDENTIALS", display);
    }
    return set_endpoint(c, ep ? ep : "https://storage.googleapis.com",
                        display, err);
}

int s3_conf_resolve(struct s3_conf *c, enum ckpt_scheme scheme,
                    const char *bucket, const char *display,
                    struct ckpt_err *err)
{
    memset(c, 0, sizeof(*c));
    struct files f = {
        load_aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
        load_aws_file("AWS_CONFIG_FILE", "config"),
    };
    int rc;
    if (scheme == CKPT_SCHEME_R2)
        rc = resolve_r2(c, &f, display, err);
    else if (scheme == CKPT_SCHEME_GS)
        rc = resolve_gs(c, &f, display, err);
    else
        rc = resolve_s3(c, &f, bucket, display, err);
    st_ini_free(f.creds);
    st_ini_free(f.config);
    if (rc != 0)
        s3_conf_release(c);
    return rc;
}

static void free_secret(char *s)
{
    if (s) {
        memset(s, 0, strlen(s));
        free(s);
    }
}

void s3_conf_release(struct s3_conf *c)
{
    free(c->endpoint);
    free(c->region);
    free(c->access_key);
    free_secret(c->secret_key);
    free_secret(c->session_token);
    free(c->sa_key_file);
    free(c->cred_source);
    memset(c, 0, sizeof(*c));
}
