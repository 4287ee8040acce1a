/*
 * passes.c - the upload passes of a `ckpt process` run: copy, verify
 * and delete, and what DEST holds afterwards.
 *
 * Upload, verification and deletion are one pass of the upload engine,
 * as `upload --delete-source` (every file's MD5 checked against DEST,
 * nothing deleted unless everything arrived; sources re-checked unchanged
 * before each deletion, OLMo `latest` links and emptied directories
 * removed). Before the first deletion the lease is checked and the state
 * written as "uploaded"; before every other one the lease is checked. A
 * run found "uploaded" later (a worker died while deleting) gets a second
 * kind of pass: every source file compared by checksum, then deleted.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/gate.h"
#include "ckpt/archive.h"
#include "ckpt/tempname.h"
#include "ckpt/upload.h"
#include "ckpt/util.h"
#include "process_int.h"

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
static void predicted_total(struct proc_run *o, uint64_t *files, uint64_t *bytes)
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
static const char *in_run(const struct proc_run *o, const char *src)
{
    size_t n = strlen(o->r->display);
    return !strncmp(src, o->r->display, n) && src[n] == '/' ? src + n + 1
                                                            : src;
}

static void up_event(void *ud, const struct ckpt_upload_event *ev)
{
    struct proc_run *o = ud;
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
        proc_predict_file(o, ev->dest, ev->bytes, 0);
    if (ev->action == CKPT_UP_FAILED && !o->fail.len) {
        ckpt_buf_addf(&o->fail, "%s: %s", ev->src, ev->detail);
        o->fail_delete = ev->dest == NULL;
    }
}

/* Each pass counts from zero; the caller gets the sum over every run
 * (several passes run at once), never going back. */
static void up_progress(void *ud, uint64_t items, uint64_t bytes,
                        uint64_t sent)
{
    (void)sent;
    struct proc_run *o = ud;
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
    struct proc_run *o = ud;
    if (proc_keeper_check(&o->k, err) != 0 ||
        (o->path_key && proc_keeper_check(&o->pk, err) != 0))
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
    struct proc_run *o = ud;
    return proc_drop_unchanged(&o->drops, key, rel, err);
}

static enum ckpt_upload_pick up_pick_cb(void *ud, const char *rel)
{
    struct proc_run *o = ud;
    return (enum ckpt_upload_pick)proc_pick(o->p->cfg.filter, &o->drops,
                                            rel);
}

static void add_logs(struct proc_run *o, struct ckpt_upload *u)
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
static char *archive_key(const struct proc_run *o)
{
    char *base = ckpt_path_basename(o->r->key);
    char *key = ckpt_xasprintf("%s%s", o->dkey, base + strlen(o->r->id));
    free(base);
    return key;
}

/* One pass of the upload engine over the run and its logs. verify: compare
 * every file by checksum and (unless --keep-source) delete the source.
 * Returns 0, or -1 with o->fail saying why. */
