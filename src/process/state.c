/*
 * state.c - what `ckpt process` keeps under DEST/.ckpt-process/ for each
 * run: the state object (phases finished, where the run went) and the
 * lease, renewed by a thread for as long as the run is worked on.
 */
#include "process_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/interrupt.h"
#include "ckpt/util.h"

/* Room for thousands of unshard outputs. */
#define STATE_MAX (64u << 20)  /* an "uploaded" state lists the
                                   dropped steps' files too */

static const char *const phase_names[] = { "new", "uploaded", "done",
                                           "deleted" };

static uint64_t get_u64(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    /* Anything a uint64_t cannot hold (negative, 2^64 or more) is 0. */
    return cJSON_IsNumber(v) && v->valuedouble >= 0 &&
           v->valuedouble < 18446744073709551616.0
           ? (uint64_t)v->valuedouble : 0;
}

int proc_path_safe(const char *path, int dirs)
{
    int parts = 0;
    const char *p = path;
    if (!p || !*p)
        return 0;
    while (*p) {
        size_t n = strcspn(p, "/");
        /* Empty, ".", ".." and every hidden name: DEST's own
         * .ckpt-process/ among them. */
        if (n == 0 || p[0] == '.')
            return 0;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\')
                return 0;
        parts++;
        p += n;
        if (*p == '/' && !*++p)
            return 0;
    }
    return dirs <= 0 || parts <= dirs;
}

void proc_state_add_out(struct proc_state *s, const char *path,
                        uint64_t size, const char *sum, const char *etag)
{
    struct proc_out *o = NULL;
    for (size_t i = 0; i < s->nouts && !o; i++)
        if (!strcmp(s->outs[i].path, path))
            o = &s->outs[i];
    if (!o) {
        s->outs = ckpt_xreallocarray(s->outs, s->nouts + 1,
                                     sizeof(*s->outs));
        o = &s->outs[s->nouts++];
        o->path = ckpt_xstrdup(path);
    }
    o->size = size;
    snprintf(o->sum, sizeof(o->sum), "%s", sum ? sum : "");
    snprintf(o->etag, sizeof(o->etag), "%s", etag ? etag : "");
}

/* "unsharded": [{"path": P, "size": N, "sum": S, "etag": E}, ...] (etag
 * optional); an entry that is not one is an unreadable state. */
static int parse_outs(const cJSON *v, struct proc_state *s)
{
    const cJSON *e;
    if (!v)
        return 0;
    if (!cJSON_IsArray(v))
        return -1;
    cJSON_ArrayForEach(e, v) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "path");
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(e, "sum");
        const cJSON *et = cJSON_GetObjectItemCaseSensitive(e, "etag");
        if (!cJSON_IsString(p) || !proc_path_safe(p->valuestring, 0) ||
            !cJSON_IsString(sum) ||
            strlen(sum->valuestring) >= sizeof(s->outs[0].sum) ||
            (et && (!cJSON_IsString(et) ||
                    strlen(et->valuestring) >= sizeof(s->outs[0].etag))))
            return -1;
        proc_state_add_out(s, p->valuestring, get_u64(e, "size"),
                           sum->valuestring, et ? et->valuestring : NULL);
    }
    return 0;
}

/* A signed or unsigned 64-bit integer written as a decimal string
 * (nanosecond times and inodes are beyond what a JSON number holds
 * exactly). */
static int get_dec(const cJSON *o, const char *name, int sign, void *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    const char *p = cJSON_IsString(v) ? v->valuestring : NULL;
    char *end = NULL;
    if (!p || !*p || (!sign && *p == '-'))
        return -1;
    errno = 0;
    if (sign)
        *(int64_t *)out = strtoll(p, &end, 10);
    else
        *(uint64_t *)out = strtoull(p, &end, 10);
    return errno || *end ? -1 : 0;
}

/* A path in the run, as the upload engine gives it (hidden names
 * included: DCP's .metadata): relative, no empty, "." or ".."
 * component. */
static int run_path_safe(const char *p)
{
    if (!*p)
        return 0;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') ||
            (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        p += n;
        if (*p == '/' && !*++p)
            return 0;
    }
    return 1;
}

