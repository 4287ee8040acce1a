/*
 * cmd_clean.c - `ckpt clean`: delete runs that never produced a complete
 * checkpoint with step > 0, keep the others (optionally pruning old
 * checkpoints), skip what does not look like a run.
 *
 * Phases: parse options; load and judge every run in parallel (nothing is
 * changed yet); then, run by run, verify the verdict again just before
 * acting, and act. A failure on one run is reported and the rest go on.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/pool.h"
#include "ckpt/util.h"
#include "runs.h"

static const char *const clean_usage[] = {
    "ckpt clean [options] RUN...",
    "",
    "Delete each RUN (a directory or an archive, local or remote) that has",
    "no complete checkpoint with step > 0; keep the others; skip anything",
    "that does not look like a run. Prints ACTION<TAB>RUN<TAB>REASON per",
    "RUN, ACTION one of delete, would-delete, keep, skip, error.",
    NULL
};

struct clean_opts {
    int force;
    uint64_t max_archive;
    int keep_last;
    int keep_every;
};

struct item {
    const char *arg;                 /* borrowed: RUN as given */
    struct ckpt_loc loc;
    struct ckpt_storage *st;         /* borrowed from struct storages */
    const struct ckpt_opts *g;
    const struct clean_opts *co;
    /* results, written by the worker */
    const char *action;              /* static string */
    struct ckpt_buf reason;
    struct ckpt_stat sb;
    struct ckpt_run run;
    int scanned;                     /* run is valid */
    int is_archive;
    struct ckpt_buf pruned;          /* "step100, step200" */
    cJSON *pruned_json;              /* owned until printed */
};

static const char *msg_delete(const struct ckpt_opts *g)
{
    return g->dry_run ? "would-delete" : "delete";
}

/* Why a run is bad: the checkpoints it has and why none counts. */
static void bad_reason(struct item *it)
{
    struct ckpt_buf *r = &it->reason;
    if (!it->run.n) {
        ckpt_buf_addstr(r, "no checkpoint");
        return;
    }
    ckpt_buf_addstr(r, "no complete checkpoint with step > 0 (");
    for (size_t i = 0; i < it->run.n; i++) {
        const struct ckpt_checkpoint *c = &it->run.ckpts[i];
        ckpt_buf_addf(r, "%s%s: %s", i ? "; " : "", c->name,
                      !c->complete ? c->why : "step 0");
    }
    ckpt_buf_addch(r, ')');
}

/* Refuse paths whose deletion would be a disaster whatever they hold. */
static int unsafe_local(const char *key, struct ckpt_err *err)
{
    char real[PATH_MAX], cwd[PATH_MAX];
    if (!realpath(key, real))
        return ckpt_err_sys(err, "resolve '%s'", key);
    const char *home = getenv("HOME");
    char rhome[PATH_MAX];
    int is_home = home && realpath(home, rhome) && !strcmp(rhome, real);
    int is_cwd_or_parent = 0;
    if (getcwd(cwd, sizeof(cwd))) {
        size_t n = strlen(real);
        is_cwd_or_parent = !strncmp(cwd, real, n) &&
                           (cwd[n] == '/' || cwd[n] == '\0' || n == 1);
    }
    if (!strcmp(real, "/") || is_home || is_cwd_or_parent)
        return ckpt_err_set(err, CKPT_EUNSAFE,
                            "refusing to delete '%s' (%s)", key, real);
    return 0;
}

/* Checkpoints to prune in a kept run, per --keep-last / --keep-every.
 * Never the newest complete one, never the complete predecessor of an
 * incomplete (possibly still being written) newer one. */
static void plan_prune(const struct ckpt_run *run, const struct clean_opts *co,
                       int *prune)
{
    size_t n = run->n;
    int *keep = ckpt_xcalloc(n ? n : 1, sizeof(int));
    int kept_steps = 0;
    int64_t last_step = INT64_MIN;
    for (size_t i = n; i-- > 0;) {
        const struct ckpt_checkpoint *c = &run->ckpts[i];
        if (!c->complete) {
            keep[i] = 1;
            continue;
        }
        if (c->step != last_step) {
            last_step = c->step;
            kept_steps++;
        }
        int newest = kept_steps == 1;
        int in_last = co->keep_last > 0 && kept_steps <= co->keep_last;
        int every = co->keep_every > 0 && c->step % co->keep_every == 0;
        keep[i] = newest || in_last || every;
    }
    for (size_t i = 0; i < n; i++) {
        if (run->ckpts[i].complete)
            continue;
        for (size_t j = i; j-- > 0;)
            if (run->ckpts[j].complete) {
                /* every complete dir of that step */
                for (size_t k = 0; k < n; k++)
                    if (run->ckpts[k].step == run->ckpts[j].step)
                        keep[k] = 1;
                break;
            }
    }
    for (size_t i = 0; i < n; i++)
        prune[i] = !keep[i];
    free(keep);
}

static void verdict(struct item *it);

