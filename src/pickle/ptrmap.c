/*
 * ptrmap.c - open addressing, linear probing; keys are never removed.
 */
#include "ptrmap.h"

#include <stdlib.h>

static size_t slot(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static int grow(struct ptrmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    const void **nk = calloc(ncap, sizeof(*nk));
    uint64_t *nv = calloc(ncap, sizeof(*nv));
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t s = slot(m->keys[i], ncap);
        while (nk[s])
            s = (s + 1) & (ncap - 1);
        nk[s] = m->keys[i];
        nv[s] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    return 0;
}

int pk_ptrmap_put(struct ptrmap *m, const void *key, uint64_t val)
{
    /* Keep the load under 1/2 so probes stay short. */
    if ((m->n + 1) * 2 > m->cap && grow(m) != 0)
        return -1;
    size_t s = slot(key, m->cap);
    while (m->keys[s] && m->keys[s] != key)
        s = (s + 1) & (m->cap - 1);
    if (!m->keys[s])
        m->n++;
    m->keys[s] = key;
    m->vals[s] = val;
    return 0;
}

int pk_ptrmap_get(const struct ptrmap *m, const void *key, uint64_t *val)
{
    if (!m->cap)
        return 0;
    size_t s = slot(key, m->cap);
    while (m->keys[s]) {
        if (m->keys[s] == key) {
            if (val)
                *val = m->vals[s];
            return 1;
        }
        s = (s + 1) & (m->cap - 1);
    }
    return 0;
}

void pk_ptrmap_release(struct ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
}
