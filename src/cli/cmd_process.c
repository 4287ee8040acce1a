/*
 * cmd_process.c - `ckpt process`: the whole janitor job for each run
 * (include/ckpt/process.h does the work): options, the batched W&B
 * lookup, rows, JSON events, log lines and progress.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/clean.h"
#include "ckpt/process.h"
#include "ckpt/unshard.h"
#include "ckpt/text.h"
#include "ckpt/upload.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "filter.h"
#include "runs.h"

static const char *const process_usage[] = {
    "ckpt process [options] SRC... --dest DEST",
    "",
    "For each run (SRC: a run directory or archive, or a directory or",
    "prefix holding runs), in order: judge it with clean's rules (a bad",
    "run is deleted; live runs, see --min-age, and non-runs are skipped);",
    "find its W&B path (asked now, as map-wandb does, unless --wandb-map",
    "or --no-wandb); unshard its sharded steps (not step 0) straight to",
    "DEST/ENTITY/PROJECT/RUN_ID/stepN-unsharded/ (no local copy); upload",
    "it uncompressed (archives member by member) with its logs there;",
    "verify every file at DEST by checksum; delete the source. --tmp-dir:",
    "scratch for a compressed archive's step. State and leases live under",
    "DEST/.ckpt-process/: a rerun finishes what a crash left, and many",
    "workers (cron, GNU parallel, Slurm arrays) never take the same run.",
    "Rows: process RUN DEST FILES BYTES STEPS FREED SECONDS, delete|skip",
    "RUN REASON (a run an earlier pass finished: skip, 'already",
    "processed'), error RUN PHASE: REASON; -n: would-VERB; then a total",
    "row. Exit 0 when every run was processed, deleted or legitimately",
    "skipped (live, leased, done before, not a run), 1 when one failed or",
    "had no W&B path.",
    "-j N runs are worked on at once (default 4; 1: one after the other;",
    "--runs N is its older spelling); --transfers (default 32, files in",
    "flight) and the upload memory are shared among them, so rows of",
    "different runs may interleave.",
    "SIGINT, SIGTERM, SIGHUP: no new work, transfers in flight cut, leases",
    "released; exit 130, 143, 129 (rerun to resume).",
    "examples:",
    "  ckpt process -n /scratch/runs --dest s3://b/x    what it would do",
    "  ckpt process /scratch/runs --dest s3://b/x       do it (cron-safe)",
    "  ckpt process --keep-source RUN --dest gs://b/x   copy, delete nothing",
    NULL
};

struct pr_opts {
    const char *dest, *wandb_map, *logs, *state_dir, *min_age, *unshard;
    const char *unshard_format;
    const char *rank_values;
    const char *lease_ttl;
    const char *batch;
    int runs;                    /* --runs: -j's older spelling */
    int transfers;               /* --transfers: files in flight */
    int no_wandb, keep_bad, keep_source, keep_archive, step0;
    int drop_sharded, drop_incomplete;
    uint64_t max_archive, spool_limit, bwlimit;
    struct cli_filter_opts filters;
};

struct ui {
    const struct ckpt_opts *g;
    struct progress *prog;       /* no terminal: periodic plain lines */
    uint64_t items, bytes;       /* uploaded so far, all runs */
    /* The progress line (stderr is a terminal), as rclone's -P: runs
     * done of the queue, bytes copied and freed, rate, ETA, the runs in
     * flight; redrawn on every event and twice a second. */
    int line;
    pthread_mutex_t mu;
    size_t total, done;
    uint64_t freed;
    double start;
    char **flight;               /* owned: runs started, not finished */
    size_t nflight;
    pthread_t ticker;
    pthread_cond_t tick;
    int stop;
    /* Archives being read (spooled): bytes read of their size, since
     * when, and when the line was last drawn for them. */
    struct arcread {
        char *name;
        uint64_t read, size;
        double t0;
    } *arcs;
    size_t narcs;
    double arc_drawn;
    /* Every run's row, for the end: how many were skipped as live, and
     * what each run processed uploaded and freed. */
    size_t rows, live;
    /* Runs whose "lease ok: acquired" line waits for their next event:
     * a run skipped at judge (not a run, live) is then said once, by its
     * row, on every cron pass, instead of three lines. */
    char **held;                 /* owned run names */
    size_t nheld;
    struct ran {
        char *run;               /* owned */
        uint64_t bytes, freed;
        int deleted;             /* a bad run, deleted */
    } *ran;
    size_t nran;
};

/* ---- output ---- */

/* A run's verb (docs/output.md): a run an earlier pass finished is
 * skipped, with the reason saying so. */
static const char *run_verb(const struct ckpt_process_event *ev, int dry)
{
    switch (ev->status) {
    case CKPT_PROC_OK:
        return "process";
    case CKPT_PROC_WOULD:
        return "would-process";
    case CKPT_PROC_DELETED:
        return dry ? "would-delete" : "delete";
    case CKPT_PROC_FAILED:
        return "error";
    default:
        return "skip";
    }
}

