/*
 * cmd_upload.c - `ckpt upload`: copy files, trees and archive contents
 * from any location to any location, in parallel across files and parts,
 * resumably (include/ckpt/upload.h does the work).
 *
 * Phases: parse options; resolve where each SRC goes (DEST, or
 * DEST/ENTITY/PROJECT/RUN_ID with --wandb-map, plus its logs); plan every
 * copy (SRC and DEST are listed); run them all on one pool; report.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/archive.h"
#include "ckpt/buf.h"
#include "ckpt/interrupt.h"
#include "ckpt/upload.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "filter.h"
#include "runs.h"

static const char *const upload_usage[] = {
    "ckpt cp [options] SRC... DEST",
    "",
    "Copy SRC (a file, a directory tree, or with --extract an archive's",
    "contents) from any location to DEST (a local path, s3://, r2://, gs://).",
    "One SRC directory: its contents go below DEST/. Several SRC: each goes",
    "to DEST/NAME/ (DEST/ENTITY/PROJECT/RUN_ID/ with --wandb or --wandb-map).",
    "Files already at DEST with the same size and checksum are skipped, so a",
    "rerun resumes; an interrupted multipart upload is resumed part by part.",
    "Prints one row per file that did not arrive (every file with -v), then",
    "a total row: total<TAB>copy=N<TAB>skip=N<TAB>error=N ... bytes=N ...",
    "(docs/output.md). 'ckpt upload' and 'ckpt copy' are the same command.",
    "--transfers default 32: files in flight (one connection each; object",
    "stores are fast in parallel, slow per connection). -j, runs at once",
    "in the other commands, is refused here.",
    "examples:",
    "  ckpt cp RUN s3://b/runs/RUN/            copy a run (a rerun resumes)",
    "  ckpt cp -n RUN s3://b/runs/RUN/         what would be copied",
    "  ckpt cp --extract RUN.tar.zst gs://b/x/ an archive's contents",
    "  ckpt cp --delete-source RUN s3://b/x/   move: SRC deleted once copied",
    "  ckpt cp --exclude '*.npy' --bwlimit 10M --progress RUN s3://b/x/",
    "                                          leave out *.npy, at 10 MiB/s,",
    "                                          progress in the log",
    NULL
};

#define DEFAULT_JOBS 32

/* The command as typed (cp, upload or copy), for its messages. */
static const char *cmd_name = "cp";

struct up_opts {
    int extract, no_strip, delete_source, checksum, follow, wandb, overwrite;
    int transfers;                /* --transfers: requests in flight */
    uint64_t part_size, memory, bwlimit;
    const char *wandb_map, *logs, *state_dir;
    struct cli_filter_opts filters;
    struct ckpt_filter *filter;   /* the rules, or NULL */
};

struct ui {
    const struct ckpt_opts *g;
    const struct ckpt_filter *filter;
    struct progress *prog;
    uint64_t items, bytes;        /* last progress seen */
};

/* --include/--exclude/--filter-from: a file no rule takes is left where
 * it is (never copied, never deleted with --delete-source). */
static enum ckpt_upload_pick pick(void *ud, const char *rel)
{
    const struct ui *ui = ud;
    return ckpt_filter_match(ui->filter, rel) ? CKPT_PICK_COPY
                                              : CKPT_PICK_LEAVE;
}

/* ---- output ---- */

static int row_shown(const struct ckpt_opts *g, enum ckpt_upload_action a)
{
    switch (a) {
    case CKPT_UP_FAILED:
    case CKPT_UP_KEPT:
        return 1;
    case CKPT_UP_WOULD_UPLOAD:
    case CKPT_UP_WOULD_SKIP:
    case CKPT_UP_WOULD_DELETE:
        return 1;
    case CKPT_UP_WARNING:
        return 0;
    default:
        return g->verbose;
    }
}

