/*
 * cmd_ls.c - `ckpt ls`: list runs and their checkpoints.
 *
 * A LOCATION that is a run (or a run archive) is listed itself; any other
 * directory is listed one level down: each child directory or archive that
 * looks like a run.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/buf.h"
#include "ckpt/clean.h"
#include "ckpt/orbax.h"
#include "ckpt/pool.h"
#include "ckpt/util.h"
#include "runs.h"

/* --tree: the branches before a checkpoint's name, as tree(1) draws
 * them ("|-- ", "`-- " in box-drawing characters). */
#define TREE_MID "\xe2\x94\x9c\xe2\x94\x80\xe2\x94\x80 "
#define TREE_END "\xe2\x94\x94\xe2\x94\x80\xe2\x94\x80 "

static const char *const ls_usage[] = {
    "ckpt ls [options] LOCATION...",
    "",
    "List runs and their checkpoints. One line per checkpoint:",
    "RUN<TAB>CHECKPOINT<TAB>STEP<TAB>FORMAT<TAB>STATE<TAB>BYTES<TAB>FILES",
    "(a run without checkpoints prints '-' for CHECKPOINT, STEP, FORMAT).",
    "A LOCATION that is not itself a run is listed one level down.",
    "With -l, each Orbax checkpoint is followed by its arrays:",
    "RUN<TAB>CHECKPOINT<TAB>array<TAB>NAME<TAB>DTYPE<TAB>SHAPE<TAB>BYTES",
    "(NAME is the dotted pytree path; SHAPE like [6,5], [] for a scalar),",
    "and each run by a row per file nothing accounts for (such a run is",
    "never deleted): RUN<TAB>FILE<TAB>-<TAB>-<TAB>unaccounted: ...<TAB>",
    "BYTES<TAB>FILES (a checkpoint's first such file stands for FILES).",
    "With --summary, instead: per verdict (complete, incomplete, bad,",
    "live, error) the runs and their bytes, VERDICT<TAB>RUNS<TAB>BYTES",
    "<TAB>SIZE, then total and would-free (what `ckpt clean` with the",
    "same --min-age would delete). With --summary --by-run (or 'ckpt du'),",
    "a row per run, largest first: RUN<TAB>VERDICT<TAB>BYTES<TAB>",
    "WOULD-FREE, then total<TAB>-<TAB>BYTES<TAB>WOULD-FREE.",
    "With --tree, each run (RUN<TAB>VERDICT<TAB>BYTES<TAB>WOULD-FREE,",
    "judged as by --summary) and under it a row per checkpoint,",
    TREE_MID "NAME<TAB>STATE<TAB>BYTES<TAB>-, then --by-run's total row.",
    "-j default 8: runs read at once (listing-bound).",
    "examples:",
    "  ckpt ls /scratch/runs                each run's checkpoints",
    "  ckpt ls --summary s3://b/runs        runs and bytes per verdict",
    "  ckpt ls --summary --by-run /scratch  where the quota went, per run",
    "  ckpt ls --tree /scratch/runs         runs, steps, sizes, verdicts",
    "  ckpt ls --json RUN | jq .bytes       for scripts (docs/output.md)",
    NULL
};

/* --summary: each run judged with clean's rules, counted per verdict. */
enum verdict { V_COMPLETE = 0, V_INCOMPLETE, V_BAD, V_LIVE, V_ERROR,
               V_NONE, V_N = V_NONE };

static const char *const verdict_name[V_N] = {
    "complete", "incomplete", "bad", "live", "error"
};

static const char *const ls_header[] = { "RUN", "CHECKPOINT", "STEP",
                                         "FORMAT", "STATE", "BYTES",
                                         "FILES" };

static const char *const tree_header[] = { "RUN", "VERDICT", "BYTES",
                                           "WOULD-FREE" };

/* --by-run: one run's row. */
struct by_run {
    char *name;                  /* owned */
    enum verdict v;
    uint64_t bytes, freed;
};

struct summary {
    struct ckpt_clean_opts co;   /* dry run, --min-age, no archive limit */
    uint64_t runs[V_N], bytes[V_N];
    uint64_t free_runs, free_bytes;
    int by_run;                  /* --by-run: rows kept, one per run */
    int tree;                    /* --tree: runs listed (as plain ls)
                                    and judged; the counts are totals */
    struct by_run *rows;
    size_t nrows;                /* rows; --tree: runs counted */
    uint64_t tree_bytes;         /* --tree: their bytes */
};