/* A phase's status word: ok, done (by an earlier pass), skip, error,
 * would (-n). */
static const char *phase_status(enum ckpt_process_status st)
{
    switch (st) {
    case CKPT_PROC_OK:
        return "ok";
    case CKPT_PROC_DONE:
        return "done";
    case CKPT_PROC_FAILED:
        return "error";
    case CKPT_PROC_WOULD:
        return "would";
    default:
        return "skip";
    }
}

/* A done run's reason: what the earlier pass did, and where. */
static char *run_reason(const struct ckpt_process_event *ev)
{
    if (ev->status != CKPT_PROC_DONE || !ev->dest)
        return ckpt_xstrdup(ev->detail);
    return ckpt_xasprintf("%s: %s", ev->detail, ev->dest);
}

static void row(const struct ckpt_process_event *ev, int dry)
{
    char f3[32], f4[32], f5[32], f6[32], f7[32];
    const char *act = run_verb(ev, dry);
    const char *d = ev->dest ? ev->dest : "-";
    cli_fmt_bytes(ev->bytes, f4, sizeof(f4));
    cli_fmt_bytes(ev->freed, f6, sizeof(f6));
    snprintf(f3, sizeof(f3), "%llu", (unsigned long long)ev->files);
    snprintf(f5, sizeof(f5), "%llu", (unsigned long long)ev->steps);
    snprintf(f7, sizeof(f7), "%.1f", ev->seconds);
    if (ev->status == CKPT_PROC_OK) {
        /* A ninth column only when the source keeps something. */
        const char *f[] = { act, ev->run, d, f3, f4, f5, f6, f7,
                            ev->detail };
        cli_out_tsv(*ev->detail ? 9 : 8, f);
        return;
    }
    if (ev->status == CKPT_PROC_WOULD) {
        const char *f[] = { act, ev->run, d, f3, f4, f5 };
        cli_out_tsv(6, f);
        return;
    }
    char *why = run_reason(ev);
    const char *f[] = { act, ev->run, why };
    cli_out_tsv(3, f);
    free(why);
}

static void json_event(const struct ckpt_process_event *ev, int dry)
{
    int run = ev->phase == CKPT_PROC_RUN;
    cJSON *o = cli_json_row(run ? "run" : "phase");
    if (run) {
        cJSON_AddStringToObject(o, "action", run_verb(ev, dry));
    } else {
        cJSON_AddStringToObject(o, "phase",
                                ckpt_process_phase_name(ev->phase));
        cJSON_AddStringToObject(o, "status", phase_status(ev->status));
    }
    cJSON_AddStringToObject(o, "run", ev->run);
    cJSON_AddStringToObject(o, "id", ev->id);
    if (ev->dest)
        cJSON_AddStringToObject(o, "dest", ev->dest);
    char *why = run ? run_reason(ev) : ckpt_xstrdup(ev->detail);
    if (*why)
        cJSON_AddStringToObject(o, "reason", why);
    free(why);
    cJSON_AddNumberToObject(o, "files", (double)ev->files);
    cJSON_AddNumberToObject(o, "bytes", (double)ev->bytes);
    if (run) {
        cJSON_AddNumberToObject(o, "steps", (double)ev->steps);
        cJSON_AddNumberToObject(o, "freed", (double)ev->freed);
        cJSON_AddNumberToObject(o, "seconds", ev->seconds);
    }
    cli_out_json(o);
}

/* ---- the progress line ---- */

static void fmt_secs(double s, char *buf, size_t len)
{
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, len, "%lds", t);
    else if (t < 3600)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t % 3600 / 60);
}

/* The line, from ui's counters (ui->mu held). ETA: the runs left at the
 * pace of the runs done so far (their sizes are not known up front). */
static char *status_text(const struct ui *ui)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    char cp[32], fr[32], rate[32], eta[32] = "-";
    double el = ckpt_now() - ui->start;
    ckpt_fmt_size(ui->bytes, cp, sizeof(cp));
    ckpt_fmt_size(ui->freed, fr, sizeof(fr));
    ckpt_fmt_size(el > 0 ? (uint64_t)((double)ui->bytes / el) : 0, rate,
                  sizeof(rate));
    if (ui->done)
        fmt_secs(el * (double)(ui->total - ui->done) / (double)ui->done,
                 eta, sizeof(eta));
    ckpt_buf_addf(&b, "process: %zu/%zu runs, %s copied, %s freed, %s/s, "
                  "ETA %s, in flight:", ui->done, ui->total, cp, fr, rate,
                  eta);
    for (size_t i = 0; i < ui->nflight; i++) {
        ckpt_buf_addf(&b, "%s %s", i ? "," : "", ui->flight[i]);
        for (size_t k = 0; k < ui->narcs; k++) {
            const struct arcread *a = &ui->arcs[k];
            if (strcmp(a->name, ui->flight[i]) != 0)
                continue;
            char rd[32], sz[32], ar[32];
            double t = ckpt_now() - a->t0;
            ckpt_buf_addf(&b, " (read %s of %s, %s/s)",
                          ckpt_fmt_size(a->read, rd, sizeof(rd)),
                          ckpt_fmt_size(a->size, sz, sizeof(sz)),
                          ckpt_fmt_size(t > 0 ? (uint64_t)((double)a->read
                                                           / t) : 0,
                                        ar, sizeof(ar)));
        }
    }
    if (!ui->nflight)
        ckpt_buf_addstr(&b, " none");
    return ckpt_buf_detach(&b, NULL);
}