static int below_dir(const struct proc_drops *d, const char *rel)
{
    for (size_t i = 0; i < d->n; i++) {
        size_t n = strlen(d->dirs[i]);
        if (!strncmp(rel, d->dirs[i], n) && rel[n] == '/')
            return 1;
    }
    return 0;
}

static int cmp_drop_rel(const void *a, const void *b)
{
    return strcmp(((const struct proc_drop_file *)a)->rel,
                  ((const struct proc_drop_file *)b)->rel);
}

/* "dropped": {"dirs": [D, ...], "files": [{"path": P, "size": N,
 * "mtime_ns": "T", "ctime_ns": "T", "ino": "I", "etag": E, "changed":
 * W}, ...]}: every dir a safe path in the run, every file a safe path
 * below one of them, once; anything else is an unreadable state (a
 * file is deleted on its word). */
static int parse_dropped(const cJSON *v, struct proc_drops *d)
{
    const cJSON *e;
    if (!v)
        return 0;
    const cJSON *dirs = cJSON_GetObjectItemCaseSensitive(v, "dirs");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(v, "files");
    if (!cJSON_IsObject(v) || !cJSON_IsArray(dirs) || !cJSON_IsArray(files))
        return -1;
    cJSON_ArrayForEach(e, dirs) {
        if (!cJSON_IsString(e) || !run_path_safe(e->valuestring))
            return -1;
        d->dirs = ckpt_xreallocarray(d->dirs, d->n + 1, sizeof(*d->dirs));
        d->dirs[d->n++] = ckpt_xstrdup(e->valuestring);
    }
    cJSON_ArrayForEach(e, files) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "path");
        const cJSON *et = cJSON_GetObjectItemCaseSensitive(e, "etag");
        const cJSON *ch = cJSON_GetObjectItemCaseSensitive(e, "changed");
        struct proc_drop_file f;
        memset(&f, 0, sizeof(f));
        if (!cJSON_IsString(p) || !run_path_safe(p->valuestring) ||
            !below_dir(d, p->valuestring) ||
            get_dec(e, "mtime_ns", 1, &f.v.mtime_ns) != 0 ||
            get_dec(e, "ctime_ns", 1, &f.v.ctime_ns) != 0 ||
            get_dec(e, "ino", 0, &f.v.ino) != 0 ||
            (et && (!cJSON_IsString(et) ||
                    strlen(et->valuestring) >= sizeof(f.etag))) ||
            (ch && !cJSON_IsString(ch)))
            return -1;
        f.v.size = get_u64(e, "size");
        f.v.regular = 1;
        if (et)
            snprintf(f.etag, sizeof(f.etag), "%s", et->valuestring);
        d->files = ckpt_xreallocarray(d->files, d->nfiles + 1,
                                      sizeof(*d->files));
        f.rel = ckpt_xstrdup(p->valuestring);
        f.changed = ch ? ckpt_xstrdup(ch->valuestring) : NULL;
        d->files[d->nfiles++] = f;
    }
    if (d->nfiles)
        ckpt_sort(d->files, d->nfiles, sizeof(*d->files), cmp_drop_rel);
    for (size_t i = 1; i < d->nfiles; i++)
        if (!strcmp(d->files[i - 1].rel, d->files[i].rel))
            return -1;
    d->recorded = d->n > 0;
    return 0;
}

int proc_state_parse(const char *data, size_t len, struct proc_state *s)
{
    memset(s, 0, sizeof(*s));
    cJSON *o = cJSON_ParseWithLength(data, len);
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(o, "phase");
    const cJSON *dest = cJSON_GetObjectItemCaseSensitive(o, "dest");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(o, "why");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(o, "src");
    int rc = -1;
    for (int i = 0; cJSON_IsString(ph) && i < 4; i++)
        if (!strcmp(ph->valuestring, phase_names[i])) {
            s->phase = (enum proc_phase)i;
            rc = 0;
        }
    if (rc == 0 && dest && !(cJSON_IsString(dest) &&
                             proc_path_safe(dest->valuestring, 3)))
        rc = -1;  /* a place outside DEST, or in its state directory */
    else if (rc == 0 && cJSON_IsString(dest))
        s->dest = ckpt_xstrdup(dest->valuestring);
    else if (rc == 0 && (s->phase == PROC_UPLOADED || s->phase == PROC_DONE))
        rc = -1;  /* a finished upload must say where the run went */
    if (rc == 0 && cJSON_IsString(why))
        s->why = ckpt_xstrdup(why->valuestring);
    if (rc == 0 && cJSON_IsString(src))
        s->src = ckpt_xstrdup(src->valuestring);
    if (rc == 0)
        rc = parse_outs(cJSON_GetObjectItemCaseSensitive(o, "unsharded"), s);
    if (rc == 0)
        rc = parse_dropped(cJSON_GetObjectItemCaseSensitive(o, "dropped"),
                           &s->dropped);
    s->files = get_u64(o, "files");
    s->bytes = get_u64(o, "bytes");
    s->steps = get_u64(o, "steps");
    s->freed = get_u64(o, "freed");
    cJSON_Delete(o);
    if (rc != 0)
        proc_state_release(s);
    return rc;
}

