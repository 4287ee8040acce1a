/*
 * olmo/plan_local.h - the plan of an OLMo local step, shared by
 * olmo/plan_local.c (files, model files, coverage, entries, output graph)
 * and olmo/local_optim.c (optimizer files). Private to src/: do not expose.
 */
#ifndef CKPT_OLMOLOCAL_INT_H
#define CKPT_OLMOLOCAL_INT_H

#include "flat_params.h"
#include "legacy.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"

/* A rank's piece of a full tensor: elements [start, start+count) of its
 * flattening, at element soff of the storage record at data, every step
 * elements. */
struct lslice {
    int rank;
    uint64_t start, count;
    struct usrc *src;
    uint64_t data;
    int64_t soff, step;
    int big_endian;
};

struct lslices {
    struct lslice *v;       /* malloced */
    size_t n, cap;
};

/* One original parameter: one tensor of model.pt. */
struct lparam {
    const struct lpiece *p; /* rank 0's piece: fqn, shape */
    const struct ckpt_dtype *dtype;
    struct lslices sl;      /* in rank order */
};

enum { V_SHARDED, V_SCALAR, V_PLAIN };

/* One value of an optimizer state. */
struct lvalue {
    const char *key;        /* j->plan.arena */
    int kind;
    const struct ckpt_dtype *dtype;
    int first;              /* rank it was first seen on */
    unsigned char bytes[16];/* V_SCALAR: the element */
    struct lslices sl;      /* V_SHARDED; V_SCALAR: one slice */
    struct ckpt_pv *plain;  /* V_PLAIN: rank 0's value */
    size_t entry;
};

struct lstate {
    int64_t id;
    long param;             /* index into params, -1: none */
    const char *fqn;        /* cleaned param_names entry */
    struct lvalue *v;       /* malloced */
    size_t n, cap;
};

/* Where the chunks of one tensor entry are. */
struct lloc {
    struct lslice *loc;     /* malloced; per chunk, soff at its origin */
    int64_t *stride;        /* meta arena; per chunk, ndim + 1 */
};

struct lplan {
    struct ujob *j;
    int nranks;
    struct lmodel m0;       /* rank 0's model file (graph in j->plan.arena) */
    struct lparam *params;  /* malloced; parallel to m0.pieces */
    struct strmap byfqn;    /* fqn -> param */
    struct lstate *states;  /* malloced */
    size_t nstates, statecap;
    struct strmap byid;     /* id (8 bytes) -> state */
    const char **gfqn;      /* param_groups: id -> name, malloced */
    struct strmap gbyid;    /* id -> index into gfqn */
    struct ckpt_pv *groups; /* rank 0's param_groups (j->plan.arena) */
    struct ckpt_tzip *oz0;
    struct usrc *osrc0;
    struct lloc *locs;      /* per entry, malloced */
};

/* olmo/plan_local.c */
/* Open rank file DIR/rank{r}.pt (*rel: its name, metadata arena) and
 * parse its data.pkl into arena a with the allow-list allow. */
int uns_olmolocal_load(struct lplan *p, const char *dir, int r,
                       struct ckpt_arena *a, ckpt_pickle_allow_fn allow,
                       const char **rel, struct usrc **src,
                       struct ckpt_tzip **z, struct ckpt_pv **root,
                       struct ckpt_err *err);
/* The storage record of tensor t (named what) in z, checked to hold it. */
int uns_olmolocal_record(const struct ckpt_tzip *z, const struct ckpt_tensor *t,
                         const char *rel, const char *what,
                         const struct ckpt_tzip_entry **out,
                         struct ckpt_err *err);
/* A zeroed slice appended to s. */
struct lslice *uns_olmolocal_add_slice(struct lslices *s);

/* olmo/local_optim.c */
/* Read optim/rank{r}.pt into p->states (rank 0 first: it keeps its
 * graph, param_groups and zip in p). */
int uns_olmooptim_rank(struct lplan *p, int r, struct ckpt_err *err);
/* Remove "_fsdp_wrapped_module." from rank 0's param_names. */
int uns_olmooptim_clean_names(struct lplan *p, struct ckpt_err *err);

#endif