struct ls_item {
    char *name;                  /* owned: RUN as shown */
    char *key;                   /* owned */
    struct ckpt_storage *st;     /* borrowed */
    int ok;                      /* run loaded and looks like a run */
    int explicit;                /* named on the command line */
    int arrays_too;              /* -l */
    cJSON **arrays;              /* -l: per checkpoint, or NULL */
    cJSON *unaccounted;          /* -l: [{path, bytes, files}] of what
                                    nothing accounts for, or NULL */
    struct ckpt_run run;
    struct ckpt_err err;
    struct summary *sum;         /* --summary, or NULL */
    struct ckpt_clean_item judged; /* --summary: clean's verdict */
    int was_judged;              /* judged holds a verdict to release */
};

static int add_array(void *ud, const char *item,
                     const struct ckpt_orbax_array *a)
{
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
    char *name = *item ? ckpt_xasprintf("%s.%s", item, a->name)
                       : ckpt_xstrdup(a->name);
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "dtype", a->dtype->name);
    for (int d = 0; d < a->ndim; d++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)a->shape[d]));
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddNumberToObject(o, "bytes", (double)a->nbytes);
    cJSON_AddItemToArray(ud, o);
    free(name);
    return 0;
}

/* -l: the arrays of each complete Orbax checkpoint (metadata only). */
static void load_arrays(struct ls_item *it, struct ckpt_tree *tree)
{
    it->arrays = ckpt_xcalloc(it->run.n + 1, sizeof(*it->arrays));
    for (size_t i = 0; i < it->run.n; i++) {
        const struct ckpt_checkpoint *c = &it->run.ckpts[i];
        struct ckpt_err err = CKPT_ERR_INIT;
        if (c->format != CKPT_FMT_ORBAX || !c->complete)
            continue;
        it->arrays[i] = cJSON_CreateArray();
        if (ckpt_orbax_tree_arrays(tree, c->dir, add_array, it->arrays[i],
                                   &err) != 0)
            cli_errorf("%s/%s: %s", it->name, c->name, err.msg);
    }
}

static int add_unaccounted(void *ud, const char *path, uint64_t size,
                           size_t n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddNumberToObject(o, "bytes", (double)size);
    cJSON_AddNumberToObject(o, "files", (double)n);
    cJSON_AddItemToArray(ud, o);
    return 0;
}

static void load(void *arg)
{
    struct ls_item *it = arg;
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    struct ckpt_tree *tree;
    if (ckpt_run_load(it->st, it->key, 0, &sb, &status, &tree, &it->run,
                      &it->err) != 0)
        return;
    if (status != CKPT_LOAD_OK) {
        ckpt_err_set(&it->err, CKPT_EFORMAT, "%s: not a directory or archive",
                     it->name);
        return;
    }
    if (it->arrays_too) {
        load_arrays(it, tree);
        it->unaccounted = cJSON_CreateArray();
        ckpt_run_unaccounted_each(&it->run, tree, add_unaccounted,
                                  it->unaccounted);
    }
    ckpt_tree_free(tree);
    it->ok = 1;
}

/* --summary: judge the run exactly as `ckpt clean -n` would (the dry act
 * sets the bytes a delete would free). */
static void judge(void *arg)
{
    struct ls_item *it = arg;
    ckpt_clean_item_init(&it->judged, it->st, it->key, it->name,
                         &it->sum->co);
    ckpt_clean_judge(&it->judged);
    ckpt_clean_act(&it->judged);
    it->was_judged = 1;
}

/* --tree: listed as plain ls lists it, and judged as --summary judges
 * it (which also counts an archive ls cannot open, as an error run). */
static void load_judge(void *arg)
{
    struct ls_item *it = arg;
    load(it);
    judge(it);
}

static int all_complete(const struct ckpt_run *run)
{
    for (size_t i = 0; i < run->n; i++)
        if (!run->ckpts[i].complete)
            return 0;
    return 1;
}

