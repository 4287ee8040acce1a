/*
 * cmd_clean.c - `ckpt clean`: delete runs that never produced a complete
 * checkpoint with step > 0, keep the others (optionally pruning old
 * checkpoints), skip what does not look like a run.
 *
 * Phases: parse options; load and judge every run in parallel (nothing is
 * changed yet); then, run by run, verify the verdict again just before
 * acting, and act. A failure on one run is reported and the rest go on.
 * The rules themselves are in src/run/clean.c (shared with `process`).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/archive.h"
#include "ckpt/buf.h"
#include "ckpt/clean.h"
#include "ckpt/interrupt.h"
#include "ckpt/pool.h"
#include "ckpt/util.h"
#include "runs.h"

static const char *const clean_usage[] = {
    "ckpt clean [options] RUN...",
    "",
    "Delete each RUN (a directory or an archive, local or remote) that has",
    "no complete checkpoint with step > 0; keep the others; skip anything",
    "that does not look like a run, and runs written to within --min-age",
    "(default 1d: they may be alive). Damaged archives are never deleted.",
    "Prints ACTION<TAB>RUN<TAB>REASON per RUN, ACTION one of delete,",
    "would-delete, keep, skip, error. A local run is first renamed to",
    "a hidden .RUN.ckpt-del-HOST-PID; a rerun finishes such a delete left",
    "by a dead process of this host.",
    "-j default 8: runs judged and deleted at once (listing-bound).",
    "examples:",
    "  ckpt clean -n /scratch/runs          what would go (runs proven bad)",
    "  ckpt clean /scratch/runs             delete them",
    "  ckpt clean --keep-last 2 RUN         also prune all but 2 checkpoints",
    NULL
};

/* One RUN: the judged item plus what the CLI needs around it. */
struct item {
    struct ckpt_clean_item c;
    struct ckpt_loc loc;
    const struct ckpt_opts *g;
    char *arg;          /* owned: a run found in a directory of runs, as
                           shown (DIR/NAME), or NULL: argv's */
    int container;      /* a directory of runs: judged run by run */
    int kid0, nkids;    /* its runs: items[kid0 .. kid0 + nkids) */
};

static void report(struct item *x)
{
    struct ckpt_clean_item *it = &x->c;
    if (!x->g->json) {
        const char *f[] = { it->action, it->arg, it->reason.ptr };
        cli_out_tsv(3, f);
        return;
    }
    cJSON *o = cli_json_row("run");
    cJSON_AddStringToObject(o, "action", it->action);
    cJSON_AddStringToObject(o, "run", it->arg);
    cJSON_AddStringToObject(o, "reason", it->reason.ptr);
    if (it->scanned)
        cJSON_AddNumberToObject(o, "bytes", (double)(it->is_archive
                                                     ? it->sb.size
                                                     : it->run.size));
    cJSON_AddNumberToObject(o, "freed", (double)it->bytes);
    cJSON_AddItemToObject(o, "checkpoints", it->scanned
                          ? cli_json_checkpoints(&it->run, 0)
                          : cJSON_CreateArray());
    /* What a dry run would prune is said as such, not as done. */
    if (it->pruned_json) {
        cJSON_AddItemToObject(o, x->g->dry_run ? "would_prune" : "pruned",
                              it->pruned_json);
        it->pruned_json = NULL;
    }
    cli_out_json(o);
}

/* Interrupted (SIGINT/SIGTERM/SIGHUP): a RUN not yet judged or acted on
 * is left as it is, and its row says so. A delete already under way is
 * finished: its rename aside was the commit point. */
static int stopped(struct item *x)
{
    if (!ckpt_interrupted())
        return 0;
    x->c.action = "skip";
    ckpt_buf_reset(&x->c.reason);
    ckpt_buf_addstr(&x->c.reason, "interrupted: left as it was");
    return 1;
}

