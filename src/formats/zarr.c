/*
 * zarr.c - zarr v2 .zarray documents and chunk decoding (zarr-specs
 * docs/v2/v2.0.rst; blosc1 frames per c-blosc README_HEADER.rst).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#ifdef CKPT_HAVE_BLOSC
#include <blosc.h>
#endif

#include "ckpt/util.h"
#include "ckpt/zarr.h"
#include "zarr_int.h"

/* --- dtype ---------------------------------------------------------------- */

/* NumPy typestr ("<f4", "|b1", ">i8") or TensorStore's "bfloat16". */
static int parse_dtype(const char *s, struct ckpt_zarray *z, const char *name,
                       struct ckpt_err *err)
{
    static const struct { const char *np, *torch; } map[] = {
        { "f2", "float16" }, { "f4", "float32" }, { "f8", "float64" },
        { "i1", "int8" }, { "i2", "int16" }, { "i4", "int32" },
        { "i8", "int64" }, { "u1", "uint8" }, { "u2", "uint16" },
        { "u4", "uint32" }, { "u8", "uint64" }, { "b1", "bool" },
        { "c8", "complex64" }, { "c16", "complex128" },
    };
    z->big_endian = 0;
    if (!strcmp(s, "bfloat16")) {
        z->dtype = ckpt_dtype_by_name("bfloat16");
        return 0;
    }
    if ((s[0] != '<' && s[0] != '>' && s[0] != '|') || !s[1])
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: bad dtype '%s'", name,
                            s);
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(s + 1, map[i].np)) {
            z->dtype = ckpt_dtype_by_name(map[i].torch);
            z->big_endian = s[0] == '>' && z->dtype &&
                            z->dtype->itemsize > 1;
            if (z->dtype)
                return 0;
        }
    if (!strcmp(s + 1, "V2"))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: dtype '%s' (raw "
                            "2-byte values, how zarr-python stores bfloat16) "
                            "is ambiguous", name, s);
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: dtype '%s' not "
                        "supported", name, s);
}

/* --- fill_value ----------------------------------------------------------- */

static void put_le(unsigned char *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int fill_float(unsigned char *fill, const char *t, double d)
{
    if (!strcmp(t, "float64") || !strcmp(t, "complex128")) {
        uint64_t u;
        memcpy(&u, &d, 8);
        put_le(fill, u, 8);
    } else if (!strcmp(t, "float32") || !strcmp(t, "complex64")) {
        float f = (float)d;
        uint32_t u;
        memcpy(&u, &f, 4);
        put_le(fill, u, 4);
    } else if (!strcmp(t, "float16") || !strcmp(t, "bfloat16")) {
        int bf = t[0] == 'b';
        uint16_t u;
        /* Exact cases only: zeros, infinities, NaN. */
        if (d == 0)
            u = signbit(d) ? 0x8000 : 0;
        else if (isnan(d))
            u = bf ? 0x7fc0 : 0x7e00;
        else if (isinf(d))
            u = (uint16_t)((d < 0 ? 0x8000 : 0) | (bf ? 0x7f80 : 0x7c00));
        else
            return -1;
        put_le(fill, u, 2);
    } else {
        return -1;
    }
    return 0;
}

int zarr_fill_value(const cJSON *f, const struct ckpt_dtype *dt, int hex,
                    unsigned char *fill)
{
    const char *t = dt->name;
    int is_float = strstr(t, "float") || strstr(t, "complex");
    if (cJSON_IsBool(f)) {
        fill[0] = cJSON_IsTrue(f);
        return 0;
    }
    if (cJSON_IsString(f) && is_float) {
        const char *s = f->valuestring;
        if (hex && !strncmp(s, "0x", 2) &&
            strlen(s) == 2 + 2 * dt->itemsize) {
            put_le(fill, strtoull(s + 2, NULL, 16), dt->itemsize);
            return 0;
        }
        double d = !strcmp(s, "NaN") ? NAN : !strcmp(s, "Infinity") ?
                   INFINITY : !strcmp(s, "-Infinity") ? -INFINITY : 1.5;
        if (d != 1.5 && fill_float(fill, t, d) == 0)
            return 0;
    }
    if (cJSON_IsNumber(f)) {
        double d = f->valuedouble;
        if (is_float && fill_float(fill, t, d) == 0)
            return 0;
        if (!is_float && d == floor(d) && fabs(d) < 9007199254740992.0) {
            put_le(fill, (uint64_t)(int64_t)d, dt->itemsize);
            return 0;
        }
    }
    return -1;
}

static int parse_fill(const cJSON *f, struct ckpt_zarray *z, const char *name,
                      struct ckpt_err *err)
{
    memset(z->fill, 0, sizeof(z->fill));
    z->has_fill = !(f == NULL || cJSON_IsNull(f));
    if (!z->has_fill || zarr_fill_value(f, z->dtype, 0, z->fill) == 0)
        return 0;
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: fill_value not "
                        "supported for dtype %s", name, z->dtype->name);
}