/* The verdict of a judged run; V_NONE for what ls does not list (not a
 * run, not a directory or archive). */
static enum verdict verdict_of(const struct ckpt_clean_item *c)
{
    const char *a = c->action, *why = c->reason.ptr;
    /* ls lists only what looks like a run (clean's live guard comes
     * before that check, so a young "notes" directory says live). */
    if (c->scanned && !ckpt_run_looks_like_run(&c->run))
        return V_NONE;
    if (!strcmp(a, "keep"))
        return all_complete(&c->run) ? V_COMPLETE : V_INCOMPLETE;
    if (!strcmp(a, "would-delete"))
        return V_BAD;
    if (!strcmp(a, "skip") && !strncmp(why, "live:", 5))
        return V_LIVE;
    if (!strcmp(a, "skip") && (!strncmp(why, "does not look like a run", 24)
                               || !strcmp(why, "not a directory or archive")))
        return V_NONE;
    return V_ERROR;
}

/* A judged run's bytes: its files, or an archive's own size. */
static uint64_t judged_bytes(const struct ckpt_clean_item *c)
{
    return c->scanned ? (c->is_archive ? c->sb.size : c->run.size)
         : ckpt_archive_kind_of(c->key) != CKPT_ARCHIVE_NONE
         ? c->sb.size   /* a damaged archive: stat'ed */
         : 0;
}

/* Count one judged run; a run that cannot be judged is named on stderr
 * (the summary row only counts it). */
static void tally(struct ls_item *it)
{
    const struct ckpt_clean_item *c = &it->judged;
    struct summary *sum = it->sum;
    enum verdict v = verdict_of(c);
    if (v == V_NONE)
        return;
    if (v == V_ERROR)
        cli_warnf("%s: cannot judge: %s", it->name, c->reason.ptr);
    uint64_t bytes = judged_bytes(c);
    sum->runs[v]++;
    sum->bytes[v] += bytes;
    if (c->bytes) {
        sum->free_runs++;
        sum->free_bytes += c->bytes;
    }
    if (sum->by_run) {
        sum->rows = ckpt_xreallocarray(sum->rows, sum->nrows + 1,
                                       sizeof(*sum->rows));
        sum->rows[sum->nrows++] = (struct by_run){
            ckpt_xstrdup(it->name), v, bytes, c->bytes };
    }
}