static void on_event(void *ud, const struct ckpt_upload_event *ev)
{
    struct ui *ui = ud;
    const char *act = cli_verb(ckpt_upload_action_name(ev->action));
    if (ev->action == CKPT_UP_WARNING)
        cli_warnf("%s: %s", ev->src, ev->detail);
    else if (ev->action == CKPT_UP_ABORTED && !ui->g->verbose)
        cli_infof("%s: %s", ev->src, ev->detail);
    if (!row_shown(ui->g, ev->action))
        return;
    if (!ui->g->json) {
        const char *f[] = { act, ev->src, ev->dest ? ev->dest : "-",
                            ev->detail };
        cli_out_tsv(*ev->detail ? 4 : 3, f);
        return;
    }
    cJSON *o = cli_json_row("file");
    cJSON_AddStringToObject(o, "action", act);
    cJSON_AddStringToObject(o, "src", ev->src);
    if (ev->dest)
        cJSON_AddStringToObject(o, "dest", ev->dest);
    cJSON_AddNumberToObject(o, "bytes", (double)ev->bytes);
    if (*ev->detail)
        cJSON_AddStringToObject(o, "reason", ev->detail);
    cli_out_json(o);
}

static void on_progress(void *ud, uint64_t items, uint64_t bytes,
                        uint64_t sent)
{
    struct ui *ui = ud;
    cli_progress_sent(ui->prog, sent);
    cli_progress_add(ui->prog, items - ui->items, bytes - ui->bytes);
    ui->items = items;
    ui->bytes = bytes;
}

/* A SRC that cannot be copied at all: one row, like a failed file; the
 * engine counts it, so --delete-source deletes nothing. */
static void src_failed(struct ckpt_upload *u, const char *src,
                       const char *dest, const char *msg)
{
    ckpt_upload_fail_src(u, src, dest, msg);
}

/* The total row, as process's: the files per verb, their bytes, what
 * was sent now and what an earlier run had sent (resumed parts), the
 * seconds. Summed over workers as docs/deploy.md says. */
static void summary(const struct ui *ui, const struct ckpt_upload_totals *t)
{
    const struct ckpt_opts *g = ui->g;
    uint64_t failed = t->failed;
    const char *names[] = { "copy", "skip", "error", "delete", "keep",
                            "abort", "bytes", "bytes_sent", "bytes_resumed",
                            "throttled" };
    uint64_t v[] = { t->uploaded, t->skipped, failed, t->deleted, t->kept,
                     t->aborted, t->bytes, t->bytes_sent, t->bytes_resumed,
                     t->throttled };
    cli_out_total(g->json, g->dry_run, (int)(sizeof(v) / sizeof(v[0])),
                  names, v, t->seconds);
    if (t->kept)
        cli_warnf("%llu file(s) kept at SRC: see the 'keep' rows",
                  (unsigned long long)t->kept);
    /* Interrupted: the files still to go are counted, not listed (main.c
     * says so). */
    if (failed && !ckpt_interrupted())
        cli_errorf("%llu file(s) or source(s) did not arrive: see the "
                   "'error' rows", (unsigned long long)failed);
}

/* ---- where things go ---- */

struct dest {
    const char *arg;
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    int is_dir;                   /* names a directory for file SRCs */
};

/* The name a SRC gets below DEST: its base name (an archive's stem with
 * --extract, so run1.tar.gz becomes run1/). */
static char *src_name(const char *key, int extract)
{
    return extract ? ckpt_archive_stem(key) : ckpt_path_basename(key);
}

struct logs {
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    char **names;                 /* relative to the location, owned */
    size_t n;
};

static int collect_log(void *ud, const struct ckpt_entry *e)
{
    struct logs *l = ud;
    if (e->type != CKPT_ENTRY_FILE)
        return 0;
    l->names = ckpt_xreallocarray(l->names, l->n + 1, sizeof(char *));
    l->names[l->n++] = ckpt_xstrdup(e->name);
    return 0;
}

static void logs_release(struct logs *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    ckpt_loc_release(&l->loc);
}

