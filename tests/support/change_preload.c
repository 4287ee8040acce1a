/*
 * change_preload.c - LD_PRELOAD shim for tests: a file that a trainer
 * changes while `ckpt process` is deleting the run's source. The first
 * time the process unlinks anything below CKPT_TEST_CHANGE_UNDER (unlink
 * or unlinkat), the file CKPT_TEST_CHANGE is changed first, as
 * CKPT_TEST_CHANGE_MODE says:
 *   grow     4096 bytes appended (a shard still being written);
 *   rewrite  its first bytes overwritten in place, same size, and its
 *            modification time put back (`touch -r`): only ctime tells.
 * That moment is after the run was judged and before any file of a
 * dropped step is deleted (they go last), so the race is exact.
 */
#include "preload.h"
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_int fired;  /* (deletes run on several worker threads) */

static void change(void)
{
    const char *path = getenv("CKPT_TEST_CHANGE");
    const char *mode = getenv("CKPT_TEST_CHANGE_MODE");
    char junk[4096];
    memset(junk, 0x5a, sizeof(junk));
    struct stat sb;
    if (!path || stat(path, &sb) != 0) {
        perror("change_preload: stat");
        return;
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        perror("change_preload: open");
        return;
    }
    size_t n = mode && !strcmp(mode, "rewrite")
             ? ((size_t)sb.st_size < sizeof(junk) ? (size_t)sb.st_size
                                                  : sizeof(junk))
             : sizeof(junk);
    off_t at = mode && !strcmp(mode, "rewrite") ? 0 : sb.st_size;
    if (pwrite(fd, junk, n, at) != (ssize_t)n)
        perror("change_preload: write");
    if (mode && !strcmp(mode, "rewrite")) {
        struct timespec ts[2] = { sb.st_atim, sb.st_mtim };
        if (futimens(fd, ts) != 0)
            perror("change_preload: futimens");
    }
    close(fd);
}

static void maybe_change(int dfd, const char *name)
{
    const char *under = getenv("CKPT_TEST_CHANGE_UNDER");
    char path[PATH_MAX * 2], dir[PATH_MAX];
    if (atomic_load(&fired) || !under || !name)
        return;
    if (dfd != AT_FDCWD && name[0] != '/') {
        char link[64];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", dfd);
        ssize_t l = readlink(link, dir, sizeof(dir) - 1);
        if (l < 0)
            return;
        dir[l] = '\0';
        snprintf(path, sizeof(path), "%s/%s", dir, name);
    } else {
        snprintf(path, sizeof(path), "%s", name);
    }
    size_t n = strlen(under);
    if (strncmp(path, under, n) != 0 || path[n] != '/' ||
        atomic_exchange(&fired, 1))
        return;
    change();
}

int unlink(const char *path)
{
    maybe_change(AT_FDCWD, path);
    return REAL("unlink", int (*)(const char *))(path);
}

int unlinkat(int dfd, const char *name, int flags)
{
    if (!(flags & AT_REMOVEDIR))
        maybe_change(dfd, name);
    return REAL("unlinkat", int (*)(int, const char *, int))(dfd, name, flags);
}
