/*
 * zarr3.c - zarr v3 array metadata (zarr.json) and chunk decoding, as
 * TensorStore writes them for Orbax (zarr-specs docs/v3/core/v3.0.rst,
 * codecs bytes, transpose, zstd, crc32c, sharding_indexed; "bfloat16" is
 * TensorStore's data type extension).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "ckpt/orbax.h"
#include "ckpt/util.h"
#include "zarr_int.h"

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

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

static int parse_fill(const cJSON *f, struct ckpt_zarr3 *z, const char *name,
                      struct ckpt_err *err)
{
    memset(z->fill, 0, sizeof(z->fill));
    z->has_fill = f && !cJSON_IsNull(f);
    if (!z->has_fill)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: fill_value missing "
                            "(required in zarr v3)", name);
    if (zarr_fill_value(f, z->dtype, 1, z->fill) == 0)
        return 0;
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: fill_value not "
                        "supported for data type %s", name, z->dtype->name);
}

static int parse_dtype(const cJSON *d, struct ckpt_zarr3 *z,
                       const char *name, struct ckpt_err *err)
{
    static const char *ok[] = {
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
        "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
    };
    if (!cJSON_IsString(d))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: data_type missing",
                            name);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!strcmp(d->valuestring, ok[i])) {
            z->dtype = ckpt_dtype_by_name(ok[i]);
            return z->dtype ? 0 : ckpt_err_set(err, CKPT_EUNSUPPORTED,
                                               "%s: no dtype %s", name, ok[i]);
        }
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: data_type '%s' not "
                        "supported", name, d->valuestring);
}

/* --- codecs --------------------------------------------------------------- */

struct chain {
    int ndim;
    int order[CKPT_MAX_DIMS];
    int big_endian, zstd, crc32c;
    int shard;                      /* a sharding_indexed array->bytes */
    const cJSON *shard_cfg;
};

static int codec_name(const cJSON *c, const char **nm, const cJSON **cfg)
{
    const cJSON *n = get(c, "name");
    if (!cJSON_IsString(n))
        return -1;
    *nm = n->valuestring;
    *cfg = get(c, "configuration");
    return 0;
}

static int parse_transpose(const cJSON *cfg, struct chain *ch,
                           const char *name, struct ckpt_err *err)
{
    const cJSON *o = get(cfg, "order");
    int seen[CKPT_MAX_DIMS] = { 0 }, next[CKPT_MAX_DIMS];
    if (!cJSON_IsArray(o) || cJSON_GetArraySize(o) != ch->ndim)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: transpose order must "
                            "list %d dimensions", name, ch->ndim);
    for (int i = 0; i < ch->ndim; i++) {
        const cJSON *x = cJSON_GetArrayItem(o, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 ||
            x->valuedouble >= ch->ndim || seen[x->valueint]++)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: transpose order is "
                                "not a permutation", name);
        next[i] = x->valueint;
    }
    /* Composition: stored dim i holds current dim next[i]. */
    int cur[CKPT_MAX_DIMS];
    for (int i = 0; i < ch->ndim; i++)
        cur[i] = ch->order[next[i]];
    memcpy(ch->order, cur, sizeof(cur));
    return 0;
}

