/*
 * objects.c - container, global, call and text-string opcodes of the pickle
 * machine (see unpickle.c for the rest).
 */
#include <string.h>

#include "ckpt/text.h"
#include "unpickle_int.h"

static struct ckpt_pv *new_seq(struct um *m, enum ckpt_pv_kind kind,
                               size_t base)
{
    struct ckpt_pv *v = ckpt_pv_new(m->a, kind);
    if (!v)
        return NULL;
    size_t n = m->sp - base;
    if (n) {
        v->u.seq.v = ckpt_arena_array(m->a, n, sizeof(*v->u.seq.v));
        if (!v->u.seq.v)
            return NULL;
        memcpy(v->u.seq.v, m->stack + base, n * sizeof(*v->u.seq.v));
        v->u.seq.n = v->u.seq.cap = n;
    }
    m->sp = base;
    return v;
}

/* Items stack[base..sp) become part of v. 0 or -1. */
static int nest_range(struct um *m, struct ckpt_pv *v, size_t base)
{
    for (size_t i = base; i < m->sp; i++)
        if (um_nest(m, v, m->stack[i]) != 0)
            return -1;
    return 0;
}

/* new_seq with the items' depth; NULL with the error set. */
static struct ckpt_pv *nested_seq(struct um *m, enum ckpt_pv_kind kind,
                                  size_t base)
{
    struct ckpt_pv probe;
    memset(&probe, 0, sizeof(probe));
    if (nest_range(m, &probe, base) != 0)
        return NULL;
    struct ckpt_pv *v = new_seq(m, kind, base);
    if (!v) {
        um_oom(m);
        return NULL;
    }
    v->depth = probe.depth;
    return v;
}

static int push_seq(struct um *m, enum ckpt_pv_kind kind, size_t base)
{
    struct ckpt_pv *v = nested_seq(m, kind, base);
    return v ? um_push(m, v) : -1;
}

/* TUPLE, LIST, FROZENSET from the items above the top mark. */
static int op_from_mark(struct um *m, enum ckpt_pv_kind kind)
{
    size_t base;
    if (um_pop_mark(m, &base) != 0)
        return -1;
    return push_seq(m, kind, base);
}

/* TUPLE1..3: the top n items. */
static int op_tuple_n(struct um *m, size_t n)
{
    size_t lo = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (m->sp - lo < n)
        return um_bad(m, "stack underflow");
    return push_seq(m, CKPT_PV_TUPLE, m->sp - n);
}

static int add_pairs(struct um *m, struct ckpt_pv *d, size_t base)
{
    if ((m->sp - base) % 2)
        return um_bad(m, "odd number of items for SETITEMS");
    if (nest_range(m, d, base) != 0)
        return -1;
    for (size_t i = base; i < m->sp; i += 2)
        if (ckpt_pv_dict_add(m->a, d, m->stack[i], m->stack[i + 1]) != 0)
            return um_oom(m);
    m->sp = base;
    return 0;
}

static int op_dict_mark(struct um *m)
{
    size_t base;
    if (um_pop_mark(m, &base) != 0)
        return -1;
    struct ckpt_pv *d = ckpt_pv_new(m->a, CKPT_PV_DICT);
    if (!d)
        return um_oom(m);
    if (add_pairs(m, d, base) != 0)
        return -1;
    return um_push(m, d);
}

/* The dict that SETITEM(S) on target fills: the dict itself, or the
 * dictitems of an object (OrderedDict and other dict subclasses). */
static struct ckpt_pv *dict_target(struct um *m, struct ckpt_pv *t)
{
    if (t->kind == CKPT_PV_DICT)
        return t;
    if (t->kind != CKPT_PV_CALL)
        return NULL;
    if (!t->u.call.dictitems)
        t->u.call.dictitems = ckpt_pv_new(m->a, CKPT_PV_DICT);
    return t->u.call.dictitems;
}

/* Likewise for APPEND(S): a list, or the listitems of an object. */
static struct ckpt_pv *list_target(struct um *m, struct ckpt_pv *t)
{
    if (t->kind == CKPT_PV_LIST)
        return t;
    if (t->kind != CKPT_PV_CALL)
        return NULL;
    if (!t->u.call.listitems)
        t->u.call.listitems = ckpt_pv_new(m->a, CKPT_PV_LIST);
    return t->u.call.listitems;
}

