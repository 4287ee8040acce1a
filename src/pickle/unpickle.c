/*
 * unpickle.c - the pickle machine: opcodes of protocols 0-5 onto a value
 * stack and a mark stack, building an arena graph (see ckpt/pickle.h).
 *
 * Follows CPython's Lib/pickle.py _Unpickler opcode by opcode, except that
 * nothing is imported or called: globals, calls and BUILD become nodes.
 * The machine is iterative, so nesting depth costs heap, not C stack; the
 * stacks grow at most one slot per input byte.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/pickle.h"
#include "ckpt/util.h"
#include "unpickle_int.h"

static int fail(struct um *m, int code, const char *fmt, const char *what)
{
    char detail[256];
    snprintf(detail, sizeof(detail), fmt, what);
    return ckpt_err_set(m->err, code, "%s: %s at offset %zu", m->name,
                        detail, m->op_pos);
}

int um_bad(struct um *m, const char *what)
{
    return fail(m, CKPT_EFORMAT, "%s", what);
}

int um_oom(struct um *m)
{
    return ckpt_err_set(m->err, CKPT_ENOMEM,
                        "%s: pickle too large (memory limit reached)",
                        m->name);
}

int um_nest(struct um *m, struct ckpt_pv *parent, const struct ckpt_pv *child)
{
    if (!child || child->depth < parent->depth)
        return 0;
    if (child->depth >= CKPT_PICKLE_MAX_DEPTH)
        return ckpt_err_set(m->err, CKPT_EFORMAT, "%s: value nested deeper "
                            "than %d levels at offset %zu", m->name,
                            CKPT_PICKLE_MAX_DEPTH, m->op_pos);
    parent->depth = child->depth + 1;
    return 0;
}

int um_take(struct um *m, uint64_t n)
{
    if (n > m->max_bytes - m->nbytes)
        return ckpt_err_set(m->err, CKPT_ENOMEM, "%s: pickle too large: more "
                            "than %zu bytes of strings at offset %zu",
                            m->name, m->max_bytes, m->op_pos);
    m->nbytes += (size_t)n;
    return 0;
}

static int need(struct um *m, size_t n)
{
    if (n > m->len - m->pos)
        return fail(m, CKPT_EFORMAT, "%s", "truncated pickle");
    return 0;
}

static uint64_t rd_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Read an n-byte little-endian unsigned length/argument. */
static int arg_le(struct um *m, int n, uint64_t *out)
{
    *out = 0;   /* defined on failure too: callers test only the result */
    if (need(m, (size_t)n) != 0)
        return -1;
    *out = rd_le(m->data + m->pos, n);
    m->pos += (size_t)n;
    return 0;
}

/* A text line ending in '\n' (protocol 0 arguments); *line borrowed. */
static int arg_line(struct um *m, const char **line, size_t *len)
{
    const unsigned char *s = m->data + m->pos;
    const unsigned char *nl = memchr(s, '\n', m->len - m->pos);
    *line = NULL;   /* defined on failure too */
    *len = 0;
    if (!nl)
        return fail(m, CKPT_EFORMAT, "%s", "truncated pickle");
    *line = (const char *)s;
    *len = (size_t)(nl - s);
    m->pos += *len + 1;
    return 0;
}

/* --- stacks --------------------------------------------------------- */

int um_push(struct um *m, struct ckpt_pv *v)
{
    if (!v)
        return um_oom(m);
    /* Every value pushed, memo references too, costs stack and container
     * slots: counting pushes bounds all of them. */
    if (++m->nvalues > m->max_values)
        return ckpt_err_set(m->err, CKPT_ENOMEM, "%s: pickle too large: more "
                            "than %zu values at offset %zu", m->name,
                            m->max_values, m->op_pos);
    if (m->sp == m->scap) {
        size_t ncap = m->scap ? m->scap * 2 : 64;
        struct ckpt_pv **p = realloc(m->stack, ncap * sizeof(*p));
        if (!p)
            return um_oom(m);
        m->stack = p;
        m->scap = ncap;
    }
    m->stack[m->sp++] = v;
    return 0;
}

/* Base of the current mark frame: items above it belong to this frame. */
static size_t frame_base(const struct um *m)
{
    return m->nmarks ? m->marks[m->nmarks - 1] : 0;
}

int um_pop(struct um *m, struct ckpt_pv **out)
{
    *out = NULL;   /* defined on failure too: callers test only the result */
    if (m->sp <= frame_base(m))
        return um_bad(m, "stack underflow");
    *out = m->stack[--m->sp];
    return 0;
}

int um_top(struct um *m, struct ckpt_pv **out)
{
    *out = NULL;
    if (m->sp <= frame_base(m))
        return um_bad(m, "stack underflow");
    *out = m->stack[m->sp - 1];
    return 0;
}

