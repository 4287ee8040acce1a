/*
 * storage.c - location parsing and dispatch to the backends.
 */
#include "storage_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/buf.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"

static const struct {
    const char *prefix;
    enum ckpt_scheme scheme;
} schemes[] = {
    { "s3://", CKPT_SCHEME_S3 },
    { "r2://", CKPT_SCHEME_R2 },
    { "gs://", CKPT_SCHEME_GS },
};

const char *ckpt_scheme_prefix(enum ckpt_scheme s)
{
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (schemes[i].scheme == s)
            return schemes[i].prefix;
    return "";
}

/* Drop trailing slashes, but keep a lone "/". */
static void trim_slashes(char *s)
{
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/')
        s[--n] = '\0';
}

int ckpt_loc_parse(struct ckpt_loc *loc, const char *s, struct ckpt_err *err)
{
    memset(loc, 0, sizeof(*loc));
    if (!s || !*s)
        return ckpt_err_set(err, CKPT_EUSAGE, "empty location");
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        size_t pl = strlen(schemes[i].prefix);
        if (strncmp(s, schemes[i].prefix, pl) != 0)
            continue;
        const char *b = s + pl;
        const char *slash = strchr(b, '/');
        size_t blen = slash ? (size_t)(slash - b) : strlen(b);
        if (blen == 0)
            return ckpt_err_set(err, CKPT_EUSAGE,
                                "'%s': missing bucket name", s);
        loc->scheme = schemes[i].scheme;
        loc->bucket = ckpt_xstrndup(b, blen);
        const char *k = slash ? slash + 1 : "";
        while (*k == '/')
            k++;
        loc->key = ckpt_xstrdup(k);
        size_t kl = strlen(loc->key);
        while (kl > 0 && loc->key[kl - 1] == '/')
            loc->key[--kl] = '\0';
        loc->display = ckpt_xstrdup(s);
        return 0;
    }
    const char *p = s;
    if (strncmp(s, "file://", 7) == 0) {
        p = s + 7;
        if (!*p)
            return ckpt_err_set(err, CKPT_EUSAGE, "'%s': empty path", s);
    } else if (strstr(s, "://")) {
        return ckpt_err_set(err, CKPT_EUSAGE,
                            "'%s': unknown scheme (use a path, file://, "
                            "s3://, r2:// or gs://)", s);
    }
    loc->scheme = CKPT_SCHEME_LOCAL;
    loc->key = ckpt_xstrdup(p);
    trim_slashes(loc->key);
    loc->display = ckpt_xstrdup(s);
    return 0;
}

void ckpt_loc_release(struct ckpt_loc *loc)
{
    if (!loc)
        return;
    free(loc->bucket);
    free(loc->key);
    free(loc->display);
    memset(loc, 0, sizeof(*loc));
}

char *ckpt_loc_format(const struct ckpt_loc *loc, const char *key)
{
    /* A local path with "://" in it (file://s3://b/k) is printed as
     * file://...: printed bare, it would name another location. */
    if (loc->scheme == CKPT_SCHEME_LOCAL)
        return strstr(key, "://") ? ckpt_xasprintf("file://%s", key)
                                  : ckpt_xstrdup(key);
    return ckpt_xasprintf("%s%s/%s", ckpt_scheme_prefix(loc->scheme),
                          loc->bucket, key);
}

int ckpt_storage_open(struct ckpt_storage **out, const struct ckpt_loc *loc,
                      const struct ckpt_storage_cfg *cfg, struct ckpt_err *err)
{
    struct ckpt_storage *st = ckpt_xcalloc(1, sizeof(*st));
    st->loc.scheme = loc->scheme;
    st->loc.bucket = loc->bucket ? ckpt_xstrdup(loc->bucket) : NULL;
    st->loc.key = ckpt_xstrdup(loc->key ? loc->key : "");
    st->loc.display = ckpt_xstrdup(loc->display ? loc->display : "");
    if (cfg)
        st->cfg = *cfg;
    int rc = loc->scheme == CKPT_SCHEME_LOCAL ? ckpt_local_open(st, err)
                                              : ckpt_s3_open(st, err);
    if (rc != 0) {
        ckpt_loc_release(&st->loc);
        free(st);
        return -1;
    }
    *out = st;
    return 0;
}

void ckpt_storage_close(struct ckpt_storage *st)
{
    if (!st)
        return;
    if (st->ops && st->ops->close)
        st->ops->close(st);
    ckpt_loc_release(&st->loc);
    free(st);
}

int ckpt_storage_is_local(const struct ckpt_storage *st)
{
    return st->loc.scheme == CKPT_SCHEME_LOCAL;
}

int ckpt_storage_jobs(const struct ckpt_storage *st)
{
    return st->cfg.jobs;
}

int ckpt_etag_is_md5(const char *etag, int *multipart)
{
    *multipart = 0;
    if (strspn(etag, "0123456789abcdefABCDEF") != 32 ||
        (etag[32] && etag[32] != '-'))
        return 0;
    *multipart = etag[32] == '-';
    return 1;
}

char *ckpt_storage_display(const struct ckpt_storage *st, const char *key)
{
    return ckpt_loc_format(&st->loc, key);
}

int ckpt_storage_stat(struct ckpt_storage *st, const char *key,
                      struct ckpt_stat *out, struct ckpt_err *err)
{
    memset(out, 0, sizeof(*out));
    return st->ops->stat(st, key, out, err);
}

