/*
 * lease.c - the per-run lease of `ckpt process` (ckpt/lease.h): a JSON
 * object created with a conditional create, taken over after expiry and
 * renewed with a compare-and-swap on the version read.
 */
#include "ckpt/gate.h"
#include "ckpt/lease.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/interrupt.h"
#include "ckpt/util.h"

#define LEASE_MAX 4096      /* a lease is a few hundred bytes */
#define ACQUIRE_TRIES 4     /* create / read / swap rounds under contention */

struct ckpt_lease {
    struct ckpt_storage *st;    /* borrowed */
    char *key;
    struct ckpt_lease_cfg cfg;
    struct ckpt_lease_holder me;
    char version[CKPT_VERSION_MAX];
    int lost;
};

const char *ckpt_lease_result_name(int r)
{
    switch (r) {
    case CKPT_LEASE_ACQUIRED: return "acquired";
    case CKPT_LEASE_TAKEN_OVER: return "taken-over";
    case CKPT_LEASE_LEASED: return "leased";
    case CKPT_LEASE_LOST: return "lost";
    default: return "?";
    }
}

static int64_t now_of(const struct ckpt_lease_cfg *cfg)
{
    return cfg->clock ? cfg->clock(cfg->clock_ud) : (int64_t)time(NULL);
}

/* 128 random bits as hex: tells our writes from a rival's. */
static int new_token(char out[40], struct ckpt_err *err)
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof(r)) {
        ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
        if (n < 0)
            return ckpt_err_sys(err, "getrandom");
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return 0;
}

/* An exact integer (cJSON's own number format keeps 15 significant
 * digits, which a re-read would then not match). */
static void add_i64(cJSON *o, const char *name, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)v);
    cJSON_AddRawToObject(o, name, buf);
}

char *ckpt_lease_format(const struct ckpt_lease_holder *h, size_t *len)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "host", h->host);
    add_i64(o, "pid", h->pid);
    cJSON_AddStringToObject(o, "run", h->run);
    add_i64(o, "acquired", h->acquired);
    add_i64(o, "expires", h->expires);
    cJSON_AddStringToObject(o, "token", h->token);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        ckpt_die_oom("lease JSON");
    char *out = ckpt_xasprintf("%s\n", s);
    cJSON_free(s);
    *len = strlen(out);
    return out;
}

static int get_str(const cJSON *o, const char *name, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
        return -1;
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return 0;
}

static int get_num(const cJSON *o, const char *name, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    /* Out of int64 range the cast is undefined; within 2^53 it is exact. */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -9007199254740992.0 &&
                                v->valuedouble <= 9007199254740992.0))
        return -1;
    *out = (int64_t)v->valuedouble;
    return 0;
}

int ckpt_lease_parse(const char *data, size_t len,
                     struct ckpt_lease_holder *h)
{
    memset(h, 0, sizeof(*h));
    cJSON *o = cJSON_ParseWithLength(data, len);
    int64_t pid = 0;
    int rc = o && cJSON_IsObject(o) &&
             get_str(o, "host", h->host, sizeof(h->host)) == 0 &&
             get_num(o, "pid", &pid) == 0 &&
             get_str(o, "run", h->run, sizeof(h->run)) == 0 &&
             get_num(o, "acquired", &h->acquired) == 0 &&
             get_num(o, "expires", &h->expires) == 0 &&
             get_str(o, "token", h->token, sizeof(h->token)) == 0 &&
             h->token[0] ? 0 : -1;
    h->pid = (long)pid;
    cJSON_Delete(o);
    return rc;
}

/* Read the lease at key: 0 with *h and version, or -1 (CKPT_ENOTFOUND
 * when gone; CKPT_EFORMAT when it is not a lease). */
static int read_lease(struct ckpt_storage *st, const char *key,
                      struct ckpt_lease_holder *h, char *version,
                      struct ckpt_err *err)
{
    char *data = NULL;
    size_t len = 0;
    if (ckpt_storage_get_versioned(st, key, LEASE_MAX, &data, &len, version,
                                   err) != 0)
        return -1;
    int rc = ckpt_lease_parse(data, len, h);
    free(data);
    if (rc != 0) {
        char *what = ckpt_storage_display(st, key);
        ckpt_err_set(err, CKPT_EFORMAT, "%s: not a ckpt lease (remove it "
                     "if no worker is using it)", what);
        free(what);
    }
    return rc;
}

