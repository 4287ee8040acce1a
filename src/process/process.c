/*
 * process.c - `ckpt process` as a library (ckpt/process.h): the queue of
 * runs, and each run's phases in order: lease, judge, map, unshard,
 * upload, verify + delete. Each phase emits one event; the last event of
 * a run is its row.
 *
 * Upload, verification and deletion are one pass of the upload engine,
 * as `upload --delete-source` (every file's MD5 checked against DEST,
 * nothing deleted unless everything arrived; sources re-checked unchanged
 * before each deletion, OLMo `latest` links and emptied directories
 * removed). Before the first deletion the lease is checked and the state
 * written as "uploaded"; before every other one the lease is checked. A
 * run found "uploaded" later (a worker died while deleting) gets a second
 * kind of pass: every source file compared by checksum, then deleted.
 *
 * Unshard outputs are written straight to their place at DEST by the
 * unshard library (no local copy), through DEST's own storage; each one
 * (path, size, checksum) is recorded in the state as soon as its step is
 * done. Before anything is judged droppable or deleted, every recorded
 * output is checked at DEST: there with its size and checksum, its step's
 * "-unfinished" marker gone. The upload passes never touch them.
 */
#include "ckpt/process.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckpt/archive.h"
#include "ckpt/buf.h"
#include "ckpt/tempname.h"
#include "ckpt/unshard.h"
#include "ckpt/upload.h"
#include "ckpt/text.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "process_int.h"

#define STATE_DIR ".ckpt-process"
#define DEFAULT_JOBS 32
#define MIB (1024ULL * 1024)
#define DEFAULT_MEM (96 * MIB)  /* upload's own default, for all runs */
#define MIN_RUN_MEM (16 * MIB)  /* upload's --memory floor */

struct prun {
    struct ckpt_storage *st;    /* borrowed */
    char *key;
    char *display;
    char *id;                   /* RUN_ID: base name or archive stem */
    char *srcid;                /* what the state records as its source */
    size_t dup;                 /* 1 + index of an earlier run of the
                                   queue with the same id, or 0 */
};

struct ckpt_process {
    struct ckpt_process_cfg cfg;
    struct prun *runs;
    size_t n;
    char **ids;                 /* borrowed from runs, for _ids() */
    char **logs;                /* keys below cfg.logs_key */
    size_t nlogs;
    char *tmp;                  /* owned: unshard's scratch (steps of
                                   compressed archives), never outputs */
    /* Several runs are worked on at once (cfg.runs): events, totals and
     * progress from their threads go through mu, so the caller sees
     * whole events one at a time and the totals stay exact. */
    pthread_mutex_t mu;
    struct ckpt_process_totals *t;
    size_t next;                /* the next queued run to start */
    int par;                    /* runs in flight */
    int run_jobs;               /* upload workers per run */
    uint64_t run_mem;           /* upload data buffers per run */
    uint64_t items, bytes;      /* progress of every run together */
    struct ckpt_spool_budget spools;    /* --spool-limit, all runs */
};

/* One run being worked on. */
struct one {
    struct ckpt_process *p;
    const struct prun *r;
    struct proc_keeper k;
    char *state_key, *lease_key;
    char *dkey, *ddisp;         /* where the run goes */
    struct proc_state s;
    struct ckpt_buf fail;       /* first failed file of a pass */
    int fail_delete;            /* ...and it was a deletion */
    uint64_t freed, steps;
    double t0;
    uint64_t pitems, pbytes;    /* progress of the current upload pass */
    int failed;                 /* the run failed or was unmapped */
    /* First pass: state "uploaded" is written right before the first
     * deletion (upload deletes only once everything arrived and was
     * verified), from whichever worker thread gets there. */
    int save_on_delete, saved;
    pthread_mutex_t mu;
    struct proc_drops drops;    /* steps left out and deleted */
    /* -n: what the unshard phase would make (it writes nothing): its
     * steps count as unsharded for --drop-sharded, its planned files
     * as uploaded, so the plan predicts the run's row exactly. */
    int64_t *would;
    size_t nwould;
    /* Output directories (DEST-relative to dkey) that unshard found
     * complete at DEST and skipped: adopted when the state lacks them. */
    char **have;
    size_t nhave;
    /* -n: output directories of the steps it would unshard. */
    char **wdirs;
    size_t nwdirs;
    int state_failed;           /* a state write during unshard failed */
    enum proc_phase s_before;   /* the state before "deleted" was written */
    int s_had;                  /* ...and there was one */
    /* Steps whose unshard output verified at DEST (--drop-sharded). */
    int64_t *made;
    size_t nmade;
    /* The state read at the start says this run (this source, this DEST
     * path) finished an upload there: it may replace its own files at
     * DEST; any other run may not (upload's no_replace). */
    int own;
    /* -n: the files DEST would hold after the pass (display -> size),
     * as the real run counts them (count_dest). */
    struct pfile {
        char *disp;
        uint64_t size;
        size_t seq;
        int base;           /* listed at DEST now (an upload's word on
                               the same name comes after it) */
    } *pf;
    size_t npf;
    /* What a pass leaves at the source by design, for the row: symlinks
     * and special files never copied, files kept (a dropped file changed
     * since it was judged). Paths in the run. */
    struct ckpt_buf specials, kept;
    size_t nspecials, nkept;
    char **keptv;               /* owned: kept files, as in the run */
    size_t nkeptv;
    /* A compressed archive read once into a spool that every phase
     * reads (attached while the run is worked on), within p->spools. */
    struct ckpt_archive_spool *spool;
};

const char *ckpt_process_phase_name(enum ckpt_process_phase p)
{
    static const char *const n[] = { "judge", "lease", "map", "unshard",
                                     "upload", "verify", "delete", "run",
                                     "spool" };
    return (unsigned)p < sizeof(n) / sizeof(n[0]) ? n[p] : "?";
}

const char *ckpt_process_status_name(enum ckpt_process_status s)
{
    static const char *const n[] = { "ok", "done", "deleted", "skipped",
                                     "failed", "would" };
    return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

/* ---- events ---- */

static void emit(struct one *o, enum ckpt_process_phase ph,
                 enum ckpt_process_status st, const char *detail,
                 uint64_t files, uint64_t bytes)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_process_event ev = {
        ph, st, o->r->display, o->r->id, o->ddisp, detail ? detail : "", 0,
        files, bytes, o->steps, o->freed, ckpt_now() - o->t0
    };
    if (!c->on_event)
        return;
    pthread_mutex_lock(&o->p->mu);
    c->on_event(c->ud, &ev);
    pthread_mutex_unlock(&o->p->mu);
}

/* The run's row; counts it in the totals. */
static void finish(struct one *o, enum ckpt_process_status st,
                   const char *detail, int warn)
{
    struct ckpt_process_totals *t = o->p->t;
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_process_event ev = {
        CKPT_PROC_RUN, st, o->r->display, o->r->id, o->ddisp,
        detail ? detail : "", warn, o->s.files, o->s.bytes, o->steps,
        o->freed, ckpt_now() - o->t0
    };
    if (st == CKPT_PROC_FAILED)
        o->failed = 1;
    pthread_mutex_lock(&o->p->mu);
    switch (st) {
    case CKPT_PROC_OK:
    case CKPT_PROC_WOULD:
        t->processed++;
        break;
    case CKPT_PROC_DONE:
        t->done++;
        break;
    case CKPT_PROC_DELETED:
        t->deleted++;
        break;
    case CKPT_PROC_SKIPPED:
        t->skipped++;
        break;
    case CKPT_PROC_FAILED:
        t->failed++;
        break;
    }
    if (st == CKPT_PROC_OK || st == CKPT_PROC_WOULD) {
        t->files += o->s.files;
        t->bytes += o->s.bytes;
    }
    t->steps += o->steps;
    t->freed += o->freed;
    if (c->on_event)
        c->on_event(c->ud, &ev);
    pthread_mutex_unlock(&o->p->mu);
}

/* "phase: reason" as a failed row. */
static void fail_run(struct one *o, enum ckpt_process_phase ph,
                     const char *why)
{
    emit(o, ph, CKPT_PROC_FAILED, why, 0, 0);
    char *d = ckpt_xasprintf("%s: %s", ckpt_process_phase_name(ph), why);
    finish(o, CKPT_PROC_FAILED, d, 0);
    free(d);
}

/* ---- the upload passes ---- */

/* -n: DEST would hold the file shown as disp with size bytes (the
 * later word on one name wins: an upload replaces what DEST lists). */
static void predict_file(struct one *o, const char *disp, uint64_t size,
                         int base)
{
    pthread_mutex_lock(&o->mu);
    o->pf = ckpt_xreallocarray(o->pf, o->npf + 1, sizeof(*o->pf));
    o->pf[o->npf].disp = ckpt_xstrdup(disp);
    o->pf[o->npf].size = size;
    o->pf[o->npf].base = base;
    o->pf[o->npf].seq = o->npf;
    o->npf++;
    pthread_mutex_unlock(&o->mu);
}

