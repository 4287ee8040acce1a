/*
 * ckpt/olmocore.h - OLMo-core 0.1 checkpoints (olmo_core.distributed.
 * checkpoint, written by OLMo's `olmo_core` sharded checkpointer): the
 * metadata.json of model/ and optim/, and whether its pieces tile each
 * tensor. Layout details: docs/formats/olmo.md.
 *
 * Every rank writes rank_R.safetensors holding, under each tensor's key,
 * a 1-D tensor: its piece of the full tensor. metadata.json says which
 * piece each file holds. Both functions take untrusted bytes: every size
 * and offset is checked against the tensor's shape.
 */
#ifndef CKPT_OLMOCORE_H
#define CKPT_OLMOCORE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/err.h"
#include "ckpt/torchfmt.h"

/* One tensor's piece in one file: the concatenation of `ranges` of the
 * full tensor's row-major flattening (flattened_offsets), or the box of
 * shape `box` at `offset` in row-major order (a DTensor's local shard:
 * local_shape + global_offset). */
struct ckpt_olmocore_piece {
    const char *file;            /* a plain name, "rank_0.safetensors" */
    const uint64_t *ranges;      /* 2 * nranges: [start, end) pairs, in
                                    file order; NULL for a box */
    size_t nranges;
    const uint64_t *offset;      /* ndim each for a box, else NULL */
    const uint64_t *box;
    uint64_t numel;              /* elements the file holds */
};

struct ckpt_olmocore_tensor {
    const char *key;
    const struct ckpt_dtype *dtype; /* NULL: not recorded (the earliest
                                       writers); the files then say */
    int ndim;
    const uint64_t *shape;          /* ndim */
    uint64_t numel;
    struct ckpt_olmocore_piece *pieces;
    size_t npieces;
};

struct ckpt_olmocore_meta {
    struct ckpt_arena *arena;              /* owned; everything below */
    struct ckpt_olmocore_tensor *tensors;  /* in metadata order */
    size_t n;
};

/*
 * Parse metadata.json (json, len; need not be NUL-terminated; name for
 * messages) into *out, freed with ckpt_olmocore_meta_free. Accepts the
 * 0.1 schema (shard_spec_per_file: {file: {flattened_offsets | null,
 * local_shape, global_offset}}) and the earlier flattened_offsets_per_file
 * ({file: [start, end]} or {file: [[start, end], ...]}), as OLMo-core's
 * own reader does. Fails with CKPT_EFORMAT for ranges or boxes outside the
 * tensor, repeated keys or files, file names that are not plain names;
 * CKPT_EUNSUPPORTED for dtypes ckpt does not know.
 */
int ckpt_olmocore_meta_parse(const char *json, size_t len, const char *name,
                             struct ckpt_olmocore_meta **out,
                             struct ckpt_err *err);
/* NULL-safe. */
void ckpt_olmocore_meta_free(struct ckpt_olmocore_meta *m);

/*
 * Whether t's pieces hold every element exactly once (identical repeated
 * ranges are accepted with allow_replicas). 0, or -1 with err naming the
 * tensor, the elements and the files: "tensor 'w': elements [4, 8) are
 * stored in both rank_0.safetensors and rank_1.safetensors", "... are in
 * no file".
 */
int ckpt_olmocore_check_tiling(const struct ckpt_olmocore_tensor *t,
                               int allow_replicas, struct ckpt_err *err);

#endif
