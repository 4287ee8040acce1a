/*
 * unshard.c - ckpt_unshard_dcp: open, plan, lay out, copy, finish,
 * verify, commit. The phases are in job.h; where the outputs go
 * (a local directory made atomically, or object storage) is outputs/out.c's.
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
#include "merge/engine/engine.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/trainer.h"

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
    if (j->o->format == CKPT_FORMAT_HF)     /* not part of an HF model */
        return 0;
    char *own = ckpt_path_join(j->src.top, "config.yaml");
    uint64_t size;
    struct ckpt_err e2;
    const char *from = uns_src_stat(j, own, &size, &e2) == 0 ? own : NULL;
    struct stat sb;
    int local = !j->src.st;
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
        j->dst.files = ckpt_xreallocarray(j->dst.files, j->dst.nfiles + 1,
                                      sizeof(*j->dst.files));
        struct ufile *f = &j->dst.files[j->dst.nfiles++];
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
    res->files = ckpt_xcalloc(j->dst.nfiles ? j->dst.nfiles : 1,
                              sizeof(*res->files));
    res->nfiles = j->dst.nfiles;
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        res->files[i].name = ckpt_xstrdup(j->dst.files[i].name);
        res->files[i].size = j->dst.files[i].size;
        res->files[i].tensors = j->dst.files[i].ntensors;
    }
    res->tensors = j->plan.ntensors;
    res->objects = j->plan.objects;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        res->chunks += j->plan.tensors[i].e->nchunks;
        res->bytes += j->plan.tensors[i].nbytes;
        if (j->plan.tensors[i].file >= 0)
            res->pieces += j->plan.tensors[i].nbands;
    }
    for (size_t i = 0; i < j->plan.ncopies; i++)
        res->pieces += (j->plan.copies[i].nbytes + j->plan.band - 1) / j->plan.band;
    res->layout = j->plan.olmo ? "olmo" : "single";
    res->metadata = j->src.metaname;
    if (j->o->format == CKPT_FORMAT_HF)
        uns_hf_result(j, res);
}

static void job_release(struct ujob *j)
{
    ckpt_pool_free(j->pool);
    if (j->dst.out) {
        j->dst.out->ops->release(j);
        free(j->dst.out);
    }
    uns_bufpool_release(&j->bufs);
    for (size_t i = 0; i < j->plan.ntensors; i++)
        free(j->plan.tensors[i].crcs);
    free(j->plan.tensors);
    for (size_t i = 0; i < j->plan.ncopies; i++)
        free(j->plan.copies[i].crcs);
    free(j->plan.copies);
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        struct ufile *f = &j->dst.files[i];
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
    free(j->dst.files);
    uns_hf_part_free(j->dst.part);
    free(j->plan.values);
    free(j->plan.paths);
    uns_src_close_all(j);
    uns_st_items_free(j);
    if (j->plan.fmtfree)
        j->plan.fmtfree(j->plan.fmtplan);
    pthread_mutex_destroy(&j->dmu);
    pthread_cond_destroy(&j->dcv);
    ckpt_dcp_meta_free(j->plan.meta);
    ckpt_arena_free(j->plan.arena);
    free(j->src.dir);
    free(j->src.top);
    if (!j->src.st_borrowed)
        ckpt_storage_close(j->src.st);
    pthread_mutex_destroy(&j->mu);
}

static int job_init(struct ujob *j, const struct ckpt_unshard_opts *o,
                    struct ckpt_err *err)
{
    memset(j, 0, sizeof(*j));
    j->o = o;
    j->src.allow_replicas = o->allow_replicas;
    pthread_mutex_init(&j->mu, NULL);
    uns_dec_init(j);
    int jobs = o->jobs > 0 ? o->jobs : ckpt_ncpus();
    /* Three band-sized buffers per worker within the buffer budget: peak
     * memory stays flat whatever the checkpoint size. */
    j->plan.band = BUFFER_BUDGET / (3 * (uint64_t)jobs);
    j->plan.band = j->plan.band > BAND_MAX ? BAND_MAX : j->plan.band;
    j->plan.band = j->plan.band < BAND_MIN ? BAND_MIN : j->plan.band;
    j->plan.arena = ckpt_arena_new(ARENA_LIMIT);
    j->pool = ckpt_pool_new(jobs, 2 * (size_t)jobs);
    if (!j->plan.arena || !j->pool || uns_bufpool_init(&j->bufs, j->plan.band) != 0)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    return 0;
}

