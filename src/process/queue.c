/*
 * queue.c - `ckpt process` as a library (ckpt/process.h): the queue of
 * runs, and each run's phases in order: lease, judge, map, unshard,
 * upload, verify + delete. Each phase emits one event; the last event of
 * a run is its row.
 *
 * The phases live beside it: events.c (the rows and the state writes
 * every phase shares), outputs.c (unshard outputs at DEST: made,
 * adopted, verified), passes.c (the upload passes that copy, verify and
 * delete). This file keeps the top-down chain of one run (leased) in
 * one place.
 */
#include "ckpt/gate.h"
#include "ckpt/process.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/archive.h"
#include "ckpt/interrupt.h"
#include "ckpt/ratelimit.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "process_int.h"

#define STATE_DIR ".ckpt-process"
#define MIB (1024ULL * 1024)
#define DEFAULT_MEM (96 * MIB)  /* upload's own default, for all runs */
#define MIN_RUN_MEM (16 * MIB)  /* upload's --memory floor */

/* ---- phases ---- */

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
    return proc_save_state(o, PROC_DELETED, CKPT_PROC_DELETE);
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
        (void)ckpt_gate_delete(CKPT_GATE_OWN(CKPT_GATE_OWN_STATE, "the "
                                             "state this delete wrote"),
                               o->p->cfg.dst, o->state_key, &err);
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
static int holds_dest(const struct one *o)
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
    struct one *o = ud;
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
static void list_expect(struct one *o)
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
    proc_fail_run(o, CKPT_PROC_MAP, d);
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

/* The lease on the run's DEST path (DEST/.ckpt-process/ENTITY%2F
 * PROJECT%2FRUN_ID.path.lease), taken once the path is known and
 * before anything is written there: a run mapped to a place another
 * live worker (or run-worker of this process) writes is skipped until
 * that one is done, then compared with what it left (never replacing
 * it). Its own run lease alone cannot say that: two run ids, one place.
 * -n takes none. 0 to go on, 1 after the run's row. */
