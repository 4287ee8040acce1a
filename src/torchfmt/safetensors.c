/*
 * safetensors.c - reader for safetensors headers (huggingface/safetensors
 * docs and safetensors/src/tensor.rs: read_metadata, Metadata::validate).
 *
 * A file is an 8-byte little-endian length N, N bytes of JSON, then the
 * data section. The JSON maps each tensor name to {dtype, shape,
 * data_offsets: [begin, end]} (offsets relative to the data section) and
 * may hold "__metadata__", a str -> str map. The reference reader accepts a
 * file only when, taken in offset order, the tensors tile the data section
 * exactly and the data section ends the file; this one checks the same, so
 * a truncated or spliced file is refused before any tensor is read.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/torchfmt.h"
#include "ckpt/util.h"

/* The reference implementation's limit (MAX_HEADER_SIZE). */
#define MAX_HEADER 100000000u
/* Integers JSON carries exactly as doubles. */
#define MAX_EXACT 9007199254740992.0

static int bad(struct ckpt_err *err, const char *name, const char *what,
               const char *tensor)
{
    if (tensor)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: not a safetensors file "
                            "(tensor '%s': %s)", name, tensor, what);
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: not a safetensors file (%s)",
                        name, what);
}

/* A JSON number that is a non-negative integer JSON carries exactly. */
static int get_u64(const cJSON *x, uint64_t *out)
{
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) ||
        x->valuedouble >= MAX_EXACT || x->valuedouble != floor(x->valuedouble))
        return -1;
    *out = (uint64_t)x->valuedouble;
    return 0;
}

static int parse_entry(struct ckpt_safetensors *s, const cJSON *o,
                       struct ckpt_safetensors_tensor *t, const char *name,
                       struct ckpt_err *err)
{
    const char *tn = o->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
    uint64_t begin, end, numel = 1;
    if (!cJSON_IsObject(o) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
        !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        get_u64(cJSON_GetArrayItem(offs, 0), &begin) != 0 ||
        get_u64(cJSON_GetArrayItem(offs, 1), &end) != 0)
        return bad(err, name, "needs dtype, shape and data_offsets", tn);
    t->dtype = ckpt_dtype_by_st(dt->valuestring);
    if (!t->dtype)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: tensor '%s': "
                            "dtype '%s' not supported", name, tn,
                            dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > CKPT_MAX_DIMS)
        return bad(err, name, "too many dimensions", tn);
    uint64_t *shape = ckpt_arena_array(s->arena, (size_t)nd + 1, 8);
    t->name = ckpt_arena_strdup(s->arena, tn);
    if (!shape || !t->name)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (int d = 0; d < nd; d++)
        if (get_u64(cJSON_GetArrayItem(sh, d), &shape[d]) != 0 ||
            ckpt_mul_u64(numel, shape[d], &numel) != 0)
            return bad(err, name, "bad shape", tn);
    if (end < begin)
        return bad(err, name, "data_offsets end before they begin", tn);
    if (ckpt_mul_u64(numel, t->dtype->itemsize, &t->nbytes) != 0 ||
        t->nbytes != end - begin)
        return bad(err, name, "data_offsets disagree with dtype and shape",
                   tn);
    t->ndim = nd;
    t->shape = shape;
    t->numel = numel;
    t->offset = begin;      /* relative until the tiling is checked */
    return 0;
}

/* "__metadata__": free-form, but str -> str as the reference requires.
 * torch DCP's sharding info is kept. */