static struct ckpt_lease *lease_new(struct ckpt_storage *st, const char *key,
                                    const char *run,
                                    const struct ckpt_lease_cfg *cfg,
                                    struct ckpt_err *err)
{
    struct ckpt_lease *l = ckpt_xcalloc(1, sizeof(*l));
    l->st = st;
    l->key = ckpt_xstrdup(key);
    if (cfg)
        l->cfg = *cfg;
    if (l->cfg.ttl <= 0)
        l->cfg.ttl = CKPT_LEASE_TTL;
    if (l->cfg.host)
        snprintf(l->me.host, sizeof(l->me.host), "%s", l->cfg.host);
    else if (gethostname(l->me.host, sizeof(l->me.host) - 1) != 0)
        snprintf(l->me.host, sizeof(l->me.host), "unknown");
    l->cfg.host = NULL;     /* not kept: the caller's string may go */
    l->me.pid = l->cfg.pid ? l->cfg.pid : (long)getpid();
    snprintf(l->me.run, sizeof(l->me.run), "%s", run);
    if (new_token(l->me.token, err) != 0) {
        ckpt_lease_free(l);
        return NULL;
    }
    return l;
}

/* Our lease's bytes with a fresh expiry. */
static char *stamp(struct ckpt_lease *l, int fresh, size_t *len)
{
    int64_t now = now_of(&l->cfg);
    if (fresh)
        l->me.acquired = now;
    l->me.expires = now + l->cfg.ttl;
    return ckpt_lease_format(&l->me, len);
}

/* Created: learn our version from a read (put_if_absent does not return
 * one). A different token there means a rival replaced it already. */
static int after_create(struct ckpt_lease *l, struct ckpt_lease_holder *h,
                        struct ckpt_err *err)
{
    if (read_lease(l->st, l->key, h, l->version, err) != 0)
        return err->code == CKPT_ENOTFOUND ? CKPT_LEASE_LOST : -1;
    return strcmp(h->token, l->me.token) ? CKPT_LEASE_LEASED
                                         : CKPT_LEASE_ACQUIRED;
}

/* Is the holder a process of our host that no longer exists? Its lease
 * is then taken over at once, not after its expiry: a worker killed or
 * interrupted on this host is rerun right away (cron, Slurm's requeue).
 * Only ESRCH counts: a live pid, or one we may not signal (EPERM: some
 * other user's process), is a live holder. */
static int holder_dead(const struct ckpt_lease *l,
                       const struct ckpt_lease_holder *h)
{
    if (strcmp(h->host, l->me.host) != 0 || h->pid <= 0 ||
        h->pid > INT_MAX || h->pid == l->me.pid)
        return 0;
    return kill((pid_t)h->pid, 0) != 0 && errno == ESRCH;
}

/* One round: create, else read and maybe take over. Returns a result, -1,
 * or CKPT_LEASE_LOST to mean "changed under us: try again". */
static int acquire_once(struct ckpt_lease *l, struct ckpt_lease_holder *h,
                        struct ckpt_err *err)
{
    size_t len;
    char *body = stamp(l, 1, &len);
    int rc = ckpt_storage_put_if_absent(l->st, l->key, body, len, err);
    free(body);
    if (rc == 0)
        return after_create(l, h, err);
    /* 409 ConditionalRequestConflict: a concurrent create won (S3). */
    if (err->code != CKPT_EEXIST && err->http_status != 409)
        return -1;
    char ver[CKPT_VERSION_MAX];
    if (read_lease(l->st, l->key, h, ver, err) != 0)
        return err->code == CKPT_ENOTFOUND ? CKPT_LEASE_LOST : -1;
    if (now_of(&l->cfg) < h->expires && !holder_dead(l, h))
        return CKPT_LEASE_LEASED;
    body = stamp(l, 1, &len);
    rc = ckpt_storage_put_if_match(l->st, l->key, body, len, ver, l->version,
                                   err);
    free(body);
    if (rc == 0)
        return CKPT_LEASE_TAKEN_OVER;
    return err->code == CKPT_EEXIST ? CKPT_LEASE_LOST : -1;
}

/* Interrupted while acquiring: a create or swap of ours may have landed
 * though its answer never came. The object is read once more, on a
 * shielded thread (ckpt/interrupt.h), and deleted if it carries our
 * token, so that a rerun takes the run at once. */
/* A lease read back with our token, deleted only at that version. */
#define LEASE_OURS CKPT_GATE_OWN(CKPT_GATE_OWN_STATE, "a lease holding this " \
                                 "process's token")

