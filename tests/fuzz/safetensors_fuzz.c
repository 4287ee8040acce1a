/*
 * safetensors_fuzz.c - property: any bytes as a safetensors file never
 * crash or leak, and whatever the reader accepts is self-consistent: every
 * tensor is found by its name and its data lies inside the file, after
 * the header; DCP_SHARDING_INFO in __metadata__ (torch DCP's writers) is
 * read for every tensor without crashing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/torchfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_safetensors *s;
    struct ckpt_err err;
    struct ckpt_rd rd;
    ckpt_rd_mem(&rd, data, size, "fuzz.safetensors");
    if (ckpt_safetensors_open(&s, &rd, &err) != 0)
        return 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct ckpt_safetensors_tensor *t = &s->tensors[i];
        uint64_t off[CKPT_MAX_DIMS];
        if (ckpt_safetensors_find(s, t->name) != t ||
            t->offset < s->data_start || t->offset > size ||
            t->nbytes > size - t->offset)
            abort();
        /* torch DCP's sharding info, whatever it holds: an answer, never
         * a crash; without it, zeros. */
        int rc = ckpt_safetensors_saved_offsets(s, t, off, "fuzz", &err);
        if (rc == 0)
            for (int d = 0; d < t->ndim; d++)
                if (off[d])
                    abort();
    }
    ckpt_safetensors_free(s);
    return 0;
}