static void redraw(struct ui *ui)
{
    pthread_mutex_lock(&ui->mu);
    char *t = status_text(ui);
    pthread_mutex_unlock(&ui->mu);
    cli_status_show(t);
    free(t);
}

/* The run's last path component, escaped: what the line names it by. */
static char *short_name(const char *run)
{
    size_t n = strlen(run);
    while (n > 1 && run[n - 1] == '/')
        n--;
    const char *b = run + n;
    while (b > run && b[-1] != '/')
        b--;
    char *cut = ckpt_xasprintf("%.*s", (int)(run + n - b), b);
    char *esc = ckpt_escape(cut);
    free(cut);
    return esc;
}

/* A run's first event puts it in flight; its row takes it out. */
static void track(struct ui *ui, const struct ckpt_process_event *ev)
{
    char *name = short_name(ev->run);
    size_t i = 0;
    pthread_mutex_lock(&ui->mu);
    while (i < ui->nflight && strcmp(ui->flight[i], name) != 0)
        i++;
    if (ev->phase != CKPT_PROC_RUN && i == ui->nflight) {
        ui->flight = ckpt_xreallocarray(ui->flight, ui->nflight + 1,
                                        sizeof(*ui->flight));
        ui->flight[ui->nflight++] = name;
        name = NULL;
    } else if (ev->phase == CKPT_PROC_RUN) {
        if (i < ui->nflight) {
            free(ui->flight[i]);
            memmove(ui->flight + i, ui->flight + i + 1,
                    (ui->nflight - i - 1) * sizeof(*ui->flight));
            ui->nflight--;
        }
        ui->done++;
        ui->freed += ev->freed;
    }
    pthread_mutex_unlock(&ui->mu);
    free(name);
}

static void *tick_main(void *arg)
{
    struct ui *ui = arg;
    pthread_mutex_lock(&ui->mu);
    while (!ui->stop) {
        struct timespec ts;
        ckpt_deadline_in(&ts, 500000000L);
        if (pthread_cond_timedwait(&ui->tick, &ui->mu, &ts) == ETIMEDOUT &&
            !ui->stop) {
            pthread_mutex_unlock(&ui->mu);
            redraw(ui);
            pthread_mutex_lock(&ui->mu);
        }
    }
    pthread_mutex_unlock(&ui->mu);
    return NULL;
}

static void line_start(struct ui *ui, size_t total)
{
    ui->total = total;
    ui->start = ckpt_now();
    redraw(ui);
    if (pthread_create(&ui->ticker, NULL, tick_main, ui) != 0)
        ui->stop = -1;  /* no ticker: events still redraw */
}

/* The last line stays, with everything counted. */
static void line_end(struct ui *ui)
{
    pthread_mutex_lock(&ui->mu);
    int started = ui->stop == 0;
    ui->stop = 1;
    pthread_cond_signal(&ui->tick);
    pthread_mutex_unlock(&ui->mu);
    if (started)
        pthread_join(ui->ticker, NULL);
    redraw(ui);
    cli_status_end(1);
    for (size_t i = 0; i < ui->nflight; i++)
        free(ui->flight[i]);
    free(ui->flight);
    for (size_t i = 0; i < ui->narcs; i++)
        free(ui->arcs[i].name);
    free(ui->arcs);
}

/* A run's row, counted for the end (any thread). */
static void count_row(struct ui *ui, const struct ckpt_process_event *ev)
{
    pthread_mutex_lock(&ui->mu);
    ui->rows++;
    ui->live += ev->status == CKPT_PROC_SKIPPED &&
                !strncmp(ev->detail, "live:", 5);
    if ((ev->status == CKPT_PROC_OK || ev->status == CKPT_PROC_WOULD ||
         ev->status == CKPT_PROC_DELETED) && (ev->bytes || ev->freed)) {
        ui->ran = ckpt_xreallocarray(ui->ran, ui->nran + 1,
                                     sizeof(*ui->ran));
        ui->ran[ui->nran++] = (struct ran){
            ckpt_xstrdup(ev->run), ev->bytes, ev->freed,
            ev->status == CKPT_PROC_DELETED };
    }
    pthread_mutex_unlock(&ui->mu);
}

/* Most freed first, then most uploaded, then by name. */
static int cmp_ran(const void *a, const void *b)
{
    const struct ran *x = a, *y = b;
    if (x->freed != y->freed)
        return x->freed < y->freed ? 1 : -1;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return strcmp(x->run, y->run);
}

