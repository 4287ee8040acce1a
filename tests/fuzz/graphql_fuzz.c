/*
 * graphql_fuzz - the W&B GraphQL response parser (src/wandb/graphql_parse.c) on
 * arbitrary bytes: error-message extraction, the data/errors envelope,
 * Runs pages (edges, cursors, pageInfo) and Run nodes with their
 * JSON-string config and summaryMetrics.
 * Properties, whatever a server sends: never crashes, never leaks; and,
 * each checked against the response as cJSON reads it here:
 *   - an error message is one printable line (no control byte) of at most
 *     300 characters and a few separators: it goes into a row as it is;
 *   - a Runs page accepted is one run per edge, in order, each named by
 *     its node's `name`; the next cursor is the last edge's `cursor`;
 *     "more" is exactly `pageInfo.hasNextPage == true`;
 *   - a run's config is the server's (a JSON string or an object) with
 *     each top-level `{"value": V}` wrapper replaced by V and `_wandb` and
 *     `wandb_version` dropped, every other key and value kept as sent;
 *     its last step is `summaryMetrics._step` when that is a number in
 *     [0, 9e15), else -1.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wandb/wandb_int.h"

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k)
                             : NULL;
}

/* The config a node should give, built here from the node alone. */
static cJSON *expected_config(const cJSON *node)
{
    const cJSON *c = get(node, "config");
    cJSON *src = cJSON_IsString(c) ? cJSON_Parse(c->valuestring)
               : cJSON_IsObject(c) ? cJSON_Duplicate(c, 1) : NULL;
    if (!cJSON_IsObject(src)) {
        cJSON_Delete(src);
        return NULL;
    }
    cJSON *out = cJSON_CreateObject();
    int wandb = 0, version = 0;
    for (const cJSON *k = src->child; k; k = k->next) {
        if (!wandb && !strcmp(k->string, "_wandb")) {
            wandb = 1;
            continue;
        }
        if (!version && !strcmp(k->string, "wandb_version")) {
            version = 1;
            continue;
        }
        const cJSON *v = get(k, "value");
        cJSON_AddItemToObject(out, k->string,
                              cJSON_Duplicate(v ? v : k, 1));
    }
    cJSON_Delete(src);
    return out;
}

static int64_t expected_step(const cJSON *node)
{
    const cJSON *sm = get(node, "summaryMetrics");
    cJSON *parsed = cJSON_IsString(sm) ? cJSON_Parse(sm->valuestring)
                                       : NULL;
    const cJSON *st = get(parsed ? parsed : sm, "_step");
    int64_t v = -1;
    if (cJSON_IsNumber(st) && st->valuedouble >= 0 &&
        st->valuedouble < 9e15)
        v = (int64_t)st->valuedouble;
    cJSON_Delete(parsed);
    return v;
}

/* The same tree, in order (cJSON_Compare looks keys up, and a config
 * may repeat a key). */
static int same(const cJSON *a, const cJSON *b)
{
    if ((a->type & 0xFF) != (b->type & 0xFF))
        return 0;
    if (cJSON_IsNumber(a))
        return a->valuedouble == b->valuedouble ||
               (isnan(a->valuedouble) && isnan(b->valuedouble));
    if (cJSON_IsString(a))
        return !strcmp(a->valuestring, b->valuestring);
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
        if ((cJSON_IsObject(a) && strcmp(x->string, y->string)) ||
            !same(x, y))
            return 0;
    return !x && !y;
}

static void check_run(const cJSON *node, const struct ckpt_wandb_run *r)
{
    const cJSON *name = get(node, "name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, r->name))
        __builtin_trap();
    cJSON *want = expected_config(node);
    int ok = want ? r->config && same(want, r->config) : !r->config;
    cJSON_Delete(want);
    if (!ok || r->last_step != expected_step(node))
        __builtin_trap();
}

static void check_message(const char *body, size_t size)
{
    struct ckpt_buf msg = CKPT_BUF_INIT;
    ckpt_gql_error_message(body, size, &msg);
    for (size_t i = 0; i < msg.len; i++)
        if ((unsigned char)msg.ptr[i] < 0x20 || msg.ptr[i] == 0x7f)
            __builtin_trap();
    if (msg.len > 300 + 4 * 2)
        __builtin_trap();
    ckpt_buf_release(&msg);
}

static void check_page(const cJSON *d)
{
    struct ckpt_wandb_runs rs = { NULL, 0 };
    char *cursor = NULL;
    int more, found;
    struct ckpt_err err;
    if (ckpt_gql_parse_runs_page(d, &rs, &cursor, &more, &found, &err) == 0
        && found) {
        const cJSON *runs = get(get(d, "project"), "runs");
        const cJSON *edges = get(runs, "edges");
        const cJSON *e = cJSON_IsArray(edges) ? edges->child : NULL;
        const char *last = NULL;
        size_t i = 0;
        for (; e; e = e->next, i++) {
            if (i >= rs.n)
                __builtin_trap();
            check_run(get(e, "node"), &rs.v[i]);
            const cJSON *c = get(e, "cursor");
            last = cJSON_IsString(c) ? c->valuestring : NULL;
        }
        if (i != rs.n || !last != !cursor || (last && strcmp(last, cursor))
            || more != cJSON_IsTrue(get(get(runs, "pageInfo"),
                                        "hasNextPage")))
            __builtin_trap();
    }
    free(cursor);
    ckpt_wandb_runs_release(&rs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct ckpt_err err;
    check_message(body, size);
    cJSON *doc, *d;
    if (ckpt_gql_parse_response(body, size, &doc, &d, &err) != 0)
        return 0;
    if (d != cJSON_GetObjectItemCaseSensitive(doc, "data"))
        __builtin_trap();
    check_page(d);
    const cJSON *node = get(get(d, "project"), "run");
    struct ckpt_wandb_run run;
    if (ckpt_gql_parse_run(node, &run, &err) == 0) {
        check_run(node, &run);
        ckpt_wandb_run_release(&run);
    }
    cJSON_Delete(doc);
    return 0;
}
