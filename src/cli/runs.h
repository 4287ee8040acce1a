/* runs.h - shared by commands that take RUN arguments (cli only). */
#ifndef CKPT_CLI_RUNS_H
#define CKPT_CLI_RUNS_H

#include <cjson/cJSON.h>

#include "cli.h"
#include "ckpt/run.h"

/* One open storage per (scheme, bucket); opened on first use from the
 * main thread, shared by workers. */
struct storages {
    struct ckpt_loc *locs;            /* owned */
    struct ckpt_storage **handles;    /* owned */
    size_t n;
};

int cli_storages_get(struct storages *s, const struct ckpt_loc *loc,
                 const struct ckpt_opts *g, struct ckpt_storage **out,
                 struct ckpt_err *err);
void cli_storages_release(struct storages *s);

cJSON *cli_json_checkpoints(const struct ckpt_run *run, int sizes);

/* Map runs (locations) to W&B paths as `ckpt map-wandb` does, printing
 * only errors that stop everything (no API key, key rejected): the
 * mapping text (TSV, malloced; unmapped runs as "-"), or NULL after such
 * an error. offline: local evidence only. */
char *cli_wandb_map_text(char **runs, int n, int offline,
                     const struct ckpt_opts *g);

/* After the rows of clean or process: when every one of rows runs was
 * skipped as live, one line on stderr naming --min-age (min_age: as
 * given, NULL for the default), the first thing a new user meets. */
void cli_hint_all_live(size_t rows, size_t live, const char *min_age);

/* -j if given, else cap; never more than items, at least 1. */
int cli_default_jobs(const struct ckpt_opts *g, int items, int cap);

#endif