static void judge(void *arg)
{
    struct item *x = arg;
    if (stopped(x))
        return;
    ckpt_clean_judge(&x->c);
    if (x->c.scanned && x->c.is_archive)
        cli_debugf("%s: read %llu of %llu archive bytes", x->c.arg,
                   (unsigned long long)x->c.fetched,
                   (unsigned long long)x->c.sb.size);
}

static void act(void *arg)
{
    struct item *x = arg;
    if (stopped(x))
        return;
    ckpt_clean_act(&x->c);
}

/* A directory that holds runs is never judged as one run (SPEC): its
 * runs (directories and archives) are judged instead, each on its own,
 * as `ckpt process DIR` and `ckpt ls DIR` do. Nested directories of runs
 * are expanded again, a few levels at most. Returns the items added. */
static int expand(struct item ***items, int *n, struct item *x, int depth)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    char **keys;
    size_t nk;
    if (depth > 4 || ckpt_run_children(x->c.st, x->c.key, NULL, NULL, &keys,
                                       &nk, NULL, &err) != 0) {
        if (depth <= 4) {
            x->c.action = "error";
            ckpt_buf_reset(&x->c.reason);
            ckpt_buf_addstr(&x->c.reason, err.msg);
        }
        return 0;
    }
    x->container = 1;
    x->kid0 = *n;
    x->nkids = (int)nk;
    *items = ckpt_xreallocarray(*items, (size_t)*n + nk, sizeof(**items));
    for (size_t i = 0; i < nk; i++) {
        struct item *k = ckpt_xcalloc(1, sizeof(*k));
        char *base = ckpt_path_basename(keys[i]);
        k->g = x->g;
        k->arg = ckpt_path_join(x->c.arg, base);
        ckpt_clean_item_init(&k->c, x->c.st, keys[i], k->arg, x->c.co);
        if (ckpt_clean_precheck(&k->c, &err) != 0) {
            k->c.action = "error";
            ckpt_buf_addstr(&k->c.reason, err.msg);
        }
        (*items)[(*n)++] = k;
        free(base);
        free(keys[i]);
    }
    free(keys);
    return (int)nk;
}

/* The items to act on and report, in argument order, a directory of runs
 * standing for its runs (sorted). */
static void in_order(struct item **items, struct item *x, struct item **out,
                     int *m)
{
    if (!x->container) {
        out[(*m)++] = x;
        return;
    }
    for (int i = 0; i < x->nkids; i++)
        in_order(items, items[x->kid0 + i], out, m);
}

static void run_phase(struct item **items, int n, int jobs, ckpt_task_fn fn)
{
    struct ckpt_pool *pool = jobs > 1 ? ckpt_pool_new(jobs, (size_t)jobs * 2)
                                      : NULL;
    for (int i = 0; i < n; i++) {
        if (pool)
            ckpt_pool_submit(pool, fn, items[i]);
        else
            fn(items[i]);
    }
    ckpt_pool_free(pool);
}

