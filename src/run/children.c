/*
 * children.c - the entries of a directory of runs that may be runs: what
 * `ckpt process`, `ckpt clean` and `ckpt ls` judge one by one when given
 * a directory that holds runs (SPEC: "a SRC holding runs means each of
 * them"; a directory of runs is never judged as one run).
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/archive.h"
#include "ckpt/run.h"
#include "ckpt/util.h"

struct kids {
    const char *key;
    int (*keep)(void *ud, const char *key);
    void *ud;
    char **keys;
    size_t n;
    int any;
};

static void add(struct kids *k, char *key)
{
    if (k->keep && !k->keep(k->ud, key)) {
        free(key);
        return;
    }
    k->keys = ckpt_xreallocarray(k->keys, k->n + 1, sizeof(char *));
    k->keys[k->n++] = key;
}

static int kid_cb(void *ud, const struct ckpt_entry *e)
{
    struct kids *k = ud;
    k->any = 1;
    const char *del = e->name[0] == '.' ? strstr(e->name, ".ckpt-del-")
                                        : NULL;
    if (del && del > e->name + 1) {
        /* A delete of a bad run that a killed process left renamed aside:
         * the run's own name stands for it, and judging that name
         * finishes the delete (clean's rules: only a dead process's). */
        char *name = ckpt_xstrndup(e->name + 1,
                                   (size_t)(del - (e->name + 1)));
        add(k, ckpt_path_join(k->key, name));
        free(name);
        return 0;
    }
    if (e->name[0] == '.' ||
        (e->type != CKPT_ENTRY_DIR &&
         !(e->type == CKPT_ENTRY_FILE &&
           ckpt_archive_kind_of(e->name) != CKPT_ARCHIVE_NONE)))
        return 0;
    add(k, ckpt_path_join(k->key, e->name));
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int ckpt_run_children(struct ckpt_storage *st, const char *key,
                      int (*keep)(void *ud, const char *key), void *ud,
                      char ***keys, size_t *n, int *any, struct ckpt_err *err)
{
    struct kids k = { key, keep, ud, NULL, 0, 0 };
    int rc = ckpt_storage_list(st, key, 0, kid_cb, &k, err);
    if (rc == 0 && k.n)
        ckpt_sort(k.keys, k.n, sizeof(char *), cmp_str);
    size_t w = 0;
    for (size_t i = 0; i < k.n; i++) {
        if (rc != 0 || (w && !strcmp(k.keys[i], k.keys[w - 1])))
            free(k.keys[i]);
        else
            k.keys[w++] = k.keys[i];
    }
    if (any)
        *any = k.any;
    if (rc != 0) {
        free(k.keys);
        *keys = NULL;
        *n = 0;
        return -1;
    }
    *keys = k.keys;
    *n = w;
    return 0;
}
