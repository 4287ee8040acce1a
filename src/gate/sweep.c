/*
 * sweep.c - the removal of the temporaries that dead ckpt processes of
 * this host left behind (ckpt_temp_sweep and friends, tempname.h). It
 * deletes, so it is the gate's: each removal goes through
 * ckpt_gate_rm_tree with the rule CKPT_GATE_OWN_TEMP, re-checked right
 * before it (the maker still dead, the path still not kept).
 */
#include "ckpt/tempname.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/err.h"
#include "ckpt/gate.h"
#include "ckpt/util.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char **swept, **kept;            /* under mu */
static size_t nswept, nkept;
static _Atomic(ckpt_temp_removed_fn) removed_fn;

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

/* Whether the temporary base in dir belongs to a dead process here. */
static int stale(const char *base, long *pid)
{
    uint32_t host;
    if (!ckpt_temp_parse(base, &host, pid) || host != ckpt_temp_host() ||
        *pid == (long)getpid())
        return 0;
    return kill((pid_t)*pid, 0) != 0 && errno == ESRCH;
}

/* The gate's re-check of a sweep: the maker is still dead, the path
 * still not kept. */
struct sweep_check {
    const char *path, *base;
};

static int still_stale(void *data, struct ckpt_err *err)
{
    struct sweep_check *c = data;
    long pid;
    pthread_mutex_lock(&mu);
    int keep = is_kept(c->path);
    pthread_mutex_unlock(&mu);
    if (keep || !stale(c->base, &pid))
        return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is no dead process's "
                            "temporary now; not deleted", c->path);
    return 0;
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
        struct sweep_check c = { path, base };
        struct ckpt_gate_proof p = {
            .rule = CKPT_GATE_OWN_TEMP, .recheck = still_stale, .data = &c,
            .evidence = "a temporary of a dead ckpt process of this host",
        };
        (void)ckpt_gate_rm_tree(&p, path, NULL);
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
