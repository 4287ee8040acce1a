/*
 * local.c - the local filesystem as a storage backend.
 *
 * Keys are paths. Listing and deleting walk with openat()/fdopendir() and
 * O_NOFOLLOW, so a symlink inside a tree is reported (or unlinked), never
 * followed out of it; deleting never crosses into another filesystem (a
 * mount point inside the tree), as `rm --one-file-system`. Only regular
 * files are opened for reading (ckpt_local_open_read): a FIFO would block
 * the open forever. Writes go to a temporary sibling and are renamed into
 * place on commit, so a reader never sees a half-written file.
 */
#include "storage_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/gate.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"

static enum ckpt_entry_type mode_type(mode_t m)
{
    if (S_ISREG(m))
        return CKPT_ENTRY_FILE;
    if (S_ISDIR(m))
        return CKPT_ENTRY_DIR;
    if (S_ISLNK(m))
        return CKPT_ENTRY_LINK;
    return CKPT_ENTRY_OTHER;
}

const char *ckpt_local_kind(unsigned mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISLNK(mode))
        return "a symbolic link";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    return "not a regular file";
}

static int not_regular(const char *path, mode_t mode, struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is %s, not a regular file;"
                        " not read", path, ckpt_local_kind(mode));
}

int ckpt_local_open_read(const char *path, unsigned flags,
                         struct ckpt_err *err)
{
    int follow = (flags & CKPT_OPEN_FOLLOW) != 0;
    struct stat sb;
    /* Type first, then open without blocking (opening a FIFO for reading
     * waits for a writer), then the type of what was opened: a FIFO
     * swapped in between is caught either way. */
    if ((follow ? stat(path, &sb) : lstat(path, &sb)) != 0)
        return ckpt_err_sys(err, "open '%s'", path);
    if (!S_ISREG(sb.st_mode))
        return not_regular(path, sb.st_mode, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK |
                  (follow ? 0 : O_NOFOLLOW));
    if (fd < 0)
        return errno == ELOOP ? not_regular(path, S_IFLNK, err)
                              : ckpt_err_sys(err, "open '%s'", path);
    int fl;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        if (!S_ISREG(sb.st_mode))
            return not_regular(path, sb.st_mode, err);
        return ckpt_err_sys(err, "open '%s'", path);
    }
    return fd;
}

static int local_stat(struct ckpt_storage *st, const char *key,
                      struct ckpt_stat *out, struct ckpt_err *err)
{
    struct stat sb;
    /* Follow a symlink named by the user (a run given as a link is fine);
     * links found while walking are never followed. */
    if (stat(key, &sb) != 0)
        return ckpt_err_sys(err, "stat '%s'", key);
    out->size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
    out->mtime = sb.st_mtime;
    out->ctime = sb.st_ctime;
    out->type = mode_type(sb.st_mode);
    return 0;
}

struct walk {
    ckpt_list_fn fn;
    void *ud;
    unsigned flags;
    struct ckpt_buf rel;     /* path relative to the listed dir */
    const char *top;         /* for messages */
    struct ckpt_err *err;
    struct st_fs fs;         /* the listed directory's filesystem */
    int has_fs;              /* fs known (else no entry is a mount) */
    int in_mount;            /* walking inside a mount point found */
};

/* What the listing needs of an entry, and its filesystem: one statx per
 * entry serves both the listing and the mount check (a second walk to
 * find mount points doubled the metadata round trips on Lustre/NFS). */
#define WALK_MASK (STATX_TYPE | STATX_MODE | STATX_SIZE | STATX_MTIME |   \
                   STATX_CTIME | STATX_MNT_ID)

/* Is the entry statx'd into sx a mount point below the listed directory:
 * another device, another mount (where the kernel says, >= 5.8; else the
 * device alone), or a mount's root (a bind mount of the same fs)? Not
 * below a mount point already found (as find_mounts, which stops there). */
