/*
 * treesrc.c - W&B evidence from a run tree, so archives (and directories
 * already snapshotted) serve map-wandb without extracting anything. The
 * tree keeps the small evidence files of compressed archives in memory
 * (ckpt_tree_want_default), so gathering reads no archive twice.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/run.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"

static int tree_list(void *ctx, const char *rel, ckpt_wandb_entry_fn fn,
                     void *ud, struct ckpt_err *err)
{
    struct ckpt_tree *t = ctx;
    size_t lo, hi;
    if (*rel && !ckpt_tree_has_dir(t, rel))
        return ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no directory '%s'",
                            t->display, rel);
    ckpt_tree_range(t, rel, &lo, &hi);
    size_t skip = *rel ? strlen(rel) + 1 : 0;
    /* A directory's own entry ("a") and its files ("a/x") are not always
     * adjacent in sort order ("a-1/..." falls between), so remember what
     * was reported. Directories of a run hold few children. */
    char **seen = NULL;
    size_t nseen = 0;
    int rc = 0;
    for (size_t i = lo; i < hi && rc == 0; i++) {
        const char *p = t->files[i].path + skip;
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        int dup = 0;
        for (size_t k = 0; k < nseen && !dup; k++)
            dup = strlen(seen[k]) == n && !strncmp(seen[k], p, n);
        if (dup)
            continue;
        seen = ckpt_xreallocarray(seen, nseen + 1, sizeof(*seen));
        seen[nseen] = ckpt_xstrndup(p, n);
        int is_dir = slash || t->files[i].type == CKPT_ENTRY_DIR;
        rc = fn(ud, seen[nseen++], is_dir);
    }
    for (size_t k = 0; k < nseen; k++)
        free(seen[k]);
    free(seen);
    return rc;
}

static int tree_read(void *ctx, const char *rel, size_t max, char **data,
                     size_t *len, int *truncated, struct ckpt_err *err)
{
    return ckpt_tree_read_head(ctx, rel, max, data, len, truncated, err);
}

void ckpt_wandb_src_tree(struct ckpt_wandb_src *src, struct ckpt_tree *tree)
{
    src->ctx = tree;
    src->list = tree_list;
    src->read = tree_read;
    src->release = NULL;
}
