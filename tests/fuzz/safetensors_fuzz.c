/*
 * safetensors_fuzz.c - property: any bytes as a safetensors file never
 * crash or leak, and whatever the reader accepts is self-consistent: every
 * tensor is found by its name and its data lies inside the file, after
 * the header.
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
        if (ckpt_safetensors_find(s, t->name) != t ||
            t->offset < s->data_start || t->offset > size ||
            t->nbytes > size - t->offset)
            abort();
    }
    ckpt_safetensors_free(s);
    return 0;
}