static int walk_mount(const struct walk *w, const struct statx *sx)
{
    if (!w->has_fs || w->in_mount)
        return 0;
    unsigned long long dev = ((unsigned long long)sx->stx_dev_major << 32) |
                             sx->stx_dev_minor;
    int root = (sx->stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
               (sx->stx_attributes & STATX_ATTR_MOUNT_ROOT);
    return root || dev != w->fs.dev ||
           ((sx->stx_mask & STATX_MNT_ID) && w->fs.has_mnt &&
            sx->stx_mnt_id != w->fs.mnt);
}

static int walk_emit(struct walk *w, const struct statx *sx,
                     enum ckpt_entry_type t, int mount)
{
    struct ckpt_entry e = {
        .name = w->rel.ptr,
        .size = t == CKPT_ENTRY_FILE ? (uint64_t)sx->stx_size : 0,
        .mtime = sx->stx_mtime.tv_sec,
        .type = t,
        .etag = "",
        .ctime = sx->stx_ctime.tv_sec,
        .mount = mount,
    };
    return w->fn(w->ud, &e);
}

static int walk_dir(struct walk *w, int dfd);

/* Walk into the directory name (the entry just named in w->rel), found a
 * mount point when mount. */
static int walk_sub(struct walk *w, int dfd, const char *name,
                    const struct statx *sx, int mount)
{
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                     O_CLOEXEC);
    if (sub < 0) {
        if (errno == ENOENT)
            return 0;
        return ckpt_err_sys(w->err, "open directory '%s/%s'", w->top,
                            w->rel.ptr);
    }
    int rc = 0;
    if (mount && (w->flags & CKPT_LIST_MOUNTS))
        rc = walk_emit(w, sx, CKPT_ENTRY_DIR, 1);
    if (rc) {
        close(sub);
        return rc;
    }
    ckpt_buf_addch(&w->rel, '/');
    int was = w->in_mount;
    w->in_mount |= mount;
    rc = walk_dir(w, sub);
    w->in_mount = was;
    return rc;
}

/* Walk the directory open at dfd (consumed). Returns 0, -1 on error (err
 * set), or the callback's non-zero stop value. */
static int walk_dir(struct walk *w, int dfd)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return ckpt_err_sys(w->err, "open directory '%s/%s'", w->top,
                            w->rel.ptr);
    }
    int rc = 0;
    size_t base = w->rel.len;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                rc = ckpt_err_sys(w->err, "read directory '%s/%s'", w->top,
                                  w->rel.ptr);
            break;
        }
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct statx sx;
        if (statx(dirfd(d), de->d_name, AT_SYMLINK_NOFOLLOW, WALK_MASK,
                  &sx) != 0) {
            if (errno == ENOENT)
                continue; /* removed while we walked */
            rc = ckpt_err_sys(w->err, "stat '%s/%s%s'", w->top, w->rel.ptr,
                              de->d_name);
            break;
        }
        ckpt_buf_setlen(&w->rel, base);
        ckpt_buf_addstr(&w->rel, de->d_name);
        enum ckpt_entry_type t = mode_type(sx.stx_mode);
        int mount = walk_mount(w, &sx);
        if (t == CKPT_ENTRY_DIR && (w->flags & CKPT_LIST_RECURSIVE))
            rc = walk_sub(w, dirfd(d), de->d_name, &sx, mount);
        else
            rc = walk_emit(w, &sx, t, mount);
        if (rc)
            break;
    }
    ckpt_buf_setlen(&w->rel, base);
    closedir(d);
    return rc;
}

static int fs_of(int fd, struct st_fs *fs);

static int local_list(struct ckpt_storage *st, const char *dir, unsigned flags,
                      ckpt_list_fn fn, void *ud, struct ckpt_err *err)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return ckpt_err_sys(err, "open directory '%s'", dir);
    struct walk w = { fn, ud, flags, CKPT_BUF_INIT, dir, err, { 0 }, 0, 0 };
    w.has_fs = fs_of(dfd, &w.fs) == 0;
    int rc = walk_dir(&w, dfd);
    ckpt_buf_release(&w.rel);
    return rc;
}

