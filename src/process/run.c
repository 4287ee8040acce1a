/*
 * run.c - one run of `ckpt process` (ckpt/process.h), the phases in
 * order under its lease: judge, map, unshard, upload, verify + delete.
 * Each phase emits one event; the last event of a run is its row.
 *
 * The phases' parts live beside it: events.c (the rows and the state
 * writes every phase shares), outputs.c (unshard outputs at DEST: made,
 * adopted, verified), passes.c (the upload passes that copy, verify and
 * delete), drop.c (steps left out), lease.c and claim.c (who works on
 * the run). queue.c holds the queue of runs and the workers that take
 * them; this file keeps the top-down chain of one run in one place.
 */
#include "ckpt/gate.h"
#include "ckpt/process.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/archive.h"
#include "ckpt/interrupt.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "process_int.h"

/* ---- phases ---- */

/* Right before a bad run is deleted (renamed aside first): its state
 * "deleted", with the judge's reason, so that a worker killed from here
 * on leaves a state that says what the run was (a pass over SRC no
 * longer sees a run deleted whole), and a rerun that finishes the delete
 * keeps that reason. A delete that finishes one a killed worker left
 * (it->resume) keeps the reason its state recorded. 0, or -1 after the
 * run's row. */
static int pre_delete_state(struct proc_run *o, const struct ckpt_clean_item *it)
{
    o->s_before = o->s.phase;
    o->s_had = o->s.phase != PROC_NEW || o->s.src || o->s.nouts;
    if (!(it->resume && o->s.phase == PROC_DELETED && o->s.why)) {
        free(o->s.why);
        o->s.why = ckpt_xstrdup(it->reason.ptr);
    }
    return proc_save_state(o, PROC_DELETED, CKPT_PROC_DELETE);
}

/* The delete failed (the run changed, a file could not go): the state
 * says again what it said before, or is removed when there was none (a
 * rerun judges the run again either way: a "deleted" run that exists is
 * a new run under the old name). */
static void undo_delete_state(struct proc_run *o)
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
        (void)ckpt_gate_delete(CKPT_GATE_OWN(CKPT_GATE_OWN_STATE, "the "
                                             "state this delete wrote"),
                               o->p->cfg.dst, o->state_key, &err);
}

/* ---- one decompression pass ---- */

static void spool_read(void *ud, uint64_t read, uint64_t size)
{
    struct proc_run *o = ud;
    const struct ckpt_process_cfg *c = &o->p->cfg;
    if (!c->on_archive)
        return;
    pthread_mutex_lock(&o->p->mu);
    c->on_archive(c->ud, o->r->display, read, size);
    pthread_mutex_unlock(&o->p->mu);
}

static void spool_release(struct proc_run *o)
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
static void spool(struct proc_run *o)
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
    struct ckpt_spool_cfg sc = { o->p->tmp, &o->p->spools, spool_read, o,
                                 o->p->spool_hash };
    if (ckpt_archive_spool(&o->spool, o->r->st, o->r->key, &sc, &err) != 0) {
        char *d = ckpt_xasprintf("not spooled (%s): each phase reads the "
                                 "archive again", err.msg);
        proc_emit(o, CKPT_PROC_SPOOL, CKPT_PROC_SKIPPED, d, 0, 0);
        free(d);
        spool_release(o);
        return;
    }
    ckpt_archive_spool_attach(o->spool);
}

/* 1 when DEST is inside the run (or is it), 2 when the --logs location
 * is, else 0. */
static int holds_dest(const struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    enum ckpt_loc_rel r = ckpt_storage_relation(o->r->st, o->r->key, c->dst,
                                                c->dest_key);
    if (r == CKPT_LOC_SAME || r == CKPT_LOC_B_INSIDE_A)
        return 1;
    r = c->logs_st ? ckpt_storage_relation(o->r->st, o->r->key, c->logs_st,
                                           c->logs_key) : CKPT_LOC_APART;
    return r == CKPT_LOC_SAME || r == CKPT_LOC_B_INSIDE_A ? 2 : 0;
}

