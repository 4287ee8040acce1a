/*
 * gate.h - the one delete gate. Every unlink, rmdir, rename over or
 * aside, recursive delete and storage delete in ckpt goes through here
 * (tests/integration/delete_gate_scan.py fails on any other).
 *
 * A caller hands the gate a proof: which rule allows the delete, the
 * evidence (a sentence for messages and logs), and, for the rules that
 * delete what ckpt did not write, a re-check the gate runs right before
 * it acts. The gate refuses a missing proof, a rule without evidence, a
 * rule that needs a re-check and has none, and a re-check that fails;
 * what it refuses stays. See docs/reliability.md "One delete gate".
 */
#ifndef CKPT_GATE_H
#define CKPT_GATE_H

#include <stddef.h>

struct ckpt_err;
struct ckpt_storage;

enum ckpt_gate_rule {
    CKPT_GATE_NONE = 0,   /* no proof: always refused */
    /* Rules over data ckpt did not write: a re-check is required. */
    CKPT_GATE_BAD_RUN,    /* clean/process: the run proven bad by accounting */
    CKPT_GATE_PRUNED,     /* --keep-last/--keep-every: a checkpoint pruned */
    CKPT_GATE_COPIED,     /* upload --delete-source/process: DEST's copy
                           * proven equal by DEST's own answer */
    CKPT_GATE_UNSHARDED,  /* unshard --delete-sharded: the output proven */
    CKPT_GATE_DROPPED,    /* process --drop-*: a file left out of DEST,
                           * unchanged since it was judged */
    CKPT_GATE_ASIDE,      /* what a delete's rename aside committed (this
                           * process's, or a dead one's of this host) */
    /* Rules over what ckpt wrote itself: the re-check is optional. */
    CKPT_GATE_OWN_TEMP,   /* ckpt's temporary, scratch, spool, partial file */
    CKPT_GATE_OWN_STATE,  /* a lease, claim, journal, state, marker of ckpt */
    CKPT_GATE_REPLACE,    /* ckpt's new file renamed into place (over what
                           * it replaces), or the replaced one moved aside */
    CKPT_GATE_EMPTY_DIR,  /* an empty directory (rmdir removes only those) */
    CKPT_GATE_NRULES
};

/* 0: go ahead; 1: already gone, nothing to do (success, proof->gone set);
 * -1: refuse, err says why. Called by the gate right before it acts. */
typedef int (*ckpt_gate_recheck_fn)(void *data, struct ckpt_err *err);

struct ckpt_gate_proof {
    enum ckpt_gate_rule rule;
    const char *evidence;          /* why, in words; required */
    ckpt_gate_recheck_fn recheck;  /* required for the first five rules */
    void *data;                    /* for recheck */
    int gone;                      /* out: the re-check found it gone */
};

/* A proof for ckpt's own files, which need no re-check. */
#define CKPT_GATE_OWN(rule_, evidence_) \
    (&(struct ckpt_gate_proof){ .rule = (rule_), .evidence = (evidence_) })

/* "bad-run", "copied", ... */
const char *ckpt_gate_rule_name(enum ckpt_gate_rule rule);

/* Check the proof and run its re-check: 0 to act, 1 gone, -1 refused
 * (err names the rule and the evidence, or carries the re-check's own
 * message). Every function below starts with it. */
int ckpt_gate_check(struct ckpt_gate_proof *p, struct ckpt_err *err);

/* Re-checks for what a rename aside committed (data: the aside's path,
 * char *): a dead process's of this host (ckpt_del_dead), or this
 * process's own. A missing path is gone (1). */
int ckpt_gate_dead_aside(void *path, struct ckpt_err *err);
int ckpt_gate_own_aside(void *path, struct ckpt_err *err);

/* ---- local files ----
 * Each returns 0 or -1 with err set (a missing path, ENOENT, is -1 with
 * err->sys_errno ENOENT: the callers decide whether gone is success). */
int ckpt_gate_unlink(struct ckpt_gate_proof *p, const char *path,
                     struct ckpt_err *err);
/* flags: 0 or AT_REMOVEDIR. */
int ckpt_gate_unlinkat(struct ckpt_gate_proof *p, int dfd, const char *name,
                       int flags, struct ckpt_err *err);
int ckpt_gate_rmdir(struct ckpt_gate_proof *p, const char *path,
                    struct ckpt_err *err);
/* rename(2): replaces what `to` named. */
int ckpt_gate_rename(struct ckpt_gate_proof *p, const char *from,
                     const char *to, struct ckpt_err *err);
/* renameat2(2) on AT_FDCWD paths (RENAME_EXCHANGE); errno kept in
 * err->sys_errno so that callers can fall back. */
int ckpt_gate_renameat2(struct ckpt_gate_proof *p, const char *from,
                        const char *to, unsigned flags, struct ckpt_err *err);
/* Rename path to its hidden ".BASE.ckpt-del-HOST-PID" sibling, the commit
 * point of a rename-first delete (tempname.h): 0 with *tmp the new name,
 * or NULL when the name would be too long and path was not renamed; -1
 * with err (ENOENT: gone). */
int ckpt_gate_rename_aside(struct ckpt_gate_proof *p, const char *path,
                           char **tmp, struct ckpt_err *err);
/* Remove path and everything below it, depth first: never follows a
 * symbolic link (the link goes), never crosses into another filesystem,
 * never removes a FIFO, socket or device (they stay, and so do the
 * directories holding them). 0 when path is gone, else -1 with err. */
int ckpt_gate_rm_tree(struct ckpt_gate_proof *p, const char *path,
                      struct ckpt_err *err);

/* ---- storage (storage.h's semantics: a missing key is success) ---- */
int ckpt_gate_delete(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                     const char *key, struct ckpt_err *err);
/* Every object under dir + "/", and dir itself. Local: never follows
 * symlinks, survives concurrent deleters. */
int ckpt_gate_delete_tree(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                          const char *dir, struct ckpt_err *err);
/* delete_tree, rename-first where local (refused whole when dir holds a
 * mount point); remote: in place. A missing dir is success. */
int ckpt_gate_delete_tree_aside(struct ckpt_gate_proof *p,
                                struct ckpt_storage *st, const char *dir,
                                struct ckpt_err *err);
/* The file key below root only (storage.h: never through a symlink out
 * of root, never across a mount: CKPT_EUNSAFE). */
int ckpt_gate_delete_below(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                           const char *root, const char *key,
                           struct ckpt_err *err);
/* Exactly keys[0..n) below dir, then the directories left empty. */
int ckpt_gate_delete_keys(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                          const char *dir, char *const *keys, size_t n,
                          struct ckpt_err *err);
/* Delete key only while its version is `version` (storage.h). */
int ckpt_gate_delete_if_match(struct ckpt_gate_proof *p,
                              struct ckpt_storage *st, const char *key,
                              const char *version, struct ckpt_err *err);
/* The empty directories at and below dir (keep_root: dir itself stays);
 * a no-op on object storage. */
int ckpt_gate_prune_dirs(struct ckpt_gate_proof *p, struct ckpt_storage *st,
                         const char *dir, int keep_root,
                         struct ckpt_err *err);

/* ---- for storage backends only (src/storage) ----
 * The syscalls a backend's delete makes, honoured only on a thread the
 * gate is running a storage delete on (else -1, errno EPERM): a backend
 * primitive called around the gate deletes nothing. */
int ckpt_gate_held_unlinkat(int dfd, const char *name, int flags);
int ckpt_gate_held_rmdir(const char *path);
int ckpt_gate_held_unlink(const char *path);

#endif
