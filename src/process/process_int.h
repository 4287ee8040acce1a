/* process_int.h - shared by the files of src/process (not installed). */
#ifndef CKPT_PROCESS_INT_H
#define CKPT_PROCESS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/archive.h"
#include "ckpt/buf.h"
#include "ckpt/err.h"
#include "ckpt/lease.h"
#include "ckpt/process.h"
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
    char *partial;          /* owned, or NULL: steps --drop-sharded keeps
                               (uploaded whole): their unsharded copy
                               holds less than they do, and why */
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

/* ---- claim.c: a run's claim within a batch (--batch) ---- */

struct proc_claim {
    char *key;                  /* owned: DEST/.ckpt-process/ID.claim */
    char version[CKPT_VERSION_MAX];  /* of ours, while held */
    char token[40];             /* ours */
    char host[256];
    int held;
};

/* A claim object as read from DEST (any bytes). */
struct proc_claim_holder {
    char batch[128], host[256], run[256], token[40];
    long pid;
    int done;
};
/* 0 with *h, or -1 when the bytes are not a claim (every field, a batch
 * and a token, a pid within 2^53). */
int proc_claim_parse(const char *data, size_t len,
                     struct proc_claim_holder *h);
/* The claim object of h: malloced JSON and a newline. */
char *proc_claim_format(const struct proc_claim_holder *h);

struct proc_run;
/* Claim the run for this batch: 1 ours (handle it), 0 another worker's
 * of the batch (no row), -1 with err. */
int proc_claim_take(struct proc_run *o, struct ckpt_err *err);
/* The run's row was given: other workers of the batch leave it alone
 * even once this process is gone. */
void proc_claim_done(struct proc_run *o);
/* Interrupted before the run was finished: the claim is deleted if it
 * is still ours, so another worker of the batch takes the run. */
void proc_claim_drop(struct proc_run *o);

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

/* ---- queue.c: the queue; run.c: one run being worked on ---- */

/* The directory below DEST that holds each run's state, lease and
 * claim. */
#define PROC_STATE_DIR ".ckpt-process"

/* A queued run. */
struct proc_queued {
    struct ckpt_storage *st;    /* borrowed */
    char *key;
    char *display;
    char *id;                   /* RUN_ID: base name or archive stem */
    char *srcid;                /* what the state records as its source */
    size_t dup;                 /* 1 + index of an earlier run of the
                                   queue with the same id, or 0 */
};

/* The queue and what its runs share (ckpt/process.h's handle). */
struct ckpt_process {
    struct ckpt_process_cfg cfg;
    struct proc_queued *runs;
    size_t n;
    char **ids;                 /* borrowed from runs, for _ids() */
    char **logs;                /* keys below cfg.logs_key */
    size_t nlogs;
    char *tmp;                  /* owned: unshard's scratch (steps of
                                   compressed archives), never outputs */
    int spool_hash;             /* spools hash their members: a local DEST
                                   on tmp's filesystem takes the spooled
                                   files themselves */
    /* Several runs are worked on at once (cfg.runs): events, totals and
     * progress from their threads go through mu, so the caller sees
     * whole events one at a time and the totals stay exact. */
    pthread_mutex_t mu;
    struct ckpt_process_totals *t;
    size_t next;                /* the next queued run to start */
    /* --batch: the runs of this round (indices into runs), and those
     * found claimed by another live worker of the batch, walked once
     * more after the round (an interrupted worker gives its back). */
    size_t *round, nround;
    size_t *others, nothers;
    size_t taken;               /* runs this round claimed */
    int par;                    /* runs in flight */
    int run_jobs;               /* upload workers per run */
    uint64_t run_mem;           /* upload data buffers per run */
    struct ckpt_rate *bw;       /* cfg.bwlimit, shared by every run's
                                   upload, or NULL */
    uint64_t items, bytes;      /* progress of every run together */
    struct ckpt_spool_budget spools;    /* --spool-limit, all runs */
};

