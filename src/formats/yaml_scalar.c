/*
 * yaml_scalar.c - the scalar side of the YAML reader (see yaml.c): type
 * resolution as PyYAML/OmegaConf do it, quoted and block scalars, folded
 * plain scalars, anchors and tags, and flow collections.
 */
#include "yaml_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

/* ---- scalars ---- */

static int all_digits(const char *s, size_t n, const char *set)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr(set, s[i]) || !s[i])
            return 0;
    return 1;
}

/* Copy without '_' (YAML 1.1 digit separators) into buf. */
static const char *no_underscores(const char *s, size_t n, char *buf,
                                  size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++)
        if (s[i] != '_')
            buf[o++] = s[i];
    buf[o] = '\0';
    return buf;
}

static int match_word(const char *s, size_t n, const char *const *words)
{
    for (; *words; words++)
        if (strlen(*words) == n && !memcmp(*words, s, n))
            return 1;
    return 0;
}

/* Base-60 integers of YAML 1.1 ("12:30" is 750), as PyYAML reads them. */
static cJSON *resolve_sexagesimal(const char *s, size_t n)
{
    size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    if (i >= n || s[i] < '1' || s[i] > '9' || !memchr(s, ':', n))
        return NULL;
    double v = 0, part = 0;
    int digits = 0;
    for (; i <= n; i++) {
        if (i == n || s[i] == ':') {
            if (!digits || (v > 0 && part >= 60))
                return NULL;
            v = v * 60 + part;
            part = 0;
            digits = 0;
        } else if (s[i] >= '0' && s[i] <= '9') {
            part = part * 10 + (s[i] - '0');
            digits++;
        } else if (s[i] != '_') {
            return NULL;
        }
    }
    return yaml_jcheck(cJSON_CreateNumber(s[0] == '-' ? -v : v));
}

/* Integer forms of YAML 1.1: decimal, 0x, leading-0 octal, 0b. */
static cJSON *resolve_int(const char *s, size_t n)
{
    char buf[96];
    size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    int base = 10;
    size_t d = i;
    if (n - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'b')) {
        base = s[i + 1] == 'x' ? 16 : 2;
        d = i + 2;
    } else if (n - i > 1 && s[i] == '0') {
        base = 8;
        d = i + 1;
    }
    const char *set = base == 16 ? "0123456789abcdefABCDEF_"
                    : base == 8 ? "01234567_" : base == 2 ? "01_"
                    : "0123456789_";
    if (n > 64 || !all_digits(s + d, n - d, set) || s[d] == '_')
        return resolve_sexagesimal(s, n);
    no_underscores(s + d, n - d, buf, sizeof(buf));
    double v = (double)strtoull(buf, NULL, base);
    return yaml_jcheck(cJSON_CreateNumber(s[0] == '-' ? -v : v));
}

/* Floats: PyYAML's 1.1 forms plus OmegaConf's "1e-4" (no dot). */
static cJSON *resolve_float(const char *s, size_t n)
{
    static const char *const inf[] = { ".inf", ".Inf", ".INF", "+.inf",
                                       "+.Inf", "+.INF", NULL };
    static const char *const ninf[] = { "-.inf", "-.Inf", "-.INF", NULL };
    static const char *const nan_[] = { ".nan", ".NaN", ".NAN", NULL };
    if (match_word(s, n, inf))
        return yaml_jcheck(cJSON_CreateNumber(INFINITY));
    if (match_word(s, n, ninf))
        return yaml_jcheck(cJSON_CreateNumber(-INFINITY));
    if (match_word(s, n, nan_))
        return yaml_jcheck(cJSON_CreateNumber(NAN));
    size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    int digits = 0, dot = 0, exp = 0;
    for (; i < n; i++) {
        char c = s[i];
        if ((c >= '0' && c <= '9') || (c == '_' && digits && !exp))
            digits += c != '_';
        else if (c == '.' && !dot && !exp)
            dot = 1;
        else if ((c == 'e' || c == 'E') && digits && !exp) {
            exp = 1;
            if (i + 1 < n && (s[i + 1] == '-' || s[i + 1] == '+'))
                i++;
            if (i + 1 >= n)
                return NULL;
        } else
            return NULL;
    }
    /* ".5" is a float but "-.5" is a string, as in PyYAML/OmegaConf. */
    int lead = n && (s[0] == '-' || s[0] == '+');
    if (!digits || (!dot && !exp) || n > 90 ||
        (lead && n > 1 && s[1] == '.'))
        return NULL;
    char buf[96];
    return yaml_jcheck(cJSON_CreateNumber(
        strtod(no_underscores(s, n, buf, sizeof(buf)), NULL)));
}