/* Add every log whose file name names the run (or its W&B id). */
static void add_logs(struct ckpt_upload *u, struct logs *l,
                     const char *run, const char *wid,
                     struct ckpt_storage *dst, const char *dkey)
{
    for (size_t i = 0; i < l->n; i++) {
        char *base = ckpt_path_basename(l->names[i]);
        int hit = ckpt_upload_is_log_of(base, run, wid);
        free(base);
        if (!hit)
            continue;
        char *skey = ckpt_path_join(l->loc.key, l->names[i]);
        char *sub = ckpt_path_join("logs", l->names[i]);
        char *key = ckpt_path_join(dkey, sub);
        struct ckpt_err err = CKPT_ERR_INIT;
        if (ckpt_upload_add(u, l->st, skey, dst, key, CKPT_UPLOAD_KEEP_SRC,
                            &err) != 0) {
            char *disp = ckpt_storage_display(l->st, skey);
            src_failed(u, disp, NULL, err.msg);
            free(disp);
        }
        free(skey);
        free(sub);
        free(key);
    }
}

/* ---- one SRC ---- */

struct plan {
    struct ckpt_upload *u;
    struct ui *ui;
    const struct up_opts *uo;
    struct storages *stores;
    struct dest *dest;
    struct ckpt_wandb_map *map;
    struct logs *logs;
    int nsrc;
};

/* DEST key for SRC: NULL (with msg) when it has no place. */
static char *dest_key(struct plan *p, const struct ckpt_loc *src,
                      const struct ckpt_stat *sb, const char **wid,
                      struct ckpt_buf *msg)
{
    const struct up_opts *uo = p->uo;
    const char *root = p->dest->loc.key;
    int archive = uo->extract && sb->type == CKPT_ENTRY_FILE;
    char *name = src_name(src->key, archive);
    char *key = NULL;
    *wid = NULL;
    /* An archive kept whole is still the run its stem names (map-wandb
     * maps 1234567.tar.gz as 1234567): look that up, and put the archive
     * inside the run's directory, DEST/ENTITY/PROJECT/RUN_ID/NAME. */
    char *run = p->map && !archive && sb->type == CKPT_ENTRY_FILE &&
                ckpt_archive_kind_of(src->key) != CKPT_ARCHIVE_NONE
              ? ckpt_archive_stem(src->key) : NULL;
    if (p->map) {
        const char *rid = run ? run : name;
        const struct ckpt_wandb_map_entry *e =
            ckpt_wandb_map_find(p->map, rid);
        const char *path = e ? e->path : NULL;
        /* The map's evidence column says why a run is unmapped (what
         * map-wandb found): print it rather than send the user off to
         * ask again. */
        const char *why = e && e->evidence && *e->evidence ? e->evidence
                                                           : NULL;
        if (!path && uo->wandb)
            ckpt_buf_addf(msg, "no W&B run path for run '%s': %s", rid,
                          why ? why : "no evidence found");
        else if (!path)
            ckpt_buf_addf(msg, "run '%s' is %s the W&B map '%s'%s%s", rid,
                          e ? "unmapped in" : "not in", uo->wandb_map,
                          why ? ": " : "", why ? why : "");
        else
            key = ckpt_path_join(root, path);
        if (path && run) {
            char *in = ckpt_path_join(key, name);
            free(key);
            key = in;
        }
        if (path)
            *wid = strrchr(path, '/') + 1;
    } else if (sb->type == CKPT_ENTRY_FILE && !archive) {
        key = p->dest->is_dir || p->nsrc > 1 ? ckpt_path_join(root, name)
                                              : ckpt_xstrdup(root);
    } else {
        key = p->nsrc > 1 ? ckpt_path_join(root, name) : ckpt_xstrdup(root);
    }
    free(run);
    free(name);
    return key;
}

