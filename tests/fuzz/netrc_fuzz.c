/*
 * netrc_fuzz - the netrc reader that finds the W&B API key
 * (ckpt_netrc_password in src/wandb/auth.c): machine / default / login /
 * account / password / macdef tokens, quoting and backslashes.
 *
 * Input: the netrc text (up to the first NUL).
 * Properties: never crashes, never reads past the text, never leaks; and
 * the password found for a machine is the one a second, independent
 * reading of the same grammar finds (model() below: its own scanner over
 * the characters, written from the rules, not from auth.c's code):
 *   - tokens are separated by white space (C locale); a '#' where a token
 *     would start comments out the rest of the line; a token that starts
 *     with '"' runs to the next unescaped '"' (which is dropped) or the
 *     end; in any token a backslash takes the next character literally
 *     (a backslash at the very end stays a backslash);
 *   - `machine NAME` starts NAME's entry, `default` the default entry;
 *     `login`, `account` and `password` each take the next token as their
 *     value; `macdef NAME` skips its body, up to the next "\n\n"; any
 *     other token is ignored;
 *   - the answer is the last password of the machine's entries, else the
 *     last of the default entries, else none.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wandb/wandb_int.h"

struct scan {
    const char *p, *end;
    char *tok;          /* the last token, malloced */
};

/* The next token into s->tok; 0 at the end of the text. */
static int word(struct scan *s)
{
    free(s->tok);
    s->tok = NULL;
    for (;;) {
        while (s->p < s->end && isspace((unsigned char)*s->p))
            s->p++;
        if (s->p == s->end)
            return 0;
        if (*s->p != '#')
            break;
        const char *nl = memchr(s->p, '\n', (size_t)(s->end - s->p));
        s->p = nl ? nl : s->end;
    }
    char *out = malloc((size_t)(s->end - s->p) + 1);
    size_t n = 0;
    char close = *s->p == '"' ? '"' : 0;
    if (close)
        s->p++;
    while (s->p < s->end) {
        char c = *s->p;
        if (close ? c == close : isspace((unsigned char)c) != 0)
            break;
        if (c == '\\' && s->end - s->p > 1) {
            s->p++;
            c = *s->p;
        }
        out[n++] = c;
        s->p++;
    }
    if (close && s->p < s->end)
        s->p++;
    out[n] = '\0';
    s->tok = out;
    return 1;
}

static char *model(const char *text, const char *machine)
{
    struct scan s = { text, text + strlen(text), NULL };
    char *mine = NULL, *deflt = NULL;
    enum { NONE, MINE, DEFAULT } entry = NONE;
    while (word(&s)) {
        if (!strcmp(s.tok, "default")) {
            entry = DEFAULT;
        } else if (!strcmp(s.tok, "machine")) {
            entry = word(&s) && !strcmp(s.tok, machine) ? MINE : NONE;
        } else if (!strcmp(s.tok, "macdef")) {
            word(&s);
            const char *q = s.p;
            while (q + 1 < s.end && !(q[0] == '\n' && q[1] == '\n'))
                q++;
            s.p = q + 1 < s.end ? q : s.end;
        } else if (!strcmp(s.tok, "login") || !strcmp(s.tok, "account")) {
            word(&s);
        } else if (!strcmp(s.tok, "password")) {
            if (word(&s) && entry != NONE) {
                char **slot = entry == MINE ? &mine : &deflt;
                free(*slot);
                *slot = strdup(s.tok);
            }
        }
    }
    free(s.tok);
    if (mine) {
        free(deflt);
        return mine;
    }
    return deflt;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    static const char *const hosts[] = { "api.wandb.ai", "localhost:8080",
                                         "x", "" };
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        char *a = ckpt_netrc_password(text, hosts[i]);
        char *b = model(text, hosts[i]);
        if (!a != !b || (a && strcmp(a, b)) || (a && strlen(a) > size))
            __builtin_trap();
        free(a);
        free(b);
    }
    free(text);
    return 0;
}
