/*
 * out.c - everything ckpt prints: result rows on stdout (TSV or JSON lines),
 * messages and progress on stderr.
 *
 * Names can hold any bytes (a directory called "x\nckpt: error: ..." or
 * one with ESC sequences), so every TSV field and every message is escaped
 * here (ckpt/text.h: \t \n \r \\ \xNN) and every JSON string is made
 * valid UTF-8: one row per line, one message per line, no control bytes
 * on the terminal. docs/output.md describes the scheme.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ckpt/tempname.h"
#include "ckpt/text.h"
#include "ckpt/util.h"

static int quiet, verbose, stderr_tty, stdout_tty, human;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
/* The status line at the bottom of a terminal's stderr (a progress bar),
 * or NULL. Rows and messages are printed above it: erase, print, draw it
 * again, all under out_mu, so no line is ever printed into it. */
static char *status_line;

static void status_erase(int for_stdout)
{
    if (status_line && (!for_stdout || stdout_tty)) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

static void status_draw(int for_stdout)
{
    if (status_line && (!for_stdout || stdout_tty)) {
        fputs(status_line, stderr);
        fflush(stderr);
    }
}

static void on_stale_removed(const char *path, long pid)
{
    cli_infof("removed stale temporary %s (pid %ld, dead)", path, pid);
}

void cli_init_output(const struct ckpt_opts *g)
{
    quiet = g->quiet;
    verbose = g->verbose;
    stderr_tty = isatty(2);
    stdout_tty = isatty(1);
    human = !g->json && (g->human || stdout_tty);
    ckpt_temp_on_removed(on_stale_removed);
}

/* A line on a stderr that is not a terminal (a log) starts with the
 * time, ISO 8601 in UTC. Called under out_mu. */
static void stamp(void)
{
    if (stderr_tty)
        return;
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "%s ", ts);
}

static void vmsg(const char *level, const char *fmt, va_list ap)
{
    /* The whole message is escaped: its names come from directory
     * listings, archives and servers, and library messages embed them. */
    struct ckpt_buf raw = CKPT_BUF_INIT, msg = CKPT_BUF_INIT;
    ckpt_buf_vaddf(&raw, fmt, ap);
    ckpt_escape_add(&msg, raw.ptr, raw.len);
    ckpt_buf_release(&raw);
    pthread_mutex_lock(&out_mu);
    status_erase(0);
    stamp();
    fprintf(stderr, "ckpt: %s%s\n", level, msg.ptr);
    status_draw(0);
    pthread_mutex_unlock(&out_mu);
    ckpt_buf_release(&msg);
}

void cli_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("error: ", fmt, ap);
    va_end(ap);
}

