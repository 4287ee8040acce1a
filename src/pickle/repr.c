/*
 * repr.c - a Python-like one-line rendering of a value graph, for tests,
 * debugging output (--verbose) and error messages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/pickle.h"
#include "ptrmap.h"

struct rp {
    struct ckpt_buf *out;
    struct ptrmap open;    /* nodes being printed (cycle guard) */
    size_t max;
};

static void repr(struct rp *r, const struct ckpt_pv *v, int depth);

static void add(struct rp *r, const char *s)
{
    ckpt_buf_addstr(r->out, s);
}

/* Shortest %g that reads back to the same double, as Python's repr. */
static void fmt_float(struct rp *r, double d)
{
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    add(r, tmp);
    if (!strpbrk(tmp, ".eni"))
        add(r, ".0");
}

static void quoted(struct rp *r, const struct ckpt_pv *v, const char *pre)
{
    add(r, pre);
    ckpt_buf_addch(r->out, '\'');
    for (size_t i = 0; i < v->u.s.len; i++) {
        unsigned char c = (unsigned char)v->u.s.p[i];
        if (c == '\'' || c == '\\')
            ckpt_buf_addf(r->out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f || (c >= 0x80 && *pre))
            ckpt_buf_addf(r->out, "\\x%02x", c);
        else
            ckpt_buf_addch(r->out, (char)c);
    }
    ckpt_buf_addch(r->out, '\'');
}

static void seq(struct rp *r, const struct ckpt_pv *v, const char *open,
                const char *close, int depth)
{
    add(r, open);
    for (size_t i = 0; i < v->u.seq.n; i++) {
        if (i)
            add(r, ", ");
        repr(r, v->u.seq.v[i], depth + 1);
    }
    if (v->kind == CKPT_PV_TUPLE && v->u.seq.n == 1)
        add(r, ",");
    add(r, close);
}

static void dict(struct rp *r, const struct ckpt_pv *v, int depth)
{
    add(r, "{");
    for (size_t i = 0; i < v->u.dict.n; i++) {
        if (i)
            add(r, ", ");
        repr(r, v->u.dict.k[i], depth + 1);
        add(r, ": ");
        repr(r, v->u.dict.v[i], depth + 1);
    }
    add(r, "}");
}

static void call(struct rp *r, const struct ckpt_pv *v, int depth)
{
    repr(r, v->u.call.fn, depth + 1);
    if (v->u.call.how != CKPT_CALL_REDUCE)
        add(r, ".__new__");
    seq(r, v->u.call.args, "(", ")", depth);
    if (v->u.call.listitems) {
        add(r, "+");
        repr(r, v->u.call.listitems, depth + 1);
    }
    if (v->u.call.dictitems) {
        add(r, "+");
        repr(r, v->u.call.dictitems, depth + 1);
    }
    if (v->u.call.state) {
        add(r, "<-");
        repr(r, v->u.call.state, depth + 1);
    }
}

static void compound(struct rp *r, const struct ckpt_pv *v, int depth)
{
    switch (v->kind) {
    case CKPT_PV_TUPLE: seq(r, v, "(", ")", depth); break;
    case CKPT_PV_LIST: seq(r, v, "[", "]", depth); break;
    case CKPT_PV_SET: seq(r, v, "set([", "])", depth); break;
    case CKPT_PV_FROZENSET: seq(r, v, "frozenset([", "])", depth); break;
    case CKPT_PV_DICT: dict(r, v, depth); break;
    case CKPT_PV_CALL: call(r, v, depth); break;
    case CKPT_PV_BUILD:
        repr(r, v->u.build.obj, depth + 1);
        add(r, "<-");
        repr(r, v->u.build.state, depth + 1);
        break;
    case CKPT_PV_PERSID:
        add(r, "persid(");
        repr(r, v->u.persid.pid, depth + 1);
        add(r, ")");
        break;
    default:
        add(r, "?");
    }
}

static void repr(struct rp *r, const struct ckpt_pv *v, int depth)
{
    if (r->out->len > r->max)
        return;
    uint64_t open = 0;
    if (!v || depth > CKPT_PICKLE_MAX_DEPTH ||
        (pk_ptrmap_get(&r->open, v, &open) && open)) {
        add(r, "...");
        return;
    }
    switch (v->kind) {
    case CKPT_PV_NONE: add(r, "None"); return;
    case CKPT_PV_BOOL: add(r, v->u.b ? "True" : "False"); return;
    case CKPT_PV_INT: ckpt_buf_addf(r->out, "%lld", (long long)v->u.i); return;
    case CKPT_PV_BIGINT:
        ckpt_buf_addf(r->out, "<int %zu%s>", v->u.s.len,
                      v->flags & CKPT_PV_DECIMAL ? " digits" : " bytes");
        return;
    case CKPT_PV_FLOAT: fmt_float(r, v->u.f); return;
    case CKPT_PV_STR: quoted(r, v, ""); return;
    case CKPT_PV_BYTES: quoted(r, v, "b"); return;
    case CKPT_PV_BYTEARRAY: quoted(r, v, "bytearray:b"); return;
    case CKPT_PV_GLOBAL:
        ckpt_buf_addf(r->out, "%s.%s", v->u.global.module, v->u.global.name);
        return;
    default:
        break;
    }
    pk_ptrmap_put(&r->open, v, 1);
    compound(r, v, depth);
    /* Done with v: a later, non-cyclic reference prints it again. */
    pk_ptrmap_put(&r->open, v, 0);
}

int ckpt_pv_repr(const struct ckpt_pv *v, struct ckpt_buf *out, size_t max)
{
    struct rp r = { out, PTRMAP_INIT, max };
    repr(&r, v, 0);
    pk_ptrmap_release(&r.open);
    if (out->len > max) {
        ckpt_buf_setlen(out, max);
        ckpt_buf_addstr(out, "...");
    }
    return 0;
}
