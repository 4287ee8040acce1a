/*
 * yaml.c - a YAML reader for training configs (OLMo's config.yaml, written
 * by OmegaConf/PyYAML) and wandb's files/config.yaml (written by Go's
 * yaml package). Both are block-style documents of mappings, sequences and
 * scalars, so this reads that subset of YAML 1.1 into a cJSON tree instead
 * of pulling in libyaml: block mappings and sequences (including the
 * indentless `key:\n- item` form PyYAML emits), flow collections (PyYAML's
 * `[0.9, 0.95]`, wrapped over several lines when long), plain scalars
 * folded over lines, single/double-quoted and literal/folded block
 * scalars, comments, anchors/aliases, explicit `? ` keys and the standard
 * tags. Only the first document of a stream is read.
 *
 * Parsing is by lines: each line knows its indentation; a sequence entry
 * "- a: 1" is handled by narrowing the line to its content ("a: 1") and
 * raising its indentation to that column, so nested nodes on the same line
 * need no special case.
 */
#include "ckpt/yaml.h"
#include "yaml_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

cJSON *yaml_jcheck(cJSON *j)
{
    if (!j)
        ckpt_die_oom("building a JSON tree");
    return j;
}

cJSON *yaml_fail(struct yp *p, int lineno, const char *msg)
{
    ckpt_err_set(p->err, CKPT_EFORMAT, "%s:%d: %s", p->name, lineno, msg);
    return NULL;
}

/* '\n' only occurs inside gathered flow collections. */
int yaml_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n';
}

/* The text of a mapping key node. Collections as keys (YAML allows them,
 * JSON does not) are refused: printing them into keys of keys grows
 * exponentially with nesting. */
char *yaml_key_text(struct yp *p, const cJSON *k, int lineno)
{
    if (cJSON_IsArray(k) || cJSON_IsObject(k)) {
        yaml_fail(p, lineno, "complex mapping keys are not supported");
        return NULL;
    }
    if (cJSON_IsString(k))
        return ckpt_xstrdup(k->valuestring);
    char *s = cJSON_PrintUnformatted(k);
    if (!s)
        ckpt_die_oom("printing a YAML key");
    return s;
}

/* ---- lines ---- */

static int is_doc_marker(const char *s, size_t len, char c)
{
    return len >= 3 && s[0] == c && s[1] == c && s[2] == c &&
           (len == 3 || yaml_is_ws(s[3]));
}

static void add_line(struct yp *p, const char *raw, size_t len, int lineno)
{
    if (len && raw[len - 1] == '\r')
        len--;
    p->l = ckpt_xreallocarray(p->l, p->n + 1, sizeof(*p->l));
    struct yline *y = &p->l[p->n++];
    size_t ind = 0;
    while (ind < len && raw[ind] == ' ')
        ind++;
    y->raw = raw;
    y->rawlen = len;
    y->s = raw + ind;
    y->len = len - ind;
    y->indent = (int)ind;
    y->lineno = lineno;
}

/* Narrow line y to start at offset off of its content. */
void yaml_narrow(struct yline *y, size_t off)
{
    while (off < y->len && yaml_is_ws(y->s[off]))
        off++;
    y->indent += (int)off;
    y->s += off;
    y->len -= off;
}

/* Split the first document into lines: directives and a leading "---"
 * are skipped; a later "---" or "..." ends it. */
void yaml_split_lines(struct yp *p, const char *text, size_t len)
{
    int lineno = 0, started = 0;
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *s = text + pos;
        size_t n = end - pos;
        lineno++;
        pos = nl ? end + 1 : len;
        if (!started && n && s[0] == '%')
            continue;
        if (is_doc_marker(s, n, '-')) {
            if (started)
                break;
            started = 1;
            if (n > 4) { /* "--- value": content after the marker */
                add_line(p, s, n, lineno);
                yaml_narrow(&p->l[p->n - 1], 4);
            }
            continue;
        }
        if (is_doc_marker(s, n, '.'))
            break;
        if (n && s[0] != '#')
            started = 1;
        add_line(p, s, n, lineno);
    }
}

int yaml_blank(const struct yline *y)
{
    size_t i = 0;
    while (i < y->len && yaml_is_ws(y->s[i]))
        i++;
    return i == y->len || y->s[i] == '#';
}

static void skip_blank(struct yp *p)
{
    while (p->i < p->n && yaml_blank(&p->l[p->i]))
        p->i++;
}

struct yline *yaml_cur(struct yp *p)
{
    return p->i < p->n ? &p->l[p->i] : NULL;
}

/* Content up to a comment (" #"), without trailing blanks. */
size_t yaml_content_len(const char *s, size_t len)
{
    size_t n = 0;
    for (; n < len; n++)
        if (s[n] == '#' && (n == 0 || yaml_is_ws(s[n - 1])))
            break;
    while (n > 0 && yaml_is_ws(s[n - 1]))
        n--;
    return n;
}