int proc_state_read(struct ckpt_storage *st, const char *key,
                    struct proc_state *s, struct ckpt_err *err)
{
    char *data = NULL;
    size_t len = 0;
    memset(s, 0, sizeof(*s));
    if (ckpt_storage_read_all(st, key, STATE_MAX, &data, &len, err) != 0) {
        if (err->code != CKPT_ENOTFOUND)
            return -1;
        ckpt_err_clear(err);
        return 0;
    }
    int rc = proc_state_parse(data, len, s);
    free(data);
    if (rc != 0) {
        char *d = ckpt_storage_display(st, key);
        ckpt_err_set(err, CKPT_EFORMAT, "%s: not a ckpt process state "
                     "object (remove it to start the run over)", d);
        free(d);
    }
    return rc;
}

/* Counts as exact integers (cJSON's own number format keeps only 15
 * significant digits). */
static void add_u64(cJSON *o, const char *name, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    cJSON_AddRawToObject(o, name, buf);
}

static void add_dec(cJSON *o, const char *name, int sign, uint64_t v)
{
    char buf[32];
    if (sign)
        snprintf(buf, sizeof(buf), "%lld", (long long)(int64_t)v);
    else
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    cJSON_AddStringToObject(o, name, buf);
}

static void add_dropped(cJSON *o, const struct proc_drops *d)
{
    cJSON *x = cJSON_AddObjectToObject(o, "dropped");
    cJSON *dirs = cJSON_AddArrayToObject(x, "dirs");
    cJSON *files = cJSON_AddArrayToObject(x, "files");
    for (size_t i = 0; i < d->n; i++)
        cJSON_AddItemToArray(dirs, cJSON_CreateString(d->dirs[i]));
    for (size_t i = 0; i < d->nfiles; i++) {
        const struct proc_drop_file *f = &d->files[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", f->rel);
        add_u64(e, "size", f->v.size);
        add_dec(e, "mtime_ns", 1, (uint64_t)f->v.mtime_ns);
        add_dec(e, "ctime_ns", 1, (uint64_t)f->v.ctime_ns);
        add_dec(e, "ino", 0, f->v.ino);
        if (f->etag[0])
            cJSON_AddStringToObject(e, "etag", f->etag);
        if (f->changed)
            cJSON_AddStringToObject(e, "changed", f->changed);
        cJSON_AddItemToArray(files, e);
    }
}

char *proc_state_format(const char *run, const struct proc_state *s)
{
    char host[256] = "";
    if (gethostname(host, sizeof(host) - 1) != 0)
        strcpy(host, "unknown");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", run);
    cJSON_AddStringToObject(o, "phase", phase_names[s->phase]);
    if (s->dest)
        cJSON_AddStringToObject(o, "dest", s->dest);
    if (s->why)
        cJSON_AddStringToObject(o, "why", s->why);
    if (s->src)
        cJSON_AddStringToObject(o, "src", s->src);
    add_u64(o, "files", s->files);
    add_u64(o, "bytes", s->bytes);
    add_u64(o, "steps", s->steps);
    add_u64(o, "freed", s->freed);
    if (s->nouts) {
        cJSON *a = cJSON_AddArrayToObject(o, "unsharded");
        for (size_t i = 0; i < s->nouts; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "path", s->outs[i].path);
            add_u64(e, "size", s->outs[i].size);
            cJSON_AddStringToObject(e, "sum", s->outs[i].sum);
            if (s->outs[i].etag[0])
                cJSON_AddStringToObject(e, "etag", s->outs[i].etag);
            cJSON_AddItemToArray(a, e);
        }
    }
    if (s->dropped.n && s->dropped.recorded)
        add_dropped(o, &s->dropped);
    cJSON_AddStringToObject(o, "host", host);
    cJSON_AddNumberToObject(o, "pid", (double)getpid());
    cJSON_AddNumberToObject(o, "updated", (double)time(NULL));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        abort();
    return text;
}

