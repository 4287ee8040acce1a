/*
 * cmd_map_wandb.c - `ckpt map-wandb`: find each run's W&B run path.
 *
 * Phases: parse options; read the existing mapping file (--output), whose
 * mapped runs are not looked up again; gather each remaining run's local
 * evidence in parallel; resolve them all at once (the resolver batches
 * the API queries per project); print one row per RUN in argument order;
 * write the mapping file atomically.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ckpt/pool.h"
#include "ckpt/util.h"
#include "ckpt/run.h"
#include "ckpt/wandb.h"
#include "runs.h"

static const char *const map_wandb_usage[] = {
    "ckpt map-wandb [options] RUN...",
    "",
    "Find the W&B run path (ENTITY/PROJECT/RUN_ID) of each run directory.",
    "Evidence, strongest first: wandb/run-*-ID directories (confirmed with",
    "the W&B API), then W&B runs whose config.save_folder ends in the",
    "run's Slurm job id, then runs with its wandb.name and wandb.group;",
    "searched runs must match the run's config.yaml. Prints",
    "RUN_ID<TAB>ENTITY/PROJECT/RUN_ID<TAB>EVIDENCE per run; an ambiguous or",
    "unknown run gets '-' and the exit status is 1.",
    "",
    "API key: WANDB_API_KEY, else the ~/.netrc entry `wandb login` writes;",
    "WANDB_BASE_URL selects another server. Docs: docs/commands/map-wandb.md",
    "-j default: 16 runs read at once, 4 W&B API requests at once (-j N",
    "sets both; W&B rate-limits its API).",
    "examples:",
    "A RUN that is no run but a directory of runs is mapped one level",
    "down, as ls and process do; a non-run among several RUNs (a glob's",
    "logs/) is skipped with a message, not a failure.",
    "  ckpt map-wandb /scratch/runs         each run's ENTITY/PROJECT/RUN_ID",
    "  ckpt map-wandb --offline -o map.tsv /scratch/runs/*",
    "                                       from wandb/ files only, to a file",
    NULL
};

struct mw_opts {
    int offline;
    const char *output;
    const char *entity, *project;
    struct opt_list ignore;
};

/* One RUN argument. */
struct item {
    const char *arg;                   /* borrowed from argv */
    char *run_id;                      /* owned */
    int skip;                          /* already mapped in --output */
    struct ckpt_err err;               /* set when it cannot be read */
    int failed;
    struct ckpt_wandb_evidence *ev;    /* owned */
    struct ckpt_wandb_result res;
    struct ckpt_storage_cfg scfg;
};

static const char *const archive_ext[] = { ".tar.gz", ".tgz", ".tar.bz2",
                                           ".tar.zst", ".tar.xz", ".tar",
                                           ".zip", NULL };

static const char *archive_suffix(const char *name)
{
    for (const char *const *e = archive_ext; *e; e++)
        if (ckpt_str_endswith(name, *e) && strlen(name) > strlen(*e))
            return *e;
    return NULL;
}

/* RUN_ID: the directory's or archive's base name (archive suffix off). */
static char *run_id_of(const char *arg)
{
    struct ckpt_loc loc;
    struct ckpt_err err;
    char *base = ckpt_loc_parse(&loc, arg, &err) == 0
                     ? ckpt_path_basename(loc.key) : ckpt_path_basename(arg);
    if (loc.key)
        ckpt_loc_release(&loc);
    const char *sfx = archive_suffix(base);
    if (sfx)
        base[strlen(base) - strlen(sfx)] = '\0';
    return base;
}

/* Pool task: read one run's evidence from its tree (a directory, or an
 * archive read in place). */