static int local_read(struct ckpt_storage *st, const char *key, uint64_t off,
                      void *buf, size_t len, size_t *nread,
                      struct ckpt_err *err)
{
    /* Following a last symlink: files reached through links are read
     * that way (upload -L, SRC given as a link); never a non-file. */
    int fd = ckpt_local_open_read(key, CKPT_OPEN_FOLLOW, err);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done,
                          (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int rc = ckpt_err_sys(err, "read '%s'", key);
            close(fd);
            return rc;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    *nread = done;
    return 0;
}

/* mkdir -p of the parent directories of path. */
static int make_parents(const char *path, struct ckpt_err *err)
{
    char *dir = ckpt_path_dirname(path);
    int rc = ckpt_mkdirs(dir, err);
    free(dir);
    return rc;
}

struct local_writer {
    struct ckpt_writer base;
    int fd;
    char *path;    /* owned: final name */
    char *tmp;     /* owned: temporary name */
    int exclusive; /* commit with link() so an existing file wins */
};

static int lw_write(struct ckpt_writer *w_, const void *data, size_t len,
                    struct ckpt_err *err)
{
    struct local_writer *w = (struct local_writer *)w_;
    const char *p = data;
    while (len) {
        ssize_t n = write(w->fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ckpt_err_sys(err, "write '%s'", w->tmp);
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void lw_free(struct local_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    free(w->path);
    free(w->tmp);
    free(w);
}

static void lw_abort(struct ckpt_writer *w_)
{
    struct local_writer *w = (struct local_writer *)w_;
    (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "an aborted "
                                         "write's temporary"), w->tmp, NULL);
    lw_free(w);
}

static int lw_commit(struct ckpt_writer *w_, struct ckpt_err *err)
{
    struct local_writer *w = (struct local_writer *)w_;
    int rc = 0;
    if (close(w->fd) != 0) {
        w->fd = -1;
        rc = ckpt_err_sys(err, "close '%s'", w->tmp);
    }
    w->fd = -1;
    if (rc == 0 && w->exclusive) {
        /* link() fails with EEXIST atomically: the conditional create. */
        if (link(w->tmp, w->path) != 0)
            rc = errno == EEXIST
                ? ckpt_err_set(err, CKPT_EEXIST, "'%s' already exists",
                               w->path)
                : ckpt_err_sys(err, "create '%s'", w->path);
        (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a created "
                                             "file's temporary link"),
                               w->tmp, NULL);
    } else if (rc == 0) {
        rc = ckpt_gate_rename(CKPT_GATE_OWN(CKPT_GATE_REPLACE, "a write's "
                                            "temporary into place"),
                              w->tmp, w->path, err);
    }
    if (rc != 0)
        (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a failed "
                                             "write's temporary"),
                               w->tmp, NULL);
    lw_free(w);
    return rc;
}

static const struct ckpt_writer_ops local_writer_ops = {
    lw_write, lw_commit, lw_abort
};

static int open_writer(const char *key, int exclusive,
                       struct ckpt_writer **out, struct ckpt_err *err)
{
    if (make_parents(key, err) != 0)
        return -1;
    struct local_writer *w = ckpt_xcalloc(1, sizeof(*w));
    w->base.ops = &local_writer_ops;
    w->path = ckpt_xstrdup(key);
    /* Short name beside key (tempname.h), not key plus a suffix. */
    char *dir = ckpt_path_dirname(key);
    ckpt_temp_sweep(dir);
    w->tmp = ckpt_temp_path(dir);
    free(dir);
    w->exclusive = exclusive;
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (w->fd < 0) {
        int rc = ckpt_err_sys(err, "create '%s'", w->tmp);
        lw_free(w);
        return rc;
    }
    *out = &w->base;
    return 0;
}

static int local_writer_open(struct ckpt_storage *st, const char *key,
                             uint64_t size_hint, struct ckpt_writer **out,
                             struct ckpt_err *err)
{
    return open_writer(key, 0, out, err);
}

static int local_put_if_absent(struct ckpt_storage *st, const char *key,
                               const void *data, size_t len,
                               struct ckpt_err *err)
{
    struct ckpt_writer *w;
    if (open_writer(key, 1, &w, err) != 0)
        return -1;
    if (lw_write(w, data, len, err) != 0) {
        lw_abort(w);
        return -1;
    }
    return lw_commit(w, err);
}

static int local_del(struct ckpt_storage *st, const char *key,
                     struct ckpt_err *err)
{
    if (ckpt_gate_held_unlink(key) != 0 && errno != ENOENT)
        return ckpt_err_sys(err, "delete '%s'", key);
    return 0;
}

int st_fs_at(int dfd, const char *name, struct st_fs *fs, int *root,
             unsigned *mode)
{
    struct statx sx;
    int fl = AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH);
    if (statx(dfd, name, fl, STATX_TYPE | STATX_MODE | STATX_MNT_ID,
              &sx) != 0)
        return -1;
    fs->dev = ((unsigned long long)sx.stx_dev_major << 32) |
              sx.stx_dev_minor;
    fs->has_mnt = (sx.stx_mask & STATX_MNT_ID) != 0;
    fs->mnt = fs->has_mnt ? sx.stx_mnt_id : 0;
    *root = (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
            (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
    if (mode)
        *mode = sx.stx_mode;
    return 0;
}

int st_fs_other(int dfd, const char *name, const struct st_fs *fs,
                unsigned *mode)
{
    struct st_fs f;
    int root;
    if (st_fs_at(dfd, name, &f, &root, mode) != 0)
        return -1;
    return root || f.dev != fs->dev ||
           (f.has_mnt && fs->has_mnt && f.mnt != fs->mnt);
}

static int other_fs(const char *path, struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is a mount point (another "
                        "filesystem); not deleting across it", path);
}

/* Open the directory name below the one open at dfd, never through a
 * symlink and never onto another filesystem than dev. -1 with errno
 * (EXDEV: a mount point). */
static int open_sub(int dfd, const char *name, const struct st_fs *fs)
{
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                     O_CLOEXEC);
    if (sub >= 0 && st_fs_other(sub, "", fs, NULL) != 0) {
        close(sub);
        errno = EXDEV;
        return -1;
    }
    return sub;
}

/* The filesystem of the directory open at fd, as st_fs_at. */
static int fs_of(int fd, struct st_fs *fs)
{
    int root;
    return st_fs_at(fd, "", fs, &root, NULL);
}

/* Remove everything inside the directory open at dfd (consumed), which is
 * on device dev. */
static int rm_contents(int dfd, const struct st_fs *fs, struct ckpt_buf *path,
                       struct ckpt_err *err)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return ckpt_err_sys(err, "open directory '%s'", path->ptr);
    }
    int rc = 0;
    size_t base = path->len;
    struct dirent *de;
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        ckpt_buf_setlen(path, base);
        ckpt_buf_addf(path, "/%s", de->d_name);
        unsigned mode;
        int other = st_fs_other(dirfd(d), de->d_name, fs, &mode);
        if (other < 0) {
            if (errno == ENOENT)
                continue;
            rc = ckpt_err_sys(err, "stat '%s'", path->ptr);
            break;
        }
        /* A file bind-mounted here is another filesystem's too. */
        if (other) {
            rc = other_fs(path->ptr, err);
            break;
        }
        /* Only regular files, links and directories are ever deleted. */
        if (!S_ISDIR(mode) && !S_ISREG(mode) && !S_ISLNK(mode)) {
            rc = ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is %s; only regular "
                              "files, links and directories are deleted",
                              path->ptr, ckpt_local_kind(mode));
            break;
        }
        if (!S_ISDIR(mode)) {
            if (ckpt_gate_held_unlinkat(dirfd(d), de->d_name, 0) == 0 ||
                errno == ENOENT)
                continue;
            if (errno != EISDIR && errno != EPERM) {
                rc = ckpt_err_sys(err, "delete '%s'", path->ptr);
                break;
            }
        }
        /* A directory: O_NOFOLLOW|O_DIRECTORY refuses a symlink swapped in
         * meanwhile, so we never descend outside the tree, and the device
         * is checked again on what was opened. */
        int sub = open_sub(dirfd(d), de->d_name, fs);
        if (sub < 0) {
            if (errno == ENOENT)
                continue;
            rc = errno == EXDEV ? other_fs(path->ptr, err)
                                : ckpt_err_sys(err, "open directory '%s'",
                                               path->ptr);
            break;
        }
        rc = rm_contents(sub, fs, path, err);
        if (rc == 0 &&
            ckpt_gate_held_unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) != 0 &&
            errno != ENOENT)
            rc = ckpt_err_sys(err, "delete directory '%s'", path->ptr);
    }
    if (rc == 0 && errno != 0 && !de)
        rc = ckpt_err_sys(err, "read directory '%s'", path->ptr);
    ckpt_buf_setlen(path, base);
    closedir(d);
    return rc;
}