static int push_mark(struct um *m)
{
    /* Marks nest as the containers being built do. */
    if (m->nmarks >= CKPT_PICKLE_MAX_DEPTH)
        return ckpt_err_set(m->err, CKPT_EFORMAT, "%s: value nested deeper "
                            "than %d levels at offset %zu", m->name,
                            CKPT_PICKLE_MAX_DEPTH, m->op_pos);
    if (m->nmarks == m->mcap) {
        size_t ncap = m->mcap ? m->mcap * 2 : 32;
        size_t *p = realloc(m->marks, ncap * sizeof(*p));
        if (!p)
            return um_oom(m);
        m->marks = p;
        m->mcap = ncap;
    }
    m->marks[m->nmarks++] = m->sp;
    return 0;
}

/* Pop the topmost mark: the items above it are stack[*base .. sp). */
int um_pop_mark(struct um *m, size_t *base)
{
    *base = m->sp;   /* defined on failure too: an empty frame */
    if (!m->nmarks)
        return um_bad(m, "MARK missing");
    *base = m->marks[--m->nmarks];
    return 0;
}

/* --- memo ----------------------------------------------------------- */

static int memo_put(struct um *m, uint64_t idx)
{
    struct ckpt_pv *v;
    if (um_top(m, &v) != 0)
        return -1;
    /* Picklers number the memo densely from 0, one PUT per object, so a
     * valid index is below the number of values pushed so far; refusing
     * larger ones bounds the table by the value cap. */
    if (idx > m->nvalues)
        return um_bad(m, "memo index out of range");
    if (idx >= m->memocap) {
        size_t ncap = m->memocap ? m->memocap : 64;
        while (ncap <= idx)
            ncap *= 2;
        struct ckpt_pv **p = realloc(m->memo, ncap * sizeof(*p));
        if (!p)
            return um_oom(m);
        memset(p + m->memocap, 0, (ncap - m->memocap) * sizeof(*p));
        m->memo = p;
        m->memocap = ncap;
    }
    if (!m->memo[idx])
        m->memolen++;
    m->memo[idx] = v;
    return 0;
}

static int memo_get(struct um *m, uint64_t idx)
{
    if (idx >= m->memocap || !m->memo[idx])
        return um_bad(m, "memo key missing");
    return um_push(m, m->memo[idx]);
}

static int op_get_text(struct um *m, int put)
{
    const char *line;
    size_t n;
    uint64_t idx;
    if (arg_line(m, &line, &n) != 0)
        return -1;
    char tmp[32];
    if (n == 0 || n >= sizeof(tmp))
        return um_bad(m, "bad memo index");
    memcpy(tmp, line, n);
    tmp[n] = '\0';
    if (ckpt_parse_u64(tmp, &idx) != 0)
        return um_bad(m, "bad memo index");
    return put ? memo_put(m, idx) : memo_get(m, idx);
}

/* --- scalars -------------------------------------------------------- */

static int push_int(struct um *m, int64_t i)
{
    return um_push(m, ckpt_pv_int(m->a, i));
}

