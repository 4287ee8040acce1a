/*
 * filter.c - rclone-style --include/--exclude rules (docs/commands/process.md
 * "Filters"): what a copy takes from its SRC.
 *
 * A path is relative to SRC's root ("step1000/model.pt"). A pattern that
 * contains '/' (a leading one is dropped) is anchored at the root; one
 * without matches a name at any level. `*` and `?` never cross '/', `**`
 * does. A trailing '/' makes the pattern match directories: every file
 * below a matching directory matches. Rules are tried in order, the first
 * that matches decides; a path no rule matches is taken unless some rule
 * is an include. Character classes and braces are refused, not guessed.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/buf.h"
#include "ckpt/text.h"
#include "ckpt/upload.h"
#include "ckpt/util.h"

struct rule {
    int include;
    int dir;        /* trailing '/': matches directories */
    int anchored;   /* contains '/': matched against the whole path */
    char *pat;      /* owned, without leading and trailing '/' */
};

struct ckpt_filter {
    struct rule *v;
    size_t n;
    int any_include;
};

struct ckpt_filter *ckpt_filter_new(void)
{
    return ckpt_xcalloc(1, sizeof(struct ckpt_filter));
}

void ckpt_filter_free(struct ckpt_filter *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->v[i].pat);
    free(f->v);
    free(f);
}

int ckpt_filter_add(struct ckpt_filter *f, int include, const char *pat,
                    struct ckpt_err *err)
{
    const char *p = pat;
    while (*p == '/')
        p++;
    size_t n = strlen(p);
    int dir = n > 0 && p[n - 1] == '/';
    while (n > 0 && p[n - 1] == '/')
        n--;
    if (n == 0)
        return ckpt_err_set(err, CKPT_EUSAGE, "--%s '%s': empty pattern",
                            include ? "include" : "exclude", pat);
    if (strpbrk(pat, "[]{}\\"))
        return ckpt_err_set(err, CKPT_EUSAGE, "--%s '%s': only *, ** and ? "
                            "are supported (no [...], {...} or \\)",
                            include ? "include" : "exclude", pat);
    f->v = ckpt_xreallocarray(f->v, f->n + 1, sizeof(*f->v));
    struct rule *r = &f->v[f->n++];
    r->include = include;
    r->dir = dir;
    r->pat = ckpt_xstrndup(p, n);
    r->anchored = pat[0] == '/' || strchr(r->pat, '/') != NULL;
    f->any_include |= include;
    return 0;
}

/* Glob match of the whole of s[0..sn) against p: `**` any characters,
 * `*` any but '/', `?` one but '/'. Dynamic programming over (token of p,
 * position in s), from the last token back: O(len(p) * sn) time whatever
 * the stars (trying every split recursively is exponential in them: a
 * filter file of "**********=**" against a long name ran for minutes). */
static int glob(const char *p, const char *s, size_t sn)
{
    /* next[j]: the tokens after this one match s[j..]; cur: this one on. */
    unsigned char *next = ckpt_xmalloc(2 * (sn + 1)), *cur = next + sn + 1;
    size_t pn = strlen(p);
    memset(next, 0, sn + 1);
    next[sn] = 1;               /* nothing left of p matches the end */
    for (size_t i = pn; i > 0;) {
        /* the token that ends at p[i - 1]: "**" only when p reads "**"
         * from its start, as a left-to-right reading splits the stars */
        size_t st = i - 1, len = 1;
        if (p[st] == '*') {
            size_t k = st;
            while (k > 0 && p[k - 1] == '*')
                k--;
            if ((st - k) % 2 == 1) {    /* an odd run position: "**" */
                st--;
                len = 2;
            }
        }
        for (size_t j = sn + 1; j-- > 0;) {
            int m;
            if (len == 2)
                m = next[j] || (j < sn && cur[j + 1]);
            else if (p[st] == '*')
                m = next[j] || (j < sn && s[j] != '/' && cur[j + 1]);
            else if (p[st] == '?')
                m = j < sn && s[j] != '/' && next[j + 1];
            else
                m = j < sn && s[j] == p[st] && next[j + 1];
            cur[j] = (unsigned char)m;
        }
        unsigned char *t = next;
        next = cur;
        cur = t;
        i = st;
    }
    int r = next[0];
    free(next < cur ? next : cur);
    return r;
}

/* Does r match some prefix of rel that ends at a '/' (directory rules) or
 * rel itself (file rules)? Unanchored rules are tried from every path
 * component on. */
static int rule_match(const struct rule *r, const char *rel)
{
    size_t len = strlen(rel);
    for (size_t start = 0; start <= len; start++) {
        if (start > 0 && rel[start - 1] != '/')
            continue;
        if (start > 0 && r->anchored)
            break;
        const char *s = rel + start;
        size_t sn = len - start;
        if (!r->dir) {
            if (glob(r->pat, s, sn))
                return 1;
            continue;
        }
        for (size_t end = 0; end < sn; end++)
            if (s[end] == '/' && glob(r->pat, s, end))
                return 1;
    }
    return 0;
}

int ckpt_filter_match(const struct ckpt_filter *f, const char *rel)
{
    if (!f)
        return 1;
    for (size_t i = 0; i < f->n; i++)
        if (rule_match(&f->v[i], rel))
            return f->v[i].include;
    return !f->any_include;
}

int ckpt_filter_add_rules(struct ckpt_filter *f, const char *text,
                          size_t len, const char *name,
                          struct ckpt_err *err)
{
    size_t lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, n = end - at;
        const char *line = text + at;
        at = end + 1;
        lineno++;
        while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' ||
                     line[n - 1] == '\t'))
            n--;
        while (n && (*line == ' ' || *line == '\t')) {
            line++;
            n--;
        }
        if (!n || *line == '#' || *line == ';')
            continue;
        if (n < 3 || (line[0] != '+' && line[0] != '-') || line[1] != ' ' ||
            memchr(line, '\0', n)) {
            struct ckpt_buf e = CKPT_BUF_INIT;
            ckpt_escape_add(&e, line, n > 80 ? 80 : n);
            int rc = ckpt_err_set(err, CKPT_EUSAGE, "--filter-from '%s' "
                                  "line %zu: expected '+ PATTERN', "
                                  "'- PATTERN' or a '#' comment, got '%s'",
                                  name, lineno, e.ptr);
            ckpt_buf_release(&e);
            return rc;
        }
        char *pat = ckpt_xstrndup(line + 2, n - 2);
        struct ckpt_err e2 = CKPT_ERR_INIT;
        int rc = ckpt_filter_add(f, line[0] == '+', pat, &e2);
        free(pat);
        if (rc != 0)
            return ckpt_err_set(err, CKPT_EUSAGE, "--filter-from '%s' line "
                                "%zu: %s", name, lineno, e2.msg);
    }
    return 0;
}

size_t ckpt_filter_count(const struct ckpt_filter *f)
{
    return f ? f->n : 0;
}