static void plan_src(struct plan *p, const char *arg)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_stat sb;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_buf msg = CKPT_BUF_INIT;
    const char *wid = NULL;
    char *key = NULL;
    if (ckpt_loc_parse(&loc, arg, &err) != 0 ||
        cli_storages_get(p->stores, &loc, p->ui->g, &st, &err) != 0 ||
        ckpt_storage_stat(st, loc.key, &sb, &err) != 0) {
        if (err.code == CKPT_ENOTFOUND)
            ckpt_err_set(&err, CKPT_ENOTFOUND, "SRC '%s' does not exist",
                         arg);
        src_failed(p->u, arg, NULL, err.msg);
        ckpt_loc_release(&loc);
        return;
    }
    /* DEST inside SRC would copy a tree into itself. */
    if (sb.type == CKPT_ENTRY_DIR &&
        ckpt_storage_relation(st, loc.key, p->dest->st, p->dest->loc.key)
        == CKPT_LOC_B_INSIDE_A)
        ckpt_buf_addf(&msg, "DEST '%s' is inside SRC '%s'", p->dest->arg,
                      arg);
    else
        key = dest_key(p, &loc, &sb, &wid, &msg);
    unsigned flags = (p->uo->extract && sb.type == CKPT_ENTRY_FILE
                      ? CKPT_UPLOAD_EXTRACT : 0) |
                     (p->uo->filter ? CKPT_UPLOAD_PICK : 0);
    if (key && ckpt_upload_add(p->u, st, loc.key, p->dest->st, key, flags,
                               &err) != 0)
        ckpt_buf_addstr(&msg, err.msg);
    if (msg.len) {
        char *d = key ? ckpt_storage_display(p->dest->st, key) : NULL;
        src_failed(p->u, arg, d, msg.ptr);
        free(d);
    } else if (p->logs) {
        char *run = src_name(loc.key, ckpt_archive_kind_of(loc.key) !=
                             CKPT_ARCHIVE_NONE);
        add_logs(p->u, p->logs, run, wid, p->dest->st, key);
        free(run);
    }
    free(key);
    ckpt_buf_release(&msg);
    ckpt_loc_release(&loc);
}

/* ---- SRC and DEST in one place ---- */

static void refuse(const char *fmt, ...) CKPT_PRINTF(1, 2);
static void refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ckpt %s: error: ", cmd_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Where a plain file SRC lands when DEST is a directory (or there are
 * several SRC): DEST/NAME; NULL when it lands on DEST itself. */
static char *file_target(const struct plan *p, const struct ckpt_loc *src,
                         const struct ckpt_stat *sb)
{
    if (sb->type != CKPT_ENTRY_FILE || p->uo->extract || p->map ||
        !(p->dest->is_dir || p->nsrc > 1))
        return NULL;
    char *name = ckpt_path_basename(src->key);
    char *key = ckpt_path_join(p->dest->loc.key, name);
    free(name);
    return key;
}

/* Is SRC arg DEST under another spelling (never copied: the copy would
 * be "verified" against itself), or, with --delete-source, one inside the
 * other (deleting SRC would delete the copy, or the copy overwrite the
 * source)? Says why and returns 1. */
static int same_place(struct plan *p, const char *arg)
{
    const struct dest *d = p->dest;
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_stat sb;
    struct ckpt_err err = CKPT_ERR_INIT;
    int bad = 1;
    if (ckpt_loc_parse(&loc, arg, &err) != 0 ||
        cli_storages_get(p->stores, &loc, p->ui->g, &st, &err) != 0 ||
        ckpt_storage_stat(st, loc.key, &sb, &err) != 0) {
        ckpt_loc_release(&loc);
        return 0;  /* plan_src reports it */
    }
    enum ckpt_loc_rel rel = ckpt_storage_relation(st, loc.key, d->st,
                                                  d->loc.key);
    char *target = file_target(p, &loc, &sb);
    char *shown = NULL;
    if (target && ckpt_storage_relation(st, loc.key, d->st, target) ==
                  CKPT_LOC_SAME)
        shown = ckpt_storage_display(d->st, target);
    else if (rel == CKPT_LOC_SAME)
        shown = ckpt_storage_display(d->st, d->loc.key);
    if (shown)
        refuse("SRC '%s' and DEST '%s' are the same location (a copy onto "
               "itself)", arg, shown);
    else if (p->uo->delete_source && rel == CKPT_LOC_B_INSIDE_A)
        refuse("--delete-source: DEST '%s' is inside SRC '%s': deleting "
               "SRC would delete the copy", d->arg, arg);
    else if (p->uo->delete_source && rel == CKPT_LOC_A_INSIDE_B)
        refuse("--delete-source: SRC '%s' is inside DEST '%s': the copy "
               "could overwrite the source before it is deleted", arg,
               d->arg);
    else
        bad = 0;
    free(shown);
    free(target);
    ckpt_loc_release(&loc);
    return bad;
}