static int is_seq_item(const struct yline *y)
{
    return y->len && y->s[0] == '-' && (y->len == 1 || yaml_is_ws(y->s[1]));
}

/* Offset just past a quoted scalar starting at s[0], on this line only,
 * or 0 if it does not end here. */
size_t yaml_quoted_end(const char *s, size_t len)
{
    char q = s[0];
    for (size_t i = 1; i < len; i++) {
        if (q == '"' && s[i] == '\\') {
            i++;
            continue;
        }
        if (s[i] != q)
            continue;
        if (q == '\'' && i + 1 < len && s[i + 1] == '\'') {
            i++;
            continue;
        }
        return i + 1;
    }
    return 0;
}

/* Offset of the ':' that makes line y a mapping entry, or -1. */
static long map_colon(const struct yline *y)
{
    const char *s = y->s;
    size_t len = y->len, i = 0;
    if (!len || strchr("[{#|>*!&", s[0]) || is_seq_item(y))
        return -1;
    if (s[0] == '"' || s[0] == '\'') {
        i = yaml_quoted_end(s, len);
        if (!i)
            return -1;
        while (i < len && yaml_is_ws(s[i]))
            i++;
        return i < len && s[i] == ':' && (i + 1 == len || yaml_is_ws(s[i + 1]))
                   ? (long)i : -1;
    }
    for (; i < len; i++) {
        if (s[i] == ':' && (i + 1 == len || yaml_is_ws(s[i + 1])))
            return (long)i;
        if (s[i] == '#' && i > 0 && yaml_is_ws(s[i - 1]))
            return -1;
    }
    return -1;
}

/* ---- block structure ---- */

static cJSON *parse_block(struct yp *p, int min, int parent);

/* After "key:" or "-" with nothing else on the line: the child node on
 * the following lines, or null. In a mapping (seq_ok), a sequence at the
 * key's own indentation is the value (PyYAML's indentless lists). */
static cJSON *block_child(struct yp *p, int ind, int seq_ok)
{
    p->i++;
    skip_blank(p);
    struct yline *y = yaml_cur(p);
    if (y && y->indent > ind)
        return parse_block(p, ind + 1, ind);
    if (y && seq_ok && y->indent == ind && is_seq_item(y))
        return parse_block(p, ind, ind - 1);
    return yaml_jcheck(cJSON_CreateNull());
}

/* A node whose text starts at the current (narrowed) line's s; parent is
 * the indentation of the enclosing block node. */
static cJSON *parse_inline(struct yp *p, int parent, int seq_ok)
{
    struct yline *y = yaml_cur(p);
    struct props pr;
    yaml_narrow(y, yaml_parse_props(y->s, y->len, &pr));
    cJSON *j;
    if (yaml_blank(y))
        j = block_child(p, parent, seq_ok);
    else if (y->s[0] == '*') {
        size_t n = yaml_token_len(y->s + 1, y->len - 1);
        j = yaml_alias(p, y->s + 1, n, y->lineno);
        p->i++;
    } else if (y->s[0] == '[' || y->s[0] == '{') {
        j = yaml_parse_flow(p);
        if (j && !yaml_blank(yaml_cur(p))) {
            cJSON_Delete(j);
            j = yaml_fail(p, yaml_cur(p)->lineno,
                          "text after a flow collection");
        }
        if (j)
            p->i++;
    } else if (y->s[0] == '"' || y->s[0] == '\'') {
        j = yaml_parse_quoted(p);
        if (j && !yaml_blank(yaml_cur(p))) {
            cJSON_Delete(j);
            j = yaml_fail(p, yaml_cur(p)->lineno, "text after a quoted scalar");
        }
        if (j)
            p->i++;
        if (j && !strcmp(pr.tag, "!!str"))
            pr.tag[0] = '\0';
    } else if (y->s[0] == '|' || y->s[0] == '>') {
        j = yaml_parse_block_scalar(p, parent);
    } else {
        j = yaml_parse_plain(p, parent, pr.tag);
    }
    j = yaml_apply_tag(j, pr.tag);
    if (j && pr.anchor)
        yaml_set_anchor(p, pr.anchor, pr.anchor_len, j);
    return j;
}

static char *map_key(struct yp *p, const struct yline *y, long colon)
{
    if (y->s[0] == '"' || y->s[0] == '\'') {
        struct yline one = *y;
        one.len = (size_t)colon;
        struct yp sub = { &one, 1, 0, p->name, p->err, 0, NULL, 0, 0 };
        cJSON *j = yaml_parse_quoted(&sub);
        if (!j)
            return NULL;
        char *k = ckpt_xstrdup(j->valuestring);
        cJSON_Delete(j);
        return k;
    }
    size_t n = (size_t)colon;
    while (n && yaml_is_ws(y->s[n - 1]))
        n--;
    return ckpt_xstrndup(y->s, n);
}

/* "? " and ": " lines of an explicit key (PyYAML writes one for keys
 * longer than 128 characters and for the empty key). */
static int indicator_line(const struct yline *y, char c)
{
    return y->len && y->s[0] == c && (y->len == 1 || yaml_is_ws(y->s[1]));
}