static int cmp_pf(const void *a, const void *b)
{
    const struct pfile *x = a, *y = b;
    int c = strcmp(x->disp, y->disp);
    if (c || x->base != y->base)
        return c ? c : y->base - x->base;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* -n: files and bytes of the predicted set, each name once (its last
 * word); the set is emptied. */
static void predicted_total(struct one *o, uint64_t *files, uint64_t *bytes)
{
    *files = *bytes = 0;
    if (o->npf)
        ckpt_sort(o->pf, o->npf, sizeof(*o->pf), cmp_pf);
    for (size_t i = 0; i < o->npf; i++) {
        if (i + 1 == o->npf || strcmp(o->pf[i].disp, o->pf[i + 1].disp)) {
            (*files)++;
            *bytes += o->pf[i].size;
        }
        free(o->pf[i].disp);
    }
    free(o->pf);
    o->pf = NULL;
    o->npf = 0;
}

/* ev->src as a path in the run (its display stripped), or as given. */
static const char *in_run(const struct one *o, const char *src)
{
    size_t n = strlen(o->r->display);
    return !strncmp(src, o->r->display, n) && src[n] == '/' ? src + n + 1
                                                            : src;
}

static void up_event(void *ud, const struct ckpt_upload_event *ev)
{
    struct one *o = ud;
    if (ev->action == CKPT_UP_WARNING &&
        (!strcmp(ev->detail, CKPT_UP_WHY_LINK) ||
         !strcmp(ev->detail, CKPT_UP_WHY_ARCHIVE_LINK) ||
         !strcmp(ev->detail, CKPT_UP_WHY_SPECIAL))) {
        pthread_mutex_lock(&o->mu);
        ckpt_buf_addf(&o->specials, "%s%s", o->nspecials++ ? ", " : "",
                      in_run(o, ev->src));
        pthread_mutex_unlock(&o->mu);
    }
    if (ev->action == CKPT_UP_KEPT) {
        pthread_mutex_lock(&o->mu);
        ckpt_buf_addf(&o->kept, "%s%s (%s)", o->nkept++ ? ", " : "",
                      in_run(o, ev->src), ev->detail);
        o->keptv = ckpt_xreallocarray(o->keptv, o->nkeptv + 1,
                                      sizeof(*o->keptv));
        o->keptv[o->nkeptv++] = ckpt_xstrdup(in_run(o, ev->src));
        pthread_mutex_unlock(&o->mu);
    }
    /* -n: what would be freed, as the plan's row says. */
    if (ev->action == CKPT_UP_DELETED || ev->action == CKPT_UP_WOULD_DELETE)
        o->freed += ev->bytes;
    if ((ev->action == CKPT_UP_WOULD_UPLOAD ||
         ev->action == CKPT_UP_WOULD_SKIP) && ev->dest)
        predict_file(o, ev->dest, ev->bytes, 0);
    if (ev->action == CKPT_UP_FAILED && !o->fail.len) {
        ckpt_buf_addf(&o->fail, "%s: %s", ev->src, ev->detail);
        o->fail_delete = ev->dest == NULL;
    }
}

/* Each pass counts from zero; the caller gets the sum over every run
 * (several passes run at once), never going back. */
static void up_progress(void *ud, uint64_t items, uint64_t bytes)
{
    struct one *o = ud;
    struct ckpt_process *p = o->p;
    pthread_mutex_lock(&p->mu);
    if (items >= o->pitems && bytes >= o->pbytes) {
        p->items += items - o->pitems;
        p->bytes += bytes - o->pbytes;
        o->pitems = items;
        o->pbytes = bytes;
        if (p->cfg.on_progress)
            p->cfg.on_progress(p->cfg.ud, p->items, p->bytes);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Before each deletion of a source file: the lease must still be ours,
 * and the state must say "uploaded" (a worker killed from here on leaves
 * a run the next one verifies and deletes, never judges again). */
static int up_may_delete(void *ud, struct ckpt_err *err)
{
    struct one *o = ud;
    if (proc_keeper_check(&o->k, err) != 0)
        return -1;
    int rc = 0;
    pthread_mutex_lock(&o->mu);
    if (o->save_on_delete && !o->saved) {
        /* The source, as every state records it: a run of the same id
         * from elsewhere must not pass for this one's rerun. */
        if (!o->s.src)
            o->s.src = ckpt_xstrdup(o->r->srcid);
        struct proc_state s = o->s;   /* counts come with "done" */
        s.phase = PROC_UPLOADED;
        /* What is dropped, as judged: a rerun after a kill in a dropped
         * step's delete finishes it, never uploads the remains. */
        s.dropped = o->drops;
        s.files = s.bytes = s.freed = 0;
        s.steps = o->steps;
        rc = proc_state_write(o->p->cfg.dst, o->state_key, o->r->id, &s,
                              err);
        o->saved = rc == 0;
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

static int up_may_drop(void *ud, const char *key, const char *rel,
                       struct ckpt_err *err)
{
    struct one *o = ud;
    return proc_drop_unchanged(&o->drops, key, rel, err);
}

static enum ckpt_upload_pick up_pick_cb(void *ud, const char *rel)
{
    struct one *o = ud;
    return (enum ckpt_upload_pick)proc_pick(o->p->cfg.filter, &o->drops,
                                            rel);
}

static void add_logs(struct one *o, struct ckpt_upload *u)
{
    const struct ckpt_process *p = o->p;
    const char *wid = strrchr(o->dkey, '/');
    for (size_t i = 0; i < p->nlogs; i++) {
        char *base = ckpt_path_basename(p->logs[i]);
        int hit = ckpt_upload_is_log_of(base, o->r->id, wid ? wid + 1 : NULL);
        free(base);
        if (!hit)
            continue;
        size_t root = *p->cfg.logs_key ? strlen(p->cfg.logs_key) + 1 : 0;
        char *sub = ckpt_path_join("logs", p->logs[i] + root);
        char *key = ckpt_path_join(o->dkey, sub);
        struct ckpt_err err = CKPT_ERR_INIT;
        if (ckpt_upload_add(u, p->cfg.logs_st, p->logs[i], p->cfg.dst, key,
                            CKPT_UPLOAD_KEEP_SRC, &err) != 0) {
            char *d = ckpt_storage_display(p->cfg.logs_st, p->logs[i]);
            ckpt_upload_fail_src(u, d, NULL, err.msg);
            free(d);
        }
        free(sub);
        free(key);
    }
}

/* DEST/ENTITY/PROJECT/RUN_ID.tar.gz: the run's key plus the archive's
 * extension. */
static char *archive_key(const struct one *o)
{
    char *base = ckpt_path_basename(o->r->key);
    char *key = ckpt_xasprintf("%s%s", o->dkey, base + strlen(o->r->id));
    free(base);
    return key;
}

/* One pass of the upload engine over the run and its logs. verify: compare
 * every file by checksum and (unless --keep-source) delete the source.
 * Returns 0, or -1 with o->fail saying why. */
static int upload_pass(struct one *o, int verify, int dry,
                       struct ckpt_upload_totals *t)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_upload_cfg ucfg = {
        .jobs = o->p->run_jobs, .mem_budget = o->p->run_mem,
        .dry_run = dry,
        .checksum = verify, .delete_source = !c->keep_source,
        .no_replace = !o->own,
        .strip = 1, .keep_src_root = 1, .state_dir = c->state_dir,
        .on_event = up_event,
        .on_progress = up_progress,
        .may_delete = dry ? NULL : up_may_delete, .pick = up_pick_cb,
        .may_drop = up_may_drop, .ud = o,
    };
    struct ckpt_upload *u = ckpt_upload_new(&ucfg);
    struct ckpt_err err = CKPT_ERR_INIT;
    int archive = ckpt_archive_kind_of(o->r->key) != CKPT_ARCHIVE_NONE;
    unsigned flags = archive && !c->keep_archive ? CKPT_UPLOAD_EXTRACT
                                                 : 0;
    if (!(archive && c->keep_archive))
        flags |= CKPT_UPLOAD_PICK;
    /* --keep-archive: the archive as it is, beside the run's directory
     * (which still gets the unsharded steps and the logs). */
    char *dkey = archive && c->keep_archive ? archive_key(o) : o->dkey;
    ckpt_buf_reset(&o->fail);
    ckpt_buf_reset(&o->specials);
    ckpt_buf_reset(&o->kept);
    o->nspecials = o->nkept = 0;
    pthread_mutex_lock(&o->p->mu);
    o->pitems = o->pbytes = 0;
    pthread_mutex_unlock(&o->p->mu);
    int rc = ckpt_upload_add(u, o->r->st, o->r->key, c->dst, dkey, flags,
                             &err);
    if (dkey != o->dkey)
        free(dkey);
    if (rc != 0)
        ckpt_buf_addstr(&o->fail, err.msg);
    else {
        add_logs(o, u);
        memset(t, 0, sizeof(*t));
        rc = ckpt_upload_run(u, t);
        if (rc != 0 && !o->fail.len)
            ckpt_buf_addstr(&o->fail, "some files did not arrive");
    }
    ckpt_upload_free(u);
    return rc;
}

/* ---- phases ---- */

static int save_state(struct one *o, enum proc_phase ph,
                      enum ckpt_process_phase phase)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    o->s.phase = ph;
    if (!o->s.src)
        o->s.src = ckpt_xstrdup(o->r->srcid);
    o->s.steps = o->steps;
    o->s.freed = o->freed;
    if (proc_state_write(o->p->cfg.dst, o->state_key, o->r->id, &o->s,
                         &err) == 0)
        return 0;
    fail_run(o, phase, err.msg);
    return -1;
}


/* Right before a bad run is deleted (renamed aside first): its state
 * "deleted", with the judge's reason, so that a worker killed from here
 * on leaves a state that says what the run was (a pass over SRC no
 * longer sees a run deleted whole), and a rerun that finishes the delete
 * keeps that reason. A delete that finishes one a killed worker left
 * (it->resume) keeps the reason its state recorded. 0, or -1 after the
 * run's row. */
static int pre_delete_state(struct one *o, const struct ckpt_clean_item *it)
{
    o->s_before = o->s.phase;
    o->s_had = o->s.phase != PROC_NEW || o->s.src || o->s.nouts;
    if (!(it->resume && o->s.phase == PROC_DELETED && o->s.why)) {
        free(o->s.why);
        o->s.why = ckpt_xstrdup(it->reason.ptr);
    }
    return save_state(o, PROC_DELETED, CKPT_PROC_DELETE);
}

/* The delete failed (the run changed, a file could not go): the state
 * says again what it said before, or is removed when there was none (a
 * rerun judges the run again either way: a "deleted" run that exists is
 * a new run under the old name). */
static void undo_delete_state(struct one *o)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (o->s_before == PROC_DELETED)
        return;
    free(o->s.why);
    o->s.why = NULL;
    o->s.phase = o->s_before;
    if (o->s_had)
        (void)proc_state_write(o->p->cfg.dst, o->state_key, o->r->id, &o->s,
                               &err);
    else
        (void)ckpt_storage_delete(o->p->cfg.dst, o->state_key, &err);
}

/* ---- one decompression pass ---- */

static void spool_read(void *ud, uint64_t read, uint64_t size)
{
    struct one *o = ud;
    const struct ckpt_process_cfg *c = &o->p->cfg;
    if (!c->on_archive)
        return;
    pthread_mutex_lock(&o->p->mu);
    c->on_archive(c->ud, o->r->display, read, size);
    pthread_mutex_unlock(&o->p->mu);
}

static void spool_release(struct one *o)
{
    ckpt_archive_spool_free(o->spool);
    o->spool = NULL;
}

/* A compressed archive is decompressed once, here, before it is judged:
 * its members go to a spool below --tmp-dir that judge, unshard, upload
 * and verify then read (ckpt_archive_spool). Not for an archive that is
 * live or above --max-archive-size (judged without reading it through);
 * one that does not fit the budget or does not read to its proper end is
 * read by each phase as before, with a note saying why (the judge then
 * reports the damage). */
static void spool(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    if (c->no_spool || !ckpt_archive_compressed(ckpt_archive_kind_of(
            o->r->key)))
        return;
    struct ckpt_stat sb;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_storage_stat(o->r->st, o->r->key, &sb, &err) != 0 ||
        sb.type != CKPT_ENTRY_FILE ||
        (c->clean.max_archive && sb.size > c->clean.max_archive))
        return;
    struct ckpt_clean_item it;
    ckpt_clean_item_init(&it, o->r->st, o->r->key, o->r->display, &c->clean);
    int live = ckpt_clean_live(&it, &err);
    ckpt_clean_item_release(&it);
    if (live != 0)
        return;
    struct ckpt_spool_cfg sc = { o->p->tmp, &o->p->spools, spool_read, o };
    if (ckpt_archive_spool(&o->spool, o->r->st, o->r->key, &sc, &err) != 0) {
        char *d = ckpt_xasprintf("not spooled (%s): each phase reads the "
                                 "archive again", err.msg);
        emit(o, CKPT_PROC_SPOOL, CKPT_PROC_SKIPPED, d, 0, 0);
        free(d);
        spool_release(o);
        return;
    }
    ckpt_archive_spool_attach(o->spool);
}

/* Judge with clean's rules. Returns 1 to go on (a good run), 0 when the
 * run's row was given (deleted, skipped, failed). */
static int judge(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_clean_opts co = c->clean;
    struct ckpt_clean_item it;
    struct ckpt_err err = CKPT_ERR_INIT;
    co.dry_run = c->dry_run;
    co.force = 0;
    co.keep_last = co.keep_every = 0;
    ckpt_clean_item_init(&it, o->r->st, o->r->key, o->r->display, &co);
    if (ckpt_clean_precheck(&it, &err) == 0) {
        if (!o->spool)
            spool(o);
        ckpt_clean_judge(&it);
    }
    else {
        it.action = "error";
        ckpt_buf_addstr(&it.reason, err.msg);
    }
    int go = 0;
    if (!strcmp(it.action, "keep")) {
        emit(o, CKPT_PROC_JUDGE, CKPT_PROC_OK, it.reason.ptr, 0, 0);
        go = 1;
    } else if (!strcmp(it.action, "skip")) {
        /* clean's hint; process has no --force */
        char *hint = strstr(it.reason.ptr, "; use --force");
        if (hint)
            ckpt_buf_setlen(&it.reason, (size_t)(hint - it.reason.ptr));
        int live = !strncmp(it.reason.ptr, "live:", 5);
        emit(o, CKPT_PROC_JUDGE, CKPT_PROC_SKIPPED, it.reason.ptr, 0, 0);
        finish(o, CKPT_PROC_SKIPPED, it.reason.ptr, !live);
    } else if (!strcmp(it.action, "error")) {
        fail_run(o, CKPT_PROC_JUDGE, it.reason.ptr);
    } else if (c->keep_bad) {
        char *d = ckpt_xasprintf("bad: %s (--keep-bad)", it.reason.ptr);
        emit(o, CKPT_PROC_JUDGE, CKPT_PROC_SKIPPED, d, 0, 0);
        finish(o, CKPT_PROC_SKIPPED, d, 0);
        free(d);
    } else if (!c->dry_run && proc_keeper_check(&o->k, &err) != 0) {
        fail_run(o, CKPT_PROC_DELETE, err.msg);
    } else if (c->dry_run || pre_delete_state(o, &it) == 0) {
        /* Re-read, still bad, unchanged: then deleted (rename-first). */
        ckpt_clean_act(&it);
        if (!strcmp(it.action, "error")) {
            if (!c->dry_run)
                undo_delete_state(o);
            fail_run(o, CKPT_PROC_DELETE, it.reason.ptr);
        } else {
            o->freed = it.bytes;
            emit(o, CKPT_PROC_DELETE, c->dry_run ? CKPT_PROC_WOULD
                 : CKPT_PROC_OK, it.reason.ptr, 0, 0);
            if (c->dry_run || save_state(o, PROC_DELETED, CKPT_PROC_DELETE)
                              == 0)
                finish(o, CKPT_PROC_DELETED, it.reason.ptr, 0);
        }
    }
    ckpt_clean_item_release(&it);
    return go;
}

/* Where the run goes below DEST: its W&B path from the map, else RUN_ID.
 * NULL with *why (malloced) when the map has none for it, or the path is
 * no safe place below DEST (a hidden component would put it in DEST's
 * own .ckpt-process/, ".." outside DEST). */
static const char *expected_dest(const struct one *o, char **why)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    const char *path = o->r->id;
    *why = NULL;
    if (c->map) {
        const struct ckpt_wandb_map_entry *e =
            ckpt_wandb_map_find(c->map, o->r->id);
        path = e ? e->path : NULL;
        if (!path) {
            *why = e ? ckpt_xasprintf("no W&B run path for run '%s' (%s)",
                                      o->r->id, e->evidence)
                     : ckpt_xasprintf("run '%s' is not in the W&B map",
                                      o->r->id);
            return NULL;
        }
    }
    if (!proc_path_safe(path, 3)) {
        *why = ckpt_xasprintf("'%s' is no place below DEST for run '%s' "
                              "(an empty, hidden, '.' or '..' component)",
                              path, o->r->id);
        return NULL;
    }
    return path;
}

