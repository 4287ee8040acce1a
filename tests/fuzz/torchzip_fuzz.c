/*
 * torchzip_fuzz.c - property: reading any bytes as a torch.save zip (and,
 * when that works, as a DCP tensor item: data.pkl, tensor, bounds) never
 * crashes, never leaks, never reads outside the input.
 */
#include <stdint.h>
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
    struct ckpt_tensor_loc loc;
    ckpt_tensor_item_load(&rd, &loc, &err);
    return 0;
}
