/*
 * vanish_preload.c - LD_PRELOAD shim for tests: a directory that another
 * worker deletes at the worst moment. The first time the process opens
 * the directory named by CKPT_TEST_VANISH (open or opendir with
 * O_DIRECTORY, after CKPT_TEST_VANISH_SKIP earlier opens of it, default
 * 0), the directory is renamed to "<name>.vanished" first, so that this
 * open and every later one find nothing there - as when a concurrent
 * `ckpt process` deleted the run between our stat and our listing. With
 * CKPT_TEST_VANISH_EMPTY set, only what the directory holds moves to
 * "<name>.vanished/" and the directory stays, empty: another worker that
 * deleted a run's files and not yet its directory.
 */
/* open() and open64() are both defined (preload.h). */
#undef _FILE_OFFSET_BITS
static void on_open(const char *path, int flags);
#define PRELOAD_ON_OPEN on_open
#include "preload.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

static int seen;

/* Moves every entry of dir into the new directory to. */
static void empty_into(const char *dir, const char *to)
{
    DIR *d = REAL("opendir", DIR * (*)(const char *))(dir);
    struct dirent *e;
    if (!d || mkdir(to, 0755) != 0) {
        perror("vanish_preload: empty");
        if (d)
            closedir(d);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char a[4096], b[4096];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(a, sizeof(a), "%s/%s", dir, e->d_name);
        snprintf(b, sizeof(b), "%s/%s", to, e->d_name);
        if (rename(a, b) != 0)
            perror("vanish_preload: rename");
    }
    closedir(d);
}

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
    if (getenv("CKPT_TEST_VANISH_EMPTY")) {
        empty_into(path, to);
        return;
    }
    if (rename(path, to) != 0)
        perror("vanish_preload: rename");
}

static void on_open(const char *path, int flags)
{
    if (flags & O_DIRECTORY)
        maybe_vanish(path);
}

DIR *opendir(const char *path)
{
    maybe_vanish(path);
    return REAL("opendir", DIR * (*)(const char *))(path);
}
