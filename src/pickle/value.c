/*
 * value.c - pickle value graph: constructors, accessors and a cycle-safe
 * walker (see ckpt/pickle.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/pickle.h"
#include "ptrmap.h"

struct ckpt_pv *ckpt_pv_new(struct ckpt_arena *a, enum ckpt_pv_kind kind)
{
    struct ckpt_pv *v = ckpt_arena_alloc(a, sizeof(*v));
    if (v)
        v->kind = kind;
    return v;
}

struct ckpt_pv *ckpt_pv_int(struct ckpt_arena *a, int64_t i)
{
    struct ckpt_pv *v = ckpt_pv_new(a, CKPT_PV_INT);
    if (v)
        v->u.i = i;
    return v;
}

struct ckpt_pv *ckpt_pv_bool(struct ckpt_arena *a, int b)
{
    struct ckpt_pv *v = ckpt_pv_new(a, CKPT_PV_BOOL);
    if (v)
        v->u.b = !!b;
    return v;
}

struct ckpt_pv *ckpt_pv_str(struct ckpt_arena *a, const char *s, size_t len)
{
    struct ckpt_pv *v = ckpt_pv_new(a, CKPT_PV_STR);
    if (!v)
        return NULL;
    char *p = ckpt_arena_strndup(a, s, len);
    if (!p)
        return NULL;
    v->u.s.p = p;
    v->u.s.len = len;
    return v;
}

struct ckpt_pv *ckpt_pv_global(struct ckpt_arena *a, const char *module,
                               const char *name)
{
    struct ckpt_pv *v = ckpt_pv_new(a, CKPT_PV_GLOBAL);
    if (!v)
        return NULL;
    v->u.global.module = ckpt_arena_strdup(a, module);
    v->u.global.name = ckpt_arena_strdup(a, name);
    return v->u.global.module && v->u.global.name ? v : NULL;
}

struct ckpt_pv *ckpt_pv_call(struct ckpt_arena *a, struct ckpt_pv *fn,
                             struct ckpt_pv *args, enum ckpt_call_how how)
{
    struct ckpt_pv *v = ckpt_pv_new(a, CKPT_PV_CALL);
    if (!v)
        return NULL;
    v->u.call.fn = fn;
    v->u.call.args = args;
    v->u.call.how = how;
    return v;
}

/* Grow an arena array of pointers to hold one more; old storage is left in
 * the arena (freed with it). Doubling keeps the waste under 2x. */
static int grow_ptrs(struct ckpt_arena *a, struct ckpt_pv ***arr, size_t n,
                     size_t *cap)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 4;
    struct ckpt_pv **p = ckpt_arena_array(a, ncap, sizeof(*p));
    if (!p)
        return -1;
    if (n)
        memcpy(p, *arr, n * sizeof(*p));
    *arr = p;
    *cap = ncap;
    return 0;
}

int ckpt_pv_push(struct ckpt_arena *a, struct ckpt_pv *seq,
                 struct ckpt_pv *item)
{
    struct ckpt_pv_seq *s = &seq->u.seq;
    if (grow_ptrs(a, &s->v, s->n, &s->cap) != 0)
        return -1;
    s->v[s->n++] = item;
    return 0;
}

int ckpt_pv_dict_add(struct ckpt_arena *a, struct ckpt_pv *d,
                     struct ckpt_pv *k, struct ckpt_pv *v)
{
    struct ckpt_pv_dict *m = &d->u.dict;
    if (m->n == m->cap) {
        size_t cap = m->cap;
        if (grow_ptrs(a, &m->k, m->n, &cap) != 0)
            return -1;
        cap = m->cap;
        if (grow_ptrs(a, &m->v, m->n, &cap) != 0)
            return -1;
        m->cap = cap;
    }
    m->k[m->n] = k;
    m->v[m->n] = v;
    m->n++;
    return 0;
}

int ckpt_pv_str_eq(const struct ckpt_pv *v, const char *s)
{
    if (!v || v->kind != CKPT_PV_STR)
        return 0;
    size_t n = strlen(s);
    return v->u.s.len == n && memcmp(v->u.s.p, s, n) == 0;
}

struct ckpt_pv *ckpt_pv_dict_get(const struct ckpt_pv *d, const char *key)
{
    if (!d || d->kind != CKPT_PV_DICT)
        return NULL;
    size_t n = strlen(key);
    /* From the end: the last of duplicate keys wins, as in Python. */
    for (size_t i = d->u.dict.n; i-- > 0;) {
        const struct ckpt_pv *k = d->u.dict.k[i];
        if (k->kind == CKPT_PV_STR && k->u.s.len == n &&
            memcmp(k->u.s.p, key, n) == 0)
            return d->u.dict.v[i];
    }
    return NULL;
}

int ckpt_pv_is_global(const struct ckpt_pv *v, const char *module,
                      const char *name)
{
    return v && v->kind == CKPT_PV_GLOBAL &&
           !strcmp(v->u.global.module, module) &&
           !strcmp(v->u.global.name, name);
}

const struct ckpt_pv *ckpt_pv_call_global(const struct ckpt_pv *v)
{
    if (!v || v->kind != CKPT_PV_CALL || !v->u.call.fn ||
        v->u.call.fn->kind != CKPT_PV_GLOBAL)
        return NULL;
    return v->u.call.fn;
}

