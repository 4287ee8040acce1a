/*
 * cond.c - compare-and-swap on small objects (storage.h "Compare-and-swap"):
 * read with a version, replace or delete only if the version still holds.
 * Kept out of the backend vtable, as upload.c is, so the backends' files
 * stay as they are: local files use a flock'ed sidecar, object storage
 * the service's preconditions (If-Match; x-goog-if-generation-match on
 * GCS, whose XML API versions objects by generation).
 */
#include "storage_int.h"
#include "s3_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/util.h"

#define LOCAL_MAX (1u << 20)   /* a lease is a few hundred bytes */

/* ---- local files ---- */

static void md5_hex(const void *data, size_t len, char out[CKPT_VERSION_MAX])
{
    char b64[25], hex[33];
    ckpt_md5_b64(data, len, b64, hex);
    snprintf(out, CKPT_VERSION_MAX, "%s", hex);
}

/* Is fd still the file at path? A holder removes the sidecar before it
 * unlocks, so a waiter that then gets the lock may hold a file no longer
 * there, and must lock the path's new file instead. */
static int same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* flock(LOCK_EX) on "KEY.lock" (*path, malloced); the fd, or -1. */
static int lock_sidecar(const char *key, char **path, struct ckpt_err *err)
{
    *path = ckpt_xasprintf("%s.lock", key);
    for (;;) {
        int fd = open(*path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
            ckpt_err_sys(err, "open '%s'", *path);
            break;
        }
        while (flock(fd, LOCK_EX) != 0) {
            if (errno == EINTR)
                continue;
            ckpt_err_sys(err, "flock '%s'", *path);
            close(fd);
            fd = -1;
            break;
        }
        if (fd < 0)
            break;
        if (same_file(fd, *path))
            return fd;
        close(fd);
    }
    free(*path);
    *path = NULL;
    return -1;
}

/* Remove the sidecar while still holding it (no lock files are left
 * beside the leases and states), then unlock. */
static void unlock_sidecar(int fd, char *path)
{
    (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_STATE, "a lock "
                                         "sidecar ckpt made"), path, NULL);
    close(fd);
    free(path);
}

/* Under the lock: fail CKPT_EEXIST unless key's bytes have version. */
static int local_check(struct ckpt_storage *st, const char *key,
                       const char *version, int gone_ok,
                       struct ckpt_err *err)
{
    char *data = NULL, cur[CKPT_VERSION_MAX];
    size_t len = 0;
    if (ckpt_storage_read_all(st, key, LOCAL_MAX, &data, &len, err) != 0) {
        if (err->code != CKPT_ENOTFOUND)
            return -1;
        if (gone_ok)
            return 1;
        return ckpt_err_set(err, CKPT_EEXIST, "'%s' is gone (changed "
                            "since read)", key);
    }
    md5_hex(data, len, cur);
    free(data);
    if (strcmp(cur, version) != 0)
        return ckpt_err_set(err, CKPT_EEXIST, "'%s' changed since read",
                            key);
    return 0;
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int local_replace(const char *key, const void *data, size_t len,
                         struct ckpt_err *err)
{
    static _Atomic unsigned long seq;
    char *dir = ckpt_path_dirname(key), *base = ckpt_path_basename(key);
    char *tmp = ckpt_xasprintf("%s%s.%s.ckpt-cas-%ld-%lu", dir,
                               *dir ? "/" : "", base, (long)getpid(),
                               (unsigned long)atomic_fetch_add(&seq, 1));
    free(dir);
    free(base);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int rc = ckpt_err_sys(err, "create '%s'", tmp);
        free(tmp);
        return rc;
    }
    int rc = 0;
    if (write_all(fd, data, len) != 0)
        rc = ckpt_err_sys(err, "write '%s'", tmp);
    if (close(fd) != 0 && rc == 0)
        rc = ckpt_err_sys(err, "close '%s'", tmp);
    return st_into_place(tmp, key, rc, err);
}

static int local_put_if_match(struct ckpt_storage *st, const char *key,
                              const void *data, size_t len,
                              const char *version, char *new_version,
                              struct ckpt_err *err)
{
    char *lock;
    int fd = lock_sidecar(key, &lock, err);
    if (fd < 0)
        return -1;
    int rc = local_check(st, key, version, 0, err);
    if (rc == 0)
        rc = local_replace(key, data, len, err);
    unlock_sidecar(fd, lock);
    if (rc == 0 && new_version)
        md5_hex(data, len, new_version);
    return rc;
}

static int local_delete_if_match(struct ckpt_storage *st, const char *key,
                                 const char *version, struct ckpt_err *err)
{
    char *lock;
    int fd = lock_sidecar(key, &lock, err);
    if (fd < 0)
        return -1;
    int rc = local_check(st, key, version, 1, err);
    if (rc == 0 && ckpt_gate_held_unlink(key) != 0 && errno != ENOENT)
        rc = ckpt_err_sys(err, "delete '%s'", key);
    unlock_sidecar(fd, lock);
    return rc < 0 ? -1 : 0;
}

/* ---- object storage ---- */

/* The version an S3-protocol reply names: generation on GCS, else ETag. */
static int reply_version(struct ckpt_storage *st, const struct http_resp *r,
                         const char *what, char *out, struct ckpt_err *err)
{
    struct s3 *s3 = st->impl;
    const char *v = s3->scheme == CKPT_SCHEME_GS ? r->generation : r->etag;
    if (!*v)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: the reply names "
                            "no %s, so it cannot be compared-and-swapped",
                            what, s3->scheme == CKPT_SCHEME_GS
                            ? "x-goog-generation" : "ETag");
    snprintf(out, CKPT_VERSION_MAX, "%s", v);
    return 0;
}