static void drop_if_ours(struct ckpt_lease *l)
{
    struct ckpt_lease_holder h;
    char ver[CKPT_VERSION_MAX];
    struct ckpt_err err = CKPT_ERR_INIT;
    ckpt_interrupt_shield();
    if (read_lease(l->st, l->key, &h, ver, &err) == 0 &&
        !strcmp(h.token, l->me.token))
        (void)ckpt_gate_delete_if_match(LEASE_OURS, l->st, l->key, ver,
                                        &err);
    ckpt_interrupt_unshield();
}

int ckpt_lease_acquire(struct ckpt_storage *st, const char *key,
                       const char *run, const struct ckpt_lease_cfg *cfg,
                       struct ckpt_lease **out,
                       struct ckpt_lease_holder *holder,
                       struct ckpt_err *err)
{
    *out = NULL;
    struct ckpt_lease_holder tmp;
    struct ckpt_lease_holder *h = holder ? holder : &tmp;
    struct ckpt_lease *l = lease_new(st, key, run, cfg, err);
    if (!l)
        return -1;
    int rc = CKPT_LEASE_LOST;
    for (int i = 0; i < ACQUIRE_TRIES && rc == CKPT_LEASE_LOST; i++)
        rc = acquire_once(l, h, err);
    if (rc < 0 && ckpt_interrupted())
        drop_if_ours(l);
    if (rc == CKPT_LEASE_LOST) {
        char *what = ckpt_storage_display(st, key);
        rc = ckpt_err_set(err, CKPT_EEXIST, "%s: the lease kept changing "
                          "under %d attempts", what, ACQUIRE_TRIES);
        free(what);
    }
    if (rc == CKPT_LEASE_ACQUIRED || rc == CKPT_LEASE_TAKEN_OVER)
        *out = l;
    else
        ckpt_lease_free(l);
    return rc;
}

int ckpt_lease_renew(struct ckpt_lease *l, struct ckpt_lease_holder *holder,
                     struct ckpt_err *err)
{
    if (l->lost)
        return CKPT_LEASE_LOST;
    struct ckpt_lease_holder keep = l->me;
    size_t len;
    char *body = stamp(l, 0, &len);
    char ver[CKPT_VERSION_MAX];
    int rc = ckpt_storage_put_if_match(l->st, l->key, body, len, l->version,
                                       ver, err);
    free(body);
    if (rc == 0) {
        memcpy(l->version, ver, sizeof(ver));
        return CKPT_LEASE_ACQUIRED;
    }
    l->me = keep;               /* the old expiry still stands */
    if (err->code != CKPT_EEXIST)
        return -1;
    l->lost = 1;
    if (holder) {
        struct ckpt_err e2;
        char v2[CKPT_VERSION_MAX];
        if (read_lease(l->st, l->key, holder, v2, &e2) != 0)
            memset(holder, 0, sizeof(*holder));
    }
    return CKPT_LEASE_LOST;
}

int ckpt_lease_release(struct ckpt_lease *l, struct ckpt_err *err)
{
    int rc = CKPT_LEASE_LOST;
    struct ckpt_lease_holder h;
    char ver[CKPT_VERSION_MAX];
    if (!l->lost) {
        if (read_lease(l->st, l->key, &h, ver, err) != 0)
            rc = err->code == CKPT_ENOTFOUND ? 0 : -1;
        else if (!strcmp(h.token, l->me.token))
            rc = ckpt_gate_delete_if_match(LEASE_OURS, l->st, l->key, ver,
                                           err) == 0
                 ? 0 : err->code == CKPT_EEXIST ? CKPT_LEASE_LOST : -1;
    }
    ckpt_lease_free(l);
    return rc;
}

void ckpt_lease_free(struct ckpt_lease *l)
{
    if (!l)
        return;
    free(l->key);
    free(l);
}

int64_t ckpt_lease_expires(const struct ckpt_lease *l)
{
    return l->me.expires;
}

int64_t ckpt_lease_renew_interval(const struct ckpt_lease *l)
{
    return l->cfg.ttl / 3 > 0 ? l->cfg.ttl / 3 : 1;
}

int ckpt_lease_valid(const struct ckpt_lease *l, int64_t margin)
{
    return !l->lost && now_of(&l->cfg) + margin < l->me.expires;
}

const char *ckpt_lease_token(const struct ckpt_lease *l)
{
    return l->me.token;
}

void ckpt_lease_holder_str(const struct ckpt_lease_holder *h, char *buf,
                           size_t cap)
{
    time_t t = (time_t)h->expires;
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(buf, cap, "%s:%ld until %s", h->host, h->pid, when);
}