static int expect_cb(void *ud, const struct ckpt_entry *e)
{
    struct proc_run *o = ud;
    if (e->type == CKPT_ENTRY_DIR)
        return 0;
    /* Below a step a killed delete renamed aside: not content (the
     * upload does not walk it), finished by clean and unshard. */
    char *c = ckpt_xstrdup(e->name), *save = NULL;
    int aside = 0;
    for (char *t = strtok_r(c, "/", &save); t && !aside;
         t = strtok_r(NULL, "/", &save))
        aside = ckpt_is_del_name(t);
    free(c);
    if (aside)
        return 0;
    if (o->nexpect % 64 == 0)
        o->expect = ckpt_xreallocarray(o->expect, o->nexpect + 64,
                                       sizeof(*o->expect));
    o->expect[o->nexpect++] = ckpt_xstrdup(e->name);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The run's files right before it is judged (a directory run): what
 * its upload must find (one vanished: another worker or a user deleted
 * it, and the run is not copied in part and called done). */
static void list_expect(struct proc_run *o)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_archive_kind_of(o->r->key) != CKPT_ARCHIVE_NONE)
        return;
    if (ckpt_storage_list(o->r->st, o->r->key, CKPT_LIST_RECURSIVE,
                          expect_cb, o, &err) != 0) {
        /* The judge's own listing reports why. */
        for (size_t i = 0; i < o->nexpect; i++)
            free(o->expect[i]);
        free(o->expect);
        o->expect = NULL;
        o->nexpect = 0;
        return;
    }
    if (o->nexpect)
        ckpt_sort(o->expect, o->nexpect, sizeof(char *), cmp_str);
}

/* Judge with clean's rules. Returns 1 to go on (a good run), 0 when the
 * run's row was given (deleted, skipped, failed). */
static int judge(struct proc_run *o)
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
        list_expect(o);
        ckpt_clean_judge(&it);
    }
    else {
        it.action = "error";
        ckpt_buf_addstr(&it.reason, err.msg);
    }
    int go = 0;
    if (!strcmp(it.action, "keep")) {
        proc_emit(o, CKPT_PROC_JUDGE, CKPT_PROC_OK, it.reason.ptr, 0, 0);
        go = 1;
    } else if (!strcmp(it.action, "skip")) {
        /* clean's hint; process has no --force */
        char *hint = strstr(it.reason.ptr, "; use --force");
        if (hint)
            ckpt_buf_setlen(&it.reason, (size_t)(hint - it.reason.ptr));
        int live = !strncmp(it.reason.ptr, "live:", 5);
        proc_emit(o, CKPT_PROC_JUDGE, CKPT_PROC_SKIPPED, it.reason.ptr, 0, 0);
        proc_finish(o, CKPT_PROC_SKIPPED, it.reason.ptr, !live);
    } else if (!strcmp(it.action, "error")) {
        proc_fail_run(o, CKPT_PROC_JUDGE, it.reason.ptr);
    } else if (c->keep_bad) {
        char *d = ckpt_xasprintf("bad: %s (--keep-bad)", it.reason.ptr);
        proc_emit(o, CKPT_PROC_JUDGE, CKPT_PROC_SKIPPED, d, 0, 0);
        proc_finish(o, CKPT_PROC_SKIPPED, d, 0);
        free(d);
    } else if (!c->dry_run && proc_keeper_check(&o->k, &err) != 0) {
        proc_fail_run(o, CKPT_PROC_DELETE, err.msg);
    } else if (c->dry_run || pre_delete_state(o, &it) == 0) {
        /* Re-read, still bad, unchanged: then deleted (rename-first). */
        ckpt_clean_act(&it);
        if (!strcmp(it.action, "error")) {
            if (!c->dry_run)
                undo_delete_state(o);
            proc_fail_run(o, CKPT_PROC_DELETE, it.reason.ptr);
        } else {
            o->freed = it.bytes;
            proc_emit(o, CKPT_PROC_DELETE, c->dry_run ? CKPT_PROC_WOULD
                      : CKPT_PROC_OK, it.reason.ptr, 0, 0);
            if (c->dry_run ||
                proc_save_state(o, PROC_DELETED, CKPT_PROC_DELETE) == 0)
                proc_finish(o, CKPT_PROC_DELETED, it.reason.ptr, 0);
        }
    }
    ckpt_clean_item_release(&it);
    return go;
}

/* Where the run goes below DEST: its W&B path from the map, else RUN_ID.
 * NULL with *why (malloced) when the map has none for it, or the path is
 * no safe place below DEST (a hidden component would put it in DEST's
 * own .ckpt-process/, ".." outside DEST). */
