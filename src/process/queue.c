/*
 * queue.c - `ckpt process` as a library (ckpt/process.h): the queue of
 * runs (directories of runs expanded, each run once, ids that would
 * share a state refused), the run-workers that take them K at a time
 * with their share of -j and of the memory budget, and the rounds a
 * --batch walks again. One run's phases are run.c's.
 */
#include "ckpt/process.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/archive.h"
#include "ckpt/interrupt.h"
#include "ckpt/ratelimit.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "process_int.h"

#define MIB (1024ULL * 1024)
#define DEFAULT_MEM (96 * MIB)  /* upload's own default, for all runs */
#define MIN_RUN_MEM (16 * MIB)  /* upload's --memory floor */

/* ---- the run-workers ---- */

/* A run-worker: takes the next run of the round until none is left. Each
 * run goes through its phases in order under its own lease. */
static void *run_worker(void *arg)
{
    struct ckpt_process *p = arg;
    int failed = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t k = p->next < p->nround ? p->next++ : p->nround;
        pthread_mutex_unlock(&p->mu);
        /* Interrupted: no run is started (the ones in flight fail on
         * their next request and release their leases). */
        if (k == p->nround || ckpt_interrupted())
            break;
        size_t i = p->round[k];
        if (proc_run_one(p, &p->runs[i], &failed)) {
            pthread_mutex_lock(&p->mu);
            p->others[p->nothers++] = i;
            pthread_mutex_unlock(&p->mu);
        }
    }
    return failed ? arg : NULL;
}

/* Runs in flight, and each one's share of -j and of the memory budget:
 * K runs at once keep the same number of files in flight and the same
 * data buffers as one run alone. */
static void plan_pool(struct ckpt_process *p)
{
    const struct ckpt_process_cfg *c = &p->cfg;
    int k = c->runs > 0 ? c->runs : CKPT_PROC_DEFAULT_RUNS;
    int jobs = c->jobs > 0 ? c->jobs : CKPT_PROC_DEFAULT_TRANSFERS;
    uint64_t mem = c->mem_budget ? c->mem_budget : DEFAULT_MEM;
    if ((size_t)k > p->n)
        k = p->n ? (int)p->n : 1;
    p->par = k;
    p->run_jobs = jobs / k > 0 ? jobs / k : 1;
    p->run_mem = mem / (uint64_t)k > MIN_RUN_MEM ? mem / (uint64_t)k
                                                  : MIN_RUN_MEM;
    p->next = 0;
    p->items = p->bytes = 0;
}

/* One round over p->round: cfg.runs run-workers (this thread is one; a
 * thread that cannot be started leaves its share to the others). 1 when
 * a run failed. */
static int run_round(struct ckpt_process *p)
{
    int failed = 0, started = 0;
    int par = (size_t)p->par < p->nround ? p->par : (int)p->nround;
    pthread_t *th = ckpt_xcalloc(par > 0 ? (size_t)par : 1, sizeof(*th));
    p->next = 0;
    p->nothers = 0;
    p->taken = 0;
    for (int i = 1; i < par; i++)
        if (pthread_create(&th[started], NULL, run_worker, p) == 0)
            started++;
    failed = run_worker(p) != NULL;
    for (int i = 0; i < started; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        failed |= r != NULL;
    }
    free(th);
    return failed;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int ckpt_process_run(struct ckpt_process *p, struct ckpt_process_totals *t)
{
    int failed = 0;
    double t0 = ckpt_now();
    memset(t, 0, sizeof(*t));
    p->t = t;
    plan_pool(p);
    p->round = ckpt_xcalloc(p->n + 1, sizeof(*p->round));
    p->others = ckpt_xcalloc(p->n + 1, sizeof(*p->others));
    for (size_t i = 0; i < p->n; i++)
        p->round[i] = i;
    p->nround = p->n;
    /* A batch's runs claimed by other live workers are walked again
     * while the last round took something: a worker interrupted
     * meanwhile gave its unfinished runs back. Done when nothing is left
     * that this worker can take. */
    for (;;) {
        failed |= run_round(p);
        if (!p->cfg.batch || p->cfg.dry_run || !p->nothers || !p->taken ||
            ckpt_interrupted())
            break;
        ckpt_sort(p->others, p->nothers, sizeof(size_t), cmp_size);
        memcpy(p->round, p->others, p->nothers * sizeof(size_t));
        p->nround = p->nothers;
    }
    free(p->round);
    free(p->others);
    p->round = p->others = NULL;
    t->seconds = ckpt_now() - t0;
    p->t = NULL;
    return failed ? -1 : 0;
}

/* ---- the queue ---- */

/* The source as the state records it: a local path made absolute (its
 * directory resolved, so that cron and a shell in another directory
 * name the same run alike), else the URL. */
static char *source_id(struct ckpt_storage *st, const char *key)
{
    if (!ckpt_storage_is_local(st))
        return ckpt_storage_display(st, key);
    char *dir = ckpt_path_dirname(key), *base = ckpt_path_basename(key);
    char *real = realpath(*dir ? dir : ".", NULL);
    char *id = real ? ckpt_path_join(real, base) : ckpt_xstrdup(key);
    free(real);
    free(dir);
    free(base);
    return id;
}

static void queue(struct ckpt_process *p, struct ckpt_storage *st,
                  const char *key)
{
    char *srcid = source_id(st, key), *id = ckpt_archive_stem(key);
    size_t dup = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!strcmp(p->runs[i].srcid, srcid)) {  /* named twice */
            free(srcid);
            free(id);
            return;
        }
        if (!dup && !strcmp(p->runs[i].id, id))
            dup = i + 1;
    }
    p->runs = ckpt_xreallocarray(p->runs, p->n + 1, sizeof(*p->runs));
    struct proc_queued *r = &p->runs[p->n++];
    r->st = st;
    r->key = ckpt_xstrdup(key);
    r->display = ckpt_storage_display(st, key);
    r->id = id;
    r->srcid = srcid;
    r->dup = dup;
    p->ids = ckpt_xreallocarray(p->ids, p->n, sizeof(*p->ids));
    for (size_t i = 0; i < p->n; i++)
        p->ids[i] = p->runs[i].id;
}

