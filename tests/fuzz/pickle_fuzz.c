/*
 * pickle_fuzz.c - property: ckpt_pickle_load never crashes, never leaks,
 * never allocates past the arena limit, on any input; whatever it accepts
 * can be rendered and re-emitted (or refused cleanly), and the re-emitted
 * pickle loads again.
 */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/pickle.h"
#include "ckpt/torchfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_arena *a = ckpt_arena_new(64u << 20);
    struct ckpt_pickle_opts o = { .name = "fuzz.pkl" };
    struct ckpt_pv *v, *v2;
    struct ckpt_err err;
    if (a && ckpt_pickle_load(a, data, size, &o, &v, NULL, &err) == 0) {
        struct ckpt_buf b = CKPT_BUF_INIT;
        ckpt_pv_repr(v, &b, 4096);
        ckpt_buf_reset(&b);
        if (ckpt_pickle_dump(v, &b, &err) == 0 &&
            ckpt_pickle_load(a, b.ptr, b.len, &o, &v2, NULL, &err) != 0 &&
            err.code != CKPT_ENOMEM)
            __builtin_trap();   /* we wrote something we cannot read */
        ckpt_buf_release(&b);
        struct ckpt_tensor t;
        ckpt_tensor_from_pv(v, &t, "fuzz", &err);
        ckpt_torch_check_object(v, "fuzz", &err);
        ckpt_torch_check_written(v, "fuzz", NULL, &err);
    }
    ckpt_arena_free(a);
    return 0;
}