/* ---- setup ---- */

static int open_dest(struct dest *d, const char *arg, struct storages *s,
                     const struct ckpt_opts *g, struct ckpt_err *err)
{
    d->arg = arg;
    /* (The probe: a missing bucket or refused keys are one error here,
     * not a failed row for every file.) */
    if (ckpt_loc_parse(&d->loc, arg, err) != 0 ||
        cli_storages_get(s, &d->loc, g, &d->st, err) != 0 ||
        ckpt_storage_probe(d->st, d->loc.key, err) != 0)
        return -1;
    struct ckpt_stat sb;
    size_t n = strlen(arg);
    d->is_dir = (n && arg[n - 1] == '/') || !*d->loc.key ||
                (ckpt_storage_stat(d->st, d->loc.key, &sb, err) == 0 &&
                 sb.type == CKPT_ENTRY_DIR);
    ckpt_err_clear(err);
    return 0;
}

static int load_map(struct plan *p, const char *loc_s, struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    char *data = NULL;
    size_t len = 0;
    int rc = ckpt_loc_parse(&loc, loc_s, err);
    if (rc == 0)
        rc = cli_storages_get(p->stores, &loc, p->ui->g, &st, err);
    if (rc == 0)
        rc = ckpt_storage_read_all(st, loc.key, 64u << 20, &data, &len, err);
    if (rc == 0)
        rc = ckpt_wandb_map_parse(&p->map, data, len, loc_s, err);
    free(data);
    ckpt_loc_release(&loc);
    return rc;
}

/* --wandb: map the SRC runs now, as `ckpt map-wandb` would. */
static int ask_wandb(struct plan *p, char **srcs, int nsrc,
                     struct ckpt_err *err)
{
    char *text = cli_wandb_map_text(srcs, nsrc, 0, p->ui->g);
    if (!text)
        return ckpt_err_set(err, CKPT_EAUTH, "W&B lookup failed; nothing "
                            "uploaded");
    int rc = ckpt_wandb_map_parse(&p->map, text, strlen(text), "W&B", err);
    free(text);
    return rc;
}

static int load_logs(struct plan *p, struct logs *l, const char *loc_s,
                     struct ckpt_err *err)
{
    memset(l, 0, sizeof(*l));
    if (ckpt_loc_parse(&l->loc, loc_s, err) != 0 ||
        cli_storages_get(p->stores, &l->loc, p->ui->g, &l->st, err) != 0 ||
        ckpt_storage_list(l->st, l->loc.key, CKPT_LIST_RECURSIVE,
                          collect_log, l, err) != 0)
        return -1;
    p->logs = l;
    return 0;
}

/* $CKPT_STATE_DIR, $XDG_STATE_HOME/ckpt, ~/.local/state/ckpt. */
static char *state_dir(const struct up_opts *uo)
{
    const char *e = getenv("CKPT_STATE_DIR");
    if (uo->state_dir)
        return ckpt_xstrdup(uo->state_dir);
    if (e && *e)
        return ckpt_xstrdup(e);
    e = getenv("XDG_STATE_HOME");
    if (e && *e)
        return ckpt_xasprintf("%s/ckpt", e);
    e = getenv("HOME");
    return e && *e ? ckpt_xasprintf("%s/.local/state/ckpt", e) : NULL;
}