void cli_notef(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void cli_warnf(const char *fmt, ...)
{
    if (quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

void cli_infof(const char *fmt, ...)
{
    if (quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void cli_debugf(const char *fmt, ...)
{
    if (!verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

/* ---- the output contract ---- */

cJSON *cli_json_row(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "schema", CLI_SCHEMA);
    return o;
}

const char *cli_verb(const char *word)
{
    /* The library's modules name outcomes in their own tense (process's
     * statuses and upload's actions in the past, clean's in the
     * present); the rows say them one way, here. */
    static const char *const map[][2] = {
        { "deleted", "delete" },        { "skipped", "skip" },
        { "failed", "error" },          { "kept", "keep" },
        { "uploaded", "copy" },         { "would-upload", "would-copy" },
        { "would-skip", "skip" },       { "unsharded", "unshard" },
        { "aborted", "abort" },         { "processed", "process" },
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(word, map[i][0]))
            return map[i][1];
    return word;
}

int cli_human(void)
{
    return human;
}

const char *cli_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
    if (human)
        return ckpt_fmt_size(bytes, buf, len);
    snprintf(buf, len, "%llu", (unsigned long long)bytes);
    return buf;
}

/* s in its escaped form when it is not valid UTF-8 (cJSON would copy the
 * bytes and make the line invalid JSON); NULL when it is fine. */
static char *json_fix(const char *s)
{
    if (!s || ckpt_utf8_valid(s, strlen(s)))
        return NULL;
    return ckpt_escape(s);
}

/* Make every string and key under j valid UTF-8. Replaced strings are
 * malloced, as cJSON's own (no hooks are installed), and owned by j. */
static void json_sanitize(cJSON *j)
{
    for (; j; j = j->next) {
        char *fixed = json_fix(j->string);
        if (fixed) {
            if (!(j->type & cJSON_StringIsConst))
                cJSON_free(j->string);
            j->string = fixed;
            j->type &= ~cJSON_StringIsConst;
        }
        if (cJSON_IsString(j) && (fixed = json_fix(j->valuestring))) {
            if (!(j->type & cJSON_IsReference))
                cJSON_free(j->valuestring);
            j->valuestring = fixed;
            j->type &= ~cJSON_IsReference;
        }
        json_sanitize(j->child);
    }
}

void cli_out_json(cJSON *obj)
{
    json_sanitize(obj);
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s)
        return;
    pthread_mutex_lock(&out_mu);
    status_erase(1);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    status_draw(1);
    pthread_mutex_unlock(&out_mu);
    free(s);
}

static int total_is_size(const char *name)
{
    return !strcmp(name, "bytes") || !strcmp(name, "freed") ||
           !strncmp(name, "bytes_", 6);
}

void cli_out_total(int json, int dry_run, int n, const char *const *names,
                   const uint64_t *v, double seconds)
{
    if (json) {
        cJSON *o = cli_json_row("total");
        cJSON_AddBoolToObject(o, "dry_run", dry_run);
        for (int i = 0; i < n; i++)
            cJSON_AddNumberToObject(o, names[i], (double)v[i]);
        cJSON_AddNumberToObject(o, "seconds", seconds);
        cli_out_json(o);
        return;
    }
    char(*f)[64] = ckpt_xcalloc((size_t)n + 1, sizeof(*f));
    const char **p = ckpt_xcalloc((size_t)n + 2, sizeof(*p));
    char num[32];
    p[0] = "total";
    for (int i = 0; i < n; i++) {
        if (total_is_size(names[i]))
            cli_fmt_bytes(v[i], num, sizeof(num));
        else
            snprintf(num, sizeof(num), "%llu", (unsigned long long)v[i]);
        snprintf(f[i], sizeof(f[i]), "%s=%s", names[i], num);
        p[i + 1] = f[i];
    }
    snprintf(f[n], sizeof(f[n]), "seconds=%.1f", seconds);
    p[n + 1] = f[n];
    cli_out_tsv(n + 2, p);
    free(p);
    free(f);
}

void cli_out_tsv(int n, const char *const *fields)
{
    struct ckpt_buf row = CKPT_BUF_INIT;
    for (int i = 0; i < n; i++) {
        const char *f = fields[i] ? fields[i] : "-";
        if (i)
            ckpt_buf_addch(&row, '\t');
        ckpt_escape_add(&row, f, strlen(f));
    }
    ckpt_buf_addch(&row, '\n');
    pthread_mutex_lock(&out_mu);
    status_erase(1);
    fwrite(row.ptr, 1, row.len, stdout);
    fflush(stdout);
    status_draw(1);
    pthread_mutex_unlock(&out_mu);
    ckpt_buf_release(&row);
}

void cli_out_header(int n, const char *const *names)
{
    static int done;
    if (human && !done++)
        cli_out_tsv(n, names);
}

int cli_status_enabled(const struct ckpt_opts *g)
{
    return stderr_tty && !g->no_progress && !g->quiet;
}

/* line cut to the terminal's width (a wrapped line could not be erased
 * with one \r), counting UTF-8 characters, not bytes. */
static char *fit_width(const char *line)
{
    struct winsize ws;
    size_t cols = 0, i = 0;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
        cols = ws.ws_col - 1;
    for (size_t n = 0; line[i] && (!cols || n < cols); n++)
        do
            i++;
        while ((line[i] & 0xC0) == 0x80);
    char *out = ckpt_xmalloc(i + 1);
    memcpy(out, line, i);
    out[i] = 0;
    return out;
}

void cli_status_show(const char *line)
{
    if (!stderr_tty)
        return;
    char *fit = fit_width(line);
    pthread_mutex_lock(&out_mu);
    status_erase(0);
    free(status_line);
    status_line = fit;
    status_draw(0);
    pthread_mutex_unlock(&out_mu);
}

void cli_status_end(int keep)
{
    pthread_mutex_lock(&out_mu);
    status_erase(0);
    if (keep && status_line)
        fprintf(stderr, "%s\n", status_line);
    free(status_line);
    status_line = NULL;
    pthread_mutex_unlock(&out_mu);
}

struct progress {
    const char *what;
    int bar;             /* draw a bar (terminal) */
    int plain;           /* periodic plain lines */
    int gap_ms;          /* between redraws */
    uint64_t total_items, total_bytes;
    _Atomic uint64_t items, bytes;
    _Atomic uint64_t sent;   /* cli_progress_sent: the rate's bytes */
    _Atomic int has_sent;
    _Atomic int64_t last_ms;
    double start;
    int forced;          /* --progress */
    uint64_t shown_items, shown_bytes;  /* the last plain line's */
};

static void draw(struct progress *p, int final);

struct progress *cli_progress_new(const struct ckpt_opts *g, const char *what,
                                  uint64_t total_items, uint64_t total_bytes)
{
    struct progress *p = ckpt_xcalloc(1, sizeof(*p));
    p->what = what;
    /* --progress: asked for, so shown with -q too */
    int on = !g->no_progress && (!g->quiet || g->progress);
    p->bar = stderr_tty && on;
    p->plain = !stderr_tty && on;
    p->gap_ms = p->bar || g->progress ? 1000 : 10000;
    if (p->bar)
        p->gap_ms = 200;
    p->total_items = total_items;
    p->total_bytes = total_bytes;
    p->start = ckpt_now();
    p->forced = g->progress;
    if (p->plain && p->forced)
        draw(p, 0);   /* the start, in the log at once */
    return p;
}

static void draw(struct progress *p, int final)
{
    uint64_t items = atomic_load(&p->items), bytes = atomic_load(&p->bytes);
    double el = ckpt_now() - p->start;
    /* The rate is of the bytes this run moved (cli_progress_sent): parts
     * an earlier run sent and files already at DEST count in the size,
     * not in the rate (nor in the ETA, which is the rest at that rate). */
    uint64_t moved = atomic_load(&p->has_sent) ? atomic_load(&p->sent)
                                               : bytes;
    double rate = el > 0 ? (double)moved / el : 0;
    char b[32], t[32], r[32], eta[32] = "";
    ckpt_fmt_size(bytes, b, sizeof(b));
    ckpt_fmt_size(p->total_bytes, t, sizeof(t));
    ckpt_fmt_size((uint64_t)rate, r, sizeof(r));
    if (!final && rate > 0 && p->total_bytes > bytes)
        snprintf(eta, sizeof(eta), " ETA %.0fs",
                 (double)(p->total_bytes - bytes) / rate);
    if (p->bar) {
        char *line = ckpt_xasprintf("%s: %llu/%llu items, %s/%s, %s/s%s",
                                    p->what, (unsigned long long)items,
                                    (unsigned long long)p->total_items, b,
                                    t, r, eta);
        cli_status_show(line);
        free(line);
        if (final)
            cli_status_end(1);
        return;
    }
    pthread_mutex_lock(&out_mu);
    if (final && p->shown_items == items && p->shown_bytes == bytes &&
        items) {
        pthread_mutex_unlock(&out_mu);   /* said already */
        return;
    }
    p->shown_items = items;
    p->shown_bytes = bytes;
    stamp();
    fprintf(stderr, "ckpt: %s: %llu/%llu items, %s/%s, %s/s%s\n",
            p->what, (unsigned long long)items,
            (unsigned long long)p->total_items, b, t, r, eta);
    pthread_mutex_unlock(&out_mu);
}

void cli_progress_add(struct progress *p, uint64_t items, uint64_t bytes)
{
    if (!p)
        return;
    atomic_fetch_add(&p->items, items);
    atomic_fetch_add(&p->bytes, bytes);
    if (!p->bar && !p->plain)
        return;
    /* Redraw at most every 200 ms (bar) or 10 s (log lines); the CAS makes
     * exactly one thread draw. */
    int64_t now = (int64_t)((ckpt_now() - p->start) * 1000);
    int64_t last = atomic_load(&p->last_ms);
    int64_t gap = p->gap_ms;
    if (now - last >= gap &&
        atomic_compare_exchange_strong(&p->last_ms, &last, now))
        draw(p, 0);
}

void cli_progress_sent(struct progress *p, uint64_t sent)
{
    if (!p)
        return;
    atomic_store(&p->sent, sent);
    atomic_store(&p->has_sent, 1);
}

void cli_progress_done(struct progress *p)
{
    if (!p)
        return;
    if (p->bar || (p->plain && (p->forced || ckpt_now() - p->start > 10)))
        draw(p, 1);
    free(p);
}
