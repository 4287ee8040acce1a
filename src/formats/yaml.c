/*
 * yaml.c - training configs (OLMo's config.yaml and metadata.yaml, written
 * by OmegaConf/PyYAML; wandb's files/config.yaml, written by Go's yaml
 * package) into a cJSON tree.
 *
 * The bytes come from run directories nobody vetted, so the syntax is
 * libyaml's (Debian's libyaml-dev, fuzzed by OSS-Fuzz; PyYAML's parser is
 * a port of it, so both read a file the same way). This file only turns
 * libyaml's events into cJSON: plain scalars resolve as PyYAML's YAML 1.1
 * resolver does (yaml_scalar.c), aliases are copied, and what hostile input
 * could grow is capped: nesting depth, nodes and scalar text after alias
 * expansion (an alias bomb fails after at most MAX_NODES copies).
 */
#include "ckpt/yaml.h"
#include "yaml_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "ckpt/util.h"

#define MAX_DEPTH 200             /* nested collections */
#define MAX_NODES 500000          /* nodes, alias copies included */
#define MAX_TEXT (32u << 20)      /* scalar and key bytes, copies included */

/* A collection being filled. */
struct frame {
    cJSON *node;
    char *key;       /* mapping: the key waiting for its value (owned) */
    char *anchor;    /* recorded when the collection ends (owned) */
};

struct anchor {
    char *name;      /* owned */
    cJSON *node;     /* owned copy: later edits of the tree leave it be */
};

struct yb {
    const char *name;
    struct ckpt_err *err;
    struct frame st[MAX_DEPTH];
    int depth;
    cJSON *root;
    int have_root;
    struct anchor *anchors;
    size_t nanchors;
    size_t nodes, text;   /* budget spent */
    size_t line;          /* 1-based line of the current event */
};

cJSON *ckpt_yaml_jcheck(cJSON *j)
{
    if (!j)
        ckpt_die_oom("building a JSON tree");
    return j;
}

static int fail(struct yb *b, const char *msg)
{
    return ckpt_err_set(b->err, CKPT_EFORMAT, "%s:%zu: %s", b->name, b->line,
                        msg);
}

/* Nodes and text of a tree, for the budget. Depth is capped, so the
 * recursion is too. */
static void measure(const cJSON *j, size_t *nodes, size_t *text)
{
    for (; j; j = j->next) {
        *nodes += 1;
        *text += (j->string ? strlen(j->string) : 0) +
                 (j->valuestring ? strlen(j->valuestring) : 0);
        measure(j->child, nodes, text);
    }
}

/* Count nodes and text against the caps; by says where they came from
 * ("" or " from aliases"). */
static int spend(struct yb *b, size_t nodes, size_t text, const char *by)
{
    char msg[64];
    b->nodes += nodes;
    b->text += text;
    if (b->nodes <= MAX_NODES && b->text <= MAX_TEXT)
        return 0;
    snprintf(msg, sizeof(msg), "too %s%s", b->nodes > MAX_NODES
             ? "many nodes" : "much text", by);
    return fail(b, msg);
}

static int spend_tree(struct yb *b, const cJSON *j, const char *by)
{
    size_t nodes = 0, text = 0;
    const cJSON *next = j->next;
    /* Measure j alone, not its siblings. */
    ((cJSON *)j)->next = NULL;
    measure(j, &nodes, &text);
    ((cJSON *)j)->next = (cJSON *)next;
    return spend(b, nodes, text, by);
}

static int set_anchor(struct yb *b, const char *name, const cJSON *node)
{
    cJSON *copy = ckpt_yaml_jcheck(cJSON_Duplicate(node, 1));
    if (spend_tree(b, copy, "") != 0) {
        cJSON_Delete(copy);
        return -1;
    }
    b->anchors = ckpt_xreallocarray(b->anchors, b->nanchors + 1,
                                    sizeof(*b->anchors));
    b->anchors[b->nanchors].name = ckpt_xstrdup(name);
    b->anchors[b->nanchors].node = copy;
    b->nanchors++;
    return 0;
}

