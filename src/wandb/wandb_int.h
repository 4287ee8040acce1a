/*
 * wandb_int.h - internals of src/wandb shared between its files and the
 * unit and fuzz tests. Private to src/wandb: do not expose.
 */
#ifndef CKPT_WANDB_INT_H
#define CKPT_WANDB_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/buf.h"
#include "ckpt/err.h"
#include "ckpt/wandb.h"
#include "ckpt/yaml.h"

struct cJSON;

/* ---- graphql_parse.c: GraphQL response parsing (pure; the fuzz
 * target's entry) ---- */

/*
 * Turn a 2xx response body into the GraphQL `data` object. Fails with
 * CKPT_EFORMAT on malformed JSON or a missing `data`, and CKPT_EHTTP when
 * the body has `errors` (servers send them with status 200 too). *doc is
 * the parsed document (caller deletes); *data is borrowed from it.
 */
int ckpt_gql_parse_response(const char *body, size_t len,
                            struct cJSON **doc, struct cJSON **data,
                            struct ckpt_err *err);
/* The messages of a JSON error body ({"errors":[{"message":..}]},
 * {"errors":["m"]}, {"error":"m"}) into b, on one line, at most ~300
 * characters, credentials redacted (ckpt_redact_add); nothing for any
 * other body, which is never repeated. */
void ckpt_gql_error_message(const char *body, size_t len,
                            struct ckpt_buf *b);
/* One run node (Run fields) into out. 0, or -1 (EFORMAT: no name). */
int ckpt_gql_parse_run(const struct cJSON *node, struct ckpt_wandb_run *out,
                       struct ckpt_err *err);
/* A Runs page: data.project.runs. Appends runs to out, sets *cursor
 * (malloced: the last edge's cursor, NULL if no edges) and *more
 * (pageInfo.hasNextPage). *project_found is 0 for project: null. */
int ckpt_gql_parse_runs_page(const struct cJSON *data,
                             struct ckpt_wandb_runs *out, char **cursor,
                             int *more, int *project_found,
                             struct ckpt_err *err);
/* Decode a W&B config JSON string, unwrap top-level {"value": V} and drop
 * `_wandb`/`wandb_version`. NULL on malformed input. */
struct cJSON *ckpt_gql_config(const char *json);
/* Unwrap in place (shared with wandb's files/config.yaml). */
void ckpt_gql_unwrap_config(struct cJSON *cfg);

/* ---- wandbfile.c: the RunRecord of a run-ID.wandb transaction log ---- */

struct ckpt_wandb_runrecord {
    char *run_id, *entity, *project, *display_name, *group; /* owned/NULL */
};

/* Find the first RunRecord in the first len bytes of a .wandb file
 * (LevelDB log framing, protobuf Record.run = 17). 0 when found, -1 with
 * CKPT_EFORMAT (not a .wandb file) or CKPT_ENOTFOUND (no run record in
 * the bytes given). */
int ckpt_wandbfile_runrecord(const unsigned char *data, size_t len,
                             struct ckpt_wandb_runrecord *out,
                             struct ckpt_err *err);
void ckpt_wandb_runrecord_release(struct ckpt_wandb_runrecord *r);

/* ---- auth.c ---- */

/* Password for machine in netrc text (the `default` entry if no machine
 * matches), malloced, or NULL. */
char *ckpt_netrc_password(const char *text, const char *machine);
/* host[:port] of a URL, malloced ("https://api.wandb.ai/x" ->
 * "api.wandb.ai"). */
char *ckpt_url_netloc(const char *url);
/* The base URL: cfg value, else $WANDB_BASE_URL, else the default; trailing
 * '/' removed. Malloced. */
char *ckpt_wandb_base_url(const char *cfg_value);

/* ---- small shared helpers (match.c) ---- */

/* A string member of obj, or NULL (borrowed). */
const char *ckpt_json_str(const struct cJSON *obj, const char *key);
/* The Slurm job id at the end of a save_folder ("/r/1234567/" ->
 * "1234567"), malloced, or NULL when the last component is not one. */
char *ckpt_slurm_id_of(const char *save_folder);

#endif
