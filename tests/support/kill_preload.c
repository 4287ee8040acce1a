/*
 * kill_preload.c - LD_PRELOAD shim for tests: SIGKILL at the exact moment
 * a delete starts. The process kills itself (the whole process, every
 * thread) right after its first unlink or rename of a path at or below
 * CKPT_TEST_KILL_AT (an absolute path) succeeded: a step with its first
 * file gone, or a run just renamed aside to .RUN.ckpt-del-HOST-PID. A
 * kill from outside, sent when a watcher sees the change, lands
 * milliseconds later, after a small step is gone whole.
 * With CKPT_TEST_KILL_SKIP=N the first N such calls are let through.
 * Two more triggers, each on its own (CKPT_TEST_KILL_AT unset):
 * CKPT_TEST_KILL_RMDIR=PREFIX kills right after a directory whose
 * absolute path starts with PREFIX and has no '/' after it is removed
 * (".../R/.RUN.ckpt-del-": a renamed-aside run's last rmdir; ".../R/RUN":
 * a run's own directory, the last thing its delete removes), and
 * CKPT_TEST_KILL_TO=PATH right after a rename onto PATH (a state object
 * committed: ".../DEST/.ckpt-process/RUN.json").
 * (tests/crash/crash.py's process scenarios, tests/integration/
 * process_drop_crash.py.)
 */
#include "preload.h"
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int calls;

/* dirfd/name as an absolute path (AT_FDCWD: the working directory). */
static int full_path(int dirfd, const char *name, char *out, size_t cap)
{
    if (name[0] == '/')
        return snprintf(out, cap, "%s", name) < (int)cap ? 0 : -1;
    char dir[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(dir, sizeof(dir)))
            return -1;
    } else {
        char link[64];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, dir, sizeof(dir) - 1);
        if (n < 0)
            return -1;
        dir[n] = '\0';
    }
    return snprintf(out, cap, "%s/%s", dir, name) < (int)cap ? 0 : -1;
}

static int watched(int dirfd, const char *name)
{
    const char *at = getenv("CKPT_TEST_KILL_AT");
    char path[PATH_MAX];
    if (!at || !*at || !name || full_path(dirfd, name, path,
                                          sizeof(path)) != 0)
        return 0;
    size_t n = strlen(at);
    return !strncmp(path, at, n) && (path[n] == '\0' || path[n] == '/');
}

/* Called after a successful delete or rename of a watched path. */
static void maybe_kill(void)
{
    const char *skip = getenv("CKPT_TEST_KILL_SKIP");
    if (atomic_fetch_add(&calls, 1) >= (skip ? atoi(skip) : 0))
        kill(getpid(), SIGKILL);
}

/* CKPT_TEST_KILL_RMDIR: the directory removed is PREFIX... with no '/'
 * after the prefix. */
static int rmdir_watched(int dirfd, const char *name)
{
    const char *at = getenv("CKPT_TEST_KILL_RMDIR");
    char path[PATH_MAX];
    if (!at || !*at || !name || full_path(dirfd, name, path,
                                          sizeof(path)) != 0)
        return 0;
    size_t n = strlen(at);
    return !strncmp(path, at, n) && !strchr(path + n, '/');
}

/* CKPT_TEST_KILL_TO: a rename onto exactly PATH. */
static int to_watched(int dirfd, const char *name)
{
    const char *at = getenv("CKPT_TEST_KILL_TO");
    char path[PATH_MAX];
    return at && *at && name &&
           full_path(dirfd, name, path, sizeof(path)) == 0 &&
           !strcmp(path, at);
}

int unlink(const char *path)
{
    int hit = watched(AT_FDCWD, path);
    int rc = REAL("unlink", int (*)(const char *))(path);
    if (rc == 0 && hit)
        maybe_kill();
    return rc;
}

int unlinkat(int dirfd, const char *path, int flags)
{
    int hit = (flags & AT_REMOVEDIR) ? rmdir_watched(dirfd, path)
                                     : watched(dirfd, path);
    int rc = REAL("unlinkat", int (*)(int, const char *, int))(dirfd, path,
                                                              flags);
    if (rc == 0 && hit)
        maybe_kill();
    return rc;
}

int rmdir(const char *path)
{
    int hit = rmdir_watched(AT_FDCWD, path);
    int rc = REAL("rmdir", int (*)(const char *))(path);
    if (rc == 0 && hit)
        maybe_kill();
    return rc;
}

int rename(const char *from, const char *to)
{
    int hit = watched(AT_FDCWD, from) || to_watched(AT_FDCWD, to);
    int rc = REAL("rename", int (*)(const char *, const char *))(from, to);
    if (rc == 0 && hit)
        maybe_kill();
    return rc;
}

int renameat(int fromfd, const char *from, int tofd, const char *to)
{
    int hit = watched(fromfd, from) || to_watched(tofd, to);
    int rc = REAL("renameat", int (*)(int, const char *, int,
                                      const char *))(fromfd, from, tofd, to);
    if (rc == 0 && hit)
        maybe_kill();
    return rc;
}

int renameat2(int fromfd, const char *from, int tofd, const char *to,
              unsigned flags)
{
    int hit = watched(fromfd, from) || to_watched(tofd, to);
    int rc = REAL("renameat2", int (*)(int, const char *, int, const char *,
                                       unsigned))(fromfd, from, tofd, to,
                                                  flags);
    if (rc == 0 && hit)
        maybe_kill();
    return rc;
}
