/*
 * ckpt/msgpack.h - MessagePack decoding (github.com/msgpack/msgpack
 * spec.md) into a tree, for Orbax's/Flax's legacy `checkpoint` files.
 *
 * Untrusted input: nesting, element counts and lengths are checked
 * against the input before anything is allocated; every node lives in
 * the caller's arena (its limit caps the total).
 */
#ifndef CKPT_MSGPACK_H
#define CKPT_MSGPACK_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/err.h"

#define CKPT_MSGPACK_MAX_DEPTH 64

enum ckpt_mp_type {
    CKPT_MP_NIL = 0, CKPT_MP_BOOL, CKPT_MP_INT, CKPT_MP_UINT, CKPT_MP_FLOAT,
    CKPT_MP_STR, CKPT_MP_BIN, CKPT_MP_ARRAY, CKPT_MP_MAP, CKPT_MP_EXT
};

struct ckpt_mp {
    enum ckpt_mp_type type;
    int b;                      /* BOOL */
    int64_t i;                  /* INT (negative, or signed formats) */
    uint64_t u;                 /* UINT */
    double f;                   /* FLOAT (float32 widened) */
    int8_t ext;                 /* EXT type */
    /* STR, BIN, EXT: the payload, as an offset into the input */
    uint64_t off, len;
    /* ARRAY: n items; MAP: n pairs as items[2k] (key), items[2k+1] */
    size_t n;
    struct ckpt_mp *items;
};

/* Decode one value at p[0..n). *used: bytes it took (trailing bytes are
 * the caller's business). CKPT_EFORMAT naming name on truncation,
 * reserved byte 0xc1, nesting over CKPT_MSGPACK_MAX_DEPTH, counts the
 * input cannot hold; CKPT_ENOMEM past the arena's limit. */
int ckpt_msgpack_parse(const void *p, size_t n, struct ckpt_arena *a,
                       const char *name, struct ckpt_mp **out, size_t *used,
                       struct ckpt_err *err);

/* The value of key (a STR of that text) in MAP m, or NULL. */
const struct ckpt_mp *ckpt_msgpack_get(const struct ckpt_mp *m,
                                       const void *input, const char *key);

#endif