/* DEST key of the run from the W&B map (or RUN_ID). 0, or -1 after the
 * run's row (unmapped). */
static int map_run(struct one *o)
{
    char *why;
    const char *path = expected_dest(o, &why);
    if (!path) {
        fail_run(o, CKPT_PROC_MAP, why);
        free(why);
        return -1;
    }
    /* Outputs recorded for another place (the map changed since a
     * killed worker wrote them) are not this run's at its new place. */
    if (o->s.dest && strcmp(o->s.dest, path) != 0) {
        struct proc_state keep = o->s;
        memset(&o->s, 0, sizeof(o->s));
        o->s.phase = keep.phase;
        o->s.src = keep.src;
        keep.src = NULL;
        proc_state_release(&keep);
    }
    free(o->s.dest);
    o->s.dest = ckpt_xstrdup(path);
    return 0;
}

/* A finished upload's state is input like any bytes at DEST: the place
 * it names must be the one this run maps to now (an edited "dest" could
 * point at another run's directory, whose files would then pass for
 * this run's copy). 0, or -1 after the run's row. */
static int check_dest(struct one *o)
{
    char *why;
    const char *path = expected_dest(o, &why);
    if (path && !strcmp(path, o->s.dest))
        return 0;
    char *at = ckpt_storage_display(o->p->cfg.dst, o->state_key);
    char *d = path ? ckpt_xasprintf("the state at DEST (%s) says run '%s' "
                                    "went to '%s', but it maps to '%s': "
                                    "left untouched", at, o->r->id,
                                    o->s.dest, path)
                   : ckpt_xasprintf("the state at DEST (%s) says run '%s' "
                                    "went to '%s', but %s: left untouched",
                                    at, o->r->id, o->s.dest, why);
    fail_run(o, CKPT_PROC_MAP, d);
    free(d);
    free(at);
    free(why);
    return -1;
}

