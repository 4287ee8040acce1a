/*
 * unlink_fail_preload.c - LD_PRELOAD shim for tests: a source file that
 * cannot be deleted (a read-only parent directory, which root ignores).
 * Every unlink or unlinkat (not of a directory) of a path whose last
 * component is CKPT_TEST_UNLINK_FAIL fails with EACCES; everything else
 * goes to libc.
 */
#include "preload.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int refused(const char *path)
{
    const char *who = getenv("CKPT_TEST_UNLINK_FAIL");
    if (!who || !*who || !path)
        return 0;
    const char *base = strrchr(path, '/');
    return !strcmp(base ? base + 1 : path, who);
}

int unlink(const char *path)
{
    if (refused(path)) {
        errno = EACCES;
        return -1;
    }
    return REAL("unlink", int (*)(const char *))(path);
}

int unlinkat(int dirfd, const char *path, int flags)
{
    if (!(flags & AT_REMOVEDIR) && refused(path)) {
        errno = EACCES;
        return -1;
    }
    return REAL("unlinkat", int (*)(int, const char *, int))(dirfd, path,
                                                            flags);
}
