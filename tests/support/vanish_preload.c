/*
 * vanish_preload.c - LD_PRELOAD shim for tests: a directory that another
 * worker deletes at the worst moment. The first time the process opens
 * the directory named by CKPT_TEST_VANISH (open or opendir with
 * O_DIRECTORY, after CKPT_TEST_VANISH_SKIP earlier opens of it, default
 * 0), the directory is renamed to "<name>.vanished" first, so that this
 * open and every later one find nothing there - as when a concurrent
 * `ckpt process` deleted the run between our stat and our listing.
 * With CKPT_TEST_VANISH_EMPTY=1 an empty directory is made in its place
 * at once: another worker deleted the run's files and kept its directory
 * (as `ckpt process` does until its state says "done").
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
    const char *empty = getenv("CKPT_TEST_VANISH_EMPTY");
    if (empty && *empty == '1' && mkdir(path, 0755) != 0)
        perror("vanish_preload: mkdir");
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