struct ckpt_pv *ckpt_pv_dict_items(const struct ckpt_pv *v)
{
    if (v && v->kind == CKPT_PV_DICT)
        return (struct ckpt_pv *)v;
    if (v && v->kind == CKPT_PV_CALL && v->u.call.dictitems &&
        ckpt_pv_is_global(ckpt_pv_call_global(v), "collections",
                          "OrderedDict"))
        return v->u.call.dictitems;
    return NULL;
}

struct ckpt_pv *ckpt_pv_attrs(const struct ckpt_pv *v)
{
    struct ckpt_pv *s = NULL;
    if (v && v->kind == CKPT_PV_CALL)
        s = v->u.call.state;
    else if (v && v->kind == CKPT_PV_BUILD)
        s = v->u.build.state;
    if (s && s->kind == CKPT_PV_TUPLE && s->u.seq.n == 2)
        s = s->u.seq.v[1]->kind == CKPT_PV_DICT ? s->u.seq.v[1]
                                                 : s->u.seq.v[0];
    return s && s->kind == CKPT_PV_DICT ? s : NULL;
}

struct ckpt_pv *ckpt_pv_item(const struct ckpt_pv *v, size_t i)
{
    if (!v || (v->kind != CKPT_PV_TUPLE && v->kind != CKPT_PV_LIST))
        return NULL;
    return i < v->u.seq.n ? v->u.seq.v[i] : NULL;
}

size_t ckpt_pv_len(const struct ckpt_pv *v)
{
    if (!v)
        return 0;
    switch (v->kind) {
    case CKPT_PV_TUPLE:
    case CKPT_PV_LIST:
    case CKPT_PV_SET:
    case CKPT_PV_FROZENSET:
        return v->u.seq.n;
    case CKPT_PV_DICT:
        return v->u.dict.n;
    default:
        return 0;
    }
}

int ckpt_pv_get_int(const struct ckpt_pv *v, int64_t *out)
{
    if (!v)
        return -1;
    if (v->kind == CKPT_PV_INT) {
        *out = v->u.i;
        return 0;
    }
    if (v->kind == CKPT_PV_BOOL) {
        *out = v->u.b;
        return 0;
    }
    return -1;
}

const char *ckpt_pv_kind_name(enum ckpt_pv_kind k)
{
    static const char *const names[] = {
        "None", "bool", "int", "int", "float", "str", "bytes", "bytearray",
        "tuple", "list", "set", "frozenset", "dict", "global", "object",
        "object", "persistent id"
    };
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

/* Children of v, in order, handed to push(). */
static int children(const struct ckpt_pv *v,
                    int (*push)(void *, const struct ckpt_pv *), void *ud)
{
    int rc = 0;
    switch (v->kind) {
    case CKPT_PV_TUPLE:
    case CKPT_PV_LIST:
    case CKPT_PV_SET:
    case CKPT_PV_FROZENSET:
        for (size_t i = 0; i < v->u.seq.n && !rc; i++)
            rc = push(ud, v->u.seq.v[i]);
        break;
    case CKPT_PV_DICT:
        for (size_t i = 0; i < v->u.dict.n && !rc; i++) {
            rc = push(ud, v->u.dict.k[i]);
            if (!rc)
                rc = push(ud, v->u.dict.v[i]);
        }
        break;
    case CKPT_PV_CALL: {
        const struct ckpt_pv *c[] = { v->u.call.fn, v->u.call.args,
                                      v->u.call.kwargs, v->u.call.listitems,
                                      v->u.call.dictitems, v->u.call.state };
        for (size_t i = 0; i < 6 && !rc; i++)
            if (c[i])
                rc = push(ud, c[i]);
        break;
    }
    case CKPT_PV_BUILD:
        rc = push(ud, v->u.build.obj);
        if (!rc)
            rc = push(ud, v->u.build.state);
        break;
    case CKPT_PV_PERSID:
        rc = push(ud, v->u.persid.pid);
        break;
    default:
        break;
    }
    return rc;
}

struct walkstack {
    const struct ckpt_pv **v;
    size_t n, cap;
};

static int ws_push(void *ud, const struct ckpt_pv *v)
{
    struct walkstack *s = ud;
    if (!v)
        return 0;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        const struct ckpt_pv **p = realloc(s->v, ncap * sizeof(*p));
        if (!p)
            return -1;
        s->v = p;
        s->cap = ncap;
    }
    s->v[s->n++] = v;
    return 0;
}

int ckpt_pv_walk(const struct ckpt_pv *v, ckpt_pv_visit_fn fn, void *ud)
{
    struct walkstack s = { NULL, 0, 0 };
    struct ptrmap seen = PTRMAP_INIT;
    int rc = ws_push(&s, v);
    while (!rc && s.n) {
        const struct ckpt_pv *cur = s.v[--s.n];
        if (pk_ptrmap_get(&seen, cur, NULL))
            continue;
        if (pk_ptrmap_put(&seen, cur, 1) != 0) {
            rc = -1;
            break;
        }
        rc = fn(ud, cur);
        if (!rc)
            rc = children(cur, ws_push, &s);
    }
    free(s.v);
    pk_ptrmap_release(&seen);
    return rc;
}