struct children {
    struct ckpt_process *p;
    struct ckpt_storage *st;
};

/* Not DEST, not the --logs location. */
static int child_ok(void *ud, const char *key)
{
    struct children *c = ud;
    enum ckpt_loc_rel rel = ckpt_storage_relation(c->st, key, c->p->cfg.dst,
                                                  c->p->cfg.dest_key);
    enum ckpt_loc_rel lrel = c->p->cfg.logs_st
        ? ckpt_storage_relation(c->st, key, c->p->cfg.logs_st,
                                c->p->cfg.logs_key) : CKPT_LOC_APART;
    /* (a run holding DEST or the logs is queued: judging fails it with
     * a row, pass after pass, rather than leave it out unsaid) */
    return rel != CKPT_LOC_SAME && lrel != CKPT_LOC_SAME;
}

/* Does a directory SRC that is not a run hold runs? Its directories and
 * archives are queued (sorted); returns how many, or -1. *any tells
 * whether SRC holds anything at all. */
static int expand(struct ckpt_process *p, struct ckpt_storage *st,
                  const char *key, int *any, struct ckpt_err *err)
{
    struct children c = { p, st };
    char **keys;
    size_t n;
    if (ckpt_run_children(st, key, child_ok, &c, &keys, &n, any, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        queue(p, st, keys[i]);
        free(keys[i]);
    }
    free(keys);
    return (int)n;
}

static int add_one(struct ckpt_process *p, struct ckpt_storage *st,
                   const char *key, struct ckpt_err *err);

/* Is a missing SRC a run an earlier invocation finished (its state
 * object exists)? */
static int has_state(struct ckpt_process *p, const char *key)
{
    char *id = ckpt_archive_stem(key);
    char *name = ckpt_xasprintf("%s/%s.json", PROC_STATE_DIR, id);
    char *sk = ckpt_path_join(p->cfg.dest_key, name);
    struct ckpt_stat sb;
    struct ckpt_err err = CKPT_ERR_INIT;
    int rc = ckpt_storage_stat(p->cfg.dst, sk, &sb, &err) == 0;
    free(id);
    free(name);
    free(sk);
    return rc;
}

int ckpt_process_add(struct ckpt_process *p, struct ckpt_storage *st,
                     const char *key, struct ckpt_err *err)
{
    /* `runs/r1/.` is runs/r1, as clean takes it: its id is r1, not "." */
    if (ckpt_storage_is_local(st)) {
        char *c = ckpt_clean_path(key, err);
        if (!c)
            return -1;
        int rc = add_one(p, st, c, err);
        free(c);
        return rc;
    }
    return add_one(p, st, key, err);
}

static int add_one(struct ckpt_process *p, struct ckpt_storage *st,
                   const char *key, struct ckpt_err *err)
{
    struct ckpt_stat sb;
    if (ckpt_storage_stat(st, key, &sb, err) != 0) {
        if (err->code != CKPT_ENOTFOUND)
            return -1;
        ckpt_err_clear(err);
        /* An object store has no directories: an empty prefix is an
         * empty queue, not an error (while the bucket is there). */
        if (!ckpt_storage_is_local(st) && !has_state(p, key)) {
            struct ckpt_stat root;
            return ckpt_storage_stat(st, "", &root, err) == 0 ? 0 : -1;
        }
        queue(p, st, key);
        return 1;
    }
    if (sb.type != CKPT_ENTRY_DIR) {
        queue(p, st, key);
        return 1;
    }
    struct ckpt_tree *tree = NULL;
    struct ckpt_run run;
    enum ckpt_load_status status;
    struct ckpt_err lerr = CKPT_ERR_INIT;
    int is_run;
    if (ckpt_run_load(st, key, 0, &sb, &status, &tree, &run, &lerr) == 0) {
        is_run = status == CKPT_LOAD_OK && ckpt_run_looks_like_run(&run);
        if (status == CKPT_LOAD_OK)
            ckpt_run_release(&run);
        ckpt_tree_free(tree);
    } else {
        /* Unreadable checkpoint metadata: a run with config.yaml is
         * still a run (judging reports the error), never its steps. */
        char *cfg = ckpt_path_join(key, "config.yaml");
        is_run = ckpt_storage_stat(st, cfg, &sb, &lerr) == 0;
        free(cfg);
    }
    /* A run a failed delete left half there (state "uploaded" at DEST)
     * may no longer look like one: its state says it is. */
    if (is_run || has_state(p, key)) {
        queue(p, st, key);
        return 1;
    }
    int any = 0;
    int n = expand(p, st, key, &any, err);
    if (n < 0 && err->code == CKPT_ENOTFOUND) {
        /* Gone since the stat above: another worker deleted it (GNU
         * parallel named it before a whole-directory worker got to it).
         * Queued as a missing run: under its lease, the state at DEST
         * says whether it was processed ("done") or never was. */
        ckpt_err_clear(err);
        queue(p, st, key);
        return 1;
    }
    if (n == 0 && any) {
        queue(p, st, key);  /* judged: "does not look like a run" */
        n = 1;
    }
    return n;
}

const char *const *ckpt_process_ids(const struct ckpt_process *p, size_t *n)
{
    *n = p->n;
    return (const char *const *)p->ids;
}

char *ckpt_process_location(const struct ckpt_process *p, size_t i)
{
    return ckpt_xstrdup(p->runs[i].display);
}

void ckpt_process_set_map(struct ckpt_process *p,
                          const struct ckpt_wandb_map *map)
{
    p->cfg.map = map;
}

/* ---- setup ---- */

static int collect_log(void *ud, const struct ckpt_entry *e)
{
    struct ckpt_process *p = ud;
    if (e->type != CKPT_ENTRY_FILE)
        return 0;
    p->logs = ckpt_xreallocarray(p->logs, p->nlogs + 1, sizeof(char *));
    p->logs[p->nlogs++] = ckpt_path_join(p->cfg.logs_key, e->name);
    return 0;
}

int ckpt_process_new(struct ckpt_process **out,
                     const struct ckpt_process_cfg *cfg,
                     struct ckpt_err *err)
{
    struct ckpt_process *p = ckpt_xcalloc(1, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    const char *base = cfg->tmp_dir ? cfg->tmp_dir
                     : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    p->cfg = *cfg;
    p->tmp = ckpt_xstrdup(base);
    if (cfg->bwlimit)
        p->bw = ckpt_rate_new(cfg->bwlimit);
    ckpt_spool_budget_init(&p->spools, p->tmp, cfg->spool_limit);
    /* Hashed as they are spooled, members go to DEST as hard links of the
     * spool's files, neither read nor written again (the upload's
     * put_file): only where such links can be made. */
    p->spool_hash = ckpt_storage_is_local(cfg->dst) &&
                    ckpt_local_same_fs(p->tmp, cfg->dest_key);
    *out = p;
    if (cfg->logs_st &&
        ckpt_storage_list(cfg->logs_st, cfg->logs_key, CKPT_LIST_RECURSIVE,
                          collect_log, p, err) != 0) {
        ckpt_process_free(p);
        *out = NULL;
        return -1;
    }
    return 0;
}

void ckpt_process_free(struct ckpt_process *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        free(p->runs[i].key);
        free(p->runs[i].display);
        free(p->runs[i].id);
        free(p->runs[i].srcid);
    }
    for (size_t i = 0; i < p->nlogs; i++)
        free(p->logs[i]);
    free(p->logs);
    pthread_mutex_destroy(&p->mu);
    ckpt_rate_free(p->bw);
    ckpt_spool_budget_destroy(&p->spools);
    free(p->tmp);
    free(p->runs);
    free(p->ids);
    free(p);
}