/* Largest first: where the quota went; then by name. */
static int cmp_by_run(const void *a, const void *b)
{
    const struct by_run *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* --by-run: RUN, VERDICT, BYTES, WOULD-FREE per run, largest first,
 * then total<TAB>-<TAB>BYTES<TAB>WOULD-FREE. */
static void print_by_run(struct summary *sum, const struct ckpt_opts *g)
{
    static const char *const head[] = { "RUN", "VERDICT", "BYTES",
                                        "WOULD-FREE" };
    uint64_t bytes = 0;
    if (sum->nrows)
        ckpt_sort(sum->rows, sum->nrows, sizeof(*sum->rows), cmp_by_run);
    for (size_t i = 0; i <= sum->nrows; i++) {
        const struct by_run *r = i < sum->nrows ? &sum->rows[i] : NULL;
        uint64_t b = r ? r->bytes : bytes, f = r ? r->freed
                                                 : sum->free_bytes;
        bytes += r ? r->bytes : 0;
        if (g->json) {
            cJSON *o = cli_json_row("summary");
            if (r)
                cJSON_AddStringToObject(o, "run", r->name);
            cJSON_AddStringToObject(o, "verdict",
                                    r ? verdict_name[r->v] : "total");
            cJSON_AddNumberToObject(o, "runs", r ? 1 : (double)sum->nrows);
            cJSON_AddNumberToObject(o, "bytes", (double)b);
            cJSON_AddNumberToObject(o, "freed", (double)f);
            cli_out_json(o);
        } else {
            char bs[32], fs[32];
            cli_out_header(4, head);
            const char *row[] = { r ? r->name : "total",
                                  r ? verdict_name[r->v] : "-",
                                  cli_fmt_bytes(b, bs, sizeof(bs)),
                                  cli_fmt_bytes(f, fs, sizeof(fs)) };
            cli_out_tsv(4, row);
        }
        if (r)
            free(r->name);
    }
    free(sum->rows);
    sum->rows = NULL;
    sum->nrows = 0;
}

static void summary_row(const char *what, uint64_t runs, uint64_t bytes)
{
    char r[32], b[32], h[32];
    snprintf(r, sizeof(r), "%llu", (unsigned long long)runs);
    snprintf(b, sizeof(b), "%llu", (unsigned long long)bytes);
    const char *f[] = { what, r, b, ckpt_fmt_size(bytes, h, sizeof(h)) };
    cli_out_tsv(4, f);
}

static void print_summary(const struct summary *sum,
                          const struct ckpt_opts *g)
{
    uint64_t runs = 0, bytes = 0;
    for (int v = 0; v <= V_N + 1; v++) {
        const char *what = v < V_N ? verdict_name[v]
                         : v == V_N ? "total" : "would-free";
        uint64_t r = v < V_N ? sum->runs[v] : v == V_N ? runs
                   : sum->free_runs;
        uint64_t b = v < V_N ? sum->bytes[v] : v == V_N ? bytes
                   : sum->free_bytes;
        if (v < V_N) {
            runs += r;
            bytes += b;
        }
        if (!g->json) {
            static const char *const head[] = { "VERDICT", "RUNS", "BYTES",
                                                "SIZE" };
            cli_out_header(4, head);
            summary_row(what, r, b);
            continue;
        }
        cJSON *o = cli_json_row("summary");
        cJSON_AddStringToObject(o, "verdict", what);
        cJSON_AddNumberToObject(o, "runs", (double)r);
        cJSON_AddNumberToObject(o, "bytes", (double)b);
        cli_out_json(o);
    }
}

/* A LOCATION or run that cannot be read: its row (as clean's error row),
 * said once, on stdout; under --summary (whose rows are counts) a
 * message. */
static void ls_error(const char *name, const char *msg,
                     const struct ckpt_opts *g, const struct summary *sum)
{
    if (sum && !sum->tree) {
        cli_errorf("%s", msg);
        return;
    }
    if (g->json) {
        cJSON *o = cli_json_row("run");
        cJSON_AddStringToObject(o, "action", "error");
        cJSON_AddStringToObject(o, "run", name);
        cJSON_AddStringToObject(o, "reason", msg);
        cli_out_json(o);
        return;
    }
    char *state = ckpt_xasprintf("error: %s", msg);
    if (sum) {
        const char *f[] = { name, state, "-", "-" };
        cli_out_header(4, tree_header);
        cli_out_tsv(4, f);
    } else {
        const char *f[] = { name, "-", "-", "-", state, "-", "-" };
        cli_out_header(7, ls_header);
        cli_out_tsv(7, f);
    }
    free(state);
}

static void print_arrays(const struct ls_item *it, size_t i)
{
    const cJSON *a;
    if (!it->arrays || !it->arrays[i])
        return;
    cJSON_ArrayForEach(a, it->arrays[i]) {
        struct ckpt_buf shape = CKPT_BUF_INIT;
        const cJSON *d;
        char bytes[32];
        int k = 0;
        ckpt_buf_addch(&shape, '[');
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(a, "shape"))
            ckpt_buf_addf(&shape, "%s%.0f", k++ ? "," : "", d->valuedouble);
        ckpt_buf_addch(&shape, ']');
        cli_fmt_bytes((uint64_t)cJSON_GetObjectItem(a, "bytes")->valuedouble,
                      bytes, sizeof(bytes));
        const char *f[] = { it->name, it->run.ckpts[i].name, "array",
                            cJSON_GetObjectItem(a, "name")->valuestring,
                            cJSON_GetObjectItem(a, "dtype")->valuestring,
                            shape.ptr, bytes };
        cli_out_tsv(7, f);
        ckpt_buf_release(&shape);
    }
}

static void free_arrays(struct ls_item *it)
{
    for (size_t i = 0; it->arrays && i < it->run.n; i++)
        cJSON_Delete(it->arrays[i]);
    free(it->arrays);
    it->arrays = NULL;
    cJSON_Delete(it->unaccounted);
    it->unaccounted = NULL;
}

/* -l: a row per file nothing accounts for (a run holding one is never
 * deleted): RUN, the file, '-', '-', the state, its bytes, the number of
 * such files it stands for (a checkpoint's first one stands for all). */
