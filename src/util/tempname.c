/*
 * tempname.c - short temporary names carrying host and pid, and the sweep
 * of those left by dead processes (tempname.h).
 */
#include "ckpt/tempname.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/util.h"

#define PREFIX ".ckpt-"
#define SUFFIX ".tmp"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char **swept, **kept;            /* under mu */
static size_t nswept, nkept;
static _Atomic(ckpt_temp_removed_fn) removed_fn;

uint32_t ckpt_temp_host(void)
{
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    uint32_t h = 2166136261u;           /* FNV-1a */
    for (const char *p = host; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

char *ckpt_temp_path(const char *dir)
{
    static _Atomic unsigned long seq;
    unsigned long n = atomic_fetch_add(&seq, 1);
    int bare = !dir || !*dir;
    return ckpt_xasprintf("%s%s" PREFIX "%08lx-%ld-%lx" SUFFIX,
                          bare ? "" : dir, bare ? "" : "/",
                          (unsigned long)ckpt_temp_host(), (long)getpid(), n);
}

static const char *base_of(const char *name)
{
    const char *b = strrchr(name, '/');
    return b ? b + 1 : name;
}

/* Digits of base 10 or 16 up to the next '-' or '.'; end past them. */
static int digits(const char *s, int hex, const char **end, unsigned long *v)
{
    char *e;
    if (!(hex ? strchr("0123456789abcdef", *s) : strchr("0123456789", *s)) ||
        !*s)
        return 0;
    errno = 0;
    *v = strtoul(s, &e, hex ? 16 : 10);
    *end = e;
    return errno == 0 && e > s;
}

int ckpt_temp_parse(const char *name, uint32_t *host, long *pid)
{
    const char *b = base_of(name), *p;
    unsigned long h, id, seq;
    if (strncmp(b, PREFIX, strlen(PREFIX)) != 0)
        return 0;
    b += strlen(PREFIX);
    if (!digits(b, 1, &p, &h) || p - b != 8 || *p != '-' ||
        !digits(p + 1, 0, &p, &id) || *p != '-' ||
        !digits(p + 1, 1, &p, &seq) || strcmp(p, SUFFIX) != 0 ||
        id == 0 || id > 0x7fffffffUL)
        return 0;
    if (host)
        *host = (uint32_t)h;
    if (pid)
        *pid = (long)id;
    return 1;
}

int ckpt_is_temp_name(const char *name)
{
    const char *b = base_of(name);
    return ckpt_temp_parse(b, NULL, NULL) ||
           (b[0] == '.' && (strstr(b, ".ckpt-tmp-") || strstr(b, ".ckpt-up-")));
}

/* Add s to list *v (under mu) unless there; 1 if it was added. */
static int add_once(char ***v, size_t *n, const char *s)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp((*v)[i], s))
            return 0;
    *v = ckpt_xreallocarray(*v, *n + 1, sizeof(**v));
    (*v)[(*n)++] = ckpt_xstrdup(s);
    return 1;
}

static int is_kept(const char *path)
{
    for (size_t i = 0; i < nkept; i++)
        if (!strcmp(kept[i], path))
            return 1;
    return 0;
}

void ckpt_temp_keep(const char *path)
{
    pthread_mutex_lock(&mu);
    add_once(&kept, &nkept, path);
    pthread_mutex_unlock(&mu);
}

void ckpt_temp_on_removed(ckpt_temp_removed_fn fn)
{
    atomic_store(&removed_fn, fn);
}

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Whether the temporary base in dir belongs to a dead process here. */
static int stale(const char *base, long *pid)
{
    uint32_t host;
    if (!ckpt_temp_parse(base, &host, pid) || host != ckpt_temp_host() ||
        *pid == (long)getpid())
        return 0;
    return kill((pid_t)*pid, 0) != 0 && errno == ESRCH;
}

static void sweep_entry(const char *dir, const char *base)
{
    long pid;
    if (!stale(base, &pid))
        return;
    char *path = ckpt_xasprintf("%s%s%s", *dir ? dir : "", *dir ? "/" : "",
                                base);
    pthread_mutex_lock(&mu);
    int keep = is_kept(path);
    pthread_mutex_unlock(&mu);
    struct stat sb;
    if (!keep && lstat(path, &sb) == 0) {
        /* Depth first, never following links: only the litter goes. */
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        ckpt_temp_removed_fn fn = atomic_load(&removed_fn);
        if (lstat(path, &sb) != 0 && fn)
            fn(path, pid);
    }
    free(path);
}

void ckpt_temp_sweep(const char *dir)
{
    const char *d = dir && *dir ? dir : "";
    pthread_mutex_lock(&mu);
    int first = add_once(&swept, &nswept, d);
    pthread_mutex_unlock(&mu);
    if (!first)
        return;
    DIR *dh = opendir(*d ? d : ".");
    if (!dh)
        return;
    /* Names first, removal after: no readdir over a changing directory. */
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL)
        if (ckpt_temp_parse(de->d_name, NULL, NULL)) {
            names = ckpt_xreallocarray(names, n + 1, sizeof(*names));
            names[n++] = ckpt_xstrdup(de->d_name);
        }
    closedir(dh);
    for (size_t i = 0; i < n; i++) {
        sweep_entry(d, names[i]);
        free(names[i]);
    }
    free(names);
}
