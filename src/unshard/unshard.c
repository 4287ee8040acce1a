/*
 * unshard.c - ckpt_unshard_dcp: open, plan, lay out, copy, finish,
 * verify, commit. The phases are in unshard_int.h; where the outputs go
 * (a local directory made atomically, or object storage) is out.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/run.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "unshard_int.h"

/* Bands small enough that a task's buffers stay in L2: each byte then
 * crosses memory twice (page cache in, page cache out) as with cp, not
 * four times. Measured: 4 MiB bands cost 2x the system time of 1 MiB. */
#define BAND_MAX (1u << 20)
#define BAND_MIN (256u << 10)
#define BUFFER_BUDGET (128u << 20)   /* all workers' buffers together */
#define ARENA_LIMIT (2048ULL << 20)

/* config.yaml of the checkpoint, else of the run, travels with it. */
static int add_config(struct ujob *j, struct ckpt_err *err)
{
    char *own = ckpt_path_join(j->top, "config.yaml");
    uint64_t size;
    struct ckpt_err e2;
    const char *from = uns_src_stat(j, own, &size, &e2) == 0 ? own : NULL;
    struct stat sb;
    int local = !j->st;
    /* The run's config.yaml (run mode): read where the step is read when
     * that is o->storage (a remote run, a plain tar), else a local file,
     * even when the checkpoint is remote (a compressed archive's, kept
     * in scratch). */
    if (!from && j->o->config_yaml && j->o->storage &&
        uns_src_stat(j, j->o->config_yaml, &size, &e2) == 0) {
        from = j->o->config_yaml;
    } else if (!from && j->o->config_yaml && !j->o->storage &&
               stat(j->o->config_yaml, &sb) == 0 && S_ISREG(sb.st_mode)) {
        from = j->o->config_yaml;
        size = (uint64_t)sb.st_size;
        local = 1;
    }
    if (from) {
        j->files = ckpt_xreallocarray(j->files, j->nfiles + 1,
                                      sizeof(*j->files));
        struct ufile *f = &j->files[j->nfiles++];
        memset(f, 0, sizeof(*f));
        f->name = ckpt_xstrdup("config.yaml");
        f->prefix = ckpt_xstrdup("");
        f->fd = -1;
        f->size = size;
        f->copy_from = ckpt_xstrdup(from);
        f->copy_local = local;
        ckpt_buf_init(&f->head);
    }
    free(own);
    (void)err;
    return 0;
}

static void fill_result(struct ujob *j, struct ckpt_unshard_result *res)
{
    memset(res, 0, sizeof(*res));
    res->files = ckpt_xcalloc(j->nfiles ? j->nfiles : 1,
                              sizeof(*res->files));
    res->nfiles = j->nfiles;
    for (size_t i = 0; i < j->nfiles; i++) {
        res->files[i].name = ckpt_xstrdup(j->files[i].name);
        res->files[i].size = j->files[i].size;
        res->files[i].tensors = j->files[i].ntensors;
    }
    res->tensors = j->ntensors;
    res->objects = j->objects;
    for (size_t i = 0; i < j->ntensors; i++) {
        res->chunks += j->tensors[i].e->nchunks;
        res->bytes += j->tensors[i].nbytes;
        if (j->tensors[i].file >= 0)
            res->pieces += j->tensors[i].nbands;
    }
    for (size_t i = 0; i < j->ncopies; i++)
        res->pieces += (j->copies[i].nbytes + j->band - 1) / j->band;
    res->layout = j->olmo ? "olmo" : "single";
    res->metadata = j->metaname;
}