/* The end, on stderr: per run what it uploaded and freed, most freed
 * first (the rows scrolled past, interleaved, as runs finished), at
 * most 10 lines; then the live hint. */
static void ran_summary(struct ui *ui, const char *min_age)
{
    if (ui->nran > 1 && !ui->g->json) {
        ckpt_sort(ui->ran, ui->nran, sizeof(*ui->ran), cmp_ran);
        for (size_t i = 0; i < ui->nran && i < 10; i++) {
            char b[32], f[32];
            const struct ran *r = &ui->ran[i];
            int dry = ui->g->dry_run;
            ckpt_fmt_size(r->bytes, b, sizeof(b));
            ckpt_fmt_size(r->freed, f, sizeof(f));
            if (r->deleted)
                cli_infof("%s: %s, %s %s", r->run, dry ? "bad, would delete"
                          : "bad, deleted", dry ? "would free" : "freed", f);
            else
                cli_infof("%s: %s %s, %s %s", r->run,
                          dry ? "would upload" : "uploaded", b,
                          dry ? "would free" : "freed", f);
        }
        if (ui->nran > 10)
            cli_infof("... and %zu more runs (see the rows)",
                      ui->nran - 10);
    }
    cli_hint_all_live(ui->rows, ui->live, min_age);
    for (size_t i = 0; i < ui->nheld; i++)
        free(ui->held[i]);
    free(ui->held);
    ui->held = NULL;
    ui->nheld = 0;
    for (size_t i = 0; i < ui->nran; i++)
        free(ui->ran[i].run);
    free(ui->ran);
    ui->ran = NULL;
    ui->nran = 0;
}

/* The log line of a phase event. */
static void log_phase(const struct ckpt_process_event *ev)
{
    cli_infof("%s: %s %s%s%s", ev->run,
              ev->status == CKPT_PROC_WOULD ? "would"
              : ckpt_process_phase_name(ev->phase),
              ev->status == CKPT_PROC_WOULD
              ? ckpt_process_phase_name(ev->phase)
              : phase_status(ev->status),
              *ev->detail ? ": " : "", ev->detail);
}

/* Was run's "lease ok: acquired" held back? Forgets it. */
static int unhold(struct ui *ui, const char *run)
{
    int found = 0;
    pthread_mutex_lock(&ui->mu);
    for (size_t i = 0; i < ui->nheld && !found; i++)
        if (!strcmp(ui->held[i], run)) {
            free(ui->held[i]);
            ui->held[i] = ui->held[--ui->nheld];
            found = 1;
        }
    pthread_mutex_unlock(&ui->mu);
    return found;
}

/* Log lines on stderr: one per phase, but a run that judge skips (not a
 * run, live) gets none: its row says it, and its lease line is dropped
 * (the lease is given back at once). Returns 1 when ev was said or
 * dropped here. */
static int phase_line(struct ui *ui, const struct ckpt_process_event *ev)
{
    if (ev->phase == CKPT_PROC_LEASE && ev->status == CKPT_PROC_OK &&
        !strcmp(ev->detail, "acquired")) {
        pthread_mutex_lock(&ui->mu);
        ui->held = ckpt_xreallocarray(ui->held, ui->nheld + 1,
                                      sizeof(*ui->held));
        ui->held[ui->nheld++] = ckpt_xstrdup(ev->run);
        pthread_mutex_unlock(&ui->mu);
        return 1;
    }
    int held = unhold(ui, ev->run);
    if (ev->phase == CKPT_PROC_JUDGE && ev->status == CKPT_PROC_SKIPPED)
        return 1;
    if (held) {
        struct ckpt_process_event lease = *ev;
        lease.phase = CKPT_PROC_LEASE;
        lease.status = CKPT_PROC_OK;
        lease.detail = "acquired";
        log_phase(&lease);
    }
    log_phase(ev);
    return 1;
}

static void on_event(void *ud, const struct ckpt_process_event *ev)
{
    struct ui *ui = ud;
    int dry = ui->g->dry_run;
    if (ev->phase == CKPT_PROC_RUN) {
        count_row(ui, ev);
        unhold(ui, ev->run);
    }
    if (ui->line)
        track(ui, ev);
    /* Each event once, on one stream (docs/output.md): with --json every
     * phase is a "phase" line on stdout; else a phase is a log line on
     * stderr (under the progress line only with -v, as rclone -P) and
     * the run's row is on stdout. A skip (not a run, live, leased) is
     * said by its row, no warning. */
    if (ui->g->json)
        json_event(ev, dry);
    else if (ev->phase != CKPT_PROC_RUN && (!ui->line || ui->g->verbose))
        phase_line(ui, ev);
    else if (ev->phase == CKPT_PROC_RUN)
        row(ev, dry);
    if (ui->line)
        redraw(ui);
}

/* An archive being read: its bytes and rate join its name on the line,
 * drawn when the read starts and ends and at most 4 times a second in
 * between; gone once it was read. */
