/*
 * olmocore_meta_fuzz.c - property: any bytes as an OLMo-core
 * metadata.json never crash or leak, whether parsing fails or the tiling
 * check then runs on every tensor (with and without allow_replicas); and
 * every piece the parser accepts lies inside its tensor.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/olmocore.h"

static void check_piece(const struct ckpt_olmocore_tensor *t,
                        const struct ckpt_olmocore_piece *p)
{
    uint64_t n = 0;
    for (size_t k = 0; k < p->nranges; k++) {
        if (p->ranges[2 * k] > p->ranges[2 * k + 1] ||
            p->ranges[2 * k + 1] > t->numel)
            abort();
        n += p->ranges[2 * k + 1] - p->ranges[2 * k];
    }
    if (p->ranges && n != p->numel)
        abort();
    for (int d = 0; !p->ranges && d < t->ndim; d++)
        if (p->offset[d] + p->box[d] > t->shape[d])
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_olmocore_meta *m;
    struct ckpt_err err;
    if (ckpt_olmocore_meta_parse((const char *)data, size, "metadata.json",
                                 &m, &err) != 0)
        return 0;
    for (size_t i = 0; i < m->n; i++) {
        const struct ckpt_olmocore_tensor *t = &m->tensors[i];
        for (size_t k = 0; k < t->npieces; k++)
            check_piece(t, &t->pieces[k]);
        ckpt_olmocore_check_tiling(t, 0, &err);
        ckpt_olmocore_check_tiling(t, 1, &err);
    }
    ckpt_olmocore_meta_free(m);
    return 0;
}
