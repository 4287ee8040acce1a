/*
 * msgpack.c - MessagePack decoding (msgpack spec.md: nil, bool, int/uint
 * 8-64, float 32/64, str/bin 8/16/32, array/map 16/32 and fix forms,
 * fixext and ext 8/16/32).
 */
#include <string.h>

#include "ckpt/msgpack.h"

struct mrd {
    const unsigned char *p;
    size_t n, pos;
    struct ckpt_arena *a;
    const char *name;
};

static int trunc_err(struct mrd *r, struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: msgpack truncated at byte "
                        "%zu", r->name, r->pos);
}

static int be(struct mrd *r, int bytes, uint64_t *v, struct ckpt_err *err)
{
    *v = 0;  /* set on every path: callers read it only on success */
    if (r->n - r->pos < (size_t)bytes)
        return trunc_err(r, err);
    for (int k = 0; k < bytes; k++)
        *v = *v << 8 | r->p[r->pos++];
    return 0;
}

/* A payload of len bytes at the current position. */
static int payload(struct mrd *r, struct ckpt_mp *m, uint64_t len,
                   struct ckpt_err *err)
{
    if (len > r->n - r->pos)
        return trunc_err(r, err);
    m->off = r->pos;
    m->len = len;
    r->pos += (size_t)len;
    return 0;
}

static int value(struct mrd *r, struct ckpt_mp *m, int depth,
                 struct ckpt_err *err);

static int container(struct mrd *r, struct ckpt_mp *m, uint64_t n, int map,
                     int depth, struct ckpt_err *err)
{
    uint64_t items = map ? 2 * n : n;
    /* Every element takes at least one byte. */
    if (n > r->n - r->pos || items > r->n - r->pos)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: msgpack %s of %llu "
                            "elements in %zu bytes", r->name,
                            map ? "map" : "array", (unsigned long long)n,
                            r->n - r->pos);
    if (depth >= CKPT_MSGPACK_MAX_DEPTH)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: msgpack nested deeper "
                            "than %d", r->name, CKPT_MSGPACK_MAX_DEPTH);
    m->type = map ? CKPT_MP_MAP : CKPT_MP_ARRAY;
    m->n = (size_t)n;
    m->items = items ? ckpt_arena_array(r->a, (size_t)items, sizeof(*m))
                     : NULL;
    if (items && !m->items)
        return ckpt_err_set(err, CKPT_ENOMEM, "%s: msgpack too large",
                            r->name);
    for (uint64_t k = 0; k < items; k++)
        if (value(r, &m->items[k], depth + 1, err) != 0)
            return -1;
    return 0;
}

static int sized(struct mrd *r, struct ckpt_mp *m, unsigned c, int depth,
                 struct ckpt_err *err)
{
    uint64_t v;
    /* c4-c6 bin, c7-c9 ext, d9-db str, dc-dd array, de-df map */
    static const int width[] = { 1, 2, 4 };
    if (c >= 0xc4 && c <= 0xc6) {
        m->type = CKPT_MP_BIN;
        if (be(r, width[c - 0xc4], &v, err) != 0)
            return -1;
        return payload(r, m, v, err);
    }
    if (c >= 0xc7 && c <= 0xc9) {
        uint64_t t;
        m->type = CKPT_MP_EXT;
        if (be(r, width[c - 0xc7], &v, err) || be(r, 1, &t, err))
            return -1;
        m->ext = (int8_t)(uint8_t)t;
        return payload(r, m, v, err);
    }
    if (c >= 0xd9 && c <= 0xdb) {
        m->type = CKPT_MP_STR;
        if (be(r, width[c - 0xd9], &v, err) != 0)
            return -1;
        return payload(r, m, v, err);
    }
    /* dc/dd array 16/32, de/df map 16/32 */
    int map = c >= 0xde;
    if (be(r, (c & 1) ? 4 : 2, &v, err) != 0)
        return -1;
    return container(r, m, v, map, depth, err);
}