static int check_meta(struct ckpt_safetensors *s, const cJSON *m,
                      const char *name, struct ckpt_err *err)
{
    const cJSON *v;
    if (!cJSON_IsObject(m))
        return bad(err, name, "__metadata__ is not an object", NULL);
    cJSON_ArrayForEach(v, m) {
        if (!cJSON_IsString(v))
            return bad(err, name, "__metadata__ values must be strings",
                       NULL);
        if (!strcmp(v->string, "DCP_SHARDING_INFO") &&
            !(s->dcp_sharding = ckpt_arena_strdup(s->arena, v->valuestring)))
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const struct ckpt_safetensors_tensor *x = *(const void *const *)a;
    const struct ckpt_safetensors_tensor *y = *(const void *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int by_name(const void *a, const void *b)
{
    const struct ckpt_safetensors_tensor *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* In offset order the tensors must tile [0, data_len) exactly; offsets
 * then become relative to the input. */
static int check_tiling(struct ckpt_safetensors *s, uint64_t data_len,
                        const char *name, struct ckpt_err *err)
{
    struct ckpt_safetensors_tensor **v = ckpt_xcalloc(s->n + 1, sizeof(*v));
    uint64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < s->n; i++)
        v[i] = &s->tensors[i];
    qsort(v, s->n, sizeof(*v), by_offset);
    for (size_t i = 0; i < s->n && rc == 0; i++) {
        if (v[i]->offset != at)
            rc = bad(err, name, v[i]->offset < at ? "overlaps another "
                     "tensor" : "leaves a gap before it", v[i]->name);
        at += v[i]->nbytes;
    }
    if (rc == 0 && at != data_len)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: data section is %llu "
                          "bytes, the header describes %llu", name,
                          (unsigned long long)data_len,
                          (unsigned long long)at);
    for (size_t i = 0; i < s->n && rc == 0; i++)
        s->tensors[i].offset += s->data_start;
    free(v);
    return rc;
}

static int parse_header(struct ckpt_safetensors *s, const cJSON *h,
                        uint64_t data_len, const char *name,
                        struct ckpt_err *err)
{
    const cJSON *o;
    size_t n = 0;
    if (!cJSON_IsObject(h))
        return bad(err, name, "header is not a JSON object", NULL);
    cJSON_ArrayForEach(o, h)
        n++;
    s->tensors = ckpt_arena_array(s->arena, n + 1, sizeof(*s->tensors));
    if (!s->tensors)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    cJSON_ArrayForEach(o, h) {
        if (!strcmp(o->string, "__metadata__")) {
            if (check_meta(s, o, name, err) != 0)
                return -1;
            continue;
        }
        if (parse_entry(s, o, &s->tensors[s->n], name, err) != 0)
            return -1;
        s->n++;
    }
    if (check_tiling(s, data_len, name, err) != 0)
        return -1;
    qsort(s->tensors, s->n, sizeof(*s->tensors), by_name);
    for (size_t i = 1; i < s->n; i++)
        if (!strcmp(s->tensors[i - 1].name, s->tensors[i].name))
            return bad(err, name, "name occurs twice", s->tensors[i].name);
    return 0;
}

int ckpt_safetensors_parse(struct ckpt_safetensors **out, const void *header,
                           size_t len, uint64_t data_len, const char *name,
                           struct ckpt_err *err)
{
    struct ckpt_safetensors *s = ckpt_xcalloc(1, sizeof(*s));
    cJSON *h = NULL;
    int rc = 0;
    *out = NULL;
    s->data_start = 8 + (uint64_t)len;
    /* Header size bounds the arena: names and shapes come from it. */
    s->arena = ckpt_arena_new(4 * (size_t)len + (1u << 20));
    if (!s->arena)
        rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    else if (!len || ((const char *)header)[0] != '{')
        rc = bad(err, name, "header does not start with '{'", NULL);
    else if (!(h = cJSON_ParseWithLength(header, len)))
        rc = bad(err, name, "header is not JSON", NULL);
    if (rc == 0)
        rc = parse_header(s, h, data_len, name, err);
    cJSON_Delete(h);
    if (rc != 0) {
        ckpt_safetensors_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int ckpt_safetensors_open(struct ckpt_safetensors **out,
                          const struct ckpt_rd *rd, struct ckpt_err *err)
{
    unsigned char n8[8];
    uint64_t n = 0;
    *out = NULL;
    if (rd->size < 8)
        return bad(err, rd->name, "shorter than 8 bytes", NULL);
    if (ckpt_rd_read(rd, 0, n8, 8, err) != 0)
        return -1;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | n8[i];
    if (n > MAX_HEADER)
        return bad(err, rd->name, "header longer than 100 MB", NULL);
    if (n > rd->size - 8)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: truncated (header of "
                            "%llu bytes, file of %llu)", rd->name,
                            (unsigned long long)n,
                            (unsigned long long)rd->size);
    char *h = ckpt_xmalloc((size_t)n + 1);
    int rc = ckpt_rd_read(rd, 8, h, (size_t)n, err);
    if (rc == 0)
        rc = ckpt_safetensors_parse(out, h, (size_t)n, rd->size - 8 - n,
                                    rd->name, err);
    free(h);
    return rc;
}

const struct ckpt_safetensors_tensor *
ckpt_safetensors_find(const struct ckpt_safetensors *s, const char *name)
{
    struct ckpt_safetensors_tensor key;
    memset(&key, 0, sizeof(key));
    key.name = name;
    if (!s || !s->n)
        return NULL;
    return bsearch(&key, s->tensors, s->n, sizeof(key), by_name);
}

int ckpt_safetensors_saved_offsets(const struct ckpt_safetensors *s,
                                   const struct ckpt_safetensors_tensor *t,
                                   uint64_t *off, const char *name,
                                   struct ckpt_err *err)
{
    for (int d = 0; d < t->ndim; d++)
        off[d] = 0;
    if (!s->dcp_sharding)
        return 0;
    cJSON *j = cJSON_Parse(s->dcp_sharding);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, t->name);
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(e, "saved_offsets");
    int ok = cJSON_IsArray(so) && cJSON_GetArraySize(so) == t->ndim;
    for (int d = 0; ok && d < t->ndim; d++)
        ok = get_u64(cJSON_GetArrayItem(so, d), &off[d]) == 0;
    cJSON_Delete(j);
    if (!ok)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: tensor '%s': no "
                            "saved_offsets of %d dimensions in "
                            "DCP_SHARDING_INFO", name, t->name, t->ndim);
    return 1;
}

void ckpt_safetensors_free(struct ckpt_safetensors *s)
{
    if (!s)
        return;
    ckpt_arena_free(s->arena);
    free(s);
}
