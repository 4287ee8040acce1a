/*
 * gate_storage.c - the delete gate over storage (gate.h): the only
 * caller of the backends' delete entries. Each checks the proof, runs its
 * re-check, and calls the backend with the proof held on this thread, so
 * that a local backend's syscalls (ckpt_gate_held_*) go through.
 */
#include "ckpt/gate.h"

#include <errno.h>
#include <stdlib.h>

#include "ckpt/err.h"
#include "ckpt/storage.h"
#include "gate/gate_int.h"
#include "storage/storage_int.h"
#include "storage/upload_int.h"

/* Check p; 1 when the caller returns at once (*rc: 0 gone, -1 refused). */
static int refused(struct ckpt_gate_proof *p, struct ckpt_err *err, int *rc)
{
    int c = ckpt_gate_check(p, err);
    *rc = c < 0 ? -1 : 0;
    return c != 0;
}

int ckpt_gate_delete(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                     const char *key, struct ckpt_err *err)
{
    int rc;
    if (refused(p, err, &rc))
        return rc;
    const struct ckpt_gate_proof *prev = gate_enter(p);
    rc = st->ops->del(st, key, err);
    gate_leave(prev);
    return rc;
}

int ckpt_gate_delete_tree(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                          const char *dir, struct ckpt_err *err)
{
    int rc;
    if (refused(p, err, &rc))
        return rc;
    const struct ckpt_gate_proof *prev = gate_enter(p);
    rc = st->ops->delete_tree(st, dir, err);
    gate_leave(prev);
    return rc;
}

int ckpt_gate_delete_tree_aside(struct ckpt_gate_proof *p,
                                struct ckpt_storage *st, const char *dir,
                                struct ckpt_err *err)
{
    if (!ckpt_storage_is_local(st))
        return ckpt_gate_delete_tree(p, st, dir, err);
    /* Before the rename that commits the delete: a tree holding another
     * filesystem is refused whole, never half deleted. */
    if (ckpt_storage_mount_fault(st, dir, err) != 0)
        return -1;
    char *tmp;
    struct ckpt_err rerr = CKPT_ERR_INIT;
    if (ckpt_gate_rename_aside(p, dir, &tmp, &rerr) != 0) {
        /* Gone already (another deleter): what was wanted. */
        if (rerr.sys_errno == ENOENT)
            return 0;
        *err = rerr;
        return -1;
    }
    if (p->gone)
        return 0;
    /* Checked and re-checked by the rename: the rest is under its proof. */
    const struct ckpt_gate_proof *prev = gate_enter(p);
    int rc = st->ops->delete_tree(st, tmp ? tmp : dir, err);
    gate_leave(prev);
    free(tmp);
    return rc;
}

int ckpt_gate_delete_below(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                           const char *root, const char *key,
                           struct ckpt_err *err)
{
    int rc;
    if (refused(p, err, &rc))
        return rc;
    const struct ckpt_gate_proof *prev = gate_enter(p);
    rc = ckpt_storage_is_local(st) ? ckpt_local_delete_below(root, key, err)
                                   : st->ops->del(st, key, err);
    gate_leave(prev);
    return rc;
}

int ckpt_gate_delete_keys(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                          const char *dir, char *const *keys, size_t n,
                          struct ckpt_err *err)
{
    int rc;
    if (!st->ops->delete_keys)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: deleting keys not "
                            "supported by %s", dir, st->ops->name);
    if (refused(p, err, &rc))
        return rc;
    const struct ckpt_gate_proof *prev = gate_enter(p);
    rc = st->ops->delete_keys(st, dir, keys, n, err);
    gate_leave(prev);
    return rc;
}

int ckpt_gate_delete_if_match(struct ckpt_gate_proof *p,
                              struct ckpt_storage *st, const char *key,
                              const char *version, struct ckpt_err *err)
{
    int rc;
    if (refused(p, err, &rc))
        return rc;
    const struct ckpt_gate_proof *prev = gate_enter(p);
    rc = st_delete_if_match(st, key, version, err);
    gate_leave(prev);
    return rc;
}

int ckpt_gate_prune_dirs(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                         const char *dir, int keep_root,
                         struct ckpt_err *err)
{
    int rc;
    if (!ckpt_storage_is_local(st))
        return 0;
    if (refused(p, err, &rc))
        return rc;
    const struct ckpt_gate_proof *prev = gate_enter(p);
    rc = st_local_prune_dirs(st, dir, keep_root, err);
    gate_leave(prev);
    return rc;
}
