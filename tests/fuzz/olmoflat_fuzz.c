/*
 * olmoflat_fuzz.c - property: olmoflat_read (what an OLMo local model
 * file's flat parameters hold) never crashes or leaks on any unpickled
 * input, and every range it accepts lies inside its parameter and inside
 * the unpadded part of its flat_param.data.
 */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/pickle.h"
#include "trainers/olmo/flat_params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_arena *a = ckpt_arena_new(64u << 20);
    struct ckpt_pickle_opts o = { .name = "data.pkl",
                                  .allow = uns_olmoflat_allow };
    struct ckpt_pv *v;
    struct ckpt_err err;
    struct lmodel m = { 0 };
    if (a && ckpt_pickle_load(a, data, size, &o, &v, NULL, &err) == 0 &&
        uns_olmoflat_read(a, v, "model/rank0.pt", &m, &err) == 0) {
        for (size_t i = 0; i < m.npieces; i++) {
            const struct lpiece *p = &m.pieces[i];
            const struct lflat *f = &m.flats[p->flat];
            if (p->held && (p->count == 0 || p->start > p->numel ||
                            p->count > p->numel - p->start ||
                            p->at > f->numel - f->padded ||
                            p->count > f->numel - f->padded - p->at))
                __builtin_trap();
        }
    }
    uns_olmoflat_release(&m);
    ckpt_arena_free(a);
    return 0;
}