static int target_error(struct um *m, const char *op, struct ckpt_pv *t)
{
    char what[64];
    snprintf(what, sizeof(what), "%s on a %s", op,
             ckpt_pv_kind_name(t->kind));
    return um_bad(m, what);
}

static int op_setitem(struct um *m)
{
    struct ckpt_pv *k, *v, *t;
    if (um_pop(m, &v) != 0 || um_pop(m, &k) != 0 || um_top(m, &t) != 0)
        return -1;
    struct ckpt_pv *d = dict_target(m, t);
    if (!d)
        return target_error(m, "SETITEM", t);
    if (um_nest(m, d, k) != 0 || um_nest(m, d, v) != 0 ||
        (t != d && um_nest(m, t, d) != 0))
        return -1;
    return ckpt_pv_dict_add(m->a, d, k, v) != 0 ? um_oom(m) : 0;
}

/* The object below the top mark (target of APPENDS/SETITEMS/ADDITEMS). */
static int below_mark(struct um *m, size_t *base, struct ckpt_pv **t)
{
    *t = NULL;   /* defined on failure too: callers test only the result */
    if (um_pop_mark(m, base) != 0)
        return -1;
    size_t lo = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (*base <= lo)
        return um_bad(m, "stack underflow");
    *t = m->stack[*base - 1];
    return 0;
}

static int op_setitems(struct um *m)
{
    size_t base;
    struct ckpt_pv *t;
    if (below_mark(m, &base, &t) != 0)
        return -1;
    struct ckpt_pv *d = dict_target(m, t);
    if (!d)
        return target_error(m, "SETITEMS", t);
    if (add_pairs(m, d, base) != 0)
        return -1;
    return t != d ? um_nest(m, t, d) : 0;
}

static int append_range(struct um *m, struct ckpt_pv *l, size_t base)
{
    if (nest_range(m, l, base) != 0)
        return -1;
    for (size_t i = base; i < m->sp; i++)
        if (ckpt_pv_push(m->a, l, m->stack[i]) != 0)
            return um_oom(m);
    m->sp = base;
    return 0;
}

static int op_append(struct um *m)
{
    struct ckpt_pv *v, *t;
    if (um_pop(m, &v) != 0 || um_top(m, &t) != 0)
        return -1;
    struct ckpt_pv *l = list_target(m, t);
    if (!l)
        return target_error(m, "APPEND", t);
    if (um_nest(m, l, v) != 0 || (t != l && um_nest(m, t, l) != 0))
        return -1;
    return ckpt_pv_push(m->a, l, v) != 0 ? um_oom(m) : 0;
}

static int op_appends(struct um *m)
{
    size_t base;
    struct ckpt_pv *t;
    if (below_mark(m, &base, &t) != 0)
        return -1;
    struct ckpt_pv *l = list_target(m, t);
    if (!l)
        return target_error(m, "APPENDS", t);
    if (append_range(m, l, base) != 0)
        return -1;
    return t != l ? um_nest(m, t, l) : 0;
}

static int op_additems(struct um *m)
{
    size_t base;
    struct ckpt_pv *t;
    if (below_mark(m, &base, &t) != 0)
        return -1;
    if (t->kind != CKPT_PV_SET)
        return target_error(m, "ADDITEMS", t);
    return append_range(m, t, base);
}

/* --- globals and calls ---------------------------------------------- */

static int valid_name(const char *s, size_t n)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n' || s[i] == '\0')
            return 0;
    return 1;
}

