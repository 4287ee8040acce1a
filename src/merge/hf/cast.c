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
#include "merge/hf/hf.h"
#include "merge/job.h"

#define PIECE 1024              /* elements converted per step */

/* --- to float32 and back (DeepSpeed's x.float() uses them too) --------- */

static uint32_t f16_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f;
    uint32_t m = h & 0x3ff;
    if (e == 0x1f)
        return sign | 0x7f800000u | (m << 13);
    if (e)
        return sign | ((e + 112) << 23) | (m << 13);
    if (!m)
        return sign;
    /* Subnormal: normalise. */
    e = 113;
    while (!(m & 0x400)) {
        m <<= 1;
        e--;
    }
    return sign | (e << 23) | ((m & 0x3ff) << 13);
}

/* n elements of dtype from (little-endian) at in as float32 into out;
 * int and float64 round to nearest as C's conversion (and torch's) does. */
void uns_cast_to_f32(const struct ckpt_dtype *from, const unsigned char *in,
                   uint64_t n, float *out)
{
    const char *d = from->name;
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char *x = in + i * from->itemsize;
        uint64_t u = 0;
        for (unsigned b = 0; b < from->itemsize; b++)
            u |= (uint64_t)x[b] << (8 * b);
        uint32_t bits;
        float f;
        if (!strcmp(d, "bfloat16")) {
            bits = (uint32_t)u << 16;
            memcpy(&f, &bits, 4);
        } else if (!strcmp(d, "float16")) {
            bits = f16_bits((uint16_t)u);
            memcpy(&f, &bits, 4);
        } else if (!strcmp(d, "float32")) {
            bits = (uint32_t)u;
            memcpy(&f, &bits, 4);
        } else if (!strcmp(d, "float64")) {
            double v;
            memcpy(&v, &u, 8);
            f = (float)v;
        } else if (!strcmp(d, "int8")) {
            f = (float)(int8_t)u;
        } else if (!strcmp(d, "int16")) {
            f = (float)(int16_t)u;
        } else if (!strcmp(d, "int32")) {
            f = (float)(int32_t)u;
        } else if (!strcmp(d, "int64")) {
            f = (float)(int64_t)u;
        } else if (!strcmp(d, "bool")) {
            f = u ? 1.0f : 0.0f;
        } else {    /* uint8 */
            f = (float)(uint8_t)u;
        }
        out[i] = f;
    }
}

/* n float32 values as bfloat16 (little-endian), rounded to nearest even
 * with NaN made 0x7fc0, as torch's float -> bfloat16 conversion
 * (c10::round_to_nearest_even) does. */
void uns_cast_f32_to_bf16(const float *in, uint64_t n, unsigned char *out)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &in[i], 4);
        uint16_t h = in[i] != in[i] ? 0x7fc0
                   : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
        out[2 * i] = (unsigned char)(h & 0xff);
        out[2 * i + 1] = (unsigned char)(h >> 8);
    }
}

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
        uns_cast_to_f32(from, in, n, out);    /* float16 */
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
            uns_cast_f32_to_bf16(f, k, q + 2 * i);
        else
            uns_hf_f32_to_f16(f, k, q + 2 * i);
    }
    return count * to->itemsize;
}