static void print_unaccounted(const struct ls_item *it)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, it->unaccounted) {
        char bytes[32], files[32];
        cli_fmt_bytes((uint64_t)cJSON_GetObjectItem(o, "bytes")->valuedouble,
                      bytes, sizeof(bytes));
        snprintf(files, sizeof(files), "%.0f", cJSON_GetObjectItem(
                     o, "files")->valuedouble);
        const char *f[] = { it->name, cJSON_GetObjectItem(o, "path")->
                            valuestring, "-", "-", "unaccounted: no "
                            "checkpoint layout or debris rule covers it",
                            bytes, files };
        cli_out_tsv(7, f);
    }
}

/* --tree: the run's row, its verdict and what clean would free judged
 * as --by-run judges them (a run that cannot be judged says why there),
 * then a row per checkpoint, its state as plain ls says it. Counts the
 * run into the total. */
static void print_tree(const struct ls_item *it, const struct ckpt_opts *g)
{
    const struct ckpt_clean_item *c = &it->judged;
    static const struct ckpt_run none;
    const struct ckpt_run *run = it->ok ? &it->run : &none;
    struct summary *sum = it->sum;
    enum verdict v = verdict_of(c);
    /* A LOCATION that is one checkpoint (not a run) is listed as plain
     * ls lists it; clean judges runs, so it has no verdict and is left
     * out of the total, as du leaves it out. */
    int judged = v != V_NONE;
    uint64_t bytes = judged ? judged_bytes(c) : run->size;
    char *verdict = !judged ? ckpt_xstrdup("-")
                  : v == V_ERROR ? ckpt_xasprintf("error: %s", c->reason.ptr)
                  : ckpt_xstrdup(verdict_name[v]);
    char bs[32], fs[32];
    if (judged) {
        sum->nrows++;
        sum->tree_bytes += bytes;
        sum->free_bytes += c->bytes;
    }
    if (g->json) {
        cJSON *o = cli_json_row("run");
        cJSON_AddStringToObject(o, "run", it->name);
        if (judged)
            cJSON_AddStringToObject(o, "verdict", verdict_name[v]);
        if (v == V_ERROR)
            cJSON_AddStringToObject(o, "reason", c->reason.ptr);
        cJSON_AddNumberToObject(o, "bytes", (double)bytes);
        cJSON_AddNumberToObject(o, "files", (double)run->nfiles);
        if (judged)
            cJSON_AddNumberToObject(o, "freed", (double)c->bytes);
        cJSON_AddItemToObject(o, "checkpoints",
                              cli_json_checkpoints(run, 1));
        cli_out_json(o);
        free(verdict);
        return;
    }
    cli_out_header(4, tree_header);
    const char *row[] = { it->name, verdict,
                          cli_fmt_bytes(bytes, bs, sizeof(bs)),
                          judged ? cli_fmt_bytes(c->bytes, fs, sizeof(fs))
                                 : "-" };
    cli_out_tsv(4, row);
    free(verdict);
    for (size_t i = 0; i < run->n; i++) {
        const struct ckpt_checkpoint *k = &run->ckpts[i];
        char *name = ckpt_xasprintf("%s%s", i + 1 < run->n ? TREE_MID
                                    : TREE_END, k->name);
        char *state = k->complete ? ckpt_xstrdup("complete")
                    : ckpt_xasprintf("%s: %s", k->unknown ? "unknown"
                                     : "incomplete", k->why);
        const char *f[] = { name, state,
                            cli_fmt_bytes(k->size, bs, sizeof(bs)), "-" };
        cli_out_tsv(4, f);
        free(name);
        free(state);
    }
}

/* --tree: after every LOCATION, --by-run's total row. */
static void print_tree_total(const struct summary *sum,
                             const struct ckpt_opts *g)
{
    if (g->json) {
        cJSON *o = cli_json_row("summary");
        cJSON_AddStringToObject(o, "verdict", "total");
        cJSON_AddNumberToObject(o, "runs", (double)sum->nrows);
        cJSON_AddNumberToObject(o, "bytes", (double)sum->tree_bytes);
        cJSON_AddNumberToObject(o, "freed", (double)sum->free_bytes);
        cli_out_json(o);
        return;
    }
    char bs[32], fs[32];
    const char *row[] = { "total", "-",
                          cli_fmt_bytes(sum->tree_bytes, bs, sizeof(bs)),
                          cli_fmt_bytes(sum->free_bytes, fs, sizeof(fs)) };
    cli_out_header(4, tree_header);
    cli_out_tsv(4, row);
}

