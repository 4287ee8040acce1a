/*
 * upload_ident.c - are two locations the same place, or one inside the
 * other? (storage.h ckpt_storage_relation). `upload --delete-source`
 * deletes SRC after checking DEST: if DEST is SRC under another spelling,
 * that check reads the source itself and the delete loses the only copy.
 * So local paths are compared by what they are (device and inode), never
 * by how they are written, and object-storage locations by endpoint,
 * bucket and key.
 */
#include "storage_int.h"
#include "s3_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/util.h"

struct fid {
    dev_t dev;
    ino_t ino;
};

static int fid_of(const char *path, struct fid *out)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -1;
    out->dev = sb.st_dev;
    out->ino = sb.st_ino;
    return 0;
}

static int fid_eq(const struct fid *a, const struct fid *b)
{
    return a->dev == b->dev && a->ino == b->ino;
}

/* Drop the last component of an absolute canonical path ("/" stays). */
static void pop_component(struct ckpt_buf *b)
{
    while (b->len > 1 && b->ptr[b->len - 1] != '/')
        b->len--;
    if (b->len > 1)
        b->len--;
    b->ptr[b->len] = '\0';
}

/* Append the components of rest ("x/../y") to the canonical path in b,
 * as `mkdir -p` would create them: none of them exists, so none is a
 * symlink and ".." is lexical. */
static void add_rest(struct ckpt_buf *b, const char *rest)
{
    char *dup = ckpt_xstrdup(rest), *save = NULL;
    for (char *c = strtok_r(dup, "/", &save); c;
         c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, "."))
            continue;
        if (!strcmp(c, "..")) {
            pop_component(b);
            continue;
        }
        if (b->len > 1)
            ckpt_buf_addch(b, '/');
        ckpt_buf_addstr(b, c);
    }
    free(dup);
}

/* The absolute path path names with no symlink, "." or "..": realpath of
 * its deepest existing ancestor, then the components that do not exist
 * yet. Malloced; NULL when not even an ancestor resolves. */
static char *canonical(const char *path)
{
    char real[PATH_MAX];
    struct ckpt_buf abs = CKPT_BUF_INIT, out = CKPT_BUF_INIT;
    if (path[0] != '/') {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)))
            return NULL;
        ckpt_buf_addf(&abs, "%s/", cwd);
    }
    ckpt_buf_addstr(&abs, path);
    /* Cut components off the end until what is left resolves. */
    size_t cut = abs.len;
    for (;;) {
        char save = abs.ptr[cut];
        abs.ptr[cut] = '\0';
        int ok = realpath(cut ? abs.ptr : "/", real) != NULL;
        abs.ptr[cut] = save;
        if (ok)
            break;
        if (errno != ENOENT && errno != ENOTDIR) {
            ckpt_buf_release(&abs);
            return NULL;
        }
        while (cut > 0 && abs.ptr[cut - 1] == '/')
            cut--;
        while (cut > 0 && abs.ptr[cut - 1] != '/')
            cut--;
    }
    ckpt_buf_addstr(&out, real);
    add_rest(&out, abs.ptr + cut);
    ckpt_buf_release(&abs);
    size_t n;
    return ckpt_buf_detach(&out, &n);
}

/* Is `want` the file at path or at one of its ancestors? 1: path
 * itself, 2: a strict ancestor, 0: neither. Ancestors of a canonical
 * path are real parents, so a bind mount of `want` is found too. */
static int on_path(const char *canon, const struct fid *want)
{
    char *p = ckpt_xstrdup(canon);
    int hit = 0, self = 1;
    for (;;) {
        struct fid f;
        if (fid_of(p, &f) == 0 && fid_eq(&f, want)) {
            hit = self ? 1 : 2;
            break;
        }
        if (!strcmp(p, "/"))
            break;
        char *slash = strrchr(p, '/');
        if (slash == p)
            slash[1] = '\0';
        else
            *slash = '\0';
        self = 0;
    }
    free(p);
    return hit;
}

static enum ckpt_loc_rel key_relation(const char *a, const char *b);

/* By the files themselves where they exist (a bind mount or hard-linked
 * directory of the other is found), else by canonical paths (a place
 * not made yet, a --tmp-dir or DEST that a run will create). */
static enum ckpt_loc_rel local_relation(const char *a, const char *b)
{
    struct fid fa, fb;
    enum ckpt_loc_rel rel = CKPT_LOC_APART;
    int ha = fid_of(a, &fa) == 0, hb = fid_of(b, &fb) == 0;
    char *cb = canonical(b), *ca = canonical(a);
    int hit = ha && cb ? on_path(cb, &fa) : 0;
    if (hit == 1)
        rel = CKPT_LOC_SAME;
    else if (hit == 2)
        rel = CKPT_LOC_B_INSIDE_A;
    else if (ca && hb && on_path(ca, &fb))
        rel = CKPT_LOC_A_INSIDE_B;
    else if (ca && cb && (!ha || !hb))
        rel = key_relation(ca + 1, cb + 1);  /* (past the leading '/') */
    free(ca);
    free(cb);
    return rel;
}

/* One service and bucket: the same endpoint (any case) and bucket. */
static int same_bucket(const struct ckpt_storage *sa,
                       const struct ckpt_storage *sb)
{
    const struct s3 *a = sa->impl, *b = sb->impl;
    if (sa == sb)
        return 1;
    return a && b && a->conf.endpoint && b->conf.endpoint &&
           sa->loc.bucket && sb->loc.bucket &&
           !strcasecmp(a->conf.endpoint, b->conf.endpoint) &&
           !strcmp(sa->loc.bucket, sb->loc.bucket);
}

/* Keys as ckpt_loc_parse leaves them: no leading or trailing '/'. */
static enum ckpt_loc_rel key_relation(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (!strcmp(a, b))
        return CKPT_LOC_SAME;
    if (!na || (nb > na && !strncmp(a, b, na) && b[na] == '/'))
        return CKPT_LOC_B_INSIDE_A;
    if (!nb || (na > nb && !strncmp(a, b, nb) && a[nb] == '/'))
        return CKPT_LOC_A_INSIDE_B;
    return CKPT_LOC_APART;
}

static char *trimmed(const char *key)
{
    while (*key == '/')
        key++;
    char *k = ckpt_xstrdup(key);
    size_t n = strlen(k);
    while (n > 0 && k[n - 1] == '/')
        k[--n] = '\0';
    return k;
}

enum ckpt_loc_rel ckpt_storage_relation(struct ckpt_storage *sa,
                                        const char *a,
                                        struct ckpt_storage *sb,
                                        const char *b)
{
    int la = ckpt_storage_is_local(sa), lb = ckpt_storage_is_local(sb);
    if (la && lb)
        return local_relation(a, b);
    if (la || lb || !same_bucket(sa, sb))
        return CKPT_LOC_APART;
    char *ka = trimmed(a), *kb = trimmed(b);
    enum ckpt_loc_rel rel = key_relation(ka, kb);
    free(ka);
    free(kb);
    return rel;
}

int ckpt_storage_same_file(struct ckpt_storage *sa, const char *a,
                           struct ckpt_storage *sb, const char *b)
{
    int la = ckpt_storage_is_local(sa), lb = ckpt_storage_is_local(sb);
    if (la && lb) {
        struct fid fa, fb;
        return fid_of(a, &fa) == 0 && fid_of(b, &fb) == 0 &&
               fid_eq(&fa, &fb);
    }
    if (la || lb || !same_bucket(sa, sb))
        return 0;
    return ckpt_storage_relation(sa, a, sb, b) == CKPT_LOC_SAME;
}
