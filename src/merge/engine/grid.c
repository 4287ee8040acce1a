/*
 * engine/grid.c - arrays on a regular chunk grid (zarr v2 groups, Orbax steps):
 * the placement the planners of those formats share. Every grid cell is
 * one chunk of the output tensor; its box is clipped to the array at the
 * edges while the stored (decoded) chunk stays full-size, so its element
 * strides are those of the full chunk in C or F order. The engine decodes
 * each chunk once and writes it from its buffer to the output (engine/decode.c):
 * no temporary copy of the decoded data (but a remote DEST's scratch
 * file: engine/engine.c uns_engine_remote_plan).
 */
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"

/* Contiguous element strides of a full chunk in C or F order. */
static int64_t *chunk_strides(struct ckpt_arena *a, const struct ugrid *g)
{
    int64_t *s = ckpt_arena_array(a, (size_t)g->ndim + 1, sizeof(*s));
    int64_t acc = 1;
    if (!s)
        return NULL;
    for (int k = 0; k < g->ndim; k++) {
        int d = g->fortran ? k : g->ndim - 1 - k;
        s[d] = acc;
        acc *= (int64_t)g->chunks[d];
    }
    return s;
}

int uns_grid_chunks(struct ujob *j, struct ckpt_dcp_entry *e,
                    const struct ugrid *g, int64_t **strides,
                    struct ckpt_err *err)
{
    struct ckpt_arena *ma = j->plan.meta->arena;
    uint64_t grid[CKPT_MAX_DIMS], idx[CKPT_MAX_DIMS], n = 1;
    int nd = g->ndim;
    for (int d = 0; d < nd; d++) {
        grid[d] = (g->shape[d] + g->chunks[d] - 1) / g->chunks[d];
        idx[d] = 0;
        if (ckpt_mul_u64(n, grid[d], &n) != 0 || n > (1u << 24))
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: too many chunks",
                                e->fqn);
    }
    e->chunks = ckpt_arena_array(ma, n + 1, sizeof(*e->chunks));
    *strides = chunk_strides(ma, g);
    if (!e->chunks || !*strides)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    e->chunkcap = n;
    e->nchunks = 0;
    for (uint64_t c = 0; c < n; c++) {
        uint64_t *off = ckpt_arena_array(ma, (size_t)nd + 1, 8);
        uint64_t *size = ckpt_arena_array(ma, (size_t)nd + 1, 8);
        if (!off || !size)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        for (int d = 0; d < nd; d++) {
            off[d] = idx[d] * g->chunks[d];
            size[d] = g->shape[d] - off[d] < g->chunks[d]
                      ? g->shape[d] - off[d] : g->chunks[d];
        }
        memset(&e->chunks[c], 0, sizeof(e->chunks[c]));
        e->chunks[c].offsets = off;
        e->chunks[c].sizes = size;
        e->nchunks++;
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < grid[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}

/* Runs in the probing pool's workers: allocates nothing (the arenas are
 * not shared between threads). */
void uns_grid_locate(struct uchunk *c, const struct ugrid *g,
                     const int64_t *strides, int big_endian)
{
    c->dec = g->chunk_bytes;
    c->src = NULL;
    c->item_off = 0;
    c->data = 0;
    memcpy(c->stride, strides, sizeof(int64_t) * (size_t)g->ndim);
    c->soff = 0;
    c->big_endian = big_endian;
}

void uns_grid_index(const struct uchunk *c, const struct ugrid *g,
                    uint64_t *idx)
{
    for (int d = 0; d < g->ndim; d++)
        idx[d] = c->meta->offsets[d] / g->chunks[d];
}

void uns_grid_fill(char *out, uint64_t chunk_bytes, const void *fill,
                   size_t itemsize)
{
    for (uint64_t b = 0; b + itemsize <= chunk_bytes; b += itemsize)
        memcpy(out + b, fill, itemsize);
}