/* A copy of the node an alias names; the latest definition wins. An
 * anchor whose collection is still open is not defined yet (no cycles). */
static cJSON *alias(struct yb *b, const char *name)
{
    for (size_t k = b->nanchors; k-- > 0;) {
        if (strcmp(b->anchors[k].name, name))
            continue;
        if (spend_tree(b, b->anchors[k].node, " from aliases") != 0)
            return NULL;
        return ckpt_yaml_jcheck(cJSON_Duplicate(b->anchors[k].node, 1));
    }
    fail(b, "unknown alias");
    return NULL;
}

static int is_core_tag(const char *tag, const char *name)
{
    static const char core[] = "tag:yaml.org,2002:";
    return !strncmp(tag, core, sizeof(core) - 1) &&
           !strcmp(tag + sizeof(core) - 1, name);
}

/* !!str keeps the text; !!int, !!float, !!bool and !!null resolve it even
 * when quoted; other tags are ignored. Plain text resolves by its form. */
static cJSON *scalar(const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    int resolve = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (tag && is_core_tag(tag, "str"))
        resolve = 0;
    else if (tag && (is_core_tag(tag, "int") || is_core_tag(tag, "float") ||
                     is_core_tag(tag, "bool") || is_core_tag(tag, "null")))
        resolve = 1;
    if (resolve)
        return ckpt_yaml_resolve_plain(s, n);
    char *t = ckpt_xstrndup(s, n);
    cJSON *j = ckpt_yaml_jcheck(cJSON_CreateString(t));
    free(t);
    return j;
}

/* The text of a key given as an alias. Collections as keys (YAML allows
 * them, JSON does not) are refused. */
static char *key_text(struct yb *b, const cJSON *k)
{
    if (cJSON_IsArray(k) || cJSON_IsObject(k)) {
        fail(b, "complex mapping keys are not supported");
        return NULL;
    }
    if (cJSON_IsString(k))
        return ckpt_xstrdup(k->valuestring);
    char *s = cJSON_PrintUnformatted(k);
    if (!s)
        ckpt_die_oom("printing a YAML key");
    return s;
}

static struct frame *top(struct yb *b)
{
    return b->depth ? &b->st[b->depth - 1] : NULL;
}

static int wants_key(struct yb *b)
{
    struct frame *f = top(b);
    return f && cJSON_IsObject(f->node) && !f->key;
}

/* Put a finished node (owned) where the document is at. */
static void place(struct yb *b, cJSON *node)
{
    struct frame *f = top(b);
    if (!f) {
        b->root = node;
        b->have_root = 1;
    } else if (cJSON_IsArray(f->node)) {
        cJSON_AddItemToArray(f->node, node);
    } else {
        /* A repeated key replaces the earlier value (PyYAML). */
        cJSON_DeleteItemFromObjectCaseSensitive(f->node, f->key);
        cJSON_AddItemToObject(f->node, f->key, node);
        free(f->key);
        f->key = NULL;
    }
}

/* An alias node: a value, or in key position the key (its node's text). */
static int on_alias(struct yb *b, const yaml_event_t *ev)
{
    cJSON *node = alias(b, (const char *)ev->data.alias.anchor);
    if (!node)
        return -1;
    if (!wants_key(b)) {
        place(b, node);
        return 0;
    }
    char *k = key_text(b, node);
    cJSON_Delete(node);
    if (!k)
        return -1;
    top(b)->key = k;
    return 0;
}

static int on_scalar(struct yb *b, const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    const char *anchor = (const char *)ev->data.scalar.anchor;
    size_t n = ev->data.scalar.length;
    if (spend(b, 1, n, "") != 0)
        return -1;
    int key = wants_key(b);
    cJSON *node = key && !anchor ? NULL : scalar(ev);
    if (anchor && set_anchor(b, anchor, node) != 0) {
        cJSON_Delete(node);
        return -1;
    }
    if (!key) {
        place(b, node);
        return 0;
    }
    /* Keys keep their text ("1.0: x" is key "1.0"): JSON keys are
     * strings. */
    cJSON_Delete(node);
    top(b)->key = ckpt_xstrndup(s, n);
    return 0;
}