static int local_delete_tree(struct ckpt_storage *st, const char *dir,
                             struct ckpt_err *err)
{
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return errno == ENOENT ? 0 : ckpt_err_sys(err, "stat '%s'", dir);
    if (!S_ISDIR(sb.st_mode))
        return local_del(st, dir, err);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0
                               : ckpt_err_sys(err, "open directory '%s'", dir);
    struct st_fs fs;
    if (fs_of(dfd, &fs) != 0) {
        close(dfd);
        return ckpt_err_sys(err, "stat '%s'", dir);
    }
    struct ckpt_buf path = CKPT_BUF_INIT;
    ckpt_buf_addstr(&path, dir);
    int rc = rm_contents(dfd, &fs, &path, err);
    ckpt_buf_release(&path);
    if (rc == 0 && ckpt_gate_held_rmdir(dir) != 0 && errno != ENOENT)
        rc = ckpt_err_sys(err, "delete directory '%s'", dir);
    return rc;
}

/* Open the directory that holds key (a path below dir), one component at a
 * time with O_NOFOLLOW and on dir's filesystem: a symlink swapped in for a
 * directory fails the walk instead of leading out of the tree, a mount
 * point fails it with EXDEV. The fd, *dev dir's device and *base the last
 * component; -1 with errno. */
