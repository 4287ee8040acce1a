/*
 * resolve_int.h - shared by resolve.c (queries, results, the driver) and
 * phases.c (what each phase searches for and how it decides). Private to
 * src/wandb: do not expose.
 */
#ifndef CKPT_RESOLVE_INT_H
#define CKPT_RESOLVE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "wandb_int.h"

struct ckpt_pool;

#define CHUNK 50  /* keys per query: one page of results for ids */

struct strv {
    char **v;      /* owned strings */
    size_t n;
};

struct resolver;

struct query {
    struct resolver *r;        /* borrowed */
    char *entity, *project;    /* owned */
    char *filter;              /* owned; NULL: a Run query of `name` */
    char *name;                /* owned or NULL */
    int ran, failed;
    struct ckpt_wandb_runs runs;
    struct ckpt_err err;
};

struct job {
    struct ckpt_wandb_evidence *ev;   /* borrowed */
    struct ckpt_wandb_result *res;    /* borrowed */
    const char *entity, *project;     /* borrowed; NULL if unknown */
    const char *name, *group;         /* display name/group; borrowed */
    int done;
    struct ckpt_buf notes;            /* why phases did not resolve it */
    struct strv cands;                /* candidate paths seen */
    struct strv keys;                 /* this phase's search keys */
    size_t group_ix;                  /* this phase's project group */
    size_t *qs;                       /* owned; this phase's queries */
    size_t nqs;
};

struct resolver {
    struct ckpt_wandb_client *c;             /* borrowed */
    const struct ckpt_wandb_resolve_opts *o; /* borrowed */
    struct job *jobs;                        /* owned */
    size_t n;
    struct query **q;                        /* owned */
    size_t nq;
    char *viewer;                            /* owned; default entity */
    struct ckpt_pool *pool;                  /* owned; lazily */
    pthread_mutex_t mu;
    _Atomic int auth_failed;
    struct ckpt_err auth_err;                /* guarded by mu */
};

struct phase {
    const char *source;
    /* Search keys of job j (none: not in this phase). */
    void (*keys)(struct resolver *r, struct job *j);
    /* The filter for keys[0..n) of one project, malloced; NULL for a Run
     * query (one local id). */
    char *(*filter)(char *const *keys, size_t n);
    void (*eval)(struct resolver *r, struct job *j);
};

/* resolve.c */
void wb_strv_push(struct strv *s, const char *x);
void wb_strv_release(struct strv *s);
int wb_strv_has(const struct strv *s, const char *x);
/* Add a reason j is not resolved yet ("; "-joined). */
void wb_note(struct job *j, const char *fmt, ...) CKPT_PRINTF(2, 3);
/* "entity/project/id" of j, malloced. */
char *wb_path_of(const struct job *j, const char *id);
/* Set j's result (evidence gets the status prefix) and mark it done. */
void wb_finish(struct job *j, int status, const char *source,
               char *evidence /* owned */);
void wb_set_candidates(struct job *j, const struct strv *paths);
/* s->v[0..max) joined by ", ", malloced. */
char *wb_joined(const struct strv *s, size_t max);
/* qsort comparator of struct ckpt_wandb_run *: oldest createdAt first. */
int wb_cmp_created(const void *a, const void *b);
/* FOUND: the newest of ids[0..n) (oldest first), whose last logged steps
 * are last[] (-1 unknown). */
void wb_found_ids(struct job *j, const char *const *ids, const int64_t *last,
                  size_t n, const char *source, char *evidence /* owned */);
/* FOUND: the newest of runs[0..n) (oldest first). */
void wb_found(struct job *j, struct ckpt_wandb_run **runs, size_t n,
              const char *source, char *evidence /* owned */);
/* If one of j's queries failed (other than a missing project, which
 * becomes a note), finish j as ERROR and return 1. */
int wb_check_failure(struct resolver *r, struct job *j);
/* The last step local files record for W&B run id, or -1. */
int64_t wb_local_last_step(const struct job *j, const char *id);

/* phases.c */
extern const struct phase phase_local, phase_slurm, phase_name;
/* --offline: the newest local run id, unconfirmed. */
void wb_resolve_offline(struct job *j);

#endif