static void print_run(const struct ls_item *it, const struct ckpt_opts *g)
{
    if (it->sum && it->sum->tree) {
        print_tree(it, g);
        return;
    }
    if (it->sum) {
        tally((struct ls_item *)it);
        return;
    }
    char step[32], bytes[32], files[32];
    if (g->json) {
        cJSON *o = cli_json_row("run");
        cJSON_AddStringToObject(o, "run", it->name);
        cJSON_AddNumberToObject(o, "bytes", (double)it->run.size);
        cJSON_AddNumberToObject(o, "files", (double)it->run.nfiles);
        cJSON *cks = cli_json_checkpoints(&it->run, 1);
        for (size_t i = 0; it->arrays && i < it->run.n; i++)
            if (it->arrays[i])
                cJSON_AddItemToObject(cJSON_GetArrayItem(cks, (int)i),
                                      "arrays", cJSON_Duplicate(
                                          it->arrays[i], 1));
        cJSON_AddItemToObject(o, "checkpoints", cks);
        if (it->unaccounted)
            cJSON_AddItemToObject(o, "unaccounted",
                                  cJSON_Duplicate(it->unaccounted, 1));
        cli_out_json(o);
        return;
    }
    cli_out_header(7, ls_header);
    if (!it->run.n) {
        cli_fmt_bytes(it->run.size, bytes, sizeof(bytes));
        snprintf(files, sizeof(files), "%llu",
                 (unsigned long long)it->run.nfiles);
        const char *f[] = { it->name, "-", "-", "-", "no checkpoints", bytes,
                            files };
        cli_out_tsv(7, f);
        print_unaccounted(it);
        return;
    }
    for (size_t i = 0; i < it->run.n; i++) {
        const struct ckpt_checkpoint *c = &it->run.ckpts[i];
        struct ckpt_buf state = CKPT_BUF_INIT;
        if (c->complete)
            ckpt_buf_addstr(&state, "complete");
        else
            ckpt_buf_addf(&state, "%s: %s",
                          c->unknown ? "unknown" : "incomplete", c->why);
        if (c->step >= 0)
            snprintf(step, sizeof(step), "%lld", (long long)c->step);
        else
            snprintf(step, sizeof(step), "-");
        cli_fmt_bytes(c->size, bytes, sizeof(bytes));
        snprintf(files, sizeof(files), "%llu", (unsigned long long)c->nfiles);
        const char *f[] = { it->name, c->name, step,
                            ckpt_format_name(c->format), state.ptr, bytes,
                            files };
        cli_out_tsv(7, f);
        ckpt_buf_release(&state);
        print_arrays(it, i);
    }
    print_unaccounted(it);
}

struct expand {
    struct ls_item **items;
    size_t *n;
    const char *parent;           /* display prefix */
    const char *key;
    struct ckpt_storage *st;
    int arrays_too;
    struct summary *sum;
};

static int child_cb(void *ud, const struct ckpt_entry *e)
{
    struct expand *x = ud;
    if (e->type != CKPT_ENTRY_DIR &&
        !(e->type == CKPT_ENTRY_FILE &&
          ckpt_archive_kind_of(e->name) != CKPT_ARCHIVE_NONE))
        return 0;
    *x->items = ckpt_xreallocarray(*x->items, *x->n + 1, sizeof(**x->items));
    struct ls_item *it = &(*x->items)[(*x->n)++];
    memset(it, 0, sizeof(*it));
    it->name = ckpt_path_join(x->parent, e->name);
    it->key = ckpt_path_join(x->key, e->name);
    it->st = x->st;
    it->arrays_too = x->arrays_too;
    it->sum = x->sum;
    return 0;
}

static int cmp_item(const void *a, const void *b)
{
    return strcmp(((const struct ls_item *)a)->name,
                  ((const struct ls_item *)b)->name);
}

