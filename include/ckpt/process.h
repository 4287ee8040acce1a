/*
 * ckpt/process.h - the whole janitor job for each run (SPEC "ckpt
 * process"): judge with clean's rules (bad runs deleted), map to the W&B
 * path, unshard sharded steps, upload the run uncompressed under
 * DEST/ENTITY/PROJECT/RUN_ID/ with its logs, verify every object, delete
 * the source. --include/--exclude leave files out that then stay at the
 * source (never deleted unless uploaded and verified); --drop-sharded and
 * --drop-incomplete leave steps out that are deleted with it (drop.c).
 *
 * Idempotent: a small state object per run, DEST/.ckpt-process/ID.json,
 * records the phases finished ("uploaded": everything at DEST and
 * verified, written right before the first source file is deleted;
 * "done": the source deleted too), where the run went and the unshard
 * outputs written straight to DEST (path, size, checksum; verified at
 * DEST before anything is dropped or deleted). A
 * rerun after a crash goes on from there: a run whose upload was verified
 * is not judged again (its source may be half deleted), only verified
 * again and deleted.
 *
 * Many workers: each run is worked on under a lease,
 * DEST/.ckpt-process/ID.lease (include/ckpt/lease.h), renewed by a thread
 * while the run is worked on and checked valid before every deletion. A
 * run leased by a live worker is skipped.
 *
 * Nothing is printed: the caller gets events, one per phase per run and a
 * final one (phase CKPT_PROC_RUN) that is the run's row.
 */
#ifndef CKPT_PROCESS_H
#define CKPT_PROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/clean.h"
#include "ckpt/err.h"
#include "ckpt/storage.h"

struct ckpt_wandb_map;

enum ckpt_process_phase {
    CKPT_PROC_JUDGE = 0,
    CKPT_PROC_LEASE,
    CKPT_PROC_MAP,
    CKPT_PROC_UNSHARD,
    CKPT_PROC_UPLOAD,
    CKPT_PROC_VERIFY,
    CKPT_PROC_DELETE,
    CKPT_PROC_RUN,          /* the run's outcome: its row */
    CKPT_PROC_SPOOL         /* SKIPPED only: a compressed archive that
                               was not spooled (detail: why), so each
                               phase reads it again */
};

enum ckpt_process_status {
    CKPT_PROC_OK = 0,       /* phase finished (RUN: processed) */
    CKPT_PROC_DONE,         /* phase found already finished by an earlier
                               run (RUN: state done, source gone) */
    CKPT_PROC_DELETED,      /* RUN: a bad run, deleted */
    CKPT_PROC_SKIPPED,      /* live, leased, not a run, --keep-bad */
    CKPT_PROC_FAILED,       /* detail says why; the run is left alone
                               past this phase */
    CKPT_PROC_WOULD         /* --dry-run: what the phase would do */
};

/* "judge", "lease", ..., "run"; "ok", "done", "deleted", ... */
const char *ckpt_process_phase_name(enum ckpt_process_phase p);
const char *ckpt_process_status_name(enum ckpt_process_status s);

struct ckpt_process_event {
    enum ckpt_process_phase phase;
    enum ckpt_process_status status;
    const char *run;        /* borrowed: the run as shown to the user */
    const char *id;         /* borrowed: RUN_ID (base name, archive stem) */
    const char *dest;       /* borrowed: DEST/.../RUN_ID as shown, or NULL */
    const char *detail;     /* borrowed: reason or error, "" if none */
    int warn;               /* SKIPPED: worth a warning (not a run) */
    uint64_t files, bytes;  /* at DEST (upload, verify, run) */
    uint64_t steps;         /* steps unsharded */
    uint64_t freed;         /* bytes deleted at the source */
    double seconds;         /* RUN: wall time of this run */
};

enum ckpt_process_unshard { CKPT_PROC_UNSHARD_ALL = 0,
                            CKPT_PROC_UNSHARD_LATEST,
                            CKPT_PROC_UNSHARD_NONE };

