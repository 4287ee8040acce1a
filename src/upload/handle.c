/*
 * handle.c - the main thread's side of the engine: route each object
 * (skip, compare, resume, upload), and move it on when a unit comes back.
 * The journal is written here, in the order that keeps it true after a
 * crash: an upload id once the service gave it, a part once acknowledged,
 * an object once verified.
 */
#include "upload_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/interrupt.h"
#include "ckpt/util.h"

/* ---- events ---- */

void up_progress(struct ckpt_upload *u, uint64_t items, uint64_t bytes)
{
    u->items_done += items;
    u->bytes_done += bytes;
    if (u->cfg.on_progress)
        u->cfg.on_progress(u->cfg.ud, u->items_done, u->bytes_done,
                           u->t.bytes_sent);
}

void up_emit(struct ckpt_upload *u, enum ckpt_upload_action a,
             const struct obj *o, const char *src, const char *detail)
{
    struct ckpt_upload_totals *t = &u->t;
    uint64_t size = o ? o->size : 0;
    int superseded = o && o->superseded;
    switch (a) {
    case CKPT_UP_UPLOADED:
    case CKPT_UP_WOULD_UPLOAD:
        if (superseded)
            break;
        t->uploaded++;
        t->bytes += size;
        break;
    case CKPT_UP_SKIPPED:
    case CKPT_UP_WOULD_SKIP:
        if (superseded)
            break;
        t->skipped++;
        break;
    case CKPT_UP_FAILED:
        t->failed++;
        break;
    case CKPT_UP_DELETED:
    case CKPT_UP_WOULD_DELETE:
        t->deleted++;
        break;
    case CKPT_UP_ABORTED:
        t->aborted++;
        break;
    case CKPT_UP_WARNING:
        t->warnings++;
        break;
    case CKPT_UP_KEPT:
        t->kept++;
        break;
    }
    struct ckpt_upload_event ev = { a, o ? o->sdisp : src,
                                    o ? o->ddisp : NULL, size,
                                    detail ? detail : "" };
    if (u->cfg.on_event)
        u->cfg.on_event(u->cfg.ud, &ev);
}

static int terminal(const struct obj *o)
{
    return o->st == O_DONE || o->st == O_SKIPPED || o->st == O_FAILED;
}

void up_obj_supersede(struct ckpt_upload *u, struct obj *o)
{
    if (o->superseded)
        return;
    o->superseded = 1;
    u->t.files--;
    u->t.bytes_total -= o->size;
    /* Counted when it got there (up_emit); later events are not. */
    if (o->st == O_DONE) {
        u->t.uploaded--;
        u->t.bytes -= o->size;
    } else if (o->st == O_SKIPPED && !o->conflict_held) {
        u->t.skipped--;
    }
}

static void free_ready(struct ckpt_upload *u, struct obj *o)
{
    while (o->ready) {
        struct unit *n = o->ready->next;
        up_unit_free(u, o->ready);
        o->ready = n;
    }
    o->ready_tail = NULL;
    up_unit_free(u, o->put);
    o->put = NULL;
}

void up_obj_fail(struct ckpt_upload *u, struct obj *o,
                 const struct ckpt_err *err)
{
    if (terminal(o))
        return;
    free_ready(u, o);
    if (err->code == CKPT_EEXIST && o->from_archive && up_extract_holds(o)) {
        /* uncounted: reported at the archive's end, or never */
        o->st = O_SKIPPED;
        o->err = *err;
        o->conflict_held = !o->superseded;
        return;
    }
    o->st = O_FAILED;
    o->err = *err;
    o->g->nfailed++;
    /* After an interrupt every file still to go fails: counted, not
     * listed one by one (the command says "interrupted"). */
    if (!ckpt_interrupted())
        up_emit(u, CKPT_UP_FAILED, o, NULL, err->msg);
    up_progress(u, 1, 0);
}

void up_obj_skip(struct ckpt_upload *u, struct obj *o, const char *why)
{
    free_ready(u, o);
    o->st = O_SKIPPED;
    up_emit(u, u->cfg.dry_run ? CKPT_UP_WOULD_SKIP : CKPT_UP_SKIPPED, o, NULL,
            why);
    up_progress(u, 1, o->size);
}

