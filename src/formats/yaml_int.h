/*
 * yaml_int.h - shared by yaml.c (lines, block structure) and
 * yaml_scalar.c (scalars, anchors, flow collections). Private to
 * src/wandb: do not expose.
 */
#ifndef CKPT_YAML_INT_H
#define CKPT_YAML_INT_H

#include <stddef.h>

#include "ckpt/buf.h"
#include "ckpt/err.h"

struct cJSON;

#define MAX_DEPTH 200          /* nesting; deeper input is rejected */
#define MAX_NODES 1000000      /* nodes created by alias expansion */

struct yline {
    const char *raw;   /* line start */
    size_t rawlen;     /* without "\n" and a trailing "\r" */
    const char *s;     /* content start (narrowed for "- x" and "k: x") */
    size_t len;
    int indent;        /* column of s */
    int lineno;
};

struct anchor {
    char *name;        /* owned */
    struct cJSON *node; /* owned copy */
};

struct yp {
    struct yline *l;   /* owned */
    size_t n, i;       /* lines, current line */
    const char *name;  /* borrowed; for messages */
    struct ckpt_err *err;
    int depth;
    struct anchor *anchors; /* owned */
    size_t nanchors;
    size_t nodes;
};

/* Node properties: "&anchor" and "!tag" before a node. */
struct props {
    const char *anchor;
    size_t anchor_len;
    char tag[32];
};

/* yaml.c */
struct cJSON *yaml_jcheck(struct cJSON *j);
/* Set err to "name:lineno: msg"; returns NULL. */
struct cJSON *yaml_fail(struct yp *p, int lineno, const char *msg);
int yaml_is_ws(char c);
/* A key node's text, malloced; NULL (err set) for a collection. */
char *yaml_key_text(struct yp *p, const struct cJSON *k, int lineno);
void yaml_narrow(struct yline *y, size_t off);
void yaml_split_lines(struct yp *p, const char *text, size_t len);
int yaml_blank(const struct yline *y);
struct yline *yaml_cur(struct yp *p);
size_t yaml_content_len(const char *s, size_t len);
size_t yaml_quoted_end(const char *s, size_t len);

/* yaml_scalar.c */
struct cJSON *yaml_parse_quoted(struct yp *p);
struct cJSON *yaml_parse_block_scalar(struct yp *p, int parent);
struct cJSON *yaml_parse_plain(struct yp *p, int parent, const char *tag);
struct cJSON *yaml_parse_flow(struct yp *p);
struct cJSON *yaml_alias(struct yp *p, const char *name, size_t n,
                         int lineno);
void yaml_set_anchor(struct yp *p, const char *name, size_t n,
                     const struct cJSON *node);
size_t yaml_token_len(const char *s, size_t len);
/* Properties at the start of s, in any order; returns the offset after
 * them. */
size_t yaml_parse_props(const char *s, size_t len, struct props *pr);
struct cJSON *yaml_apply_tag(struct cJSON *j, const char *tag);

#endif