static int open_parent(const char *dir, const char *key, const char **base,
                       struct st_fs *fs)
{
    size_t dl = strlen(dir);
    if (strncmp(key, dir, dl) != 0 || key[dl] != '/') {
        errno = EINVAL;
        return -1;
    }
    const char *rel = key + dl + 1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fs_of(fd, fs) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    while (fd >= 0) {
        const char *s = strchr(rel, '/');
        if (!s) {
            *base = rel;
            return fd;
        }
        char *comp = ckpt_xstrndup(rel, (size_t)(s - rel));
        int sub = open_sub(fd, comp, fs);
        int e = errno;
        free(comp);
        close(fd);
        errno = e;
        fd = sub;
        rel = s + 1;
    }
    return -1;
}

/* Unlink base in the directory open at fd (on dev): a file of another
 * filesystem (bind-mounted) stays. */
static int unlink_in(int fd, const char *base, const struct st_fs *fs,
                     const char *key, struct ckpt_err *err)
{
    unsigned mode;
    int other = st_fs_other(fd, base, fs, &mode);
    if (other < 0)
        return errno == ENOENT ? 0 : ckpt_err_sys(err, "delete '%s'", key);
    if (other)
        return other_fs(key, err);
    if (!S_ISREG(mode) && !S_ISLNK(mode))
        return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is %s; only regular "
                            "files, links and directories are deleted", key,
                            ckpt_local_kind(mode));
    if (ckpt_gate_held_unlinkat(fd, base, 0) != 0 && errno != ENOENT)
        return ckpt_err_sys(err, "delete '%s'", key);
    return 0;
}

/* Remove the empty directories inside the directory open at dfd
 * (consumed, on device dev), deepest first. Files, directories holding
 * any, and other filesystems stay. */
static int rm_empty(int dfd, const struct st_fs *fs, struct ckpt_buf *path,
                    struct ckpt_err *err)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return ckpt_err_sys(err, "open directory '%s'", path->ptr);
    }
    int rc = 0;
    size_t base = path->len;
    struct dirent *de;
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
            continue;
        int sub = open_sub(dirfd(d), de->d_name, fs);
        if (sub < 0)
            continue; /* not a directory, gone, or a mount: left alone */
        ckpt_buf_setlen(path, base);
        ckpt_buf_addf(path, "/%s", de->d_name);
        rc = rm_empty(sub, fs, path, err);
        if (rc == 0 &&
            ckpt_gate_held_unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) != 0 &&
            errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST)
            rc = ckpt_err_sys(err, "delete directory '%s'", path->ptr);
    }
    ckpt_buf_setlen(path, base);
    closedir(d);
    return rc;
}