static struct ckpt_pv *make_global(struct um *m, const char *mod, size_t ml,
                                   const char *name, size_t nl)
{
    if (!valid_name(mod, ml) || !valid_name(name, nl)) {
        um_bad(m, "bad global name");
        return NULL;
    }
    if (um_take(m, (uint64_t)ml + nl) != 0)
        return NULL;
    struct ckpt_pv *g = ckpt_pv_new(m->a, CKPT_PV_GLOBAL);
    if (!g) {
        um_oom(m);
        return NULL;
    }
    g->u.global.module = ckpt_arena_strndup(m->a, mod, ml);
    g->u.global.name = ckpt_arena_strndup(m->a, name, nl);
    if (!g->u.global.module || !g->u.global.name) {
        um_oom(m);
        return NULL;
    }
    if (m->allow && m->allow(m->ud, g->u.global.module,
                             g->u.global.name) != 0) {
        ckpt_err_set(m->err, CKPT_EUNSAFE, "%s: pickle global '%s.%s' is "
                     "not allowed", m->name, g->u.global.module,
                     g->u.global.name);
        return NULL;
    }
    return g;
}

/* GLOBAL / INST argument: "module\nname\n". */
static struct ckpt_pv *global_text(struct um *m)
{
    const unsigned char *s = m->data + m->pos;
    size_t left = m->len - m->pos;
    const unsigned char *nl1 = memchr(s, '\n', left);
    const unsigned char *nl2 =
        nl1 ? memchr(nl1 + 1, '\n', left - (size_t)(nl1 + 1 - s)) : NULL;
    if (!nl2) {
        um_bad(m, "truncated pickle");
        return NULL;
    }
    m->pos += (size_t)(nl2 + 1 - s);
    return make_global(m, (const char *)s, (size_t)(nl1 - s),
                       (const char *)nl1 + 1, (size_t)(nl2 - nl1 - 1));
}

static int op_stack_global(struct um *m)
{
    struct ckpt_pv *name, *mod;
    if (um_pop(m, &name) != 0 || um_pop(m, &mod) != 0)
        return -1;
    if (name->kind != CKPT_PV_STR || mod->kind != CKPT_PV_STR)
        return um_bad(m, "STACK_GLOBAL requires str");
    struct ckpt_pv *g = make_global(m, mod->u.s.p, mod->u.s.len,
                                    name->u.s.p, name->u.s.len);
    return g ? um_push(m, g) : -1;
}

static int push_call(struct um *m, struct ckpt_pv *fn, struct ckpt_pv *args,
                     struct ckpt_pv *kwargs, enum ckpt_call_how how)
{
    if (!args || args->kind != CKPT_PV_TUPLE)
        return um_bad(m, "call arguments are not a tuple");
    if (kwargs && kwargs->kind != CKPT_PV_DICT)
        return um_bad(m, "NEWOBJ_EX keyword arguments are not a dict");
    struct ckpt_pv *c = ckpt_pv_call(m->a, fn, args, how);
    if (!c)
        return um_oom(m);
    c->u.call.kwargs = kwargs;
    if (um_nest(m, c, fn) != 0 || um_nest(m, c, args) != 0 ||
        um_nest(m, c, kwargs) != 0)
        return -1;
    return um_push(m, c);
}

static int op_reduce(struct um *m, enum ckpt_call_how how)
{
    struct ckpt_pv *fn, *args, *kwargs = NULL;
    if (how == CKPT_CALL_NEWOBJ_EX && um_pop(m, &kwargs) != 0)
        return -1;
    if (um_pop(m, &args) != 0 || um_pop(m, &fn) != 0)
        return -1;
    return push_call(m, fn, args, kwargs, how);
}

/* INST: "module\nname\n" with the arguments above the mark. */
static int op_inst(struct um *m)
{
    struct ckpt_pv *g = global_text(m);
    size_t base;
    if (!g || um_pop_mark(m, &base) != 0)
        return -1;
    struct ckpt_pv *args = nested_seq(m, CKPT_PV_TUPLE, base);
    return args ? push_call(m, g, args, NULL, CKPT_CALL_REDUCE) : -1;
}

/* OBJ: class and arguments above the mark. */
static int op_obj(struct um *m)
{
    size_t base;
    if (um_pop_mark(m, &base) != 0)
        return -1;
    if (m->sp == base)
        return um_bad(m, "OBJ without a class");
    struct ckpt_pv *cls = m->stack[base];
    struct ckpt_pv *args = nested_seq(m, CKPT_PV_TUPLE, base + 1);
    m->sp = base;
    return args ? push_call(m, cls, args, NULL, CKPT_CALL_REDUCE) : -1;
}

