/*
 * engine.h - the unshard engine: chunks located and their coverage
 * checked, tensors cut into bands (plan.c), rank-local values (rank_values.c),
 * the output value tree (tree.c), chunk grids and flat ranges for the
 * trainers' plans (grid.c, flat.c), the memory gate of decoded chunks
 * (decode.c), the pool tasks that copy and verify (engine.c, verify.c).
 * Private to src/.
 */
#ifndef CKPT_MERGE_ENGINE_H
#define CKPT_MERGE_ENGINE_H

#include "merge/job.h"

/* engine/decode.c: acquire room for bytes of decoded chunk (waits while others
 * hold too much: more than UNS_DEC_CAP together, unless none is held),
 * release it after. */
#define UNS_DEC_CAP ((uint64_t)64 << 20)
void uns_dec_init(struct ujob *j);
void uns_dec_acquire(struct ujob *j, uint64_t bytes);
void uns_dec_release(struct ujob *j, uint64_t bytes);
/* After probing: tensors whose every chunk is decoded become chunked (one
 * task per chunk); those whose chunks are whole rows in C order (the
 * usual Orbax and zarr layout) also rows: one band per chunk. */
void uns_dec_bands(struct ujob *j);

/* engine/grid.c: the chunks of an array stored on a regular chunk grid (zarr v2,
 * Orbax), shared by the planners of those formats: e gets one chunk per
 * grid cell (C order of the grid), edge chunks clipped to the shape;
 * each is decoded by j->plan.decode into a full chunk of chunk_bytes laid out
 * in C order (F with fortran). *strides: the element strides of such a
 * chunk (in the metadata's arena). */
struct ugrid {
    int ndim;
    const uint64_t *shape, *chunks;
    int fortran;
    uint64_t chunk_bytes;
};
int uns_grid_chunks(struct ujob *j, struct ckpt_dcp_entry *e,
                    const struct ugrid *g, int64_t **strides,
                    struct ckpt_err *err);
/* Chunk c of a grid array as a decoded chunk (a locate callback's work,
 * in a pool worker). */
void uns_grid_locate(struct uchunk *c, const struct ugrid *g,
                     const int64_t *strides, int big_endian);
/* Grid index of chunk c of a grid array. */
void uns_grid_index(const struct uchunk *c, const struct ugrid *g,
                    uint64_t *idx);
/* Fill out (chunk_bytes) with the element fill, itemsize bytes. */
void uns_grid_fill(char *out, uint64_t chunk_bytes, const void *fill,
                   size_t itemsize);

/* engine/plan.c */
int uns_plan_tensors(struct ujob *j, struct ckpt_err *err);
/* engine/rank_values.c: before planning, a rank-local checkpoint's keys whose ranks
 * saved different values are an error, or split into KEY.rankR entries,
 * by o->rank_values; sets src.rank_check. */
int uns_rank_values(struct ujob *j, struct ckpt_err *err);
/* The error for tensor t whose replica chunk c differs from the chunk it
 * replicates (the engine's check). */
int uns_rank_tensor_error(const struct ujob *j, const struct utensor *t,
                          const struct uchunk *c, struct ckpt_err *err);
/* size[0..ndim) as "[a, b, c]" into buf (n bytes, cut short if need be),
 * for messages; returns buf. */
const char *uns_fmt_shape(char *buf, size_t n, const uint64_t *size,
                          int ndim);

/* Where a chunk's bytes lie in a torch zip record, as a trainer's plan
 * that reads torch.save files itself finds them (OLMo's and Megatron's
 * legacy rank files): its locate points the chunk there with
 * uns_chunk_at. */
struct uns_zloc {
    struct usrc *src;
    uint64_t data;          /* absolute offset of the storage record */
    const int64_t *stride;  /* ndim element strides (plan arena) */
    int64_t soff;           /* storage offset, elements */
    int big_endian;
};
void uns_chunk_at(struct uchunk *c, const struct uns_zloc *l, int ndim);

/* Chunk c of t located (its item parsed and checked against the
 * metadata, its zip record registered for the CRC check), once, from any
 * pool worker: the copy calls it before reading c. 0, or -1 with err
 * naming tensor and chunk. */
int uns_plan_locate(struct ujob *j, struct utensor *t,
                    struct uchunk *c, struct ckpt_err *err);
/* After the copy: every chunk it did not read (replicas skipped, empty
 * boxes) located too, so each item is checked as when probed up front. */
int uns_plan_locate_rest(struct ujob *j, struct ckpt_err *err);
void uns_plan_band_box(const struct utensor *t, uint64_t band, uint64_t *lo,
                   uint64_t *hi, uint64_t *dst_off, uint64_t *len);
/* Bands of t of at most target bytes (t->nbytes and t->e set). */
void uns_plan_cut_bands(struct utensor *t, uint64_t target);

/* engine/tree.c */
int uns_tree_build(struct ujob *j, struct ckpt_pv **root, struct ckpt_err *err);

/* engine/tree.c, for formats that build their own graph (olmo/plan_legacy.c): the output
 * node of tensor t, and e's storages in v remapped to output records. */
struct ckpt_pv *uns_tree_tensor(struct ujob *j, struct utensor *t);
int uns_tree_remap(struct ujob *j, const struct ckpt_dcp_entry *e,
               struct ckpt_pv *v, const struct ckpt_tzip *z,
               const struct ckpt_rd *rd, struct usrc *src,
               struct ckpt_err *err);

/* engine/flat.c: the range [start, start+count) of the row-major flattening of
 * a tensor of shape size[ndim], cut into boxes (at most 2*ndim-1; a
 * scalar is one box with no dims). Box b holds the elements of the range
 * whose indices lie in off..off+len; 'first' is the flat index of its
 * origin, so element i of the box sits at range position
 * first - start + sum(i[k] * row-major stride[k]). Returns the number of
 * boxes, or -1 if the range is out of bounds or needs more than cap. */
struct flat_box {
    uint64_t off[CKPT_MAX_DIMS], len[CKPT_MAX_DIMS];
    uint64_t first;
};
int uns_flat_boxes(int ndim, const uint64_t *size, uint64_t start,
               uint64_t count, struct flat_box *out, int cap);


/* engine/engine.c */
void uns_job_fail(struct ujob *j, const struct ckpt_err *err);
int uns_engine_run(struct ujob *j, int verify, struct ckpt_err *err);
/* Remote output, before anything is written: tensors decoded chunk by
 * chunk whose chunks are not whole rows get bands of whole chunk rows, or
 * a scratch file (--tmp-dir) to be decoded into. 0, or -1 with err. */
int uns_engine_remote_plan(struct ujob *j, struct ckpt_err *err);
int uns_bufpool_init(struct bufpool *b, size_t size);
void uns_bufpool_release(struct bufpool *b);

/* engine/verify.c: outputs read back through ckpt's own readers */
int uns_verify_outputs(struct ujob *j, struct ckpt_err *err);

#endif