static void load_all(struct ls_item *items, size_t n, int jobs,
                     void (*load)(void *))
{
    struct ckpt_pool *pool = jobs > 1 ? ckpt_pool_new(jobs, (size_t)jobs * 2)
                                      : NULL;
    for (size_t i = 0; i < n; i++) {
        if (pool)
            ckpt_pool_submit(pool, load, &items[i]);
        else
            load(&items[i]);
    }
    ckpt_pool_free(pool);
}

/* An object store has no directories: a prefix with no objects under it
 * and one never written are the same thing, so either is an empty listing
 * (exit 0, no rows) as long as the bucket itself is there. A local path
 * that does not exist stays an error; an empty local directory lists
 * fine on its own. Sets err when the bucket check itself fails. */
static int empty_bucket_prefix(struct ckpt_storage *st, struct ckpt_err *err)
{
    if (ckpt_storage_is_local(st))
        return 0;
    struct ckpt_stat root;
    return ckpt_storage_stat(st, "", &root, err) == 0;
}

/* List one LOCATION. Returns 0, or 1 if something failed. */
static int ls_one(const char *arg, struct storages *stores,
                  const struct ckpt_opts *g, int arrays_too,
                  struct summary *sum)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    if (ckpt_loc_parse(&loc, arg, &err) != 0 ||
        cli_storages_get(stores, &loc, g, &st, &err) != 0) {
        ls_error(arg, err.msg, g, sum);
        ckpt_loc_release(&loc);
        return 1;
    }
    struct ls_item top = { .name = (char *)arg, .key = loc.key, .st = st,
                           .explicit = 1, .arrays_too = arrays_too,
                           .sum = sum };
    load(&top);
    int failed = 0;
    int counts = sum && !sum->tree;   /* --summary: no rows per run */
    /* A LOCATION that is itself one checkpoint (a checkpoint directory, or
     * an archive holding one) is listed as that checkpoint. */
    int one = top.ok && top.run.n == 1 && top.run.ckpts[0].root;
    if (top.ok && (ckpt_run_looks_like_run(&top.run) || one)) {
        if (sum)
            judge(&top);
        print_run(&top, g);
    } else if (!top.ok && top.err.code == CKPT_EUNSAFE) {
        /* A file it will not read (a FIFO where .metadata belongs): the
         * run cannot be judged, and is no directory of runs either;
         * --summary counts it as an error run. */
        if (counts) {
            judge(&top);
            tally(&top);    /* (names it) */
        } else {
            ls_error(arg, top.err.msg, g, sum);
        }
        failed = 1;
    } else if (!top.ok && top.err.code == CKPT_ENOTFOUND) {
        if (!empty_bucket_prefix(st, &err)) {
            ls_error(arg, err.code ? err.msg : top.err.msg, g, sum);
            failed = 1;
        }
    } else {
        struct ls_item *items = NULL;
        size_t n = 0;
        struct expand x = { &items, &n, arg, loc.key, st, arrays_too,
                            sum };
        if (ckpt_storage_list(st, loc.key, 0, child_cb, &x, &err) != 0) {
            ls_error(arg, top.ok ? err.msg : top.err.msg, g, sum);
            failed = 1;
        }
        if (n)
            ckpt_sort(items, n, sizeof(*items), cmp_item);
        load_all(items, n, cli_default_jobs(g, (int)n, 8),
                 counts ? judge : sum ? load_judge : load);
        for (size_t i = 0; i < n; i++) {
            if (counts) {
                /* Judged by clean's code, which reads the run itself. */
                tally(&items[i]);
            } else if (items[i].ok &&
                       ckpt_run_looks_like_run(&items[i].run))
                print_run(&items[i], g);
            else if (!items[i].ok && items[i].err.code != CKPT_EFORMAT) {
                ls_error(items[i].name, items[i].err.msg, g, sum);
                failed = 1;
            } else if (sum && verdict_of(&items[i].judged) != V_NONE) {
                /* --tree: an archive ls cannot open, judged (as
                 * --summary counts it) an error run. */
                print_run(&items[i], g);
            }
            free_arrays(&items[i]);
            if (items[i].was_judged)
                ckpt_clean_item_release(&items[i].judged);
            if (items[i].ok)
                ckpt_run_release(&items[i].run);
            free(items[i].name);
            free(items[i].key);
        }
        free(items);
    }
    free_arrays(&top);
    if (top.was_judged)
        ckpt_clean_item_release(&top.judged);
    if (top.ok)
        ckpt_run_release(&top.run);
    ckpt_loc_release(&loc);
    return failed;
}