/* --- .zarray ---------------------------------------------------------------- */

static int dims(const cJSON *a, uint64_t *out, int *n, int zero_ok)
{
    if (!cJSON_IsArray(a))
        return -1;
    int k = cJSON_GetArraySize(a);
    if (k > CKPT_MAX_DIMS)
        return -1;
    for (int i = 0; i < k; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < (zero_ok ? 0 : 1) ||
            x->valuedouble > 9007199254740992.0 ||
            x->valuedouble != floor(x->valuedouble))
            return -1;
        out[i] = (uint64_t)x->valuedouble;
    }
    *n = k;
    return 0;
}

static int parse_codec(const cJSON *c, struct ckpt_zarray *z,
                       const char *name, struct ckpt_err *err)
{
    if (!c || cJSON_IsNull(c)) {
        z->codec = CKPT_ZARR_RAW;
        return 0;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (!cJSON_IsString(id))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: compressor without id",
                            name);
    if (!strcmp(id->valuestring, "blosc"))
        z->codec = CKPT_ZARR_BLOSC;
    else if (!strcmp(id->valuestring, "zstd"))
        z->codec = CKPT_ZARR_ZSTD;
    else
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: compressor '%s' "
                            "not supported (blosc, zstd, null)", name,
                            id->valuestring);
#ifndef CKPT_HAVE_BLOSC
    if (z->codec == CKPT_ZARR_BLOSC)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: blosc support "
                            "was not built in (install libblosc-dev)",
                            name);
#endif
    return 0;
}

static int parse_doc(const cJSON *o, const char *name, struct ckpt_zarray *z,
                     struct ckpt_err *err)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "zarr_format");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    const cJSON *ord = cJSON_GetObjectItemCaseSensitive(o, "order");
    const cJSON *flt = cJSON_GetObjectItemCaseSensitive(o, "filters");
    const cJSON *sep = cJSON_GetObjectItemCaseSensitive(o,
                                                  "dimension_separator");
    int nc;
    if (!cJSON_IsObject(o) || !cJSON_IsNumber(fmt) || fmt->valueint != 2)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: not a zarr v2 array",
                            name);
    if (dims(cJSON_GetObjectItemCaseSensitive(o, "shape"), z->shape,
             &z->ndim, 1) != 0 ||
        dims(cJSON_GetObjectItemCaseSensitive(o, "chunks"), z->chunks, &nc,
             0) != 0 || nc != z->ndim)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: bad shape or chunks",
                            name);
    if (!cJSON_IsString(dt))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: dtype missing", name);
    if (parse_dtype(dt->valuestring, z, name, err) != 0)
        return -1;
    if (!cJSON_IsString(ord) || (strcmp(ord->valuestring, "C") &&
                                 strcmp(ord->valuestring, "F")))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: order must be C or F",
                            name);
    z->fortran = ord->valuestring[0] == 'F';
    if (flt && !cJSON_IsNull(flt) &&
        !(cJSON_IsArray(flt) && cJSON_GetArraySize(flt) == 0))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: filters are not "
                            "supported", name);
    z->sep = '.';
    if (sep && (!cJSON_IsString(sep) || (strcmp(sep->valuestring, ".") &&
                                         strcmp(sep->valuestring, "/"))))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: bad "
                            "dimension_separator", name);
    if (sep)
        z->sep = sep->valuestring[0];
    z->chunk_bytes = z->dtype->itemsize;
    for (int d = 0; d < z->ndim; d++)
        if (ckpt_mul_u64(z->chunk_bytes, z->chunks[d], &z->chunk_bytes) != 0
            || z->chunk_bytes > CKPT_ZARR_MAX_CHUNK)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: chunks of more "
                                "than %llu bytes", name,
                                (unsigned long long)CKPT_ZARR_MAX_CHUNK);
    if (parse_codec(cJSON_GetObjectItemCaseSensitive(o, "compressor"), z,
                    name, err) != 0)
        return -1;
    return parse_fill(cJSON_GetObjectItemCaseSensitive(o, "fill_value"), z,
                      name, err);
}