static void gather_one(void *arg)
{
    struct item *it = arg;
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    struct ckpt_stat sb;
    struct ckpt_tree *tree = NULL;
    int rc = ckpt_loc_parse(&loc, it->arg, &it->err);
    if (rc == 0)
        rc = ckpt_storage_open(&st, &loc, &it->scfg, &it->err);
    if (rc == 0)
        rc = ckpt_storage_stat(st, loc.key, &sb, &it->err);
    if (rc == 0 && sb.type != CKPT_ENTRY_DIR && !archive_suffix(it->arg))
        rc = ckpt_err_set(&it->err, CKPT_EUSAGE, "%s: not a run directory "
                          "or archive", it->arg);
    if (rc == 0)
        rc = ckpt_tree_load(&tree, st, loc.key, NULL, &it->err);
    if (rc == 0) {
        struct ckpt_wandb_src src;
        ckpt_wandb_src_tree(&src, tree);
        rc = ckpt_wandb_evidence_gather(&it->ev, &src, &it->err);
        ckpt_wandb_src_release(&src);
    }
    it->failed = rc != 0;
    ckpt_tree_free(tree);
    ckpt_storage_close(st);
    if (loc.key)
        ckpt_loc_release(&loc);
}

static void gather_all(struct item *items, int n, int jobs)
{
    struct ckpt_pool *pool = n > 1 ? ckpt_pool_new(jobs, (size_t)jobs * 2)
                                   : NULL;
    for (int i = 0; i < n; i++) {
        if (items[i].skip)
            continue;
        if (!pool || ckpt_pool_submit(pool, gather_one, &items[i]) != 0)
            gather_one(&items[i]);
    }
    ckpt_pool_free(pool);
}

/* A W&B query taking long: say what we wait for. */
static void on_wait(void *ud, const char *host, const char *what,
                    double seconds, int attempt)
{
    char again[32] = "";
    if (attempt > 1)
        snprintf(again, sizeof(again), " (attempt %d)", attempt);
    cli_infof("waiting for %s: %s, %.0f s%s", host, what, seconds, again);
}

/* Resolve every gathered run in one batch. Returns 0, or -1 after
 * printing a fatal API error (no key, key rejected). */
static int resolve_all(struct item *items, int n, const struct mw_opts *o,
                       const struct ckpt_opts *g)
{
    struct ckpt_wandb_evidence **ev = ckpt_xcalloc((size_t)n, sizeof(*ev));
    struct ckpt_wandb_result *res = ckpt_xcalloc((size_t)n, sizeof(*res));
    size_t m = 0;
    for (int i = 0; i < n; i++)
        if (!items[i].skip && !items[i].failed)
            ev[m++] = items[i].ev;
    struct ckpt_wandb_client *c = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_wandb_client_cfg ccfg = {
        .insecure = g->insecure, .attempts = g->retries,
        .request_timeout = g->wandb_timeout, .on_wait = on_wait,
    };
    int rc = 0, resolved = 0;
    if (m && !o->offline && ckpt_wandb_client_new(&c, &ccfg, &err) != 0)
        rc = -1;
    struct ckpt_wandb_resolve_opts ro = {
        o->entity, o->project, o->offline, g->jobs > 0 ? g->jobs : 4,
        o->ignore.items, (size_t)o->ignore.n,
    };
    if (m && rc == 0) {
        resolved = 1;
        rc = ckpt_wandb_resolve(c, ev, m, &ro, res, &err);
    }
    if (c)
        cli_debugf("%llu W&B API requests",
                   (unsigned long long)ckpt_wandb_client_requests(c));
    ckpt_wandb_client_free(c);
    if (rc != 0)
        cli_errorf("%s", err.msg);
    for (int i = 0, k = 0; i < n; i++) {
        if (items[i].skip || items[i].failed)
            continue;
        if (resolved) {
            items[i].res = res[k++];
            continue;
        }
        /* No client (no key): every run fails with the same reason. */
        items[i].err = err;
        items[i].failed = 1;
        ckpt_wandb_result_release(&res[k++]);
    }
    free(ev);
    free(res);
    return rc;
}

/* A mapping file's record as a row of the output contract: "run" is the
 * RUN as given (as in every command), "id" its RUN_ID, "reason" the
 * evidence. */
