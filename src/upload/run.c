/*
 * run.c - ckpt_upload_run: copy everything, then clean up after earlier
 * crashes (unfinished uploads nobody will finish), then, when asked and
 * only if every file arrived, delete the sources.
 */
#include "upload_int.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

/* ---- unfinished uploads the journal does not know ---- */

struct foreign {
    struct ckpt_upload *u;
    struct group *g;
    char **keys;                /* borrowed: this copy's DEST keys, sorted */
    size_t nkeys;
    size_t left_alone;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* An upload for one of our keys that our journal never recorded was
 * started by a run of this copy that died before writing its S line:
 * nobody will finish it. Others (other copies into the same prefix, maybe
 * running now) are left alone, and counted. */
static int foreign_upload(void *ud, const char *key, const char *id,
                          int64_t initiated)
{
    struct foreign *f = ud;
    if (up_journal_knows_upload(f->g->jr, id))
        return 0;
    if (bsearch(&key, f->keys, f->nkeys, sizeof(char *), cmp_str))
        up_queue_abort(f->u, f->g, f->g->dst, key, id);
    else
        f->left_alone++;
    return 0;
}

static void find_foreign(struct ckpt_upload *u, struct group *g)
{
    struct foreign f = { u, g, NULL, 0, 0 };
    f.keys = ckpt_xcalloc(g->nobjs + 1, sizeof(char *));
    for (size_t i = 0; i < u->nobjs; i++)
        if (u->objs[i]->g == g && u->objs[i]->st != O_FAILED)
            f.keys[f.nkeys++] = u->objs[i]->dkey;
    ckpt_sort(f.keys, f.nkeys, sizeof(char *), cmp_str);
    char *prefix = g->kind == G_FILE ? ckpt_xstrdup(g->dkey)
                 : *g->dkey ? ckpt_xasprintf("%s/", g->dkey)
                            : ckpt_xstrdup("");
    struct ckpt_err err = CKPT_ERR_INIT;
    /* CKPT_EUNSUPPORTED (s3rver, some gateways): the journal is all we
     * have, which covers everything but a crash inside
     * CreateMultipartUpload; a lifecycle rule covers that. */
    ckpt_storage_mpu_list(g->dst, prefix, foreign_upload, &f, &err);
    if (f.left_alone) {
        char *disp = ckpt_storage_display(g->dst, g->dkey);
        char *why = ckpt_xasprintf("%zu unfinished multipart upload(s) "
                                   "under DEST were not started by this "
                                   "copy; left alone", f.left_alone);
        up_emit(u, CKPT_UP_WARNING, NULL, disp, why);
        free(why);
        free(disp);
    }
    free(prefix);
    free(f.keys);
}

/* ---- what arrived ---- */

/* Every object reported uploaded must be listed at DEST with its size
 * (and ETag): one listing per copy, after everything was acknowledged.
 * Catches a service that acknowledged a write it then lost. */
static void unarrived(struct ckpt_upload *u, struct obj *o, const char *why)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    ckpt_err_set(&err, CKPT_EHTTP, "%s: %s", o->ddisp, why);
    u->t.uploaded--;
    u->t.bytes -= o->size;
    o->st = O_NEW;  /* so obj_fail reports it */
    up_obj_fail(u, o, &err);
}

static void check_arrived(struct ckpt_upload *u, struct obj *o,
                          const struct dentry *d)
{
    if (!d)
        unarrived(u, o, "not at DEST after the upload was acknowledged");
    else if (d->size != o->size)
        unarrived(u, o, "DEST lists a different size than was uploaded");
    else if (o->etag[0] && d->etag[0] && strcmp(o->etag, d->etag))
        unarrived(u, o, "DEST lists a different ETag than the upload's");
}

/* A skipped object was proven equal to what DEST listed (d, its ETag,
 * or a local copy read back): DEST must still list that, or another
 * writer replaced it since and the proof is gone. */