/* A plain scalar's value as PyYAML's resolver sees it. */
static cJSON *resolve_plain(const char *s, size_t n)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL",
                                         NULL };
    static const char *const yes[] = { "true", "True", "TRUE", "yes", "Yes",
                                       "YES", "on", "On", "ON", NULL };
    static const char *const no[] = { "false", "False", "FALSE", "no", "No",
                                      "NO", "off", "Off", "OFF", NULL };
    if (match_word(s, n, nulls))
        return yaml_jcheck(cJSON_CreateNull());
    if (match_word(s, n, yes))
        return yaml_jcheck(cJSON_CreateTrue());
    if (match_word(s, n, no))
        return yaml_jcheck(cJSON_CreateFalse());
    cJSON *num = resolve_int(s, n);
    if (!num)
        num = resolve_float(s, n);
    if (num)
        return num;
    char *t = ckpt_xstrndup(s, n);
    cJSON *j = yaml_jcheck(cJSON_CreateString(t));
    free(t);
    return j;
}

static cJSON *make_string(struct ckpt_buf *b)
{
    return yaml_jcheck(cJSON_CreateString(b->ptr));
}

static void add_utf8(struct ckpt_buf *b, unsigned long cp)
{
    if (cp == 0 || cp > 0x10FFFF)
        cp = 0xFFFD; /* cJSON strings are NUL-terminated */
    if (cp < 0x80) {
        ckpt_buf_addch(b, (char)cp);
    } else if (cp < 0x800) {
        ckpt_buf_addch(b, (char)(0xC0 | (cp >> 6)));
        ckpt_buf_addch(b, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        ckpt_buf_addch(b, (char)(0xE0 | (cp >> 12)));
        ckpt_buf_addch(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
        ckpt_buf_addch(b, (char)(0x80 | (cp & 0x3F)));
    } else {
        ckpt_buf_addch(b, (char)(0xF0 | (cp >> 18)));
        ckpt_buf_addch(b, (char)(0x80 | ((cp >> 12) & 0x3F)));
        ckpt_buf_addch(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
        ckpt_buf_addch(b, (char)(0x80 | (cp & 0x3F)));
    }
}

/* One double-quoted escape at s[*i] (just after '\\'). 0 or -1. */
static int dq_escape(const char *s, size_t len, size_t *i,
                     struct ckpt_buf *b)
{
    static const char from[] = "0abtnvfre \"/\\\t";
    static const char to[] = "\0\a\b\t\n\v\f\r\033 \"/\\\t";
    char c = s[*i];
    const char *k = c ? strchr(from, c) : NULL;
    if (k) {
        add_utf8(b, (unsigned char)to[k - from]);
        (*i)++;
        return 0;
    }
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    unsigned long cp = c == 'N' ? 0x85 : c == '_' ? 0xA0 : c == 'L' ? 0x2028
                     : c == 'P' ? 0x2029 : 0;
    if (cp) {
        add_utf8(b, cp);
        (*i)++;
        return 0;
    }
    if (!digits || *i + (size_t)digits >= len ||
        !all_digits(s + *i + 1, (size_t)digits, "0123456789abcdefABCDEF"))
        return -1;
    char hex[9];
    memcpy(hex, s + *i + 1, (size_t)digits);
    hex[digits] = '\0';
    add_utf8(b, strtoul(hex, NULL, 16));
    *i += (size_t)digits + 1;
    return 0;
}

/*
 * A quoted scalar starting at the current line's s[0], possibly over
 * several lines (line breaks fold to a space, empty lines to "\n"). On
 * return the current line is narrowed to what follows the closing quote.
 */
enum { Q_CLOSED, Q_EOL, Q_JOIN, Q_BAD };

/* Scan one line of a quoted scalar from s[*i] into b. Q_CLOSED leaves *i
 * at the closing quote; Q_JOIN is an escaped line break. *keep is the
 * length of b no trailing-space trim may cut (escapes). */
static int quoted_line(char q, const char *s, size_t len, size_t *i,
                       struct ckpt_buf *b, size_t *keep)
{
    for (; *i < len; (*i)++) {
        char c = s[*i];
        if (q == '\'' && c == '\'' && *i + 1 < len && s[*i + 1] == '\'') {
            ckpt_buf_addch(b, '\'');
            (*i)++;
        } else if (c == q) {
            return Q_CLOSED;
        } else if (q == '"' && c == '\\') {
            if (*i + 1 == len)
                return Q_JOIN;
            (*i)++;
            if (dq_escape(s, len, i, b) != 0)
                return Q_BAD;
            *keep = b->len;
            (*i)--;
        } else {
            ckpt_buf_addch(b, c);
        }
    }
    return Q_EOL;
}

cJSON *yaml_parse_quoted(struct yp *p)
{
    struct yline *y = yaml_cur(p);
    char q = y->s[0];
    struct ckpt_buf b = CKPT_BUF_INIT;
    size_t i = 1, keep = 0;
    int startline = y->lineno;
    for (;;) {
        int st = quoted_line(q, y->s, y->len, &i, &b, &keep);
        if (st == Q_CLOSED || st == Q_BAD) {
            cJSON *j = NULL;
            if (st == Q_CLOSED) {
                yaml_narrow(y, i + 1);
                j = make_string(&b);
            } else {
                yaml_fail(p, y->lineno, "bad escape in quoted scalar");
            }
            ckpt_buf_release(&b);
            return j;
        }
        /* A line break folds to a space, n empty lines to n "\n";
         * whitespace around the break goes. */
        if (st == Q_EOL)
            while (b.len > keep && yaml_is_ws(b.ptr[b.len - 1]))
                ckpt_buf_setlen(&b, b.len - 1);
        int empty = 0;
        for (p->i++; p->i < p->n && p->l[p->i].len == 0; p->i++)
            empty++;
        if (p->i >= p->n) {
            ckpt_buf_release(&b);
            return yaml_fail(p, startline, "unterminated quoted scalar");
        }
        y = yaml_cur(p);
        yaml_narrow(y, 0);
        for (int e = 0; e < empty; e++)
            ckpt_buf_addch(&b, '\n');
        if (!empty && st == Q_EOL)
            ckpt_buf_addch(&b, ' ');
        i = 0;
    }
}

/* ---- block scalars (| and >) ---- */

struct bshdr {
    char style;     /* '|' or '>' */
    char chomp;     /* '-', '+' or 0 (clip) */
    int indent;     /* explicit indentation, or 0 */
};

static int parse_bshdr(const char *s, size_t len, struct bshdr *h)
{
    memset(h, 0, sizeof(*h));
    h->style = s[0];
    size_t i = 1;
    for (; i < len && i < 3; i++) {
        if ((s[i] == '-' || s[i] == '+') && !h->chomp)
            h->chomp = s[i];
        else if (s[i] >= '1' && s[i] <= '9' && !h->indent)
            h->indent = s[i] - '0';
        else
            break;
    }
    return yaml_content_len(s + i, len - i) == 0 ? 0 : -1;
}

/* Append one content line of a block scalar. The line break before it
 * folds (for '>') to a space between two normal lines, or vanishes into
 * the empty lines that follow it; otherwise it is kept. */
static void bs_line(struct ckpt_buf *b, const struct bshdr *h,
                    const char *s, size_t n, int *lines, int *pending,
                    int *prev_more)
{
    int more = n && yaml_is_ws(s[0]);
    int breaks = *pending;
    if (*lines) {
        int fold = h->style == '>' && !more && !*prev_more;
        if (fold && !*pending)
            ckpt_buf_addch(b, ' ');
        if (!fold)
            breaks++;
    }
    for (int k = 0; k < breaks; k++)
        ckpt_buf_addch(b, '\n');
    ckpt_buf_add(b, s, n);
    *pending = 0;
    *prev_more = more;
    (*lines)++;
}

cJSON *yaml_parse_block_scalar(struct yp *p, int parent)
{
    struct yline *y = yaml_cur(p);
    struct bshdr h;
    if (parse_bshdr(y->s, y->len, &h) != 0)
        return yaml_fail(p, y->lineno, "bad block scalar header");
    int base = parent < 0 ? 0 : parent;
    int ind = h.indent ? base + h.indent : -1;
    struct ckpt_buf b = CKPT_BUF_INIT;
    int lines = 0, pending = 0, prev_more = 0;
    for (p->i++; p->i < p->n; p->i++) {
        const struct yline *l = &p->l[p->i];
        size_t sp = 0;
        while (sp < l->rawlen && l->raw[sp] == ' ')
            sp++;
        if (sp == l->rawlen) { /* empty or spaces only */
            pending++;
            continue;
        }
        if (ind < 0)
            ind = (int)sp > parent ? (int)sp : parent + 1;
        if ((int)sp < ind)
            break;
        bs_line(&b, &h, l->raw + ind, l->rawlen - (size_t)ind, &lines,
                &pending, &prev_more);
    }
    if (lines && h.chomp != '-')
        ckpt_buf_addch(&b, '\n');
    if (h.chomp == '+')
        for (int k = 0; k < pending; k++)
            ckpt_buf_addch(&b, '\n');
    cJSON *j = make_string(&b);
    ckpt_buf_release(&b);
    return j;
}

/* ---- plain scalars ---- */

cJSON *yaml_parse_plain(struct yp *p, int parent, const char *tag)
{
    struct yline *y = yaml_cur(p);
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_add(&b, y->s, yaml_content_len(y->s, y->len));
    size_t next = ++p->i;
    int empty = 0;

    /* Continuation lines are more indented than the parent node; an empty
     * line folds to "\n", a line break to a space. A comment ends it. */
    for (size_t j = next; j < p->n; j++) {
        struct yline *l = &p->l[j];
        if (l->len == 0) {
            empty++;
            continue;
        }
        if (l->indent <= parent || l->s[0] == '#')
            break;
        if (empty)
            for (int e = 0; e < empty; e++)
                ckpt_buf_addch(&b, '\n');
        else
            ckpt_buf_addch(&b, ' ');
        ckpt_buf_add(&b, l->s, yaml_content_len(l->s, l->len));
        empty = 0;
        p->i = j + 1;
        if (yaml_content_len(l->s, l->len) < l->len)
            break;
    }
    cJSON *j;
    if (tag && !strcmp(tag, "!!str"))
        j = make_string(&b);
    else
        j = resolve_plain(b.ptr, b.len);
    ckpt_buf_release(&b);
    return j;
}

/* ---- anchors, aliases, tags ---- */

static size_t count_nodes(const cJSON *j)
{
    size_t n = 1;
    for (const cJSON *c = j ? j->child : NULL; c; c = c->next)
        n += count_nodes(c);
    return n;
}

void yaml_set_anchor(struct yp *p, const char *name, size_t n,
                       const cJSON *node)
{
    p->anchors = ckpt_xreallocarray(p->anchors, p->nanchors + 1,
                                    sizeof(*p->anchors));
    p->anchors[p->nanchors].name = ckpt_xstrndup(name, n);
    p->anchors[p->nanchors].node = yaml_jcheck(cJSON_Duplicate(node, 1));
    p->nanchors++;
}

cJSON *yaml_alias(struct yp *p, const char *name, size_t n, int lineno)
{
    /* The latest definition wins, as in YAML. */
    for (size_t k = p->nanchors; k-- > 0;) {
        struct anchor *a = &p->anchors[k];
        if (strlen(a->name) != n || memcmp(a->name, name, n))
            continue;
        p->nodes += count_nodes(a->node);
        if (p->nodes > MAX_NODES)
            return yaml_fail(p, lineno, "too many nodes from aliases");
        return yaml_jcheck(cJSON_Duplicate(a->node, 1));
    }
    return yaml_fail(p, lineno, "unknown alias");
}

size_t yaml_token_len(const char *s, size_t len)
{
    size_t n = 0;
    while (n < len && !yaml_is_ws(s[n]) && !strchr(",[]{}", s[n]))
        n++;
    return n;
}


size_t yaml_parse_props(const char *s, size_t len, struct props *pr)
{
    size_t i = 0;
    memset(pr, 0, sizeof(*pr));
    while (i < len && (s[i] == '&' || s[i] == '!')) {
        size_t n = yaml_token_len(s + i, len - i);
        if (s[i] == '&') {
            pr->anchor = s + i + 1;
            pr->anchor_len = n - 1;
        } else {
            snprintf(pr->tag, sizeof(pr->tag), "%.*s", (int)n, s + i);
        }
        i += n;
        while (i < len && yaml_is_ws(s[i]))
            i++;
    }
    return i;
}

/* Apply a scalar tag to a resolved node (!!str is handled at parse). */
cJSON *yaml_apply_tag(cJSON *j, const char *tag)
{
    if (!j || !tag[0] || !cJSON_IsString(j))
        return j;
    const char *s = j->valuestring;
    cJSON *r = NULL;
    if (!strcmp(tag, "!!int") || !strcmp(tag, "!!float") ||
        !strcmp(tag, "!!bool") || !strcmp(tag, "!!null"))
        r = resolve_plain(s, strlen(s));
    if (!r)
        return j;
    cJSON_Delete(j);
    return r;
}

/* ---- flow collections ---- */

struct flow {
    const char *s;
    size_t len, i;
    int lineno;
};

static void fskip(struct flow *f)
{
    while (f->i < f->len && yaml_is_ws(f->s[f->i]))
        f->i++;
}

static cJSON *flow_value(struct yp *p, struct flow *f);

/* A flow scalar's text; *quoted set for quoted ones. Malloced. */
static char *flow_text(struct yp *p, struct flow *f, int *quoted)
{
    fskip(f);
    const char *s = f->s + f->i;
    size_t len = f->len - f->i;
    *quoted = len && (s[0] == '"' || s[0] == '\'');
    if (*quoted) {
        size_t end = yaml_quoted_end(s, len);
        if (!end) {
            yaml_fail(p, f->lineno, "unterminated quoted scalar");
            return NULL;
        }
        /* Reuse the block parser on the scalar's lines, so folding is the
         * same as outside flow collections. */
        struct yp sub = { NULL, 0, 0, p->name, p->err, 0, NULL, 0, 0 };
        yaml_split_lines(&sub, s, end);
        for (size_t k = 0; k < sub.n; k++)
            sub.l[k].lineno = f->lineno;
        cJSON *j = sub.n ? yaml_parse_quoted(&sub) : NULL;
        free(sub.l);
        if (!j)
            return NULL;
        char *t = ckpt_xstrdup(j->valuestring);
        cJSON_Delete(j);
        f->i += end;
        return t;
    }
    size_t n = 0;
    for (; n < len; n++) {
        if (strchr(",[]{}", s[n]))
            break;
        if (s[n] == ':' && (n + 1 == len || yaml_is_ws(s[n + 1]) ||
                            strchr(",[]{}", s[n + 1])))
            break;
    }
    f->i += n;
    while (n && yaml_is_ws(s[n - 1]))
        n--;
    /* A plain scalar broken over lines folds each break to one space. */
    struct ckpt_buf b = CKPT_BUF_INIT;
    for (size_t k = 0; k < n; k++) {
        if (s[k] != '\n') {
            ckpt_buf_addch(&b, s[k]);
            continue;
        }
        while (b.len && yaml_is_ws(b.ptr[b.len - 1]))
            ckpt_buf_setlen(&b, b.len - 1);
        ckpt_buf_addch(&b, ' ');
        while (k + 1 < n && yaml_is_ws(s[k + 1]))
            k++;
    }
    return ckpt_buf_detach(&b, NULL);
}

static cJSON *flow_seq(struct yp *p, struct flow *f)
{
    cJSON *arr = yaml_jcheck(cJSON_CreateArray());
    f->i++; /* '[' */
    for (;;) {
        fskip(f);
        if (f->i < f->len && f->s[f->i] == ']') {
            f->i++;
            return arr;
        }
        cJSON *v = flow_value(p, f);
        if (!v)
            break;
        fskip(f);
        if (f->i < f->len && f->s[f->i] == ':') { /* [k: v] pair */
            f->i++;
            cJSON *pair = yaml_jcheck(cJSON_CreateObject());
            cJSON *pv = flow_value(p, f);
            if (!pv) {
                cJSON_Delete(v);
                cJSON_Delete(pair);
                break;
            }
            char *key = yaml_key_text(p, v, f->lineno);
            cJSON_Delete(v);
            v = pair;
            if (!key) {
                cJSON_Delete(pv);
                cJSON_Delete(pair);
                break;
            }
            cJSON_AddItemToObject(pair, key, pv);
            free(key);
            fskip(f);
        }
        cJSON_AddItemToArray(arr, v);
        if (f->i < f->len && f->s[f->i] == ',') {
            f->i++;
            continue;
        }
        if (f->i < f->len && f->s[f->i] == ']')
            continue;
        yaml_fail(p, f->lineno, "expected ',' or ']' in flow sequence");
        break;
    }
    cJSON_Delete(arr);
    return NULL;
}

static int flow_pair(struct yp *p, struct flow *f, cJSON *obj)
{
    int quoted;
    fskip(f);
    if (f->i + 1 < f->len && f->s[f->i] == '?' && yaml_is_ws(f->s[f->i + 1]))
        f->i++; /* explicit key */
    char *key = flow_text(p, f, &quoted);
    if (!key)
        return -1;
    fskip(f);
    cJSON *v;
    if (f->i < f->len && f->s[f->i] == ':') {
        f->i++;
        v = flow_value(p, f);
    } else {
        v = yaml_jcheck(cJSON_CreateNull());
    }
    if (v) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
        cJSON_AddItemToObject(obj, key, v);
    }
    free(key);
    return v ? 0 : -1;
}

static cJSON *flow_map(struct yp *p, struct flow *f)
{
    cJSON *obj = yaml_jcheck(cJSON_CreateObject());
    f->i++; /* '{' */
    for (;;) {
        fskip(f);
        if (f->i < f->len && f->s[f->i] == '}') {
            f->i++;
            return obj;
        }
        if (flow_pair(p, f, obj) != 0)
            break;
        fskip(f);
        if (f->i < f->len && f->s[f->i] == ',') {
            f->i++;
            continue;
        }
        if (f->i < f->len && f->s[f->i] == '}')
            continue;
        yaml_fail(p, f->lineno, "expected ',' or '}' in flow mapping");
        break;
    }
    cJSON_Delete(obj);
    return NULL;
}

static cJSON *flow_value(struct yp *p, struct flow *f)
{
    if (++p->depth > MAX_DEPTH)
        return yaml_fail(p, f->lineno, "nesting too deep");
    fskip(f);
    struct props pr;
    f->i += yaml_parse_props(f->s + f->i, f->len - f->i, &pr);
    cJSON *j = NULL;
    char c = f->i < f->len ? f->s[f->i] : '\0';
    if (c == '[') {
        j = flow_seq(p, f);
    } else if (c == '{') {
        j = flow_map(p, f);
    } else if (c == '*') {
        size_t n = yaml_token_len(f->s + f->i + 1, f->len - f->i - 1);
        j = yaml_alias(p, f->s + f->i + 1, n, f->lineno);
        f->i += n + 1;
    } else {
        int quoted;
        char *t = flow_text(p, f, &quoted);
        if (t)
            j = quoted || !strcmp(pr.tag, "!!str")
                    ? yaml_jcheck(cJSON_CreateString(t))
                    : resolve_plain(t, strlen(t));
        free(t);
    }
    j = yaml_apply_tag(j, pr.tag);
    if (j && pr.anchor)
        yaml_set_anchor(p, pr.anchor, pr.anchor_len, j);
    p->depth--;
    return j;
}

/* Join the lines of a flow collection starting at the current line until
 * its brackets balance (quote-aware, comments dropped, line breaks kept
 * for quoted scalars to fold). The closing line is narrowed to what
 * follows the bracket. */
static int gather_flow(struct yp *p, struct ckpt_buf *b)
{
    int depth = 0, startline = yaml_cur(p)->lineno;
    char q = 0;
    for (; p->i < p->n; p->i++) {
        struct yline *y = yaml_cur(p);
        for (size_t k = 0; k < y->len; k++) {
            char c = y->s[k];
            if (!q && c == '#' && (k == 0 || yaml_is_ws(y->s[k - 1])))
                break;
            ckpt_buf_addch(b, c);
            if (q) {
                if (c == '\\' && q == '"' && k + 1 < y->len)
                    ckpt_buf_addch(b, y->s[++k]);
                else if (c == q)
                    q = 0;
            } else if ((c == '"' || c == '\'') &&
                       (k == 0 || strchr(" \t[{,:", y->s[k - 1]))) {
                q = c;
            } else if (c == '[' || c == '{') {
                depth++;
            } else if ((c == ']' || c == '}') && --depth == 0) {
                yaml_narrow(y, k + 1);
                return 0;
            }
        }
        ckpt_buf_addch(b, '\n');
    }
    p->i = p->n - 1;
    yaml_fail(p, startline, "unterminated flow collection");
    return -1;
}

cJSON *yaml_parse_flow(struct yp *p)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    int lineno = yaml_cur(p)->lineno;
    cJSON *j = NULL;
    if (gather_flow(p, &b) == 0) {
        struct flow f = { b.ptr, b.len, 0, lineno };
        j = flow_value(p, &f);
        fskip(&f);
        if (j && f.i < f.len) {
            cJSON_Delete(j);
            j = yaml_fail(p, lineno, "text after a flow collection");
        }
    }
    ckpt_buf_release(&b);
    return j;
}