static void set_dest(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    free(o->dkey);
    free(o->ddisp);
    o->dkey = ckpt_path_join(c->dest_key, o->s.dest);
    o->ddisp = ckpt_storage_display(c->dst, o->dkey);
}

/* An output directory below the run's DEST directory: "" for the run's
 * own (a run that is one checkpoint), else "stepN-unsharded". */
static const char *out_rel(const struct one *o, const char *out)
{
    size_t n = strlen(o->dkey);
    if (strncmp(out, o->dkey, n) != 0)
        return NULL;
    return out[n] == '/' ? out + n + 1 : out[n] ? NULL : out + n;
}

/* The output directory of a recorded output path ("step1000-unsharded"
 * of "step1000-unsharded/model.pt"; "" for a run that is one
 * checkpoint), malloced. */
static char *out_dir(const char *path)
{
    const char *slash = strchr(path, '/');
    return slash ? ckpt_xstrndup(path, (size_t)(slash - path))
                 : ckpt_xstrdup("");
}

static int has_str(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i], s))
            return 1;
    return 0;
}

/* STEPS of the row and the state: the unsharded steps at DEST that the
 * state records (the output directories of its outputs), plus extra[n]
 * (-n: the ones the pass would make or adopt), each once; not what one
 * pass unsharded (a rerun after a kill makes only what was missing). */
static uint64_t out_steps(const struct proc_state *s, char *const *extra,
                          size_t n)
{
    char **dirs = NULL;
    size_t nd = 0;
    for (size_t i = 0; i < s->nouts + n; i++) {
        char *d = i < s->nouts ? out_dir(s->outs[i].path)
                               : ckpt_xstrdup(extra[i - s->nouts]);
        if (has_str(dirs, nd, d)) {
            free(d);
            continue;
        }
        dirs = ckpt_xreallocarray(dirs, nd + 1, sizeof(*dirs));
        dirs[nd++] = d;
    }
    for (size_t i = 0; i < nd; i++)
        free(dirs[i]);
    free(dirs);
    return nd;
}

/* A step's outputs, written and committed: recorded in the state at once,
 * so that a worker killed after this never loses track of them. */
static void record_outputs(struct one *o,
                           const struct ckpt_unshard_step_event *ev)
{
    const char *rel = out_rel(o, ev->out);
    struct ckpt_err err = CKPT_ERR_INIT;
    if (!rel)
        return;
    for (size_t i = 0; i < ev->res->nfiles; i++) {
        char *path = ckpt_path_join(rel, ev->res->files[i].name);
        proc_state_add_out(&o->s, path, ev->res->files[i].size,
                           ev->res->files[i].checksum,
                           ev->res->files[i].etag);
        free(path);
    }
    if (!o->s.src)
        o->s.src = ckpt_xstrdup(o->r->srcid);
    o->s.steps = out_steps(&o->s, NULL, 0);
    if (proc_state_write(o->p->cfg.dst, o->state_key, o->r->id, &o->s,
                         &err) != 0 && !o->state_failed) {
        o->state_failed = 1;
        ckpt_buf_reset(&o->fail);
        ckpt_buf_addstr(&o->fail, err.msg);
    }
}

static void on_step(void *ud, const struct ckpt_unshard_step_event *ev)
{
    struct one *o = ud;
    if (!strcmp(ev->action, "unsharded") ||
        !strcmp(ev->action, "would-unshard"))
        o->steps++;
    if (!strcmp(ev->action, "would-unshard")) {
        const char *rel = ev->out ? out_rel(o, ev->out) : NULL;
        o->wdirs = ckpt_xreallocarray(o->wdirs, o->nwdirs + 1,
                                      sizeof(*o->wdirs));
        o->wdirs[o->nwdirs] = rel ? ckpt_xstrdup(rel)
                                  : ckpt_xasprintf("/%zu", o->nwdirs);
        o->nwdirs++;
    }
    if (!strcmp(ev->action, "unsharded") && ev->res && ev->out)
        record_outputs(o, ev);
    if (!strcmp(ev->action, "skip") && ev->out && out_rel(o, ev->out)) {
        o->have = ckpt_xreallocarray(o->have, o->nhave + 1,
                                     sizeof(*o->have));
        o->have[o->nhave++] = ckpt_xstrdup(out_rel(o, ev->out));
    }
    if (!strcmp(ev->action, "would-unshard") && ev->ckpt && ev->res) {
        o->would = ckpt_xreallocarray(o->would, o->nwould + 1,
                                      sizeof(*o->would));
        o->would[o->nwould++] = ev->ckpt->step;
        for (size_t i = 0; ev->out && i < ev->res->nfiles; i++) {
            char *key = ckpt_path_join(ev->out, ev->res->files[i].name);
            char *disp = ckpt_storage_display(o->p->cfg.dst, key);
            predict_file(o, disp, ev->res->files[i].size, 0);
            free(disp);
            free(key);
        }
    }
    else if (!strcmp(ev->action, "error") && !o->fail.len)
        ckpt_buf_addf(&o->fail, "%s: %s", ev->ckpt ? ev->ckpt->name : "run",
                      ev->detail);
}

/* Is path one of the recorded outputs of directory dir? */
static int recorded_in(const struct proc_state *s, const char *dir)
{
    size_t n = strlen(dir);
    for (size_t i = 0; i < s->nouts; i++)
        if (!n || (!strncmp(s->outs[i].path, dir, n) &&
                   s->outs[i].path[n] == '/'))
            return 1;
    return 0;
}

/* MD5 (hex) of a file at DEST, read back. */
static int dest_md5(struct ckpt_storage *st, const char *key, uint64_t size,
                     char *hex, struct ckpt_err *err)
{
    size_t cap = 4u << 20;
    char *buf = ckpt_xmalloc(cap);
    unsigned char d[16];
    unsigned dlen = 0;
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    int rc = m && EVP_DigestInit_ex(m, EVP_md5(), NULL) ? 0
           : ckpt_err_set(err, CKPT_ENOMEM, "MD5");
    for (uint64_t off = 0; rc == 0 && off < size;) {
        size_t n = size - off < cap ? (size_t)(size - off) : cap, got = 0;
        rc = ckpt_storage_read(st, key, off, buf, n, &got, err);
        if (rc == 0 && got != n)
            rc = ckpt_err_set(err, CKPT_EIO, "%s: shorter than its size",
                              key);
        if (rc == 0)
            EVP_DigestUpdate(m, buf, n);
        off += n;
    }
    if (rc == 0) {
        EVP_DigestFinal_ex(m, d, &dlen);
        ckpt_hex_encode(d, sizeof(d), hex);
    }
    EVP_MD_CTX_free(m);
    free(buf);
    return rc;
}

/* ---- outputs at DEST that this run did not record ---- */

/* The step unsharded again into a scratch directory: its files. */
struct rederive {
    struct ckpt_unshard_file *files;    /* owned copies (name owned) */
    size_t n;
    char *err;                          /* owned: the first error */
    int made;
};

static void rederive_step(void *ud, const struct ckpt_unshard_step_event *ev)
{
    struct rederive *r = ud;
    if (!strcmp(ev->action, "unsharded") && ev->res && !r->made) {
        r->made = 1;
        r->n = ev->res->nfiles;
        r->files = ckpt_xcalloc(r->n ? r->n : 1, sizeof(*r->files));
        for (size_t i = 0; i < r->n; i++) {
            r->files[i] = ev->res->files[i];
            r->files[i].name = ckpt_xstrdup(ev->res->files[i].name);
        }
    } else if (!strcmp(ev->action, "error") && !r->err) {
        r->err = ckpt_xstrdup(ev->detail);
    }
}

struct cmp_out {
    struct one *o;
    const char *dir;                    /* below the run's DEST key */
    struct rederive *r;
    int record;                         /* record what matches */
    size_t seen;
    char *bad;                          /* owned: the first difference */
};

/* One file of the output at DEST against the same file unsharded again:
 * same name, size and MD5 (DEST's bytes read back). */
static int cmp_out_file(void *ud, const struct ckpt_entry *e)
{
    struct cmp_out *c = ud;
    struct ckpt_storage *st = c->o->p->cfg.dst;
    if (e->type != CKPT_ENTRY_FILE || c->bad || ckpt_is_temp_name(e->name))
        return 0;
    char *path = ckpt_path_join(c->dir, e->name);
    char *key = ckpt_path_join(c->o->dkey, path);
    char *disp = ckpt_storage_display(st, key);
    const struct ckpt_unshard_file *f = NULL;
    for (size_t i = 0; i < c->r->n && !f; i++)
        if (!strcmp(c->r->files[i].name, e->name))
            f = &c->r->files[i];
    char sum[33] = "";
    struct ckpt_err err = CKPT_ERR_INIT;
    if (!f)
        c->bad = ckpt_xasprintf("%s: not a file the step unshards to", disp);
    else if (f->size != e->size)
        c->bad = ckpt_xasprintf("%s: %llu bytes at DEST, %llu unsharded "
                                "again", disp, (unsigned long long)e->size,
                                (unsigned long long)f->size);
    else if (dest_md5(st, key, e->size, sum, &err) != 0)
        c->bad = ckpt_xasprintf("%s: %s", disp, err.msg);
    else if (strcasecmp(sum, f->checksum) != 0)
        c->bad = ckpt_xasprintf("%s: MD5 %s at DEST, %s unsharded again",
                                disp, sum, f->checksum);
    else {
        c->seen++;
        if (c->record)
            proc_state_add_out(&c->o->s, path, e->size, sum,
                               ckpt_storage_is_local(st) ? NULL : e->etag);
    }
    free(disp);
    free(key);
    free(path);
    return 0;
}