void up_queue_abort(struct ckpt_upload *u, struct group *g,
                    struct ckpt_storage *st, const char *key, const char *id)
{
    struct unit *un = up_unit_new(u, U_ABORT, NULL);
    un->st = st;
    un->key = ckpt_xstrdup(key);
    un->upload_id = ckpt_xstrdup(id);
    un->ag = g;
    up_ctl_push(u, un);
}

/* ---- two sources, one DEST path ---- */

int up_no_replace(const struct obj *o)
{
    return o->g->u->cfg.no_replace || o->after;
}

int up_claim_path(struct ckpt_upload *u, struct obj *o, size_t idx)
{
    uint64_t v;
    size_t len = strlen(o->ddisp);
    if (o->superseded)
        return 0;
    if (!tf_strmap_get(&u->dpaths, o->ddisp, len, &v)) {
        if (tf_strmap_put(&u->dpaths, o->ddisp, len, idx) != 0)
            ckpt_die_oom("the DEST paths of an upload");
        return 0;
    }
    struct obj *first = u->objs[v];
    if (first->g == o->g)
        return 0;       /* an archive's later copy of a name (tar -r) */
    o->after = first;
    o->deferred = 1;
    return 1;
}

/* What DEST holds at o's path once o->after is finished: its bytes as
 * uploaded (its ETag), or the object it was proven equal to. -n: what
 * the first would upload is not there, so its source is compared. */
static void dest_after(struct ckpt_upload *u, struct obj *o)
{
    const struct obj *p = o->after;
    if (p->st == O_SKIPPED && p->dest) {
        o->dest = p->dest;
        return;
    }
    free(o->dfile.name);
    free(o->dfile.etag);
    o->dfile.name = ckpt_xstrdup("");
    o->dfile.size = p->size;
    o->dfile.mtime = p->mtime;  /* a local copy is given its source's */
    o->dfile.etag = ckpt_xstrdup(p->etag);
    o->dest = &o->dfile;
    if (u->cfg.dry_run)
        o->cmp_src = p;
}

size_t up_route_deferred(struct ckpt_upload *u)
{
    size_t n = 0;
    for (size_t i = 0; i < u->nobjs; i++) {
        struct obj *o = u->objs[i];
        if (!o->deferred || !terminal(o->after))
            continue;
        o->deferred = 0;
        n++;
        if (o->after->st == O_FAILED) {
            struct ckpt_err err = CKPT_ERR_INIT;
            ckpt_err_set(&err, CKPT_EEXIST, "not copied: %s goes to the "
                         "same DEST path, and failed", o->after->sdisp);
            up_obj_fail(u, o, &err);
            continue;
        }
        dest_after(u, o);
        up_obj_route(u, o);
    }
    return n;
}

/* ---- routing ---- */

static void parts_setup(struct obj *o)
{
    if (o->pstate)
        return;
    o->pmd5 = ckpt_xcalloc((size_t)o->nparts, 16);
    o->pstate = ckpt_xcalloc((size_t)o->nparts, 1);
}

/* Queue o to be sent (or compared first, when need_check). */
static void obj_ready(struct ckpt_upload *u, struct obj *o)
{
    if (!o->need_check && u->cfg.dry_run) {
        o->st = O_DONE;
        up_emit(u, CKPT_UP_WOULD_UPLOAD, o, NULL, !o->dest ? "not at DEST"
                : o->dest->size != o->size ? "differs from DEST"
                : o->from_archive ? "at DEST with the same size (archive "
                  "members are compared while they are sent)"
                : "differs from DEST");
        up_progress(u, 1, o->size);
        return;
    }
    o->st = o->need_check ? O_NEW : O_READY;
    if (o->big)
        parts_setup(o);
    up_oq_push(o->big ? &u->big : &u->small, o);
}

/* An unfinished upload of the same bytes: take it over. */
static int try_resume(struct ckpt_upload *u, struct obj *o)
{
    struct group *g = o->g;
    struct jr_pending *p = up_journal_pending(g->jr, o->dkey);
    if (!p)
        return 0;
    p->claimed = 1;
    /* The source changed since, or DEST has the object already (a run
     * killed between CompleteMultipartUpload and its journal line): that
     * upload is garbage (aborting a completed one is a no-op). */
    if (!o->big || p->size != o->size || p->part_size != o->part_size ||
        strcmp(p->srcsig, o->srcsig) || (o->dest &&
                                         o->dest->size == o->size)) {
        up_queue_abort(u, g, g->dst, o->dkey, p->upload_id);
        return 0;
    }
    parts_setup(o);
    o->upload_id = ckpt_xstrdup(p->upload_id);
    o->known = ckpt_xcalloc((size_t)o->nparts, 16);
    o->known_have = ckpt_xcalloc((size_t)o->nparts, 1);
    memcpy(o->known, p->md5, (size_t)o->nparts * 16);
    memcpy(o->known_have, p->have, (size_t)o->nparts);
    o->resumed = 1;
    o->st = O_PARTS;
    up_active_add(u, o);
    return 1;
}