/* LONG1/LONG4 payload: little-endian two's complement of n bytes. */
static int push_long_bytes(struct um *m, uint64_t n)
{
    if (need(m, n) != 0)
        return -1;
    const unsigned char *p = m->data + m->pos;
    m->pos += n;
    if (n <= 8) {
        uint64_t u = n ? rd_le(p, (int)n) : 0;
        if (n && n < 8 && (p[n - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * n);
        return push_int(m, (int64_t)u);
    }
    if (um_take(m, n) != 0)
        return -1;
    struct ckpt_pv *v = ckpt_pv_new(m->a, CKPT_PV_BIGINT);
    if (!v)
        return um_oom(m);
    v->u.s.p = ckpt_arena_strndup(m->a, (const char *)p, n);
    v->u.s.len = n;
    return v->u.s.p ? um_push(m, v) : um_oom(m);
}

/* Text INT ("I42\n", "I01\n" = True) and LONG ("L42L\n"). */
static int op_int_text(struct um *m, int is_long)
{
    const char *line;
    size_t n;
    if (arg_line(m, &line, &n) != 0)
        return -1;
    if (!is_long && n == 2 && (!memcmp(line, "00", 2) ||
                               !memcmp(line, "01", 2)))
        return um_push(m, ckpt_pv_bool(m->a, line[1] == '1'));
    if (is_long && n && line[n - 1] == 'L')
        n--;
    size_t start = (n && (line[0] == '-' || line[0] == '+')) ? 1 : 0;
    if (start == n)
        return um_bad(m, "bad integer");
    for (size_t i = start; i < n; i++)
        if (line[i] < '0' || line[i] > '9')
            return um_bad(m, "bad integer");
    char tmp[24];
    uint64_t u;
    if (n - start < 19) {
        memcpy(tmp, line + start, n - start);
        tmp[n - start] = '\0';
        if (ckpt_parse_u64(tmp, &u) == 0)
            return push_int(m, line[0] == '-' ? -(int64_t)u : (int64_t)u);
    }
    if (um_take(m, n) != 0)
        return -1;
    struct ckpt_pv *v = ckpt_pv_new(m->a, CKPT_PV_BIGINT);
    if (!v)
        return um_oom(m);
    v->flags |= CKPT_PV_DECIMAL;
    v->u.s.p = ckpt_arena_strndup(m->a, line, n);
    v->u.s.len = n;
    return v->u.s.p ? um_push(m, v) : um_oom(m);
}

static int op_float_text(struct um *m)
{
    const char *line;
    size_t n;
    if (arg_line(m, &line, &n) != 0)
        return -1;
    char tmp[64];
    if (n == 0 || n >= sizeof(tmp))
        return um_bad(m, "bad float");
    memcpy(tmp, line, n);
    tmp[n] = '\0';
    char *end;
    double d = strtod(tmp, &end);
    if (*end)
        return um_bad(m, "bad float");
    struct ckpt_pv *v = ckpt_pv_new(m->a, CKPT_PV_FLOAT);
    if (v)
        v->u.f = d;
    return um_push(m, v);
}

static int op_binfloat(struct um *m)
{
    uint64_t bits = 0;
    if (need(m, 8) != 0)
        return -1;
    for (int i = 0; i < 8; i++)   /* big-endian IEEE 754 */
        bits = (bits << 8) | m->data[m->pos + i];
    m->pos += 8;
    double d;
    memcpy(&d, &bits, sizeof(d));
    struct ckpt_pv *v = ckpt_pv_new(m->a, CKPT_PV_FLOAT);
    if (v)
        v->u.f = d;
    return um_push(m, v);
}

/* Length-prefixed bytes of kind (STR, BYTES, BYTEARRAY). */
static int op_counted(struct um *m, int lenbytes, enum ckpt_pv_kind kind,
                      unsigned flags)
{
    uint64_t n;
    if (arg_le(m, lenbytes, &n) != 0 || need(m, n) != 0 ||
        um_take(m, n) != 0)
        return -1;
    struct ckpt_pv *v = ckpt_pv_new(m->a, kind);
    if (!v)
        return um_oom(m);
    v->flags = flags;
    v->u.s.p = ckpt_arena_strndup(m->a, (const char *)m->data + m->pos, n);
    v->u.s.len = n;
    m->pos += n;
    return v->u.s.p ? um_push(m, v) : um_oom(m);
}

/* BININT (signed 32), BININT1 (u8), BININT2 (u16). */
static int op_binint(struct um *m, int n)
{
    uint64_t u;
    if (arg_le(m, n, &u) != 0)
        return -1;
    if (n == 4)
        return push_int(m, (int32_t)(uint32_t)u);
    return push_int(m, (int64_t)u);
}

/* --- dispatch ------------------------------------------------------- */

static int op_proto(struct um *m)
{
    uint64_t p;
    if (arg_le(m, 1, &p) != 0)
        return -1;
    if (p > 5)
        return um_bad(m, "unsupported pickle protocol");
    return 0;
}

static int op_frame(struct um *m)
{
    uint64_t n;
    /* Framing only groups opcodes for buffered readers; a frame's contents
     * are ordinary opcodes, so its length is skipped. */
    return arg_le(m, 8, &n);
}

static int op_dup(struct um *m)
{
    struct ckpt_pv *v;
    return um_top(m, &v) != 0 ? -1 : um_push(m, v);
}

static int op_pop(struct um *m)
{
    size_t base;
    struct ckpt_pv *v;
    /* CPython: pop an item, or the mark itself when the frame is empty. */
    if (m->sp > frame_base(m))
        return um_pop(m, &v);
    if (um_pop_mark(m, &base) != 0)
        return -1;
    m->sp = base;
    return 0;
}

static int op_pop_mark(struct um *m)
{
    size_t base;
    if (um_pop_mark(m, &base) != 0)
        return -1;
    m->sp = base;
    return 0;
}

static int op_stop(struct um *m)
{
    struct ckpt_pv *v;
    if (um_pop(m, &v) != 0)
        return -1;
    m->result = v;
    m->stopped = 1;
    return 0;
}

static int op_memo(struct um *m, int c)
{
    uint64_t idx;
    switch (c) {
    case 'h': return arg_le(m, 1, &idx) ? -1 : memo_get(m, idx);
    case 'j': return arg_le(m, 4, &idx) ? -1 : memo_get(m, idx);
    case 'q': return arg_le(m, 1, &idx) ? -1 : memo_put(m, idx);
    case 'r': return arg_le(m, 4, &idx) ? -1 : memo_put(m, idx);
    case 0x94: return memo_put(m, m->memolen);
    case 'g': return op_get_text(m, 0);
    default: return op_get_text(m, 1);   /* 'p' */
    }
}

static int step(struct um *m, int c)
{
    switch (c) {
    case 0x80: return op_proto(m);
    case 0x95: return op_frame(m);
    case '.': return op_stop(m);
    case '(': return push_mark(m);
    case '0': return op_pop(m);
    case '1': return op_pop_mark(m);
    case '2': return op_dup(m);
    case 'N': return um_push(m, ckpt_pv_new(m->a, CKPT_PV_NONE));
    case 0x88: return um_push(m, ckpt_pv_bool(m->a, 1));
    case 0x89: return um_push(m, ckpt_pv_bool(m->a, 0));
    case 'I': return op_int_text(m, 0);
    case 'L': return op_int_text(m, 1);
    case 'J': return op_binint(m, 4);
    case 'K': return op_binint(m, 1);
    case 'M': return op_binint(m, 2);
    case 0x8a: {
        uint64_t n;
        return arg_le(m, 1, &n) ? -1 : push_long_bytes(m, n);
    }
    case 0x8b: {
        uint64_t n;
        if (arg_le(m, 4, &n) != 0)
            return -1;
        if (n & 0x80000000u)
            return um_bad(m, "negative LONG4 length");
        return push_long_bytes(m, n);
    }
    case 'F': return op_float_text(m);
    case 'G': return op_binfloat(m);
    case 'X': return op_counted(m, 4, CKPT_PV_STR, 0);
    case 0x8c: return op_counted(m, 1, CKPT_PV_STR, 0);
    case 0x8d: return op_counted(m, 8, CKPT_PV_STR, 0);
    case 'T': return op_counted(m, 4, CKPT_PV_STR, CKPT_PV_BINSTR);
    case 'U': return op_counted(m, 1, CKPT_PV_STR, CKPT_PV_BINSTR);
    case 'B': return op_counted(m, 4, CKPT_PV_BYTES, 0);
    case 'C': return op_counted(m, 1, CKPT_PV_BYTES, 0);
    case 0x8e: return op_counted(m, 8, CKPT_PV_BYTES, 0);
    case 0x96: return op_counted(m, 8, CKPT_PV_BYTEARRAY, 0);
    case 'S': return um_op_string_text(m);
    case 'V': return um_op_unicode_text(m);
    case 'g': case 'h': case 'j': case 'p': case 'q': case 'r': case 0x94:
        return op_memo(m, c);
    case 0x97:
        return um_bad(m, "out-of-band buffer (NEXT_BUFFER) not supported");
    case 0x98:   /* READONLY_BUFFER: a flag on an in-band buffer */
        return 0;
    case 0x82: case 0x83: case 0x84:
        return um_bad(m, "extension registry (EXT1/2/4) not supported");
    default:
        return um_step_objects(m, c);
    }
}

/* The caps in opts bound what one load may build; the arena's limit
 * bounds the graph as a whole. */
int ckpt_pickle_load(struct ckpt_arena *a, const void *data, size_t len,
                     const struct ckpt_pickle_opts *opts,
                     struct ckpt_pv **out, size_t *used,
                     struct ckpt_err *err)
{
    struct um m;
    memset(&m, 0, sizeof(m));
    m.a = a;
    m.data = data;
    m.len = len;
    m.name = opts && opts->name ? opts->name : "pickle";
    m.allow = opts ? opts->allow : NULL;
    m.ud = opts ? opts->ud : NULL;
    m.err = err;
    m.max_values = opts && opts->max_values ? opts->max_values
                                            : CKPT_PICKLE_MAX_VALUES;
    m.max_bytes = opts && opts->max_bytes ? opts->max_bytes
                                          : CKPT_PICKLE_MAX_BYTES;
    int rc = 0;
    while (!m.stopped) {
        m.op_pos = m.pos;
        if (m.pos >= m.len) {
            rc = ckpt_err_set(err, CKPT_EFORMAT,
                              "%s: truncated pickle (no STOP)", m.name);
            break;
        }
        int c = m.data[m.pos++];
        if (step(&m, c) != 0) {
            rc = -1;
            break;
        }
    }
    if (!rc) {
        *out = m.result;
        if (used)
            *used = m.pos;
    }
    free(m.stack);
    free(m.marks);
    free(m.memo);
    return rc;
}
