/*
 * engine/flat.c - a range of a flattened tensor as boxes.
 *
 * FSDP flat parameters (OLMo local) and OLMo-core shards store pieces of
 * a tensor as ranges [start, start+count) of its row-major flattening.
 * Such a range is not a box, but it is the union of at most 2*ndim-1 of
 * them: a partial row at each end of each dimension and whole rows in
 * between. The plan and copy engine works on boxes, so cutting the range
 * here lets those formats reuse it unchanged: each box reads its elements
 * from the shard at the full tensor's row-major strides, starting at the
 * element given by 'first'.
 */
#include "merge/engine/engine.h"
#include "merge/job.h"

struct cut {
    int ndim;
    const uint64_t *size;
    uint64_t inner[CKPT_MAX_DIMS];   /* elements per index of each dim */
    uint64_t off[CKPT_MAX_DIMS];     /* fixed indices of the outer dims */
    struct flat_box *out;
    int n, cap;
};

static int emit(struct cut *c, int d, uint64_t lo, uint64_t hi)
{
    if (c->n == c->cap)
        return -1;
    struct flat_box *b = &c->out[c->n++];
    uint64_t first = 0;
    for (int k = 0; k < c->ndim; k++) {
        if (k < d) {
            b->off[k] = c->off[k];
            b->len[k] = 1;
        } else if (k == d) {
            b->off[k] = lo;
            b->len[k] = hi - lo;
        } else {
            b->off[k] = 0;
            b->len[k] = c->size[k];
        }
        first += b->off[k] * c->inner[k];
    }
    b->first = first;
    return 0;
}

/* [s, e) within the sub-tensor at dim d, outer indices fixed in c->off. */
static int cut_range(struct cut *c, int d, uint64_t s, uint64_t e)
{
    if (s >= e)
        return 0;
    uint64_t in = c->inner[d];
    if (in == 1 || d == c->ndim - 1)
        return emit(c, d, s / in, e / in);
    uint64_t r = s / in;
    if (s % in) {       /* head: the rest of row r */
        uint64_t end = e < (r + 1) * in ? e : (r + 1) * in;
        c->off[d] = r;
        if (cut_range(c, d + 1, s - r * in, end - r * in) != 0)
            return -1;
        s = end;
        if (s == e)
            return 0;
        r++;
    }
    if (e / in > r && emit(c, d, r, e / in) != 0)   /* whole rows */
        return -1;
    if (e % in && e / in >= r) {    /* tail: the start of row e/in */
        c->off[d] = e / in;
        return cut_range(c, d + 1, 0, e % in);
    }
    return 0;
}

int uns_flat_boxes(int ndim, const uint64_t *size, uint64_t start,
                   uint64_t count, struct flat_box *out, int cap)
{
    struct cut c = { .ndim = ndim, .size = size, .out = out, .cap = cap };
    uint64_t numel = 1;
    if (ndim < 0 || ndim > CKPT_MAX_DIMS)
        return -1;
    for (int k = ndim - 1; k >= 0; k--) {
        c.inner[k] = numel;
        if (size[k] && numel > UINT64_MAX / size[k])
            return -1;
        numel *= size[k];
    }
    if (start > numel || count > numel - start)
        return -1;
    if (count == 0)
        return 0;
    if (ndim == 0) {    /* a scalar: the range is the one element */
        if (cap < 1)
            return -1;
        out[0].first = 0;
        return 1;
    }
    return cut_range(&c, 0, start, start + count) == 0 ? c.n : -1;
}
