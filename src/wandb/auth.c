/*
 * auth.c - where the W&B client finds its server and API key, in wandb's
 * order: WANDB_BASE_URL (default https://api.wandb.ai), then WANDB_API_KEY,
 * then the netrc entry of the server's host[:port] ($NETRC, ~/.netrc,
 * ~/_netrc; only `password` is read, as wandb does).
 */
#include "wandb_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/util.h"

#define DEFAULT_BASE_URL "https://api.wandb.ai"
#define MAX_NETRC (1u << 20)

char *ckpt_wandb_base_url(const char *cfg_value)
{
    const char *s = cfg_value;
    if (!s || !*s)
        s = getenv("WANDB_BASE_URL");
    if (!s || !*s)
        s = DEFAULT_BASE_URL;
    while (isspace((unsigned char)*s))
        s++;
    char *u = ckpt_xstrdup(s);
    size_t n = strlen(u);
    while (n > 0 && (u[n - 1] == '/' || isspace((unsigned char)u[n - 1])))
        u[--n] = '\0';
    return u;
}

char *ckpt_url_netloc(const char *url)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/?#");
    return ckpt_xstrndup(p, n);
}

/* netrc tokens: whitespace-separated, optionally double-quoted (with \
 * escapes), '#' starting a comment at the start of a token. */
struct tok {
    const char *s;
    size_t len, pos;
    struct ckpt_buf t;
};

static int next_tok(struct tok *k)
{
    ckpt_buf_reset(&k->t);
    for (;;) {
        while (k->pos < k->len && isspace((unsigned char)k->s[k->pos]))
            k->pos++;
        if (k->pos >= k->len)
            return 0;
        if (k->s[k->pos] != '#')
            break;
        while (k->pos < k->len && k->s[k->pos] != '\n')
            k->pos++;
    }
    int quoted = k->s[k->pos] == '"';
    if (quoted)
        k->pos++;
    while (k->pos < k->len) {
        char c = k->s[k->pos];
        if (quoted ? c == '"' : isspace((unsigned char)c))
            break;
        if (c == '\\' && k->pos + 1 < k->len)
            c = k->s[++k->pos];
        ckpt_buf_addch(&k->t, c);
        k->pos++;
    }
    if (quoted && k->pos < k->len)
        k->pos++;
    return 1;
}

/* A macdef body runs to the next empty line. */
static void skip_macdef(struct tok *k)
{
    const char *end = NULL;
    for (size_t i = k->pos; i + 1 < k->len; i++)
        if (k->s[i] == '\n' && k->s[i + 1] == '\n') {
            end = k->s + i;
            break;
        }
    k->pos = end ? (size_t)(end - k->s) : k->len;
}

char *ckpt_netrc_password(const char *text, const char *machine)
{
    struct tok k = { text, strlen(text), 0, CKPT_BUF_INIT };
    char *found = NULL, *deflt = NULL;
    int in = 0; /* 1: inside the wanted machine, 2: inside default */
    while (next_tok(&k)) {
        if (!strcmp(k.t.ptr, "machine") || !strcmp(k.t.ptr, "default")) {
            in = !strcmp(k.t.ptr, "default") ? 2 : 0;
            if (!in && next_tok(&k) && !strcmp(k.t.ptr, machine))
                in = 1;
        } else if (!strcmp(k.t.ptr, "macdef")) {
            next_tok(&k);
            skip_macdef(&k);
        } else if (!strcmp(k.t.ptr, "password") ||
                   !strcmp(k.t.ptr, "login") ||
                   !strcmp(k.t.ptr, "account")) {
            int pw = !strcmp(k.t.ptr, "password");
            if (!next_tok(&k) || !pw || !in)
                continue;
            /* A later entry for the same machine wins, as in Python's
             * netrc module (which wandb uses). */
            char **slot = in == 1 ? &found : &deflt;
            free(*slot);
            *slot = ckpt_xstrdup(k.t.ptr);
        }
    }
    ckpt_buf_release(&k.t);
    if (found) {
        free(deflt);
        return found;
    }
    return deflt;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* wandb's choice of netrc file: $NETRC, else ~/.netrc if it exists, else
 * ~/_netrc if it exists, else ~/.netrc. Malloced, or NULL without HOME. */
static char *netrc_path(void)
{
    const char *env = getenv("NETRC");
    if (env && *env)
        return ckpt_xstrdup(env);
    const char *home = getenv("HOME");
    if (!home || !*home)
        return NULL;
    char *p = ckpt_path_join(home, ".netrc");
    if (file_exists(p))
        return p;
    char *alt = ckpt_path_join(home, "_netrc");
    if (file_exists(alt)) {
        free(p);
        return alt;
    }
    free(alt);
    return p;
}

static char *read_small_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct ckpt_buf b = CKPT_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len < MAX_NETRC)
        ckpt_buf_add(&b, chunk, n);
    fclose(f);
    return ckpt_buf_detach(&b, NULL);
}

static char *trimmed(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    return n ? ckpt_xstrndup(s, n) : NULL;
}

int ckpt_wandb_find_api_key(const char *base_url, char **key, char **from,
                            struct ckpt_err *err)
{
    *key = NULL;
    *from = NULL;
    const char *env = getenv("WANDB_API_KEY");
    if (env && (*key = trimmed(env)) != NULL) {
        *from = ckpt_xstrdup("WANDB_API_KEY");
        return 0;
    }
    char *machine = ckpt_url_netloc(base_url);
    char *path = netrc_path();
    char *text = path ? read_small_file(path) : NULL;
    char *pw = text ? ckpt_netrc_password(text, machine) : NULL;
    if (pw) {
        *key = trimmed(pw);
        free(pw);
    }
    free(text);
    if (*key) {
        *from = path;
        free(machine);
        return 0;
    }
    ckpt_err_set(err, CKPT_EAUTH,
                 "no W&B API key: set WANDB_API_KEY, or add 'machine %s "
                 "login user password <key>' to %s (what `wandb login` "
                 "writes)", machine, path ? path : "~/.netrc");
    free(path);
    free(machine);
    return -1;
}
