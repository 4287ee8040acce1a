/*
 * age_preload.c - LD_PRELOAD shim for tests of the live-run guard, which
 * reads the newer of a file's mtime and ctime.
 *
 * CKPT_TEST_OLD_CTIME=N: stat(2), statx(2) and friends report every ctime N
 * seconds earlier, so that a tree aged with utime() (touch -d, os.utime)
 * is as old as its mtimes say (a test cannot set a ctime in the past),
 * while a change still moves the ctime (the unchanged checks see it).
 *
 * CKPT_TEST_WRITE_ON=PATH, CKPT_TEST_WRITE=FILE: the first time the
 * process opens PATH (not as a directory), FILE is created first (its
 * directories too) with a few bytes: a job that writes a new step while
 * `ckpt process` is uploading the run, at an exact moment.
 * CKPT_TEST_WRITE_ON_NTH=N: at the Nth open of PATH instead of the first.
 * CKPT_TEST_RENAME_TO=DEST: FILE is renamed to DEST instead of written:
 * a writer that commits by rename (OLMo's stepN-unfinished becoming
 * stepN, an archive replaced whole) while `ckpt clean` judges a run.
 * CKPT_TEST_WRITE_ON_CALL=stat: the Nth stat(2) of PATH by name (stat,
 * lstat, fstatat and their 64-bit names) instead of its Nth open: a
 * moment before a re-check has read anything of PATH.
 * CKPT_TEST_RUN=CMD: `/bin/sh -c CMD` is run then instead (FILE not
 * needed), and waited for: a change that takes more than one call (a
 * directory swapped for a symlink, a bind mount). It runs without the
 * CKPT_TEST_* trigger variables; its failure is printed on stderr.
 */
/* Both the plain and the 64-bit names are defined here (open() and open64()
 * in preload.h): the redirect that the build's _FILE_OFFSET_BITS asks for
 * would make them one symbol. */
#undef _FILE_OFFSET_BITS
static void on_open(const char *path, int flags);
#define PRELOAD_ON_OPEN on_open
#include "preload.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static int written;

static void mkdirs_for(const char *file)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s", file);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(p, 0777);
        *s = '/';
    }
}

static void run_cmd(const char *cmd)
{
    static const char *const vars[] = {
        "CKPT_TEST_WRITE_ON", "CKPT_TEST_WRITE", "CKPT_TEST_WRITE_ON_NTH",
        "CKPT_TEST_RENAME_TO", "CKPT_TEST_WRITE_ON_CALL", "CKPT_TEST_RUN",
    };
    char *dup = strdup(cmd);
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    int rc = dup ? system(dup) : -1;
    if (rc != 0)
        fprintf(stderr, "age_preload: '%s' failed (%d)\n", cmd, rc);
    free(dup);
}

/* call: "open" or "stat", what the caller is about to do to path. */
static void maybe_write(const char *call, const char *path, int flags)
{
    static int opens;
    const char *on = written ? NULL : getenv("CKPT_TEST_WRITE_ON");
    if (!on)
        return; /* (every stat and open comes here: the usual case first) */
    const char *file = getenv("CKPT_TEST_WRITE");
    const char *nth = getenv("CKPT_TEST_WRITE_ON_NTH");
    const char *to = getenv("CKPT_TEST_RENAME_TO");
    const char *want = getenv("CKPT_TEST_WRITE_ON_CALL");
    const char *cmd = getenv("CKPT_TEST_RUN");
    if ((!file && !cmd) || !path ||
        (flags & O_DIRECTORY) || strcmp(want ? want : "open", call) ||
        strcmp(on, path) || ++opens < (nth ? atoi(nth) : 1))
        return;
    written = 1;
    int saved = errno;
    if (cmd) {
        run_cmd(cmd);
        errno = saved;
        return;
    }
    if (to) {
        if (rename(file, to) != 0)
            perror("age_preload: rename");
        errno = saved;
        return;
    }
    mkdirs_for(file);
    FILE *f = fopen(file, "w");
    if (!f || fputs("written during process\n", f) < 0 || fclose(f) != 0)
        perror("age_preload: write");
    errno = saved;
}

static void on_open(const char *path, int flags)
{
    maybe_write("open", path, flags);
}

static long ctime_shift(void)
{
    const char *v = getenv("CKPT_TEST_OLD_CTIME");
    return v ? atol(v) : 0;
}

#define FIX(rc, sb)                                                         \
    do {                                                                    \
        if ((rc) == 0)                                                      \
            (sb)->st_ctim.tv_sec -= ctime_shift();                          \
        return (rc);                                                        \
    } while (0)

int stat(const char *p, struct stat *sb)
{
    maybe_write("stat", p, 0);
    int rc = REAL("stat", int (*)(const char *, struct stat *))(p, sb);
    FIX(rc, sb);
}

int stat64(const char *p, struct stat64 *sb)
{
    maybe_write("stat", p, 0);
    int rc = REAL("stat64", int (*)(const char *, struct stat64 *))(p, sb);
    FIX(rc, sb);
}

int lstat(const char *p, struct stat *sb)
{
    maybe_write("stat", p, 0);
    int rc = REAL("lstat", int (*)(const char *, struct stat *))(p, sb);
    FIX(rc, sb);
}

int lstat64(const char *p, struct stat64 *sb)
{
    maybe_write("stat", p, 0);
    int rc = REAL("lstat64", int (*)(const char *, struct stat64 *))(p, sb);
    FIX(rc, sb);
}

int fstat(int fd, struct stat *sb)
{
    int rc = REAL("fstat", int (*)(int, struct stat *))(fd, sb);
    FIX(rc, sb);
}

int fstat64(int fd, struct stat64 *sb)
{
    int rc = REAL("fstat64", int (*)(int, struct stat64 *))(fd, sb);
    FIX(rc, sb);
}

int fstatat(int dfd, const char *p, struct stat *sb, int fl)
{
    maybe_write("stat", p, 0);
    int rc = REAL("fstatat", int (*)(int, const char *, struct stat *,
                                     int))(dfd, p, sb, fl);
    FIX(rc, sb);
}

int fstatat64(int dfd, const char *p, struct stat64 *sb, int fl)
{
    maybe_write("stat", p, 0);
    int rc = REAL("fstatat64", int (*)(int, const char *, struct stat64 *,
                                       int))(dfd, p, sb, fl);
    FIX(rc, sb);
}

/* The local listing reads ctimes with statx (one call per entry gives the
 * listing and the mount check both). */
int statx(int dfd, const char *p, int fl, unsigned mask, struct statx *sx)
{
    int rc = REAL("statx", int (*)(int, const char *, int, unsigned,
                                   struct statx *))(dfd, p, fl, mask, sx);
    if (rc == 0)
        sx->stx_ctime.tv_sec -= ctime_shift();
    return rc;
}
