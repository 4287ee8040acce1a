/*
 * zarr_fuzz.c - property: any bytes as a .zarray document, and any bytes
 * as a stored chunk (blosc frames of several sizes, zstd, raw), never
 * crash, leak or write outside the chunk buffer. The first input byte
 * picks the target: even = .zarray, odd = chunk config (byte >> 1) % 5.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/zarr.h"

static const struct {
    enum ckpt_zarr_codec codec;
    uint64_t bytes;
} configs[] = {
    { CKPT_ZARR_BLOSC, 48 }, { CKPT_ZARR_BLOSC, 8192 },
    { CKPT_ZARR_BLOSC, 512 }, { CKPT_ZARR_ZSTD, 8 }, { CKPT_ZARR_RAW, 72 },
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_err err;
    struct ckpt_zarray z;
    if (size < 1)
        return 0;
    if (!(data[0] & 1)) {
        ckpt_zarray_parse((const char *)data + 1, size - 1, ".zarray", &z,
                          &err);
        return 0;
    }
    size_t c = (size_t)(data[0] >> 1) % (sizeof(configs) /
                                         sizeof(configs[0]));
    z = (struct ckpt_zarray){ 0 };
    z.dtype = ckpt_dtype_by_name("float32");
    z.codec = configs[c].codec;
    z.chunk_bytes = configs[c].bytes;
    /* Exactly the chunk: ASan catches a write past it. */
    char *out = malloc((size_t)z.chunk_bytes);
    if (out)
        ckpt_zarr_decode(&z, data + 1, size - 1, out, "chunk", &err);
    free(out);
    return 0;
}
