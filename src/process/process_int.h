/* process_int.h - shared by the files of src/process (not installed). */
#ifndef CKPT_PROCESS_INT_H
#define CKPT_PROCESS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"
#include "ckpt/lease.h"
#include "ckpt/storage.h"
#include "ckpt/upload.h"

/* ---- drop.c (below): the steps left out of DEST ---- */

/* A file of a dropped step as it was when the step was judged. */
struct proc_drop_file {
    char *rel;              /* owned: path in the run */
    struct ckpt_srcver v;   /* local: its version; object storage: size */
    char etag[80];          /* object storage: its ETag, or "" */
    char *changed;          /* owned: why it cannot be vouched for (it
                               changed while being judged), or NULL */
};

/* The steps of a run left out of DEST and deleted with its source. */
struct proc_drops {
    char **dirs;            /* owned: step directories, paths in the run */
    size_t n;
    struct proc_drop_file *files;  /* owned, sorted by rel */
    size_t nfiles;
    int recorded;           /* files recorded (a directory run) */
    struct ckpt_storage *st;       /* borrowed: the run's */
};

/* ---- state.c: the per-run state object ---- */

enum proc_phase { PROC_NEW = 0, PROC_UPLOADED, PROC_DONE, PROC_DELETED };

/* An unshard output written straight to DEST: its path below the run's
 * DEST directory ("step1000-unsharded/model.pt"), size, checksum
 * (ckpt_unshard_file.checksum) and the ETag the store gave it: what
 * verifying compares. */
struct proc_out {
    char *path;             /* owned */
    uint64_t size;
    char sum[48];
    char etag[80];          /* object storage: the ETag it was given, or
                               "" */
};

struct proc_state {
    enum proc_phase phase;
    char *dest;             /* owned: DEST-relative key of the run, or NULL */
    char *why;              /* owned: DELETED: why the run was bad;
                               DONE: what the source keeps by design
                               ("kept 1 special file: step1000"), or
                               NULL */
    char *src;              /* owned: the source it was made from (an
                               absolute path, or a URL), or NULL (states
                               written before it was recorded) */
    uint64_t files, bytes, steps, freed;
    struct proc_out *outs;  /* owned: the unshard outputs at DEST */
    size_t nouts;
    /* UPLOADED: the steps judged droppable and each of their files as it
     * was judged (a rerun deletes what is left of them, unchanged, and
     * never uploads it); owned, empty in every other state. Read back:
     * st NULL, recorded 1 when there are steps. */
    struct proc_drops dropped;
};

/* 1 when path is a safe place below the run's DEST (dirs 0) or DEST
 * itself (dirs: at most that many components): relative, no empty, "."
 * or ".." component, none hidden (DEST's .ckpt-process/), no control
 * characters or backslashes. Everything read back from DEST passes it. */
int proc_path_safe(const char *path, int dirs);

/* Record an output (replacing one of the same path). */
void proc_state_add_out(struct proc_state *s, const char *path,
                        uint64_t size, const char *sum, const char *etag);

/* Read the state at key: a missing object is PROC_NEW (0). A state that
 * cannot be parsed is an error, never "new": a rerun must not judge a
 * half-deleted source again. */
int proc_state_read(struct ckpt_storage *st, const char *key,
                    struct proc_state *s, struct ckpt_err *err);
/* Parse a state object's bytes (any bytes: it is read from DEST). 0, or
 * -1 (s then empty) when they are not a state object. */
int proc_state_parse(const char *data, size_t len, struct proc_state *s);
/* The object's text (malloced JSON). */
char *proc_state_format(const char *run, const struct proc_state *s);
/* Write it whole (atomically: a reader sees the old or the new). */
int proc_state_write(struct ckpt_storage *st, const char *key,
                     const char *run, const struct proc_state *s,
                     struct ckpt_err *err);
void proc_state_release(struct proc_state *s);

/* ---- state.c: the lease, renewed by a thread while a run is worked on */

struct proc_keeper {
    struct ckpt_lease *lease;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int stop, started;
    int64_t margin;         /* valid = lasts more than this */
};

/* Take the lease (see ckpt_lease_acquire) and, when it is ours, start
 * renewing it. Returns ACQUIRED/TAKEN_OVER, LEASED (holder filled) or
 * -1. */
int proc_keeper_start(struct proc_keeper *k, struct ckpt_storage *st,
                      const char *key, const char *run, int64_t ttl,
                      struct ckpt_lease_holder *holder,
                      struct ckpt_err *err);
/* 0 while the lease is ours with more than the margin left; else -1 with
 * err saying so (nothing may be deleted then). Thread-safe. */
int proc_keeper_check(struct proc_keeper *k, struct ckpt_err *err);
/* Stop renewing and release the lease. */
void proc_keeper_stop(struct proc_keeper *k);

/* ---- drop.c: --drop-sharded, --drop-incomplete, --include/--exclude */

struct ckpt_filter;

/* Which step directories of the run at key to drop: incomplete ones (as
 * `ckpt ls` judges them), and sharded ones with a complete -unsharded
 * sibling in the run, or whose step is one of made[nmade] (steps with a
 * verified unshard output at DEST, or a dry run's, not made). 0, or
 * -1. */
int proc_drops_find(struct proc_drops *d, struct ckpt_storage *st,
                    const char *key, uint64_t max_archive, int sharded,
                    int incomplete, const int64_t *made, size_t nmade,
                    struct ckpt_err *err);
void proc_drops_release(struct proc_drops *d);
/* COPY, LEAVE (the filter leaves it out: it stays at the source) or DROP
 * (below a dropped step). As enum ckpt_upload_pick. */
int proc_pick(const struct ckpt_filter *f, const struct proc_drops *d,
              const char *rel);
/* Right before a dropped file (key, rel its path in the run) is deleted:
 * it must be the version recorded when its step was judged (size,
 * mtime, ctime, inode: the unchanged test uploaded files get). 0, or -1
 * with err saying why it is kept. */
int proc_drop_unchanged(const struct proc_drops *d, const char *key,
                        const char *rel, struct ckpt_err *err);

#endif
