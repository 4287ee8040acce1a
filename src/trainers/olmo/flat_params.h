/*
 * olmo/flat_params.h - the model files of OLMo `local` steps: which pieces of
 * which parameters one rank's FSDP flat parameters hold. Shared by
 * olmo/plan_local.c and the olmoflat fuzz target. Private to src/: do
 * not expose.
 */
#ifndef CKPT_OLMOFLAT_H
#define CKPT_OLMOFLAT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/err.h"
#include "ckpt/pickle.h"
#include "ckpt/torchfmt.h"

/* One FSDP flat parameter of one rank: flat_param.data, a 1-D tensor
 * whose last `padded` elements are padding. */
struct lflat {
    const char *module;     /* FSDP module name as saved; borrowed */
    struct ckpt_tensor data;
    uint64_t numel, padded;
    size_t first, n;        /* its pieces: pieces[first .. first+n) */
};

/* One original parameter of a flat parameter and the part of it this rank
 * holds (if held): elements [start, start+count) of its row-major
 * flattening, stored from element `at` of flat_param.data on. */
struct lpiece {
    const char *fqn;        /* root fqn, as OLMo's unsharder names it */
    int ndim;
    const uint64_t *size;   /* ndim; arena */
    uint64_t numel;
    int held;
    uint64_t start, count, at;
    size_t flat;            /* index into flats */
};

struct lmodel {
    struct lflat *flats;    /* malloced */
    size_t nflats, flatcap;
    struct lpiece *pieces;  /* malloced */
    size_t npieces, piececap;
};

#define OLMOFLAT_WRAPPED "_fsdp_wrapped_module."

/* s with every "_fsdp_wrapped_module." removed (Python's str.replace, as
 * OLMo cleans module and parameter names), in arena a; NULL when a is
 * full. */
char *uns_olmoflat_strip(struct ckpt_arena *a, const char *s);

/* Classes a model file may name (ckpt_pickle_allow_fn): tensors,
 * torch.Size and FSDP's _ShardParamInfo NamedTuple. */
int uns_olmoflat_allow(void *ud, const char *module, const char *name);

/*
 * Interpret the unpickled model file `root` ({"modules": [{"name",
 * "handles": [{"flat_param.data", "flat_param._fqns", ...}]}]}) of the
 * rank file `file` (for messages): every flat parameter, every original
 * parameter and the range of it this rank holds, from _shard_param_infos
 * (torch >= 2.1) or _shard_indices/_shard_param_offsets (torch <= 2.0.1).
 * Every range is checked against its parameter and against the unpadded
 * part of flat_param.data. Strings go to arena a; *m must be zeroed and
 * is released with olmoflat_release. 0, or -1 with err (CKPT_EFORMAT).
 */
int uns_olmoflat_read(struct ckpt_arena *a, const struct ckpt_pv *root,
                      const char *file, struct lmodel *m, struct ckpt_err *err);
/* NULL-safe; leaves *m zeroed. */
void uns_olmoflat_release(struct lmodel *m);

#endif
