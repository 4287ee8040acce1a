/*
 * srcver.c - which version of a local source file is being copied. A
 * file rewritten in place with its modification time put back (`touch
 * -r`, some checkpoint writers) keeps its size and mtime, so those alone
 * would let a copy mix two versions and a journal skip the new one. The
 * kernel moves ctime on every write and a replaced file has another
 * inode: size, mtime and ctime (ns) and inode together tell.
 */
#include "upload_int.h"

#include <stdio.h>
#include <sys/stat.h>

int ckpt_srcver_get(const char *path, int follow, struct ckpt_srcver *v,
                    struct ckpt_err *err)
{
    struct stat sb;
    if ((follow ? stat(path, &sb) : lstat(path, &sb)) != 0)
        return ckpt_err_sys(err, "stat '%s'", path);
    v->size = (uint64_t)sb.st_size;
    v->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 +
                  sb.st_mtim.tv_nsec;
    v->ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 +
                  sb.st_ctim.tv_nsec;
    v->ino = (uint64_t)sb.st_ino;
    v->regular = S_ISREG(sb.st_mode);
    return 0;
}

const char *ckpt_srcver_diff(const struct ckpt_srcver *was,
                             const struct ckpt_srcver *now)
{
    if (!now->regular)
        return "type";
    if (now->size != was->size)
        return "size";
    if (now->mtime_ns != was->mtime_ns)
        return "modification time";
    if (now->ctime_ns != was->ctime_ns)
        return "ctime";
    if (now->ino != was->ino)
        return "inode";
    return NULL;
}

/* The engine's own copy of the version (upload_int.h). */
static void to_up(const struct ckpt_srcver *c, struct srcver *v)
{
    v->size = c->size;
    v->mtime_ns = c->mtime_ns;
    v->ctime_ns = c->ctime_ns;
    v->ino = c->ino;
    v->regular = c->regular;
}

static void from_up(const struct srcver *v, struct ckpt_srcver *c)
{
    c->size = v->size;
    c->mtime_ns = v->mtime_ns;
    c->ctime_ns = v->ctime_ns;
    c->ino = v->ino;
    c->regular = v->regular;
}

int up_srcver_get(const char *path, struct srcver *v, struct ckpt_err *err)
{
    struct ckpt_srcver c = { 0 };
    if (ckpt_srcver_get(path, 1, &c, err) != 0)
        return -1;
    to_up(&c, v);
    return 0;
}

const char *up_srcver_diff(const struct srcver *was, const struct srcver *now)
{
    struct ckpt_srcver a, b;
    from_up(was, &a);
    from_up(now, &b);
    return ckpt_srcver_diff(&a, &b);
}

void up_srcver_sig(const struct srcver *v, char *out, size_t n)
{
    /* 'l', not the 'm' of mtime-only signatures: a journal written before
     * never vouches for a file it cannot tell apart. */
    snprintf(out, n, "l%lld:c%lld:i%llu", (long long)v->mtime_ns,
             (long long)v->ctime_ns, (unsigned long long)v->ino);
}
