/*
 * upload_local.c - the local flavour of the uploads driven by the caller
 * (storage.h): a "multipart upload" is a temporary sibling file, sized up
 * front, whose parts are written at their offsets by any thread, then
 * renamed into place; its path is the upload id, so an interrupted copy
 * can be resumed or discarded by a later process. A reader never sees a
 * half-written file under the final name.
 */
#include "storage_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckpt/gate.h"
#include "ckpt/interrupt.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "upload_int.h"

/* mkdir -p of the directories above path. */
static int make_parents(const char *path, struct ckpt_err *err)
{
    char *dir = ckpt_path_dirname(path);
    int rc = ckpt_mkdirs(dir, err);
    free(dir);
    if (rc == 0 && *path) {
        struct stat sb;
        char *d = ckpt_path_dirname(path);
        if (*d && stat(d, &sb) == 0 && !S_ISDIR(sb.st_mode))
            rc = ckpt_err_set(err, CKPT_EIO, "'%s' is not a directory", d);
        free(d);
    }
    return rc;
}

/* A short hidden name beside key (tempname.h: any legal name of key
 * still fits, and host and pid are in it); the first one in a directory
 * sweeps the temporaries that killed copies left there. */
static char *temp_name(const char *key)
{
    char *dir = ckpt_path_dirname(key);
    ckpt_temp_sweep(dir);
    char *t = ckpt_temp_path(dir);
    free(dir);
    return t;
}

static int set_mtime(int fd, const char *name, int64_t mtime,
                     struct ckpt_err *err)
{
    if (!mtime)
        return 0;
    struct timespec ts[2] = { { 0, UTIME_OMIT }, { (time_t)mtime, 0 } };
    if (futimens(fd, ts) != 0)
        return ckpt_err_sys(err, "set modification time of '%s'", name);
    return 0;
}

int st_into_place(char *tmp, const char *key, int rc,
                  struct ckpt_err *err)
{
    if (rc == 0)
        rc = ckpt_gate_rename(CKPT_GATE_OWN(CKPT_GATE_REPLACE, "a copy's "
                                            "temporary into place"),
                              tmp, key, err);
    if (rc != 0)
        (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a failed "
                                             "copy's temporary"), tmp, NULL);
    free(tmp);
    return rc;
}

int st_local_up_head(struct ckpt_storage *st, const char *key,
                     struct ckpt_stat *out, struct ckpt_obj_meta *meta,
                     struct ckpt_err *err)
{
    memset(meta, 0, sizeof(*meta));
    if (ckpt_storage_stat(st, key, out, err) != 0)
        return -1;
    meta->mtime = out->mtime;
    return 0;
}

int st_local_up_put(struct ckpt_storage *st, const char *key, const void *data,
                    size_t len, const struct ckpt_obj_meta *meta,
                    struct ckpt_err *err)
{
    if (make_parents(key, err) != 0)
        return -1;
    char *tmp = temp_name(key);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    int rc = fd < 0 ? ckpt_err_sys(err, "create '%s'", tmp) : 0;
    if (rc == 0)
        rc = ckpt_pwrite_all(fd, data, len, 0, tmp, err);
    if (rc == 0 && meta)
        rc = set_mtime(fd, tmp, meta->mtime, err);
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = ckpt_err_sys(err, "close '%s'", tmp);
    return st_into_place(tmp, key, rc, err);
}

/* ---- a file placed as it is ---- */

/* Would a hard link of the file fd in the directory of tmp look as a file
 * created there looks? Mode bits come from the same create (0666 less the
 * umask); a default ACL would add entries a link lacks; a set-group-ID
 * directory's group is given to the link (with chown, as the owner may
 * when a member of that group). 1: yes, 0: copy it instead. */
static int link_fits(const char *tmp)
{
    char *dir = ckpt_path_dirname(tmp);
    struct stat ds, fs;
    int ok = stat(*dir ? dir : ".", &ds) == 0 &&
             getxattr(*dir ? dir : ".", "system.posix_acl_default", NULL,
                      0) < 0 &&
             (errno == ENODATA || errno == ENOTSUP);
    free(dir);
    if (!ok || !(ds.st_mode & S_ISGID))
        return ok;
    return lstat(tmp, &fs) == 0 &&
           (fs.st_gid == ds.st_gid || lchown(tmp, (uid_t)-1, ds.st_gid) == 0);
}