int cmd_ls(int argc, char **argv)
{
    struct ckpt_opts g = { .takes = CLI_TAKES_JOBS };
    int arrays_too = 0, summarize = 0, by_run = 0, tree = 0;
    const char *min_age = NULL;
    struct summary sum = { .co = { .min_age = 86400, .dry_run = 1 } };
    const struct option opts[] = {
        OPT_BOOL_('l', "long", &arrays_too,
                  "also list each Orbax checkpoint's arrays, and each file "
                  "nothing accounts for"),
        OPT_BOOL_(0, "summary", &summarize, "runs and bytes per verdict "
                  "(complete, incomplete, bad, live, error) and what "
                  "clean would free"),
        OPT_BOOL_(0, "by-run", &by_run, "--summary: a row per run "
                  "(its bytes, verdict and what clean would free), "
                  "largest first"),
        OPT_BOOL_(0, "tree", &tree, "each run, its verdict and what clean "
                  "would free, and under it its checkpoints' bytes and "
                  "states"),
        OPT_HUMAN_(&g),
        OPT_STR_(0, "min-age", &min_age, "DURATION", "--summary, --tree: "
                 "runs "
                 "written to more recently are live (default 1d, as "
                 "clean)"),
        OPT_END_()
    };
    int n = cli_parse_options(argc, argv, opts, ls_usage, &g);
    if (n == -2)
        return EXIT_OK;
    if (n < 0)
        return EXIT_USAGE;
    if (n == 0) {
        fprintf(stderr, "ckpt ls: error: no LOCATION given\nusage: %s\n",
                ls_usage[0]);
        return EXIT_USAGE;
    }
    if (min_age && ckpt_parse_duration(min_age, &sum.co.min_age) != 0) {
        fprintf(stderr, "ckpt ls: error: --min-age '%s': expected a "
                "duration like 90m, 6h, 2d or seconds\nusage: %s\n",
                min_age, ls_usage[0]);
        return EXIT_USAGE;
    }
    if (by_run && !summarize) {
        fprintf(stderr, "ckpt ls: error: --by-run is a form of --summary: "
                "'ckpt ls --summary --by-run' (or 'ckpt du')\nusage: %s\n",
                ls_usage[0]);
        return EXIT_USAGE;
    }
    sum.by_run = by_run;
    sum.tree = tree;
    if ((summarize || tree) && arrays_too) {
        fprintf(stderr, "ckpt ls: error: %s and -l exclude each "
                "other\nusage: %s\n", tree ? "--tree" : "--summary",
                ls_usage[0]);
        return EXIT_USAGE;
    }
    if (summarize && tree) {
        fprintf(stderr, "ckpt ls: error: --summary and --tree exclude each "
                "other ('ckpt du' for a row per run)\nusage: %s\n",
                ls_usage[0]);
        return EXIT_USAGE;
    }
    cli_init_output(&g);
    struct storages stores = { 0 };
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed |= ls_one(argv[i], &stores, &g, arrays_too,
                         summarize || tree ? &sum : NULL);
    if (tree)
        print_tree_total(&sum, &g);
    else if (summarize && by_run)
        print_by_run(&sum, &g);
    else if (summarize)
        print_summary(&sum, &g);
    cli_storages_release(&stores);
    return failed ? EXIT_FAILED : EXIT_OK;
}

/* `ckpt du LOCATION...`: `ckpt ls --summary --by-run LOCATION...`, the
 * name du users look for (where did the quota go). */
int cmd_du(int argc, char **argv)
{
    char **av = ckpt_xcalloc((size_t)argc + 3, sizeof(*av));
    av[0] = "ls";
    av[1] = "--summary";
    av[2] = "--by-run";
    for (int i = 1; i < argc; i++)
        av[i + 2] = argv[i];
    int rc = cmd_ls(argc + 2, av);
    free(av);
    return rc;
}
