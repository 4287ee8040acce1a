#include "ckpt/buf.h"
#include "ckpt/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char ckpt_buf_empty[1];

static void die_oom(size_t n)
{
    ckpt_die_oom("allocating %zu bytes", n);
}

void ckpt_buf_init(struct ckpt_buf *b)
{
    b->ptr = ckpt_buf_empty;
    b->len = 0;
    b->cap = 0;
}

void ckpt_buf_release(struct ckpt_buf *b)
{
    if (b->cap)
        free(b->ptr);
    ckpt_buf_init(b);
}

void ckpt_buf_reset(struct ckpt_buf *b)
{
    b->len = 0;
    b->ptr[0] = '\0';
}

char *ckpt_buf_detach(struct ckpt_buf *b, size_t *len)
{
    char *p = b->cap ? b->ptr : calloc(1, 1);
    if (!p)
        die_oom(1);
    if (len)
        *len = b->len;
    ckpt_buf_init(b);
    return p;
}

void ckpt_buf_grow(struct ckpt_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1)
        die_oom(SIZE_MAX);
    size_t need = b->len + extra;
    if (need <= b->cap)
        return;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    char *p = realloc(b->cap ? b->ptr : NULL, ncap + 1);
    if (!p)
        die_oom(ncap + 1);
    if (!b->cap)
        p[0] = '\0';
    b->ptr = p;
    b->cap = ncap;
}

void ckpt_buf_add(struct ckpt_buf *b, const void *data, size_t len)
{
    if (!len)
        return;
    ckpt_buf_grow(b, len);
    memcpy(b->ptr + b->len, data, len);
    b->len += len;
    b->ptr[b->len] = '\0';
}

void ckpt_buf_addstr(struct ckpt_buf *b, const char *s)
{
    ckpt_buf_add(b, s, strlen(s));
}

void ckpt_buf_addch(struct ckpt_buf *b, char c)
{
    ckpt_buf_add(b, &c, 1);
}

void ckpt_buf_vaddf(struct ckpt_buf *b, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n <= 0)
        return;
    ckpt_buf_grow(b, (size_t)n);
    vsnprintf(b->ptr + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void ckpt_buf_addf(struct ckpt_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ckpt_buf_vaddf(b, fmt, ap);
    va_end(ap);
}

void ckpt_buf_setlen(struct ckpt_buf *b, size_t len)
{
    if (len > b->len)
        ckpt_buf_grow(b, len - b->len);
    b->len = len;
    b->ptr[len] = '\0';
}