/* The linked file tmp is the version ver: the same inode, size and
 * mtime (the link itself moved its ctime). */
static int linked_same(const char *tmp, const struct ckpt_file_ver *ver,
                       struct ckpt_err *err)
{
    struct ckpt_file_ver now;
    if (ckpt_file_ver_get(tmp, -1, &now, err) != 0)
        return -1;
    const char *what = ckpt_file_ver_diff(ver, &now, 0);
    if (what)
        return ckpt_err_set(err, CKPT_EIO, "'%s' changed while it was "
                            "linked (%s differs)", tmp, what);
    return 0;
}

/* Copy path to tmp (created) through the MD5: its bytes must be md5's. */
static int copy_hashed(const char *path, const char *tmp,
                       const struct ckpt_file_ver *ver,
                       const unsigned char md5[16], struct ckpt_err *err)
{
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return ckpt_err_sys(err, "open '%s'", path);
    int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, EVP_md5(), NULL) != 1)
        ckpt_die_oom("starting an MD5 digest");
    size_t cap = 1u << 20;
    char *buf = ckpt_xmalloc(cap);
    uint64_t total = 0;
    int rc = out < 0 ? ckpt_err_sys(err, "create '%s'", tmp) : 0;
    while (rc == 0) {
        /* Interrupted: the caller removes the temporary. */
        if (ckpt_interrupt_stops()) {
            rc = ckpt_err_set(err, CKPT_EIO, "'%s': interrupted", path);
            break;
        }
        ssize_t n = read(in, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = ckpt_err_sys(err, "read '%s'", path);
        if (n <= 0)
            break;
        EVP_DigestUpdate(c, buf, (size_t)n);
        rc = ckpt_pwrite_all(out, buf, (size_t)n, (off_t)total, tmp, err);
        total += (uint64_t)n;
    }
    unsigned char got[16];
    unsigned len = 16;
    EVP_DigestFinal_ex(c, got, &len);
    if (rc == 0 && (total != ver->size || memcmp(got, md5, 16)))
        rc = ckpt_err_set(err, CKPT_EIO, "'%s' changed since it was "
                          "hashed (%s differs)", path,
                          total != ver->size ? "size" : "MD5");
    if (out >= 0 && close(out) != 0 && rc == 0)
        rc = ckpt_err_sys(err, "close '%s'", tmp);
    EVP_MD_CTX_free(c);
    free(buf);
    close(in);
    return rc;
}

int st_local_up_file(struct ckpt_storage *st, const char *key,
                     const char *path, const struct ckpt_file_ver *ver,
                     const unsigned char md5[16],
                     const struct ckpt_obj_meta *meta, int *linked,
                     struct ckpt_err *err)
{
    (void)st;
    *linked = 0;
    if (make_parents(key, err) != 0)
        return -1;
    char *tmp = temp_name(key);
    int rc = 0;
    if (link(path, tmp) == 0) {
        if (link_fits(tmp)) {
            *linked = 1;
            rc = linked_same(tmp, ver, err);
        } else {
            rc = ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a link "
                                                "that does not fit"),
                                  tmp, err);
        }
    }
    if (rc == 0 && !*linked)
        rc = copy_hashed(path, tmp, ver, md5, err);
    if (rc == 0 && meta && meta->mtime) {
        struct timespec ts[2] = { { 0, UTIME_OMIT }, { (time_t)meta->mtime,
                                                      0 } };
        if (utimensat(AT_FDCWD, tmp, ts, AT_SYMLINK_NOFOLLOW) != 0)
            rc = ckpt_err_sys(err, "set modification time of '%s'", tmp);
    }
    return st_into_place(tmp, key, rc, err);
}

int st_local_up_start(struct ckpt_storage *st, const char *key, uint64_t size,
                      char **upload_id, struct ckpt_err *err)
{
    if (make_parents(key, err) != 0)
        return -1;
    char *tmp = temp_name(key);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int rc = ckpt_err_sys(err, "create '%s'", tmp);
        free(tmp);
        return rc;
    }
    /* Sized now, so parts can land at any offset in any order. */
    int rc = 0;
    if (ftruncate(fd, (off_t)size) != 0)
        rc = ckpt_err_sys(err, "size '%s'", tmp);
    close(fd);
    if (rc != 0) {
        (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a copy's "
                                             "temporary that could not be "
                                             "sized"), tmp, NULL);
        free(tmp);
        return -1;
    }
    *upload_id = tmp;
    return 0;
}