static int check_usage(int n, const struct up_opts *uo)
{
    const char *bad = NULL;
    if (n < 2)
        bad = "give SRC and DEST";
    else if (uo->part_size && (uo->part_size < (5u << 20) ||
                               uo->part_size > (5ull << 30)))
        bad = "--part-size must be between 5M and 5G";
    else if (uo->memory && uo->memory < (16u << 20))
        bad = "--memory must be at least 16M";
    else if (uo->wandb && uo->wandb_map)
        bad = "--wandb and --wandb-map exclude each other";
    if (!bad)
        return 0;
    fprintf(stderr, "ckpt %s: error: %s\nusage: %s\n", cmd_name, bad,
            upload_usage[0]);
    return -1;
}

static int run_all(struct plan *p, char **srcs, int nsrc, const char *sdir)
{
    struct ckpt_upload_totals t;
    int refused = 0;
    /* Before anything is listed, written or deleted. */
    for (int i = 0; i < nsrc; i++)
        refused += same_place(p, srcs[i]);
    if (refused)
        return EXIT_USAGE;
    for (int i = 0; i < nsrc; i++)
        plan_src(p, srcs[i]);
    uint64_t files = 0, bytes = 0;
    ckpt_upload_planned(p->u, &files, &bytes);
    struct ui *ui = p->ui;
    memset(&t, 0, sizeof(t));
    ui->prog = cli_progress_new(ui->g, cmd_name, files, bytes);
    int rc = ckpt_upload_run(p->u, &t);
    cli_progress_done(ui->prog);
    summary(ui, &t);
    if (!sdir && !ui->g->dry_run)
        cli_warnf("no state directory (set CKPT_STATE_DIR or HOME): an "
                  "interrupted upload restarts its large files from scratch");
    return rc != 0 ? EXIT_FAILED : EXIT_OK;
}

/* SRC... = argv[0..n-2], DEST = argv[n-1]. */
static int upload_main(const struct ckpt_opts *g, const struct up_opts *uo,
                       char **argv, int n)
{
    struct storages stores = { 0 };
    struct ui ui = { g, uo->filter, NULL, 0, 0 };
    struct dest dest;
    struct logs logs;
    struct ckpt_err err = CKPT_ERR_INIT;
    memset(&dest, 0, sizeof(dest));
    memset(&logs, 0, sizeof(logs));
    char *sdir = state_dir(uo);
    struct ckpt_upload_cfg cfg = {
        .jobs = uo->transfers > 0 ? uo->transfers : DEFAULT_JOBS,
        .dry_run = g->dry_run,
        .checksum = uo->checksum, .delete_source = uo->delete_source,
        /* DEST's copy may be the only one (an earlier --delete-source or
         * `ckpt process` deleted its source): never replaced unasked */
        .no_replace = !uo->overwrite,
        .follow_links = uo->follow, .strip = !uo->no_strip,
        .part_size = uo->part_size, .mem_budget = uo->memory,
        .state_dir = sdir, .on_event = on_event,
        .on_progress = on_progress, .ud = &ui, .bwlimit = uo->bwlimit,
        .pick = uo->filter ? pick : NULL,
    };
    struct plan p = { ckpt_upload_new(&cfg), &ui, uo, &stores, &dest,
                      NULL, NULL, n - 1 };
    int rc = EXIT_FAILED;
    if (open_dest(&dest, argv[n - 1], &stores, g, &err) != 0 ||
        (uo->wandb_map && load_map(&p, uo->wandb_map, &err) != 0) ||
        (uo->wandb && ask_wandb(&p, argv, n - 1, &err) != 0) ||
        (uo->logs && load_logs(&p, &logs, uo->logs, &err) != 0)) {
        cli_errorf("%s", err.msg);
        if (uo->wandb && err.code == CKPT_EAUTH)
            cli_notef("hint: without asking W&B: '--wandb-map FILE' takes "
                      "the runs' paths from FILE, which 'ckpt map-wandb "
                      "--offline -o FILE SRC...' writes from their own "
                      "files; without --wandb SRC goes to DEST itself");
    }
    else
        rc = run_all(&p, argv, n - 1, sdir);
    ckpt_upload_free(p.u);
    ckpt_wandb_map_free(p.map);
    logs_release(&logs);
    ckpt_loc_release(&dest.loc);
    cli_storages_release(&stores);
    free(sdir);
    return rc;
}