static void out_row(cJSON *rec, const char *arg)
{
    cJSON *o = cli_json_row("wandb");
    cJSON_AddStringToObject(o, "run", arg);
    /* The record's names that mean another thing elsewhere in the
     * contract ("runs" a count, "steps" a count) are renamed. */
    static const char *const renamed_keys[][2] = {
        { "run", "id" }, { "evidence", "reason" }, { "runs", "wandb_runs" },
        { "steps", "step_paths" }, { "location", NULL },
    };
    cJSON *it = rec->child;
    while (it) {
        cJSON *next = it->next;
        const char *k = it->string;
        cJSON_DetachItemViaPointer(rec, it);
        size_t nkeys = sizeof(renamed_keys) / sizeof(renamed_keys[0]);
        for (size_t i = 0; i < nkeys; i++)
            if (!strcmp(it->string, renamed_keys[i][0]))
                k = renamed_keys[i][1];
        if (k)
            cJSON_AddItemToObject(o, k, it);
        else
            cJSON_Delete(it);
        it = next;
    }
    cJSON_Delete(rec);
    cli_out_json(o);
}

/* An entry kept from the existing mapping file, printed as it was. */
static void emit_kept(const struct item *it, const struct ckpt_wandb_map *old,
                      int json)
{
    const struct ckpt_wandb_map_entry *o = ckpt_wandb_map_find(old,
                                                               it->run_id);
    if (!json) {
        const char *f[3] = { o->run, o->path, o->evidence };
        cli_out_tsv(3, f);
        return;
    }
    out_row(ckpt_wandb_map_entry_json(o), it->arg);
}

/* A run that could not be read or resolved: an error result. */
static void fail_result(struct item *it)
{
    if (it->failed) {
        ckpt_wandb_result_release(&it->res);
        it->res.status = CKPT_WANDB_ERROR;
        it->res.evidence = ckpt_xasprintf("error: %s", it->err.msg);
    }
}

/* Print one row and record it in the map. 1 if the run is not mapped. */
static int emit(struct item *it, const struct ckpt_wandb_map *old,
                struct ckpt_wandb_map *out, int json)
{
    if (it->skip) {
        emit_kept(it, old, json);
        return 0;
    }
    fail_result(it);
    struct ckpt_wandb_map_entry e;
    ckpt_wandb_map_entry_of(&e, it->run_id, &it->res, json);
    if (json) {
        out_row(ckpt_wandb_result_json(it->run_id, &it->res), it->arg);
    } else {
        const char *f[3] = { it->run_id, it->res.path, it->res.evidence };
        cli_out_tsv(3, f);
    }
    ckpt_wandb_map_put(out, &e);
    ckpt_wandb_map_entry_release(&e);
    return it->res.status != CKPT_WANDB_FOUND;
}

/* The existing mapping file, or an empty map when there is none. NULL
 * after printing an error: an unreadable map must not be overwritten. */
static struct ckpt_wandb_map *load_old(const char *output,
                                       const struct ckpt_opts *g)
{
    struct ckpt_wandb_map *m = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_storage_cfg scfg = cli_storage_cfg(g);
    if (!output)
        return ckpt_wandb_map_new();
    if (ckpt_wandb_map_load(&m, output, &scfg, &err) == 0)
        return m;
    if (err.code == CKPT_ENOTFOUND)
        return ckpt_wandb_map_new();
    cli_errorf("%s", err.msg);
    return NULL;
}

static int write_map(const char *output, const struct ckpt_wandb_map *m,
                     const struct ckpt_opts *g)
{
    if (g->dry_run) {
        cli_infof("would write %s (%zu runs)", output, m->n);
        return 0;
    }
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_storage_cfg scfg = cli_storage_cfg(g);
    char *text = ckpt_wandb_map_text(m, g->json);
    int rc = ckpt_loc_parse(&loc, output, &err);
    if (rc == 0)
        rc = ckpt_storage_open(&st, &loc, &scfg, &err);
    /* put writes a temporary object and renames it: readers never see a
     * half-written map. */
    if (rc == 0)
        rc = ckpt_storage_put(st, loc.key, text, strlen(text), &err);
    if (rc != 0)
        cli_errorf("write %s: %s", output, err.msg);
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    free(text);
    return rc;
}

