/*
 * spool.c - one decompression pass for every reader of a compressed
 * archive (ckpt/archive.h "Spools").
 *
 * `ckpt process` reads a run archive in several phases (judge, unshard,
 * upload, verify), and each used to decompress it again. A spool reads it
 * once: every file member's bytes go to a private directory, by the
 * member's own path below SPOOL/t when it can stand there (the last copy
 * of a name stored twice wins, as after `tar x`; earlier copies, and
 * members whose path is taken by a directory or lies below a file, go to
 * SPOOL/m/INDEX). The list of members, in archive order, is kept in
 * memory. Attached, the spool answers ckpt_archive_open for its archive:
 * the members replay in the same order with the same names, sizes, types
 * and links, so every reader sees what it would have decompressed.
 *
 * Only an archive read to its proper end is spooled (tar end-of-archive
 * blocks, the decoder's end of stream and checksums: what
 * ckpt_archive_damage checks); anything else fails the spool, and the
 * readers go to the archive itself as before. A replay is refused (the
 * archive is read instead) once the archive is not the version that was
 * spooled. The registry of attached spools and their replay are
 * replay.c's.
 */
#include "archive_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckpt/gate.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"

/* What this file removes of its own (gate.h). */
#define OWN_SCRATCH CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, \
                          "the archive spool ckpt made")

#define COPY_BUF (1u << 20)
#define READ_REPORT (4u << 20)  /* on_read at least this often */
/* A member file's mode: what a copy at DEST is created with (umask
 * applies), since a hashed spool's files may become DEST's own
 * (ckpt_archive_spooled); the spool directory (0700) keeps them private
 * meanwhile. */
#define SPOOL_MODE 0666

static int write_all(int fd, const char *p, size_t n, const char *path,
                     struct ckpt_err *err)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return ckpt_err_sys(err, "write '%s'", path);
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A file for member i: at its own path below root when it can stand
 * there (an earlier copy of the name moves aside), else aside. The open
 * descriptor, *path its name (malloced), or -1. */
static int member_file(struct ckpt_archive_spool *s, size_t i, char **path,
                       struct ckpt_err *err)
{
    char *own = ckpt_path_join(s->root, s->m[i].path);
    char *parent = ckpt_path_dirname(own);
    struct ckpt_err e = CKPT_ERR_INIT;
    int fd = -1;
    if (ckpt_mkdirs(parent, &e) == 0) {
        fd = open(own, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SPOOL_MODE);
        for (size_t j = i; fd < 0 && errno == EEXIST && j-- > 0;) {
            if (!s->m[j].file || strcmp(s->m[j].file, own) != 0)
                continue;
            /* A name stored twice: the later copy takes its place. */
            char *aside = ckpt_xasprintf("%s/m/%zu", s->dir, j);
            if (ckpt_gate_rename(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a spool "
                                               "file moved aside in the "
                                               "spool"), own, aside,
                                 NULL) != 0) {
                free(aside);
                break;
            }
            free(s->m[j].file);
            s->m[j].file = aside;
            /* (the rename moved its ctime) */
            struct ckpt_err e2 = CKPT_ERR_INIT;
            if (s->m[j].hashed &&
                ckpt_file_ver_get(aside, -1, &s->m[j].ver, &e2) != 0)
                s->m[j].hashed = 0;
            fd = open(own, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SPOOL_MODE);
        }
    }
    free(parent);
    if (fd >= 0) {
        *path = own;
        return fd;
    }
    /* A directory of that name, a file where a directory belongs, a name
     * too long: kept aside, and the spool is no tree to read in place. */
    free(own);
    s->natural = 0;
    *path = ckpt_xasprintf("%s/m/%zu", s->dir, i);
    fd = open(*path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SPOOL_MODE);
    if (fd < 0) {
        ckpt_err_sys(err, "create '%s'", *path);
        free(*path);
        *path = NULL;
    }
    return fd;
}

/* ---- the disk budget ---- */

void ckpt_spool_budget_init(struct ckpt_spool_budget *b, const char *dir,
                            uint64_t limit)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->mu, NULL);
    b->dir = dir;
    b->limit = limit;
}

void ckpt_spool_budget_destroy(struct ckpt_spool_budget *b)
{
    pthread_mutex_destroy(&b->mu);
}

/* Before a member's bytes go to the spool: within the budget's limit (all
 * its spools together) and its directory's disk rule. */
