/*
 * msgpack_fuzz.c - property: any bytes as MessagePack never crash, leak
 * or exceed the arena's limit; every str/bin/ext payload of an accepted
 * value lies inside the input and the value used no more than the input.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/msgpack.h"

static void walk(const struct ckpt_mp *m, size_t size, int depth)
{
    if (depth > CKPT_MSGPACK_MAX_DEPTH)
        abort();
    if ((m->type == CKPT_MP_STR || m->type == CKPT_MP_BIN ||
         m->type == CKPT_MP_EXT) &&
        (m->off > size || m->len > size - m->off))
        abort();
    size_t items = m->type == CKPT_MP_MAP ? 2 * m->n
                 : m->type == CKPT_MP_ARRAY ? m->n : 0;
    for (size_t i = 0; i < items; i++)
        walk(&m->items[i], size, depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_arena *a = ckpt_arena_new(1u << 26);
    struct ckpt_mp *m;
    struct ckpt_err err;
    size_t used;
    if (a && ckpt_msgpack_parse(data, size, a, "fuzz", &m, &used, &err) == 0) {
        if (used > size)
            abort();
        walk(m, size, 0);
    }
    ckpt_arena_free(a);
    return 0;
}