static void on_archive(void *ud, const char *run, uint64_t read,
                       uint64_t size)
{
    struct ui *ui = ud;
    if (!ui->line)
        return;
    char *name = short_name(run);
    pthread_mutex_lock(&ui->mu);
    size_t k = 0;
    while (k < ui->narcs && strcmp(ui->arcs[k].name, name) != 0)
        k++;
    int draw = k == ui->narcs || read >= size ||
               ckpt_now() - ui->arc_drawn >= 0.25;
    if (k == ui->narcs) {
        ui->arcs = ckpt_xreallocarray(ui->arcs, ui->narcs + 1,
                                      sizeof(*ui->arcs));
        ui->arcs[k] = (struct arcread){ name, 0, size, ckpt_now() };
        ui->narcs++;
        name = NULL;
    }
    ui->arcs[k].read = read;
    ui->arcs[k].size = size;
    if (draw)
        ui->arc_drawn = ckpt_now();
    pthread_mutex_unlock(&ui->mu);
    if (draw)
        redraw(ui);
    if (read >= size) {
        pthread_mutex_lock(&ui->mu);
        free(ui->arcs[k].name);
        ui->arcs[k] = ui->arcs[--ui->narcs];
        pthread_mutex_unlock(&ui->mu);
    }
    free(name);
}

static void on_progress(void *ud, uint64_t items, uint64_t bytes)
{
    struct ui *ui = ud;
    pthread_mutex_lock(&ui->mu);
    /* The library sums every run's passes; this guards a reset. */
    if (items < ui->items || bytes < ui->bytes)
        ui->items = ui->bytes = 0;
    uint64_t di = items - ui->items, db = bytes - ui->bytes;
    ui->items = items;
    ui->bytes = bytes;
    pthread_mutex_unlock(&ui->mu);
    cli_progress_add(ui->prog, di, db);
}

/* The total row: the runs per verb, then what DEST holds of them and
 * what was freed. Summed over workers by docs/deploy.md's one line. */
static void totals(const struct ckpt_opts *g,
                   const struct ckpt_process_totals *t)
{
    const char *names[] = { "process", "delete", "skip", "error", "files",
                            "bytes", "steps", "freed" };
    uint64_t v[] = { t->processed, t->deleted, t->skipped + t->done,
                     t->failed, t->files, t->bytes, t->steps, t->freed };
    cli_out_total(g->json, g->dry_run, (int)(sizeof(v) / sizeof(v[0])),
                  names, v, t->seconds);
}

/* ---- setup ---- */

static int usage_error(const char *fmt, const char *arg)
{
    fputs("ckpt process: error: ", stderr);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: %s\n", process_usage[0]);
    return -1;
}

static int check_usage(int n, struct pr_opts *po, struct ckpt_process_cfg *c,
                       const struct ckpt_opts *g)
{
    int64_t ttl = 0;
    if (n == 0)
        return usage_error("no SRC given%s", "");
    if (!po->dest)
        return usage_error("--dest DEST is required%s", "");
    if (po->no_wandb && po->wandb_map)
        return usage_error("--no-wandb and --wandb-map exclude each "
                           "other%s", "");
    if (po->min_age && ckpt_parse_duration(po->min_age,
                                           &c->clean.min_age) != 0)
        return usage_error("--min-age '%s': expected a duration like 90m, "
                           "6h, 2d or seconds", po->min_age);
    if (po->lease_ttl && (ckpt_parse_duration(po->lease_ttl, &ttl) != 0 ||
                          ttl < 3))
        return usage_error("--lease-ttl '%s': expected a duration of at "
                           "least 3 s", po->lease_ttl);
    c->lease_ttl = ttl;
    if (po->batch && (!*po->batch || strlen(po->batch) > 64 ||
                      strspn(po->batch, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "abcdefghijklmnopqrstuvwxyz0123456789._-") !=
                      strlen(po->batch)))
        return usage_error("--batch '%s': expected 1 to 64 letters, digits, "
                           "'.', '_' or '-'", po->batch);
    c->batch = po->batch;
    /* -j is the runs at once, as in every command; --runs is its older
     * spelling, kept for the scripts that pass it. */
    if (po->runs && g->jobs && po->runs != g->jobs)
        return usage_error("-j and --runs differ: --runs is -j's older "
                           "spelling (runs at once)%s", "");
    int runs = g->jobs ? g->jobs : po->runs;
    if (runs < 0 || runs > 64)
        return usage_error("-j: expected 1 to 64 runs at once%s", "");
    c->runs = runs;
    const char *u = po->unshard ? po->unshard : "all";
    if (!strcmp(u, "all"))
        c->unshard = CKPT_PROC_UNSHARD_ALL;
    else if (!strcmp(u, "latest"))
        c->unshard = CKPT_PROC_UNSHARD_LATEST;
    else if (!strcmp(u, "none"))
        c->unshard = CKPT_PROC_UNSHARD_NONE;
    else
        return usage_error("--unshard '%s': expected all, latest or none",
                           u);
    const char *f = po->unshard_format ? po->unshard_format : "torch";
    if (!strcmp(f, "torch"))
        c->unshard_format = CKPT_FORMAT_TORCH;
    else if (!strcmp(f, "safetensors"))
        c->unshard_format = CKPT_FORMAT_SAFETENSORS;
    else if (!strcmp(f, "hf"))
        c->unshard_format = CKPT_FORMAT_HF;
    else
        return usage_error("--unshard-format '%s': expected torch, "
                           "safetensors or hf", f);
    if (ckpt_rank_values_parse(po->rank_values, &c->rank_values) != 0)
        return usage_error("unknown --rank-values '%s' (error, rank0 or "
                           "per-rank)", po->rank_values);
    return 0;
}