struct ckpt_process_cfg {
    struct ckpt_storage *dst;    /* borrowed: DEST's storage */
    const char *dest_key;        /* DEST's key (root of everything) */
    const struct ckpt_wandb_map *map; /* borrowed; NULL: DEST/RUN_ID/ */
    struct ckpt_clean_opts clean;/* judge: min_age, max_archive (dry_run
                                    is taken from below) */
    int dry_run;
    int keep_bad;                /* report bad runs, do not delete them */
    int keep_source;             /* verify, but never delete the source */
    int keep_archive;            /* store an archive as it is, at
                                    DEST/.../RUN_ID.tar.gz, not extracted */
    const struct ckpt_filter *filter; /* borrowed, or NULL: --include/
                                    --exclude (ckpt/upload.h): files left
                                    out stay at the source */
    int drop_sharded;            /* leave out sharded steps with a
                                    complete -unsharded copy... */
    int drop_incomplete;         /* ...and incomplete steps; deleted with
                                    the source (verified uploads first) */
    enum ckpt_process_unshard unshard;
    int unshard_format;          /* enum ckpt_unshard_format of the
                                    outputs (ckpt/unshard.h): torch
                                    (default), safetensors, or hf (an HF
                                    model directory per step, stepN-hf/:
                                    the model only, so never a licence
                                    for --drop-sharded) */
    int unshard_step0;           /* also step 0 */
    int rank_values;             /* unshard's --rank-values (enum
                                    ckpt_rank_values, ckpt/unshard.h) */
    const char *tmp_dir;         /* unshard's scratch: the step being
                                    read of a compressed archive or zip
                                    (outputs go straight to DEST); NULL:
                                    $TMPDIR or /tmp */
    struct ckpt_storage *logs_st;/* borrowed, or NULL: no --logs */
    const char *logs_key;
    int runs;                    /* runs worked on at once; <= 0:
                                    CKPT_PROC_DEFAULT_RUNS */
    int jobs;                    /* files in flight, all runs together
                                    (each run gets jobs / runs); <= 0:
                                    CKPT_PROC_DEFAULT_TRANSFERS */
    uint64_t bwlimit;            /* bytes per second the upload phases
                                    send, every run together
                                    (ckpt/ratelimit.h); 0: none */
    uint64_t mem_budget;         /* upload data buffers, all runs
                                    together (each run gets its share,
                                    at least 16 MiB); 0: 96 MiB */
    struct ckpt_storage_cfg storage; /* how unshard opens remote runs
                                    (as the caller's storages; its
                                    outputs go through dst itself) */
    const char *state_dir;       /* upload journals; NULL: none */
    int64_t lease_ttl;           /* seconds; 0: CKPT_LEASE_TTL */
    /* Workers started with the same batch id (a Slurm array's job id)
     * share the runs out: each run is claimed by one of them
     * (DEST/.ckpt-process/RUN_ID.claim) and the others give it no row
     * and no count. NULL: no batch (each worker reports every run it
     * is given). Not with dry_run. */
    const char *batch;
    /* A compressed archive (.tar.gz/.bz2/.zst/.xz) is decompressed once:
     * its members are spooled below tmp_dir (ckpt_archive_spool) and
     * every phase reads the spool. Spools of the runs in flight hold at
     * most spool_limit bytes together (0: no limit of its own) and never
     * fill tmp_dir's file system past its last GiB (or 5%); an archive
     * that does not fit, or does not read to its proper end, is read
     * once per phase instead. no_spool: never spool. */
    uint64_t spool_limit;
    int no_spool;
    /* Called one at a time (never concurrently), from whichever thread
     * works on the run; a run's events come in phase order, runs'
     * events interleave when runs > 1. on_progress gets the items and
     * bytes of every run's upload so far (never going back). */
    void (*on_event)(void *ud, const struct ckpt_process_event *ev);
    void (*on_progress)(void *ud, uint64_t items, uint64_t bytes);
    /* A run's archive being spooled: bytes read of its size so far
     * (NULL: nobody is told); serialised with the others. */
    void (*on_archive)(void *ud, const char *run, uint64_t read,
                       uint64_t size);
    void *ud;
};

#define CKPT_PROC_DEFAULT_RUNS 4
#define CKPT_PROC_DEFAULT_TRANSFERS 32

struct ckpt_process_totals {
    uint64_t processed, done, deleted, skipped, failed;
    uint64_t files, bytes, steps, freed;
    double seconds;
};

struct ckpt_process;

/* cfg is copied (its pointers must outlive the processor). Lists the
 * --logs location now. */
int ckpt_process_new(struct ckpt_process **out,
                     const struct ckpt_process_cfg *cfg,
                     struct ckpt_err *err);
void ckpt_process_free(struct ckpt_process *p);

/* Queue SRC: a run (directory or archive) or, when SRC does not look like
 * a run but holds directories or archives, each of them (as `ckpt ls`
 * sees it). A missing object-store prefix is an empty queue. st is
 * borrowed. Returns the number of runs queued, or -1 (err). */
int ckpt_process_add(struct ckpt_process *p, struct ckpt_storage *st,
                     const char *key, struct ckpt_err *err);

/* The queued runs' RUN_IDs and locations (for a batched W&B lookup before
 * ckpt_process_run). Borrowed; n set. */
const char *const *ckpt_process_ids(const struct ckpt_process *p, size_t *n);
char *ckpt_process_location(const struct ckpt_process *p, size_t i);
/* Replace the W&B map (after a batched lookup); borrowed. */
void ckpt_process_set_map(struct ckpt_process *p,
                          const struct ckpt_wandb_map *map);

/* Process every queued run: cfg.runs at a time (each run's phases in
 * order; runs started in queue order). Returns 0 when every run was done,
 * deleted or legitimately skipped, -1 when one failed or was unmapped. */
int ckpt_process_run(struct ckpt_process *p, struct ckpt_process_totals *t);

#endif
