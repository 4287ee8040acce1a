/*
 * graphql_parse.c - GraphQL response parsing for the W&B client (the
 * queries and retries are graphql.c's): error bodies, run nodes, Runs
 * pages and the `value`-wrapped config. Pure functions over bytes, so the
 * fuzz target (tests/fuzz/graphql_fuzz.c) drives them directly.
 */
#include "wandb_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/text.h"
#include "ckpt/util.h"

#define MAX_MESSAGE 300   /* characters of a server message we repeat */

static const cJSON *member(const cJSON *obj, const char *key)
{
    return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key)
                               : NULL;
}

const char *ckpt_json_str(const cJSON *obj, const char *key)
{
    const cJSON *j = member(obj, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* Append s to b as one line of printable text (servers may send HTML). */
static void add_clean(struct ckpt_buf *b, const char *s, size_t n)
{
    int space = 0;
    for (size_t i = 0; i < n && b->len < MAX_MESSAGE; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = b->len > 0;
            continue;
        }
        if (c < 0x20 || c == 0x7f)
            continue;
        if (space)
            ckpt_buf_addch(b, ' ');
        space = 0;
        ckpt_buf_addch(b, (char)c);
    }
}

/* A server message, credentials hidden: a server may quote the request
 * it rejects, Authorization header included. Redacted before it is
 * shortened, so no cut leaves part of a secret behind. */
static void add_message(struct ckpt_buf *b, const char *m)
{
    if (!m || !*m)
        return;
    if (b->len)
        ckpt_buf_addstr(b, "; ");
    struct ckpt_buf r = CKPT_BUF_INIT;
    ckpt_redact_add(&r, m, strlen(m));
    add_clean(b, r.ptr, r.len);
    ckpt_buf_release(&r);
}

/* The three error shapes wandb's util.parse_backend_error_messages knows. */
static void json_errors(const cJSON *doc, struct ckpt_buf *b)
{
    const cJSON *errs = member(doc, "errors");
    int k = 0;
    for (const cJSON *e = cJSON_IsArray(errs) ? errs->child : NULL;
         e && k < 3; e = e->next, k++)
        add_message(b, cJSON_IsString(e) ? e->valuestring
                                         : ckpt_json_str(e, "message"));
    if (cJSON_IsString(errs))
        add_message(b, errs->valuestring);
    add_message(b, ckpt_json_str(doc, "error"));
    if (!b->len)
        add_message(b, ckpt_json_str(doc, "message"));
}

void ckpt_gql_error_message(const char *body, size_t len, struct ckpt_buf *b)
{
    /* Only the messages of a JSON error body: any other body (a proxy's
     * HTML, a debug dump of the request) is never repeated. */
    cJSON *doc = cJSON_ParseWithLength(body, len);
    json_errors(doc, b);
    cJSON_Delete(doc);
}

static int has_errors(const cJSON *doc)
{
    const cJSON *errs = member(doc, "errors");
    if (!errs || cJSON_IsNull(errs))
        return 0;
    return !cJSON_IsArray(errs) || cJSON_GetArraySize(errs) > 0;
}

int ckpt_gql_parse_response(const char *body, size_t len, cJSON **doc,
                            cJSON **data, struct ckpt_err *err)
{
    *doc = NULL;
    *data = NULL;
    cJSON *d = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(d)) {
        cJSON_Delete(d);
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "W&B API: malformed JSON response");
    }
    if (has_errors(d)) {
        struct ckpt_buf m = CKPT_BUF_INIT;
        json_errors(d, &m);
        ckpt_err_set(err, CKPT_EHTTP, "W&B API error: %s",
                     m.len ? m.ptr : "(no message)");
        ckpt_buf_release(&m);
        cJSON_Delete(d);
        return -1;
    }
    cJSON *dat = cJSON_GetObjectItemCaseSensitive(d, "data");
    if (!cJSON_IsObject(dat)) {
        cJSON_Delete(d);
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "W&B API: response has no data");
    }
    *doc = d;
    *data = dat;
    return 0;
}

/* Give a detached item a new key. cJSON keeps keys as malloced strings
 * (we install no allocation hooks), so this mirrors what
 * cJSON_AddItemToObject does internally. */
static void rekey(cJSON *item, const char *key)
{
    if (!(item->type & cJSON_StringIsConst))
        cJSON_free(item->string);
    item->string = ckpt_xstrdup(key);
    item->type &= ~cJSON_StringIsConst;
}