static int open_loc(struct storages *s, const struct ckpt_opts *g,
                    const char *arg, struct ckpt_loc *loc,
                    struct ckpt_storage **st, struct ckpt_err *err)
{
    if (ckpt_loc_parse(loc, arg, err) != 0)
        return -1;
    return cli_storages_get(s, loc, g, st, err);
}

/* The W&B map: --wandb-map FILE, or asked now for every queued run at
 * once (as `ckpt map-wandb` does). */
static int get_map(struct ckpt_process *p, const struct pr_opts *po,
                   const struct ckpt_opts *g, struct ckpt_wandb_map **map,
                   struct ckpt_err *err)
{
    if (po->no_wandb)
        return 0;
    if (po->wandb_map) {
        struct ckpt_storage_cfg scfg = cli_storage_cfg(g);
        return ckpt_wandb_map_load(map, po->wandb_map, &scfg, err);
    }
    size_t n;
    ckpt_process_ids(p, &n);
    if (!n)
        return 0;
    char **locs = ckpt_xcalloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        locs[i] = ckpt_process_location(p, i);
    char *text = cli_wandb_map_text(locs, (int)n, 0, g);
    int rc = text ? ckpt_wandb_map_parse(map, text, strlen(text), "W&B", err)
                  : ckpt_err_set(err, CKPT_EAUTH, "W&B lookup failed; "
                                 "nothing processed");
    free(text);
    for (size_t i = 0; i < n; i++)
        free(locs[i]);
    free(locs);
    return rc;
}

/* $CKPT_STATE_DIR, $XDG_STATE_HOME/ckpt, ~/.local/state/ckpt (as
 * upload's journals). */
static char *state_dir(const char *given)
{
    const char *e = getenv("CKPT_STATE_DIR");
    if (given)
        return ckpt_xstrdup(given);
    if (e && *e)
        return ckpt_xstrdup(e);
    e = getenv("XDG_STATE_HOME");
    if (e && *e)
        return ckpt_xasprintf("%s/ckpt", e);
    e = getenv("HOME");
    return e && *e ? ckpt_xasprintf("%s/.local/state/ckpt", e) : NULL;
}

/* --tmp-dir inside DEST or inside a SRC: the spool's files would be
 * listed, counted and uploaded as a run's (or deleted with one). 1 after
 * saying so. */
static int tmp_dir_refused(struct storages *stores, const struct ckpt_opts *g,
                           const struct ckpt_process_cfg *c, char **srcs,
                           int n)
{
    if (!g->tmp_dir)
        return 0;
    struct ckpt_loc tl = { 0 };
    struct ckpt_storage *ts;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (open_loc(stores, g, g->tmp_dir, &tl, &ts, &err) != 0) {
        ckpt_loc_release(&tl);
        return 0;   /* (reported where it is used) */
    }
    const char *in = NULL;
    enum ckpt_loc_rel r = ckpt_storage_relation(ts, tl.key, c->dst,
                                                c->dest_key);
    if (r == CKPT_LOC_SAME || r == CKPT_LOC_A_INSIDE_B)
        in = "DEST";
    for (int i = 0; !in && i < n; i++) {
        struct ckpt_loc sl = { 0 };
        struct ckpt_storage *st;
        if (open_loc(stores, g, srcs[i], &sl, &st, &err) != 0) {
            ckpt_loc_release(&sl);
            ckpt_err_clear(&err);
            continue;
        }
        r = ckpt_storage_relation(ts, tl.key, st, sl.key);
        if (r == CKPT_LOC_SAME || r == CKPT_LOC_A_INSIDE_B)
            in = srcs[i];
        ckpt_loc_release(&sl);
    }
    ckpt_loc_release(&tl);
    if (in)
        cli_errorf("--tmp-dir %s is inside %s: its temporary files would "
                   "be taken for a run's; use a directory outside DEST and "
                   "the runs", g->tmp_dir, in);
    return in != NULL;
}

