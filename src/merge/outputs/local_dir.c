/*
 * outputs/local_dir.c - outputs into a local directory DEST.
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
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/tempname.h"
#include "ckpt/text.h"
#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"

/* What this file removes or replaces (gate.h): its temporary
 * directory, the old DEST's entries the new DEST holds too, DEST
 * replaced by the new one. */
#define OLD_DEST CKPT_GATE_OWN(CKPT_GATE_REPLACE, \
                       "the replaced DEST's entry, held by the new DEST")
#define NEW_DEST CKPT_GATE_OWN(CKPT_GATE_REPLACE, \
                       "the new unsharded output into place")
#define OWN_SCRATCH CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, \
                          "unshard's temporary output directory")

#define HASH_PIECE (4u << 20)

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
        (void)ckpt_gate_rm_tree(OWN_SCRATCH, d->tmpdir, NULL);
}

static int is_output(const struct ujob *j, const char *name)
{
    for (size_t i = 0; i < j->dst.nfiles; i++)
        if (!strcmp(j->dst.files[i].name, name))
            return 1;
    return 0;
}

/* An output may replace a file of DEST, not a directory. */
static int check_names(const struct ujob *j, const struct dest *d,
                       struct ckpt_err *err)
{
    for (size_t i = 0; d->exists && i < j->dst.nfiles; i++) {
        char *p = ckpt_path_join(d->path, j->dst.files[i].name);
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
            left |= ckpt_gate_unlinkat(OLD_DEST, old, n, AT_REMOVEDIR,
                                       NULL) != 0;
        } else if ((j && is_output(j, n)) ||
                   (fstatat(cur, n, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
                    a.st_dev == b.st_dev && a.st_ino == b.st_ino)) {
            left |= ckpt_gate_unlinkat(OLD_DEST, old, n, 0, NULL) != 0;
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
    struct ckpt_err e = CKPT_ERR_INIT;
    if (ckpt_gate_renameat2(NEW_DEST, d->tmpdir, d->path, RENAME_EXCHANGE,
                            &e) == 0) {
        *old = d->tmpdir;
        d->tmpdir = NULL;
        return 0;
    }
    if (e.sys_errno != EINVAL && e.sys_errno != ENOSYS &&
        e.sys_errno != ENOTSUP) {
        *err = e;
        return -1;
    }
    /* No exchange here: DEST goes aside (a name no sweep removes) for
     * the instant between the two renames. */
    char *aside = aside_name(d->tmpdir);
    if (ckpt_gate_rename(NEW_DEST, d->path, aside, err) != 0) {
        free(aside);
        return -1;
    }
    if (ckpt_gate_rename(NEW_DEST, d->tmpdir, d->path, err) != 0) {
        (void)ckpt_gate_rename(NEW_DEST, aside, d->path, NULL);
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
    if (left && ckpt_gate_rmdir(OLD_DEST, old, NULL) != 0) {
        char *keep = ckpt_str_endswith(old, ".tmp") ? aside_name(old)
                                                    : ckpt_xstrdup(old);
        if (strcmp(keep, old) != 0)
            (void)ckpt_gate_rename(NEW_DEST, old, keep, NULL);
        ckpt_err_set(err, CKPT_EIO, "'%s' changed while unsharding: the "
                     "outputs are in place, entries of the old directory "
                     "not in the new one are kept in '%s'", d->path, keep);
        free(keep);
        return -1;
    }
    (void)ckpt_gate_rmdir(OLD_DEST, old, NULL);
    return 0;
}

/* --part (hf/part.c): several processes write their shares into one DEST,
 * so each output is renamed into DEST on its own, atomically; the
 * directory itself is never exchanged. */
static int commit_files(struct ujob *j, struct dest *d, struct ckpt_err *err)
{
    if (ckpt_mkdirs(d->path, err) != 0 || check_names(j, d, err) != 0)
        return -1;
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        char *to = ckpt_path_join(d->path, j->dst.files[i].name);
        int rc = ckpt_gate_rename(NEW_DEST, j->dst.files[i].tmp, to, err);
        free(to);
        if (rc != 0)
            return -1;
    }
    if (j->o->sync && sync_dir(d->path, err) != 0)
        return -1;
    (void)ckpt_gate_rmdir(OWN_SCRATCH, d->tmpdir, NULL);
    free(d->tmpdir);
    d->tmpdir = NULL;
    return 0;
}

static int local_commit(struct ujob *j, struct ckpt_err *err)
{
    struct dest *d = j->dst.out->impl;
    if (j->o->nparts > 1)
        return commit_files(j, d, err);
    if (!d->exists) {
        if (j->o->sync && sync_dir(d->tmpdir, err) != 0)
            return -1;
        if (ckpt_gate_rename(NEW_DEST, d->tmpdir, d->path, err) != 0)
            return -1;
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

static int local_create(struct ujob *j, struct ufile *f,
                        struct ckpt_err *err)
{
    struct dest *d = j->dst.out->impl;
    f->tmp = ckpt_path_join(d->tmpdir, f->name);
    f->fd = open(f->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f->fd < 0)
        return ckpt_err_sys(err, "create '%s'", f->tmp);
    if (f->raw || j->o->format != CKPT_FORMAT_TORCH) {
        /* JSON files, and safetensors headers: known already. */
        if (ckpt_pwrite_all(f->fd, f->head.ptr, f->head.len, 0, f->tmp,
                            err) != 0)
            return -1;
        if (f->raw)
            return 0;
    }
    if (f->copy_from)
        return uns_src_copy(j, f->copy_from, f->copy_local, f->fd, f->tmp,
                            &f->size, err);
    /* Reserve the blocks up front: fails early when the disk is full
     * and keeps the file unfragmented despite out-of-order writes. */
    int e = posix_fallocate(f->fd, 0, (off_t)f->size);
    if (e != 0 && ftruncate(f->fd, (off_t)f->size) != 0)
        return ckpt_err_sys(err, "allocate %llu bytes for '%s'",
                            (unsigned long long)f->size, f->tmp);
    return 0;
}

/* MD5 of the file as written (opts.checksum): read back once. */
static int hash_output(struct ufile *f, struct ckpt_err *err)
{
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    char *buf = ckpt_xmalloc(HASH_PIECE);
    unsigned char d[16];
    unsigned dlen = 0;
    int rc = m && EVP_DigestInit_ex(m, EVP_md5(), NULL) ? 0
           : ckpt_err_set(err, CKPT_ENOMEM, "MD5 of '%s'", f->tmp);
    for (uint64_t off = 0; rc == 0 && off < f->size;) {
        ssize_t n = pread(f->fd, buf, HASH_PIECE, (off_t)off);
        if (n <= 0)
            rc = n < 0 ? ckpt_err_sys(err, "read '%s'", f->tmp)
                       : ckpt_err_set(err, CKPT_EIO, "'%s': shorter than "
                                      "written", f->tmp);
        else {
            EVP_DigestUpdate(m, buf, (size_t)n);
            off += (uint64_t)n;
        }
    }
    if (rc == 0) {
        EVP_DigestFinal_ex(m, d, &dlen);
        ckpt_hex_encode(d, sizeof(d), f->sum);
    }
    EVP_MD_CTX_free(m);
    free(buf);
    return rc;
}

static int local_close(struct ujob *j, struct ckpt_err *err)
{
    int rc = 0, sync = j->o->sync;
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        struct ufile *f = &j->dst.files[i];
        if (f->fd < 0)
            continue;
        if (rc == 0 && sync && fsync(f->fd) != 0)
            rc = ckpt_err_sys(err, "sync '%s'", f->tmp);
        if (rc == 0 && j->o->checksum)
            rc = hash_output(f, err);
        if (close(f->fd) != 0 && rc == 0)
            rc = ckpt_err_sys(err, "close '%s'", f->tmp);
        f->fd = -1;
    }
    return rc;
}


/* Writes go to the file in pieces of at most this size. The kernel sizes
 * the page-cache folios a write allocates by its length (ext4 large
 * folios, Linux 6.x): a write of 2 MiB or more takes 2 MiB folios, and on
 * the shared VM this was measured on those were often slow to fill:
 * 1 GiB written to a new file in 4 MiB pwrites took 0.1-1.7 s of CPU, in
 * 1 MiB or smaller pieces 0.11-0.13 s every time, and overwriting cached
 * pages was fast either way (bench/RESULTS.md, Orbax; likely free page
 * reporting: the VM's balloon hands free 2 MiB blocks back to the host,
 * and their first touch faults there). Orbax and zarr chunks (often
 * 4 MiB) were written in one piece; DCP's 1 MiB bands already were no
 * larger. cp writes in pipe-sized pieces (copy_file_range). */
#define WRITE_PIECE ((size_t)1 << 20)

static int local_begin(struct ujob *j, struct ckpt_err *err)
{
    return check_names(j, j->dst.out->impl, err);
}

static int local_write(struct ujob *j, struct ufile *f, const void *p,
                       size_t n, uint64_t off, struct ckpt_err *err)
{
    (void)j;
    while (n) {         /* WRITE_PIECE at a time: see above */
        size_t k = n < WRITE_PIECE ? n : WRITE_PIECE;
        if (ckpt_pwrite_all(f->fd, p, k, off, f->tmp, err) != 0)
            return -1;
        p = (const char *)p + k;
        n -= k;
        off += k;
    }
    return 0;
}

static void local_abort(struct ujob *j)
{
    remove_tmp(j->dst.out->impl);
}

static void local_release(struct ujob *j)
{
    struct dest *d = j->dst.out->impl;
    free(d->tmpdir);
    free(d->path);
    free(d);
}

static const struct uns_out_ops local_ops = {
    local_begin, local_create, local_write, local_close, local_commit,
    local_abort, local_release,
};

int uns_outlocal_open(struct ujob *j, const char *dest, struct ckpt_err *err)
{
    struct dest *d = ckpt_xcalloc(1, sizeof(*d));
    j->dst.out = ckpt_xcalloc(1, sizeof(*j->dst.out));
    j->dst.out->ops = &local_ops;
    j->dst.out->impl = d;
    if (prepare_dest(dest, d, err) != 0)
        return -1;
    /* Decompressed zstd items are written beside the outputs. */
    j->dst.tmpdir = d->tmpdir;
    return 0;
}
