/*
 * arena.c - bump allocator over a list of blocks (see ckpt/arena.h).
 */
#include "ckpt/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE (64 * 1024)
#define ALIGN 16

struct block {
    struct block *next;
    size_t used, cap;
    /* data follows, aligned */
};

struct ckpt_arena {
    struct block *head;   /* owned list; head is the block being filled */
    size_t used;          /* bytes handed out (for the limit) */
    size_t limit;         /* 0: none */
};

#define HDR (((sizeof(struct block) + ALIGN - 1) / ALIGN) * ALIGN)

struct ckpt_arena *ckpt_arena_new(size_t limit)
{
    struct ckpt_arena *a = calloc(1, sizeof(*a));
    if (a)
        a->limit = limit;
    return a;
}

void ckpt_arena_free(struct ckpt_arena *a)
{
    if (!a)
        return;
    struct block *b = a->head;
    while (b) {
        struct block *next = b->next;
        free(b);
        b = next;
    }
    free(a);
}

static struct block *new_block(size_t cap)
{
    if (cap > SIZE_MAX - HDR)
        return NULL;
    struct block *b = malloc(HDR + cap);
    if (!b)
        return NULL;
    b->next = NULL;
    b->used = 0;
    b->cap = cap;
    return b;
}

void *ckpt_arena_alloc(struct ckpt_arena *a, size_t n)
{
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX - ALIGN)
        return NULL;
    size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (a->limit && (need > a->limit || a->used > a->limit - need))
        return NULL;
#ifdef CKPT_DEBUG_ARENA
    /* One malloc per allocation, so ASan sees exact bounds. */
    struct block *b = new_block(n);
    if (!b)
        return NULL;
    b->next = a->head;
    a->head = b;
    a->used += need;
    void *p = (char *)b + HDR;
    memset(p, 0, n);
    return p;
#else
    struct block *b = a->head;
    if (!b || b->cap - b->used < need) {
        if (need > BLOCK_SIZE / 4) {
            /* Big allocation: its own block, kept behind the head so the
             * head's free space is not wasted. */
            struct block *big = new_block(need);
            if (!big)
                return NULL;
            big->used = need;
            if (b) {
                big->next = b->next;
                b->next = big;
            } else {
                a->head = big;
            }
            a->used += need;
            memset((char *)big + HDR, 0, need);
            return (char *)big + HDR;
        }
        struct block *nb = new_block(BLOCK_SIZE);
        if (!nb)
            return NULL;
        nb->next = b;
        a->head = b = nb;
    }
    void *p = (char *)b + HDR + b->used;
    b->used += need;
    a->used += need;
    memset(p, 0, need);
    return p;
#endif
}

void *ckpt_arena_array(struct ckpt_arena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    return ckpt_arena_alloc(a, n * size);
}

char *ckpt_arena_strndup(struct ckpt_arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    char *p = ckpt_arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *ckpt_arena_strdup(struct ckpt_arena *a, const char *s)
{
    return ckpt_arena_strndup(a, s, strlen(s));
}

size_t ckpt_arena_used(const struct ckpt_arena *a)
{
    return a->used;
}
