/*
 * hf/cast.c - --dtype of an export: floating tensors cast to float32,
 * bfloat16 or float16 band by band, with torch's rounding, so the output
 * equals `tensor.to(dtype)` of the whole model (what transformers'
 * `save_pretrained` after `model.to(dtype)` writes).
 *
 * Every cast goes through float32, as torch's does: float64 -> float32
 * rounds to nearest even (C's conversion), float32 -> bfloat16 is
 * c10::round_to_nearest_even (NaN 0x7fc0), float32 -> float16 is
 * c10::detail::fp16_ieee_from_fp32_value (round to nearest even, with
 * subnormals; NaN keeps its sign, 0x7e00). bfloat16 and float16 widen
 * exactly.
 */
#include <string.h>

#include "ckpt/torchfmt.h"
#include "trainers/deepspeed/deepspeed.h"
#include "unshard/hf/hf.h"
#include "unshard/job.h"

#define PIECE 1024              /* elements converted per step */

const struct ckpt_dtype *uns_hf_dtype(const char *name)
{
    static const char *const names[][2] = {
        { "fp32", "float32" }, { "bf16", "bfloat16" }, { "fp16", "float16" },
    };
    for (size_t i = 0; name && i < 3; i++)
        if (!strcmp(name, names[i][0]) || !strcmp(name, names[i][1]))
            return ckpt_dtype_by_name(names[i][1]);
    return NULL;
}

uint64_t uns_hf_cast_size(const struct utensor *t, uint64_t n)
{
    if (!t->cast)
        return n;
    return n / t->e->dtype->itemsize * t->cast->itemsize;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One float32 (as bits) to half precision, IEEE round to nearest even. */
static uint16_t to_f16(uint32_t x)
{
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff)
        return (uint16_t)(sign | (man ? 0x7e00u : 0x7c00u));
    if (exp == 0)               /* zero, or far below half's subnormals */
        return (uint16_t)sign;
    uint32_t m = man | 0x800000u;   /* value m * 2^(exp - 150) */
    if (exp >= 113) {           /* a normal half: exponent exp - 112 */
        uint32_t r = m >> 13, rem = m & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
            r++;
        /* r in [0x400, 0x800]: 0x800 carries into the exponent. */
        uint32_t h = ((exp - 112) << 10) + (r - 0x400u);
        return (uint16_t)(sign | (h >= 0x7c00u ? 0x7c00u : h));
    }
    /* A subnormal half: units of 2^-24, m >> (126 - exp). */
    uint32_t shift = 126 - exp;
    if (shift > 24)
        return (uint16_t)sign;
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1)))
        r++;
    return (uint16_t)(sign | r);
}

void uns_hf_f32_to_f16(const float *in, uint64_t n, unsigned char *out)
{
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = to_f16(f32_bits(in[i]));
        out[2 * i] = (unsigned char)(h & 0xff);
        out[2 * i + 1] = (unsigned char)(h >> 8);
    }
}

/* n elements of dtype `from` at in as float32. */
static void widen(const struct ckpt_dtype *from, const unsigned char *in,
                  size_t n, float *out)
{
    if (from->itemsize == 4) {
        memcpy(out, in, n * 4);
    } else if (from->itemsize == 8) {
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, in + 8 * i, 8);
            out[i] = (float)d;
        }
    } else if (!strcmp(from->name, "bfloat16")) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u = ((uint32_t)in[2 * i] | (uint32_t)in[2 * i + 1] << 8)
                         << 16;
            memcpy(&out[i], &u, 4);
        }
    } else {
        uns_ds_to_f32(from, in, n, out);    /* float16 */
    }
}

uint64_t uns_hf_cast_band(const struct utensor *t, const char *in,
                          uint64_t n, char *out)
{
    const struct ckpt_dtype *from = t->e->dtype, *to = t->cast;
    uint64_t count = n / from->itemsize;
    float f[PIECE];
    const unsigned char *p = (const unsigned char *)in;
    unsigned char *q = (unsigned char *)out;
    for (uint64_t i = 0; i < count; i += PIECE) {
        size_t k = count - i < PIECE ? (size_t)(count - i) : PIECE;
        widen(from, p + i * from->itemsize, k, f);
        if (to->itemsize == 4)
            memcpy(q + 4 * i, f, k * 4);
        else if (!strcmp(to->name, "bfloat16"))
            uns_ds_f32_to_bf16(f, k, q + 2 * i);
        else
            uns_hf_f32_to_f16(f, k, q + 2 * i);
    }
    return count * to->itemsize;
}
