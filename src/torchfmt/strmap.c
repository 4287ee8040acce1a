/*
 * strmap.c - FNV-1a, open addressing, linear probing, no removal.
 */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static struct strmap_slot *find(struct strmap_slot *slots, size_t cap,
                                const char *key, size_t len)
{
    size_t i = (size_t)hash(key, len) & (cap - 1);
    while (slots[i].key && (slots[i].len != len ||
                            memcmp(slots[i].key, key, len)))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static int grow(struct strmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    struct strmap_slot *ns = calloc(ncap, sizeof(*ns));
    if (!ns)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
            *find(ns, ncap, m->slots[i].key, m->slots[i].len) = m->slots[i];
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

int tf_strmap_put(struct strmap *m, const char *key, size_t len, uint64_t val)
{
    if ((m->n + 1) * 2 > m->cap && grow(m) != 0)
        return -1;
    struct strmap_slot *s = find(m->slots, m->cap, key, len);
    if (!s->key) {
        s->key = key;
        s->len = len;
        m->n++;
    }
    s->val = val;
    return 0;
}

int tf_strmap_get(const struct strmap *m, const char *key, size_t len,
                  uint64_t *val)
{
    if (!m->cap)
        return 0;
    struct strmap_slot *s = find(m->slots, m->cap, key, len);
    if (!s->key)
        return 0;
    if (val)
        *val = s->val;
    return 1;
}

void tf_strmap_release(struct strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}