int cmd_clean(int argc, char **argv)
{
    struct ckpt_opts g = { .takes = CLI_TAKES_DRY_RUN | CLI_TAKES_JOBS };
    struct ckpt_clean_opts co = { 86400, 0, 5ULL << 30, 0, 0, 0 };
    const char *min_age = NULL;
    const struct option opts[] = {
        OPT_STR_(0, "min-age", &min_age, "DURATION",
                 "skip runs with a file newer than this (90m, 6h, 2d, "
                 "seconds; default 1d; 0: no limit)"),
        OPT_BOOL_('f', "force", &co.force,
                  "clean directories that do not look like runs"),
        OPT_SIZE_(0, "max-archive-size", &co.max_archive, "SIZE",
                  "skip larger archives without opening them (default 5G)"),
        OPT_INT_(0, "keep-last", &co.keep_last, "N",
                 "in kept runs, prune all but the N newest complete "
                 "checkpoints"),
        OPT_INT_(0, "keep-every", &co.keep_every, "K",
                 "in kept runs, also keep complete checkpoints whose step "
                 "is a multiple of K"),
        OPT_END_(),
    };
    int n = cli_parse_options(argc, argv, opts, clean_usage, &g);
    if (n == -2)
        return EXIT_OK;
    if (n < 0)
        return EXIT_USAGE;
    if (n == 0) {
        fprintf(stderr, "ckpt clean: error: no RUN given\nusage: %s\n",
                clean_usage[0]);
        return EXIT_USAGE;
    }
    if (min_age && ckpt_parse_duration(min_age, &co.min_age) != 0) {
        fprintf(stderr, "ckpt clean: error: --min-age '%s': expected a "
                "duration like 90m, 6h, 2d or seconds\nusage: %s\n",
                min_age, clean_usage[0]);
        return EXIT_USAGE;
    }
    cli_init_output(&g);
    co.dry_run = g.dry_run;

    struct item **items = ckpt_xcalloc((size_t)n, sizeof(*items));
    struct storages stores = { 0 };
    int jobs = cli_default_jobs(&g, n, 8);
    for (int i = 0; i < n; i++) {
        struct item *x = items[i] = ckpt_xcalloc(1, sizeof(*x));
        struct ckpt_storage *st = NULL;
        struct ckpt_err err = CKPT_ERR_INIT;
        x->g = &g;
        int bad = ckpt_loc_parse(&x->loc, argv[i], &err) != 0 ||
                  cli_storages_get(&stores, &x->loc, &g, &st, &err) != 0;
        ckpt_clean_item_init(&x->c, st, bad ? "" : x->loc.key, argv[i], &co);
        if (bad || ckpt_clean_precheck(&x->c, &err) != 0) {
            x->c.action = "error";
            ckpt_buf_addstr(&x->c.reason, err.msg);
        }
    }
    /* Judge everything first, then act: nothing is touched until every
     * RUN has been read. A directory of runs is replaced by its runs. */
    int total = n, from = 0;
    for (int depth = 0; from < total; depth++) {
        struct item **todo = ckpt_xcalloc((size_t)(total - from),
                                          sizeof(*todo));
        int m = 0;
        for (int i = from; i < total; i++)
            if (!items[i]->c.action)
                todo[m++] = items[i];
        run_phase(todo, m, cli_default_jobs(&g, m, jobs), judge);
        free(todo);
        int end = total;
        for (int i = from; i < end; i++)
            if (items[i]->c.scanned && items[i]->c.run.holds_run)
                expand(&items, &total, items[i], depth);
        from = end;
    }
    struct item **todo = ckpt_xcalloc((size_t)total, sizeof(*todo));
    int m = 0;
    for (int i = 0; i < n; i++)
        in_order(items, items[i], todo, &m);
    run_phase(todo, m, jobs, act);
    int failed = 0, freed_runs = 0;
    uint64_t freed = 0;
    size_t live = 0;
    for (int i = 0; i < m; i++) {
        report(todo[i]);
        const struct ckpt_clean_item *it = &todo[i]->c;
        live += !strcmp(it->action, "skip") &&
                !strncmp(it->reason.ptr, "live:", 5);
        freed += it->bytes;
        freed_runs += it->bytes > 0;
        /* A skip is reported once, by its row (docs/output.md). */
        failed |= !strcmp(it->action, "error");
    }
    if (freed_runs) {
        char sz[32];
        cli_infof("%s %s in %d run%s", g.dry_run ? "would free" : "freed",
                  ckpt_fmt_size(freed, sz, sizeof(sz)), freed_runs,
                  freed_runs == 1 ? "" : "s");
    }
    cli_hint_all_live((size_t)m, live, min_age);
    for (int i = 0; i < total; i++) {
        if (i < n)
            ckpt_loc_release(&items[i]->loc);
        ckpt_clean_item_release(&items[i]->c);
        free(items[i]->arg);
        free(items[i]);
    }
    free(todo);
    free(items);
    cli_storages_release(&stores);
    return failed ? EXIT_FAILED : EXIT_OK;
}
