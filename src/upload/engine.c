/*
 * engine.c - the scheduler: one pool of -j workers shared by whole-file
 * PUTs, parts of large files, checks and control requests; one memory
 * budget for every data buffer.
 *
 * The main thread owns all state. It hands workers units whose buffers it
 * allocated, gets them back through a mutex-guarded list, moves the
 * object's state on (handle.c) and refills the free slots. Slots are
 * filled alternately from the small-file queue and the large-file parts,
 * so small files never wait behind a large one and a large one still gets
 * every slot the small ones leave. A large object's parts go out up to
 * its own cap, which halves when the service says that object is written
 * too often and grows back by one per acknowledged part.
 */
#include "upload_int.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/util.h"

static void cache_drop(struct ckpt_upload *u);

/* ---- lifecycle ---- */

struct ckpt_upload *ckpt_upload_new(const struct ckpt_upload_cfg *cfg)
{
    struct ckpt_upload *u = ckpt_xcalloc(1, sizeof(*u));
    u->cfg = *cfg;
    if (u->cfg.jobs < 1)
        u->cfg.jobs = 1;
    if (u->cfg.max_throttles <= 0)
        u->cfg.max_throttles = DEFAULT_THROTTLES;
    u->budget = u->cfg.mem_budget ? u->cfg.mem_budget : DEFAULT_BUDGET;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    if (u->cfg.rate)
        u->bw = u->cfg.rate;
    else if (u->cfg.bwlimit) {
        u->bw = ckpt_rate_new(u->cfg.bwlimit);
        u->bw_owned = 1;
    }
    u->start = ckpt_now();
    return u;
}

void ckpt_upload_free(struct ckpt_upload *u)
{
    if (!u)
        return;
    if (u->bw_owned)
        ckpt_rate_free(u->bw);
    for (size_t i = 0; i < u->nobjs; i++) {
        struct obj *o = u->objs[i];
        while (o->ready) {
            struct unit *n = o->ready->next;
            up_unit_free(u, o->ready);
            o->ready = n;
        }
        up_unit_free(u, o->put);
        up_obj_free(o);
    }
    free(u->objs);
    tf_strmap_release(&u->dpaths);
    for (size_t i = 0; i < u->ngroups; i++)
        up_group_free(u->groups[i]);
    free(u->groups);
    free(u->active);
    free(u->delayed);
    cache_drop(u);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}

const char *ckpt_upload_action_name(enum ckpt_upload_action a)
{
    static const char *const names[] = {
        "uploaded", "skipped", "failed", "would-upload", "would-skip",
        "deleted", "would-delete", "aborted", "warning", "kept",
    };
    return (unsigned)a < sizeof(names) / sizeof(names[0]) ? names[a] : "?";
}

/* ---- units and buffers ---- */

struct unit *up_unit_new(struct ckpt_upload *u, enum unit_kind k,
                         struct obj *o)
{
    struct unit *un = ckpt_xcalloc(1, sizeof(*un));
    un->u = u;
    un->kind = k;
    un->o = o;
    return un;
}

/* Large buffers are kept for reuse (parts of one object are the same
 * size): a fresh mapping per part costs a page fault per 4 KiB. Kept
 * buffers still count against the budget. */
#define CACHE_MIN (1u << 20)

static void buf_give(struct ckpt_upload *u, char *p, size_t cap)
{
    if (cap >= CACHE_MIN && u->ncache < MAX_CACHE) {
        u->cache[u->ncache].p = p;
        u->cache[u->ncache++].cap = cap;
        return;
    }
    u->mem_used -= cap;
    free(p);
}

static void cache_drop(struct ckpt_upload *u)
{
    while (u->ncache) {
        u->ncache--;
        u->mem_used -= u->cache[u->ncache].cap;
        free(u->cache[u->ncache].p);
    }
}