static struct item *new_items(char **argv, int n,
                              const struct ckpt_wandb_map *old,
                              const struct mw_opts *o,
                              const struct ckpt_opts *g)
{
    struct item *items = ckpt_xcalloc((size_t)n, sizeof(*items));
    for (int i = 0; i < n; i++) {
        items[i].arg = argv[i];
        items[i].run_id = run_id_of(argv[i]);
        items[i].scfg = cli_storage_cfg(g);
        const struct ckpt_wandb_map_entry *e =
            ckpt_wandb_map_find(old, items[i].run_id);
        /* Mapped runs are not looked up again; unmapped ones are. */
        items[i].skip = e && e->path;
        if (items[i].skip)
            cli_debugf("%s: already mapped in %s", argv[i], o->output);
    }
    return items;
}

static void items_free(struct item *items, int n)
{
    for (int i = 0; i < n; i++) {
        free(items[i].run_id);
        ckpt_wandb_evidence_free(items[i].ev);
        ckpt_wandb_result_release(&items[i].res);
    }
    free(items);
}

char *cli_wandb_map_text(char **runs, int n, int offline,
                         const struct ckpt_opts *g)
{
    struct mw_opts o = { 0 };
    struct ckpt_wandb_map *m = ckpt_wandb_map_new();
    o.offline = offline;
    struct item *items = new_items(runs, n, m, &o, g);
    char *text = NULL;
    gather_all(items, n, g->jobs > 0 ? g->jobs : 16);
    if (resolve_all(items, n, &o, g) == 0) {
        for (int i = 0; i < n; i++) {
            struct ckpt_wandb_map_entry e;
            fail_result(&items[i]);
            ckpt_wandb_map_entry_of(&e, items[i].run_id, &items[i].res, 0);
            cli_debugf("%s: %s (%s)", items[i].arg, e.path ? e.path : "-",
                       e.evidence);
            ckpt_wandb_map_put(m, &e);
            ckpt_wandb_map_entry_release(&e);
        }
        text = ckpt_wandb_map_text(m, 0);
    }
    items_free(items, n);
    ckpt_wandb_map_free(m);
    return text;
}

/* What arg is: a run (directory or archive), a directory of runs, or
 * neither. */
enum what { W_RUN, W_DIR, W_NONE, W_ERROR };

/* What map-wandb reads a run by, at its top: its config (run name, save
 * folder, display name) or a wandb run directory (wandb/, .wandb/). A
 * directory with one is a run to map, even without a checkpoint. */
static int has_evidence(const struct ckpt_tree *tree)
{
    const struct ckpt_tree_file *f = ckpt_tree_find(tree, "config.yaml");
    return (f && f->type == CKPT_ENTRY_FILE) ||
           ckpt_tree_has_dir(tree, "wandb") ||
           ckpt_tree_has_dir(tree, ".wandb");
}

static enum what what_is(struct storages *sts, const char *arg,
                         const struct ckpt_opts *g, struct ckpt_loc *loc,
                         struct ckpt_storage **st)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    struct ckpt_tree *tree = NULL;
    struct ckpt_run run;
    if (ckpt_loc_parse(loc, arg, &err) != 0)
        return W_ERROR;
    if (cli_storages_get(sts, loc, g, st, &err) != 0)
        return W_ERROR;
    if (archive_suffix(arg))
        return W_RUN;     /* opened by gather, whatever its size */
    if (ckpt_run_load(*st, loc->key, 0, &sb, &status, &tree, &run,
                      &err) != 0)
        return W_ERROR;   /* gather says why */
    enum what w = status != CKPT_LOAD_OK ? W_NONE
                : ckpt_run_looks_like_run(&run) || has_evidence(tree) ? W_RUN
                : run.holds_run ? W_DIR : W_NONE;
    if (status == CKPT_LOAD_OK) {
        ckpt_tree_free(tree);
        ckpt_run_release(&run);
    }
    return w;
}

/* The RUNs to map: each argument that is a run; the runs one level below
 * one that is a directory of runs (as ls and process look); a non-run
 * skipped with a message when there are several arguments (a glob's
 * logs/ must not fail `map-wandb runs/STAR && process`). A single
 * argument that is neither stays, and fails as before. Strings owned. */
