/*
 * creds.c - endpoint, region and credentials for s3://, r2:// and gs://,
 * following aws-cli's conventions (sdkref file-format, feature-ss-endpoints,
 * the credential provider chain) and the OLMo scripts' R2_/GCS_/S3_PROFILE
 * variables. Resolving only chooses: it reads the environment and the
 * ~/.aws files, never the network or a command (cred.c and cred_aws.c ask
 * the chosen source). docs/storage.md is the user-facing description;
 * keep the two in step.
 */
#include "s3_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/sha.h>

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

static int env_true(const char *name)
{
    const char *v = env(name);
    return v && !strcasecmp(v, "true");
}

struct files {
    struct ini *creds;   /* ~/.aws/credentials */
    struct ini *config;  /* ~/.aws/config */
    char *creds_path;    /* as messages show them: "~/.aws/credentials" */
    char *config_path;
};

static struct ini *load_aws_file(const char *var, const char *name,
                                 char **shown)
{
    const char *p = env(var);
    if (p) {
        *shown = ckpt_xstrdup(p);
        return ini_load(p);
    }
    *shown = ckpt_xasprintf("~/.aws/%s", name);
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

static const char *config_get(const struct files *f, const char *profile,
                              const char *key)
{
    char *sec = config_section(profile);
    const char *v = st_ini_get(f->config, sec, NULL, key);
    free(sec);
    return v && *v ? v : NULL;
}

static const char *creds_get(const struct files *f, const char *profile,
                             const char *key)
{
    const char *v = st_ini_get(f->creds, profile, NULL, key);
    return v && *v ? v : NULL;
}

/* key from the profile: credentials file first, then the config file. */
static const char *profile_get(const struct files *f, const char *profile,
                               const char *key)
{
    const char *v = creds_get(f, profile, key);
    return v ? v : config_get(f, profile, key);
}

static int profile_exists(const struct files *f, const char *profile)
{
    char *sec = config_section(profile);
    int r = st_ini_has_section(f->creds, profile) ||
            st_ini_has_section(f->config, sec);
    free(sec);
    return r;
}

static int endpoints_ignored(void)
{
    return env_true("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
}

/* The profile's endpoint for service svc ("s3", "sts", "sso"): its
 * services section, a nested "svc =" block, then its top-level
 * endpoint_url (every service's). */
static const char *profile_endpoint(const struct files *f, const char *prof,
                                    const char *svc)
{
    char *sec = config_section(prof);
    const char *services = st_ini_get(f->config, sec, NULL, "services");
    const char *v = NULL;
    if (services && *services) {
        char *ss = ckpt_xasprintf("services %s", services);
        v = st_ini_get(f->config, ss, svc, "endpoint_url");
        free(ss);
    }
    if (!v || !*v)
        v = st_ini_get(f->config, sec, svc, "endpoint_url");
    if (!v || !*v)
        v = st_ini_get(f->config, sec, NULL, "endpoint_url");
    free(sec);
    return v && *v ? v : NULL;
}

/* A service's endpoint as the SDKs configure it: AWS_ENDPOINT_URL_<SVC>,
 * AWS_ENDPOINT_URL, the profile's (unless configured endpoints are
 * ignored); NULL: the service's own. */
static const char *service_endpoint(const struct files *f, const char *prof,
                                    const char *svc, const char *var)
{
    if (endpoints_ignored())
        return NULL;
    const char *ep = env(var);
    if (!ep)
        ep = env("AWS_ENDPOINT_URL");
    return ep ? ep : profile_endpoint(f, prof, svc);
}

/* The URL without its trailing '/'s (malloced). */
static char *base_url(const char *url)
{
    char *u = ckpt_xstrdup(url);
    size_t n = strlen(u);
    while (n > 0 && u[n - 1] == '/')
        u[--n] = '\0';
    return u;
}

/* Fixed keys (copied), from source (owned now). */
static void set_keys(struct s3_conf *c, const char *ak, const char *sk,
                     const char *tok, char *source)
{
    c->cred = st_cred_new(ST_CRED_KEYS, ckpt_xstrdup("keys"), source);
    c->cred->ak = ckpt_xstrdup(ak);
    c->cred->sk = ckpt_xstrdup(sk);
    c->cred->token = tok ? ckpt_xstrdup(tok) : NULL;
}

/* What the AWS chain starts from. */
struct chain {
    const struct files *f;
    const char *profile;  /* the profile whose settings apply */
    int named;            /* named by the user: it must exist */
    int explicit;         /* named by --profile or the scheme's own
                             variable: the environment's keys and web
                             identity are not looked at (as aws-cli's
                             --profile) */
    const char *region;   /* AWS region (STS) */
    const char *display;
    struct ckpt_buf looked;  /* the places looked at so far */
};

static void looked(struct chain *ch, const char *fmt, const char *a)
{
    if (ch->looked.len)
        ckpt_buf_addstr(&ch->looked, ", ");
    ckpt_buf_addf(&ch->looked, fmt, a);
}

/* Keys in one file's section of the profile; -1 when only one of the
 * two is there (aws-cli: partial credentials). */
static int keys_in(struct s3_conf *c, struct chain *ch, const char *ak,
                   const char *sk, const char *tok, const char *file,
                   struct ckpt_err *err)
{
    if (!ak && !sk)
        return 1;
    if (!ak || !sk)
        return ckpt_err_set(err, CKPT_EAUTH, "%s: profile '%s' in %s has "
                            "%s but not %s", ch->display, ch->profile, file,
                            ak ? "aws_access_key_id"
                               : "aws_secret_access_key",
                            ak ? "aws_secret_access_key"
                               : "aws_access_key_id");
    set_keys(c, ak, sk, tok, ckpt_xasprintf("profile '%s'", ch->profile));
    return 0;
}

/* Web identity (EKS IRSA, GitHub OIDC): 0 chosen, 1 not configured. */
static int web_identity(struct s3_conf *c, struct chain *ch,
                        struct ckpt_err *err)
{
    const char *file = ch->explicit ? NULL
                                    : env("AWS_WEB_IDENTITY_TOKEN_FILE");
    const char *role = ch->explicit ? NULL : env("AWS_ROLE_ARN");
    const char *session = ch->explicit ? NULL : env("AWS_ROLE_SESSION_NAME");
    if (!file)
        file = profile_get(ch->f, ch->profile, "web_identity_token_file");
    if (!role)
        role = profile_get(ch->f, ch->profile, "role_arn");
    if (!session)
        session = profile_get(ch->f, ch->profile, "role_session_name");
    looked(ch, "%s", "web identity (AWS_WEB_IDENTITY_TOKEN_FILE)");
    if (!file)
        return 1;
    if (!role)
        return ckpt_err_set(err, CKPT_EAUTH, "%s: web identity: a token "
                            "file ('%s') but no role to assume: set "
                            "AWS_ROLE_ARN or the profile's role_arn",
                            ch->display, file);
    const char *ep = service_endpoint(ch->f, ch->profile, "sts",
                                      "AWS_ENDPOINT_URL_STS");
    char *url = ep ? base_url(ep)
                   : ckpt_xasprintf("https://sts.%s.amazonaws.com",
                                    ch->region);
    struct st_cred *w = st_cred_new(ST_CRED_WEB, ckpt_xasprintf(
        "web %s %s %s %s", url, role, file, session ? session : ""),
        ckpt_xasprintf("web identity (role %s)", role));
    w->url = url;
    w->file = ckpt_xstrdup(file);
    w->role = ckpt_xstrdup(role);
    w->session = session ? ckpt_xstrdup(session) : NULL;
    c->cred = w;
    return 0;
}

/* IAM Identity Center: the profile's sso_* settings (or its sso-session
 * section's). 0 chosen, 1 not configured. */
static int sso(struct s3_conf *c, struct chain *ch, struct ckpt_err *err)
{
    const struct files *f = ch->f;
    const char *sess = config_get(f, ch->profile, "sso_session");
    const char *start = config_get(f, ch->profile, "sso_start_url");
    const char *region = config_get(f, ch->profile, "sso_region");
    const char *account = config_get(f, ch->profile, "sso_account_id");
    const char *role = config_get(f, ch->profile, "sso_role_name");
    if (!sess && !start && !account && !role)
        return 1;
    if (sess) {
        char *sec = ckpt_xasprintf("sso-session %s", sess);
        const char *v = st_ini_get(f->config, sec, NULL, "sso_start_url");
        start = v && *v ? v : NULL;
        v = st_ini_get(f->config, sec, NULL, "sso_region");
        region = v && *v ? v : NULL;
        free(sec);
    }
    const char *missing = !start ? "sso_start_url" : !region ? "sso_region"
                        : !account ? "sso_account_id"
                        : !role ? "sso_role_name" : NULL;
    if (missing)
        return ckpt_err_set(err, CKPT_EAUTH, "%s: profile '%s' uses SSO but "
                            "has no %s%s", ch->display, ch->profile,
                            missing, sess ? " (in its sso-session)" : "");
    /* `aws sso login` names its cache file after the session's name, or
     * (legacy profiles) the start URL. */
    const char *key = sess ? sess : start;
    unsigned char md[20];
    char hex[41];
    SHA1((const unsigned char *)key, strlen(key), md);
    for (int i = 0; i < 20; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    const char *home = env("HOME");
    const char *ep = service_endpoint(f, ch->profile, "sso",
                                      "AWS_ENDPOINT_URL_SSO");
    struct st_cred *s = st_cred_new(ST_CRED_SSO, NULL, ckpt_xasprintf(
        "profile '%s' (SSO)", ch->profile));
    s->file = ckpt_xasprintf("%s/.aws/sso/cache/%s.json", home ? home : "",
                             hex);
    s->url = ep ? base_url(ep)
                : ckpt_xasprintf("https://portal.sso.%s.amazonaws.com",
                                 region);
    s->account = ckpt_xstrdup(account);
    s->role = ckpt_xstrdup(role);
    s->profile = ckpt_xstrdup(ch->profile);
    s->id = ckpt_xasprintf("sso %s %s %s %s", s->url, s->file, account,
                           role);
    c->cred = s;
    return 0;
}

/* The container credentials endpoint: 0 chosen, 1 not configured. */
static int container(struct s3_conf *c, struct chain *ch,
                     struct ckpt_err *err)
{
    const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    looked(ch, "%s", "container credentials "
           "(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI)");
    if (!rel && !full)
        return 1;
    char *url = rel ? ckpt_xasprintf("http://169.254.170.2%s", rel)
                    : ckpt_xstrdup(full);
    if (!rel && strncmp(url, "https://", 8)) {
        /* Plain http only to the hosts the SDKs allow: the loopback and
         * ECS's and EKS's own addresses, never a token to anyone else. */
        static const char *const ok[] = {
            "http://127.", "http://localhost:", "http://localhost/",
            "http://[::1]", "http://169.254.170.2:", "http://169.254.170.2/",
            "http://169.254.170.23:", "http://169.254.170.23/",
            "http://[fd00:ec2::23]",
        };
        int allowed = 0;
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
            allowed |= !strncmp(url, ok[i], strlen(ok[i]));
        if (!allowed) {
            free(url);
            return ckpt_err_set(err, CKPT_EAUTH, "%s: "
                                "AWS_CONTAINER_CREDENTIALS_FULL_URI must be "
                                "https, or http to a loopback or the "
                                "container agent's address", ch->display);
        }
    }
    const char *file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    const char *tok = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    struct st_cred *k = st_cred_new(ST_CRED_CONTAINER, ckpt_xasprintf(
        "container %s %s", url, file ? file : ""),
        ckpt_xstrdup("container credentials"));
    k->url = url;
    k->file = file ? ckpt_xstrdup(file) : NULL;
    k->auth = !file && tok ? ckpt_xstrdup(tok) : NULL;
    c->cred = k;
    return 0;
}

/* EC2 instance metadata, the last resort: 0 chosen, -1 off. */
static int imds(struct s3_conf *c, struct chain *ch, struct ckpt_err *err)
{
    if (env_true("AWS_EC2_METADATA_DISABLED"))
        return ckpt_err_set(err, CKPT_EAUTH, "%s: no credentials: none in "
                            "%s; EC2 instance metadata is off "
                            "(AWS_EC2_METADATA_DISABLED)", ch->display,
                            ch->looked.ptr);
    const char *ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (!ep)
        ep = config_get(ch->f, ch->profile, "ec2_metadata_service_endpoint");
    const char *mode = env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
    if (!ep)
        ep = mode && !strcasecmp(mode, "IPv6") ? "http://[fd00:ec2::254]"
                                               : "http://169.254.169.254";
    char *url = base_url(ep);
    struct st_cred *m = st_cred_new(ST_CRED_IMDS, ckpt_xasprintf("imds %s",
                                    url), ckpt_xstrdup("EC2 instance "
                                                       "metadata"));
    m->url = url;
    c->cred = m;
    c->looked = ckpt_buf_detach(&ch->looked, NULL);
    return 0;
}

/* The AWS chain, in aws-cli's order: the environment, web identity, SSO,
 * the shared credentials file, credential_process, the config file, the
 * container endpoint, EC2 instance metadata. The first source configured
 * is the one used; one configured but broken is an error, not a reason
 * to try the next. */
static int aws_chain(struct s3_conf *c, struct chain *ch,
                     struct ckpt_err *err)
{
    const struct files *f = ch->f;
    if (!ch->explicit) {
        const char *ak = env("AWS_ACCESS_KEY_ID");
        const char *sk = env("AWS_SECRET_ACCESS_KEY");
        if (ak && sk) {
            set_keys(c, ak, sk, env("AWS_SESSION_TOKEN"),
                     ckpt_xstrdup("the environment"));
            return 0;
        }
        if (ak || sk)
            return ckpt_err_set(err, CKPT_EAUTH, "%s: %s is set but %s is "
                                "not", ch->display, ak ? "AWS_ACCESS_KEY_ID"
                                : "AWS_SECRET_ACCESS_KEY", ak
                                ? "AWS_SECRET_ACCESS_KEY"
                                : "AWS_ACCESS_KEY_ID");
        looked(ch, "%s", "the environment (AWS_ACCESS_KEY_ID)");
    }
    if (ch->named && !profile_exists(f, ch->profile))
        return ckpt_err_set(err, CKPT_EAUTH, "%s: profile '%s' not found "
                            "in %s or %s", ch->display, ch->profile,
                            f->creds_path, f->config_path);
    if (profile_get(f, ch->profile, "role_arn") &&
        !profile_get(f, ch->profile, "web_identity_token_file") &&
        (profile_get(f, ch->profile, "source_profile") ||
         profile_get(f, ch->profile, "credential_source")))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: profile '%s' "
                            "assumes a role with source_profile or "
                            "credential_source, which ckpt does not do: "
                            "give ckpt that role's credentials (e.g. "
                            "credential_process = aws configure "
                            "export-credentials --profile %s)",
                            ch->display, ch->profile, ch->profile);
    int rc = web_identity(c, ch, err);
    if (rc <= 0)
        return rc;
    if ((rc = sso(c, ch, err)) <= 0)
        return rc;
    if ((rc = keys_in(c, ch, creds_get(f, ch->profile, "aws_access_key_id"),
                      creds_get(f, ch->profile, "aws_secret_access_key"),
                      profile_get(f, ch->profile, "aws_session_token"),
                      f->creds_path, err)) <= 0)
        return rc;
    const char *cp = profile_get(f, ch->profile, "credential_process");
    if (cp) {
        c->cred = st_cred_new(ST_CRED_PROCESS, ckpt_xasprintf("process %s",
                              cp), ckpt_xasprintf("profile '%s' "
                              "(credential_process)", ch->profile));
        c->cred->command = ckpt_xstrdup(cp);
        c->cred->profile = ckpt_xstrdup(ch->profile);
        return 0;
    }
    if ((rc = keys_in(c, ch, config_get(f, ch->profile, "aws_access_key_id"),
                      config_get(f, ch->profile, "aws_secret_access_key"),
                      config_get(f, ch->profile, "aws_session_token"),
                      f->config_path, err)) <= 0)
        return rc;
    char *prof = ckpt_xasprintf("profile '%s' of %s and %s (keys, "
                                "credential_process, SSO)", ch->profile,
                                f->creds_path, f->config_path);
    looked(ch, "%s", prof);
    free(prof);
    if ((rc = container(c, ch, err)) <= 0)
        return rc;
    return imds(c, ch, err);
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
    c->endpoint = base_url(url);
    return 0;
}

/* The AWS region: --region, AWS_REGION, AWS_DEFAULT_REGION, the
 * profile's, us-east-1. */
static const char *aws_region(const struct files *f, const char *prof,
                              const struct ckpt_storage_cfg *cfg)
{
    const char *r = cfg && cfg->region && *cfg->region ? cfg->region : NULL;
    if (!r)
        r = env("AWS_REGION");
    if (!r)
        r = env("AWS_DEFAULT_REGION");
    if (!r)
        r = config_get(f, prof, "region");
    return r ? r : "us-east-1";
}

/* The profile of an AWS chain: the scheme's own variable (R2_PROFILE,
 * S3_PROFILE) and --profile name it explicitly, AWS_PROFILE by default. */
static void chain_init(struct chain *ch, const struct files *f,
                       const char *own, const struct ckpt_storage_cfg *cfg,
                       const char *display)
{
    memset(ch, 0, sizeof(*ch));
    ckpt_buf_init(&ch->looked);
    const char *flag = cfg && cfg->profile && *cfg->profile ? cfg->profile
                                                            : NULL;
    ch->f = f;
    ch->display = display;
    ch->profile = own ? own : flag ? flag : env("AWS_PROFILE");
    ch->named = ch->profile != NULL;
    ch->explicit = own || flag;
    if (!ch->profile)
        ch->profile = "default";
    ch->region = aws_region(f, ch->profile, cfg);
}

static int resolve_s3(struct s3_conf *c, const struct files *f,
                      const char *bucket, const struct ckpt_storage_cfg *cfg,
                      const char *display, struct ckpt_err *err)
{
    struct chain ch;
    /* --profile names the profile as aws-cli's does; S3_PROFILE (the
     * OLMo scripts') too, when no flag is given. */
    const char *own = cfg && cfg->profile && *cfg->profile ? NULL
                                                           : env("S3_PROFILE");
    chain_init(&ch, f, own, cfg, display);
    int rc = aws_chain(c, &ch, err);
    ckpt_buf_release(&ch.looked);
    if (rc != 0)
        return -1;
    c->region = ckpt_xstrdup(ch.region);
    char *sec = config_section(ch.profile);
    const char *style = st_ini_get(f->config, sec, "s3", "addressing_style");
    free(sec);
    const char *ep = cfg && cfg->endpoint_url && *cfg->endpoint_url
                   ? cfg->endpoint_url
                   : service_endpoint(f, ch.profile, "s3",
                                      "AWS_ENDPOINT_URL_S3");
    if (ep)
        return set_endpoint(c, ep, display, err);
    /* AWS itself: virtual-hosted unless the name breaks DNS or TLS. */
    c->virtual_host = bucket_dns_safe(bucket) &&
                      !(style && !strcmp(style, "path"));
    c->endpoint = ckpt_xasprintf("https://s3.%s.amazonaws.com", c->region);
    return 0;
}

static int resolve_r2(struct s3_conf *c, const struct files *f,
                      const struct ckpt_storage_cfg *cfg,
                      const char *display, struct ckpt_err *err)
{
    struct chain ch;
    chain_init(&ch, f, env("R2_PROFILE"), cfg, display);
    int rc = aws_chain(c, &ch, err);
    ckpt_buf_release(&ch.looked);
    if (rc != 0)
        return -1;
    c->region = ckpt_xstrdup("auto");
    const char *ep = env("R2_ENDPOINT_URL");
    if (!ep)
        ep = profile_endpoint(f, ch.profile, "s3");
    if (!ep)
        return ckpt_err_set(err, CKPT_EUSAGE,
                            "%s: no R2 endpoint: set R2_ENDPOINT_URL "
                            "(https://ACCOUNT.r2.cloudflarestorage.com)",
                            display);
    return set_endpoint(c, ep, display, err);
}

/* gcloud's application-default credentials file (`gcloud auth
 * application-default login` writes it): in $CLOUDSDK_CONFIG, else
 * ~/.config/gcloud. Malloced. */
static char *gcloud_adc(void)
{
    const char *dir = env("CLOUDSDK_CONFIG");
    if (dir)
        return ckpt_xasprintf("%s/application_default_credentials.json",
                              dir);
    const char *home = env("HOME");
    return ckpt_xasprintf("%s/.config/gcloud/application_default_"
                          "credentials.json", home ? home : "");
}

/* A Google JSON key file, read when first used (cred.c). */
static void google_file(struct s3_conf *c, const char *path, char *source)
{
    c->cred = st_cred_new(ST_CRED_GCS, ckpt_xasprintf("gcs %s", path),
                          source);
    c->cred->file = ckpt_xstrdup(path);
}

/* The GCE metadata server, the last resort: its token at
 * GCE_METADATA_HOST (google-auth's; GCE_METADATA_ROOT before it), else
 * metadata.google.internal; probed first at GCE_METADATA_IP, else that
 * host, else 169.254.169.254. */
static void gce(struct s3_conf *c, struct ckpt_buf *looked)
{
    const char *host = env("GCE_METADATA_HOST");
    if (!host)
        host = env("GCE_METADATA_ROOT");
    const char *ip = env("GCE_METADATA_IP");
    if (!ip)
        ip = host ? host : "169.254.169.254";
    char *token = ckpt_xasprintf("http://%s/computeMetadata/v1/instance/"
                                 "service-accounts/default/token",
                                 host ? host : "metadata.google.internal");
    char *probe = ckpt_xasprintf("http://%s/", ip);
    c->cred = st_cred_new(ST_CRED_GCS, ckpt_xasprintf("gce %s %s", token,
                          probe), ckpt_xstrdup("the GCE metadata server"));
    c->cred->oauth = ckpt_xcalloc(1, sizeof(*c->cred->oauth));
    gcs_oauth_metadata(c->cred->oauth, token, probe);
    c->looked = ckpt_buf_detach(looked, NULL);
    free(token);
    free(probe);
}

/* gs://: HMAC keys of GCS_PROFILE, else Google's Application Default
 * Credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud's file, the GCE
 * metadata server. */
static int resolve_gs(struct s3_conf *c, const struct files *f,
                      const char *display, struct ckpt_err *err)
{
    const char *prof = env("GCS_PROFILE");
    const char *sa = env("GOOGLE_APPLICATION_CREDENTIALS");
    c->region = ckpt_xstrdup("auto");
    const char *ep = env("GCS_ENDPOINT_URL");
    if (prof) {
        /* HMAC keys: an access ID and secret, signed with SigV4. */
        if (!profile_exists(f, prof))
            return ckpt_err_set(err, CKPT_EAUTH, "%s: profile '%s' not "
                                "found in %s or %s", display, prof,
                                f->creds_path, f->config_path);
        const char *ak = profile_get(f, prof, "aws_access_key_id");
        const char *sk = profile_get(f, prof, "aws_secret_access_key");
        if (!ak || !sk)
            return ckpt_err_set(err, CKPT_EAUTH, "%s: profile '%s' has no "
                                "aws_access_key_id and aws_secret_access_key "
                                "(GCS_PROFILE: HMAC keys)", display, prof);
        set_keys(c, ak, sk, profile_get(f, prof, "aws_session_token"),
                 ckpt_xasprintf("profile '%s'", prof));
        if (!ep)
            ep = profile_endpoint(f, prof, "s3");
    } else if (sa) {
        google_file(c, sa, ckpt_xstrdup("GOOGLE_APPLICATION_CREDENTIALS"));
    } else {
        char *adc = gcloud_adc();
        if (access(adc, F_OK) == 0) {
            google_file(c, adc, ckpt_xstrdup("gcloud's application-default "
                                             "credentials"));
        } else {
            struct ckpt_buf looked = CKPT_BUF_INIT;
            ckpt_buf_addf(&looked, "GCS_PROFILE (HMAC keys), "
                          "GOOGLE_APPLICATION_CREDENTIALS, %s (gcloud auth "
                          "application-default login)", adc);
            gce(c, &looked);
            ckpt_buf_release(&looked);
        }
        free(adc);
    }
    return set_endpoint(c, ep ? ep : "https://storage.googleapis.com",
                        display, err);
}

int s3_conf_resolve(struct s3_conf *c, enum ckpt_scheme scheme,
                    const char *bucket, const struct ckpt_storage_cfg *cfg,
                    const char *display, struct ckpt_err *err)
{
    memset(c, 0, sizeof(*c));
    struct files f;
    f.creds = load_aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials",
                            &f.creds_path);
    f.config = load_aws_file("AWS_CONFIG_FILE", "config", &f.config_path);
    int rc;
    if (scheme == CKPT_SCHEME_R2)
        rc = resolve_r2(c, &f, cfg, display, err);
    else if (scheme == CKPT_SCHEME_GS)
        rc = resolve_gs(c, &f, display, err);
    else
        rc = resolve_s3(c, &f, bucket, cfg, display, err);
    st_ini_free(f.creds);
    st_ini_free(f.config);
    free(f.creds_path);
    free(f.config_path);
    if (rc != 0)
        s3_conf_release(c);
    return rc;
}

void s3_conf_release(struct s3_conf *c)
{
    free(c->endpoint);
    free(c->region);
    st_cred_free(c->cred);
    free(c->looked);
    memset(c, 0, sizeof(*c));
}