/* An output directory dir found complete at DEST that this run's state
 * does not record (a worker killed between a step's commit and its state
 * write, an earlier `ckpt unshard`, another source's run, or a stub):
 * never taken on trust. Unshard is deterministic, so the step is
 * unsharded again into a scratch directory and every file compared
 * (names, sizes, MD5 of DEST's bytes); equal: adopted (recorded when
 * record), else a conflict that fails the run and keeps its source
 * (DEST is not replaced: it is not this run's). 0, or -1 after the
 * run's row. */
static int rederive(struct one *o, const char *dir, int record)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    char *disp = ckpt_storage_display(c->dst, o->dkey);
    char *why = NULL;
    int64_t step;
    int uns = 0;
    struct rederive r = { NULL, 0, NULL, 0 };
    char *tmpl = ckpt_path_join(o->p->tmp, "ckpt-rederive-XXXXXX");
    char *tmp = NULL;
    if (!ckpt_checkpoint_name(dir, &step, &uns) || !uns)
        why = ckpt_xstrdup("not a step this run unshards to");
    else if (!(tmp = mkdtemp(tmpl)))
        why = ckpt_xasprintf("cannot make a scratch directory in %s",
                             o->p->tmp);
    else {
        struct ckpt_unshard_run_cfg u = {
            .uo = { .sync = 0, .tmp_dir = o->p->tmp, .insecure = c->insecure,
                    .retries = c->retries, .checksum = 1,
                    .rank_values = c->rank_values,
                    .memory = o->p->run_mem, .jobs = o->p->run_jobs },
            .has_step = 1, .step = step, .tmp_dir = o->p->tmp,
            .on_step = rederive_step, .ud = &r,
        };
        if (ckpt_unshard_run(o->r->st, o->r->key, o->r->display, tmp, &u)
            != 0 || !r.made)
            why = ckpt_xasprintf("its step could not be unsharded again "
                                 "to compare: %s", r.err ? r.err
                                 : "no output");
    }
    if (!why) {
        struct cmp_out cmp = { o, dir, &r, record, 0, NULL };
        struct ckpt_err err = CKPT_ERR_INIT;
        char *key = ckpt_path_join(o->dkey, dir);
        if (ckpt_storage_list(c->dst, key, CKPT_LIST_RECURSIVE, cmp_out_file,
                              &cmp, &err) != 0)
            why = ckpt_xstrdup(err.msg);
        else if (cmp.bad)
            why = cmp.bad;
        else if (cmp.seen != r.n)
            why = ckpt_xasprintf("%zu of the %zu files the step unshards "
                                 "to are there", cmp.seen, r.n);
        if (why != cmp.bad)
            free(cmp.bad);
        free(key);
    }
    if (tmp)
        ckpt_rm_tree(tmp);
    free(tmpl);
    for (size_t i = 0; i < r.n; i++)
        free(r.files[i].name);
    free(r.files);
    free(r.err);
    if (why) {
        char *d = ckpt_xasprintf("conflict: %s/%s at DEST was not written "
                                 "by this run and is not what it unshards "
                                 "to (%s); not replaced, source kept",
                                 disp, dir, why);
        fail_run(o, CKPT_PROC_UNSHARD, d);
        free(d);
        free(why);
    }
    free(disp);
    return why ? -1 : 0;
}

/* Outputs unshard found complete at DEST that the state does not record:
 * adopted only when unsharding again gives the same bytes (rederive).
 * 0, or -1 after the run's row. */
static int adopt_outputs(struct one *o)
{
    size_t before = o->s.nouts;
    for (size_t i = 0; i < o->nhave; i++)
        if (!recorded_in(&o->s, o->have[i]) && rederive(o, o->have[i], 1))
            return -1;
    return o->s.nouts == before ? 0
         : save_state(o, PROC_NEW, CKPT_PROC_UNSHARD);
}

/* Unshard the run's sharded steps straight to DEST/.../stepN-unsharded/
 * through DEST's storage, with the run's share of -j as threads (a
 * remote output's parts are sent by the thread that completes them, so
 * threads wait on the network: more than the cores keep them busy) and
 * of the memory budget for part buffers. A remote output is marked
 * unfinished until complete, a local one appears by rename; a step whose
 * output is complete at DEST is skipped, so a rerun redoes only what a
 * killed worker left unfinished. 0, or -1 after the run's row. */
static int unshard(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    if (c->unshard == CKPT_PROC_UNSHARD_NONE)
        return 0;
    struct ckpt_unshard_run_cfg u = {
        .uo = { .dry_run = c->dry_run, .sync = 1, .tmp_dir = o->p->tmp,
                .insecure = c->insecure, .retries = c->retries,
                .dest_storage = c->dst, .checksum = 1,
                .rank_values = c->rank_values,
                .memory = o->p->run_mem, .jobs = o->p->run_jobs },
        .latest = c->unshard == CKPT_PROC_UNSHARD_LATEST,
        .skip_step0 = !c->unshard_step0, .tmp_dir = o->p->tmp,
        .on_step = on_step, .ud = o,
    };
    ckpt_buf_reset(&o->fail);
    o->steps = 0;
    if (ckpt_unshard_run(o->r->st, o->r->key, o->r->display, o->dkey, &u)
        != 0 || o->state_failed) {
        fail_run(o, CKPT_PROC_UNSHARD, o->fail.len ? o->fail.ptr
                 : "unshard failed");
        return -1;
    }
    if (!c->dry_run && adopt_outputs(o) != 0)
        return -1;
    /* The steps at DEST once the phase is done: recorded ones (adopted
     * included), and -n those it would make or adopt (dry_have). */
    if (c->dry_run) {
        char **x = ckpt_xcalloc(o->nhave + o->nwdirs + 1, sizeof(*x));
        for (size_t i = 0; i < o->nhave; i++)
            x[i] = o->have[i];
        for (size_t i = 0; i < o->nwdirs; i++)
            x[o->nhave + i] = o->wdirs[i];
        o->steps = out_steps(&o->s, x, o->nhave + o->nwdirs);
        free(x);
    } else {
        o->steps = out_steps(&o->s, NULL, 0);
    }
    emit(o, CKPT_PROC_UNSHARD, c->dry_run ? CKPT_PROC_WOULD : CKPT_PROC_OK,
         "", 0, 0);
    return 0;
}

/* Why DEST's ETag (remote) or MD5 (local) `got` does not match output
 * out, or NULL: the ETag the store gave it when written must be the one
 * it states now, and an MD5 of the form of ours (computed from the bytes
 * written) must be ours. */
static char *sum_fault(const struct proc_out *out, const char *got)
{
    int gm, om;
    if (*out->etag && strcasecmp(got, out->etag) != 0)
        return ckpt_xasprintf("checksum (ETag) %s at DEST, %s when written",
                              got, out->etag);
    if (*out->sum && ckpt_etag_is_md5(got, &gm) &&
        ckpt_etag_is_md5(out->sum, &om) &&
        gm == om && strcasecmp(got, out->sum) != 0)
        return ckpt_xasprintf("checksum %s at DEST, %s written", got,
                              out->sum);
    return NULL;
}

/* Every recorded unshard output, checked at DEST before anything is
 * dropped or deleted: there with its size and checksum (the store's
 * ETag against the one it gave when written and, where it states an MD5
 * of that form, against the MD5 of the bytes written; a local file read
 * back and hashed), and its step's "-unfinished" marker gone (a writer
 * at work, or a killed one's). The verified steps are what
 * --drop-sharded may leave out. 0, or -1 after the run's row. */