static char **expand(char **argv, int n, const struct ckpt_opts *g,
                     int *out_n)
{
    struct storages sts = { 0 };
    char **out = NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        struct ckpt_loc loc = { 0 };
        struct ckpt_storage *st = NULL;
        enum what w = what_is(&sts, argv[i], g, &loc, &st);
        char **kids = NULL;
        size_t nk = 0;
        struct ckpt_err err = CKPT_ERR_INIT;
        if (w == W_DIR && ckpt_run_children(st, loc.key, NULL, NULL, &kids,
                                            &nk, NULL, &err) != 0)
            w = W_ERROR;
        for (size_t j = 0; j < nk; j++) {
            char *name = ckpt_path_basename(kids[j]);
            char *sub = ckpt_path_join(argv[i], name);
            struct ckpt_loc kl = { 0 };
            struct ckpt_storage *ks = NULL;
            if (what_is(&sts, sub, g, &kl, &ks) == W_RUN) {
                out = ckpt_xreallocarray(out, (size_t)k + 1, sizeof(*out));
                out[k++] = sub;
                sub = NULL;
            }
            if (kl.key)
                ckpt_loc_release(&kl);
            free(sub);
            free(name);
            free(kids[j]);
        }
        free(kids);
        if (w == W_NONE && n > 1) {
            cli_infof("%s: not a run: skipped", argv[i]);
        } else if (w != W_DIR) {
            out = ckpt_xreallocarray(out, (size_t)k + 1, sizeof(*out));
            out[k++] = ckpt_xstrdup(argv[i]);
        }
        if (loc.key)
            ckpt_loc_release(&loc);
    }
    cli_storages_release(&sts);
    *out_n = k;
    return out;
}

int cmd_map_wandb(int argc, char **argv)
{
    struct ckpt_opts g = { .takes = CLI_TAKES_DRY_RUN | CLI_TAKES_JOBS };
    struct mw_opts o = { 0 };
    const struct option opts[] = {
        OPT_BOOL_(0, "offline", &o.offline,
                  "local evidence only; no W&B API requests"),
        OPT_STR_('o', "output", &o.output, "FILE",
                 "write the mapping file (runs mapped there are skipped)"),
        OPT_STR_(0, "entity", &o.entity, "ENTITY",
                 "W&B entity, overriding the runs' own"),
        OPT_STR_(0, "project", &o.project, "PROJECT",
                 "W&B project, overriding the runs' own"),
        OPT_LIST_(0, "ignore-key", &o.ignore, "KEY",
                  "config key not compared (repeatable)"),
        OPT_INT_(0, "wandb-timeout", &g.wandb_timeout, "S",
                 "seconds one W&B request may take (default 60)"),
        OPT_END_(),
    };
    int n = cli_parse_options(argc, argv, opts, map_wandb_usage, &g);
    if (n == -2)
        return EXIT_OK;
    if (n < 0)
        return EXIT_USAGE;
    cli_init_output(&g);
    if (n == 0) {
        fprintf(stderr, "ckpt map-wandb: error: no RUN given\nusage: %s\n",
                map_wandb_usage[0]);
        cli_opt_list_release(&o.ignore);
        return EXIT_USAGE;
    }
    struct ckpt_wandb_map *old = load_old(o.output, &g);
    if (!old) {
        cli_opt_list_release(&o.ignore);
        return EXIT_FAILED;
    }
    int given = n;
    char **runs = expand(argv, given, &g, &n);
    struct item *items = new_items(runs, n, old, &o, &g);
    gather_all(items, n, g.jobs > 0 ? g.jobs : 16);
    resolve_all(items, n, &o, &g);
    struct ckpt_wandb_map *out = old;
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed |= emit(&items[i], old, out, g.json);
    if (o.output && write_map(o.output, out, &g) != 0)
        failed = 1;
    items_free(items, n);
    for (int i = 0; i < n; i++)
        free(runs[i]);
    free(runs);
    ckpt_wandb_map_free(old);
    cli_opt_list_release(&o.ignore);
    return failed ? EXIT_FAILED : EXIT_OK;
}
