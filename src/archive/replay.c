/*
 * replay.c - attached spools and their replay (archive_int.h): the
 * registry ckpt_archive_spool_attach puts a spool in, and the replay that
 * ckpt_archive_open (archive.c) gives instead of decompressing the archive
 * again, while the archive is the version that was spooled. The spool's
 * pass itself is spool.c's.
 */
#include "archive_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/util.h"

struct arc_replay {
    const struct ckpt_archive_spool *s;
    size_t i;                   /* members given so far */
    int fd;                     /* the current member's file, or -1 */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ckpt_archive_spool *reg;

/* A stat time in nanoseconds. */
static int64_t arc_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

int arc_ver_get(struct ckpt_storage *st, const char *key, struct sp_ver *v,
                struct ckpt_err *err)
{
    memset(v, 0, sizeof(*v));
    if (ckpt_storage_is_local(st)) {
        struct stat sb;
        if (stat(key, &sb) != 0)
            return ckpt_err_sys(err, "stat '%s'", key);
        v->size = (uint64_t)sb.st_size;
        v->mtime = (int64_t)sb.st_mtim.tv_sec;
        v->mtime_ns = arc_ns(&sb.st_mtim);
        v->ctime_ns = arc_ns(&sb.st_ctim);
        v->ino = (uint64_t)sb.st_ino;
        v->dev = (uint64_t)sb.st_dev;
        return 0;
    }
    struct ckpt_stat sb;
    if (ckpt_storage_stat(st, key, &sb, err) != 0)
        return -1;
    v->size = sb.size;
    v->mtime = sb.mtime;
    snprintf(v->etag, sizeof(v->etag), "%s", sb.etag);
    return 0;
}

int arc_ver_same(const struct sp_ver *a, const struct sp_ver *b)
{
    return a->size == b->size && a->mtime == b->mtime &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
           a->ino == b->ino && a->dev == b->dev && !strcmp(a->etag, b->etag);
}

/* Is the archive still the version spooled? */
static int current(const struct ckpt_archive_spool *s)
{
    struct sp_ver now;
    struct ckpt_err err = CKPT_ERR_INIT;
    return arc_ver_get(s->st, s->key, &now, &err) == 0 && arc_ver_same(&now, &s->ver);
}

void ckpt_archive_spool_attach(struct ckpt_archive_spool *s)
{
    pthread_mutex_lock(&reg_mu);
    if (!s->attached) {
        s->next = reg;
        reg = s;
        s->attached = 1;
    }
    pthread_mutex_unlock(&reg_mu);
}

void ckpt_archive_spool_detach(struct ckpt_archive_spool *s)
{
    pthread_mutex_lock(&reg_mu);
    for (struct ckpt_archive_spool **p = &reg; s->attached && *p;
         p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            s->attached = 0;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

/* The attached spool of (st, key), reg_mu held: the same key, or a local
 * file spelled another way (clean's judge reads "./a.tar.gz" as
 * "a.tar.gz"). */
static const struct ckpt_archive_spool *find(struct ckpt_storage *st,
                                             const char *key)
{
    for (const struct ckpt_archive_spool *s = reg; s; s = s->next)
        if (s->st == st && !strcmp(s->key, key))
            return s;
    struct stat sb;
    if (!reg || !ckpt_storage_is_local(st) || stat(key, &sb) != 0)
        return NULL;
    for (const struct ckpt_archive_spool *s = reg; s; s = s->next)
        if (s->st == st && s->ver.ino == (uint64_t)sb.st_ino &&
            s->ver.dev == (uint64_t)sb.st_dev)
            return s;
    return NULL;
}

char *ckpt_archive_spool_root(struct ckpt_storage *st, const char *key)
{
    pthread_mutex_lock(&reg_mu);
    const struct ckpt_archive_spool *s = find(st, key);
    char *root = s && s->natural ? ckpt_xstrdup(s->root) : NULL;
    pthread_mutex_unlock(&reg_mu);
    if (root && !current(s)) {
        free(root);
        root = NULL;
    }
    return root;
}

/* ---- replay (archive.c) ---- */

struct arc_replay *arc_replay_open(struct ckpt_storage *st, const char *key)
{
    pthread_mutex_lock(&reg_mu);
    const struct ckpt_archive_spool *s = reg ? find(st, key) : NULL;
    pthread_mutex_unlock(&reg_mu);
    /* (an attached spool outlives its readers: its owner detaches it
     * after the last one) */
    if (!s || !current(s))
        return NULL;
    struct arc_replay *r = ckpt_xcalloc(1, sizeof(*r));
    r->s = s;
    r->fd = -1;
    return r;
}

int arc_replay_next(struct arc_replay *r, struct ckpt_archive_entry *e,
                    struct ckpt_err *err)
{
    (void)err;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->i >= r->s->n)
        return 0;
    const struct sp_member *m = &r->s->m[r->i++];
    memset(e, 0, sizeof(*e));
    e->path = m->path;
    e->size = m->size;
    e->type = m->type;
    e->data_offset = CKPT_NO_OFFSET;
    e->hardlink = m->link;
    return 1;
}

int arc_replay_read(struct arc_replay *r, void *buf, size_t len, size_t *n,
                    struct ckpt_err *err)
{
    *n = 0;
    const struct sp_member *m = r->i ? &r->s->m[r->i - 1] : NULL;
    if (!m || !m->file)
        return 0;
    if (r->fd < 0) {
        r->fd = open(m->file, O_RDONLY | O_CLOEXEC);
        if (r->fd < 0)
            return ckpt_err_sys(err, "open '%s'", m->file);
    }
    for (;;) {
        ssize_t got = read(r->fd, buf, len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return ckpt_err_sys(err, "read '%s'", m->file);
        *n = (size_t)got;
        return 0;
    }
}

int arc_replay_spooled(const struct arc_replay *r, struct ckpt_spooled *out)
{
    const struct sp_member *m = r->i ? &r->s->m[r->i - 1] : NULL;
    if (!m || !m->hashed || m->link || m->type != CKPT_ENTRY_FILE ||
        r->fd >= 0)
        return 0;
    memset(out, 0, sizeof(*out));
    out->path = ckpt_xstrdup(m->file);
    memcpy(out->md5, m->md5, 16);
    out->ver = m->ver;
    return 1;
}

uint64_t arc_replay_file_size(const struct arc_replay *r)
{
    return r->s->size;
}

uint64_t arc_replay_fetched(const struct arc_replay *r)
{
    return r->s->fetched;
}

enum ckpt_archive_kind arc_replay_kind(const struct arc_replay *r)
{
    return r->s->kind;
}

void arc_replay_close(struct arc_replay *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}