static int local_delete_keys(struct ckpt_storage *st, const char *dir,
                             char *const *keys, size_t n,
                             struct ckpt_err *err)
{
    (void)st;
    for (size_t i = 0; i < n; i++) {
        const char *base;
        struct st_fs fs;
        int fd = open_parent(dir, keys[i], &base, &fs);
        if (fd < 0 && errno == ENOENT)
            continue;
        if (fd < 0 && errno == EXDEV)
            return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is on another "
                                "filesystem (below a mount point); not "
                                "deleting across it", keys[i]);
        if (fd < 0)
            return ckpt_err_sys(err, "delete '%s'", keys[i]);
        int r = unlink_in(fd, base, &fs, keys[i], err);
        close(fd);
        if (r != 0)
            return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0
                               : ckpt_err_sys(err, "open directory '%s'", dir);
    struct st_fs fs;
    if (fs_of(dfd, &fs) != 0) {
        close(dfd);
        return ckpt_err_sys(err, "stat '%s'", dir);
    }
    struct ckpt_buf path = CKPT_BUF_INIT;
    ckpt_buf_addstr(&path, dir);
    int rc = rm_empty(dfd, &fs, &path, err);
    ckpt_buf_release(&path);
    if (rc == 0 && ckpt_gate_held_rmdir(dir) != 0 && errno != ENOENT &&
        errno != ENOTEMPTY &&
        errno != EEXIST && errno != EBUSY)
        rc = ckpt_err_sys(err, "delete directory '%s'", dir);
    return rc;
}

/* 1 if path is root or below it (both real paths). */
static int under(const char *path, const char *root)
{
    size_t n = strlen(root);
    return !strncmp(path, root, n) &&
           (path[n] == '\0' || path[n] == '/' || n == 1);
}

/* Unlink key through the directory open_parent(dir, path) reaches. */
static int unlink_at_parent(const char *dir, const char *path,
                            const char *key, struct ckpt_err *err)
{
    const char *b;
    struct st_fs fs;
    int fd = open_parent(dir, path, &b, &fs);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0 && errno == EXDEV)
        return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is on another "
                            "filesystem (below a mount point); not deleting "
                            "across it", key);
    if (fd < 0)
        return ckpt_err_sys(err, "delete '%s'", key);
    int rc = unlink_in(fd, b, &fs, key, err);
    close(fd);
    return rc;
}

int ckpt_local_delete_below(const char *root, const char *key,
                            struct ckpt_err *err)
{
    size_t rl = strlen(root);
    /* The common case: no symlink from root down to key's directory
     * (each component opened with O_NOFOLLOW), so it is below root. */
    if (!strncmp(key, root, rl) && key[rl] == '/') {
        struct ckpt_err e = CKPT_ERR_INIT;
        int rc = unlink_at_parent(root, key, key, &e);
        if (rc == 0 || (e.sys_errno != ELOOP && e.sys_errno != ENOTDIR)) {
            if (rc != 0)
                *err = e;
            return rc;
        }
    }
    char rroot[PATH_MAX], rparent[PATH_MAX];
    char *parent = ckpt_path_dirname(key), *base = ckpt_path_basename(key);
    int rc = 0;
    /* Through a symlink: the directory the unlink happens in, resolved,
     * must be root's real path or below it (a link followed out of SRC
     * leads to files that are not SRC's to delete). */
    if (!realpath(root, rroot) || !realpath(*parent ? parent : ".",
                                            rparent)) {
        rc = errno == ENOENT ? 0 : ckpt_err_sys(err, "delete '%s'", key);
    } else if (!under(rparent, rroot)) {
        rc = ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is outside '%s' (%s, "
                          "reached through a symbolic link); kept", key,
                          root, rparent);
    } else {
        struct ckpt_buf k = CKPT_BUF_INIT;
        ckpt_buf_addf(&k, "%s/%s", rparent, base);
        rc = unlink_at_parent(rroot, k.ptr, key, err);
        ckpt_buf_release(&k);
    }
    free(parent);
    free(base);
    return rc;
}