void up_unit_free(struct ckpt_upload *u, struct unit *un)
{
    if (!un)
        return;
    if (un->buf)
        buf_give(u, un->buf, un->cap);
    free(un->key);
    free(un->upload_id);
    if (un->spooled)
        free(un->spooled->path);
    free(un->spooled);
    free(un);
}

char *up_buf_take(struct ckpt_upload *u, size_t n, int force)
{
    for (size_t i = 0; n >= CACHE_MIN && i < u->ncache; i++) {
        if (u->cache[i].cap != n)
            continue;
        char *p = u->cache[i].p;
        u->cache[i] = u->cache[--u->ncache];
        return p;
    }
    /* Make room by letting go of kept buffers of other sizes. */
    while (u->ncache && u->mem_used + n > u->budget) {
        u->ncache--;
        u->mem_used -= u->cache[u->ncache].cap;
        free(u->cache[u->ncache].p);
    }
    if (u->mem_used + n > u->budget && !force)
        return NULL;
    u->mem_used += n;
    return ckpt_xmalloc(n ? n : 1);
}

/* Give un a data buffer of n bytes (n >= 1); 0, or -1 over budget. */
static int unit_buf(struct ckpt_upload *u, struct unit *un, size_t n,
                    int force)
{
    un->buf = up_buf_take(u, n, force);
    if (!un->buf)
        return -1;
    un->cap = n;
    return 0;
}

/* ---- queues ---- */

void up_oq_push(struct oq *q, struct obj *o)
{
    o->qnext = NULL;
    if (q->tail)
        q->tail->qnext = o;
    else
        q->head = o;
    q->tail = o;
}

static void oq_push_front(struct oq *q, struct obj *o)
{
    o->qnext = q->head;
    q->head = o;
    if (!q->tail)
        q->tail = o;
}

static struct obj *oq_pop(struct oq *q)
{
    struct obj *o = q->head;
    if (o) {
        q->head = o->qnext;
        if (!q->head)
            q->tail = NULL;
        o->qnext = NULL;
    }
    return o;
}

void up_ctl_push(struct ckpt_upload *u, struct unit *un)
{
    un->next = NULL;
    if (u->ctl_tail)
        u->ctl_tail->next = un;
    else
        u->ctl = un;
    u->ctl_tail = un;
}

static struct unit *ctl_pop(struct ckpt_upload *u)
{
    struct unit *un = u->ctl;
    if (un) {
        u->ctl = un->next;
        if (!u->ctl)
            u->ctl_tail = NULL;
        un->next = NULL;
    }
    return un;
}

void up_active_add(struct ckpt_upload *u, struct obj *o)
{
    if (u->nactive == u->capactive) {
        u->capactive = u->capactive ? 2 * u->capactive : 16;
        u->active = ckpt_xreallocarray(u->active, u->capactive,
                                       sizeof(*u->active));
    }
    u->active[u->nactive++] = o;
}

/* Drop finished objects from the active list (keeping order). */
static void active_sweep(struct ckpt_upload *u)
{
    size_t w = 0;
    for (size_t i = 0; i < u->nactive; i++) {
        enum obj_state s = u->active[i]->st;
        if (s != O_DONE && s != O_FAILED && s != O_SKIPPED)
            u->active[w++] = u->active[i];
    }
    u->nactive = w;
}

void up_delayed_add(struct ckpt_upload *u, struct obj *o)
{
    if (u->ndelayed == u->capdelayed) {
        u->capdelayed = u->capdelayed ? 2 * u->capdelayed : 16;
        u->delayed = ckpt_xreallocarray(u->delayed, u->capdelayed,
                                        sizeof(*u->delayed));
    }
    u->delayed[u->ndelayed++] = o;
}

/* Small objects whose back-off has ended go back to the queue's front. */
static double delayed_sweep(struct ckpt_upload *u, double now)
{
    double next = 0;
    size_t w = 0;
    for (size_t i = 0; i < u->ndelayed; i++) {
        struct obj *o = u->delayed[i];
        if (o->not_before <= now) {
            oq_push_front(&u->small, o);
            continue;
        }
        if (!next || o->not_before < next)
            next = o->not_before;
        u->delayed[w++] = o;
    }
    u->ndelayed = w;
    return next;
}

