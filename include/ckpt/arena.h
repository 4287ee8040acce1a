/*
 * ckpt/arena.h - a bump allocator freed in one call.
 *
 * Parsed graphs (pickles, metadata) live in one arena and are never freed
 * node by node. A byte limit makes hostile input fail cleanly instead of
 * exhausting memory: ckpt_arena_alloc returns NULL once the limit would be
 * exceeded (callers turn that into CKPT_ENOMEM/CKPT_EFORMAT).
 *
 * Built with CKPT_DEBUG_ARENA, every allocation is a separate malloc so
 * AddressSanitizer sees out-of-bounds accesses and use-after-free.
 *
 * Not thread-safe: one arena per thread, or external locking.
 */
#ifndef CKPT_ARENA_H
#define CKPT_ARENA_H

#include <stddef.h>

struct ckpt_arena;

/* limit: maximum bytes handed out (0: unlimited). NULL on OOM. */
struct ckpt_arena *ckpt_arena_new(size_t limit);
/* Free every allocation and the arena. NULL-safe. */
void ckpt_arena_free(struct ckpt_arena *a);
/* n bytes aligned to 16, zeroed. NULL when over the limit or OOM. */
void *ckpt_arena_alloc(struct ckpt_arena *a, size_t n);
/* Overflow-checked n * size. */
void *ckpt_arena_array(struct ckpt_arena *a, size_t n, size_t size);
/* Copy of s[0..n) plus a NUL. */
char *ckpt_arena_strndup(struct ckpt_arena *a, const char *s, size_t n);
char *ckpt_arena_strdup(struct ckpt_arena *a, const char *s);
/* Bytes handed out so far. */
size_t ckpt_arena_used(const struct ckpt_arena *a);

#endif
