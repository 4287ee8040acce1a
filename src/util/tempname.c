/*
 * tempname.c - short temporary names carrying host and pid, and the
 * rename-first delete names (tempname.h). The sweep of the temporaries
 * dead processes left deletes, so it lives with the gate
 * (src/gate/sweep.c).
 */
#include "ckpt/tempname.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/err.h"
#include "ckpt/util.h"

#define PREFIX ".ckpt-"
#define SUFFIX ".tmp"


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

/* --- rename-first deletes ------------------------------------------------ */

#define DEL_MARK ".ckpt-del-"

static void host_name(char *host, size_t n)
{
    host[0] = '\0';
    if (gethostname(host, n - 1) != 0 || !*host)
        snprintf(host, n, "unknown");
    host[n - 1] = '\0';
}

char *ckpt_del_temp(const char *path)
{
    char host[256];
    host_name(host, sizeof(host));
    char *dir = ckpt_path_dirname(path), *base = ckpt_path_basename(path);
    char *name = ckpt_xasprintf(".%s" DEL_MARK "%s-%ld", base, host,
                                (long)getpid());
    char *out = strlen(name) > NAME_MAX ? NULL
                : *dir ? ckpt_path_join(dir, name) : ckpt_xstrdup(name);
    free(dir);
    free(base);
    free(name);
    return out;
}

/* Split the base name b, ".X" DEL_MARK HOST "-" PID, at its parts: 1
 * with *m the mark, *host and *hl the host, *pid the digits; else 0. X
 * may itself hold DEL_MARK, so the mark is the last one; HOST may hold
 * '-', so the pid is the digits after the last '-'. */
static int del_parse(const char *b, const char **m, const char **host,
                     size_t *hl, const char **pid)
{
    *m = NULL;
    for (const char *p = b + 1; b[0] == '.' && (p = strstr(p, DEL_MARK));
         p++)
        *m = p;
    if (!*m || *m == b + 1)
        return 0;
    *host = *m + strlen(DEL_MARK);
    const char *dash = strrchr(*host, '-');
    if (!dash || dash == *host || dash[1] < '1' || dash[1] > '9')
        return 0;
    for (const char *d = dash + 1; *d; d++)
        if (*d < '0' || *d > '9')
            return 0;
    *hl = (size_t)(dash - *host);
    *pid = dash + 1;
    return 1;
}

int ckpt_del_dead(const char *name, char **x)
{
    char me[256];
    host_name(me, sizeof(me));
    const char *b = base_of(name), *m, *host, *digits;
    size_t hl;
    if (!del_parse(b, &m, &host, &hl, &digits) || hl != strlen(me) ||
        strncmp(host, me, hl) != 0)
        return 0;
    char *end;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (*end || errno || pid <= 0 || pid == (long)getpid() ||
        kill((pid_t)pid, 0) == 0 || errno != ESRCH)
        return 0;
    if (x)
        *x = ckpt_xstrndup(b + 1, (size_t)(m - (b + 1)));
    return 1;
}

int ckpt_is_del_name(const char *name)
{
    const char *m, *host, *pid;
    size_t hl;
    return del_parse(base_of(name), &m, &host, &hl, &pid);
}

/* The base name of a ".BASE.ckpt-del-HOST-PID" sibling of path (of a
 * dead process of this host with dead_only, else any), or NULL. */
static char *find_sibling(const char *path, int dead_only)
{
    char *dir = ckpt_path_dirname(path), *base = ckpt_path_basename(path);
    char *found = NULL;
    size_t bl = strlen(base);
    DIR *d = opendir(*dir ? dir : ".");
    struct dirent *de;
    while (d && !found && (de = readdir(d)) != NULL) {
        const char *m, *host, *pid;
        size_t hl;
        if (del_parse(de->d_name, &m, &host, &hl, &pid) &&
            (size_t)(m - (de->d_name + 1)) == bl &&
            !strncmp(de->d_name + 1, base, bl) &&
            (!dead_only || ckpt_del_dead(de->d_name, NULL)))
            found = ckpt_xstrdup(de->d_name);
    }
    if (d)
        closedir(d);
    free(dir);
    free(base);
    return found;
}

char *ckpt_del_dead_sibling(const char *path)
{
    char *name = find_sibling(path, 1);
    char *dir = name ? ckpt_path_dirname(path) : NULL;
    char *found = !name ? NULL : *dir ? ckpt_path_join(dir, name)
                                      : ckpt_xstrdup(name);
    free(dir);
    free(name);
    return found;
}

char *ckpt_del_sibling(const char *path)
{
    return find_sibling(path, 0);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **ckpt_del_dead_in(const char *dir, size_t *n)
{
    char **v = NULL;
    *n = 0;
    DIR *d = opendir(dir && *dir ? dir : ".");
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (ckpt_del_dead(de->d_name, NULL)) {
            v = ckpt_xreallocarray(v, *n + 1, sizeof(*v));
            v[(*n)++] = ckpt_xstrdup(de->d_name);
        }
    if (d)
        closedir(d);
    if (*n)
        qsort(v, *n, sizeof(*v), by_name);
    return v;
}