static void check_still(struct ckpt_upload *u, struct obj *o,
                        const struct dentry *was, const struct dentry *d)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    const char *why = !d ? "gone from DEST after it was found equal"
                    : d->size != was->size || strcmp(d->etag, was->etag) ||
                      (ckpt_storage_is_local(o->g->dst) &&
                       d->mtime != was->mtime)
                    ? "changed at DEST after it was found equal" : NULL;
    if (!why)
        return;
    ckpt_err_set(&err, CKPT_EHTTP, "%s: %s", o->ddisp, why);
    u->t.skipped--;
    o->st = O_NEW;  /* so obj_fail reports it */
    up_obj_fail(u, o, &err);
}

static void verify_group(struct ckpt_upload *u, struct group *g)
{
    struct dmap m = { NULL, 0, 0 };
    struct ckpt_err err = CKPT_ERR_INIT;
    int rc = up_dmap_load(g, &m, &err);
    size_t root = *g->dkey ? strlen(g->dkey) + 1 : 0;
    for (size_t i = 0; i < u->nobjs; i++) {
        struct obj *o = u->objs[i];
        int skipped = o->st == O_SKIPPED && o->dest;
        if (o->g != g || (o->st != O_DONE && !skipped) || o->superseded)
            continue;
        if (rc != 0 && !skipped) {
            unarrived(u, o, err.msg);
            continue;
        }
        if (rc != 0) {
            u->t.skipped--;
            o->st = O_NEW;
            up_obj_fail(u, o, &err);
            continue;
        }
        const char *rel = g->kind == G_FILE ? "" : o->dkey + root;
        if (skipped)
            check_still(u, o, o->dest, up_dmap_find(&m, rel));
        else
            check_arrived(u, o, up_dmap_find(&m, rel));
    }
    up_dmap_release(&m);
}

/* ---- deleting the sources ---- */

static void queue_delete(struct ckpt_upload *u, struct group *g,
                         struct obj *o)
{
    if (u->cfg.dry_run) {
        struct ckpt_upload_event ev = { CKPT_UP_WOULD_DELETE,
                                        o ? o->sdisp : g->sdisp, NULL,
                                        o ? o->size : g->ssb.size, "" };
        u->t.deleted++;
        if (u->cfg.on_event)
            u->cfg.on_event(u->cfg.ud, &ev);
        return;
    }
    struct unit *un = up_unit_new(u, U_DELETE, o);
    un->ag = g;
    up_ctl_push(u, un);
}

static int deletable(const struct group *g)
{
    return !(g->flags & CKPT_UPLOAD_KEEP_SRC);
}

static void drop_event(struct ckpt_upload *u, enum ckpt_upload_action a,
                       const char *src, uint64_t bytes, const char *detail)
{
    struct ckpt_upload_event ev = { a, src, NULL, bytes, detail };
    if (a == CKPT_UP_FAILED)
        u->t.failed++;
    else if (a == CKPT_UP_KEPT)
        u->t.kept++;
    else
        u->t.deleted++;
    if (u->cfg.on_event)
        u->cfg.on_event(u->cfg.ud, &ev);
}

/* The files picked DROP go once every copied file of the group was
 * verified and deleted: what the caller asked to leave out of DEST. One
 * request each, the lease (may_delete) checked before each. */
static void delete_drops(struct ckpt_upload *u, struct group *g)
{
    for (size_t k = 0; k < g->ndrops; k++) {
        struct ckpt_err err = CKPT_ERR_INIT;
        char *disp = ckpt_storage_display(g->sst, g->drops[k]);
        int keep = u->cfg.may_drop &&
                   u->cfg.may_drop(u->cfg.ud, g->drops[k], g->drop_rels[k],
                                   &err) != 0;
        if (u->cfg.dry_run && !keep) {
            drop_event(u, CKPT_UP_WOULD_DELETE, disp, g->drop_sizes[k], "");
        } else if (keep) {
            /* Changed since it was judged: its bytes may exist nowhere
             * else. Kept, by design (not a failure); -n says so too. */
            g->nkept++;
            drop_event(u, CKPT_UP_KEPT, disp, g->drop_sizes[k], err.msg);
        } else if ((u->cfg.may_delete &&
                    u->cfg.may_delete(u->cfg.ud, &err) != 0) ||
                   ckpt_storage_delete_below(g->sst, g->skey, g->drops[k],
                                             &err) != 0) {
            ckpt_err_prefix(&err, "not deleted");
            g->ndel_failed++;
            drop_event(u, CKPT_UP_FAILED, disp, g->drop_sizes[k], err.msg);
        } else {
            drop_event(u, CKPT_UP_DELETED, disp, g->drop_sizes[k], "");
        }
        free(disp);
    }
}

