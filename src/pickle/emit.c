/*
 * emit.c - write a value graph as a protocol 2 pickle (ckpt_pickle_dump).
 *
 * Mirrors CPython's Lib/pickle.py _Pickler for protocol 2: containers are
 * memoized before their items (so cycles through them terminate), tuples
 * and calls after their parts, with the "already in the memo: POP and GET"
 * fix-up for recursive ones. Memo indices are assigned afresh in emission
 * order, so graphs spliced together from several pickles renumber cleanly.
 * Protocol 2 because torch.save writes it and torch's weights-only loader
 * knows its opcodes.
 */
#include <string.h>

#include "ckpt/pickle.h"
#include "ptrmap.h"

struct em {
    struct ckpt_buf *out;
    struct ptrmap memo;     /* node -> memo index */
    uint64_t next;
    struct ckpt_err *err;
};

static int emit(struct em *e, const struct ckpt_pv *v, int depth);

static void op(struct em *e, int c)
{
    ckpt_buf_addch(e->out, (char)c);
}

static void le(struct em *e, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        ckpt_buf_addch(e->out, (char)(v >> (8 * i)));
}

static int memoize(struct em *e, const struct ckpt_pv *v)
{
    uint64_t idx = e->next++;
    if (pk_ptrmap_put(&e->memo, v, idx) != 0)
        return ckpt_err_set(e->err, CKPT_ENOMEM, "out of memory");
    if (idx < 256) {
        op(e, 'q');
        le(e, idx, 1);
    } else {
        op(e, 'r');
        le(e, idx, 4);
    }
    return 0;
}

static void get(struct em *e, uint64_t idx)
{
    if (idx < 256) {
        op(e, 'h');
        le(e, idx, 1);
    } else {
        op(e, 'j');
        le(e, idx, 4);
    }
}

static void emit_int(struct em *e, int64_t i)
{
    if (i >= 0 && i < 256) {
        op(e, 'K');
        le(e, (uint64_t)i, 1);
    } else if (i >= 0 && i < 65536) {
        op(e, 'M');
        le(e, (uint64_t)i, 2);
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
        op(e, 'J');
        le(e, (uint64_t)(uint32_t)(int32_t)i, 4);
    } else {
        /* LONG1 with the shortest two's complement that keeps the sign. */
        int n = 8;
        while (n > 1) {
            int64_t hi = i >> (8 * (n - 1) - 1);
            if (hi != 0 && hi != -1)
                break;
            n--;
        }
        op(e, 0x8a);
        le(e, (uint64_t)n, 1);
        le(e, (uint64_t)i, n);
    }
}

static int emit_bigint(struct em *e, const struct ckpt_pv *v)
{
    if (v->flags & CKPT_PV_DECIMAL) {
        op(e, 'L');
        ckpt_buf_add(e->out, v->u.s.p, v->u.s.len);
        ckpt_buf_addstr(e->out, "L\n");
        return 0;
    }
    if (v->u.s.len > 0x7fffffff)
        return ckpt_err_set(e->err, CKPT_EFORMAT, "integer too large");
    if (v->u.s.len < 256) {
        op(e, 0x8a);
        le(e, v->u.s.len, 1);
    } else {
        op(e, 0x8b);
        le(e, v->u.s.len, 4);
    }
    ckpt_buf_add(e->out, v->u.s.p, v->u.s.len);
    return 0;
}

static void emit_float(struct em *e, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof(bits));
    op(e, 'G');
    for (int i = 7; i >= 0; i--)
        ckpt_buf_addch(e->out, (char)(bits >> (8 * i)));
}

static int unicode(struct em *e, const char *s, size_t n)
{
    if (n > 0xffffffffu)
        return ckpt_err_set(e->err, CKPT_EFORMAT, "string too long");
    op(e, 'X');
    le(e, n, 4);
    ckpt_buf_add(e->out, s, n);
    return 0;
}

static int global(struct em *e, const char *mod, const char *name)
{
    if (strchr(mod, '\n') || strchr(name, '\n'))
        return ckpt_err_set(e->err, CKPT_EFORMAT,
                            "global name contains a newline");
    op(e, 'c');
    ckpt_buf_addstr(e->out, mod);
    ckpt_buf_addch(e->out, '\n');
    ckpt_buf_addstr(e->out, name);
    ckpt_buf_addch(e->out, '\n');
    return 0;
}