static int parse_chain(const cJSON *codecs, struct chain *ch, int allow_shard,
                       const char *name, struct ckpt_err *err)
{
    int stage = 0;      /* 0 array->array, 1 after array->bytes */
    for (int i = 0; i < ch->ndim; i++)
        ch->order[i] = i;
    if (!cJSON_IsArray(codecs) || cJSON_GetArraySize(codecs) == 0 ||
        cJSON_GetArraySize(codecs) > CKPT_ZARR3_MAX_CODECS)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: codecs must be a list "
                            "of 1 to %d codecs", name, CKPT_ZARR3_MAX_CODECS);
    const cJSON *c;
    cJSON_ArrayForEach(c, codecs) {
        const char *nm;
        const cJSON *cfg;
        if (codec_name(c, &nm, &cfg) != 0)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: codec without a "
                                "name", name);
        if (!strcmp(nm, "transpose") && stage == 0) {
            if (parse_transpose(cfg, ch, name, err) != 0)
                return -1;
        } else if (!strcmp(nm, "bytes") && stage == 0) {
            const cJSON *e = get(cfg, "endian");
            ch->big_endian = cJSON_IsString(e) && !strcmp(e->valuestring,
                                                          "big");
            if (e && !(cJSON_IsString(e) && (ch->big_endian ||
                                            !strcmp(e->valuestring,
                                                    "little"))))
                return ckpt_err_set(err, CKPT_EFORMAT, "%s: bytes endian "
                                    "must be little or big", name);
            stage = 1;
        } else if (!strcmp(nm, "sharding_indexed") && stage == 0 &&
                   allow_shard) {
            ch->shard = 1;
            ch->shard_cfg = cfg;
            stage = 1;
        } else if (!strcmp(nm, "zstd") && stage == 1 && !ch->zstd &&
                   !ch->crc32c && !ch->shard) {
            ch->zstd = 1;
        } else if (!strcmp(nm, "crc32c") && stage == 1 && !ch->crc32c &&
                   !ch->shard) {
            ch->crc32c = 1;
        } else {
            return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: codec '%s' not "
                                "supported here (transpose, bytes, zstd, "
                                "crc32c, sharding_indexed)", name, nm);
        }
    }
    if (stage != 1)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: no array -> bytes "
                            "codec", name);
    if (ch->shard) {
        for (int i = 0; i < ch->ndim; i++)
            if (ch->order[i] != i)
                return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: transpose "
                                    "before sharding", name);
    }
    return 0;
}

static int parse_index_codecs(const cJSON *ic, struct ckpt_zarr3 *z,
                              const char *name, struct ckpt_err *err)
{
    struct chain ch = { .ndim = z->ndim + 1 };
    if (parse_chain(ic, &ch, 0, name, err) != 0)
        return -1;
    if (ch.big_endian || ch.zstd || ch.order[z->ndim] != z->ndim)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: shard index codecs "
                            "other than bytes(little) + crc32c", name);
    for (int i = 0; i < z->ndim; i++)
        if (ch.order[i] != i)
            return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: transposed "
                                "shard index", name);
    z->index_crc32c = ch.crc32c;
    return 0;
}

static int parse_shard(const cJSON *cfg, struct ckpt_zarr3 *z,
                       const char *name, struct ckpt_err *err)
{
    int n;
    struct chain in = { .ndim = z->ndim };
    if (dims(get(cfg, "chunk_shape"), z->inner, &n, 0) != 0 || n != z->ndim)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: sharding chunk_shape "
                            "invalid", name);
    for (int i = 0; i < n; i++)
        if (z->chunks[i] % z->inner[i])
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: shard shape is not "
                                "a multiple of the inner chunk shape", name);
    const cJSON *loc = get(cfg, "index_location");
    z->index_at_end = !loc || (cJSON_IsString(loc) &&
                               !strcmp(loc->valuestring, "end"));
    if (loc && !z->index_at_end && !(cJSON_IsString(loc) &&
                                     !strcmp(loc->valuestring, "start")))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: index_location must be "
                            "start or end", name);
    if (parse_chain(get(cfg, "codecs"), &in, 0, name, err) != 0 ||
        parse_index_codecs(get(cfg, "index_codecs"), z, name, err) != 0)
        return -1;
    memcpy(z->order, in.order, sizeof(z->order));
    z->big_endian = in.big_endian;
    z->zstd = in.zstd;
    z->crc32c = in.crc32c;
    z->sharded = 1;
    return 0;
}