void ckpt_gql_unwrap_config(cJSON *cfg)
{
    if (!cJSON_IsObject(cfg))
        return;
    /* wandb's own bookkeeping, not the training config (the client moves
     * them to rawconfig too). */
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "_wandb");
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "wandb_version");
    for (cJSON *c = cfg->child; c; c = c->next) {
        cJSON *v = cJSON_IsObject(c)
                       ? cJSON_GetObjectItemCaseSensitive(c, "value") : NULL;
        if (!v || !c->string)
            continue;
        cJSON_DetachItemViaPointer(c, v);
        rekey(v, c->string);
        cJSON_ReplaceItemViaPointer(cfg, c, v); /* frees c */
        c = v;
    }
}

cJSON *ckpt_gql_config(const char *json)
{
    cJSON *cfg = cJSON_Parse(json);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return NULL;
    }
    ckpt_gql_unwrap_config(cfg);
    return cfg;
}

static char *dup_str(const cJSON *obj, const char *key)
{
    const char *s = ckpt_json_str(obj, key);
    return s ? ckpt_xstrdup(s) : NULL;
}

/* summaryMetrics._step: the last step the run logged. */
static int64_t last_step(const cJSON *node)
{
    const cJSON *sm = member(node, "summaryMetrics");
    cJSON *parsed = NULL;
    if (cJSON_IsString(sm))
        sm = parsed = cJSON_Parse(sm->valuestring);
    const cJSON *st = member(sm, "_step");
    int64_t v = -1;
    if (cJSON_IsNumber(st) && st->valuedouble >= 0 &&
        st->valuedouble < 9e15 && !isnan(st->valuedouble))
        v = (int64_t)st->valuedouble;
    cJSON_Delete(parsed);
    return v;
}

int ckpt_gql_parse_run(const cJSON *node, struct ckpt_wandb_run *out,
                       struct ckpt_err *err)
{
    memset(out, 0, sizeof(*out));
    const char *name = ckpt_json_str(node, "name");
    if (!name || !*name)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "W&B API: run without a name in the response");
    out->name = ckpt_xstrdup(name);
    out->display_name = dup_str(node, "displayName");
    out->group = dup_str(node, "group");
    out->state = dup_str(node, "state");
    out->created_at = dup_str(node, "createdAt");
    const cJSON *cfg = member(node, "config");
    if (cJSON_IsString(cfg)) {
        out->config = ckpt_gql_config(cfg->valuestring);
    } else if (cJSON_IsObject(cfg)) {
        out->config = cJSON_Duplicate(cfg, 1);
        ckpt_gql_unwrap_config(out->config);
    }
    out->last_step = last_step(node);
    return 0;
}

static void runs_add(struct ckpt_wandb_runs *rs, struct ckpt_wandb_run *r)
{
    rs->v = ckpt_xreallocarray(rs->v, rs->n + 1, sizeof(*rs->v));
    rs->v[rs->n++] = *r;
}

int ckpt_gql_parse_runs_page(const cJSON *data, struct ckpt_wandb_runs *out,
                             char **cursor, int *more, int *project_found,
                             struct ckpt_err *err)
{
    *cursor = NULL;
    *more = 0;
    const cJSON *project = member(data, "project");
    *project_found = cJSON_IsObject(project);
    if (!*project_found)
        return 0;
    const cJSON *runs = member(project, "runs");
    const cJSON *edges = member(runs, "edges");
    if (!cJSON_IsArray(edges))
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "W&B API: response has no project.runs.edges");
    const char *last = NULL;
    for (const cJSON *e = edges->child; e; e = e->next) {
        struct ckpt_wandb_run r;
        if (ckpt_gql_parse_run(member(e, "node"), &r, err) != 0)
            return -1;
        runs_add(out, &r);
        /* The next page starts after the last edge's cursor, as the
         * official client's Runs.cursor does. */
        last = ckpt_json_str(e, "cursor");
    }
    const cJSON *info = member(runs, "pageInfo");
    *more = cJSON_IsTrue(member(info, "hasNextPage"));
    if (last)
        *cursor = ckpt_xstrdup(last);
    return 0;
}

void ckpt_wandb_run_release(struct ckpt_wandb_run *r)
{
    if (!r)
        return;
    free(r->name);
    free(r->display_name);
    free(r->group);
    free(r->state);
    free(r->created_at);
    cJSON_Delete(r->config);
    memset(r, 0, sizeof(*r));
    r->last_step = -1;
}

void ckpt_wandb_runs_release(struct ckpt_wandb_runs *rs)
{
    if (!rs)
        return;
    for (size_t i = 0; i < rs->n; i++)
        ckpt_wandb_run_release(&rs->v[i]);
    free(rs->v);
    rs->v = NULL;
    rs->n = 0;
}