static int claim_dest(struct one *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    if (c->dry_run || o->path_key)
        return 0;
    /* One name beside the run leases ('/' and '%' escaped), so that
     * whatever lists or lapses those sees it too. A run whose id made
     * the same name would only wait for it, never write beside it. */
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addf(&b, "%s/", STATE_DIR);
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
static int live_again(struct one *o)
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
    proc_fail_run(o, CKPT_PROC_LEASE, d);
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

/* DEST at or inside the run: its outputs would be written into the
 * source and deleted with it (or uploaded into themselves). Refused
 * before anything is read or written, its lease included. 1 after the
 * run's row. */
static int dest_in_run(struct one *o)
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
static void leased(struct one *o)
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

/* Returns 1 when the run is another live worker's of the batch (no
 * row: walked once more after the round). */
static int process_one(struct ckpt_process *p, const struct prun *r,
                       int *failed)
{
    int other = 0;
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
    for (size_t i = 0; i < o.nexpect; i++)
        free(o.expect[i]);
    free(o.expect);
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

/* A run-worker: takes the next run of the round until none is left. Each
 * run goes through its phases in order under its own lease. */
static void *run_worker(void *arg)
{
    struct ckpt_process *p = arg;
    int failed = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t k = p->next < p->nround ? p->next++ : p->nround;
        pthread_mutex_unlock(&p->mu);
        /* Interrupted: no run is started (the ones in flight fail on
         * their next request and release their leases). */
        if (k == p->nround || ckpt_interrupted())
            break;
        size_t i = p->round[k];
        if (process_one(p, &p->runs[i], &failed)) {
            pthread_mutex_lock(&p->mu);
            p->others[p->nothers++] = i;
            pthread_mutex_unlock(&p->mu);
        }
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
    int jobs = c->jobs > 0 ? c->jobs : CKPT_PROC_DEFAULT_TRANSFERS;
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

/* One round over p->round: cfg.runs run-workers (this thread is one; a
 * thread that cannot be started leaves its share to the others). 1 when
 * a run failed. */
static int run_round(struct ckpt_process *p)
{
    int failed = 0, started = 0;
    int par = (size_t)p->par < p->nround ? p->par : (int)p->nround;
    pthread_t *th = ckpt_xcalloc(par > 0 ? (size_t)par : 1, sizeof(*th));
    p->next = 0;
    p->nothers = 0;
    p->taken = 0;
    for (int i = 1; i < par; i++)
        if (pthread_create(&th[started], NULL, run_worker, p) == 0)
            started++;
    failed = run_worker(p) != NULL;
    for (int i = 0; i < started; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        failed |= r != NULL;
    }
    free(th);
    return failed;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int ckpt_process_run(struct ckpt_process *p, struct ckpt_process_totals *t)
{
    int failed = 0;
    double t0 = ckpt_now();
    memset(t, 0, sizeof(*t));
    p->t = t;
    plan_pool(p);
    p->round = ckpt_xcalloc(p->n + 1, sizeof(*p->round));
    p->others = ckpt_xcalloc(p->n + 1, sizeof(*p->others));
    for (size_t i = 0; i < p->n; i++)
        p->round[i] = i;
    p->nround = p->n;
    /* A batch's runs claimed by other live workers are walked again
     * while the last round took something: a worker interrupted
     * meanwhile gave its unfinished runs back. Done when nothing is left
     * that this worker can take. */
    for (;;) {
        failed |= run_round(p);
        if (!p->cfg.batch || p->cfg.dry_run || !p->nothers || !p->taken ||
            ckpt_interrupted())
            break;
        ckpt_sort(p->others, p->nothers, sizeof(size_t), cmp_size);
        memcpy(p->round, p->others, p->nothers * sizeof(size_t));
        p->nround = p->nothers;
    }
    free(p->round);
    free(p->others);
    p->round = p->others = NULL;
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
};

/* Not DEST, not the --logs location. */
static int child_ok(void *ud, const char *key)
{
    struct children *c = ud;
    enum ckpt_loc_rel rel = ckpt_storage_relation(c->st, key, c->p->cfg.dst,
                                                  c->p->cfg.dest_key);
    enum ckpt_loc_rel lrel = c->p->cfg.logs_st
        ? ckpt_storage_relation(c->st, key, c->p->cfg.logs_st,
                                c->p->cfg.logs_key) : CKPT_LOC_APART;
    /* (a run holding DEST or the logs is queued: judging fails it with
     * a row, pass after pass, rather than leave it out unsaid) */
    return rel != CKPT_LOC_SAME && lrel != CKPT_LOC_SAME;
}

/* Does a directory SRC that is not a run hold runs? Its directories and
 * archives are queued (sorted); returns how many, or -1. *any tells
 * whether SRC holds anything at all. */
static int expand(struct ckpt_process *p, struct ckpt_storage *st,
                  const char *key, int *any, struct ckpt_err *err)
{
    struct children c = { p, st };
    char **keys;
    size_t n;
    if (ckpt_run_children(st, key, child_ok, &c, &keys, &n, any, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        queue(p, st, keys[i]);
        free(keys[i]);
    }
    free(keys);
    return (int)n;
}

static int add_one(struct ckpt_process *p, struct ckpt_storage *st,
                   const char *key, struct ckpt_err *err);

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
    /* `runs/r1/.` is runs/r1, as clean takes it: its id is r1, not "." */
    if (ckpt_storage_is_local(st)) {
        char *c = ckpt_clean_path(key, err);
        if (!c)
            return -1;
        int rc = add_one(p, st, c, err);
        free(c);
        return rc;
    }
    return add_one(p, st, key, err);
}

static int add_one(struct ckpt_process *p, struct ckpt_storage *st,
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
    if (cfg->bwlimit)
        p->bw = ckpt_rate_new(cfg->bwlimit);
    ckpt_spool_budget_init(&p->spools, p->tmp, cfg->spool_limit);
    /* Hashed as they are spooled, members go to DEST as hard links of the
     * spool's files, neither read nor written again (the upload's
     * put_file): only where such links can be made. */
    p->spool_hash = ckpt_storage_is_local(cfg->dst) &&
                    ckpt_local_same_fs(p->tmp, cfg->dest_key);
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
    ckpt_rate_free(p->bw);
    ckpt_spool_budget_destroy(&p->spools);
    free(p->tmp);
    free(p->runs);
    free(p->ids);
    free(p);
}
