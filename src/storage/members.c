/*
 * members.c - the members of a plain tar archive as a read-only storage.
 *
 * A plain (uncompressed) tar stores each member's bytes contiguously at a
 * known offset, so a checkpoint inside one can be read in place, without
 * extracting it: keys are "<archive key>/<member path>", and a read of a
 * member is a read of the archive at the member's offset. The archive may
 * itself be local (one descriptor, pread) or remote (ranged GETs through
 * its storage). Everything that writes fails with CKPT_EUNSUPPORTED.
 */
#include "storage_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/util.h"

struct mem {
    struct ckpt_storage *under;    /* borrowed */
    char *archive;                 /* key of the archive in under */
    int fd;                        /* local archive, or -1 */
    struct ckpt_member *v;         /* sorted by path; paths owned */
    size_t n;
};

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct ckpt_member *)a)->path,
                  ((const struct ckpt_member *)b)->path);
}

/* The member path of key, or NULL when key is not inside the archive. */
static const char *rel_of(const struct mem *m, const char *key)
{
    size_t al = strlen(m->archive);
    if (strncmp(key, m->archive, al) != 0)
        return NULL;
    if (key[al] == '\0')
        return "";
    return key[al] == '/' ? key + al + 1 : NULL;
}

static const struct ckpt_member *find(const struct mem *m, const char *rel)
{
    struct ckpt_member k = { rel, 0, 0 };
    return bsearch(&k, m->v, m->n, sizeof(*m->v), by_path);
}

/* First member whose path sorts at or after prefix. */
static size_t lower(const struct mem *m, const char *prefix)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m->v[mid].path, prefix) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int mem_stat(struct ckpt_storage *st, const char *key,
                    struct ckpt_stat *out, struct ckpt_err *err)
{
    const struct mem *m = st->impl;
    const char *rel = rel_of(m, key);
    const struct ckpt_member *f = rel ? find(m, rel) : NULL;
    if (f) {
        out->size = f->size;
        out->type = CKPT_ENTRY_FILE;
        return 0;
    }
    if (rel) {
        size_t rl = strlen(rel), i;
        char *prefix = ckpt_xasprintf("%s/", rel);
        i = lower(m, rl ? prefix : "");
        int dir = i < m->n && (!rl || !strncmp(m->v[i].path, prefix, rl + 1));
        free(prefix);
        if (dir) {
            out->type = CKPT_ENTRY_DIR;
            return 0;
        }
    }
    return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': no such member", key);
}

static int mem_list(struct ckpt_storage *st, const char *dir, unsigned flags,
                    ckpt_list_fn fn, void *ud, struct ckpt_err *err)
{
    const struct mem *m = st->impl;
    const char *rel = rel_of(m, dir);
    if (!rel)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': not in the archive",
                            dir);
    char *prefix = *rel ? ckpt_xasprintf("%s/", rel) : ckpt_xstrdup("");
    size_t pl = strlen(prefix), i = lower(m, prefix);
    const char *lastdir = NULL;
    size_t lastlen = 0;
    int rc = 0;
    for (; rc == 0 && i < m->n && !strncmp(m->v[i].path, prefix, pl); i++) {
        const char *name = m->v[i].path + pl;
        const char *slash = strchr(name, '/');
        struct ckpt_entry e = { name, m->v[i].size, 0, CKPT_ENTRY_FILE, "",
                                0, 0 };
        if (slash && !(flags & CKPT_LIST_RECURSIVE)) {
            /* One level: each subdirectory once (members are sorted). */
            size_t l = (size_t)(slash - name);
            if (lastdir && l == lastlen && !strncmp(name, lastdir, l))
                continue;
            lastdir = name;
            lastlen = l;
            char *d = ckpt_xstrndup(name, l);
            e = (struct ckpt_entry){ d, 0, 0, CKPT_ENTRY_DIR, "", 0, 0 };
            rc = fn(ud, &e);
            free(d);
            continue;
        }
        rc = fn(ud, &e);
    }
    free(prefix);
    return rc;
}

