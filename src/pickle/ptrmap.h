/*
 * ptrmap.h - pointer -> uint64 hash map for graph walkers (visited sets,
 * memo numbering). Private to src/pickle and src/torchfmt: do not expose.
 */
#ifndef CKPT_PTRMAP_H
#define CKPT_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

struct ptrmap {
    const void **keys;   /* owned; NULL = empty slot */
    uint64_t *vals;      /* owned */
    size_t cap, n;       /* cap is a power of two or 0 */
};

#define PTRMAP_INIT { NULL, NULL, 0, 0 }

/* Set key -> val. Returns 0, or -1 on allocation failure. */
int pk_ptrmap_put(struct ptrmap *m, const void *key, uint64_t val);
/* 1 and *val if present, else 0. val may be NULL. */
int pk_ptrmap_get(const struct ptrmap *m, const void *key, uint64_t *val);
void pk_ptrmap_release(struct ptrmap *m);

#endif