/* ---- picking the next unit ---- */

static int gone(const struct obj *o)
{
    return o->st == O_DONE || o->st == O_SKIPPED || o->st == O_FAILED;
}

static struct unit *pick_small(struct ckpt_upload *u, int force)
{
    while (u->small.head && gone(u->small.head))
        oq_pop(&u->small);
    struct obj *o = u->small.head;
    if (!o)
        return NULL;
    struct unit *un;
    if (o->st == O_NEW) {
        un = up_unit_new(u, U_CHECK, o);
        size_t n = o->size < CHECK_CHUNK ? (size_t)o->size : CHECK_CHUNK;
        if (unit_buf(u, un, n ? n : 1, force) != 0) {
            free(un);
            return NULL;
        }
        un->dry = u->cfg.dry_run;
        o->st = O_CHECKING;
    } else if (o->put) {
        un = o->put;  /* produced by the archive reader, or throttled */
        o->put = NULL;
        o->st = O_PUTTING;
    } else {
        un = up_unit_new(u, U_PUT, o);
        /* One byte more than listed, to notice a file that grew; a
         * streamed PUT only needs a buffer to hash the file through. */
        size_t n = o->stream ? STREAM_CHUNK : (size_t)o->size + 1;
        if (unit_buf(u, un, n, force) != 0) {
            free(un);
            return NULL;
        }
        o->st = O_PUTTING;
    }
    oq_pop(&u->small);
    return un;
}

/* The next part of an active object, if one may go now. */
static struct unit *next_part(struct ckpt_upload *u, struct obj *o,
                              int force, int *over)
{
    if (o->st != O_PARTS || o->failing || o->inflight >= o->cap ||
        o->not_before > ckpt_now())
        return NULL;
    struct unit *un = o->ready;
    if (un) {
        o->ready = un->next;
        if (!o->ready)
            o->ready_tail = NULL;
        un->next = NULL;
    } else if (!o->from_archive && o->next_part < o->nparts) {
        int k = o->next_part;
        uint64_t off = (uint64_t)k * o->part_size;
        uint64_t len = o->size - off < o->part_size ? o->size - off
                                                    : o->part_size;
        un = up_unit_new(u, U_PART, o);
        if (unit_buf(u, un, (size_t)len, force) != 0) {
            free(un);
            *over = 1;
            return NULL;
        }
        un->part = k + 1;
        un->off = off;
        un->len = (size_t)len;
        o->next_part++;
    } else {
        return NULL;
    }
    o->pstate[un->part - 1] = 1;
    o->inflight++;
    return un;
}

static struct unit *pick_big(struct ckpt_upload *u, int force)
{
    int over = 0;
    for (size_t i = 0; i < u->nactive && !over; i++) {
        struct unit *un = next_part(u, u->active[i], force, &over);
        if (un)
            return un;
    }
    if (over)
        return NULL;
    while (u->big.head && gone(u->big.head))
        oq_pop(&u->big);
    struct obj *o = u->big.head;
    if (!o)
        return NULL;
    struct unit *un;
    if (o->st == O_NEW) {
        un = up_unit_new(u, U_CHECK, o);
        if (unit_buf(u, un, CHECK_CHUNK, force) != 0) {
            free(un);
            return NULL;
        }
        un->dry = u->cfg.dry_run;
        o->st = O_CHECKING;
    } else {
        un = up_unit_new(u, U_START, o);
        o->st = O_STARTING;
        up_active_add(u, o);
    }
    oq_pop(&u->big);
    return un;
}

/* ---- workers ---- */