static void delete_sources(struct ckpt_upload *u)
{
    for (size_t i = 0; i < u->ngroups; i++) {
        struct group *g = u->groups[i];
        if (!deletable(g))
            continue;
        if (g->kind == G_ARCHIVE && g->nleft) {
            /* Never delete a file that was not copied and verified. */
            char *d = ckpt_xasprintf("not deleted: %zu file(s) in it were "
                                     "left out (--include/--exclude)",
                                     g->nleft);
            up_emit(u, CKPT_UP_WARNING, NULL, g->sdisp, d);
            free(d);
            u->t.kept_archives++;
            continue;
        }
        if (g->kind == G_ARCHIVE && g->nuncopied) {
            char *d = ckpt_xasprintf("not deleted: %zu member(s) in it are "
                                     "symbolic links or special files, "
                                     "which are not copied", g->nuncopied);
            up_emit(u, CKPT_UP_WARNING, NULL, g->sdisp, d);
            free(d);
            u->t.kept_archives++;
            continue;
        }
        if (g->kind == G_ARCHIVE) {
            queue_delete(u, g, NULL);
            continue;
        }
        for (size_t k = 0; k < u->nobjs; k++) {
            struct obj *o = u->objs[k];
            if (o->g != g)
                continue;
            if (!o->outside) {
                queue_delete(u, g, o);
                continue;
            }
            /* Never delete outside SRC's real path. */
            g->nkept++;
            up_emit(u, CKPT_UP_KEPT, o, NULL, "copied from outside SRC "
                    "(reached through a symbolic link); kept");
        }
    }
    up_engine_loop(u);
    for (size_t i = 0; i < u->ngroups; i++) {
        struct group *g = u->groups[i];
        if (deletable(g) && g->kind != G_ARCHIVE && !g->ndel_failed)
            delete_drops(u, g);
    }
    for (size_t i = 0; i < u->ngroups && !u->cfg.dry_run; i++) {
        struct group *g = u->groups[i];
        struct ckpt_err err = CKPT_ERR_INIT;
        /* The run's own `latest` links go with it, once its files did. */
        int may = !u->cfg.may_delete ||
                  u->cfg.may_delete(u->cfg.ud, &err) == 0;
        if (!may)
            up_emit(u, CKPT_UP_WARNING, NULL, g->sdisp, err.msg);
        /* ...unless files stay (left out): a link may name them. */
        for (size_t k = 0; may && deletable(g) && !g->ndel_failed &&
                           !g->nleft && !g->nkept && k < g->nlinks; k++)
            if (ckpt_storage_delete_below(g->sst, g->skey, g->links[k],
                                          &err) != 0)
                up_emit(u, CKPT_UP_WARNING, NULL, g->links[k], err.msg);
        if (deletable(g) && g->kind == G_TREE &&
            (u->cfg.keep_src_root
             ? ckpt_storage_prune_below(g->sst, g->skey, &err)
             : ckpt_storage_prune_dirs(g->sst, g->skey, &err)) != 0)
            up_emit(u, CKPT_UP_WARNING, NULL, g->sdisp, err.msg);
        /* The source is gone: its journal can never vouch again. */
        if (deletable(g) && !g->ndel_failed && !g->nkept)
            up_journal_discard(g->jr);
    }
}

static int any_failure(const struct ckpt_upload *u)
{
    if (u->t.failed)
        return 1;
    for (size_t i = 0; i < u->ngroups; i++)
        if (u->groups[i]->plan_failed || u->groups[i]->nfailed)
            return 1;
    return 0;
}

/* ---- the run ---- */

/* The write policy (storage.h) for every planned file, now that the run
 * knows how many files it has: with enough files in flight, files below
 * CKPT_SINGLE_PUT_MAX go as one PUT each, streamed from a local source.
 * Archive members were decided as they were read (no file to stream
 * from). */
