/*
 * preload.h - the plumbing that the LD_PRELOAD shims in tests/support
 * share: libc's own function behind a wrapper, and open()/open64() that
 * call a hook of the shim first. Include it before any other header.
 *
 * A shim that watches opens declares its hook and names it first:
 *   static void on_open(const char *path, int flags);
 *   #define PRELOAD_ON_OPEN on_open
 *   #include "preload.h"
 * and #undefs _FILE_OFFSET_BITS above that: the redirect of open() to
 * open64() that the build asks for would make them one symbol.
 */
#ifndef CKPT_TESTS_PRELOAD_H
#define CKPT_TESTS_PRELOAD_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

/* libc's own NAME (the next one in lookup order), as a TYPE pointer. */
#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

/* The mode argument, present only with O_CREAT or O_TMPFILE. */
#define PRELOAD_MODE_OF(flags, mode)                                        \
    do {                                                                    \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                              \
            va_list ap;                                                     \
            va_start(ap, flags);                                            \
            (mode) = (mode_t)va_arg(ap, int);                               \
            va_end(ap);                                                     \
        }                                                                   \
    } while (0)

#ifdef PRELOAD_ON_OPEN
static int preload_open(const char *name, const char *path, int flags,
                        mode_t mode)
{
    PRELOAD_ON_OPEN(path, flags);
    return REAL(name, int (*)(const char *, int, ...))(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    PRELOAD_MODE_OF(flags, mode);
    return preload_open("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    PRELOAD_MODE_OF(flags, mode);
    return preload_open("open64", path, flags, mode);
}
#endif

#endif
