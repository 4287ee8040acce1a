/*
 * ckpt/wandb.h - find the Weights & Biases run path (entity/project/run_id)
 * of a training run directory.
 *
 * Four parts, used in this order by `ckpt map-wandb`:
 *   1. a run source (struct ckpt_wandb_src): "list a directory of the run,
 *      read a small file by relative path", implemented over storage
 *      directories here and over archives by the archive module;
 *   2. local evidence (struct ckpt_wandb_evidence) gathered from a source:
 *      wandb/run-* directories, their files, the run's config.yaml;
 *   3. a W&B GraphQL client (struct ckpt_wandb_client) and the resolver that
 *      confirms or searches candidates for many runs at once, batching
 *      queries per project;
 *   4. the mapping file that `map-wandb --output` writes and
 *      `upload --wandb-map` reads.
 *
 * All functions return 0 or -1 with err filled, unless stated otherwise.
 * The API key is never copied into an error message.
 */
#ifndef CKPT_WANDB_H
#define CKPT_WANDB_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"
#include "ckpt/storage.h"

struct cJSON;

/* ---- 1. run sources ---------------------------------------------------- */

/* Called once per entry of a listed directory; name is borrowed. Return 0
 * to continue, non-zero to stop (returned by list as-is). */
typedef int (*ckpt_wandb_entry_fn)(void *ud, const char *name, int is_dir);

/*
 * A read-only view of one run, addressed by '/'-separated paths relative to
 * the run root ("" is the root). Evidence gathering only lists a handful of
 * directories and reads a few small files (or the first bytes of a large
 * one), so an archive adapter can serve both from its member index.
 */
struct ckpt_wandb_src {
    void *ctx;
    /* List the entries of directory rel, one level. A missing directory
     * fails with CKPT_ENOTFOUND. */
    int (*list)(void *ctx, const char *rel, ckpt_wandb_entry_fn fn, void *ud,
                struct ckpt_err *err);
    /* Read the first min(size, max) bytes of file rel into a malloced,
     * NUL-terminated buffer (*len excludes the NUL); *truncated is set when
     * the file is longer than max. Missing: CKPT_ENOTFOUND. */
    int (*read)(void *ctx, const char *rel, size_t max, char **data,
                size_t *len, int *truncated, struct ckpt_err *err);
    /* Free ctx; may be NULL. */
    void (*release)(void *ctx);
};

/* A source over directory `dir` of storage st (both borrowed; they must
 * outlive src). Release with ckpt_wandb_src_release. */
void ckpt_wandb_src_storage(struct ckpt_wandb_src *src,
                            struct ckpt_storage *st, const char *dir);
void ckpt_wandb_src_release(struct ckpt_wandb_src *src);
/* A source over a run tree (a directory or an archive snapshot, see
 * ckpt/run.h); tree is borrowed and must outlive src. */
struct ckpt_tree;
void ckpt_wandb_src_tree(struct ckpt_wandb_src *src, struct ckpt_tree *tree);

/* ---- 2. local evidence -------------------------------------------------- */

/* One wandb run directory, e.g. wandb/wandb/run-20240501_100000-ab12cd34. */
struct ckpt_wandb_localrun {
    char *dir;          /* owned; relative to the run root */
    char *id;           /* owned; the W&B run id (path component) */
    char stamp[16];     /* "YYYYMMDD_HHMMSS" (local start time) or "" */
    int offline;        /* an offline-run-* directory */
    /* From run-ID.wandb's RunRecord (what wandb really used, including
     * WANDB_PROJECT-style overrides); each owned, NULL if unknown. */
    char *entity, *project, *display_name, *group;
    char *slurm_job_id; /* owned; files/wandb-metadata.json slurm.job_id */
    int64_t last_step;  /* files/wandb-summary.json _step, or -1 */
};

