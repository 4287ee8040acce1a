/*
 * ckpt/zarr.h - zarr v2 arrays (JAX pytree checkpoints written through
 * fsspec + zarr, e.g. seqax): the .zarray document and chunk decoding.
 * Layout details: docs/formats/zarr.md.
 *
 * Both functions take untrusted bytes: every size is checked against the
 * document and the input, and nothing is allocated from a count that the
 * input alone chose.
 */
#ifndef CKPT_ZARR_H
#define CKPT_ZARR_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"
#include "ckpt/torchfmt.h"

/* Largest chunk ckpt decodes (numcodecs' own cap is 2^31 - 1 bytes). */
#define CKPT_ZARR_MAX_CHUNK ((uint64_t)INT32_MAX)

enum ckpt_zarr_codec {
    CKPT_ZARR_RAW = 0,     /* compressor null */
    CKPT_ZARR_BLOSC,
    CKPT_ZARR_ZSTD
};

struct ckpt_zarray {
    int ndim;                       /* 0 for a scalar */
    uint64_t shape[CKPT_MAX_DIMS];
    uint64_t chunks[CKPT_MAX_DIMS];
    const struct ckpt_dtype *dtype;
    int big_endian;                 /* ">" byte order, itemsize > 1 */
    int fortran;                    /* order "F": column-major chunks */
    enum ckpt_zarr_codec codec;
    int has_fill;                   /* fill_value not null */
    unsigned char fill[16];         /* one element, little-endian */
    char sep;                       /* dimension_separator: '.' or '/' */
    uint64_t chunk_bytes;           /* bytes of one decoded chunk */
};

/*
 * Parse a .zarray document (json, len; need not be NUL-terminated) into
 * z. name is used in messages. Fails with CKPT_EFORMAT (malformed, zarr
 * format other than 2, chunk larger than CKPT_ZARR_MAX_CHUNK) or
 * CKPT_EUNSUPPORTED (filters, compressors other than blosc/zstd/null,
 * dtypes torch lacks, "<V2" without a bfloat16 declaration).
 */
int ckpt_zarray_parse(const char *json, size_t len, const char *name,
                      struct ckpt_zarray *z, struct ckpt_err *err);

/*
 * Decode one stored chunk (in, inlen) into out, which holds exactly
 * z->chunk_bytes bytes. A frame that claims another size, a corrupt blosc
 * or zstd frame, or raw data of the wrong size is CKPT_EFORMAT naming
 * name.
 */
int ckpt_zarr_decode(const struct ckpt_zarray *z, const void *in,
                     size_t inlen, void *out, const char *name,
                     struct ckpt_err *err);

#endif