static void judge(void *arg)
{
    struct item *it = arg;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_tree *tree = NULL;
    enum ckpt_load_status status;
    it->action = "error";
    if (ckpt_run_load_flags(it->st, it->loc.key, it->co->max_archive,
                            CKPT_TREE_SALVAGE, &it->sb, &status, &tree,
                            &it->run, &err) != 0) {
        ckpt_buf_addstr(&it->reason, err.msg);
        return;
    }
    it->is_archive = ckpt_archive_kind_of(it->loc.key) != CKPT_ARCHIVE_NONE;
    if (status == CKPT_LOAD_TOO_LARGE) {
        char a[32], b[32];
        it->action = "skip";
        ckpt_buf_addf(&it->reason, "archive is %s, above --max-archive-size "
                      "%s", ckpt_fmt_size(it->sb.size, a, sizeof(a)),
                      ckpt_fmt_size(it->co->max_archive, b, sizeof(b)));
        return;
    }
    if (status == CKPT_LOAD_NOT_RUN_FILE) {
        it->action = "skip";
        ckpt_buf_addstr(&it->reason, "not a directory or archive");
        return;
    }
    it->scanned = 1;
    if (tree->archive != CKPT_ARCHIVE_NONE)
        debugf("%s: read %llu of %llu archive bytes", it->arg,
               (unsigned long long)tree->fetched,
               (unsigned long long)tree->archive_size);
    char *damage = tree->damage ? ckpt_xasprintf("%s: %s", tree->display,
                                                 tree->damage)
                                : NULL;
    ckpt_tree_free(tree);
    verdict(it);
    /* A damaged archive may hold more than was listed: only a complete
     * checkpoint found anyway (keep, which changes nothing) stands. */
    if (damage && strcmp(it->action, "keep") != 0) {
        it->action = "error";
        ckpt_buf_reset(&it->reason);
        ckpt_buf_addstr(&it->reason, damage);
    }
    free(damage);
}

/* keep, delete or skip, from the scanned run. */
static void verdict(struct item *it)
{
    if (!ckpt_run_looks_like_run(&it->run) && !it->co->force) {
        it->action = "skip";
        ckpt_buf_addstr(&it->reason, "does not look like a run (no "
                        "config.yaml with wandb/ or train_data/, and no "
                        "checkpoint directory); use --force to clean it");
        return;
    }
    const struct ckpt_checkpoint *best = ckpt_run_best(&it->run);
    if (!best) {
        it->action = msg_delete(it->g);
        bad_reason(it);
        return;
    }
    it->action = "keep";
    ckpt_buf_addf(&it->reason, "complete checkpoint %s (%s)", best->name,
                  ckpt_format_name(best->format));
}

/* Re-read the run right before deleting it: it must still be bad and must
 * not have grown (a trainer may have written a checkpoint since). It may
 * have shrunk, or vanished: another `ckpt clean` deleting the same run.
 * Returns 1 when the run is already gone, 0 to go ahead, -1 to refuse. */
static int verify_still_bad(struct item *it, struct ckpt_err *err)
{
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    struct ckpt_tree *tree = NULL;
    struct ckpt_run run;
    if (ckpt_run_load_flags(it->st, it->loc.key, 0, CKPT_TREE_SALVAGE, &sb,
                            &status, &tree, &run, err) != 0)
        return err->code == CKPT_ENOTFOUND ? 1 : -1;
    int ok = status == CKPT_LOAD_OK && !tree->damage &&
             !ckpt_run_best(&run) &&
             run.nfiles <= it->run.nfiles && run.size <= it->run.size &&
             (!it->is_archive || (sb.size == it->sb.size &&
                                  sb.mtime == it->sb.mtime));
    ckpt_tree_free(tree);
    if (status == CKPT_LOAD_OK)
        ckpt_run_release(&run);
    if (!ok)
        return ckpt_err_set(err, CKPT_EUNSAFE, "run changed while it was "
                            "checked; not deleted");
    return 0;
}

/* Checks that hold whatever the run holds: never through a symlink, never
 * "/", $HOME, the cwd or its parents, never a whole bucket. */
static int refuse_path(struct item *it, struct ckpt_err *err)
{
    const char *key = it->loc.key;
    if (!ckpt_storage_is_local(it->st))
        return *key ? 0 : ckpt_err_set(err, CKPT_EUNSAFE, "refusing to delete"
                                       " a whole bucket ('%s')", it->arg);
    struct stat lsb;
    if (lstat(key, &lsb) == 0 && S_ISLNK(lsb.st_mode))
        return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is a symbolic link; not "
                            "deleting through it (give the real path)", key);
    return unsafe_local(key, err);
}

static int delete_run(struct item *it, struct ckpt_err *err)
{
    int v = verify_still_bad(it, err);
    if (v == 0 && refuse_path(it, err) != 0)
        v = err->code == CKPT_ENOTFOUND ? 1 : -1;
    if (v != 0) {
        /* Gone already: another cleaner got there first, which is what we
         * wanted. */
        if (v == 1)
            ckpt_buf_addstr(&it->reason, " (already deleted by another "
                            "process)");
        return v < 0 ? -1 : 0;
    }
    if (it->is_archive)
        return ckpt_storage_delete(it->st, it->loc.key, err);
    return ckpt_storage_delete_tree(it->st, it->loc.key, err);
}