struct mounts {
    char *first;            /* smallest path found, malloced */
    size_t n;
};

static int mount_seen(void *ud, const struct ckpt_entry *e)
{
    struct mounts *m = ud;
    if (!e->mount)
        return 0;
    m->n++;
    if (!m->first || strcmp(e->name, m->first) < 0) {
        free(m->first);
        m->first = ckpt_xstrdup(e->name);
    }
    return 0;
}

/* The listing's own walk finds the mount points: one rule (walk_mount)
 * for what the judge sees in a listing and what a delete re-checks. */
int ckpt_local_find_mount(const char *dir, char **first, size_t *n,
                          struct ckpt_err *err)
{
    *first = NULL;
    *n = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return ckpt_err_sys(err, "open directory '%s'", dir);
    struct mounts m = { NULL, 0 };
    struct walk w = { mount_seen, &m, CKPT_LIST_RECURSIVE | CKPT_LIST_MOUNTS,
                      CKPT_BUF_INIT, dir, err, { 0 }, 1, 0 };
    if (fs_of(dfd, &w.fs) != 0) {
        close(dfd);
        return ckpt_err_sys(err, "stat '%s'", dir);
    }
    int rc = walk_dir(&w, dfd);
    ckpt_buf_release(&w.rel);
    if (rc != 0) {
        free(m.first);
        return -1;
    }
    *first = m.first;
    *n = m.n;
    return m.n ? 1 : 0;
}

int ckpt_file_ver_get(const char *path, int fd, struct ckpt_file_ver *v,
                      struct ckpt_err *err)
{
    struct stat sb;
    if ((fd >= 0 ? fstat(fd, &sb) : lstat(path, &sb)) != 0)
        return ckpt_err_sys(err, "stat '%s'", path);
    v->size = (uint64_t)sb.st_size;
    v->ino = (uint64_t)sb.st_ino;
    v->dev = (uint64_t)sb.st_dev;
    v->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 +
                  sb.st_mtim.tv_nsec;
    v->ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 +
                  sb.st_ctim.tv_nsec;
    v->regular = S_ISREG(sb.st_mode);
    return 0;
}

const char *ckpt_file_ver_diff(const struct ckpt_file_ver *was,
                               const struct ckpt_file_ver *now, int ctime)
{
    return !now->regular ? "type"
         : now->ino != was->ino || now->dev != was->dev ? "inode"
         : now->size != was->size ? "size"
         : now->mtime_ns != was->mtime_ns ? "modification time"
         : ctime && now->ctime_ns != was->ctime_ns ? "ctime" : NULL;
}

/* The filesystem of path, or of the nearest directory above it. */
static int fs_near(const char *path, struct st_fs *fs)
{
    char *p = ckpt_xstrdup(*path ? path : ".");
    int root, rc;
    while ((rc = st_fs_at(AT_FDCWD, p, fs, &root, NULL)) != 0 &&
           errno == ENOENT && strcmp(p, "/") && strcmp(p, ".")) {
        char *up = ckpt_path_dirname(p);
        free(p);
        p = ckpt_xstrdup(*up ? up : ".");
        free(up);
    }
    free(p);
    return rc;
}

int ckpt_local_same_fs(const char *a, const char *b)
{
    struct st_fs x, y;
    return fs_near(a, &x) == 0 && fs_near(b, &y) == 0 && x.dev == y.dev &&
           (!x.has_mnt || !y.has_mnt || x.mnt == y.mnt);
}

static const struct ckpt_storage_ops local_ops = {
    .name = "local",
    .stat = local_stat,
    .list = local_list,
    .read = local_read,
    .writer_open = local_writer_open,
    .put_if_absent = local_put_if_absent,
    .del = local_del,
    .delete_tree = local_delete_tree,
    .delete_keys = local_delete_keys,
    .close = NULL,
};

int ckpt_local_open(struct ckpt_storage *st, struct ckpt_err *err)
{
    st->ops = &local_ops;
    return 0;
}