/* One run being worked on. */
struct proc_run {
    struct ckpt_process *p;
    const struct proc_queued *r;
    struct proc_keeper k;
    struct proc_claim cl;       /* --batch */
    /* The lease on the run's DEST path (run.c's claim_dest), held
     * while anything is written there
     * or deleted on its proof: two runs mapped to one place never write
     * it at once (a check-then-write is no claim). */
    struct proc_keeper pk;
    char *path_key;             /* owned, or NULL: not held */
    char *state_key, *lease_key;
    char *dkey, *ddisp;         /* where the run goes */
    struct proc_state s;
    struct ckpt_buf fail;       /* first failed file of a pass */
    int fail_delete;            /* ...and it was a deletion */
    uint64_t freed, steps;
    double t0;
    uint64_t pitems, pbytes;    /* progress of the current upload pass */
    int failed;                 /* the run failed or was unmapped */
    /* First pass: state "uploaded" is written right before the first
     * deletion (upload deletes only once everything arrived and was
     * verified), from whichever worker thread gets there. */
    int save_on_delete, saved;
    pthread_mutex_t mu;
    struct proc_drops drops;    /* steps left out and deleted */
    /* -n: what the unshard phase would make (it writes nothing): its
     * steps count as unsharded for --drop-sharded, its planned files
     * as uploaded, so the plan predicts the run's row exactly. */
    int64_t *would;
    size_t nwould;
    /* Output directories (DEST-relative to dkey) that unshard found
     * complete at DEST and skipped: adopted when the state lacks them. */
    char **have;
    size_t nhave;
    /* -n: output directories of the steps it would unshard. */
    char **wdirs;
    size_t nwdirs;
    int state_failed;           /* a state write during unshard failed */
    enum proc_phase s_before;   /* the state before "deleted" was written */
    int s_had;                  /* ...and there was one */
    /* Steps whose unshard output verified at DEST (--drop-sharded). */
    int64_t *made;
    size_t nmade;
    /* -n: the files DEST would hold after the pass (display -> size),
     * as the real run counts them (count_dest). */
    struct pfile {
        char *disp;
        uint64_t size;
        size_t seq;
        int base;           /* listed at DEST now (an upload's word on
                               the same name comes after it) */
    } *pf;
    size_t npf;
    /* What a pass leaves at the source by design, for the row: symlinks
     * and special files never copied, files kept (a dropped file changed
     * since it was judged). Paths in the run. */
    struct ckpt_buf specials, kept;
    size_t nspecials, nkept;
    char **keptv;               /* owned: kept files, as in the run */
    size_t nkeptv;
    /* The run's files (paths in it, sorted) listed right before it was
     * judged: the upload must find every one (upload's cfg.expect), or
     * some vanished since and the run is not copied in part. NULL for an
     * archive, or a run not judged in this pass. */
    char **expect;
    size_t nexpect;
    /* A compressed archive read once into a spool that every phase
     * reads (attached while the run is worked on), within p->spools. */
    struct ckpt_archive_spool *spool;
};

/* run.c: run r through its phases under its lease (or claim); sets
 * *failed when it failed. Returns 1 when the run is another live
 * worker's of the batch (no row: walked once more after the round). */
int proc_run_one(struct ckpt_process *p, const struct proc_queued *r,
                 int *failed);

/* ---- events.c: what every phase shares ---- */

/* A phase's event, through the caller's on_event (one at a time). */
void proc_emit(struct proc_run *o, enum ckpt_process_phase ph,
               enum ckpt_process_status st, const char *detail,
               uint64_t files, uint64_t bytes);
/* The run's row; counts it in the totals. */
void proc_finish(struct proc_run *o, enum ckpt_process_status st,
                 const char *detail, int warn);
/* "phase: reason" as a failed row. */
void proc_fail_run(struct proc_run *o, enum ckpt_process_phase ph,
                   const char *why);
/* The run's state written as phase ph; 0, or -1 after a failed row. */
int proc_save_state(struct proc_run *o, enum proc_phase ph,
                    enum ckpt_process_phase phase);
/* -n: DEST would hold the file shown as disp with size bytes. */
void proc_predict_file(struct proc_run *o, const char *disp, uint64_t size,
                       int base);

/* ---- outputs.c: the unshard outputs at DEST ---- */

/* STEPS of the row and the state: output directories recorded, plus
 * extra[n]. */
uint64_t proc_out_steps(const struct proc_state *s, char *const *extra,
                        size_t n);
/* The unshard phase, straight to DEST; 0, or -1 after the run's row. */
int proc_unshard(struct proc_run *o);
/* -n: unrecorded outputs compared as a real run would; 0, or -1. */
int proc_dry_have(struct proc_run *o);
/* Every recorded output checked at DEST; 0, or -1 after the run's row. */
int proc_verify_outputs(struct proc_run *o);

/* ---- passes.c: the upload passes ---- */

/* Steps to leave out (--drop-*); 0, or -1 after the run's row. */
int proc_find_drops(struct proc_run *o);
/* First pass: copy, verify, delete; state "done". 0, or -1. */
int proc_upload(struct proc_run *o);
/* Rerun of an uploaded run: compare every file, delete; 0, or -1. */
int proc_verify_delete(struct proc_run *o);

#endif
