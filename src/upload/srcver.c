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

int up_srcver_get(const char *path, struct srcver *v, struct ckpt_err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
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

const char *up_srcver_diff(const struct srcver *was, const struct srcver *now)
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

void up_srcver_sig(const struct srcver *v, char *out, size_t n)
{
    /* 'l', not the 'm' of mtime-only signatures: a journal written before
     * never vouches for a file it cannot tell apart. */
    snprintf(out, n, "l%lld:c%lld:i%llu", (long long)v->mtime_ns,
             (long long)v->ctime_ns, (unsigned long long)v->ino);
}