int proc_state_write(struct ckpt_storage *st, const char *key,
                     const char *run, const struct proc_state *s,
                     struct ckpt_err *err)
{
    char *text = proc_state_format(run, s);
    int rc = ckpt_storage_put(st, key, text, strlen(text), err);
    free(text);
    return rc;
}

void proc_state_release(struct proc_state *s)
{
    free(s->dest);
    free(s->why);
    free(s->src);
    for (size_t i = 0; i < s->nouts; i++)
        free(s->outs[i].path);
    free(s->outs);
    proc_drops_release(&s->dropped);
    memset(s, 0, sizeof(*s));
}

/* ---- the lease keeper ---- */

/* Renew every renew_interval until stopped. A failed renewal (storage
 * error) is retried sooner; a lost lease stays lost, and
 * proc_keeper_check then refuses every deletion. */
static void *keeper_main(void *arg)
{
    struct proc_keeper *k = arg;
    pthread_mutex_lock(&k->mu);
    int64_t wait = ckpt_lease_renew_interval(k->lease);
    while (!k->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += wait > 0 ? wait : 1;
        int rc = 0;
        while (!k->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&k->cv, &k->mu, &ts);
        if (k->stop)
            break;
        struct ckpt_err err = CKPT_ERR_INIT;
        int r = ckpt_lease_renew(k->lease, NULL, &err);
        if (r == CKPT_LEASE_LOST)
            break;
        wait = r < 0 ? (ckpt_lease_renew_interval(k->lease) + 3) / 4
                     : ckpt_lease_renew_interval(k->lease);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

int proc_keeper_start(struct proc_keeper *k, struct ckpt_storage *st,
                      const char *key, const char *run, int64_t ttl,
                      struct ckpt_lease_holder *holder,
                      struct ckpt_err *err)
{
    memset(k, 0, sizeof(*k));
    struct ckpt_lease_cfg cfg = { .ttl = ttl };
    int r = ckpt_lease_acquire(st, key, run, &cfg, &k->lease, holder, err);
    if (r != CKPT_LEASE_ACQUIRED && r != CKPT_LEASE_TAKEN_OVER)
        return r;
    int64_t t = ttl > 0 ? ttl : CKPT_LEASE_TTL;
    /* More than any sane clock skew, less than what a renewal leaves. */
    k->margin = t / 5 < 1 ? 1 : t / 5 < 60 ? t / 5 : 60;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->started = pthread_create(&k->thread, NULL, keeper_main, k) == 0;
    return r;
}

int proc_keeper_check(struct proc_keeper *k, struct ckpt_err *err)
{
    pthread_mutex_lock(&k->mu);
    int ok = ckpt_lease_valid(k->lease, k->margin);
    int64_t exp = ckpt_lease_expires(k->lease);
    pthread_mutex_unlock(&k->mu);
    if (ok)
        return 0;
    return ckpt_err_set(err, CKPT_EUNSAFE, "the lease on this run was lost "
                        "or ends within %lld s (expires %lld); not deleting",
                        (long long)k->margin, (long long)exp);
}

void proc_keeper_stop(struct proc_keeper *k)
{
    if (!k->lease)
        return;
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    if (k->started)
        pthread_join(k->thread, NULL);
    struct ckpt_err err = CKPT_ERR_INIT;
    /* A lease we could not delete lapses at its expiry. Released after
     * an interrupt too: a rerun then takes the run at once. */
    ckpt_interrupt_shield();
    (void)ckpt_lease_release(k->lease, &err);
    ckpt_interrupt_unshield();
    k->lease = NULL;
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
}