static void job_release(struct ujob *j)
{
    ckpt_pool_free(j->pool);
    if (j->out) {
        j->out->ops->release(j);
        free(j->out);
    }
    uns_bufpool_release(&j->bufs);
    for (size_t i = 0; i < j->ntensors; i++)
        free(j->tensors[i].crcs);
    free(j->tensors);
    for (size_t i = 0; i < j->ncopies; i++)
        free(j->copies[i].crcs);
    free(j->copies);
    for (size_t i = 0; i < j->nfiles; i++) {
        struct ufile *f = &j->files[i];
        if (f->fd >= 0)
            close(f->fd);
        for (size_t r = 0; r < f->nrecs; r++)
            free(f->recnames[r]);
        free(f->recnames);
        free(f->recs);
        ckpt_buf_release(&f->head);
        free(f->name);
        free(f->prefix);
        free(f->tmp);
        free(f->copy_from);
    }
    free(j->files);
    free(j->values);
    free(j->paths);
    uns_src_close_all(j);
    if (j->fmtfree)
        j->fmtfree(j->fmtplan);
    pthread_mutex_destroy(&j->dmu);
    pthread_cond_destroy(&j->dcv);
    ckpt_dcp_meta_free(j->meta);
    ckpt_arena_free(j->arena);
    free(j->dir);
    free(j->top);
    if (!j->st_borrowed)
        ckpt_storage_close(j->st);
    pthread_mutex_destroy(&j->mu);
}

static int job_init(struct ujob *j, const struct ckpt_unshard_opts *o,
                    struct ckpt_err *err)
{
    memset(j, 0, sizeof(*j));
    j->o = o;
    j->allow_replicas = o->allow_replicas;
    pthread_mutex_init(&j->mu, NULL);
    uns_dec_init(j);
    int jobs = o->jobs > 0 ? o->jobs : ckpt_ncpus();
    /* Three band-sized buffers per worker within the buffer budget: peak
     * memory stays flat whatever the checkpoint size. */
    j->band = BUFFER_BUDGET / (3 * (uint64_t)jobs);
    j->band = j->band > BAND_MAX ? BAND_MAX : j->band;
    j->band = j->band < BAND_MIN ? BAND_MIN : j->band;
    j->arena = ckpt_arena_new(ARENA_LIMIT);
    j->pool = ckpt_pool_new(jobs, 2 * (size_t)jobs);
    if (!j->arena || !j->pool || uns_bufpool_init(&j->bufs, j->band) != 0)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    return 0;
}

int uns_olmo_job_init(struct ujob *j, const char *src, const char *metaname,
                      void *plan, ujob_locate_fn locate, struct ckpt_err *err)
{
    j->dir = ckpt_xstrdup(src);
    j->olmo_step = 1;
    j->metaname = metaname;
    j->meta = ckpt_dcp_meta_new();
    j->fmtplan = plan;
    j->locate = locate;
    j->olmo = j->o->layout != CKPT_LAYOUT_SINGLE;
    return j->meta ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

/* Where the step at src is read from: a key of o->storage (a remote run,
 * the members of a plain tar), a remote URL (opened here, --insecure and
 * --retries applied) or a local directory. Remote steps are read in place
 * through j->st, so config.yaml beside the step is found through it too;
 * j->top is where the step is in it. */
static int open_step(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct ckpt_loc loc;
    if (j->o->storage) {
        j->st = j->o->storage;
        j->st_borrowed = 1;
        j->top = ckpt_xstrdup(src);
        return 0;
    }
    if (ckpt_loc_parse(&loc, src, err) != 0)
        return -1;
    int rc = 0;
    if (loc.scheme != CKPT_SCHEME_LOCAL) {
        struct ckpt_storage_cfg cfg = uns_storage_cfg(j->o);
        rc = ckpt_storage_open(&j->st, &loc, &cfg, err);
        j->st_borrowed = 0;
    }
    j->top = ckpt_xstrdup(loc.scheme != CKPT_SCHEME_LOCAL ? loc.key : src);
    ckpt_loc_release(&loc);
    return rc;
}

/* DCP (and whatever the run module could not name: its errors say why),
 * read through uns_src_open. */
static int plan_dcp(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct ckpt_pv *root;
    if (uns_src_open(j, src, err) != 0)
        return -1;
    j->olmo = j->o->layout == CKPT_LAYOUT_OLMO ||
              (j->o->layout == CKPT_LAYOUT_AUTO && j->olmo_step);
    if (uns_plan_tensors(j, err) != 0 || uns_tree_build(j, &root, err) != 0)
        return -1;
    return uns_layout_files(j, root, err);
}

/* The planner of each format the run module names; each reads the step
 * where it is (open_step). DCP opens its source itself (source.c). */
static const struct {
    enum ckpt_format format;
    int (*plan)(struct ujob *j, const char *src, struct ckpt_err *err);
} planners[] = {
    { CKPT_FMT_OLMO_LOCAL, uns_olmolocal_plan },
    { CKPT_FMT_OLMO_CORE, uns_olmocore_plan },
    { CKPT_FMT_OLMO_LEGACY, uns_legacy_plan },
    { CKPT_FMT_ZARR, uns_zarr_plan },
    { CKPT_FMT_ORBAX, uns_orbax_plan },
};

/* Plan everything; nothing is written. */
static int plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    enum ckpt_format f = (enum ckpt_format)j->o->source_format;
    for (size_t i = 0; i < sizeof(planners) / sizeof(planners[0]); i++) {
        if (planners[i].format != f)
            continue;
        if (open_step(j, src, err) != 0)
            return -1;
        return planners[i].plan(j, j->top, err);
    }
    return plan_dcp(j, src, err);
}