static int verify_outputs(struct one *o)
{
    struct ckpt_storage *st = o->p->cfg.dst;
    int remote = !ckpt_storage_is_local(st);
    struct ckpt_err err = CKPT_ERR_INIT;
    char *bad = NULL;
    o->nmade = 0;
    for (size_t i = 0; i < o->s.nouts && !bad; i++) {
        const struct proc_out *out = &o->s.outs[i];
        char *key = ckpt_path_join(o->dkey, out->path);
        char *disp = ckpt_storage_display(st, key);
        const char *slash = strchr(out->path, '/');
        char *dir = slash ? ckpt_xstrndup(out->path,
                                          (size_t)(slash - out->path))
                          : ckpt_xstrdup("");
        struct ckpt_stat sb;
        char sum[sizeof(sb.etag)] = "";
        if (ckpt_storage_stat(st, key, &sb, &err) != 0)
            bad = ckpt_xasprintf("%s: %s", disp, err.msg);
        else if (sb.type != CKPT_ENTRY_FILE || sb.size != out->size)
            bad = ckpt_xasprintf("%s: %llu bytes at DEST, %llu written",
                                 disp, (unsigned long long)sb.size,
                                 (unsigned long long)out->size);
        else if (!remote && dest_md5(st, key, sb.size, sum, &err) != 0)
            bad = ckpt_xasprintf("%s: %s", disp, err.msg);
        else if (remote)
            snprintf(sum, sizeof(sum), "%s", sb.etag);
        char *why = bad ? NULL : sum_fault(out, sum);
        if (why)
            bad = ckpt_xasprintf("%s: %s", disp, why);
        free(why);
        size_t dl = strlen(dir);
        int first = i == 0 || strncmp(o->s.outs[i - 1].path, dir, dl) != 0 ||
                    o->s.outs[i - 1].path[dl] != '/';
        if (!bad && *dir && first) {
            char *m = ckpt_path_join(o->dkey, dir);
            char *mkey = ckpt_xasprintf("%s-unfinished", m);
            char *md = ckpt_storage_display(st, mkey);
            if (ckpt_storage_stat(st, mkey, &sb, &err) == 0)
                bad = ckpt_xasprintf("%s: marked unfinished (a writer at "
                                     "work, or a killed one's)", md);
            else if (err.code != CKPT_ENOTFOUND)
                bad = ckpt_xasprintf("%s: %s", md, err.msg);
            ckpt_err_clear(&err);
            free(m);
            free(mkey);
            free(md);
        }
        int64_t step;
        int uns = 0;
        if (!bad && ckpt_checkpoint_name(dir, &step, &uns) && uns) {
            o->made = ckpt_xreallocarray(o->made, o->nmade + 1,
                                         sizeof(*o->made));
            o->made[o->nmade++] = step;
        }
        free(dir);
        free(disp);
        free(key);
    }
    if (!bad)
        return 0;
    fail_run(o, CKPT_PROC_VERIFY, bad);
    free(bad);
    return -1;
}

struct dcount {
    struct one *o;
    const char *root;
    int predict;
    uint64_t files, bytes;
};

static void dcount_add(struct dcount *d, const char *key, uint64_t size)
{
    if (d->predict) {
        char *disp = ckpt_storage_display(d->o->p->cfg.dst, key);
        predict_file(d->o, disp, size, 1);
        free(disp);
    }
    d->files++;
    d->bytes += size;
}

static int dcount_cb(void *ud, const struct ckpt_entry *e)
{
    struct dcount *d = ud;
    if (e->type != CKPT_ENTRY_FILE || ckpt_is_temp_name(e->name))
        return 0;
    char *key = ckpt_path_join(d->root, e->name);
    dcount_add(d, key, e->size);
    free(key);
    return 0;
}

/* What DEST holds of the run: every file below its DEST directory (its
 * files, unshard outputs and logs, whichever pass or run put them there)
 * and, with --keep-archive, its archive. Rows and the state give these,
 * not what one pass copied (after a failed delete the rerun copies
 * little or nothing). -n (predict): DEST now, with what the pass would
 * upload and unshard on top (the events gathered by predict_file). 0, or
 * -1 with err. */
static int count_dest(struct one *o, int predict, uint64_t *files,
                      uint64_t *bytes, struct ckpt_err *err)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct dcount d = { o, o->dkey, predict, 0, 0 };
    int rc = ckpt_storage_list(c->dst, o->dkey, CKPT_LIST_RECURSIVE,
                               dcount_cb, &d, err);
    if (rc != 0 && err->code == CKPT_ENOTFOUND) {
        ckpt_err_clear(err);
        rc = 0;
    }
    if (rc == 0 && c->keep_archive &&
        ckpt_archive_kind_of(o->r->key) != CKPT_ARCHIVE_NONE) {
        char *ak = archive_key(o);
        struct ckpt_stat sb;
        if (ckpt_storage_stat(c->dst, ak, &sb, err) == 0) {
            if (sb.type == CKPT_ENTRY_FILE)
                dcount_add(&d, ak, sb.size);
        } else if (err->code == CKPT_ENOTFOUND) {
            ckpt_err_clear(err);
        } else {
            rc = -1;
        }
        free(ak);
    }
    if (predict)
        predicted_total(o, &d.files, &d.bytes);
    *files = d.files;
    *bytes = d.bytes;
    return rc;
}

/* The delete phase's event; files the rules left out stayed, and say
 * so (the run's directory is then not gone). */
static void emit_delete(struct one *o, const struct ckpt_upload_totals *t,
                        uint64_t freed0)
{
    char *d = t->left ? ckpt_xasprintf("kept %llu file(s) left out by "
                                       "--include/--exclude",
                                       (unsigned long long)t->left)
                      : ckpt_xstrdup("");
    emit(o, CKPT_PROC_DELETE, CKPT_PROC_OK, d, t->deleted,
         o->freed - freed0);
    free(d);
}

/* What the pass left at the source by design, for the row and the state
 * ("kept 2 special files: a/fifo, b/link"); NULL when nothing was, or
 * nothing is deleted (--keep-source). */
static void set_note(struct one *o)
{
    free(o->s.why);
    o->s.why = NULL;
    if (o->p->cfg.keep_source || (!o->nspecials && !o->nkept))
        return;
    struct ckpt_buf b = CKPT_BUF_INIT;
    if (o->nspecials)
        ckpt_buf_addf(&b, "kept %zu special file%s: %s", o->nspecials,
                      o->nspecials == 1 ? "" : "s", o->specials.ptr);
    if (o->nkept)
        ckpt_buf_addf(&b, "%skept %zu dropped file%s: %s", b.len ? "; " : "",
                      o->nkept, o->nkept == 1 ? "" : "s", o->kept.ptr);
    o->s.why = ckpt_buf_detach(&b, NULL);
}

/* Steps to leave out (--drop-*): judged on the run as it is before any
 * of it is deleted, after the unshard phase made its outputs. 0, or -1
 * after the run's row. */
static int find_drops(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_err err = CKPT_ERR_INIT;
    /* -n: steps it would unshard, and recorded outputs that verified */
    for (size_t i = 0; c->dry_run && i < o->nmade; i++) {
        o->would = ckpt_xreallocarray(o->would, o->nwould + 1,
                                      sizeof(*o->would));
        o->would[o->nwould++] = o->made[i];
    }
    const int64_t *made = c->dry_run ? o->would : o->made;
    size_t nmade = c->dry_run ? o->nwould : o->nmade;
    if (proc_drops_find(&o->drops, o->r->st, o->r->key, c->clean.max_archive,
                        c->drop_sharded, c->drop_incomplete, made, nmade,
                        &err) == 0)
        return 0;
    fail_run(o, CKPT_PROC_UPLOAD, err.msg);
    return -1;
}

/* The counts of what DEST holds after the pass (count_dest) into the
 * state; -1 after the run's row. */
static int set_counts(struct one *o, enum ckpt_process_phase ph)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (count_dest(o, o->p->cfg.dry_run, &o->s.files, &o->s.bytes, &err)
        == 0)
        return 0;
    fail_run(o, ph, err.msg);
    return -1;
}

struct left {
    const struct one *o;
    struct ckpt_buf names;
    size_t n;
};

static int left_file(void *ud, const struct ckpt_entry *e)
{
    struct left *l = ud;
    if (e->type != CKPT_ENTRY_FILE ||
        proc_pick(l->o->p->cfg.filter, &l->o->drops, e->name) ==
            CKPT_PICK_LEAVE)
        return 0;
    for (size_t i = 0; i < l->o->nkeptv; i++)
        if (!strcmp(l->o->keptv[i], e->name))
            return 0;  /* kept by design, and said so (set_note) */
    if (l->n < 3)
        ckpt_buf_addf(&l->names, "%s%s", l->n ? ", " : "", e->name);
    l->n++;
    return 0;
}

/* After the source was deleted: a file still there that was neither left
 * out (--include/--exclude) nor failed to delete (that failed the pass)
 * was written after the run was listed, by a job still (or again)
 * writing it. It is kept, and the run is not done: the row fails naming
 * it, and the state stays "uploaded" with the reason, so that a rerun
 * takes it once it is older than --min-age. 0, or -1 after the row. */
static int left_behind(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct left l = { o, CKPT_BUF_INIT, 0 };
    if (c->keep_source ||
        ckpt_archive_kind_of(o->r->key) != CKPT_ARCHIVE_NONE)
        return 0;
    if (ckpt_storage_list(o->r->st, o->r->key, CKPT_LIST_RECURSIVE,
                          left_file, &l, &err) != 0 &&
        err.code != CKPT_ENOTFOUND) {
        ckpt_buf_release(&l.names);
        fail_run(o, CKPT_PROC_DELETE, err.msg);
        return -1;
    }
    if (!l.n) {
        ckpt_buf_release(&l.names);
        return 0;
    }
    char *why = ckpt_xasprintf("%zu file(s) written while the run was "
                               "processed are left at the source (%s%s); "
                               "a rerun takes them once they are older "
                               "than --min-age", l.n, l.names.ptr,
                               l.n > 3 ? ", ..." : "");
    free(o->s.why);
    o->s.why = ckpt_xstrdup(why);
    if (save_state(o, PROC_UPLOADED, CKPT_PROC_DELETE) == 0)
        fail_run(o, CKPT_PROC_DELETE, why);
    free(why);
    ckpt_buf_release(&l.names);
    return -1;
}