struct ckpt_wandb_evidence {
    /* Local wandb runs, oldest first (by start stamp, then id). */
    struct ckpt_wandb_localrun *runs;   /* owned array */
    size_t nruns;
    /* The training config: config.yaml without its `wandb` section (or a
     * checkpoint's config.yaml, or a wandb run's files/config.yaml with the
     * `value` wrappers removed); NULL if none was readable. */
    struct cJSON *config;               /* owned */
    char *config_file;                  /* owned; where config came from */
    /* config.yaml's wandb section; each owned, NULL if absent. */
    char *entity, *project, *name, *group;
    /* <wandb dir>/settings [default] entity/project; owned or NULL. */
    char *settings_entity, *settings_project;
    char *save_folder;                  /* owned; config save_folder */
    /* Slurm job id: the save_folder's last component when it is a job id,
     * else wandb-metadata.json's slurm.job_id; owned or NULL. */
    char *slurm_job_id;
    int64_t *steps;                     /* owned; checkpoint steps, sorted */
    size_t nsteps;
    char *problems;  /* owned; unreadable or malformed files, "; "-joined,
                      * or NULL */
};

/* Gather the evidence of the run behind src. Only failures to list the run
 * root fail; unreadable or malformed evidence files are noted in
 * (*out)->problems. Free with ckpt_wandb_evidence_free. */
int ckpt_wandb_evidence_gather(struct ckpt_wandb_evidence **out,
                               const struct ckpt_wandb_src *src,
                               struct ckpt_err *err);
void ckpt_wandb_evidence_free(struct ckpt_wandb_evidence *ev);

/* Parse a wandb run directory name: "run-YYYYMMDD_HHMMSS-ID[-suffix]" or
 * "offline-run-...". Fills id (malloced), stamp and offline. 0 or -1 (not a
 * run directory name; no err). */
int ckpt_wandb_parse_rundir(const char *name, char **id, char stamp[16],
                            int *offline);

/* ---- 3. client and resolver ---------------------------------------------- */

/* Called while a query takes long: every notice_every seconds since its
 * first attempt (retries and pauses included), from the thread that sent
 * it. host is the server's host[:port]; what names the query ("run
 * E/P/ID", "runs of E/P (page 3)", "the default entity"); attempt counts
 * from 1. */
typedef void (*ckpt_wandb_wait_fn)(void *ud, const char *host,
                                   const char *what, double seconds,
                                   int attempt);

struct ckpt_wandb_client_cfg {
    const char *base_url;  /* NULL: $WANDB_BASE_URL, else api.wandb.ai */
    const char *api_key;   /* NULL: $WANDB_API_KEY, else netrc */
    int insecure;          /* do not verify TLS */
    int attempts;          /* per request; <= 0: 8 */
    double max_backoff;    /* seconds between attempts; <= 0: 60 */
    double timeout;        /* stall timeout: no byte either way for this
                            * long, s; <= 0: $WANDB_HTTP_TIMEOUT, else 19 */
    double request_timeout; /* the most one HTTP request may take, s
                             * (connect to last byte); no retry starts
                             * later than 3x this after a query's first
                             * attempt; <= 0: $CKPT_WANDB_TIMEOUT, else
                             * 60 */
    int max_pages;         /* pages of one listing before it is an error;
                            * <= 0: $CKPT_WANDB_MAX_PAGES, else 10000 */
    ckpt_wandb_wait_fn on_wait; /* NULL: no notices */
    void *wait_ud;
    double notice_every;   /* s; <= 0: 10 */
};

struct ckpt_wandb_client;

/* Find the base URL and API key (see ckpt_wandb_find_api_key); no request
 * is sent. A missing key fails with CKPT_EAUTH and a message saying how to
 * provide one. Thread-safe once created: pool workers share it. */
int ckpt_wandb_client_new(struct ckpt_wandb_client **out,
                          const struct ckpt_wandb_client_cfg *cfg,
                          struct ckpt_err *err);
void ckpt_wandb_client_free(struct ckpt_wandb_client *c);
/* HTTP requests sent so far, retries included. */
uint64_t ckpt_wandb_client_requests(const struct ckpt_wandb_client *c);

/* The API key: $WANDB_API_KEY, else the password of machine host[:port] of
 * base_url in $NETRC, ~/.netrc or ~/_netrc (wandb's order). *key is
 * malloced; *from names its source ("WANDB_API_KEY" or the netrc path,
 * malloced). CKPT_EAUTH when there is none. */
int ckpt_wandb_find_api_key(const char *base_url, char **key, char **from,
                            struct ckpt_err *err);