static int upload_pass(struct proc_run *o, int verify, int dry,
                       struct ckpt_upload_totals *t)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_upload_cfg ucfg = {
        .jobs = o->p->run_jobs, .mem_budget = o->p->run_mem,
        .rate = o->p->bw,   /* --bwlimit: one limit for every run */
        .dry_run = dry,
        .checksum = verify, .delete_source = !c->keep_source,
        /* DEST's only copy is never replaced: once a source may have
         * been deleted (state uploaded or done) DEST holds the only copy
         * of its bytes, and before that they may be another run's. */
        .no_replace = 1,
        .strip = 1, .keep_src_root = 1, .state_dir = c->state_dir,
        .on_event = up_event,
        .on_progress = up_progress,
        .may_delete = dry ? NULL : up_may_delete, .pick = up_pick_cb,
        .may_drop = up_may_drop,
        /* A run judged in this pass: every file judged must be found
         * (NULL on a rerun of an uploaded run, which deleted some by
         * design and is not judged again). */
        .expect = o->expect, .nexpect = o->nexpect,
        .ud = o,
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

/* ---- what DEST holds, and the phases that run the passes ---- */

struct dcount {
    struct proc_run *o;
    const char *root;
    int predict;
    uint64_t files, bytes;
};

static void dcount_add(struct dcount *d, const char *key, uint64_t size)
{
    if (d->predict) {
        char *disp = ckpt_storage_display(d->o->p->cfg.dst, key);
        proc_predict_file(d->o, disp, size, 1);
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
static int count_dest(struct proc_run *o, int predict, uint64_t *files,
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
static void emit_delete(struct proc_run *o, const struct ckpt_upload_totals *t,
                        uint64_t freed0)
{
    char *d = t->left ? ckpt_xasprintf("kept %llu file(s) left out by "
                                       "--include/--exclude",
                                       (unsigned long long)t->left)
                      : ckpt_xstrdup("");
    proc_emit(o, CKPT_PROC_DELETE, CKPT_PROC_OK, d, t->deleted,
              o->freed - freed0);
    free(d);
}

/* What the pass left at the source by design, for the row and the state
 * ("kept 2 special files: a/fifo, b/link"); NULL when nothing was, or
 * nothing is deleted (--keep-source). */
static void set_note(struct proc_run *o)
{
    free(o->s.why);
    o->s.why = NULL;
    const char *partial = o->drops.partial;
    if (o->p->cfg.keep_source || (!o->nspecials && !o->nkept && !partial))
        return;
    struct ckpt_buf b = CKPT_BUF_INIT;
    if (partial)
        ckpt_buf_addstr(&b, partial);
    if (o->nspecials)
        ckpt_buf_addf(&b, "%skept %zu special file%s: %s",
                      b.len ? "; " : "", o->nspecials,
                      o->nspecials == 1 ? "" : "s", o->specials.ptr);
    if (o->nkept)
        ckpt_buf_addf(&b, "%skept %zu dropped file%s: %s", b.len ? "; " : "",
                      o->nkept, o->nkept == 1 ? "" : "s", o->kept.ptr);
    o->s.why = ckpt_buf_detach(&b, NULL);
}

/* Steps to leave out (--drop-*): judged on the run as it is before any
 * of it is deleted, after the unshard phase made its outputs. 0, or -1
 * after the run's row. */
int proc_find_drops(struct proc_run *o)
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
    proc_fail_run(o, CKPT_PROC_UPLOAD, err.msg);
    return -1;
}

/* The counts of what DEST holds after the pass (count_dest) into the
 * state; -1 after the run's row. */
static int set_counts(struct proc_run *o, enum ckpt_process_phase ph)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (count_dest(o, o->p->cfg.dry_run, &o->s.files, &o->s.bytes, &err)
        == 0)
        return 0;
    proc_fail_run(o, ph, err.msg);
    return -1;
}

struct left {
    const struct proc_run *o;
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
static int left_behind(struct proc_run *o)
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
        proc_fail_run(o, CKPT_PROC_DELETE, err.msg);
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
    if (proc_save_state(o, PROC_UPLOADED, CKPT_PROC_DELETE) == 0)
        proc_fail_run(o, CKPT_PROC_DELETE, why);
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
static int save_done(struct proc_run *o)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (proc_save_state(o, PROC_DONE, CKPT_PROC_DELETE) != 0)
        return -1;
    if (!o->p->cfg.keep_source && ckpt_storage_is_local(o->r->st) &&
        ckpt_archive_kind_of(o->r->key) == CKPT_ARCHIVE_NONE)
        (void)ckpt_gate_prune_dirs(CKPT_GATE_OWN(CKPT_GATE_EMPTY_DIR, "the "
                                                 "run's emptied directories"),
                                   o->r->st, o->r->key, 0, &err);
    return 0;
}

/* After a real pass that copied and verified everything: its delete
 * row, the row's note, what stayed at the source, state "done". */
static int pass_done(struct proc_run *o, const struct ckpt_upload_totals *t,
                     uint64_t freed0)
{
    if (!o->p->cfg.keep_source)
        emit_delete(o, t, freed0);
    set_note(o);
    if (left_behind(o) != 0)
        return -1;
    return save_done(o);
}

/* Copy the run to DEST, verify and delete the source in one pass of the
 * upload engine, as `upload --delete-source` does (it deletes nothing
 * unless every file arrived; with --keep-source every file is compared
 * by checksum instead); state "done". -n: the plan of that pass. */
int proc_upload(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    int dry = c->dry_run;
    struct ckpt_upload_totals t;
    uint64_t freed0 = o->freed;
    o->save_on_delete = !dry;
    int rc = upload_pass(o, dry ? 0 : c->keep_source, dry, &t);
    o->save_on_delete = 0;
    if (rc != 0) {
        proc_fail_run(o, o->fail_delete ? CKPT_PROC_DELETE : CKPT_PROC_UPLOAD,
                      o->fail.ptr);
        return -1;
    }
    if (set_counts(o, CKPT_PROC_UPLOAD) != 0)
        return -1;
    if (dry) {
        proc_emit(o, CKPT_PROC_UPLOAD, CKPT_PROC_WOULD, "", o->s.files,
                  o->s.bytes);
        if (!c->keep_source)
            proc_emit(o, CKPT_PROC_DELETE, CKPT_PROC_WOULD, "", 0, 0);
        return 0;
    }
    proc_emit(o, CKPT_PROC_UPLOAD, CKPT_PROC_OK, "", o->s.files, o->s.bytes);
    proc_emit(o, CKPT_PROC_VERIFY, CKPT_PROC_OK, "", o->s.files, o->s.bytes);
    return pass_done(o, &t, freed0);
}

/* Compare every source file with DEST, then delete the source (the
 * recorded outputs verified first: proc_verify_outputs). */
int proc_verify_delete(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    int dry = c->dry_run;
    struct ckpt_upload_totals t;
    uint64_t freed0 = o->freed;
    if (upload_pass(o, 1, dry, &t) != 0) {
        proc_fail_run(o, o->fail_delete ? CKPT_PROC_DELETE : CKPT_PROC_VERIFY,
                      o->fail.ptr);
        return -1;
    }
    if (set_counts(o, CKPT_PROC_VERIFY) != 0)
        return -1;
    proc_emit(o, CKPT_PROC_VERIFY, dry ? CKPT_PROC_WOULD : CKPT_PROC_OK, "",
              o->s.files, o->s.bytes);
    if (dry) {
        if (!c->keep_source)
            proc_emit(o, CKPT_PROC_DELETE, CKPT_PROC_WOULD, "", 0, 0);
        return 0;
    }
    return pass_done(o, &t, freed0);
}
