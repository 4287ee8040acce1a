/*
 * tempname.h - names of ckpt's temporary files and directories, and the
 * removal of those that dead ckpt processes left behind.
 *
 * A temporary sits in the directory of what it becomes (so the final
 * rename is atomic) under a short name of its own,
 *
 *     .ckpt-HHHHHHHH-PID-SEQ.tmp
 *
 * (HHHHHHHH: a hash of the host name), never the final name plus a
 * suffix: any legal final name (up to 255 bytes) still has a temporary.
 * Host and pid tell a later run whether the process that made it is gone:
 * ckpt_temp_sweep removes the temporaries of dead processes of this host
 * and leaves those of live processes and of other hosts alone. The names
 * are src/util/tempname.c's; the sweep deletes, so it is the delete
 * gate's (src/gate/sweep.c).
 */
#ifndef CKPT_TEMPNAME_H
#define CKPT_TEMPNAME_H

#include <stddef.h>
#include <stdint.h>

struct ckpt_err;

/* A fresh temporary path in dir ("" or NULL: the current directory),
 * unique within this process. Malloced. */
char *ckpt_temp_path(const char *dir);

/* 1 if the last component of name is a temporary of the form above (then
 * *host and *pid, either may be NULL, are set), else 0. */
int ckpt_temp_parse(const char *name, uint32_t *host, long *pid);

/* 1 if the last component of name is any temporary of ckpt: the form
 * above, or the older ".NAME.ckpt-tmp-..." / ".NAME.ckpt-up-..." and
 * ".ckpt-tmp-..." names. Such names are never content. */
int ckpt_is_temp_name(const char *name);

/* This host's hash, as in the names. */
uint32_t ckpt_temp_host(void);

/* Remove, recursively, the temporaries in dir made on this host by
 * processes that no longer exist (kill(pid, 0) fails with ESRCH), except
 * those passed to ckpt_temp_keep. Each directory is swept once per
 * process; later calls for it return at once. Errors are ignored: what
 * cannot be removed stays. Thread-safe. */
void ckpt_temp_sweep(const char *dir);

/* Spare path in sweeps: a temporary a later step resumes (the file of an
 * unfinished local copy that a journal names). */
void ckpt_temp_keep(const char *path);

/* Called after each removal by a sweep, from the sweeping thread (the
 * CLI prints it); NULL: nobody is told. */
typedef void (*ckpt_temp_removed_fn)(const char *path, long pid);
void ckpt_temp_on_removed(ckpt_temp_removed_fn fn);

/*
 * Rename-first deletes of local directories (clean's runs and pruned
 * checkpoints, unshard --delete-sharded's steps). The delete starts by
 * renaming PATH to the hidden sibling
 *
 *     .BASE.ckpt-del-HOST-PID
 *
 * (HOST: the host name): that rename is the commit point. A kill before
 * it leaves PATH whole, a kill after it a name no reader takes for a
 * checkpoint or run, which a later ckpt run of this host finishes once
 * PID is dead.
 */

/* The sibling name for path (malloced), or NULL when it would exceed
 * NAME_MAX (such a directory is deleted in place). */
char *ckpt_del_temp(const char *path);

/* The rename itself is the delete gate's: ckpt_gate_rename_aside
 * (gate.h). */

/* 1 if the base name is ".X.ckpt-del-HOST-PID" of this host and of a
 * process that no longer exists (then *x, if x is not NULL, is X,
 * malloced); else 0. A live pid or another host's name is never ours. */
int ckpt_del_dead(const char *name, char **x);

/* 1 if the base name has the shape ".X.ckpt-del-HOST-PID" (any host, any
 * pid): a directory being deleted, or left by an interrupted delete; not
 * content to copy or judge. */
int ckpt_is_del_name(const char *name);

/* The sibling a dead process of this host left when it was killed
 * deleting path, or NULL. Malloced. */
char *ckpt_del_dead_sibling(const char *path);

/* Any ".BASE.ckpt-del-HOST-PID" sibling of path (any host, any pid: a
 * delete in progress, or a dead one), or NULL. Malloced base name. */
char *ckpt_del_sibling(const char *path);

/* The base names of the siblings dead processes of this host left in
 * directory dir, any X (malloced array of malloced names, sorted; *n
 * set). NULL with *n = 0 when there are none or dir cannot be read. */
char **ckpt_del_dead_in(const char *dir, size_t *n);

#endif