static const char *expected_dest(const struct proc_run *o, char **why)
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
static int map_run(struct proc_run *o)
{
    char *why;
    const char *path = expected_dest(o, &why);
    if (!path) {
        proc_fail_run(o, CKPT_PROC_MAP, why);
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
static int check_dest(struct proc_run *o)
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
    proc_fail_run(o, CKPT_PROC_MAP, d);
    free(d);
    free(at);
    free(why);
    return -1;
}

static void set_dest(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    free(o->dkey);
    free(o->ddisp);
    o->dkey = ckpt_path_join(c->dest_key, o->s.dest);
    o->ddisp = ckpt_storage_display(c->dst, o->dkey);
}

/* The lease on the run's DEST path (DEST/.ckpt-process/ENTITY%2F
 * PROJECT%2FRUN_ID.path.lease), taken once the path is known and
 * before anything is written there: a run mapped to a place another
 * live worker (or run-worker of this process) writes is skipped until
 * that one is done, then compared with what it left (never replacing
 * it). Its own run lease alone cannot say that: two run ids, one place.
 * -n takes none. 0 to go on, 1 after the run's row. */
static int claim_dest(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    if (c->dry_run || o->path_key)
        return 0;
    /* One name beside the run leases ('/' and '%' escaped), so that
     * whatever lists or lapses those sees it too. A run whose id made
     * the same name would only wait for it, never write beside it. */
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addf(&b, "%s/", PROC_STATE_DIR);
    for (const char *q = o->s.dest; *q; q++)
        if (*q == '/' || *q == '%')
            ckpt_buf_addf(&b, "%%%02X", (unsigned)*q);
        else
            ckpt_buf_add(&b, q, 1);
    ckpt_buf_addstr(&b, ".path.lease");
    char *key = ckpt_path_join(c->dest_key, b.ptr);
    char *rel = ckpt_buf_detach(&b, NULL);
    struct ckpt_lease_holder h;
    struct ckpt_err err = CKPT_ERR_INIT;
    int lr = proc_keeper_start(&o->pk, c->dst, key, o->r->id, c->lease_ttl,
                               &h, &err);
    free(rel);
    if (lr == CKPT_LEASE_ACQUIRED || lr == CKPT_LEASE_TAKEN_OVER) {
        o->path_key = key;
        return 0;
    }
    free(key);
    if (lr < 0) {
        proc_fail_run(o, CKPT_PROC_LEASE, err.msg);
        return 1;
    }
    char who[400];
    ckpt_lease_holder_str(&h, who, sizeof(who));
    char *d = ckpt_xasprintf("DEST path %s is being written by run '%s' "
                             "(%s)", o->ddisp, h.run, who);
    proc_emit(o, CKPT_PROC_LEASE, CKPT_PROC_SKIPPED, d, 0, 0);
    proc_finish(o, CKPT_PROC_SKIPPED, d, 0);
    free(d);
    return 1;
}

/* A run the state says was uploaded or done whose source is still there:
 * a crash during the delete, or a requeued job writing to it again. The
 * live-run guard applies as on a first pass; without it the rerun would
 * upload files seconds old over DEST's copy and delete them under the
 * job. 1 after the run's row (skipped or failed), else 0. */
static int live_again(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_clean_item it;
    struct ckpt_err err = CKPT_ERR_INIT;
    ckpt_clean_item_init(&it, o->r->st, o->r->key, o->r->display, &c->clean);
    int rc = ckpt_clean_live(&it, &err);
    if (rc < 0) {
        proc_fail_run(o, CKPT_PROC_JUDGE, err.msg);
    } else if (rc > 0) {
        char *d = ckpt_xasprintf("%s (written to since it was %s)",
                                 it.reason.ptr, o->s.phase == PROC_DONE
                                 ? "processed" : "uploaded");
        proc_emit(o, CKPT_PROC_JUDGE, CKPT_PROC_SKIPPED, d, 0, 0);
        proc_finish(o, CKPT_PROC_SKIPPED, d, 0);
        free(d);
    }
    ckpt_clean_item_release(&it);
    return rc != 0;
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
static int other_source(struct proc_run *o)
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
    proc_fail_run(o, CKPT_PROC_LEASE, d);
    free(d);
    free(at);
    return 1;
}

/* A bad run a killed worker of this host left renamed aside
 * (.NAME.ckpt-del-HOST-PID, the process dead). */
static int aside_left(const struct proc_run *o)
{
    char *s = ckpt_storage_is_local(o->r->st)
        ? ckpt_del_dead_sibling(o->r->key) : NULL;
    free(s);
    return s != NULL;
}

/* DEST at or inside the run: its outputs would be written into the
 * source and deleted with it (or uploaded into themselves). Refused
 * before anything is read or written, its lease included. 1 after the
 * run's row. */
static int dest_in_run(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    int which = holds_dest(o);
    if (!which)
        return 0;
    char *d = which == 1 ? ckpt_storage_display(c->dst, c->dest_key)
                         : ckpt_storage_display(c->logs_st, c->logs_key);
    char *why = ckpt_xasprintf("%s '%s' is inside the run, which would "
                               "be deleted with what is written there; "
                               "nothing done", which == 1 ? "DEST"
                                                          : "--logs", d);
    proc_fail_run(o, CKPT_PROC_JUDGE, why);
    free(why);
    free(d);
    return 1;
}

/* With the lease held (-n: without, changing nothing): from whatever
 * the state says to done. */
static void leased(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    int dry = c->dry_run;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_stat sb;
    if (proc_state_read(c->dst, o->state_key, &o->s, &err) != 0) {
        proc_fail_run(o, CKPT_PROC_JUDGE, err.msg);
        return;
    }
    o->steps = proc_out_steps(&o->s, NULL, 0);
    if (other_source(o))
        return;
    int exists = ckpt_storage_stat(o->r->st, o->r->key, &sb, &err) == 0;
    if (!exists && err.code != CKPT_ENOTFOUND) {
        proc_fail_run(o, CKPT_PROC_JUDGE, err.msg);
        return;
    }
    if (o->s.phase == PROC_UPLOADED || o->s.phase == PROC_DONE) {
        /* Nothing is read from a place the run does not map to. */
        if (exists && check_dest(o) != 0)
            return;
        set_dest(o);
    }
    if (!exists && o->s.phase == PROC_NEW) {
        /* Never processed: judging says it does not exist, or finishes
         * the delete of a bad run a killed worker left renamed aside. */
        if (judge(o))
            proc_fail_run(o, CKPT_PROC_JUDGE, "does not exist");
        return;
    }
    if (!exists && o->s.phase == PROC_DELETED && aside_left(o)) {
        /* Killed after the state, while deleting: finish the delete (of
         * a dead process of this host; clean's rules), keep the reason. */
        if (judge(o))
            proc_fail_run(o, CKPT_PROC_JUDGE, "does not exist");
        return;
    }
    if (!exists && o->s.phase == PROC_DELETED) {
        char *d = ckpt_xasprintf("deleted earlier: %s",
                                 o->s.why ? o->s.why : "bad run");
        proc_finish(o, CKPT_PROC_DONE, d, 0);
        free(d);
        return;
    }
    /* Gone after a verified upload: a crash during the delete, or
     * another worker finished it. */
    if (!exists || (o->s.phase == PROC_DONE && c->keep_source)) {
        o->freed = 0;
        if (!dry && o->s.phase != PROC_DONE &&
            proc_save_state(o, PROC_DONE, CKPT_PROC_DELETE) != 0)
            return;
        proc_finish(o, CKPT_PROC_DONE, "already processed", 0);
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
        if (claim_dest(o) || proc_unshard(o) != 0 || (dry && proc_dry_have(o) != 0) ||
            proc_verify_outputs(o) != 0 || proc_find_drops(o) != 0 ||
            proc_upload(o) != 0)
            return;
    } else {
        if (live_again(o) || claim_dest(o))
            return;
        /* A worker killed while deleting: the steps it judged droppable
         * are still dropped (what is left of them deleted if unchanged
         * since judged, else kept), never judged again nor uploaded. */
        if (o->s.phase == PROC_UPLOADED && o->s.dropped.n) {
            o->drops = o->s.dropped;
            o->drops.st = o->r->st;
            memset(&o->s.dropped, 0, sizeof(o->s.dropped));
        }
        proc_emit(o, CKPT_PROC_UPLOAD, CKPT_PROC_DONE, "", o->s.files,
                  o->s.bytes);
        if (proc_verify_outputs(o) != 0 || proc_verify_delete(o) != 0)
            return;
    }
    proc_finish(o, dry ? CKPT_PROC_WOULD : CKPT_PROC_OK, dry ? "" : o->s.why,
                0);
}

/* The lease event's detail: "acquired", or whose lease was taken over
 * and why (expired, or its process of this host is gone: a worker
 * killed or interrupted here is rerun at once). */
static char *lease_taken(int lr, const struct ckpt_lease_holder *h)
{
    if (lr != CKPT_LEASE_TAKEN_OVER)
        return ckpt_xstrdup(ckpt_lease_result_name(lr));
    char who[400];
    ckpt_lease_holder_str(h, who, sizeof(who));
    return ckpt_xasprintf("taken-over: the lease of %s, %s", who,
                          (int64_t)time(NULL) < h->expires
                          ? "whose process no longer runs on this host"
                          : "expired");
}

/* process_int.h */
int proc_run_one(struct ckpt_process *p, const struct proc_queued *r,
                 int *failed)
{
    int other = 0;
    struct proc_run o;
    memset(&o, 0, sizeof(o));
    o.p = p;
    o.r = r;
    o.t0 = ckpt_now();
    ckpt_buf_init(&o.fail);
    ckpt_buf_init(&o.specials);
    ckpt_buf_init(&o.kept);
    pthread_mutex_init(&o.mu, NULL);
    char *dir = ckpt_path_join(p->cfg.dest_key, PROC_STATE_DIR);
    char *sname = ckpt_xasprintf("%s.json", r->id);
    char *lname = ckpt_xasprintf("%s.lease", r->id);
    char *cname = ckpt_xasprintf("%s.claim", r->id);
    o.state_key = ckpt_path_join(dir, sname);
    o.lease_key = ckpt_path_join(dir, lname);
    o.cl.key = ckpt_path_join(dir, cname);
    free(cname);
    struct ckpt_err cerr = CKPT_ERR_INIT;
    int claim = 1;
    if (r->dup) {
        char *d = ckpt_xasprintf("run id '%s' is also the id of %s, queued "
                                 "before it: the two would share one state "
                                 "at DEST; left untouched", r->id,
                                 p->runs[r->dup - 1].display);
        proc_fail_run(&o, CKPT_PROC_LEASE, d);
        free(d);
    } else if (dest_in_run(&o)) {
        /* refused before its lease is written there */
    } else if (p->cfg.dry_run) {
        leased(&o);
    } else if (p->cfg.batch &&
               (claim = proc_claim_take(&o, &cerr)) <= 0) {
        /* Interrupted while claiming: not started, no row (another
         * worker of the batch takes it). */
        if (claim < 0 && !ckpt_interrupted())
            proc_fail_run(&o, CKPT_PROC_LEASE, cerr.msg);
        other = claim == 0 && !ckpt_interrupted();
    } else {
        struct ckpt_lease_holder h;
        struct ckpt_err err = CKPT_ERR_INIT;
        int lr = proc_keeper_start(&o.k, p->cfg.dst, o.lease_key, r->id,
                                   p->cfg.lease_ttl, &h, &err);
        if (lr == CKPT_LEASE_LEASED) {
            char who[400], *d;
            ckpt_lease_holder_str(&h, who, sizeof(who));
            d = ckpt_xasprintf("leased by %s", who);
            proc_emit(&o, CKPT_PROC_LEASE, CKPT_PROC_SKIPPED, d, 0, 0);
            proc_finish(&o, CKPT_PROC_SKIPPED, d, 0);
            free(d);
        } else if (lr < 0 && !ckpt_interrupted()) {
            proc_fail_run(&o, CKPT_PROC_LEASE, err.msg);
        } else if (lr < 0) {
            /* Interrupted while taking the lease: not started, no row;
             * a batch gets the run back. */
            o.failed = 1;
        } else {
            char *d = lease_taken(lr, &h);
            proc_emit(&o, CKPT_PROC_LEASE, CKPT_PROC_OK, d, 0, 0);
            free(d);
            leased(&o);
            if (o.path_key)
                proc_keeper_stop(&o.pk);
            proc_keeper_stop(&o.k);
        }
    }
    if (o.cl.held) {
        /* A run interrupted before its end goes back to the batch. */
        if (o.failed && ckpt_interrupted())
            proc_claim_drop(&o);
        else
            proc_claim_done(&o);
        pthread_mutex_lock(&p->mu);
        p->taken++;
        pthread_mutex_unlock(&p->mu);
    }
    free(o.cl.key);
    *failed |= o.failed;
    spool_release(&o);
    proc_drops_release(&o.drops);
    free(o.would);
    free(o.made);
    for (size_t i = 0; i < o.npf; i++)
        free(o.pf[i].disp);
    free(o.pf);
    ckpt_strv_free(o.have, o.nhave);
    ckpt_strv_free(o.wdirs, o.nwdirs);
    proc_state_release(&o.s);
    ckpt_buf_release(&o.fail);
    ckpt_buf_release(&o.specials);
    ckpt_buf_release(&o.kept);
    ckpt_strv_free(o.keptv, o.nkeptv);
    ckpt_strv_free(o.expect, o.nexpect);
    free(o.dkey);
    free(o.ddisp);
    free(o.path_key);
    free(o.state_key);
    free(o.lease_key);
    pthread_mutex_destroy(&o.mu);
    free(sname);
    free(lname);
    free(dir);
    return other;
}
