/*
 * zarr_fuzz.c - any bytes as a .zarray document, and any bytes as a
 * stored chunk (blosc frames of several sizes, zstd, raw). The first input
 * byte picks the target: even = .zarray, odd = chunk config
 * (byte >> 1) % 5.
 * Properties: never crash, leak or write outside the chunk buffer; an
 * accepted .zarray's chunk size is its chunk shape times its item size,
 * within CKPT_ZARR_MAX_CHUNK; a decoded chunk is exactly what another
 * decoder makes of the same bytes: raw, the bytes themselves; zstd,
 * libzstd's streaming decoder (not the one-shot call ckpt makes), which
 * must also find exactly the chunk's bytes whenever ckpt accepts and,
 * conversely, ckpt must accept whatever that decoder reads whole into
 * exactly the chunk's size; blosc, blosc_decompress (the global-context
 * decoder, not the _ctx one ckpt uses).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#ifdef CKPT_HAVE_BLOSC
#include <blosc.h>
#endif

#include "ckpt/zarr.h"

static const struct {
    enum ckpt_zarr_codec codec;
    uint64_t bytes;
} configs[] = {
    { CKPT_ZARR_BLOSC, 48 }, { CKPT_ZARR_BLOSC, 8192 },
    { CKPT_ZARR_BLOSC, 512 }, { CKPT_ZARR_ZSTD, 8 }, { CKPT_ZARR_RAW, 72 },
};

static void check_zarray(const uint8_t *data, size_t size)
{
    struct ckpt_zarray z;
    struct ckpt_err err;
    if (ckpt_zarray_parse((const char *)data, size, ".zarray", &z,
                          &err) != 0)
        return;
    uint64_t n = z.dtype->itemsize;
    for (int d = 0; d < z.ndim; d++) {
        if (z.chunks[d] && n > UINT64_MAX / z.chunks[d])
            __builtin_trap();
        n *= z.chunks[d];
    }
    if (n != z.chunk_bytes || n > CKPT_ZARR_MAX_CHUNK)
        __builtin_trap();
}

/* 1 and the bytes in out (exactly want) when libzstd's streaming decoder
 * reads all of in as complete frames giving exactly want bytes. */
static int zstd_stream(const void *in, size_t inlen, void *out, size_t want)
{
    ZSTD_DCtx *d = ZSTD_createDCtx();
    if (!d)
        return 0;
    ZSTD_inBuffer ib = { in, inlen, 0 };
    ZSTD_outBuffer ob = { out, want, 0 };
    size_t r = 1;
    while (ib.pos < ib.size) {
        size_t before_in = ib.pos, before_out = ob.pos;
        r = ZSTD_decompressStream(d, &ob, &ib);
        if (ZSTD_isError(r) || (ib.pos == before_in && ob.pos == before_out))
            break;
    }
    /* r == 0: the last frame ended and everything it decoded was
     * flushed (a frame going on past want leaves r > 0). */
    int whole = !ZSTD_isError(r) && r == 0 && ib.pos == ib.size &&
                ob.pos == want;
    ZSTD_freeDCtx(d);
    return whole;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_err err;
    struct ckpt_zarray z;
    if (size < 1)
        return 0;
    if (!(data[0] & 1)) {
        check_zarray(data + 1, size - 1);
        return 0;
    }
    size_t c = (size_t)(data[0] >> 1) % (sizeof(configs) /
                                         sizeof(configs[0]));
    z = (struct ckpt_zarray){ 0 };
    z.dtype = ckpt_dtype_by_name("float32");
    z.codec = configs[c].codec;
    z.chunk_bytes = configs[c].bytes;
    const uint8_t *in = data + 1;
    size_t inlen = size - 1, want = (size_t)z.chunk_bytes;
    /* Exactly the chunk: ASan catches a write past it. */
    char *out = malloc(want), *ref = malloc(want);
    if (!out || !ref) {
        free(out);
        free(ref);
        return 0;
    }
    int ok = ckpt_zarr_decode(&z, in, inlen, out, "chunk", &err) == 0;
    switch (z.codec) {
    case CKPT_ZARR_RAW:
        if (ok != (inlen == want) || (ok && memcmp(out, in, want)))
            __builtin_trap();
        break;
    case CKPT_ZARR_ZSTD: {
        int whole = zstd_stream(in, inlen, ref, want);
        if (ok != whole || (ok && memcmp(out, ref, want)))
            __builtin_trap();
        break;
    }
    case CKPT_ZARR_BLOSC:
#ifdef CKPT_HAVE_BLOSC
        if (ok) {
            static int init;
            if (!init) {
                blosc_init();
                blosc_set_nthreads(1);
                init = 1;
            }
            if (blosc_decompress(in, ref, want) != (int)want ||
                memcmp(out, ref, want))
                __builtin_trap();
        }
#endif
        break;
    }
    free(out);
    free(ref);
    return 0;
}
