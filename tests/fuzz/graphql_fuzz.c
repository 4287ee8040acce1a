/*
 * graphql_fuzz - the W&B GraphQL response parser (src/wandb/gql.c) on
 * arbitrary bytes: error-message extraction, the data/errors envelope,
 * Runs pages (edges, cursors, pageInfo) and Run nodes with their
 * JSON-string config and summaryMetrics.
 * Property: never crashes, never leaks, whatever a server sends.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>

#include "wandb/wandb_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct ckpt_err err;
    struct ckpt_buf msg = CKPT_BUF_INIT;
    ckpt_gql_error_message(body, size, &msg);
    ckpt_buf_release(&msg);
    cJSON *doc, *d;
    if (ckpt_gql_parse_response(body, size, &doc, &d, &err) != 0)
        return 0;
    struct ckpt_wandb_runs rs = { NULL, 0 };
    char *cursor = NULL;
    int more, found;
    ckpt_gql_parse_runs_page(d, &rs, &cursor, &more, &found, &err);
    free(cursor);
    ckpt_wandb_runs_release(&rs);
    cJSON *proj = cJSON_GetObjectItemCaseSensitive(d, "project");
    struct ckpt_wandb_run run;
    if (ckpt_gql_parse_run(cJSON_GetObjectItemCaseSensitive(proj, "run"),
                           &run, &err) == 0)
        ckpt_wandb_run_release(&run);
    cJSON_Delete(doc);
    return 0;
}
