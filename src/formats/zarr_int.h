/*
 * zarr_int.h - what zarr.c (v2 .zarray) and zarr3.c (v3 zarr.json, in
 * Orbax checkpoints) share inside src/formats.
 */
#ifndef CKPT_FORMATS_ZARR_INT_H
#define CKPT_FORMATS_ZARR_INT_H

#include <cjson/cJSON.h>

#include "ckpt/torchfmt.h"

/* A fill_value (not null) as one element of dt in fill (16 bytes, zeroed
 * by the caller): booleans, integers exact in a double, float numbers
 * and "NaN"/"Infinity"/"-Infinity" (float16/bfloat16 only where exact:
 * zeros, infinities, NaN), and with hex (v3) "0x..." raw bit patterns.
 * 0, or -1 when ckpt cannot represent it. */
int zarr_fill_value(const cJSON *f, const struct ckpt_dtype *dt, int hex,
                    unsigned char *fill);

#endif