static int process_main(const struct ckpt_opts *g, struct pr_opts *po,
                        struct ckpt_process_cfg *c, char **srcs, int n)
{
    struct storages stores = { 0 };
    struct ckpt_loc dloc = { 0 }, lloc = { 0 };
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ui ui = { .g = g, .line = cli_status_enabled(g),
                     .mu = PTHREAD_MUTEX_INITIALIZER,
                     .tick = PTHREAD_COND_INITIALIZER };
    struct ckpt_process *p = NULL;
    struct ckpt_wandb_map *map = NULL;
    char *sdir = state_dir(po->state_dir);
    int rc = EXIT_FAILED;
    c->state_dir = sdir;
    c->on_event = on_event;
    c->on_progress = on_progress;
    c->on_archive = on_archive;
    c->ud = &ui;
    /* (The probe: a missing bucket or refused keys at DEST are one error
     * here, not a failed row for every run.) */
    if (open_loc(&stores, g, po->dest, &dloc, &c->dst, &err) != 0 ||
        ckpt_storage_probe(c->dst, dloc.key, &err) != 0 ||
        (po->logs && open_loc(&stores, g, po->logs, &lloc, &c->logs_st,
                              &err) != 0)) {
        cli_errorf("%s", err.msg);
        goto out;
    }
    c->dest_key = dloc.key;
    c->logs_key = po->logs ? lloc.key : NULL;
    if (tmp_dir_refused(&stores, g, c, srcs, n)) {
        rc = EXIT_USAGE;
        goto out;
    }
    if (ckpt_process_new(&p, c, &err) != 0) {
        cli_errorf("%s", err.msg);
        goto out;
    }
    rc = EXIT_OK;
    for (int i = 0; i < n; i++) {
        struct ckpt_loc sl;
        struct ckpt_storage *st;
        if (open_loc(&stores, g, srcs[i], &sl, &st, &err) != 0 ||
            ckpt_process_add(p, st, sl.key, &err) < 0) {
            cli_errorf("%s: %s", srcs[i], err.msg);
            ckpt_err_clear(&err);
            rc = EXIT_FAILED;
        }
        ckpt_loc_release(&sl);
    }
    if (get_map(p, po, g, &map, &err) != 0) {
        cli_errorf("%s", err.msg);
        if (err.code == CKPT_EAUTH && !po->wandb_map)
            cli_notef("hint: without asking W&B: '--no-wandb' puts runs "
                      "at DEST/RUN_ID/; '--wandb-map FILE' takes their "
                      "paths from FILE, which 'ckpt map-wandb --offline "
                      "-o FILE SRC...' writes from the runs' own files");
        rc = EXIT_FAILED;
        goto out;
    }
    ckpt_process_set_map(p, map);
    struct ckpt_process_totals t;
    size_t queued;
    ckpt_process_ids(p, &queued);
    if (ui.line)
        line_start(&ui, queued);
    else
        ui.prog = cli_progress_new(g, "process", 0, 0);
    if (ckpt_process_run(p, &t) != 0)
        rc = EXIT_FAILED;
    if (ui.line)
        line_end(&ui);
    cli_progress_done(ui.prog);
    totals(g, &t);
    ran_summary(&ui, po->min_age);
out:
    ckpt_process_free(p);
    ckpt_wandb_map_free(map);
    ckpt_loc_release(&dloc);
    ckpt_loc_release(&lloc);
    cli_storages_release(&stores);
    free(sdir);
    return rc;
}