int ckpt_zarray_parse(const char *json, size_t len, const char *name,
                      struct ckpt_zarray *z, struct ckpt_err *err)
{
    memset(z, 0, sizeof(*z));
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (!o)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: not JSON", name);
    int rc = parse_doc(o, name, z, err);
    cJSON_Delete(o);
    return rc;
}

/* --- chunks ------------------------------------------------------------------ */

/* The 16-byte blosc1 header, checked before libblosc sees the frame. */
static int check_blosc(const struct ckpt_zarray *z, const unsigned char *p,
                       size_t n, const char *name, struct ckpt_err *err)
{
    if (n < 16)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: blosc frame of %zu "
                            "bytes is shorter than its header", name, n);
    uint32_t nbytes = p[4] | p[5] << 8 | p[6] << 16 | (uint32_t)p[7] << 24;
    uint32_t cbytes = p[12] | p[13] << 8 | p[14] << 16 |
                      (uint32_t)p[15] << 24;
    if (p[0] != 2 && p[0] != 1)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: blosc format version "
                            "%u not supported", name, p[0]);
    if (p[2] & 0x08)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: blosc frame uses "
                            "reserved flags", name);
    if (nbytes != z->chunk_bytes || cbytes != n)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: corrupt blosc frame "
                            "(%u bytes in %u, the chunk needs %llu in %zu)",
                            name, nbytes, cbytes,
                            (unsigned long long)z->chunk_bytes, n);
    return 0;
}

int ckpt_zarr_decode(const struct ckpt_zarray *z, const void *in,
                     size_t inlen, void *out, const char *name,
                     struct ckpt_err *err)
{
    size_t want = (size_t)z->chunk_bytes;
    switch (z->codec) {
    case CKPT_ZARR_RAW:
        if (inlen != want)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: %zu bytes, the "
                                "chunk needs %zu", name, inlen, want);
        memcpy(out, in, want);
        return 0;
    case CKPT_ZARR_ZSTD: {
        size_t r = ZSTD_decompress(out, want, in, inlen);
        if (ZSTD_isError(r) || r != want)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: corrupt zstd chunk"
                                "%s%s", name, ZSTD_isError(r) ? ": " : "",
                                ZSTD_isError(r) ? ZSTD_getErrorName(r)
                                                : " (wrong size)");
        return 0;
    }
    case CKPT_ZARR_BLOSC:
#ifdef CKPT_HAVE_BLOSC
    {
        size_t nb = 0;
        if (check_blosc(z, in, inlen, name, err) != 0)
            return -1;
        if (blosc_cbuffer_validate(in, inlen, &nb) != 0 || nb != want)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: corrupt blosc "
                                "frame", name);
        int r = want ? blosc_decompress_ctx(in, out, want, 1) : 0;
        if (r < 0 || (size_t)r != want)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: corrupt blosc "
                                "frame (decompression failed)", name);
        return 0;
    }
#else
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: blosc support "
                            "was not built in", name);
#endif
    }
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: unknown codec", name);
}