static cJSON *node_after_indicator(struct yp *p, int ind, int seq_ok)
{
    struct yline *y = yaml_cur(p);
    yaml_narrow(y, 1);
    return yaml_blank(y) ? block_child(p, ind, seq_ok)
                    : parse_block(p, y->indent, ind);
}

/* The key of the entry at the current line; the line is left narrowed to
 * its value (or the ": " line of an explicit key is current). */
static char *entry_key(struct yp *p, int ind, int *explicit_key)
{
    struct yline *y = yaml_cur(p);
    *explicit_key = indicator_line(y, '?');
    if (*explicit_key) {
        cJSON *k = node_after_indicator(p, ind, 0);
        if (!k)
            return NULL;
        char *key = yaml_key_text(p, k, y->lineno);
        cJSON_Delete(k);
        return key;
    }
    long colon = map_colon(y);
    if (colon < 0) {
        yaml_fail(p, y->lineno, is_seq_item(y)
             ? "sequence entry where a mapping key was expected"
             : "expected 'key: value'");
        return NULL;
    }
    char *key = map_key(p, y, colon);
    if (key)
        yaml_narrow(y, (size_t)colon + 1);
    return key;
}

static cJSON *entry_value(struct yp *p, int ind, int explicit_key)
{
    if (!explicit_key)
        return parse_inline(p, ind, 1);
    skip_blank(p);
    struct yline *y = yaml_cur(p);
    if (!y || y->indent != ind || !indicator_line(y, ':'))
        return yaml_jcheck(cJSON_CreateNull());
    return node_after_indicator(p, ind, 1);
}

static cJSON *parse_map(struct yp *p, int ind)
{
    cJSON *obj = yaml_jcheck(cJSON_CreateObject());
    for (;;) {
        skip_blank(p);
        struct yline *y = yaml_cur(p);
        if (!y || y->indent < ind)
            return obj;
        if (y->indent > ind || y->s[0] == '\t') {
            yaml_fail(p, y->lineno, y->s[0] == '\t' ? "tab in indentation"
                      : "bad indentation of a mapping entry");
            break;
        }
        int explicit_key;
        char *key = entry_key(p, ind, &explicit_key);
        if (!key)
            break;
        cJSON *v = entry_value(p, ind, explicit_key);
        if (v) {
            /* A repeated key replaces the earlier value (PyYAML). */
            cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
            cJSON_AddItemToObject(obj, key, v);
        }
        free(key);
        if (!v)
            break;
    }
    cJSON_Delete(obj);
    return NULL;
}

static cJSON *parse_seq(struct yp *p, int ind)
{
    cJSON *arr = yaml_jcheck(cJSON_CreateArray());
    for (;;) {
        skip_blank(p);
        struct yline *y = yaml_cur(p);
        if (!y || y->indent < ind || (y->indent == ind && !is_seq_item(y)))
            return arr;
        if (y->indent > ind) {
            cJSON_Delete(arr);
            return yaml_fail(p, y->lineno,
                             "bad indentation of a sequence entry");
        }
        yaml_narrow(y, 1);
        cJSON *v = yaml_blank(y) ? block_child(p, ind, 0)
                            : parse_block(p, y->indent, ind);
        if (!v) {
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, v);
    }
}

/* The node at the current line, indented at least min; scalars continue
 * on lines indented more than parent. */
static cJSON *parse_block(struct yp *p, int min, int parent)
{
    skip_blank(p);
    struct yline *y = yaml_cur(p);
    if (!y || y->indent < min)
        return yaml_jcheck(cJSON_CreateNull());
    if (y->s[0] == '\t')
        return yaml_fail(p, y->lineno, "tab in indentation");
    if (++p->depth > MAX_DEPTH)
        return yaml_fail(p, y->lineno, "nesting too deep");
    cJSON *j;
    if (is_seq_item(y))
        j = parse_seq(p, y->indent);
    else if (map_colon(y) >= 0 || indicator_line(y, '?'))
        j = parse_map(p, y->indent);
    else
        j = parse_inline(p, parent, 0);
    p->depth--;
    return j;
}

int ckpt_yaml_parse(const char *text, size_t len, const char *name,
                    cJSON **out, struct ckpt_err *err)
{
    struct yp p = { NULL, 0, 0, name, err, 0, NULL, 0, 0 };
    *out = NULL;
    yaml_split_lines(&p, text, len);
    cJSON *j = parse_block(&p, 0, -1);
    if (j) {
        skip_blank(&p);
        if (p.i < p.n) {
            cJSON_Delete(j);
            j = yaml_fail(&p, p.l[p.i].lineno, "unexpected text (bad "
                     "indentation?)");
        }
    }
    for (size_t k = 0; k < p.nanchors; k++) {
        free(p.anchors[k].name);
        cJSON_Delete(p.anchors[k].node);
    }
    free(p.anchors);
    free(p.l);
    if (!j)
        return -1;
    *out = j;
    return 0;
}
