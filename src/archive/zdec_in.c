/*
 * zdec_in.c - the compressed input every decoder of zdec.h pulls from:
 * pieces read through the callback and kept until the decoder has used
 * them (zdec_bz2.c's block scanner looks back to a block's start).
 */
#include "zdec.h"

#include <string.h>

#include "ckpt/util.h"

/* Room kept free for each read: the archive reads 1 MiB at a time
 * locally. */
#define ROOM (1u << 20)

int zdec_in_more(struct zdec_in *in, size_t keep)
{
    if (in->eof)
        return 0;
    /* Drop what is no longer needed only when room is short: a move per
     * read would copy the retained bytes again and again. */
    if (keep && in->cap - in->len < ROOM) {
        memmove(in->buf, in->buf + keep, in->len - keep);
        in->len -= keep;
        in->pos -= keep;
        in->base += keep;
    }
    if (in->cap - in->len < ROOM) {
        size_t c = in->cap ? in->cap : ROOM;
        while (c - in->len < ROOM)
            c *= 2;
        in->buf = ckpt_xrealloc(in->buf, c);
        in->cap = c;
    }
    size_t n = 0;
    if (in->rd(in->ud, in->buf + in->len, in->cap - in->len, &n) != 0) {
        in->io_failed = 1;
        return -1;
    }
    if (!n) {
        in->eof = 1;
        return 0;
    }
    in->len += n;
    return 1;
}

int zdec_in_need(struct zdec_in *in, size_t n)
{
    while (in->len - in->pos < n) {
        int r = zdec_in_more(in, in->pos);
        if (r <= 0)
            return r;
    }
    return 1;
}

void zdec_in_release(struct zdec_in *in)
{
    free(in->buf);
    in->buf = NULL;
    in->cap = in->len = in->pos = 0;
}