/* One W&B run as the API returns it. */
struct ckpt_wandb_run {
    char *name;          /* owned; the run id (last path component) */
    char *display_name;  /* owned or NULL */
    char *group;         /* owned or NULL */
    char *state;         /* owned or NULL */
    char *created_at;    /* owned or NULL; "2024-05-01T10:00:00" */
    struct cJSON *config; /* owned or NULL; top-level `value` wrappers
                           * removed, `_wandb` and `wandb_version` dropped */
    int64_t last_step;   /* summaryMetrics._step, or -1 */
};

struct ckpt_wandb_runs {
    struct ckpt_wandb_run *v;  /* owned array */
    size_t n;
};

void ckpt_wandb_run_release(struct ckpt_wandb_run *r);
void ckpt_wandb_runs_release(struct ckpt_wandb_runs *rs);

/* api.run("entity/project/name"): *found is 0 when the run or the project
 * does not exist. */
int ckpt_wandb_get_run(struct ckpt_wandb_client *c, const char *entity,
                       const char *project, const char *name,
                       struct ckpt_wandb_run *out, int *found,
                       struct ckpt_err *err);

/* api.runs("entity/project", filters): every page (50 runs each, oldest
 * first) appended to out. filters is MongoDB-style JSON text, sent as a
 * JSON string. A missing project fails with CKPT_ENOTFOUND; a cursor the
 * listing already had, or more than max_pages pages, with CKPT_EFORMAT. */
int ckpt_wandb_list_runs(struct ckpt_wandb_client *c, const char *entity,
                         const char *project, const char *filters,
                         struct ckpt_wandb_runs *out, struct ckpt_err *err);

/* The API key's default entity (viewer.entity); *entity malloced. */
int ckpt_wandb_default_entity(struct ckpt_wandb_client *c, char **entity,
                              struct ckpt_err *err);

enum ckpt_wandb_status {
    CKPT_WANDB_FOUND = 0,
    CKPT_WANDB_AMBIGUOUS,  /* several W&B runs fit; never guessed */
    CKPT_WANDB_UNKNOWN,    /* no W&B run fits */
    CKPT_WANDB_ERROR       /* the API failed for this run */
};

struct ckpt_wandb_step {
    int64_t step;
    char *path;            /* owned; entity/project/id that wrote it */
};

struct ckpt_wandb_result {
    int status;            /* enum ckpt_wandb_status */
    char *path;            /* owned; entity/project/id when FOUND */
    char *evidence;        /* owned; how it was found, or why not */
    char *source;          /* owned; "local-id", "slurm", "display-name",
                            * "offline" or "" */
    char **candidates;     /* owned; paths considered but not chosen, or
                            * every fitting path when AMBIGUOUS */
    size_t ncandidates;
    char **runs;           /* owned; when FOUND: every W&B run of this run
                            * directory (requeues), oldest first */
    size_t nruns;
    struct ckpt_wandb_step *steps; /* owned; checkpoint step -> run, when
                                    * several W&B runs wrote checkpoints and
                                    * their last steps are known */
    size_t nsteps;
};

void ckpt_wandb_result_release(struct ckpt_wandb_result *r);

struct ckpt_wandb_resolve_opts {
    const char *entity;    /* override; NULL: from the evidence */
    const char *project;   /* override; NULL: from the evidence */
    int offline;           /* local evidence only; client may be NULL */
    int jobs;              /* concurrent requests; <= 0: 4 */
    const char *const *ignore_keys; /* extra config keys not compared */
    size_t nignore;
};

/*
 * Resolve n runs at once. res[i] (zeroed by the caller) receives the
 * result for ev[i]. Queries are shared: local ids of one project are
 * confirmed by `name $in` queries of up to 50 ids, Slurm ids and display
 * names are searched the same way, each distinct query is sent once, and
 * independent queries run in parallel. Returns -1 with err set only when
 * the API rejected the credentials (every unresolved run then carries the
 * error too); other failures are per run.
 */
int ckpt_wandb_resolve(struct ckpt_wandb_client *c,
                       struct ckpt_wandb_evidence *const *ev, size_t n,
                       const struct ckpt_wandb_resolve_opts *opts,
                       struct ckpt_wandb_result *res, struct ckpt_err *err);