/* bytes/bytearray as Python writes them for protocol < 3:
 * _codecs.encode(latin1_text, 'latin1') or bytearray(text, 'latin-1'). */
static int emit_bytes(struct em *e, const struct ckpt_pv *v)
{
    int ba = v->kind == CKPT_PV_BYTEARRAY;
    if (ba ? global(e, "__builtin__", "bytearray")
           : global(e, "_codecs", "encode"))
        return -1;
    struct ckpt_buf txt = CKPT_BUF_INIT;
    for (size_t i = 0; i < v->u.s.len; i++) {
        unsigned char c = (unsigned char)v->u.s.p[i];
        if (c < 0x80) {
            ckpt_buf_addch(&txt, (char)c);
        } else {
            ckpt_buf_addch(&txt, (char)(0xc0 | (c >> 6)));
            ckpt_buf_addch(&txt, (char)(0x80 | (c & 0x3f)));
        }
    }
    int rc = unicode(e, txt.ptr, txt.len);
    ckpt_buf_release(&txt);
    if (rc == 0)
        rc = unicode(e, ba ? "latin-1" : "latin1", ba ? 7 : 6);
    op(e, 0x86);
    op(e, 'R');
    return rc ? rc : memoize(e, v);
}

/* After a tuple's or call's parts: if emitting them memoized v (a cycle
 * came back to it), drop what was built and fetch the memoized one. */
static int finish(struct em *e, const struct ckpt_pv *v, int pops,
                  int popmark)
{
    uint64_t idx;
    if (!pk_ptrmap_get(&e->memo, v, &idx))
        return memoize(e, v);
    if (popmark)
        op(e, '1');
    for (int i = 0; i < pops; i++)
        op(e, '0');
    get(e, idx);
    return 0;
}

static int emit_tuple(struct em *e, const struct ckpt_pv *v, int depth)
{
    size_t n = v->u.seq.n;
    if (n == 0) {
        op(e, ')');
        return 0;
    }
    if (n > 3)
        op(e, '(');
    for (size_t i = 0; i < n; i++)
        if (emit(e, v->u.seq.v[i], depth + 1) != 0)
            return -1;
    uint64_t idx;
    if (pk_ptrmap_get(&e->memo, v, &idx))
        return finish(e, v, n <= 3 ? (int)n : 0, n > 3);
    op(e, n > 3 ? 't' : 0x85 + (int)n - 1);
    return memoize(e, v);
}

/* Items of a list as batches of APPENDS (CPython's batch size). */
static int emit_appends(struct em *e, const struct ckpt_pv *l, int depth)
{
    size_t n = l->u.seq.n;
    for (size_t i = 0; i < n; i += 1000) {
        size_t k = n - i < 1000 ? n - i : 1000;
        if (k > 1)
            op(e, '(');
        for (size_t j = i; j < i + k; j++)
            if (emit(e, l->u.seq.v[j], depth + 1) != 0)
                return -1;
        op(e, k > 1 ? 'e' : 'a');
    }
    return 0;
}

static int emit_setitems(struct em *e, const struct ckpt_pv *d, int depth)
{
    size_t n = d->u.dict.n;
    for (size_t i = 0; i < n; i += 1000) {
        size_t k = n - i < 1000 ? n - i : 1000;
        if (k > 1)
            op(e, '(');
        for (size_t j = i; j < i + k; j++)
            if (emit(e, d->u.dict.k[j], depth + 1) != 0 ||
                emit(e, d->u.dict.v[j], depth + 1) != 0)
                return -1;
        op(e, k > 1 ? 'u' : 's');
    }
    return 0;
}

/* set/frozenset as builtins.set([items]) (protocol 2 has no set ops). */
static int emit_set(struct em *e, const struct ckpt_pv *v, int depth)
{
    if (global(e, "__builtin__",
               v->kind == CKPT_PV_SET ? "set" : "frozenset") != 0)
        return -1;
    op(e, ']');
    if (emit_appends(e, v, depth) != 0)
        return -1;
    op(e, 0x85);
    op(e, 'R');
    return finish(e, v, 0, 0);
}