int cmd_upload(int argc, char **argv)
{
    struct ckpt_opts g = { .takes = CLI_TAKES_DRY_RUN | CLI_TAKES_PROGRESS };
    struct up_opts uo;
    memset(&uo, 0, sizeof(uo));
    const struct option opts[] = {
        OPT_BOOL_(0, "extract", &uo.extract, "SRC archives: copy their "
                  "members (streamed, uncompressed)"),
        OPT_BOOL_(0, "no-strip", &uo.no_strip, "--extract: keep a single "
                  "top-level directory"),
        OPT_STR_(0, "wandb-map", &uo.wandb_map, "FILE", "place each run "
                 "under DEST/ENTITY/PROJECT/RUN_ID/"),
        OPT_BOOL_(0, "wandb", &uo.wandb, "like --wandb-map, asking W&B "
                  "now (as ckpt map-wandb does)"),
        OPT_INT_(0, "wandb-timeout", &g.wandb_timeout, "S",
                 "with --wandb: seconds one W&B request may take "
                 "(default 60)"),
        OPT_STR_(0, "logs", &uo.logs, "LOCATION", "add log files naming "
                 "the run under logs/"),
        OPT_BOOL_(0, "delete-source", &uo.delete_source, "delete SRC once "
                  "every file at DEST is verified (refused when SRC and "
                  "DEST overlap)"),
        OPT_BOOL_(0, "overwrite", &uo.overwrite, "replace files at DEST "
                  "that hold other bytes (default: such a file is a "
                  "conflict, DEST keeps it: it may be the only copy)"),
        OPT_BOOL_(0, "checksum", &uo.checksum, "compare content even when "
                  "size and time match"),
        OPT_BOOL_('L', "follow-links", &uo.follow, "follow symbolic links "
                  "in local trees"),
        OPT_SIZE_(0, "part-size", &uo.part_size, "SIZE", "minimum "
                  "multipart part size (default 8M)"),
        OPT_SIZE_(0, "memory", &uo.memory, "SIZE", "data buffers in "
                  "flight (default 96M)"),
        OPT_FILTERS_(&uo.filters),
        OPT_INT_(0, "transfers", &uo.transfers, "N", "requests in flight, "
                 "whole files and parts together (default 32; rclone's "
                 "--transfers)"),
        OPT_SIZE_(0, "bwlimit", &uo.bwlimit, "RATE", "send at most RATE "
                  "bytes a second, all transfers together (10M: 10 MiB/s)"),
        OPT_HUMAN_(&g),
        OPT_STR_(0, "state-dir", &uo.state_dir, "DIR", "journals of "
                 "unfinished copies"),
        OPT_END_(),
    };
    cmd_name = argv[0];
    /* argv is reordered by the parser; the rules' order is kept here. */
    char **given = ckpt_xcalloc((size_t)argc + 1, sizeof(*given));
    memcpy(given, argv, (size_t)argc * sizeof(*given));
    int n = cli_parse_options(argc, argv, opts, upload_usage, &g);
    int rc = n == -2 ? EXIT_OK : EXIT_USAGE;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (n >= 0 && check_usage(n, &uo) == 0) {
        if (cli_filter_build(given, argc, &uo.filters, &uo.filter,
                             &err) == 0)
            rc = -1;
        else
            fprintf(stderr, "ckpt %s: error: %s\nusage: %s\n", cmd_name,
                    err.msg, upload_usage[0]);
    }
    free(given);
    if (rc == -1) {
        cli_init_output(&g);
        rc = upload_main(&g, &uo, argv, n);
    }
    ckpt_filter_free(uo.filter);
    cli_filter_opts_release(&uo.filters);
    return rc;
}