static void worker(void *arg)
{
    struct unit *un = arg;
    struct ckpt_upload *u = un->u;
    up_unit_run(un);
    pthread_mutex_lock(&u->mu);
    un->next = NULL;
    if (u->done_tail)
        u->done_tail->next = un;
    else
        u->done_head = un;
    u->done_tail = un;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

static void submit(struct ckpt_upload *u, struct unit *un)
{
    u->inflight++;
    ckpt_pool_submit(u->pool, worker, un);
}

/* Fill the free slots; returns how many units went out. */
static int dispatch(struct ckpt_upload *u)
{
    int sent = 0;
    while (u->inflight < u->cfg.jobs) {
        int force = u->inflight == 0;
        struct unit *un = ctl_pop(u);
        for (int i = 0; i < 2 && !un; i++) {
            u->turn ^= 1;
            un = u->turn ? pick_big(u, force) : pick_small(u, force);
        }
        if (!un)
            break;
        submit(u, un);
        sent++;
    }
    return sent;
}

/* Handle every unit the workers gave back. */
static int drain(struct ckpt_upload *u)
{
    pthread_mutex_lock(&u->mu);
    struct unit *un = u->done_head;
    u->done_head = u->done_tail = NULL;
    pthread_mutex_unlock(&u->mu);
    int n = 0;
    while (un) {
        struct unit *next = un->next;
        u->inflight--;
        up_handle_unit(u, un);
        un = next;
        n++;
    }
    active_sweep(u);
    return n;
}

/* Wait for a unit to come back, or until `until` (0: no limit). */
static void wait_done(struct ckpt_upload *u, double until)
{
    pthread_mutex_lock(&u->mu);
    while (!u->done_head) {
        if (!until) {
            pthread_cond_wait(&u->cv, &u->mu);
            continue;
        }
        double left = until - ckpt_now();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec / 1e9 + left;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        if (pthread_cond_timedwait(&u->cv, &u->mu, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&u->mu);
}

/* The archive readers produce while the budget allows. Returns 1 while
 * some archive is unfinished. */
static int produce(struct ckpt_upload *u)
{
    int open = 0;
    for (size_t i = u->next_archive; i < u->ngroups; i++) {
        struct group *g = u->groups[i];
        if (g->kind != G_ARCHIVE || g->extracted)
            continue;
        open = 1;
        /* One archive at a time: it is one sequential stream. Send
         * what was read as soon as it was read. */
        while (u->inflight < u->cfg.jobs && up_extract_step(u, g) == 1)
            dispatch(u);
        if (!g->extracted)
            break;
    }
    return open;
}

static int idle(struct ckpt_upload *u)
{
    if (u->inflight || u->ctl || u->small.head || u->big.head ||
        u->ndelayed)
        return 0;
    for (size_t i = 0; i < u->nactive; i++)
        if (u->active[i]->st != O_DONE && u->active[i]->st != O_FAILED)
            return 0;
    return 1;
}

void up_engine_loop(struct ckpt_upload *u)
{
    for (;;) {
        drain(u);
        double next = delayed_sweep(u, ckpt_now());
        int archives = produce(u);
        dispatch(u);
        if (!archives && idle(u) && !up_route_deferred(u))
            return;
        if (u->inflight) {
            wait_done(u, next);
            continue;
        }
        /* Nothing in flight: sleep out a back-off, or go round again
         * (the archive reader or a big object's timer has work). */
        double until = next;
        for (size_t i = 0; i < u->nactive; i++) {
            double nb = u->active[i]->not_before;
            if (nb > ckpt_now() && (!until || nb < until))
                until = nb;
        }
        if (until)
            wait_done(u, until);
    }
}

void up_engine_start(struct ckpt_upload *u)
{
#ifdef M_MMAP_THRESHOLD
    /* Part buffers come and go by the thousand: give them back to the
     * system on free, or glibc's heap keeps the peak (RSS budget). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    u->pool = ckpt_pool_new(u->cfg.jobs, (size_t)u->cfg.jobs + 1);
}

void up_engine_stop(struct ckpt_upload *u)
{
    ckpt_pool_free(u->pool);
    u->pool = NULL;
    cache_drop(u);
}
