/*
 * unpickle_int.h - the pickle machine's state, shared by unpickle.c
 * (scalars, memo, stacks) and objects.c (containers, globals, calls).
 * Private to src/pickle: do not expose.
 */
#ifndef CKPT_UNPICKLE_INT_H
#define CKPT_UNPICKLE_INT_H

#include <stdio.h>

#include "ckpt/pickle.h"

struct um {
    struct ckpt_arena *a;          /* borrowed */
    const unsigned char *data;     /* borrowed input */
    size_t len, pos, op_pos;       /* op_pos: start of current opcode */
    const char *name;              /* for messages */
    ckpt_pickle_allow_fn allow;
    void *ud;
    struct ckpt_err *err;
    struct ckpt_pv **stack;        /* malloced */
    size_t sp, scap;
    size_t *marks;                 /* malloced; stack heights */
    size_t nmarks, mcap;
    struct ckpt_pv **memo;         /* malloced; index -> node or NULL */
    size_t memocap, memolen;
    struct ckpt_pv *result;
    int stopped;
    size_t nvalues, max_values;    /* values pushed so far, and the cap */
    size_t nbytes, max_bytes;      /* decoded string bytes, and the cap */
};

int um_bad(struct um *m, const char *what);
int um_oom(struct um *m);
int um_push(struct um *m, struct ckpt_pv *v);
int um_pop(struct um *m, struct ckpt_pv **out);
int um_top(struct um *m, struct ckpt_pv **out);
int um_pop_mark(struct um *m, size_t *base);
/* child becomes part of parent: raise parent's depth, fail past
 * CKPT_PICKLE_MAX_DEPTH. 0 or -1. */
int um_nest(struct um *m, struct ckpt_pv *parent, const struct ckpt_pv *child);
/* Charge n decoded bytes against the load's cap. 0 or -1. */
int um_take(struct um *m, uint64_t n);

/* objects.c */
int um_step_objects(struct um *m, int c);
int um_op_string_text(struct um *m);
int um_op_unicode_text(struct um *m);

#endif