/* State "done", then the run's own directory, emptied by the pass (the
 * upload engine keeps it: keep_src_root): while it is there, a pass over
 * SRC still finds the run, so a worker killed between its last deletion
 * and this state is finished by the next pass (docs/reliability.md
 * "stuck-uploaded"). rmdir removes only an empty directory; one that is
 * not (files kept, or new ones) stays for the next pass. 0, or -1 after
 * the run's row. */
static int save_done(struct one *o)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (save_state(o, PROC_DONE, CKPT_PROC_DELETE) != 0)
        return -1;
    if (!o->p->cfg.keep_source && ckpt_storage_is_local(o->r->st) &&
        ckpt_archive_kind_of(o->r->key) == CKPT_ARCHIVE_NONE)
        (void)ckpt_storage_prune_dirs(o->r->st, o->r->key, &err);
    return 0;
}

/* Copy the run to DEST, verify and delete the source in one pass of the
 * upload engine, as `upload --delete-source` does (it deletes nothing
 * unless every file arrived; with --keep-source every file is compared
 * by checksum instead); state "done". -n: the plan of that pass. */
static int upload(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    int dry = c->dry_run;
    struct ckpt_upload_totals t;
    uint64_t freed0 = o->freed;
    o->save_on_delete = !dry;
    int rc = upload_pass(o, dry ? 0 : c->keep_source, dry, &t);
    o->save_on_delete = 0;
    if (rc != 0) {
        fail_run(o, o->fail_delete ? CKPT_PROC_DELETE : CKPT_PROC_UPLOAD,
                 o->fail.ptr);
        return -1;
    }
    if (set_counts(o, CKPT_PROC_UPLOAD) != 0)
        return -1;
    if (dry) {
        emit(o, CKPT_PROC_UPLOAD, CKPT_PROC_WOULD, "", o->s.files,
             o->s.bytes);
        if (!c->keep_source)
            emit(o, CKPT_PROC_DELETE, CKPT_PROC_WOULD, "", 0, 0);
        return 0;
    }
    emit(o, CKPT_PROC_UPLOAD, CKPT_PROC_OK, "", o->s.files, o->s.bytes);
    emit(o, CKPT_PROC_VERIFY, CKPT_PROC_OK, "", o->s.files, o->s.bytes);
    if (!c->keep_source)
        emit_delete(o, &t, freed0);
    set_note(o);
    if (left_behind(o) != 0)
        return -1;
    return save_done(o);
}

/* Compare every source file with DEST, then delete the source. */
static int verify_delete(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    int dry = c->dry_run;
    struct ckpt_upload_totals t;
    uint64_t freed0 = o->freed;
    if (verify_outputs(o) != 0)
        return -1;
    if (upload_pass(o, 1, dry, &t) != 0) {
        fail_run(o, o->fail_delete ? CKPT_PROC_DELETE : CKPT_PROC_VERIFY,
                 o->fail.ptr);
        return -1;
    }
    if (set_counts(o, CKPT_PROC_VERIFY) != 0)
        return -1;
    emit(o, CKPT_PROC_VERIFY, dry ? CKPT_PROC_WOULD : CKPT_PROC_OK, "",
         o->s.files, o->s.bytes);
    if (dry) {
        if (!c->keep_source)
            emit(o, CKPT_PROC_DELETE, CKPT_PROC_WOULD, "", 0, 0);
        return 0;
    }
    if (!c->keep_source)
        emit_delete(o, &t, freed0);
    set_note(o);
    if (left_behind(o) != 0)
        return -1;
    return save_done(o);
}

/* A run the state says was uploaded or done whose source is still there:
 * a crash during the delete, or a requeued job writing to it again. The
 * live-run guard applies as on a first pass; without it the rerun would
 * upload files seconds old over DEST's copy and delete them under the
 * job. 1 after the run's row (skipped or failed), else 0. */
static int live_again(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_clean_item it;
    struct ckpt_err err = CKPT_ERR_INIT;
    ckpt_clean_item_init(&it, o->r->st, o->r->key, o->r->display, &c->clean);
    int rc = ckpt_clean_live(&it, &err);
    if (rc < 0) {
        fail_run(o, CKPT_PROC_JUDGE, err.msg);
    } else if (rc > 0) {
        char *d = ckpt_xasprintf("%s (written to since it was %s)",
                                 it.reason.ptr, o->s.phase == PROC_DONE
                                 ? "processed" : "uploaded");
        emit(o, CKPT_PROC_JUDGE, CKPT_PROC_SKIPPED, d, 0, 0);
        finish(o, CKPT_PROC_SKIPPED, d, 0);
        free(d);
    }
    ckpt_clean_item_release(&it);
    return rc != 0;
}

/* -n: outputs unshard found complete at DEST that the state does not
 * record are compared as the real run compares them (rederive: a
 * conflict fails the run here too), and their steps, like those of
 * recorded ones, count as made for --drop-sharded. 0, or -1 after the
 * run's row. */
static int dry_have(struct one *o)
{
    for (size_t i = 0; i < o->nhave; i++) {
        if (!recorded_in(&o->s, o->have[i]) && rederive(o, o->have[i], 0))
            return -1;
        int64_t step;
        int uns = 0;
        if (ckpt_checkpoint_name(o->have[i], &step, &uns) && uns) {
            o->would = ckpt_xreallocarray(o->would, o->nwould + 1,
                                          sizeof(*o->would));
            o->would[o->nwould++] = step;
        }
    }
    return 0;
}

/* Lease and state are keyed by run id: a state whose upload another
 * source made belongs to another run of the same id (two scratch
 * directories with the same Slurm job id). Going on would upload this
 * run over that one's objects at DEST, or delete it as "already
 * processed"; a "new" state's unshard outputs are that run's, and taken
 * as this one's they would license --drop-sharded here. A state written
 * before sources were recorded is taken as ours; a bad run's ("deleted")
 * makes room for a new run under the old name. 1 after the run's failed
 * row. */
static int other_source(struct one *o)
{
    if (o->s.phase == PROC_DELETED || !o->s.src ||
        !strcmp(o->s.src, o->r->srcid))
        return 0;
    char *at = ckpt_storage_display(o->p->cfg.dst, o->state_key);
    char *d = o->s.phase == PROC_NEW
        ? ckpt_xasprintf("run id '%s' at DEST has unshard outputs made "
                         "from %s (%s); this is another run with the same "
                         "id: left untouched", o->r->id, o->s.src, at)
        : ckpt_xasprintf("run id '%s' at DEST was processed from %s "
                         "(%s); this is another run with the same id: "
                         "left untouched", o->r->id, o->s.src, at);
    fail_run(o, CKPT_PROC_LEASE, d);
    free(d);
    free(at);
    return 1;
}

/* A bad run a killed worker of this host left renamed aside
 * (.NAME.ckpt-del-HOST-PID, the process dead). */
static int aside_left(const struct one *o)
{
    char *s = ckpt_storage_is_local(o->r->st)
        ? ckpt_del_dead_sibling(o->r->key) : NULL;
    free(s);
    return s != NULL;
}

/* With the lease held (-n: without, changing nothing): from whatever
 * the state says to done. */
static void leased(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    int dry = c->dry_run;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_stat sb;
    if (proc_state_read(c->dst, o->state_key, &o->s, &err) != 0) {
        fail_run(o, CKPT_PROC_JUDGE, err.msg);
        return;
    }
    o->steps = out_steps(&o->s, NULL, 0);
    if (other_source(o))
        return;
    int exists = ckpt_storage_stat(o->r->st, o->r->key, &sb, &err) == 0;
    if (!exists && err.code != CKPT_ENOTFOUND) {
        fail_run(o, CKPT_PROC_JUDGE, err.msg);
        return;
    }
    if (o->s.phase == PROC_UPLOADED || o->s.phase == PROC_DONE) {
        /* Nothing is read from a place the run does not map to. */
        if (exists && check_dest(o) != 0)
            return;
        set_dest(o);
        o->own = 1;
    }
    if (!exists && o->s.phase == PROC_NEW) {
        /* Never processed: judging says it does not exist, or finishes
         * the delete of a bad run a killed worker left renamed aside. */
        if (judge(o))
            fail_run(o, CKPT_PROC_JUDGE, "does not exist");
        return;
    }
    if (!exists && o->s.phase == PROC_DELETED && aside_left(o)) {
        /* Killed after the state, while deleting: finish the delete (of
         * a dead process of this host; clean's rules), keep the reason. */
        if (judge(o))
            fail_run(o, CKPT_PROC_JUDGE, "does not exist");
        return;
    }
    if (!exists && o->s.phase == PROC_DELETED) {
        char *d = ckpt_xasprintf("deleted earlier: %s",
                                 o->s.why ? o->s.why : "bad run");
        finish(o, CKPT_PROC_DONE, d, 0);
        free(d);
        return;
    }
    /* Gone after a verified upload: a crash during the delete, or
     * another worker finished it. */
    if (!exists || (o->s.phase == PROC_DONE && c->keep_source)) {
        o->freed = 0;
        if (!dry && o->s.phase != PROC_DONE &&
            save_state(o, PROC_DONE, CKPT_PROC_DELETE) != 0)
            return;
        finish(o, CKPT_PROC_DONE, "already processed", 0);
        return;
    }
    o->freed = 0;
    if (o->s.phase == PROC_DELETED) {  /* a new run under the old name */
        proc_state_release(&o->s);
        free(o->ddisp);
        o->ddisp = NULL;
    }
    if (o->s.phase == PROC_NEW) {
        if (!judge(o) || map_run(o) != 0)
            return;
        set_dest(o);
        if (unshard(o) != 0 || (dry && dry_have(o) != 0) ||
            verify_outputs(o) != 0 || find_drops(o) != 0 || upload(o) != 0)
            return;
    } else {
        if (live_again(o))
            return;
        /* A worker killed while deleting: the steps it judged droppable
         * are still dropped (what is left of them deleted if unchanged
         * since judged, else kept), never judged again nor uploaded. */
        if (o->s.phase == PROC_UPLOADED && o->s.dropped.n) {
            o->drops = o->s.dropped;
            o->drops.st = o->r->st;
            memset(&o->s.dropped, 0, sizeof(o->s.dropped));
        }
        emit(o, CKPT_PROC_UPLOAD, CKPT_PROC_DONE, "", o->s.files,
             o->s.bytes);
        if (verify_delete(o) != 0)
            return;
    }
    finish(o, dry ? CKPT_PROC_WOULD : CKPT_PROC_OK, dry ? "" : o->s.why,
           0);
}