/* Compare a local training config with a W&B run's config: 1 when every
 * key present on both sides is equal (numbers numerically, YAML and JSON
 * scalar spellings leniently) and at least one top-level key is shared;
 * `wandb`, `_wandb`, `wandb_version`, `load_path` and ignore[] are
 * skipped. On 0, diff (if non-NULL) names the first differing key. */
int ckpt_wandb_config_match(const struct cJSON *local,
                            const struct cJSON *remote,
                            const char *const *ignore, size_t nignore,
                            char *diff, size_t difflen);

/* ---- 4. mapping file --------------------------------------------------- */

/*
 * One line per run, either TSV
 *     RUN_ID<TAB>ENTITY/PROJECT/RUN_ID<TAB>EVIDENCE
 * ("-" as path for an unmapped run) or a JSON object
 *     {"run":..., "path":...|null, "status":..., "evidence":...,
 *      "steps":{"1000":"e/p/id", ...}, ...}
 * Both kinds may be mixed; blank lines and lines starting with '#' are
 * skipped; a later line for the same run replaces an earlier one.
 */
struct ckpt_wandb_map_entry {
    char *line;            /* owned; the line as read or written, without
                            * "\n"; NULL: formatted from the fields */
    char *run;             /* owned; RUN_ID */
    char *path;            /* owned; NULL when unmapped */
    char *evidence;        /* owned; "" if none */
    struct ckpt_wandb_step *steps; /* owned; sorted by step */
    size_t nsteps;
};

struct ckpt_wandb_map {
    struct ckpt_wandb_map_entry *v; /* owned; in file order */
    size_t n;
};

/* Parse mapping text; name is for messages ("map.tsv:3: ..."). */
int ckpt_wandb_map_parse(struct ckpt_wandb_map **out, const char *data,
                         size_t len, const char *name, struct ckpt_err *err);
/* Read and parse the mapping file at location (any storage location).
 * A missing file fails with CKPT_ENOTFOUND. */
int ckpt_wandb_map_load(struct ckpt_wandb_map **out, const char *location,
                        const struct ckpt_storage_cfg *cfg,
                        struct ckpt_err *err);
void ckpt_wandb_map_free(struct ckpt_wandb_map *m);
/* The entry for run, or NULL. Borrowed from m. */
const struct ckpt_wandb_map_entry *
ckpt_wandb_map_find(const struct ckpt_wandb_map *m, const char *run);
/* The W&B path for checkpoint `step` of run (the per-step path when the
 * file has one, else the run's path); step < 0 asks for the run's path.
 * NULL when unmapped. Borrowed from m. */
const char *ckpt_wandb_map_path(const struct ckpt_wandb_map *m,
                                const char *run, int64_t step);
/* Add or replace (by run) a copy of e, line included. */
void ckpt_wandb_map_put(struct ckpt_wandb_map *m,
                        const struct ckpt_wandb_map_entry *e);
/* An empty map. */
struct ckpt_wandb_map *ckpt_wandb_map_new(void);

/* The JSON line object of a result (caller frees with cJSON_Delete). */
struct cJSON *ckpt_wandb_result_json(const char *run,
                                     const struct ckpt_wandb_result *r);
/* One mapping-file line (with '\n') for e, malloced: e->line as it is
 * (lines read from a file are kept byte for byte, whatever their kind),
 * else formatted as TSV or JSON. */
char *ckpt_wandb_map_format(const struct ckpt_wandb_map_entry *e, int json);
/* e as a JSON line object (its own line when that is JSON); caller
 * deletes. */
struct cJSON *ckpt_wandb_map_entry_json(const struct ckpt_wandb_map_entry *e);
/* The whole file: every entry's line, in order; malloced. */
char *ckpt_wandb_map_text(const struct ckpt_wandb_map *m, int json);
/* The map entry of a result (TSV line unless json), for ckpt_wandb_map_put
 * and printing; release with ckpt_wandb_map_entry_release. */
void ckpt_wandb_map_entry_of(struct ckpt_wandb_map_entry *e, const char *run,
                             const struct ckpt_wandb_result *r, int json);
void ckpt_wandb_map_entry_release(struct ckpt_wandb_map_entry *e);
/* 1 when path looks like entity/project/run_id. */
int ckpt_wandb_path_valid(const char *path);

#endif
