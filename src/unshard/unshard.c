/*
 * unshard.c - ckpt_unshard_dcp: open, plan, lay out, copy, finish,
 * verify, rename. The phases are in unshard_int.h.
 *
 * Atomicity: the whole output is written into a temporary directory
 * beside DEST (a short ".ckpt-HOST-PID-SEQ.tmp" name, tempname.h). When
 * DEST does not exist it is renamed onto DEST, one atomic step. When DEST
 * exists, its other entries are hard-linked into the temporary directory
 * (nothing is copied), and the two directories are exchanged
 * (renameat2 RENAME_EXCHANGE; where that is unsupported, DEST is renamed
 * aside and the new one into place); the old one is then removed. At every
 * instant DEST is the complete old or the complete new output, never a
 * mix; a failure before the exchange leaves DEST as it was.
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

struct dest {
    char *path;      /* DEST, symbolic links resolved; owned */
    char *tmpdir;    /* owned */
    int exists;      /* DEST existed: exchange, else rename */
};

static int prepare_dest(const char *dest, struct dest *d,
                        struct ckpt_err *err)
{
    struct stat sb;
    char real[PATH_MAX];
    d->exists = stat(dest, &sb) == 0;
    if (d->exists && !S_ISDIR(sb.st_mode))
        return ckpt_err_set(err, CKPT_EEXIST, "'%s' exists and is not "
                            "a directory", dest);
    /* A link to a directory (or ".") is replaced where it points. */
    if (d->exists && !realpath(dest, real))
        return ckpt_err_sys(err, "resolve '%s'", dest);
    d->path = ckpt_xstrdup(d->exists ? real : dest);
    size_t n = strlen(d->path);
    while (n > 1 && d->path[n - 1] == '/')
        d->path[--n] = '\0';
    char *parent = ckpt_path_dirname(d->path);
    int rc = ckpt_mkdirs(parent, err);
    if (rc == 0) {
        ckpt_temp_sweep(parent);
        d->tmpdir = ckpt_temp_path(parent);
    }
    free(parent);
    if (rc != 0)
        return -1;
    if (mkdir(d->tmpdir, 0777) != 0)
        return ckpt_err_sys(err, "create directory '%s'", d->tmpdir);
    return 0;
}

/* The temporary directory holds only our outputs and hard links. */
static void remove_tmp(struct dest *d)
{
    if (d->tmpdir)
        ckpt_rm_tree(d->tmpdir);
}

static int is_output(const struct ujob *j, const char *name)
{
    for (size_t i = 0; i < j->nfiles; i++)
        if (!strcmp(j->files[i].name, name))
            return 1;
    return 0;
}

/* An output may replace a file of DEST, not a directory. */
static int check_names(const struct ujob *j, const struct dest *d,
                       struct ckpt_err *err)
{
    for (size_t i = 0; d->exists && i < j->nfiles; i++) {
        char *p = ckpt_path_join(d->path, j->files[i].name);
        struct stat sb;
        int dir = lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (dir)
            ckpt_err_set(err, CKPT_EEXIST, "'%s' is a directory: not "
                         "replaced by an output file", p);
        free(p);
        if (dir)
            return -1;
    }
    return 0;
}

/* Hard-link the entries of directory `from` (open) into `to` (open),
 * except outputs of j (NULL: none, below the top): directories are made
 * anew, everything else is linked, symbolic links too. */