static int mem_read(struct ckpt_storage *st, const char *key, uint64_t off,
                    void *buf, size_t len, size_t *nread,
                    struct ckpt_err *err)
{
    const struct mem *m = st->impl;
    const char *rel = rel_of(m, key);
    const struct ckpt_member *f = rel ? find(m, rel) : NULL;
    if (!f)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': no such member",
                            key);
    if (off >= f->size) {
        *nread = 0;
        return 0;
    }
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    if (m->fd < 0)
        return ckpt_storage_read(m->under, m->archive, f->offset + off, buf,
                                 len, nread, err);
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(m->fd, (char *)buf + done, len - done,
                          (off_t)(f->offset + off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ckpt_err_sys(err, "read '%s'", m->archive);
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *nread = done;
    return 0;
}

static int mem_writer_open(struct ckpt_storage *st, const char *key,
                           uint64_t hint, struct ckpt_writer **out,
                           struct ckpt_err *err)
{
    (void)st;
    (void)hint;
    (void)out;
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': archive members are "
                        "read-only", key);
}

static int mem_put_if_absent(struct ckpt_storage *st, const char *key,
                             const void *data, size_t len,
                             struct ckpt_err *err)
{
    (void)data;
    (void)len;
    return mem_writer_open(st, key, 0, NULL, err);
}

static int mem_del(struct ckpt_storage *st, const char *key,
                   struct ckpt_err *err)
{
    return mem_writer_open(st, key, 0, NULL, err);
}

static void mem_close(struct ckpt_storage *st)
{
    struct mem *m = st->impl;
    if (!m)
        return;
    if (m->fd >= 0)
        close(m->fd);
    for (size_t i = 0; i < m->n; i++)
        free((char *)m->v[i].path);
    free(m->v);
    free(m->archive);
    free(m);
}

static const struct ckpt_storage_ops mem_ops = {
    .name = "tar-members",
    .stat = mem_stat,
    .list = mem_list,
    .read = mem_read,
    .writer_open = mem_writer_open,
    .put_if_absent = mem_put_if_absent,
    .del = mem_del,
    .delete_tree = mem_del,
    .close = mem_close,
};

int ckpt_storage_open_members(struct ckpt_storage **out,
                              struct ckpt_storage *under, const char *archive,
                              const struct ckpt_member *v, size_t n,
                              struct ckpt_err *err)
{
    struct mem *m = ckpt_xcalloc(1, sizeof(*m));
    m->under = under;
    m->archive = ckpt_xstrdup(archive);
    m->fd = -1;
    m->v = ckpt_xcalloc(n + 1, sizeof(*m->v));
    for (size_t i = 0; i < n; i++) {
        m->v[m->n] = v[i];
        m->v[m->n++].path = ckpt_xstrdup(v[i].path);
    }
    ckpt_sort(m->v, m->n, sizeof(*m->v), by_path);
    if (ckpt_storage_is_local(under) &&
        (m->fd = ckpt_local_open_read(archive, CKPT_OPEN_FOLLOW, err)) < 0) {
        int rc = -1;
        struct ckpt_storage tmp = { .impl = m };
        mem_close(&tmp);
        return rc;
    }
    struct ckpt_storage *st = ckpt_xcalloc(1, sizeof(*st));
    st->loc.scheme = under->loc.scheme;
    st->loc.bucket = under->loc.bucket ? ckpt_xstrdup(under->loc.bucket)
                                       : NULL;
    st->loc.key = ckpt_xstrdup(archive);
    st->loc.display = ckpt_xstrdup(under->loc.display ? under->loc.display
                                                      : "");
    st->cfg = under->cfg;
    st->ops = &mem_ops;
    st->impl = m;
    *out = st;
    return 0;
}