int cmd_process(int argc, char **argv)
{
    struct ckpt_opts g = { .takes = CLI_TAKES_DRY_RUN | CLI_TAKES_TMP_DIR |
                                     CLI_TAKES_PROGRESS | CLI_TAKES_JOBS };
    struct pr_opts po;
    struct ckpt_process_cfg c;
    memset(&po, 0, sizeof(po));
    memset(&c, 0, sizeof(c));
    po.max_archive = 5ULL << 30;
    po.spool_limit = UINT64_MAX;    /* not given */
    c.clean.min_age = 86400;
    const struct option opts[] = {
        OPT_STR_(0, "dest", &po.dest, "DEST", "where runs go (required): "
                 "DEST/ENTITY/PROJECT/RUN_ID/"),
        OPT_STR_(0, "wandb-map", &po.wandb_map, "FILE", "W&B paths from "
                 "a map-wandb --output file instead of asking W&B"),
        OPT_BOOL_(0, "no-wandb", &po.no_wandb, "no W&B paths: runs go to "
                  "DEST/RUN_ID/"),
        OPT_INT_(0, "wandb-timeout", &g.wandb_timeout, "S", "seconds one "
                 "W&B request may take (default 60)"),
        OPT_STR_(0, "min-age", &po.min_age, "DURATION", "skip runs with a "
                 "file newer than this (90m, 6h, 2d; default 1d; 0: no "
                 "limit): they may still be training"),
        OPT_SIZE_(0, "max-archive-size", &po.max_archive, "SIZE",
                  "skip larger archives without opening them (default 5G)"),
        OPT_SIZE_(0, "spool-limit", &po.spool_limit, "SIZE", "most disk "
                  "the spools of compressed archives take in --tmp-dir, "
                  "all runs together (default: no limit but the disk's "
                  "last GiB; 0: no spool, read each archive once per "
                  "phase)"),
        OPT_BOOL_(0, "keep-bad", &po.keep_bad, "report bad runs instead "
                  "of deleting them"),
        OPT_BOOL_(0, "keep-source", &po.keep_source, "upload and verify, "
                  "but never delete the source"),
        OPT_BOOL_(0, "keep-archive", &po.keep_archive, "store archives "
                  "as they are, at DEST/ENTITY/PROJECT/RUN_ID.tar.gz"),
        OPT_FILTERS_(&po.filters),
        OPT_BOOL_(0, "drop-sharded", &po.drop_sharded, "leave out sharded "
                  "steps with a complete -unsharded copy (deleted with "
                  "the source)"),
        OPT_BOOL_(0, "drop-incomplete", &po.drop_incomplete, "leave out "
                  "incomplete steps (deleted with the source)"),
        OPT_STR_(0, "unshard", &po.unshard, "all|latest|none",
                 "which sharded steps to unshard (default all)"),
        OPT_STR_(0, "unshard-format", &po.unshard_format, "F",
                 "the unsharded steps' format: torch (default), "
                 "safetensors, or hf (an HF model directory, stepN-hf/: "
                 "model weights only, never a reason to drop a step)"),
        OPT_STR_(0, "rank-values", &po.rank_values, "M",
                 "rank-local DCP steps whose ranks saved different values "
                 "under one key: error (default), rank0 or per-rank "
                 "(KEY.rankR), as unshard's"),
        OPT_BOOL_(0, "unshard-step0", &po.step0, "also unshard step 0 "
                  "(the untrained initial weights: skipped by default)"),
        OPT_STR_(0, "logs", &po.logs, "LOCATION", "add log files naming "
                 "the run under logs/"),
        OPT_HUMAN_(&g),
        OPT_STR_(0, "state-dir", &po.state_dir, "DIR", "journals of "
                 "unfinished uploads (default as ckpt upload)"),
        OPT_INT_(0, "transfers", &po.transfers, "N", "files in flight, "
                 "all runs together (default 32, as cp's; rclone's "
                 "--transfers)"),
        OPT_INT_(0, "runs", &po.runs, "N", "-j's older spelling"),
        OPT_SIZE_(0, "bwlimit", &po.bwlimit, "RATE", "send at most RATE "
                  "bytes a second, every run's uploads together (10M: 10 "
                  "MiB/s), as cp's"),
        OPT_STR_(0, "lease-ttl", &po.lease_ttl, "DURATION", "a dead "
                 "worker's runs are taken over after this (default 10m; "
                 "at once when it ran on this host)"),
        OPT_STR_(0, "batch", &po.batch, "ID", "workers given the same ID "
                 "(a Slurm array's $SLURM_ARRAY_JOB_ID) share the runs: "
                 "each is handled by one of them, the others give it no "
                 "row"),
        OPT_END_(),
    };
    /* argv is reordered by the parser; the rules' order is kept here. */
    char **given = ckpt_xcalloc((size_t)argc + 1, sizeof(*given));
    memcpy(given, argv, (size_t)argc * sizeof(*given));
    struct ckpt_filter *filter = NULL;
    int n = cli_parse_options(argc, argv, opts, process_usage, &g);
    int rc = EXIT_USAGE;
    if (n == -2)
        rc = EXIT_OK;
    else if (n >= 0 && check_usage(n, &po, &c, &g) == 0) {
        struct ckpt_err err = CKPT_ERR_INIT;
        if (cli_filter_build(given, argc, &po.filters, &filter, &err) == 0)
            rc = -1;
        else
            usage_error("%s", err.msg);
    }
    free(given);
    if (rc != -1) {
        cli_filter_opts_release(&po.filters);
        return rc;
    }
    cli_init_output(&g);
    c.clean.max_archive = po.max_archive;
    c.no_spool = po.spool_limit == 0;
    c.spool_limit = po.spool_limit == UINT64_MAX ? 0 : po.spool_limit;
    c.dry_run = g.dry_run;
    c.keep_bad = po.keep_bad;
    c.keep_source = po.keep_source;
    c.unshard_step0 = po.step0;
    c.keep_archive = po.keep_archive;
    c.jobs = po.transfers;
    c.bwlimit = po.bwlimit;
    cli_debugf("process: runs at once (-j): %d; files in flight "
               "(--transfers), shared among them: %d",
               c.runs > 0 ? c.runs : CKPT_PROC_DEFAULT_RUNS,
               c.jobs > 0 ? c.jobs : CKPT_PROC_DEFAULT_TRANSFERS);
    c.storage = cli_storage_cfg(&g);
    c.tmp_dir = g.tmp_dir;
    c.filter = filter;
    c.drop_sharded = po.drop_sharded;
    c.drop_incomplete = po.drop_incomplete;
    rc = process_main(&g, &po, &c, argv, n);
    ckpt_filter_free(filter);
    cli_filter_opts_release(&po.filters);
    return rc;
}