int ckpt_storage_list(struct ckpt_storage *st, const char *dir, unsigned flags,
                      ckpt_list_fn fn, void *ud, struct ckpt_err *err)
{
    return st->ops->list(st, dir, flags, fn, ud, err);
}

int ckpt_storage_read(struct ckpt_storage *st, const char *key, uint64_t off,
                      void *buf, size_t len, size_t *nread,
                      struct ckpt_err *err)
{
    return ckpt_storage_read_if(st, key, NULL, off, buf, len, nread, err);
}

int ckpt_storage_read_if(struct ckpt_storage *st, const char *key,
                         const char *etag, uint64_t off, void *buf,
                         size_t len, size_t *nread, struct ckpt_err *err)
{
    *nread = 0;
    int rc = etag && *etag && st->ops->read_if
        ? st->ops->read_if(st, key, etag, off, buf, len, nread, err)
        : st->ops->read(st, key, off, buf, len, nread, err);
    if (rc != 0)
        return -1;
    atomic_fetch_add(&st->bytes_read, *nread);
    return 0;
}

int ckpt_storage_read_all(struct ckpt_storage *st, const char *key,
                          size_t max, char **data, size_t *len,
                          struct ckpt_err *err)
{
    struct ckpt_stat sb;
    if (ckpt_storage_stat(st, key, &sb, err) != 0)
        return -1;
    if (sb.type == CKPT_ENTRY_DIR)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: is a directory", key);
    if (sb.size > max)
        return ckpt_err_set(err, CKPT_EFORMAT,
                            "%s: %llu bytes, more than the %zu allowed", key,
                            (unsigned long long)sb.size, max);
    struct ckpt_buf b = CKPT_BUF_INIT;
    uint64_t off = 0;
    /* Read until EOF rather than trusting stat: the file may be growing or
     * shrinking under a concurrent writer. */
    for (;;) {
        ckpt_buf_grow(&b, 65536);
        size_t got;
        size_t room = b.cap - b.len;
        if (ckpt_storage_read(st, key, off, b.ptr + b.len, room, &got,
                              err) != 0) {
            ckpt_buf_release(&b);
            return -1;
        }
        b.len += got;
        b.ptr[b.len] = '\0';
        off += got;
        if (b.len > max) {
            ckpt_buf_release(&b);
            return ckpt_err_set(err, CKPT_EFORMAT,
                                "%s: more than the %zu bytes allowed", key,
                                max);
        }
        if (got < room)
            break;
    }
    *data = ckpt_buf_detach(&b, len);
    return 0;
}

int ckpt_storage_writer_open(struct ckpt_storage *st, const char *key,
                             uint64_t size_hint, struct ckpt_writer **out,
                             struct ckpt_err *err)
{
    return st->ops->writer_open(st, key, size_hint, out, err);
}

int ckpt_writer_write(struct ckpt_writer *w, const void *data, size_t len,
                      struct ckpt_err *err)
{
    return w->ops->write(w, data, len, err);
}

int ckpt_writer_commit(struct ckpt_writer *w, struct ckpt_err *err)
{
    return w->ops->commit(w, err);
}

void ckpt_writer_abort(struct ckpt_writer *w)
{
    if (w)
        w->ops->abort(w);
}

int ckpt_storage_put(struct ckpt_storage *st, const char *key,
                     const void *data, size_t len, struct ckpt_err *err)
{
    struct ckpt_writer *w;
    if (ckpt_storage_writer_open(st, key, len, &w, err) != 0)
        return -1;
    if (ckpt_writer_write(w, data, len, err) != 0) {
        ckpt_writer_abort(w);
        return -1;
    }
    return ckpt_writer_commit(w, err);
}

int ckpt_storage_put_if_absent(struct ckpt_storage *st, const char *key,
                               const void *data, size_t len,
                               struct ckpt_err *err)
{
    if (!st->ops->put_if_absent)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED,
                            "%s: conditional create not supported by %s", key,
                            st->ops->name);
    return st->ops->put_if_absent(st, key, data, len, err);
}

int ckpt_storage_mount_fault(struct ckpt_storage *st, const char *dir,
                             struct ckpt_err *err)
{
    char *first = NULL;
    size_t n = 0;
    struct stat sb;
    if (!ckpt_storage_is_local(st) || lstat(dir, &sb) != 0 ||
        !S_ISDIR(sb.st_mode))
        return 0;
    int rc = ckpt_local_find_mount(dir, &first, &n, err);
    if (rc > 0)
        ckpt_err_set(err, CKPT_EUNSAFE, "'%s' holds a mount point (another "
                     "filesystem): %s; not deleting across it", dir, first);
    free(first);
    return rc == 0 ? 0 : -1;
}

uint64_t ckpt_storage_bytes_read(const struct ckpt_storage *st)
{
    return atomic_load(&st->bytes_read);
}

int ckpt_storage_probe(struct ckpt_storage *st, const char *key,
                       struct ckpt_err *err)
{
    return st->ops->probe ? st->ops->probe(st, key, err) : 0;
}

void ckpt_storage_stats(const struct ckpt_storage *st,
                        struct ckpt_storage_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (st->ops->stats)
        st->ops->stats(st, out);
}