static int link_tree(int from, int to, const char *name, const struct ujob *j,
                     struct ckpt_err *err)
{
    int dfd = dup(from);
    DIR *dh = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dh) {
        if (dfd >= 0)
            close(dfd);
        return ckpt_err_sys(err, "read directory '%s'", name);
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(dh)) != NULL) {
        const char *n = de->d_name;
        struct stat sb;
        if (!strcmp(n, ".") || !strcmp(n, "..") || (j && is_output(j, n)))
            continue;
        char *path = ckpt_path_join(name, n);
        if (fstatat(from, n, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            rc = ckpt_err_sys(err, "stat '%s'", path);
        else if (!S_ISDIR(sb.st_mode)) {
            if (linkat(from, n, to, n, 0) != 0)
                rc = ckpt_err_sys(err, "link '%s' into the new output", path);
        } else if (mkdirat(to, n, sb.st_mode & 07777) != 0) {
            rc = ckpt_err_sys(err, "create directory '%s' in the new "
                              "output", path);
        } else {
            int fa = openat(from, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                            O_CLOEXEC);
            int fb = openat(to, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                            O_CLOEXEC);
            rc = fa < 0 || fb < 0 ? ckpt_err_sys(err, "open '%s'", path)
                                  : link_tree(fa, fb, path, NULL, err);
            if (fa >= 0)
                close(fa);
            if (fb >= 0)
                close(fb);
        }
        free(path);
    }
    closedir(dh);
    return rc;
}

/* DEST's entries that are not outputs, linked into the new directory. */
static int carry_over(const struct ujob *j, const struct dest *d,
                      struct ckpt_err *err)
{
    int from = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int to = open(d->tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = from < 0 ? ckpt_err_sys(err, "open '%s'", d->path)
           : to < 0 ? ckpt_err_sys(err, "open '%s'", d->tmpdir)
           : link_tree(from, to, d->path, j, err);
    if (from >= 0)
        close(from);
    if (to >= 0)
        close(to);
    return rc;
}

/* Remove the entries of the old directory (open) that the exchange
 * replaced (outputs of j) or that the new one (open) holds as the same
 * inode (our links). Anything else was written into DEST meanwhile and
 * stays: returns 1 if something stayed. */
static int drop_old(int old, int cur, const struct ujob *j)
{
    int dfd = dup(old), left = 0;
    DIR *dh = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dh) {
        if (dfd >= 0)
            close(dfd);
        return 1;
    }
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        const char *n = de->d_name;
        struct stat a, b;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (fstatat(old, n, &a, AT_SYMLINK_NOFOLLOW) != 0) {
            left = 1;
        } else if (S_ISDIR(a.st_mode)) {
            int fa = openat(old, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                            O_CLOEXEC);
            int fb = openat(cur, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                            O_CLOEXEC);
            left |= fa < 0 || fb < 0 || drop_old(fa, fb, NULL);
            if (fa >= 0)
                close(fa);
            if (fb >= 0)
                close(fb);
            left |= unlinkat(old, n, AT_REMOVEDIR) != 0;
        } else if ((j && is_output(j, n)) ||
                   (fstatat(cur, n, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
                    a.st_dev == b.st_dev && a.st_ino == b.st_ino)) {
            left |= unlinkat(old, n, 0) != 0;
        } else {
            left = 1;
        }
    }
    closedir(dh);
    return left;
}

/* "X.tmp" -> "X.old": a name sweeps never remove. */
static char *aside_name(const char *tmp)
{
    size_t n = strlen(tmp);
    return ckpt_xasprintf("%.*s.old", (int)(n > 4 ? n - 4 : n), tmp);
}

/* Exchange the new directory with DEST; *old receives the path that now
 * holds the old DEST. */
static int swap_in(struct dest *d, char **old, struct ckpt_err *err)
{
    if (renameat2(AT_FDCWD, d->tmpdir, AT_FDCWD, d->path,
                  RENAME_EXCHANGE) == 0) {
        *old = d->tmpdir;
        d->tmpdir = NULL;
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return ckpt_err_sys(err, "exchange '%s' with '%s'", d->tmpdir,
                            d->path);
    /* No exchange here: DEST goes aside (a name no sweep removes) for
     * the instant between the two renames. */
    char *aside = aside_name(d->tmpdir);
    if (rename(d->path, aside) != 0) {
        ckpt_err_sys(err, "rename '%s' to '%s'", d->path, aside);
        free(aside);
        return -1;
    }
    if (rename(d->tmpdir, d->path) != 0) {
        ckpt_err_sys(err, "rename '%s' to '%s'", d->tmpdir, d->path);
        rename(aside, d->path);
        free(aside);
        return -1;
    }
    *old = aside;
    free(d->tmpdir);
    d->tmpdir = NULL;
    return 0;
}

static int sync_dir(const char *path, struct ckpt_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 || fsync(fd) != 0 ? ckpt_err_sys(err, "sync '%s'", path)
                                      : 0;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* The old DEST, put aside by the exchange, goes; what it alone holds
 * stays, under a name no sweep removes, and fails the run. */
static int drop_aside(const struct ujob *j, const struct dest *d, char *old,
                      struct ckpt_err *err)
{
    int fo = open(old, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fc = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int left = fo < 0 || fc < 0 || drop_old(fo, fc, j);
    if (fo >= 0)
        close(fo);
    if (fc >= 0)
        close(fc);
    if (left && rmdir(old) != 0) {
        char *keep = ckpt_str_endswith(old, ".tmp") ? aside_name(old)
                                                    : ckpt_xstrdup(old);
        if (strcmp(keep, old) != 0)
            rename(old, keep);
        ckpt_err_set(err, CKPT_EIO, "'%s' changed while unsharding: the "
                     "outputs are in place, entries of the old directory "
                     "not in the new one are kept in '%s'", d->path, keep);
        free(keep);
        return -1;
    }
    rmdir(old);
    return 0;
}

static int commit(struct ujob *j, struct dest *d, struct ckpt_err *err)
{
    if (!d->exists) {
        if (j->o->sync && sync_dir(d->tmpdir, err) != 0)
            return -1;
        if (rename(d->tmpdir, d->path) != 0)
            return ckpt_err_sys(err, "rename '%s' to '%s'", d->tmpdir,
                                d->path);
        free(d->tmpdir);
        d->tmpdir = NULL;
    } else {
        char *old = NULL;
        if (check_names(j, d, err) != 0 || carry_over(j, d, err) != 0 ||
            (j->o->sync && sync_dir(d->tmpdir, err) != 0) ||
            swap_in(d, &old, err) != 0)
            return -1;
        int rc = drop_aside(j, d, old, err);
        free(old);
        if (rc != 0)
            return -1;
    }
    char *parent = ckpt_path_dirname(d->path);
    int rc = j->o->sync ? sync_dir(*parent ? parent : ".", err) : 0;
    free(parent);
    return rc;
}

static int create_outputs(struct ujob *j, struct dest *d,
                          struct ckpt_err *err)
{
    for (size_t i = 0; i < j->nfiles; i++) {
        struct ufile *f = &j->files[i];
        f->tmp = ckpt_path_join(d->tmpdir, f->name);
        f->fd = open(f->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (f->fd < 0)
            return ckpt_err_sys(err, "create '%s'", f->tmp);
        if (f->raw || j->o->format == CKPT_FORMAT_SAFETENSORS) {
            /* JSON files, and safetensors headers: known already. */
            if (ckpt_pwrite_all(f->fd, f->head.ptr, f->head.len, 0, f->tmp,
                               err) != 0)
                return -1;
            if (f->raw)
                continue;
        }
        if (f->copy_from) {
            if (uns_src_copy(j, f->copy_from, f->copy_local, f->fd, f->tmp,
                             &f->size, err) != 0)
                return -1;
            continue;
        }
        /* Reserve the blocks up front: fails early when the disk is full
         * and keeps the file unfragmented despite out-of-order writes. */
        int e = posix_fallocate(f->fd, 0, (off_t)f->size);
        if (e != 0 && ftruncate(f->fd, (off_t)f->size) != 0)
            return ckpt_err_sys(err, "allocate %llu bytes for '%s'",
                                (unsigned long long)f->size, f->tmp);
    }
    return 0;
}

static int sync_close(struct ujob *j, int sync, struct ckpt_err *err)
{
    int rc = 0;
    for (size_t i = 0; i < j->nfiles; i++) {
        struct ufile *f = &j->files[i];
        if (f->fd < 0)
            continue;
        if (rc == 0 && sync && fsync(f->fd) != 0)
            rc = ckpt_err_sys(err, "sync '%s'", f->tmp);
        if (close(f->fd) != 0 && rc == 0)
            rc = ckpt_err_sys(err, "close '%s'", f->tmp);
        f->fd = -1;
    }
    return rc;
}

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

static int write_all_outputs(struct ujob *j, struct dest *d,
                             struct ckpt_err *err)
{
    if (create_outputs(j, d, err) != 0 || uns_engine_run(j, 0, err) != 0 ||
        uns_layout_finish(j, err) != 0)
        return -1;
    if (j->o->verify && (uns_engine_run(j, 1, err) != 0 ||
                         uns_verify_outputs(j, err) != 0))
        return -1;
    return sync_close(j, j->o->sync, err);
}

int ckpt_unshard_dcp(const char *src, const char *dest,
                     const struct ckpt_unshard_opts *opts,
                     struct ckpt_unshard_result *res, struct ckpt_err *err)
{
    struct ujob j;
    struct dest d = { NULL, NULL, 0 };
    memset(res, 0, sizeof(*res));
    int rc = job_init(&j, opts, err);
    if (rc == 0 && !opts->dry_run)
        rc = prepare_dest(dest, &d, err);
    /* zstd items of a dry run decompress to the scratch dir. */
    const char *tmp = opts->tmp_dir ? opts->tmp_dir : getenv("TMPDIR");
    j.tmpdir = d.tmpdir ? d.tmpdir : (char *)(tmp ? tmp : "/tmp");
    if (rc == 0)
        rc = plan(&j, src, err);
    if (rc == 0)
        rc = add_config(&j, err);
    if (rc == 0)
        fill_result(&j, res);
    if (rc == 0 && opts->planned)
        opts->planned(opts->progress_ud, res);
    if (rc == 0 && !opts->dry_run)
        rc = check_names(&j, &d, err);
    if (rc == 0 && !opts->dry_run)
        rc = write_all_outputs(&j, &d, err);
    if (rc == 0 && !opts->dry_run)
        rc = commit(&j, &d, err);
    if (rc == 0 && !opts->dry_run)
        for (size_t i = 0; i < j.nfiles; i++)
            res->files[i].size = j.files[i].size;
    if (rc != 0)
        remove_tmp(&d);
    if (rc != 0 && res->files)
        ckpt_unshard_result_release(res);
    job_release(&j);
    free(d.tmpdir);
    free(d.path);
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