static void apply_policy(struct ckpt_upload *u)
{
    size_t files = 0;
    for (size_t i = 0; i < u->nobjs; i++)
        files += !u->objs[i]->from_archive;
    unsigned inflight = files < (size_t)u->cfg.jobs ? (unsigned)files
                                                    : (unsigned)u->cfg.jobs;
    for (size_t i = 0; i < u->nobjs; i++) {
        struct obj *o = u->objs[i];
        if (o->from_archive)
            continue;
        struct ckpt_write_in in = { o->size, inflight, u->cfg.part_size,
                                    u->budget, o->has_ver, 0 };
        struct ckpt_write_plan p;
        ckpt_storage_write_plan(o->g->dst, &in, &p);
        o->big = p.multipart;
        o->part_size = p.part_size;
        /* Small files are read into one buffer as before: fewer reads. */
        o->stream = !p.multipart && o->has_ver && o->size > STREAM_CHUNK;
    }
}

static void start_groups(struct ckpt_upload *u)
{
    apply_policy(u);
    /* Two SRCs with one DEST path: the first planned goes first, the
     * others wait for it (up_route_deferred). */
    for (size_t i = 0; i < u->nobjs; i++)
        if (!up_claim_path(u, u->objs[i], i))
            up_obj_route(u, u->objs[i]);
    for (size_t i = 0; i < u->ngroups; i++) {
        struct group *g = u->groups[i];
        if (g->kind == G_ARCHIVE)
            continue;  /* its objects appear while it is read */
        size_t n;
        struct jr_pending **p = up_journal_unclaimed(g->jr, &n);
        for (size_t k = 0; k < n; k++) {
            p[k]->claimed = 1;
            up_queue_abort(u, g, g->dst, p[k]->dkey, p[k]->upload_id);
        }
    }
}

int ckpt_upload_run(struct ckpt_upload *u, struct ckpt_upload_totals *out)
{
    /* Journals of copies nobody reran for a month would otherwise pile
     * up; this run's own are locked, so they stay. */
    if (u->cfg.state_dir && !u->cfg.dry_run)
        up_journal_prune(u->cfg.state_dir, JOURNAL_MAX_AGE);
    up_engine_start(u);
    start_groups(u);
    up_engine_loop(u);
    if (!u->cfg.dry_run) {
        for (size_t i = 0; i < u->ngroups; i++)
            verify_group(u, u->groups[i]);
        for (size_t i = 0; i < u->ngroups; i++)
            if (!ckpt_storage_is_local(u->groups[i]->dst) &&
                !u->groups[i]->plan_failed)
                find_foreign(u, u->groups[i]);
        up_engine_loop(u);
    }
    int failed = any_failure(u);
    if (u->cfg.delete_source && !failed)
        delete_sources(u);
    else if (u->cfg.delete_source)
        up_emit(u, CKPT_UP_WARNING, NULL, "SRC", "not deleting any source: "
                "some files did not arrive");
    up_engine_stop(u);
    for (size_t i = 0; i < u->ngroups; i++)
        if (up_journal_failed(u->groups[i]->jr))
            up_emit(u, CKPT_UP_WARNING, NULL, u->groups[i]->sdisp, "could not "
                    "write the journal; a rerun may send more than needed");
    u->t.seconds = ckpt_now() - u->start;
    if (out)
        *out = u->t;
    return any_failure(u) ? -1 : 0;
}

void ckpt_upload_planned(const struct ckpt_upload *u, uint64_t *files,
                         uint64_t *bytes)
{
    *files = u->t.files;
    *bytes = u->t.bytes_total;
    for (size_t i = 0; i < u->ngroups; i++)
        if (u->groups[i]->kind == G_ARCHIVE)
            *bytes += u->groups[i]->ssb.size;
}

void ckpt_upload_fail_src(struct ckpt_upload *u, const char *src,
                          const char *dest, const char *msg)
{
    struct ckpt_upload_event ev = { CKPT_UP_FAILED, src, dest, 0, msg };
    u->t.failed++;
    if (u->cfg.on_event)
        u->cfg.on_event(u->cfg.ud, &ev);
}