/* Every output created, written, its headers finished and closed
 * (local: fsync; remote: uploads completed), and with --verify read back
 * from where it was written. */
static int write_all_outputs(struct ujob *j, struct ckpt_err *err)
{
    const struct uns_out_ops *ops = j->out->ops;
    if ((j->out->remote && uns_engine_remote_ok(j, err) != 0) ||
        ops->begin(j, err) != 0)
        return -1;
    for (size_t i = 0; i < j->nfiles; i++) {
        if (ops->create(j, &j->files[i], err) != 0)
            return -1;
        if (j->out->remote && !j->files[i].raw &&
            !j->files[i].copy_from &&
            uns_layout_early(j, &j->files[i], err) != 0)
            return -1;
    }
    if (uns_engine_run(j, 0, err) != 0 || uns_layout_finish(j, err) != 0)
        return -1;
    /* A local output is read back before it is closed (the temporary
     * file), a remote one once it is complete (the object). */
    if (j->out->remote && ops->close(j, err) != 0)
        return -1;
    if (j->o->verify && (uns_engine_run(j, 1, err) != 0 ||
                         uns_verify_outputs(j, err) != 0))
        return -1;
    return j->out->remote ? 0 : ops->close(j, err);
}

int ckpt_unshard_dcp(const char *src, const char *dest,
                     const struct ckpt_unshard_opts *opts,
                     struct ckpt_unshard_result *res, struct ckpt_err *err)
{
    struct ujob j;
    memset(res, 0, sizeof(*res));
    int rc = job_init(&j, opts, err);
    /* zstd items of a dry run (and of a remote DEST) decompress to the
     * scratch dir; a local DEST sets its temporary directory. */
    const char *tmp = opts->tmp_dir ? opts->tmp_dir : getenv("TMPDIR");
    j.tmpdir = (char *)(tmp ? tmp : "/tmp");
    if (rc == 0 && !opts->dry_run)
        rc = uns_out_open(&j, dest, err);
    if (rc == 0)
        rc = plan(&j, src, err);
    if (rc == 0)
        rc = add_config(&j, err);
    if (rc == 0)
        fill_result(&j, res);
    if (rc == 0 && opts->planned)
        opts->planned(opts->progress_ud, res);
    if (rc == 0 && !opts->dry_run)
        rc = write_all_outputs(&j, err);
    if (rc == 0 && !opts->dry_run)
        rc = j.out->ops->commit(&j, err);
    if (rc == 0 && !opts->dry_run)
        for (size_t i = 0; i < j.nfiles; i++)
            res->files[i].size = j.files[i].size;
    if (rc == 0 && !opts->dry_run)
        res->buffers_peak = uns_outobj_peak(&j);
    if (rc != 0 && j.out)
        j.out->ops->abort(&j);
    if (rc != 0 && res->files)
        ckpt_unshard_result_release(res);
    job_release(&j);
    return rc;
}

void ckpt_unshard_result_release(struct ckpt_unshard_result *res)
{
    if (!res)
        return;
    for (size_t i = 0; i < res->nfiles; i++)
        free(res->files[i].name);
    free(res->files);
    res->files = NULL;
    res->nfiles = 0;
}