int st_local_up_part(struct ckpt_storage *st, const char *upload_id,
                     uint64_t off, const void *data, size_t len,
                     struct ckpt_err *err)
{
    int fd = open(upload_id, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': temporary file "
                                "of the copy is gone", upload_id);
        return ckpt_err_sys(err, "open '%s'", upload_id);
    }
    int rc = ckpt_pwrite_all(fd, data, len, off, upload_id, err);
    if (close(fd) != 0 && rc == 0)
        rc = ckpt_err_sys(err, "close '%s'", upload_id);
    return rc;
}

int st_local_up_finish(struct ckpt_storage *st, const char *key,
                       const char *upload_id, uint64_t size,
                       const struct ckpt_obj_meta *meta, struct ckpt_err *err)
{
    int fd = open(upload_id, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
            ? ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': temporary file of "
                           "the copy is gone", upload_id)
            : ckpt_err_sys(err, "open '%s'", upload_id);
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0)
        rc = ckpt_err_sys(err, "stat '%s'", upload_id);
    else if ((uint64_t)sb.st_size != size)
        rc = ckpt_err_set(err, CKPT_EIO, "'%s' has %lld bytes, expected "
                          "%llu", upload_id, (long long)sb.st_size,
                          (unsigned long long)size);
    if (rc == 0 && meta)
        rc = set_mtime(fd, upload_id, meta->mtime, err);
    close(fd);
    if (rc == 0)
        rc = ckpt_gate_rename(CKPT_GATE_OWN(CKPT_GATE_REPLACE, "a finished "
                                            "copy into place"),
                              upload_id, key, err);
    return rc;
}

int st_local_up_abort(struct ckpt_storage *st, const char *upload_id,
                      struct ckpt_err *err)
{
    struct ckpt_err e = CKPT_ERR_INIT;
    if (ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "an aborted "
                                       "copy's temporary"), upload_id,
                         &e) != 0 && e.sys_errno != ENOENT) {
        *err = e;
        return -1;
    }
    return 0;
}

/* Remove empty directories below the one open at dfd (consumed, on
 * device dev), then report whether it is empty now. Another filesystem
 * (a mount point) is not walked into: it stays. */
static int prune_fd(int dfd, const struct st_fs *fs, const char *name,
                    int *empty,
                    struct ckpt_err *err)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return ckpt_err_sys(err, "open directory '%s'", name);
    }
    int rc = 0, left = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        int sub = openat(dirfd(d), de->d_name,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0 && st_fs_other(sub, "", fs, NULL) != 0) {
            close(sub);
            sub = -1;
        }
        if (sub < 0) {
            left++;  /* a file, a symlink, a mount or unreadable: stays */
            continue;
        }
        char *path = ckpt_path_join(name, de->d_name);
        int sub_empty = 0;
        rc = prune_fd(sub, fs, path, &sub_empty, err);
        if (rc == 0 && sub_empty &&
            ckpt_gate_held_unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) != 0 &&
            errno != ENOENT && errno != ENOTEMPTY)
            rc = ckpt_err_sys(err, "delete directory '%s'", path);
        else if (rc == 0 && !sub_empty)
            left++;
        free(path);
    }
    closedir(d);
    *empty = !left;
    return rc;
}

int st_local_prune_dirs(struct ckpt_storage *st, const char *dir,
                        int keep_root, struct ckpt_err *err)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0
                               : ckpt_err_sys(err, "open directory '%s'", dir);
    int empty = 0;
    struct st_fs fs;
    int root;
    if (st_fs_at(dfd, "", &fs, &root, NULL) != 0) {
        close(dfd);
        return ckpt_err_sys(err, "stat '%s'", dir);
    }
    int rc = prune_fd(dfd, &fs, dir, &empty, err);
    if (rc == 0 && empty && !keep_root && ckpt_gate_held_rmdir(dir) != 0 &&
        errno != ENOENT && errno != ENOTEMPTY)
        rc = ckpt_err_sys(err, "delete directory '%s'", dir);
    return rc;
}
