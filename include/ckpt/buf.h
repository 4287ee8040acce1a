/*
 * ckpt/buf.h - growable byte buffer.
 *
 * Invariants: after CKPT_BUF_INIT or any call, ptr is never NULL and
 * ptr[len] == '\0', so a buffer is always a valid C string as well as
 * binary-safe bytes. cap excludes the terminator. Allocation failure aborts
 * the process with a message: the buffers hold metadata, not bulk data, and
 * every caller would otherwise need the same dead branch.
 */
#ifndef CKPT_BUF_H
#define CKPT_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"

struct ckpt_buf {
    char *ptr;   /* owned, or ckpt_buf_empty when cap == 0 */
    size_t len;
    size_t cap;
};

extern char ckpt_buf_empty[];
#define CKPT_BUF_INIT { ckpt_buf_empty, 0, 0 }

void ckpt_buf_init(struct ckpt_buf *b);
/* Free memory; b is re-initialised and may be reused. */
void ckpt_buf_release(struct ckpt_buf *b);
/* Keep memory, set len to 0. */
void ckpt_buf_reset(struct ckpt_buf *b);
/* Hand the (malloced, NUL-terminated) string to the caller; b becomes empty.
 * Free the result with free(). */
char *ckpt_buf_detach(struct ckpt_buf *b, size_t *len);
void ckpt_buf_grow(struct ckpt_buf *b, size_t extra);
void ckpt_buf_add(struct ckpt_buf *b, const void *data, size_t len);
void ckpt_buf_addstr(struct ckpt_buf *b, const char *s);
void ckpt_buf_addch(struct ckpt_buf *b, char c);
void ckpt_buf_addf(struct ckpt_buf *b, const char *fmt, ...) CKPT_PRINTF(2, 3);
void ckpt_buf_vaddf(struct ckpt_buf *b, const char *fmt, va_list ap);
void ckpt_buf_setlen(struct ckpt_buf *b, size_t len);

#endif