static void process_one(struct ckpt_process *p, const struct prun *r,
                        int *failed)
{
    struct one o;
    memset(&o, 0, sizeof(o));
    o.p = p;
    o.r = r;
    o.t0 = ckpt_now();
    ckpt_buf_init(&o.fail);
    ckpt_buf_init(&o.specials);
    ckpt_buf_init(&o.kept);
    pthread_mutex_init(&o.mu, NULL);
    char *dir = ckpt_path_join(p->cfg.dest_key, STATE_DIR);
    char *sname = ckpt_xasprintf("%s.json", r->id);
    char *lname = ckpt_xasprintf("%s.lease", r->id);
    o.state_key = ckpt_path_join(dir, sname);
    o.lease_key = ckpt_path_join(dir, lname);
    if (r->dup) {
        char *d = ckpt_xasprintf("run id '%s' is also the id of %s, queued "
                                 "before it: the two would share one state "
                                 "at DEST; left untouched", r->id,
                                 p->runs[r->dup - 1].display);
        fail_run(&o, CKPT_PROC_LEASE, d);
        free(d);
    } else if (p->cfg.dry_run) {
        leased(&o);
    } else {
        struct ckpt_lease_holder h;
        struct ckpt_err err = CKPT_ERR_INIT;
        int lr = proc_keeper_start(&o.k, p->cfg.dst, o.lease_key, r->id,
                                   p->cfg.lease_ttl, &h, &err);
        if (lr == CKPT_LEASE_LEASED) {
            char who[400], *d;
            ckpt_lease_holder_str(&h, who, sizeof(who));
            d = ckpt_xasprintf("leased by %s", who);
            emit(&o, CKPT_PROC_LEASE, CKPT_PROC_SKIPPED, d, 0, 0);
            finish(&o, CKPT_PROC_SKIPPED, d, 0);
            free(d);
        } else if (lr < 0) {
            fail_run(&o, CKPT_PROC_LEASE, err.msg);
        } else {
            emit(&o, CKPT_PROC_LEASE, CKPT_PROC_OK,
                 ckpt_lease_result_name(lr), 0, 0);
            leased(&o);
            proc_keeper_stop(&o.k);
        }
    }
    *failed |= o.failed;
    spool_release(&o);
    proc_drops_release(&o.drops);
    free(o.would);
    free(o.made);
    for (size_t i = 0; i < o.npf; i++)
        free(o.pf[i].disp);
    free(o.pf);
    for (size_t i = 0; i < o.nhave; i++)
        free(o.have[i]);
    free(o.have);
    for (size_t i = 0; i < o.nwdirs; i++)
        free(o.wdirs[i]);
    free(o.wdirs);
    proc_state_release(&o.s);
    ckpt_buf_release(&o.fail);
    ckpt_buf_release(&o.specials);
    ckpt_buf_release(&o.kept);
    for (size_t i = 0; i < o.nkeptv; i++)
        free(o.keptv[i]);
    free(o.keptv);
    free(o.dkey);
    free(o.ddisp);
    free(o.state_key);
    free(o.lease_key);
    pthread_mutex_destroy(&o.mu);
    free(sname);
    free(lname);
    free(dir);
}

/* A run-worker: takes the next queued run until none is left. Each run
 * goes through its phases in order under its own lease. */
static void *run_worker(void *arg)
{
    struct ckpt_process *p = arg;
    int failed = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t i = p->next < p->n ? p->next++ : p->n;
        pthread_mutex_unlock(&p->mu);
        if (i == p->n)
            break;
        process_one(p, &p->runs[i], &failed);
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
    int jobs = c->jobs > 0 ? c->jobs : DEFAULT_JOBS;
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

int ckpt_process_run(struct ckpt_process *p, struct ckpt_process_totals *t)
{
    int failed = 0;
    double t0 = ckpt_now();
    memset(t, 0, sizeof(*t));
    p->t = t;
    plan_pool(p);
    pthread_t *th = ckpt_xcalloc((size_t)p->par, sizeof(*th));
    int started = 0;
    /* Run-worker 0 is this thread; a thread that cannot be started
     * leaves its share to the others. */
    for (int i = 1; i < p->par; i++)
        if (pthread_create(&th[started], NULL, run_worker, p) == 0)
            started++;
    failed = run_worker(p) != NULL;
    for (int i = 0; i < started; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        failed |= r != NULL;
    }
    free(th);
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
    struct prun *r = &p->runs[p->n++];
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
    const char *key;
    char **keys;
    size_t n;
    int any;                    /* SRC holds anything at all */
};

/* Directories and archives below SRC, not hidden (clean's rename-aside
 * siblings, our own state directory), not DEST, not the --logs location,
 * nor a place holding either. */
static int child_cb(void *ud, const struct ckpt_entry *e)
{
    struct children *c = ud;
    c->any = 1;
    const char *del = e->name[0] == '.' ? strstr(e->name, ".ckpt-del-")
                                        : NULL;
    if (del && del > e->name + 1) {
        /* A delete of a bad run that a killed worker left renamed aside:
         * the run's own name is queued, and judging it finishes the
         * delete (clean's rules: only a dead process's). */
        char *name = ckpt_xstrndup(e->name + 1,
                                   (size_t)(del - (e->name + 1)));
        c->keys = ckpt_xreallocarray(c->keys, c->n + 1, sizeof(char *));
        c->keys[c->n++] = ckpt_path_join(c->key, name);
        free(name);
        return 0;
    }
    if (e->name[0] == '.' ||
        (e->type != CKPT_ENTRY_DIR &&
         !(e->type == CKPT_ENTRY_FILE &&
           ckpt_archive_kind_of(e->name) != CKPT_ARCHIVE_NONE)))
        return 0;
    char *key = ckpt_path_join(c->key, e->name);
    enum ckpt_loc_rel rel = ckpt_storage_relation(c->st, key, c->p->cfg.dst,
                                                  c->p->cfg.dest_key);
    enum ckpt_loc_rel lrel = c->p->cfg.logs_st
        ? ckpt_storage_relation(c->st, key, c->p->cfg.logs_st,
                                c->p->cfg.logs_key) : CKPT_LOC_APART;
    if (rel == CKPT_LOC_SAME || rel == CKPT_LOC_B_INSIDE_A ||
        lrel == CKPT_LOC_SAME || lrel == CKPT_LOC_B_INSIDE_A) {
        free(key);
        return 0;
    }
    c->keys = ckpt_xreallocarray(c->keys, c->n + 1, sizeof(char *));
    c->keys[c->n++] = key;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Does a directory SRC that is not a run hold runs? Its directories and
 * archives are queued (sorted); returns how many, or -1. *any tells
 * whether SRC holds anything at all. */
static int expand(struct ckpt_process *p, struct ckpt_storage *st,
                  const char *key, int *any, struct ckpt_err *err)
{
    struct children c = { p, st, key, NULL, 0, 0 };
    int rc = ckpt_storage_list(st, key, 0, child_cb, &c, err);
    if (rc == 0 && c.n)
        ckpt_sort(c.keys, c.n, sizeof(char *), cmp_str);
    size_t queued = 0;
    for (size_t i = 0; rc == 0 && i < c.n; i++)
        if (i == 0 || strcmp(c.keys[i], c.keys[i - 1])) {
            queue(p, st, c.keys[i]);
            queued++;
        }
    for (size_t i = 0; i < c.n; i++)
        free(c.keys[i]);
    free(c.keys);
    *any = c.any;
    return rc == 0 ? (int)queued : -1;
}

/* Is a missing SRC a run an earlier invocation finished (its state
 * object exists)? */
static int has_state(struct ckpt_process *p, const char *key)
{
    char *id = ckpt_archive_stem(key);
    char *name = ckpt_xasprintf("%s/%s.json", STATE_DIR, id);
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
    ckpt_spool_budget_init(&p->spools, p->tmp, cfg->spool_limit);
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
    ckpt_spool_budget_destroy(&p->spools);
    free(p->tmp);
    free(p->runs);
    free(p->ids);
    free(p);
}