/* Why o can be skipped without reading it, or NULL. */
static const char *quick_skip(struct ckpt_upload *u, struct obj *o)
{
    const struct dentry *d = o->dest;
    struct group *g = o->g;
    int local = ckpt_storage_is_local(g->dst);
    /* Before deleting a source, what is at DEST is compared byte for
     * byte (by MD5), never trusted on metadata alone. */
    if (u->cfg.checksum || u->cfg.delete_source)
        return NULL;
    if (local && !o->from_archive && d->mtime == o->mtime)
        return "same size and modification time";
    const struct jr_done *jd = up_journal_find_done(g->jr, o->dkey);
    if (jd && jd->size == o->size && !strcmp(jd->srcsig, o->srcsig) &&
        !strcmp(jd->etag, d->etag))
        return "copied by an earlier run (journal), DEST unchanged";
    int multi;
    if (o->srcsig[0] == 'e' && ckpt_etag_is_md5(d->etag, &multi) &&
        !strcmp(o->srcsig + 1, d->etag))
        return "same size and ETag";
    return NULL;
}

/* no_replace: DEST holds o's name with other bytes. */
void up_obj_conflict(struct ckpt_upload *u, struct obj *o, const char *how)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (o->after)
        ckpt_err_set(&err, CKPT_EEXIST, "conflict: %s is also where %s "
                     "goes (another SRC of this upload), %s; not "
                     "replaced", o->ddisp, o->after->sdisp, how);
    else
        ckpt_err_set(&err, CKPT_EEXIST, "conflict: %s already exists at "
                     "DEST %s; not replaced (DEST keeps its copy: it may "
                     "be the only one)", o->ddisp, how);
    up_obj_fail(u, o, &err);
}

void up_obj_route(struct ckpt_upload *u, struct obj *o)
{
    if (terminal(o))
        return;
    const struct dentry *d = o->dest;
    if (up_no_replace(o) && d && d->size != o->size) {
        char how[96];
        snprintf(how, sizeof(how), "with %llu bytes, the source has %llu",
                 (unsigned long long)d->size, (unsigned long long)o->size);
        up_obj_conflict(u, o, how);
        return;
    }
    if (!u->cfg.dry_run && try_resume(u, o))
        return;
    if (!d || d->size != o->size) {
        obj_ready(u, o);
        return;
    }
    const char *why = quick_skip(u, o);
    if (why) {
        up_obj_skip(u, o, why);
        return;
    }
    /* Archive members are read once, in order: compared while sent. */
    o->need_check = !o->from_archive;
    obj_ready(u, o);
}

/* ---- back-off ---- */

static double uniform01(void)
{
    static uint64_t x;
    if (!x)
        x = (uint64_t)(ckpt_now() * 1e6) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (double)(x >> 11) / 9007199254740992.0;
}

/* Same-object throttle: R2 allows one write a second per key, so wait at
 * least that, doubling per throttle in a row (jittered, capped at 30 s);
 * the object's parts in flight are halved. */
static void throttle(struct ckpt_upload *u, struct obj *o, struct unit *un)
{
    u->t.throttled++;
    un->throttles++;
    o->throttles++;
    double d = ldexp(1.0, o->throttles > 5 ? 5 : o->throttles - 1);
    d *= 0.5 + 0.5 * uniform01();
    if (d < 1.0)
        d = 1.0;
    if (d > 30.0)
        d = 30.0;
    if (un->res.retry_after > d)
        d = un->res.retry_after < 120 ? un->res.retry_after : 120;
    o->not_before = ckpt_now() + d;
    o->cap = (o->inflight + 1) / 2;
    if (o->cap < 1)
        o->cap = 1;
}

static int give_up(struct ckpt_upload *u, struct unit *un)
{
    return !un->res.throttled || un->throttles >= u->cfg.max_throttles;
}

/* ---- finished units ---- */

