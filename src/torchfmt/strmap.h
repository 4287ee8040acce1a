/*
 * strmap.h - string (binary-safe, borrowed) -> uint64 hash map.
 * Private to src/torchfmt, src/merge and src/upload: do not expose.
 */
#ifndef CKPT_STRMAP_H
#define CKPT_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct strmap_slot {
    const char *key;    /* borrowed; NULL = empty */
    size_t len;
    uint64_t val;
};

struct strmap {
    struct strmap_slot *slots;   /* owned */
    size_t cap, n;
};

#define STRMAP_INIT { NULL, 0, 0 }

/* Set key -> val (key must outlive the map). 0, or -1 on OOM. */
int tf_strmap_put(struct strmap *m, const char *key, size_t len, uint64_t val);
/* 1 and *val if present. */
int tf_strmap_get(const struct strmap *m, const char *key, size_t len,
                  uint64_t *val);
void tf_strmap_release(struct strmap *m);

#endif
