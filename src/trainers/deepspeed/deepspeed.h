/*
 * deepspeed/deepspeed.h - what deepspeed/plan.c shares beyond the trainer
 * table: its dtype casts (hf/cast.c, the unit test). Private to src/.
 */
#ifndef CKPT_TRAINERS_DEEPSPEED_H
#define CKPT_TRAINERS_DEEPSPEED_H

#include <stdint.h>

#include "ckpt/torchfmt.h"

/* n elements of dtype from (little-endian) at in as float32 (Tensor.float()
 * of a buffer); exported for the unit test. */
void uns_ds_to_f32(const struct ckpt_dtype *from, const unsigned char *in,
                   uint64_t n, float *out);
/* n float32 values as little-endian bfloat16, as torch casts them. */
void uns_ds_f32_to_bf16(const float *in, uint64_t n, unsigned char *out);

#endif