static int number(struct mrd *r, struct ckpt_mp *m, unsigned c,
                  struct ckpt_err *err)
{
    uint64_t v;
    if (c == 0xca || c == 0xcb) {
        if (be(r, c == 0xca ? 4 : 8, &v, err))
            return -1;
        m->type = CKPT_MP_FLOAT;
        if (c == 0xca) {
            uint32_t u = (uint32_t)v;
            float f;
            memcpy(&f, &u, 4);
            m->f = f;
        } else {
            memcpy(&m->f, &v, 8);
        }
        return 0;
    }
    int bytes = 1 << ((c - 0xcc) & 3);
    if (be(r, bytes, &v, err))
        return -1;
    if (c <= 0xcf) {
        m->type = CKPT_MP_UINT;
        m->u = v;
        return 0;
    }
    /* d0-d3: sign-extend */
    if (bytes < 8 && (v >> (8 * bytes - 1)))
        v |= ~(uint64_t)0 << (8 * bytes);
    m->type = CKPT_MP_INT;
    m->i = (int64_t)v;
    return 0;
}

static int value(struct mrd *r, struct ckpt_mp *m, int depth,
                 struct ckpt_err *err)
{
    memset(m, 0, sizeof(*m));
    if (r->pos >= r->n)
        return trunc_err(r, err);
    unsigned c = r->p[r->pos++];
    if (c <= 0x7f || c >= 0xe0) {
        m->type = c <= 0x7f ? CKPT_MP_UINT : CKPT_MP_INT;
        m->u = c;
        m->i = (int8_t)(uint8_t)c;
        return 0;
    }
    if (c >= 0x80 && c <= 0x8f)
        return container(r, m, c & 0x0f, 1, depth, err);
    if (c >= 0x90 && c <= 0x9f)
        return container(r, m, c & 0x0f, 0, depth, err);
    if (c >= 0xa0 && c <= 0xbf) {
        m->type = CKPT_MP_STR;
        return payload(r, m, c & 0x1f, err);
    }
    if (c >= 0xd4 && c <= 0xd8) {
        uint64_t t;
        m->type = CKPT_MP_EXT;
        if (be(r, 1, &t, err))
            return -1;
        m->ext = (int8_t)(uint8_t)t;
        return payload(r, m, (uint64_t)1 << (c - 0xd4), err);
    }
    switch (c) {
    case 0xc0:
        m->type = CKPT_MP_NIL;
        return 0;
    case 0xc2:
    case 0xc3:
        m->type = CKPT_MP_BOOL;
        m->b = c == 0xc3;
        return 0;
    case 0xc1:
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: msgpack byte 0xc1 "
                            "(never used) at %zu", r->name, r->pos - 1);
    }
    if ((c >= 0xca && c <= 0xd3))
        return number(r, m, c, err);
    return sized(r, m, c, depth, err);
}

int ckpt_msgpack_parse(const void *p, size_t n, struct ckpt_arena *a,
                       const char *name, struct ckpt_mp **out, size_t *used,
                       struct ckpt_err *err)
{
    struct mrd r = { p, n, 0, a, name };
    struct ckpt_mp *m = ckpt_arena_alloc(a, sizeof(*m));
    if (!m)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (value(&r, m, 0, err) != 0)
        return -1;
    *out = m;
    *used = r.pos;
    return 0;
}

const struct ckpt_mp *ckpt_msgpack_get(const struct ckpt_mp *m,
                                       const void *input, const char *key)
{
    size_t kl = strlen(key);
    if (!m || m->type != CKPT_MP_MAP)
        return NULL;
    for (size_t k = 0; k < m->n; k++) {
        const struct ckpt_mp *e = &m->items[2 * k];
        if (e->type == CKPT_MP_STR && e->len == kl &&
            !memcmp((const char *)input + e->off, key, kl))
            return &m->items[2 * k + 1];
    }
    return NULL;
}
