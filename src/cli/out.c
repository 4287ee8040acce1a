/*
 * out.c - everything ckpt prints: result rows on stdout (TSV or JSON lines),
 * messages and progress on stderr.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"

static int quiet, verbose, stderr_tty;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_stale_removed(const char *path, long pid)
{
    infof("removed stale temporary %s (pid %ld, dead)", path, pid);
}

void cli_init_output(const struct ckpt_opts *g)
{
    quiet = g->quiet;
    verbose = g->verbose;
    stderr_tty = isatty(2);
    ckpt_temp_on_removed(on_stale_removed);
}

static void vmsg(const char *level, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&out_mu);
    if (!stderr_tty) {
        char ts[32];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
        fprintf(stderr, "%s ", ts);
    }
    fprintf(stderr, "ckpt: %s", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&out_mu);
}

void errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("error: ", fmt, ap);
    va_end(ap);
}

void warnf(const char *fmt, ...)
{
    if (quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

void infof(const char *fmt, ...)
{
    if (quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void debugf(const char *fmt, ...)
{
    if (!verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void out_json(cJSON *obj)
{
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s)
        return;
    pthread_mutex_lock(&out_mu);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
    free(s);
}

void out_tsv(int n, const char *const *fields)
{
    pthread_mutex_lock(&out_mu);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc('\t', stdout);
        for (const char *p = fields[i] ? fields[i] : "-"; *p; p++)
            fputc(*p == '\t' || *p == '\n' || *p == '\r' ? ' ' : *p, stdout);
    }
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
}

struct progress {
    const char *what;
    int bar;             /* draw a bar (terminal) */
    int plain;           /* periodic plain lines */
    uint64_t total_items, total_bytes;
    _Atomic uint64_t items, bytes;
    _Atomic int64_t last_ms;
    double start;
};

struct progress *progress_new(const struct ckpt_opts *g, const char *what,
                              uint64_t total_items, uint64_t total_bytes)
{
    struct progress *p = ckpt_xcalloc(1, sizeof(*p));
    p->what = what;
    p->bar = stderr_tty && !g->no_progress && !g->quiet;
    p->plain = !stderr_tty && !g->no_progress && !g->quiet;
    p->total_items = total_items;
    p->total_bytes = total_bytes;
    p->start = ckpt_now();
    return p;
}

static void draw(struct progress *p, int final)
{
    uint64_t items = atomic_load(&p->items), bytes = atomic_load(&p->bytes);
    double el = ckpt_now() - p->start;
    double rate = el > 0 ? (double)bytes / el : 0;
    char b[32], t[32], r[32], eta[32] = "";
    ckpt_fmt_size(bytes, b, sizeof(b));
    ckpt_fmt_size(p->total_bytes, t, sizeof(t));
    ckpt_fmt_size((uint64_t)rate, r, sizeof(r));
    if (!final && rate > 0 && p->total_bytes > bytes)
        snprintf(eta, sizeof(eta), " ETA %.0fs",
                 (double)(p->total_bytes - bytes) / rate);
    pthread_mutex_lock(&out_mu);
    if (p->bar)
        fprintf(stderr, "\r\033[K%s: %llu/%llu items, %s/%s, %s/s%s%s",
                p->what, (unsigned long long)items,
                (unsigned long long)p->total_items, b, t, r, eta,
                final ? "\n" : "");
    else
        fprintf(stderr, "ckpt: %s: %llu/%llu items, %s/%s, %s/s%s\n",
                p->what, (unsigned long long)items,
                (unsigned long long)p->total_items, b, t, r, eta);
    pthread_mutex_unlock(&out_mu);
}

void progress_add(struct progress *p, uint64_t items, uint64_t bytes)
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
    int64_t gap = p->bar ? 200 : 10000;
    if (now - last >= gap &&
        atomic_compare_exchange_strong(&p->last_ms, &last, now))
        draw(p, 0);
}

void progress_done(struct progress *p)
{
    if (!p)
        return;
    if (p->bar || (p->plain && ckpt_now() - p->start > 10))
        draw(p, 1);
    free(p);
}
