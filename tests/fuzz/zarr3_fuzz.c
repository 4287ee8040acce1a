/*
 * zarr3_fuzz.c - property: any bytes as a zarr.json document, as a stored
 * chunk under several codec chains (bytes, big-endian + transpose +
 * crc32c, zstd), or as a shard index never crash, leak or write outside
 * the chunk buffer; an accepted document has a chunk that fits the cap
 * and every accepted shard index entry lies inside the shard. The first
 * byte picks the target: % 5 == 0 zarr.json, 1-3 a chunk, 4 an index.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/orbax.h"

static const char *docs[] = {
    "{\"zarr_format\":3,\"node_type\":\"array\",\"data_type\":\"uint16\","
    "\"fill_value\":0,\"shape\":[10,11],\"chunk_grid\":{\"name\":"
    "\"regular\",\"configuration\":{\"chunk_shape\":[4,5]}},\"codecs\":"
    "[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}]}",
    "{\"zarr_format\":3,\"node_type\":\"array\",\"data_type\":\"float32\","
    "\"fill_value\":0,\"shape\":[3,4,5],\"chunk_grid\":{\"name\":"
    "\"regular\",\"configuration\":{\"chunk_shape\":[2,3,4]}},\"codecs\":["
    "{\"name\":\"transpose\",\"configuration\":{\"order\":[2,0,1]}},"
    "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"big\"}},"
    "{\"name\":\"crc32c\"}]}",
    "{\"zarr_format\":3,\"node_type\":\"array\",\"data_type\":\"bfloat16\","
    "\"fill_value\":0,\"shape\":[64],\"chunk_grid\":{\"name\":"
    "\"regular\",\"configuration\":{\"chunk_shape\":[64]}},\"codecs\":["
    "{\"name\":\"bytes\"},{\"name\":\"zstd\"}]}",
    "{\"zarr_format\":3,\"node_type\":\"array\",\"data_type\":\"uint16\","
    "\"fill_value\":0,\"shape\":[10,11],\"chunk_grid\":{\"name\":"
    "\"regular\",\"configuration\":{\"chunk_shape\":[8,9]}},\"codecs\":"
    "[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":"
    "[2,3],\"codecs\":[{\"name\":\"bytes\"}],\"index_codecs\":[{\"name\":"
    "\"bytes\"},{\"name\":\"crc32c\"}]}}]}",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_zarr3 z;
    struct ckpt_err err;
    if (size < 1)
        return 0;
    int k = data[0] % 5;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (k == 0) {
        if (ckpt_zarr3_parse((const char *)p, n, "zarr.json", &z, &err) == 0
            && (z.chunk_bytes > CKPT_ZARR_MAX_CHUNK ||
                z.chunk_bytes % z.dtype->itemsize))
            abort();
        return 0;
    }
    const char *d = docs[k == 4 ? 3 : k - 1];
    if (ckpt_zarr3_parse(d, strlen(d), "zarr.json", &z, &err) != 0)
        abort();
    if (k == 4) {
        uint64_t idx[24];
        uint64_t shard = n;
        if (ckpt_zarr3_shard_index(&z, p, n < 196 ? n : 196, shard, 12, idx,
                                   "s", &err) == 0)
            for (int i = 0; i < 12; i++)
                if (idx[2 * i] != UINT64_MAX &&
                    idx[2 * i] + idx[2 * i + 1] > shard)
                    abort();
        return 0;
    }
    /* Exactly the chunk: ASan catches a write past it. */
    char *out = malloc((size_t)z.chunk_bytes);
    char *scratch = malloc((size_t)z.chunk_bytes);
    if (out && scratch)
        ckpt_zarr3_decode(&z, p, n, out, scratch, "chunk", &err);
    free(out);
    free(scratch);
    return 0;
}