static int on_start(struct yb *b, const yaml_char_t *anchor, int is_map)
{
    if (wants_key(b))
        return fail(b, "complex mapping keys are not supported");
    if (b->depth == MAX_DEPTH)
        return fail(b, "nesting too deep");
    if (spend(b, 1, 0, "") != 0)
        return -1;
    struct frame *f = &b->st[b->depth++];
    f->node = ckpt_yaml_jcheck(is_map ? cJSON_CreateObject()
                                      : cJSON_CreateArray());
    f->key = NULL;
    f->anchor = anchor ? ckpt_xstrdup((const char *)anchor) : NULL;
    return 0;
}

static int on_end(struct yb *b)
{
    struct frame f = b->st[--b->depth];
    int rc = f.anchor ? set_anchor(b, f.anchor, f.node) : 0;
    free(f.anchor);
    free(f.key);   /* a key without value cannot reach here; be safe */
    if (rc != 0) {
        cJSON_Delete(f.node);
        return -1;
    }
    place(b, f.node);
    return 0;
}

/* One event; *done at the end of the first document. */
static int on_event(struct yb *b, const yaml_event_t *ev, int *done)
{
    b->line = ev->start_mark.line + 1;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return on_scalar(b, ev);
    case YAML_ALIAS_EVENT:
        return on_alias(b, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(b, ev->data.sequence_start.anchor, 0);
    case YAML_MAPPING_START_EVENT:
        return on_start(b, ev->data.mapping_start.anchor, 1);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return on_end(b);
    case YAML_DOCUMENT_END_EVENT:
    case YAML_STREAM_END_EVENT:
        *done = 1;
        return 0;
    default:
        return 0;
    }
}

/* libyaml's message with a 1-based line: reader errors (bad UTF-8,
 * control characters) carry a byte offset, the others a mark. */
static int syntax_error(struct yb *b, const yaml_parser_t *y,
                        const char *text)
{
    if (y->error == YAML_MEMORY_ERROR)
        ckpt_die_oom("parsing YAML");
    size_t line = y->problem_mark.line + 1;
    if (y->error == YAML_READER_ERROR) {
        line = 1;
        for (size_t i = 0; i < y->problem_offset; i++)
            line += text[i] == '\n';
    }
    const char *problem = y->problem ? y->problem : "syntax error";
    if (y->context)
        return ckpt_err_set(b->err, CKPT_EFORMAT, "%s:%zu: %s (%s at line %zu)",
                            b->name, line, problem, y->context,
                            (size_t)y->context_mark.line + 1);
    return ckpt_err_set(b->err, CKPT_EFORMAT, "%s:%zu: %s", b->name, line,
                        problem);
}

static void release(struct yb *b)
{
    while (b->depth > 0) {
        struct frame *f = &b->st[--b->depth];
        cJSON_Delete(f->node);
        free(f->key);
        free(f->anchor);
    }
    for (size_t k = 0; k < b->nanchors; k++) {
        free(b->anchors[k].name);
        cJSON_Delete(b->anchors[k].node);
    }
    free(b->anchors);
}

int ckpt_yaml_parse(const char *text, size_t len, const char *name,
                    cJSON **out, struct ckpt_err *err)
{
    struct yb *b = ckpt_xcalloc(1, sizeof(*b));
    yaml_parser_t y;
    *out = NULL;
    b->name = name;
    b->err = err;
    if (!yaml_parser_initialize(&y))
        ckpt_die_oom("parsing YAML");
    yaml_parser_set_input_string(&y, (const unsigned char *)text, len);
    int rc = 0, done = 0;
    while (rc == 0 && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&y, &ev)) {
            rc = syntax_error(b, &y, text);
            break;
        }
        rc = on_event(b, &ev, &done);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&y);
    if (rc == 0)
        *out = b->have_root ? b->root : ckpt_yaml_jcheck(cJSON_CreateNull());
    else
        cJSON_Delete(b->root);
    release(b);
    free(b);
    return rc == 0 ? 0 : -1;
}