static int op_build(struct um *m)
{
    struct ckpt_pv *state, *obj;
    if (um_pop(m, &state) != 0 || um_top(m, &obj) != 0)
        return -1;
    if (obj->kind == CKPT_PV_CALL && !obj->u.call.state) {
        /* In place, so memo references to obj see its state as Python's
         * would. */
        obj->u.call.state = state;
        return um_nest(m, obj, state);
    }
    struct ckpt_pv *b = ckpt_pv_new(m->a, CKPT_PV_BUILD);
    if (!b)
        return um_oom(m);
    if (um_nest(m, b, obj) != 0 || um_nest(m, b, state) != 0)
        return -1;
    b->u.build.obj = obj;
    b->u.build.state = state;
    m->stack[m->sp - 1] = b;
    return 0;
}

static int op_persid(struct um *m, int binary)
{
    struct ckpt_pv *pid;
    if (binary) {
        if (um_pop(m, &pid) != 0)
            return -1;
    } else {
        const unsigned char *s = m->data + m->pos;
        const unsigned char *nl = memchr(s, '\n', m->len - m->pos);
        if (!nl)
            return um_bad(m, "truncated pickle");
        m->pos += (size_t)(nl - s) + 1;
        pid = ckpt_pv_str(m->a, (const char *)s, (size_t)(nl - s));
        if (!pid)
            return um_oom(m);
    }
    struct ckpt_pv *p = ckpt_pv_new(m->a, CKPT_PV_PERSID);
    if (!p)
        return um_oom(m);
    if (um_nest(m, p, pid) != 0)
        return -1;
    p->u.persid.pid = pid;
    return um_push(m, p);
}

static int push_empty(struct um *m, enum ckpt_pv_kind kind)
{
    return um_push(m, ckpt_pv_new(m->a, kind));
}

int um_step_objects(struct um *m, int c)
{
    switch (c) {
    case ')': return push_empty(m, CKPT_PV_TUPLE);
    case ']': return push_empty(m, CKPT_PV_LIST);
    case '}': return push_empty(m, CKPT_PV_DICT);
    case 0x8f: return push_empty(m, CKPT_PV_SET);
    case 't': return op_from_mark(m, CKPT_PV_TUPLE);
    case 'l': return op_from_mark(m, CKPT_PV_LIST);
    case 0x91: return op_from_mark(m, CKPT_PV_FROZENSET);
    case 0x85: return op_tuple_n(m, 1);
    case 0x86: return op_tuple_n(m, 2);
    case 0x87: return op_tuple_n(m, 3);
    case 'd': return op_dict_mark(m);
    case 's': return op_setitem(m);
    case 'u': return op_setitems(m);
    case 'a': return op_append(m);
    case 'e': return op_appends(m);
    case 0x90: return op_additems(m);
    case 'c': {
        struct ckpt_pv *g = global_text(m);
        return g ? um_push(m, g) : -1;
    }
    case 0x93: return op_stack_global(m);
    case 'i': return op_inst(m);
    case 'o': return op_obj(m);
    case 'R': return op_reduce(m, CKPT_CALL_REDUCE);
    case 0x81: return op_reduce(m, CKPT_CALL_NEWOBJ);
    case 0x92: return op_reduce(m, CKPT_CALL_NEWOBJ_EX);
    case 'b': return op_build(m);
    case 'P': return op_persid(m, 0);
    case 'Q': return op_persid(m, 1);
    default: {
        char what[32];
        snprintf(what, sizeof(what), "unknown opcode 0x%02x", c);
        return um_bad(m, what);
    }
    }
}

/* --- protocol 0 strings --------------------------------------------- */