/* Where the step at src is read from: a key of o->storage (a remote run,
 * the members of a plain tar), a remote URL (opened here, --insecure and
 * --retries applied) or a local directory. Remote steps are read in place
 * through j->src.st, so config.yaml beside the step is found through it too;
 * j->src.top is where the step is in it. */
static int open_step(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct ckpt_loc loc;
    if (j->o->storage) {
        j->src.st = j->o->storage;
        j->src.st_borrowed = 1;
        j->src.top = ckpt_xstrdup(src);
        return 0;
    }
    if (ckpt_loc_parse(&loc, src, err) != 0)
        return -1;
    int rc = 0;
    if (loc.scheme != CKPT_SCHEME_LOCAL) {
        struct ckpt_storage_cfg cfg = uns_storage_cfg(j->o);
        rc = ckpt_storage_open(&j->src.st, &loc, &cfg, err);
        j->src.st_borrowed = 0;
    }
    j->src.top = ckpt_xstrdup(loc.scheme != CKPT_SCHEME_LOCAL ? loc.key : src);
    ckpt_loc_release(&loc);
    return rc;
}

/* Plan everything; nothing is written. */
static int plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    enum ckpt_format f = (enum ckpt_format)j->o->source_format;
    if (j->o->weights == CKPT_WEIGHTS_MODULE && f != CKPT_FMT_DEEPSPEED)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': --weights module "
                            "reads a DeepSpeed step's model-states file; "
                            "this is %s", src, ckpt_format_name(f));
    /* The planner of the trainer the run module named; one that reads
     * the step where it is is given it opened (open_step). DCP (and
     * whatever the run module could not name: its errors say why) opens
     * its source itself (sources/source.c). */
    const struct trainer *T = trainer_of_format(f);
    if (!T || !T->plan)
        return uns_dcp_plan(j, src, err);
    if (!T->plan_opens && open_step(j, src, err) != 0)
        return -1;
    return T->plan(j, T->plan_opens ? src : j->src.top, err);
}

/* Every output created, written, its headers finished and closed
 * (local: fsync; remote: uploads completed), and with --verify read back
 * from where it was written. */
static int write_all_outputs(struct ujob *j, struct ckpt_err *err)
{
    const struct uns_out_ops *ops = j->dst.out->ops;
    if ((j->dst.out->remote && uns_engine_remote_plan(j, err) != 0) ||
        ops->begin(j, err) != 0)
        return -1;
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        if (ops->create(j, &j->dst.files[i], err) != 0)
            return -1;
        if (j->dst.out->remote && !j->dst.files[i].raw &&
            !j->dst.files[i].copy_from &&
            uns_layout_early(j, &j->dst.files[i], err) != 0)
            return -1;
    }
    if (uns_engine_run(j, 0, err) != 0 || uns_layout_finish(j, err) != 0)
        return -1;
    /* A local output is read back before it is closed (the temporary
     * file), a remote one once it is complete (the object). */
    if (j->dst.out->remote && ops->close(j, err) != 0)
        return -1;
    if (j->o->verify && (uns_engine_run(j, 1, err) != 0 ||
                         uns_verify_outputs(j, err) != 0))
        return -1;
    return j->dst.out->remote ? 0 : ops->close(j, err);
}

int ckpt_rank_values_parse(const char *name, int *out)
{
    static const char *const names[] = { "error", "rank0", "per-rank" };
    *out = CKPT_RANK_VALUES_ERROR;
    if (!name)
        return 0;
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i])) {
            *out = i;
            return 0;
        }
    return -1;
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
    j.dst.tmpdir = (char *)(tmp ? tmp : "/tmp");
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
        rc = j.dst.out->ops->commit(&j, err);
    if (rc == 0 && !opts->dry_run)
        for (size_t i = 0; i < j.dst.nfiles; i++) {
            res->files[i].size = j.dst.files[i].size;
            memcpy(res->files[i].checksum, j.dst.files[i].sum,
                   sizeof(res->files[i].checksum));
            memcpy(res->files[i].etag, j.dst.files[i].etag,
                   sizeof(res->files[i].etag));
        }
    if (rc == 0 && !opts->dry_run)
        res->buffers_peak = uns_outobj_peak(&j);
    if (rc == 0 && !opts->dry_run && j.dst.part)
        rc = uns_hf_part_finish(&j, dest, &res->part_done, err);
    if (rc != 0 && j.dst.out)
        j.dst.out->ops->abort(&j);
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
