/*
 * torchzip_fuzz.c - property: reading any bytes as a torch.save zip (and,
 * when that works, as a DCP tensor item: data.pkl, tensor, bounds) never
 * crashes, never leaks, never reads outside the input. The judge's
 * whole-zip check (tail and central directory only) answers 0, 1 or -1,
 * and -1 over memory only for bytes that are no zip at all.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/torchfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_rd rd;
    struct ckpt_tzip *z;
    struct ckpt_err err;
    ckpt_rd_mem(&rd, data, size, "fuzz.zip");
    if (ckpt_tzip_open(&z, &rd, &err) == 0) {
        for (size_t i = 0; i < z->n; i++) {
            char *p;
            size_t len;
            if (ckpt_tzip_read(z, &rd, &z->entries[i], 1 << 20, &p, &len,
                               &err) == 0)
                free(p);
        }
        ckpt_tzip_free(z);
    }
    int w = ckpt_tzip_whole(&rd, &err);
    if (w < -1 || w > 1 || (w == -1 && err.code != CKPT_EUNSUPPORTED &&
                            err.code != CKPT_ENOMEM)) {
        fprintf(stderr, "ckpt_tzip_whole: %d (%s)\n", w, err.msg);
        abort();
    }
    struct ckpt_tensor_loc loc;
    ckpt_tensor_item_load(&rd, &loc, &err);
    return 0;
}
