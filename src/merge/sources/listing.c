/*
 * sources/listing.c - the directories and small files of the checkpoint being read,
 * wherever it is: a local directory, object storage (s3/r2/gs) or the
 * members of a plain tar (j->src.st), so that every planner lists rank files,
 * finds arrays and reads its metadata in place, as sources/source.c reads data.
 *
 * A directory is listed once and looked up in memory: a 1,024-rank step
 * costs one LIST, not a HEAD per rank file, and a zarr array's chunks are
 * found by one listing instead of a stat each. Local listings go through
 * the local storage backend, which reports symbolic links as links (never
 * followed); a link counts as a file, as stat() would have found it.
 */
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct uns_dent *)a)->name,
                  ((const struct uns_dent *)b)->name);
}

static int add_ent(void *ud, const struct ckpt_entry *e)
{
    struct uns_dir *d = ud;
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->v = ckpt_xreallocarray(d->v, d->cap, sizeof(*d->v));
    }
    d->v[d->n].name = ckpt_xstrdup(e->name);
    d->v[d->n].type = e->type;
    d->v[d->n].size = e->size;
    d->v[d->n].etag = ckpt_xstrdup(e->etag ? e->etag : "");
    d->n++;
    return 0;
}

/* The storage dir is listed through: the job's, else a local one. */
static int with_storage(struct ujob *j, const char *dir,
                        struct ckpt_storage **st, struct ckpt_err *err)
{
    struct ckpt_loc loc = { CKPT_SCHEME_LOCAL, NULL, (char *)dir,
                            (char *)dir };
    struct ckpt_storage_cfg cfg = { .jobs = 1 };
    if (j->src.st) {
        *st = j->src.st;
        return 0;
    }
    return ckpt_storage_open(st, &loc, &cfg, err);
}

int uns_fs_list(struct ujob *j, const char *dir, int recursive,
                struct uns_dir *d, struct ckpt_err *err)
{
    struct ckpt_storage *st = NULL;
    memset(d, 0, sizeof(*d));
    if (with_storage(j, dir, &st, err) != 0)
        return -1;
    int rc = ckpt_storage_list(st, dir, recursive ? CKPT_LIST_RECURSIVE : 0,
                               add_ent, d, err);
    if (st != j->src.st)
        ckpt_storage_close(st);
    /* A missing directory lists empty, as a prefix without objects does:
     * the caller says which file it needed. */
    if (rc != 0 && err->code == CKPT_ENOTFOUND)
        rc = 0;
    if (rc != 0) {
        uns_fs_free(d);
        return -1;
    }
    ckpt_sort(d->v, d->n, sizeof(*d->v), by_name);
    return 0;
}

const struct uns_dent *uns_fs_find(const struct uns_dir *d, const char *name)
{
    struct uns_dent k = { (char *)name, CKPT_ENTRY_FILE, 0, NULL };
    return d->n ? bsearch(&k, d->v, d->n, sizeof(*d->v), by_name) : NULL;
}

int uns_fs_has_file(const struct uns_dir *d, const char *name)
{
    const struct uns_dent *e = uns_fs_find(d, name);
    return e && (e->type == CKPT_ENTRY_FILE || e->type == CKPT_ENTRY_LINK);
}

void uns_fs_free(struct uns_dir *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].name);
        free(d->v[i].etag);
    }
    free(d->v);
    memset(d, 0, sizeof(*d));
}

int uns_fs_is_file(struct ujob *j, const char *path)
{
    uint64_t size;
    struct ckpt_err err = CKPT_ERR_INIT;
    return uns_src_stat(j, path, &size, &err) == 0;
}

/* Read len bytes at 0 of path, through j->src.st (as it was when it had
 * ETag etag: a replaced object fails) or a local descriptor; one byte more
 * is asked for, so a file that grew since it was listed fails rather than
 * being read in part. */
static int read_exact(struct ujob *j, const char *path, const char *etag,
                      char *b, size_t len, struct ckpt_err *err)
{
    size_t got = 0;
    int rc;
    if (j->src.st) {
        rc = ckpt_storage_read_if(j->src.st, path, etag, 0, b, len + 1, &got,
                                  err);
    } else {
        int fd = ckpt_local_open_read(path, CKPT_OPEN_FOLLOW, err);
        if (fd < 0)
            return -1;
        rc = 0;
        while (got < len + 1) {
            ssize_t n = pread(fd, b + got, len + 1 - got, (off_t)got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                rc = ckpt_err_sys(err, "read '%s'", path);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        close(fd);
    }
    if (rc == 0 && got != len)
        rc = ckpt_err_set(err, CKPT_EIO, "'%s' changed during read (%llu "
                          "bytes, listed with %llu)", path,
                          (unsigned long long)got, (unsigned long long)len);
    return rc;
}

int uns_fs_read(struct ujob *j, const char *path, const struct uns_dent *e,
                size_t max, char **data, size_t *len, struct ckpt_err *err)
{
    char etag[sizeof(((struct usrc *)0)->etag)] = "";
    uint64_t size;
    if (e && e->type == CKPT_ENTRY_FILE) {
        size = e->size;
        snprintf(etag, sizeof(etag), "%s", e->etag);
    } else {
        /* Not listed (or a local link): its stat says what it is. */
        struct usrc s;
        if (uns_src_file(j, path, 0, &s, err) != 0)
            return -1;
        if (s.fd >= 0)
            close(s.fd);
        size = s.size;
        memcpy(etag, s.etag, sizeof(etag));
    }
    if (size > max)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s' is larger than %zu "
                            "bytes", path, max);
    /* Room for the byte past the end that read_exact asks for. */
    char *b = ckpt_xmalloc((size_t)size + 2);
    if (read_exact(j, path, etag, b, (size_t)size, err) != 0) {
        free(b);
        return -1;
    }
    b[size] = 0;
    *data = b;
    *len = (size_t)size;
    return 0;
}