static void put_utf8(char *out, size_t *o, uint32_t cp)
{
    if (cp < 0x80) {
        out[(*o)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*o)++] = (char)(0xc0 | (cp >> 6));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xe0 | (cp >> 12));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*o)++] = (char)(0xf0 | (cp >> 18));
        out[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* n hex digits at s into *cp; 0 or -1. */
static int hexn(const char *s, size_t avail, int n, uint32_t *cp)
{
    if ((size_t)n > avail)
        return -1;
    *cp = 0;
    for (int i = 0; i < n; i++) {
        int h = ckpt_hexval((unsigned char)s[i]);
        if (h < 0)
            return -1;
        *cp = (*cp << 4) | (uint32_t)h;
    }
    return *cp <= 0x10ffff ? 0 : -1;
}

static struct ckpt_pv *text_node(struct um *m, size_t cap)
{
    struct ckpt_pv *v = ckpt_pv_new(m->a, CKPT_PV_STR);
    char *out = v ? ckpt_arena_alloc(m->a, cap + 1) : NULL;
    if (!out)
        return NULL;
    v->u.s.p = out;
    return v;
}

/* UNICODE 'V': raw-unicode-escape (\uXXXX, \UXXXXXXXX; other bytes are
 * Latin-1 code points). */
int um_op_unicode_text(struct um *m)
{
    const char *s = (const char *)m->data + m->pos;
    const char *nl = memchr(s, '\n', m->len - m->pos);
    if (!nl)
        return um_bad(m, "truncated pickle");
    size_t n = (size_t)(nl - s);
    m->pos += n + 1;
    if (n > SIZE_MAX / 4)
        return um_oom(m);
    if (um_take(m, (uint64_t)n * 4) != 0)
        return -1;
    struct ckpt_pv *v = text_node(m, n * 4);
    if (!v)
        return um_oom(m);
    char *out = (char *)v->u.s.p;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int w = (s[i] == '\\' && i + 1 < n) ?
                (s[i + 1] == 'u' ? 4 : s[i + 1] == 'U' ? 8 : 0) : 0;
        if (w && hexn(s + i + 2, n - i - 2, w, &cp) == 0) {
            put_utf8(out, &o, cp);
            i += 1 + (size_t)w;
        } else {
            put_utf8(out, &o, (unsigned char)s[i]);
        }
    }
    out[o] = '\0';
    v->u.s.len = o;
    return um_push(m, v);
}

static int unescape_one(const char *s, size_t n, size_t *i, char *out,
                        size_t *o)
{
    static const char from[] = "\\'\"abfnrtv";
    static const char to[] = "\\'\"\a\b\f\n\r\t\v";
    char c = s[*i + 1];
    const char *p = strchr(from, c);
    uint32_t cp;
    if (c && p) {
        out[(*o)++] = to[p - from];
        *i += 1;
    } else if (c == 'x' && hexn(s + *i + 2, n - *i - 2, 2, &cp) == 0) {
        put_utf8(out, o, cp);
        *i += 3;
    } else if (c >= '0' && c <= '7') {
        cp = 0;
        size_t k = *i + 1;
        for (int d = 0; d < 3 && k < n && s[k] >= '0' && s[k] <= '7'; d++)
            cp = cp * 8 + (uint32_t)(s[k++] - '0');
        put_utf8(out, o, cp & 0xff);
        *i = k - 1;
    } else {
        return -1;
    }
    return 0;
}

/* STRING 'S': a quoted Python 2 str repr; decoded as Latin-1. */
int um_op_string_text(struct um *m)
{
    const char *s = (const char *)m->data + m->pos;
    const char *nl = memchr(s, '\n', m->len - m->pos);
    if (!nl)
        return um_bad(m, "truncated pickle");
    size_t n = (size_t)(nl - s);
    m->pos += n + 1;
    if (n < 2 || s[0] != s[n - 1] || (s[0] != '\'' && s[0] != '"'))
        return um_bad(m, "the STRING opcode argument must be quoted");
    s++;
    n -= 2;
    if (um_take(m, (uint64_t)n * 2) != 0)
        return -1;
    struct ckpt_pv *v = text_node(m, n * 2);
    if (!v)
        return um_oom(m);
    v->flags |= CKPT_PV_BINSTR;
    char *out = (char *)v->u.s.p;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n)
            put_utf8(out, &o, (unsigned char)s[i]);
        else if (unescape_one(s, n, &i, out, &o) != 0)
            return um_bad(m, "bad escape in STRING");
    }
    out[o] = '\0';
    v->u.s.len = o;
    return um_push(m, v);
}