static int parse_grid(const cJSON *o, struct ckpt_zarr3 *z, const char *name,
                      struct ckpt_err *err)
{
    const cJSON *g = get(o, "chunk_grid");
    const char *nm;
    const cJSON *cfg;
    int n;
    if (!g || codec_name(g, &nm, &cfg) != 0 || strcmp(nm, "regular"))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: chunk_grid must be "
                            "regular", name);
    if (dims(get(cfg, "chunk_shape"), z->chunks, &n, 0) != 0 ||
        n != z->ndim)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: chunk_shape does not "
                            "match shape", name);
    const cJSON *k = get(o, "chunk_key_encoding");
    z->v2_keys = 0;
    z->sep = '/';
    if (k) {
        if (codec_name(k, &nm, &cfg) != 0 ||
            (strcmp(nm, "default") && strcmp(nm, "v2")))
            return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: chunk key "
                                "encoding must be default or v2", name);
        z->v2_keys = !strcmp(nm, "v2");
        z->sep = z->v2_keys ? '.' : '/';
        const cJSON *s = get(cfg, "separator");
        if (s && !(cJSON_IsString(s) && (!strcmp(s->valuestring, "/") ||
                                        !strcmp(s->valuestring, "."))))
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: separator must be "
                                "'/' or '.'", name);
        if (s)
            z->sep = s->valuestring[0];
    }
    return 0;
}

static int chunk_size(struct ckpt_zarr3 *z, const char *name,
                      struct ckpt_err *err)
{
    const uint64_t *c = z->sharded ? z->inner : z->chunks;
    uint64_t b = z->dtype->itemsize;
    for (int i = 0; i < z->ndim; i++)
        if (ckpt_mul_u64(b, c[i], &b) != 0 || b > CKPT_ZARR_MAX_CHUNK)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: chunk larger than "
                                "%llu bytes", name,
                                (unsigned long long)CKPT_ZARR_MAX_CHUNK);
    z->chunk_bytes = b;
    if (z->sharded && ckpt_zarr3_inner_per_shard(z) > (1u << 24))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: too many chunks per "
                            "shard", name);
    return 0;
}

static int parse_doc(const cJSON *o, struct ckpt_zarr3 *z, const char *name,
                     struct ckpt_err *err)
{
    const cJSON *f = get(o, "zarr_format"), *t = get(o, "node_type");
    if (!cJSON_IsNumber(f) || f->valuedouble != 3)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: zarr_format is not 3",
                            name);
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "array"))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: node_type is not array",
                            name);
    if (dims(get(o, "shape"), z->shape, &z->ndim, 1) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: shape invalid (at most "
                            "%d dimensions)", name, CKPT_MAX_DIMS);
    if (parse_dtype(get(o, "data_type"), z, name, err) != 0 ||
        parse_grid(o, z, name, err) != 0 ||
        parse_fill(get(o, "fill_value"), z, name, err) != 0)
        return -1;
    struct chain ch = { .ndim = z->ndim };
    if (parse_chain(get(o, "codecs"), &ch, 1, name, err) != 0)
        return -1;
    if (ch.shard) {
        if (parse_shard(ch.shard_cfg, z, name, err) != 0)
            return -1;
    } else {
        memcpy(z->order, ch.order, sizeof(z->order));
        z->big_endian = ch.big_endian;
        z->zstd = ch.zstd;
        z->crc32c = ch.crc32c;
    }
    if (z->dtype->itemsize == 1)
        z->big_endian = 0;
    return chunk_size(z, name, err);
}

int ckpt_zarr3_parse(const char *json, size_t len, const char *name,
                     struct ckpt_zarr3 *z, struct ckpt_err *err)
{
    memset(z, 0, sizeof(*z));
    if (len > CKPT_ZARR3_MAX_META)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: larger than %u bytes",
                            name, CKPT_ZARR3_MAX_META);
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: not a JSON object",
                            name);
    }
    int rc = parse_doc(o, z, name, err);
    cJSON_Delete(o);
    return rc;
}

uint64_t ckpt_zarr3_inner_per_shard(const struct ckpt_zarr3 *z)
{
    uint64_t n = 1;
    if (!z->sharded)
        return 1;
    for (int i = 0; i < z->ndim; i++)
        n *= z->chunks[i] / z->inner[i];
    return n;
}

/* --- decoding ------------------------------------------------------------- */

