/*
 * dtype.c - every dtype torch saves: torch name, legacy typed storage
 * class, safetensors name, element size.
 *
 * Storage names follow torch's _dtype_to_storage_type_map; dtypes without
 * one (uint16/32/64, float8, ...) are saved through _rebuild_tensor_v3 with
 * an UntypedStorage. Quantized dtypes are absent on purpose: their tensors
 * need scale/zero-point rebuilds that DCP never writes.
 */
#include <string.h>

#include "ckpt/torchfmt.h"

static const struct ckpt_dtype dtypes[] = {
    { "float64", "DoubleStorage", "F64", 8, 8 },
    { "float32", "FloatStorage", "F32", 4, 4 },
    { "float16", "HalfStorage", "F16", 2, 2 },
    { "bfloat16", "BFloat16Storage", "BF16", 2, 2 },
    { "int64", "LongStorage", "I64", 8, 8 },
    { "int32", "IntStorage", "I32", 4, 4 },
    { "int16", "ShortStorage", "I16", 2, 2 },
    { "int8", "CharStorage", "I8", 1, 1 },
    { "uint8", "ByteStorage", "U8", 1, 1 },
    { "bool", "BoolStorage", "BOOL", 1, 1 },
    { "complex64", "ComplexFloatStorage", "C64", 8, 4 },
    { "complex128", "ComplexDoubleStorage", NULL, 16, 8 },
    { "complex32", NULL, NULL, 4, 2 },
    { "bcomplex32", NULL, NULL, 4, 2 },
    { "uint16", NULL, "U16", 2, 2 },
    { "uint32", NULL, "U32", 4, 4 },
    { "uint64", NULL, "U64", 8, 8 },
    { "float8_e5m2", NULL, "F8_E5M2", 1, 1 },
    { "float8_e4m3fn", NULL, "F8_E4M3", 1, 1 },
    { "float8_e5m2fnuz", NULL, NULL, 1, 1 },
    { "float8_e4m3fnuz", NULL, NULL, 1, 1 },
    { "float8_e8m0fnu", NULL, "F8_E8M0", 1, 1 },
    { "float4_e2m1fn_x2", NULL, NULL, 1, 1 },
    { "bits8", NULL, NULL, 1, 1 },
    { "bits16", NULL, NULL, 2, 2 },
    { "bits1x8", NULL, NULL, 1, 1 },
    { "bits2x4", NULL, NULL, 1, 1 },
    { "bits4x2", NULL, NULL, 1, 1 },
};

#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

const struct ckpt_dtype *ckpt_dtype_by_name(const char *name)
{
    if (!strncmp(name, "torch.", 6))
        name += 6;
    for (size_t i = 0; i < NDTYPES; i++)
        if (!strcmp(dtypes[i].name, name))
            return &dtypes[i];
    return NULL;
}

const struct ckpt_dtype *ckpt_dtype_by_st(const char *st)
{
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtypes[i].st && !strcmp(dtypes[i].st, st))
            return &dtypes[i];
    return NULL;
}

const struct ckpt_dtype *ckpt_dtype_by_storage(const char *cls)
{
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtypes[i].storage && !strcmp(dtypes[i].storage, cls))
            return &dtypes[i];
    return NULL;
}

const struct ckpt_dtype *ckpt_dtype_from_pv(const struct ckpt_pv *v)
{
    if (!v || v->kind != CKPT_PV_GLOBAL || strcmp(v->u.global.module, "torch"))
        return NULL;
    return ckpt_dtype_by_name(v->u.global.name);
}