static int emit_call(struct em *e, const struct ckpt_pv *v, int depth)
{
    if (v->u.call.how == CKPT_CALL_NEWOBJ_EX)
        return ckpt_err_set(e->err, CKPT_EUNSUPPORTED,
                            "NEWOBJ_EX objects cannot be written");
    if (emit(e, v->u.call.fn, depth + 1) != 0 ||
        emit(e, v->u.call.args, depth + 1) != 0)
        return -1;
    op(e, v->u.call.how == CKPT_CALL_NEWOBJ ? 0x81 : 'R');
    if (finish(e, v, 0, 0) != 0)
        return -1;
    /* CPython's save_reduce order: list items, dict items, state. */
    if (v->u.call.listitems && emit_appends(e, v->u.call.listitems, depth))
        return -1;
    if (v->u.call.dictitems &&
        emit_setitems(e, v->u.call.dictitems, depth))
        return -1;
    if (v->u.call.state) {
        if (emit(e, v->u.call.state, depth + 1) != 0)
            return -1;
        op(e, 'b');
    }
    return 0;
}

static int emit_container(struct em *e, const struct ckpt_pv *v, int depth)
{
    switch (v->kind) {
    case CKPT_PV_LIST:
        op(e, ']');
        return memoize(e, v) ? -1 : emit_appends(e, v, depth);
    case CKPT_PV_DICT:
        op(e, '}');
        return memoize(e, v) ? -1 : emit_setitems(e, v, depth);
    case CKPT_PV_TUPLE:
        return emit_tuple(e, v, depth);
    case CKPT_PV_SET:
    case CKPT_PV_FROZENSET:
        return emit_set(e, v, depth);
    case CKPT_PV_CALL:
        return emit_call(e, v, depth);
    case CKPT_PV_BUILD:
        if (emit(e, v->u.build.obj, depth + 1) != 0 ||
            emit(e, v->u.build.state, depth + 1) != 0)
            return -1;
        op(e, 'b');
        return memoize(e, v);
    case CKPT_PV_PERSID:
        if (emit(e, v->u.persid.pid, depth + 1) != 0)
            return -1;
        op(e, 'Q');
        return 0;
    default:
        return ckpt_err_set(e->err, CKPT_EINTERNAL, "bad pickle node");
    }
}

static int emit(struct em *e, const struct ckpt_pv *v, int depth)
{
    uint64_t idx;
    if (!v)
        return ckpt_err_set(e->err, CKPT_EINTERNAL, "NULL pickle node");
    if (depth > CKPT_PICKLE_MAX_DEPTH)
        return ckpt_err_set(e->err, CKPT_EFORMAT,
                            "value nested deeper than %d levels",
                            CKPT_PICKLE_MAX_DEPTH);
    if (pk_ptrmap_get(&e->memo, v, &idx)) {
        get(e, idx);
        return 0;
    }
    switch (v->kind) {
    case CKPT_PV_NONE: op(e, 'N'); return 0;
    case CKPT_PV_BOOL: op(e, v->u.b ? 0x88 : 0x89); return 0;
    case CKPT_PV_INT: emit_int(e, v->u.i); return 0;
    case CKPT_PV_BIGINT: return emit_bigint(e, v);
    case CKPT_PV_FLOAT: emit_float(e, v->u.f); return 0;
    case CKPT_PV_STR:
        return unicode(e, v->u.s.p, v->u.s.len) ? -1 : memoize(e, v);
    case CKPT_PV_BYTES:
    case CKPT_PV_BYTEARRAY:
        return emit_bytes(e, v);
    case CKPT_PV_GLOBAL:
        return global(e, v->u.global.module, v->u.global.name) ? -1
               : memoize(e, v);
    default:
        return emit_container(e, v, depth);
    }
}

int ckpt_pickle_dump(const struct ckpt_pv *v, struct ckpt_buf *out,
                     struct ckpt_err *err)
{
    struct em e = { out, PTRMAP_INIT, 0, err };
    size_t start = out->len;
    ckpt_buf_addch(out, (char)0x80);
    ckpt_buf_addch(out, 2);
    int rc = emit(&e, v, 0);
    if (rc == 0)
        ckpt_buf_addch(out, '.');
    else
        ckpt_buf_setlen(out, start);
    pk_ptrmap_release(&e.memo);
    return rc;
}