static int budget_take(struct ckpt_archive_spool *s, uint64_t bytes,
                       struct ckpt_err *err)
{
    struct ckpt_spool_budget *b = s->budget;
    if (!b)
        return 0;
    char a[32];
    int rc = ckpt_archive_spool_room(b->dir, bytes, err);
    pthread_mutex_lock(&b->mu);
    if (rc == 0 && b->limit &&
        (b->used > b->limit || b->limit - b->used < bytes))
        rc = ckpt_err_set(err, CKPT_EIO, "its members pass --spool-limit "
                          "%s", ckpt_fmt_size(b->limit, a, sizeof(a)));
    if (rc == 0) {
        b->used += bytes;
        s->reserved += bytes;
    } else {
        b->refused = 1;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static void budget_give_back(struct ckpt_archive_spool *s)
{
    struct ckpt_spool_budget *b = s->budget;
    if (!b || !s->reserved)
        return;
    pthread_mutex_lock(&b->mu);
    b->used -= s->reserved;
    pthread_mutex_unlock(&b->mu);
    s->reserved = 0;
}

/* ---- the pass ---- */

/* The member's bytes, from the archive to fd (and through the MD5 when
 * md5 is not NULL). */
static int copy_bytes(struct ckpt_archive_spool *s, struct ckpt_archive *a,
                      int fd, const char *path, char *buf, EVP_MD_CTX *md5,
                      const struct ckpt_spool_cfg *cfg, uint64_t *told,
                      struct ckpt_err *err)
{
    for (;;) {
        size_t n;
        if (ckpt_archive_read(a, buf, COPY_BUF, &n, err) != 0)
            return -1;
        if (!n)
            return 0;
        if (write_all(fd, buf, n, path, err) != 0)
            return -1;
        if (md5)
            EVP_DigestUpdate(md5, buf, n);
        s->bytes += n;
        uint64_t got = ckpt_archive_bytes_fetched(a);
        if (cfg->on_read && got - *told >= READ_REPORT) {
            cfg->on_read(cfg->ud, got, ckpt_archive_file_size(a));
            *told = got;
        }
    }
}

static int copy_member(struct ckpt_archive_spool *s, struct ckpt_archive *a,
                       size_t i, char *buf, const struct ckpt_spool_cfg *cfg,
                       uint64_t *told, struct ckpt_err *err)
{
    struct sp_member *m = &s->m[i];
    if (budget_take(s, m->size, err) != 0)
        return -1;
    char *path;
    int fd = member_file(s, i, &path, err);
    if (fd < 0)
        return -1;
    m->file = path;
    EVP_MD_CTX *md5 = NULL;
    if (cfg->hash) {
        md5 = EVP_MD_CTX_new();
        if (!md5 || EVP_DigestInit_ex(md5, EVP_md5(), NULL) != 1) {
            EVP_MD_CTX_free(md5);  /* (no MD5 here: copies hash again) */
            md5 = NULL;
        }
    }
    int rc = copy_bytes(s, a, fd, path, buf, md5, cfg, told, err);
    unsigned len = 16;
    struct ckpt_err e2 = CKPT_ERR_INIT;   /* (not hashed: read again) */
    /* As the pass leaves it: a reader that takes the file itself checks
     * it is still this (ckpt_spooled_same). */
    if (rc == 0 && md5 && EVP_DigestFinal_ex(md5, m->md5, &len) == 1 &&
        ckpt_file_ver_get(path, fd, &m->ver, &e2) == 0 &&
        m->ver.size == m->size)
        m->hashed = 1;
    EVP_MD_CTX_free(md5);
    if (close(fd) != 0 && rc == 0)
        rc = ckpt_err_sys(err, "close '%s'", path);
    return rc;
}

static int spool_pass(struct ckpt_archive_spool *s,
                      const struct ckpt_spool_cfg *cfg, struct ckpt_err *err)
{
    struct ckpt_archive *a;
    if (ckpt_archive_open(&a, s->st, s->key, err) != 0)
        return -1;
    char *buf = ckpt_xmalloc(COPY_BUF);
    struct ckpt_archive_entry e;
    uint64_t told = 0;
    int rc;
    while ((rc = ckpt_archive_next(a, &e, err)) == 1) {
        s->m = ckpt_xreallocarray(s->m, s->n + 1, sizeof(*s->m));
        struct sp_member *m = &s->m[s->n++];
        memset(m, 0, sizeof(*m));
        m->path = ckpt_xstrdup(e.path);
        m->link = e.hardlink ? ckpt_xstrdup(e.hardlink) : NULL;
        m->size = e.size;
        m->type = e.type;
        if (e.type == CKPT_ENTRY_FILE && *e.path &&
            copy_member(s, a, s->n - 1, buf, cfg, &told, err) != 0) {
            rc = -1;
            break;
        }
    }
    free(buf);
    if (rc == 0 && ckpt_archive_damage(a))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s",
                          ckpt_archive_damage(a));
    s->kind = ckpt_archive_kind(a);
    s->size = ckpt_archive_file_size(a);
    s->fetched = ckpt_archive_bytes_fetched(a);
    if (cfg->on_read)
        cfg->on_read(cfg->ud, s->fetched, s->size);
    ckpt_archive_close(a);
    return rc;
}

int ckpt_archive_spool(struct ckpt_archive_spool **out,
                       struct ckpt_storage *st, const char *key,
                       const struct ckpt_spool_cfg *cfg,
                       struct ckpt_err *err)
{
    struct ckpt_archive_spool *s = ckpt_xcalloc(1, sizeof(*s));
    s->st = st;
    s->key = ckpt_xstrdup(key);
    s->natural = 1;
    s->budget = cfg->budget;
    /* A killed process's spool goes with the next one made here. */
    ckpt_temp_sweep(cfg->dir);
    s->dir = ckpt_temp_path(cfg->dir);
    s->root = ckpt_path_join(s->dir, "t");
    char *aside = ckpt_path_join(s->dir, "m");
    int rc = arc_ver_get(st, key, &s->ver, err);
    if (rc == 0)
        rc = ckpt_mkdirs(cfg->dir, err);
    if (rc == 0 && (mkdir(s->dir, 0700) != 0 || mkdir(aside, 0700) != 0))
        rc = ckpt_err_sys(err, "create directory '%s'", s->dir);
    free(aside);
    if (rc == 0)
        rc = spool_pass(s, cfg, err);
    struct sp_ver after;
    if (rc == 0 && (arc_ver_get(st, key, &after, err) != 0 ||
                    !arc_ver_same(&after, &s->ver)))
        rc = err->code ? -1 : ckpt_err_set(err, CKPT_EFORMAT,
                                           "the archive changed while it "
                                           "was read");
    if (rc != 0) {
        ckpt_archive_spool_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int ckpt_archive_spool_room(const char *dir, uint64_t bytes,
                            struct ckpt_err *err)
{
    const uint64_t gib = 1024ULL * 1024 * 1024;
    struct statvfs vs;
    char a[32], b[32];
    if (statvfs(dir, &vs) != 0)
        return 0;   /* not made yet: the spool's own mkdir says why */
    uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
    uint64_t floor = (uint64_t)vs.f_blocks * vs.f_frsize / 20;
    if (floor > gib)
        floor = gib;
    if (avail < floor || avail - floor < bytes)
        return ckpt_err_set(err, CKPT_EIO, "%s would leave less than %s "
                            "free (%s free)", dir,
                            ckpt_fmt_size(floor, a, sizeof(a)),
                            ckpt_fmt_size(avail, b, sizeof(b)));
    return 0;
}

int ckpt_spooled_same(const struct ckpt_spooled *sp, struct ckpt_err *err)
{
    struct ckpt_file_ver now;
    if (ckpt_file_ver_get(sp->path, -1, &now, err) != 0)
        return -1;
    const char *what = ckpt_file_ver_diff(&sp->ver, &now, 1);
    if (what)
        return ckpt_err_set(err, CKPT_EIO, "'%s' changed since the archive "
                            "was spooled (%s differs)", sp->path, what);
    return 0;
}

uint64_t ckpt_archive_spool_bytes(const struct ckpt_archive_spool *s)
{
    return s->bytes;
}

void ckpt_archive_spool_free(struct ckpt_archive_spool *s)
{
    if (!s)
        return;
    ckpt_archive_spool_detach(s);
    if (s->dir)
        (void)ckpt_gate_rm_tree(OWN_SCRATCH, s->dir, NULL);
    budget_give_back(s);
    for (size_t i = 0; i < s->n; i++) {
        free(s->m[i].path);
        free(s->m[i].link);
        free(s->m[i].file);
    }
    free(s->m);
    free(s->key);
    free(s->dir);
    free(s->root);
    free(s);
}

