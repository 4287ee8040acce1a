/*
 * vanish_preload.c - LD_PRELOAD shim for tests: a directory that another
 * worker deletes at the worst moment. The first time the process opens
 * the directory named by CKPT_TEST_VANISH (open or opendir with
 * O_DIRECTORY, after CKPT_TEST_VANISH_SKIP earlier opens of it, default
 * 0), the directory is renamed to "<name>.vanished" first, so that this
 * open and every later one find nothing there - as when a concurrent
 * `ckpt process` deleted the run between our stat and our listing.
 */
/* Both open() and open64() are defined here: the 64-bit redirect of
 * open() to open64() that the build's _FILE_OFFSET_BITS asks for would
 * make them one symbol. */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static int seen;

static void maybe_vanish(const char *path)
{
    const char *who = getenv("CKPT_TEST_VANISH");
    if (!who || !path || strcmp(who, path))
        return;
    const char *skip = getenv("CKPT_TEST_VANISH_SKIP");
    if (seen++ != (skip ? atoi(skip) : 0))
        return;
    char to[4096];
    snprintf(to, sizeof(to), "%s.vanished", path);
    if (rename(path, to) != 0)
        perror("vanish_preload: rename");
}

static int open_impl(const char *name, const char *path, int flags,
                     mode_t mode)
{
    int (*real)(const char *, int, ...) =
        (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, name);
    if (flags & O_DIRECTORY)
        maybe_vanish(path);
    return real(path, flags, mode);
}

/* The mode argument, present only with O_CREAT or O_TMPFILE. */
#define MODE_OF(flags, mode)                                                \
    do {                                                                    \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                              \
            va_list ap;                                                     \
            va_start(ap, flags);                                            \
            (mode) = (mode_t)va_arg(ap, int);                               \
            va_end(ap);                                                     \
        }                                                                   \
    } while (0)

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    MODE_OF(flags, mode);
    return open_impl("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    MODE_OF(flags, mode);
    return open_impl("open64", path, flags, mode);
}

DIR *opendir(const char *path)
{
    DIR *(*real)(const char *) =
        (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
    maybe_vanish(path);
    return real(path);
}