static void on_check(struct ckpt_upload *u, struct unit *un)
{
    struct obj *o = un->o;
    if (un->rc != 0) {
        up_obj_fail(u, o, &un->err);
        return;
    }
    if (un->same) {
        up_journal_done(o->g->jr, o->dkey, o->size, o->srcsig,
                        o->dest->etag);
        up_obj_skip(u, o, "same size and checksum");
        return;
    }
    if (up_no_replace(o)) {
        up_obj_conflict(u, o, "with different bytes");
        return;
    }
    o->need_check = 0;
    obj_ready(u, o);
}

static void on_put(struct ckpt_upload *u, struct unit *un)
{
    struct obj *o = un->o;
    if (un->rc != 0 && !give_up(u, un)) {
        throttle(u, o, un);
        un->have_data = 1;
        o->put = un;
        o->st = O_READY;
        up_delayed_add(u, o);
        return;
    }
    if (un->rc != 0) {
        up_obj_fail(u, o, &un->err);
    } else if (un->same) {
        up_obj_skip(u, o, "same size and checksum");
    } else {
        up_journal_done(o->g->jr, o->dkey, o->size, o->srcsig,
                        un->res.etag[0] ? un->res.etag : un->whole);
        snprintf(o->etag, sizeof(o->etag), "%s", un->res.etag);
        o->st = O_DONE;
        o->sent = o->size;
        u->t.bytes_sent += o->size;
        up_emit(u, CKPT_UP_UPLOADED, o, NULL, "");
        up_progress(u, 1, o->size);
    }
    up_unit_free(u, un);
}

static void settle(struct ckpt_upload *u, struct obj *o);

static void on_start(struct ckpt_upload *u, struct unit *un)
{
    struct obj *o = un->o;
    if (un->rc != 0) {
        up_obj_fail(u, o, &un->err);
        return;
    }
    o->upload_id = un->upload_id;
    un->upload_id = NULL;
    up_journal_start(o->g->jr, o->dkey, o->upload_id, o->size, o->part_size,
                     o->srcsig);
    o->st = O_PARTS;
    /* Abandoned while its upload was being created (an archive that
     * failed mid-member): no part will come back to settle it, so abort
     * and fail it now, or the engine waits on it forever. */
    if (o->failing)
        settle(u, o);
}

/* Start over with a fresh upload (the old one vanished under a resume).
 * Archive members cannot: their bytes were streamed past. */
static void restart(struct ckpt_upload *u, struct obj *o)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    up_journal_end(o->g->jr, o->upload_id);
    if (o->from_archive) {
        ckpt_err_set(&err, CKPT_ENOTFOUND, "%s: the unfinished upload "
                     "being resumed vanished; run again", o->ddisp);
        up_obj_fail(u, o, &err);
        return;
    }
    free_ready(u, o);  /* throttled parts: sent again from scratch */
    free(o->upload_id);
    free(o->known);
    free(o->known_have);
    o->upload_id = NULL;
    o->known = NULL;
    o->known_have = NULL;
    memset(o->pstate, 0, (size_t)o->nparts);
    o->next_part = o->ndone = 0;
    o->restarted = 1;
    o->st = O_STARTING;
    up_ctl_push(u, up_unit_new(u, U_START, o));
}


void up_obj_abandon(struct ckpt_upload *u, struct obj *o,
                    const struct ckpt_err *err)
{
    if (terminal(o))
        return;
    if (!o->failing) {
        o->failing = 1;
        o->err = *err;
    }
    /* Not started yet: it is still queued; failing it is enough. */
    if (o->st != O_PARTS && o->st != O_STARTING && o->st != O_FINISHING) {
        up_obj_fail(u, o, err);
        return;
    }
    if (o->st == O_PARTS)
        settle(u, o);
}

/* After a part came back: finish, abort, restart, or wait for more. */
static void settle(struct ckpt_upload *u, struct obj *o)
{
    if (o->inflight || terminal(o))
        return;
    if (o->failing) {
        /* Interrupted: the upload stays, recorded in the journal, for
         * the rerun to resume part by part. */
        if (o->upload_id && !ckpt_interrupted()) {
            up_queue_abort(u, o->g, o->g->dst, o->dkey, o->upload_id);
            u->ctl_tail->quiet = 1;
        }
        up_obj_fail(u, o, &o->err);
    } else if (o->restart) {
        o->restart = 0;
        restart(u, o);
    } else if (o->st == O_PARTS && o->ndone == o->nparts) {
        o->st = O_FINISHING;
        up_ctl_push(u, up_unit_new(u, U_FINISH, o));
    }
}