static void set_condition(struct ckpt_storage *st, struct s3_req *r,
                          const char *version, char *buf, size_t cap)
{
    struct s3 *s3 = st->impl;
    if (s3->scheme == CKPT_SCHEME_GS) {
        s3_req_header(r, "x-goog-if-generation-match", version);
    } else {
        snprintf(buf, cap, "\"%s\"", version);
        s3_req_header(r, "If-Match", buf);
    }
}

static int s3_get_versioned(struct ckpt_storage *st, const char *key,
                            size_t max, char **data, size_t *len,
                            char *version, struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "GET", key);
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc = s3_exec(st->impl, &r, &resp, what, err);
    if (rc == 0 && resp.body.len > max)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: larger than %zu bytes",
                          what, max);
    if (rc == 0)
        rc = reply_version(st, &resp, what, version, err);
    if (rc == 0) {
        *data = ckpt_buf_detach(&resp.body, len);
    }
    free(what);
    http_resp_release(&resp);
    return rc;
}

/* A condition lost: 412, a missing object (If-Match on PUT), or S3's 409
 * ConditionalRequestConflict (a concurrent conditional write to the key
 * won; AWS says retry, which here means re-read: the version we hold is
 * about to be stale). */
static int lost_condition(const struct ckpt_err *err)
{
    return err->code == CKPT_EEXIST || err->code == CKPT_ENOTFOUND ||
           err->http_status == 409;
}

/* After retries, a 412 may answer our own first attempt, which succeeded
 * unseen: the object then holds exactly our bytes (a lease's bytes are
 * unique: token and times). */
static int was_ours(struct ckpt_storage *st, const char *key,
                    const void *data, size_t len, char *new_version)
{
    char *cur = NULL, v[CKPT_VERSION_MAX];
    size_t n = 0;
    struct ckpt_err e2;
    if (s3_get_versioned(st, key, len + 1, &cur, &n, v, &e2) != 0)
        return 0;
    int same = n == len && !memcmp(cur, data, len);
    free(cur);
    if (same && new_version)
        snprintf(new_version, CKPT_VERSION_MAX, "%s", v);
    return same;
}

static int s3_put_if_match(struct ckpt_storage *st, const char *key,
                           const void *data, size_t len, const char *version,
                           char *new_version, struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "PUT", key);
    char md5[25], cond[CKPT_VERSION_MAX + 4];
    ckpt_md5_b64(data, len, md5, NULL);
    s3_req_header(&r, "Content-MD5", md5);
    set_condition(st, &r, version, cond, sizeof(cond));
    r.body = data;
    r.body_len = len;
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc = s3_exec(st->impl, &r, &resp, what, err);
    if (rc == 0 && new_version)
        rc = reply_version(st, &resp, what, new_version, err);
    if (rc != 0 && lost_condition(err)) {
        int retried = strstr(err->msg, "attempts") != NULL;
        if (retried && was_ours(st, key, data, len, new_version)) {
            rc = 0;
        } else {
            ckpt_err_set(err, CKPT_EEXIST, "%s: changed since read", what);
            err->http_status = 412;
        }
    }
    free(what);
    http_resp_release(&resp);
    return rc;
}

static int s3_delete_if_match(struct ckpt_storage *st, const char *key,
                              const char *version, struct ckpt_err *err)
{
    struct s3_req r;
    s3_req_init(&r, "DELETE", key);
    char cond[CKPT_VERSION_MAX + 4];
    set_condition(st, &r, version, cond, sizeof(cond));
    struct http_resp resp;
    http_resp_init(&resp);
    char *what = s3_what(st, key);
    int rc = s3_exec(st->impl, &r, &resp, what, err);
    if (rc != 0 && err->code == CKPT_ENOTFOUND)
        rc = 0;     /* already gone: nothing of anyone's was deleted */
    else if (rc != 0 && lost_condition(err))
        ckpt_err_set(err, CKPT_EEXIST, "%s: changed since read", what);
    free(what);
    http_resp_release(&resp);
    return rc;
}

/* ---- dispatch ---- */

static int supported(struct ckpt_storage *st, const char *key,
                     struct ckpt_err *err)
{
    if (!strcmp(st->ops->name, "local") || !strcmp(st->ops->name, "s3"))
        return 0;
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: no compare-and-swap "
                        "on %s storage", key, st->ops->name);
}

int ckpt_storage_get_versioned(struct ckpt_storage *st, const char *key,
                               size_t max, char **data, size_t *len,
                               char version[CKPT_VERSION_MAX],
                               struct ckpt_err *err)
{
    if (supported(st, key, err) != 0)
        return -1;
    if (!ckpt_storage_is_local(st))
        return s3_get_versioned(st, key, max, data, len, version, err);
    if (ckpt_storage_read_all(st, key, max, data, len, err) != 0)
        return -1;
    md5_hex(*data, *len, version);
    return 0;
}

int ckpt_storage_put_if_match(struct ckpt_storage *st, const char *key,
                              const void *data, size_t len,
                              const char *version,
                              char new_version[CKPT_VERSION_MAX],
                              struct ckpt_err *err)
{
    if (supported(st, key, err) != 0)
        return -1;
    if (!ckpt_storage_is_local(st))
        return s3_put_if_match(st, key, data, len, version, new_version,
                               err);
    return local_put_if_match(st, key, data, len, version, new_version, err);
}

int st_delete_if_match(struct ckpt_storage *st, const char *key,
                       const char *version, struct ckpt_err *err)
{
    if (supported(st, key, err) != 0)
        return -1;
    if (!ckpt_storage_is_local(st))
        return s3_delete_if_match(st, key, version, err);
    return local_delete_if_match(st, key, version, err);
}