static int prune_run(struct item *it, struct ckpt_err *err)
{
    int *prune = ckpt_xcalloc(it->run.n ? it->run.n : 1, sizeof(int));
    plan_prune(&it->run, it->co, prune);
    int rc = 0;
    it->pruned_json = cJSON_CreateArray();
    for (size_t i = 0; i < it->run.n && rc == 0; i++) {
        if (!prune[i])
            continue;
        const struct ckpt_checkpoint *c = &it->run.ckpts[i];
        if (it->is_archive) {
            ckpt_buf_addstr(&it->reason, "; not pruning inside an archive");
            break;
        }
        if (!it->g->dry_run) {
            char *key = ckpt_path_join(it->loc.key, c->dir);
            rc = ckpt_storage_delete_tree(it->st, key, err);
            free(key);
            if (rc != 0)
                break;
        }
        ckpt_buf_addf(&it->pruned, "%s%s", it->pruned.len ? ", " : "",
                      c->name);
        cJSON_AddItemToArray(it->pruned_json, cJSON_CreateString(c->name));
    }
    if (it->pruned.len)
        ckpt_buf_addf(&it->reason, "; %s %s",
                      it->g->dry_run ? "would prune" : "pruned",
                      it->pruned.ptr);
    free(prune);
    return rc;
}

static void act(void *arg)
{
    struct item *it = arg;
    struct ckpt_err err = CKPT_ERR_INIT;
    int rc = 0;
    if (!strcmp(it->action, "delete"))
        rc = delete_run(it, &err);
    else if (!strcmp(it->action, "keep") &&
             (it->co->keep_last > 0 || it->co->keep_every > 0))
        rc = prune_run(it, &err);
    if (rc != 0) {
        it->action = "error";
        ckpt_buf_reset(&it->reason);
        ckpt_buf_addstr(&it->reason, err.msg);
    }
}

static void report(struct item *it)
{
    if (!it->g->json) {
        const char *f[] = { it->action, it->arg, it->reason.ptr };
        out_tsv(3, f);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", it->arg);
    cJSON_AddStringToObject(o, "action", it->action);
    cJSON_AddStringToObject(o, "reason", it->reason.ptr);
    cJSON_AddItemToObject(o, "checkpoints", it->scanned
                          ? json_checkpoints(&it->run, 0)
                          : cJSON_CreateArray());
    if (it->pruned_json) {
        cJSON_AddItemToObject(o, "pruned", it->pruned_json);
        it->pruned_json = NULL;
    }
    out_json(o);
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
    struct ckpt_opts g = { 0 };
    struct clean_opts co = { 0, 5ULL << 30, 0, 0 };
    const struct option opts[] = {
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
    int n = parse_options(argc, argv, opts, clean_usage, &g);
    if (n == -2)
        return EXIT_OK;
    if (n < 0)
        return EXIT_USAGE;
    if (n == 0) {
        fprintf(stderr, "ckpt clean: error: no RUN given\nusage: %s\n",
                clean_usage[0]);
        return EXIT_USAGE;
    }
    cli_init_output(&g);

    struct item *items = ckpt_xcalloc((size_t)n, sizeof(*items));
    struct storages stores = { 0 };
    int jobs = default_jobs(&g, n, 8);
    for (int i = 0; i < n; i++) {
        struct item *it = &items[i];
        struct ckpt_err err = CKPT_ERR_INIT;
        it->arg = argv[i];
        it->g = &g;
        it->co = &co;
        ckpt_buf_init(&it->reason);
        ckpt_buf_init(&it->pruned);
        if (ckpt_loc_parse(&it->loc, argv[i], &err) != 0 ||
            storages_get(&stores, &it->loc, &g, &it->st, &err) != 0) {
            it->action = "error";
            ckpt_buf_addstr(&it->reason, err.msg);
        }
    }
    /* Judge everything first, then act: nothing is touched until every
     * RUN has been read. */
    struct item **todo = ckpt_xcalloc((size_t)n, sizeof(*todo));
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!items[i].action)
            todo[m++] = &items[i];
    run_phase(todo, m, jobs, judge);
    run_phase(todo, m, jobs, act);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        report(&items[i]);
        failed |= !strcmp(items[i].action, "error");
        if (!strcmp(items[i].action, "skip"))
            warnf("skipped %s: %s", items[i].arg, items[i].reason.ptr);
    }
    for (int i = 0; i < n; i++) {
        ckpt_loc_release(&items[i].loc);
        ckpt_buf_release(&items[i].reason);
        ckpt_buf_release(&items[i].pruned);
        if (items[i].scanned)
            ckpt_run_release(&items[i].run);
        cJSON_Delete(items[i].pruned_json);
    }
    free(todo);
    free(items);
    storages_release(&stores);
    return failed ? EXIT_FAILED : EXIT_OK;
}