static void on_part(struct ckpt_upload *u, struct unit *un)
{
    struct obj *o = un->o;
    int k = un->part - 1;
    o->inflight--;
    o->pstate[k] = 0;
    if (un->rc != 0 && !give_up(u, un) && !o->failing) {
        throttle(u, o, un);
        un->have_data = 1;
        un->next = o->ready;
        o->ready = un;
        if (!o->ready_tail)
            o->ready_tail = un;
        return;
    }
    if (un->rc != 0) {
        if (un->err.code == CKPT_ENOTFOUND && o->resumed && !o->restarted)
            o->restart = 1;
        else if (!o->failing) {
            o->failing = 1;
            o->err = un->err;
        }
    } else {
        memcpy(o->pmd5[k], un->md5, 16);
        o->pstate[k] = 2;
        o->ndone++;
        if (un->resumed) {
            o->resumed_bytes += un->len;
            u->t.bytes_resumed += un->len;
        } else {
            up_journal_part(o->g->jr, o->upload_id, un->part, un->md5);
            o->sent += un->len;
            u->t.bytes_sent += un->len;
            o->throttles = 0;
            if (o->cap < u->cfg.jobs)
                o->cap++;
        }
        up_progress(u, 0, un->len);
    }
    up_unit_free(u, un);
    settle(u, o);
}

static void on_finish(struct ckpt_upload *u, struct unit *un)
{
    struct obj *o = un->o;
    if (un->rc != 0) {
        o->failing = 1;
        o->err = un->err;
        settle(u, o);
        return;
    }
    up_journal_end(o->g->jr, o->upload_id);
    up_journal_done(o->g->jr, o->dkey, o->size, o->srcsig, un->res.etag);
    snprintf(o->etag, sizeof(o->etag), "%s", un->res.etag);
    o->st = O_DONE;
    char detail[96] = "";
    if (o->resumed_bytes)
        snprintf(detail, sizeof(detail), "resumed: %llu of %llu bytes "
                 "were sent by an earlier run",
                 (unsigned long long)o->resumed_bytes,
                 (unsigned long long)o->size);
    up_emit(u, CKPT_UP_UPLOADED, o, NULL, detail);
    up_progress(u, 1, 0);
}

static void on_abort(struct ckpt_upload *u, struct unit *un)
{
    char *disp = ckpt_storage_display(un->st, un->key);
    if (un->rc == 0) {
        up_journal_end(un->ag->jr, un->upload_id);
        if (!un->quiet) {
            char *why = ckpt_xasprintf("unfinished upload %s of an earlier "
                                       "run discarded", un->upload_id);
            up_emit(u, CKPT_UP_ABORTED, NULL, disp, why);
            free(why);
        }
    } else if (!ckpt_interrupted()) {
        /* Kept in the journal: the next run tries again. */
        char *why = ckpt_xasprintf("could not discard unfinished upload "
                                   "%s: %s", un->upload_id, un->err.msg);
        up_emit(u, CKPT_UP_WARNING, NULL, disp, why);
        free(why);
    }
    free(disp);
}

static void on_delete(struct ckpt_upload *u, struct unit *un)
{
    const char *src = un->o ? un->o->sdisp : un->ag->sdisp;
    struct ckpt_upload_event ev = { CKPT_UP_DELETED, src, NULL,
                                    un->o ? un->o->size : un->ag->ssb.size,
                                    "" };
    if (un->rc != 0) {
        ev.action = CKPT_UP_FAILED;
        ev.detail = un->err.msg;
        u->t.failed++;
        un->ag->ndel_failed++;
    } else {
        u->t.deleted++;
    }
    if (u->cfg.on_event)
        u->cfg.on_event(u->cfg.ud, &ev);
}

void up_handle_unit(struct ckpt_upload *u, struct unit *un)
{
    switch (un->kind) {
    case U_PUT:
        on_put(u, un);
        return;  /* on_put keeps or frees the unit */
    case U_PART:
        on_part(u, un);
        return;
    case U_CHECK:
        on_check(u, un);
        break;
    case U_START:
        on_start(u, un);
        break;
    case U_FINISH:
        on_finish(u, un);
        break;
    case U_ABORT:
        on_abort(u, un);
        break;
    case U_DELETE:
        on_delete(u, un);
        break;
    }
    up_unit_free(u, un);
}