static void swap_elems(unsigned char *p, uint64_t n, unsigned w)
{
    for (uint64_t i = 0; i < n; i += w)
        for (unsigned a = 0, b = w - 1; a < b; a++, b--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

/* Stored (transposed) chunk in -> C-order chunk out. */
static void untranspose(const struct ckpt_zarr3 *z, const unsigned char *in,
                        unsigned char *out)
{
    const uint64_t *c = z->sharded ? z->inner : z->chunks;
    int nd = z->ndim;
    uint64_t cstride[CKPT_MAX_DIMS], sd[CKPT_MAX_DIMS], idx[CKPT_MAX_DIMS];
    uint64_t acc = 1, w = z->dtype->itemsize, total = z->chunk_bytes / w;
    for (int k = nd - 1; k >= 0; k--) {
        cstride[k] = acc;
        acc *= c[k];
    }
    for (int i = 0; i < nd; i++) {
        sd[i] = c[z->order[i]];
        idx[i] = 0;
    }
    for (uint64_t s = 0; s < total; s++) {
        uint64_t o = 0;
        for (int i = 0; i < nd; i++)
            o += idx[i] * cstride[z->order[i]];
        memcpy(out + o * w, in + s * w, (size_t)w);
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < sd[i])
                break;
            idx[i] = 0;
        }
    }
}

static int transposed(const struct ckpt_zarr3 *z)
{
    for (int i = 0; i < z->ndim; i++)
        if (z->order[i] != i)
            return 1;
    return 0;
}

int ckpt_zarr3_decode(const struct ckpt_zarr3 *z, const void *in,
                      size_t inlen, void *out, void *scratch,
                      const char *name, struct ckpt_err *err)
{
    const unsigned char *p = in;
    size_t want = (size_t)z->chunk_bytes;
    int tr = transposed(z);
    unsigned char *dst = tr ? scratch : out;
    if (z->crc32c) {
        if (inlen < 4)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: chunk shorter than "
                                "its crc32c", name);
        inlen -= 4;
        uint32_t c = (uint32_t)p[inlen] | (uint32_t)p[inlen + 1] << 8 |
                     (uint32_t)p[inlen + 2] << 16 |
                     (uint32_t)p[inlen + 3] << 24;
        if (ckpt_crc32c(0, p, inlen) != c)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: chunk crc32c "
                                "mismatch", name);
    }
    if (z->zstd) {
        size_t r = ZSTD_decompress(dst, want, p, inlen);
        if (ZSTD_isError(r) || r != want)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: corrupt zstd chunk "
                                "(or not %zu bytes decoded)", name, want);
    } else {
        if (inlen != want)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: chunk has %zu bytes, "
                                "expected %zu", name, inlen, want);
        memcpy(dst, p, want);
    }
    if (z->big_endian)
        swap_elems(dst, want, z->dtype->swap);
    if (tr)
        untranspose(z, dst, out);
    return 0;
}

int ckpt_zarr3_shard_index(const struct ckpt_zarr3 *z, const void *index,
                           size_t n, uint64_t shard_size, uint64_t nchunks,
                           uint64_t *idx, const char *name,
                           struct ckpt_err *err)
{
    const unsigned char *ix = index;
    uint64_t isz = nchunks * 16 + (z->index_crc32c ? 4 : 0);
    if (nchunks > (1u << 24) || isz != n || isz > shard_size)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: shard index of %zu "
                            "bytes, expected %llu in a shard of %llu", name,
                            n, (unsigned long long)isz,
                            (unsigned long long)shard_size);
    if (z->index_crc32c) {
        const unsigned char *c = ix + nchunks * 16;
        uint32_t want = (uint32_t)c[0] | (uint32_t)c[1] << 8 |
                        (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
        if (ckpt_crc32c(0, ix, (size_t)nchunks * 16) != want)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: shard index crc32c "
                                "mismatch", name);
    }
    for (uint64_t i = 0; i < 2 * nchunks; i++) {
        uint64_t v = 0;
        for (int b = 0; b < 8; b++)
            v |= (uint64_t)ix[i * 8 + (uint64_t)b] << (8 * b);
        idx[i] = v;
    }
    for (uint64_t i = 0; i < nchunks; i++) {
        uint64_t off = idx[2 * i], len = idx[2 * i + 1];
        if (off == UINT64_MAX && len == UINT64_MAX)
            continue;
        if (off > shard_size || len > shard_size - off)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: inner chunk %llu "
                                "lies outside the shard", name,
                                (unsigned long long)i);
    }
    return 0;
}
