/*
 * ckpt/pickle.h - a restricted pickle machine: parse Python pickles
 * (protocols 0-5) into a plain value graph, and write graphs back out.
 *
 * Nothing is ever executed. A GLOBAL becomes a "global" node naming module
 * and qualified name; REDUCE/NEWOBJ/INST/OBJ become "call" nodes that record
 * the callable and its arguments; BUILD records the state on the call node.
 * Interpreting those nodes (torch tensors, DCP metadata) is the caller's job
 * and is done against an allow-list.
 *
 * The graph lives in one struct ckpt_arena (ckpt/arena.h) and is freed with
 * it. Nodes shared through the pickle memo are shared in the graph, so it is
 * a DAG and may even contain cycles (a list that contains itself): walkers
 * must use ckpt_pv_walk or track visited nodes, and recursive walkers must
 * bound their depth (CKPT_PICKLE_MAX_DEPTH).
 *
 * Bounds: every length field is checked against the remaining input, memo
 * indices against the number of values so far, nesting against
 * CKPT_PICKLE_MAX_DEPTH, the values pushed and the bytes decoded against
 * the load's caps, allocations against the arena's limit, and opcodes that
 * need external state (extension registry, out-of-band buffers) are
 * refused. Hostile input fails with CKPT_EFORMAT (or CKPT_ENOMEM when a
 * size cap or the arena's limit is reached), never crashes.
 */
#ifndef CKPT_PICKLE_H
#define CKPT_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/buf.h"
#include "ckpt/err.h"

/* Deepest container nesting that walkers (emitter, JSON, interpreters)
 * follow before failing; Python's own pickler stops near 1000 too. The
 * loader refuses deeper nesting (and deeper MARK nesting) as it builds. */
#define CKPT_PICKLE_MAX_DEPTH 512

/* Default bounds of one load (ckpt_pickle_opts fields left 0), sized so
 * that a hostile pickle fails in a few tens of MiB whatever it claims:
 * every value pushed (memo references included) costs at most about 100
 * bytes of node, stack, container and memo slots, and strings, bytes and
 * big ints are charged for what they decode to. Callers that read a
 * pickle whole cap its size at CKPT_PICKLE_MAX_BYTES too. See
 * docs/formats/pickle.md. */
#define CKPT_PICKLE_MAX_VALUES ((size_t)128 * 1024)
#define CKPT_PICKLE_MAX_BYTES ((size_t)8 << 20)

enum ckpt_pv_kind {
    CKPT_PV_NONE = 0,
    CKPT_PV_BOOL,
    CKPT_PV_INT,        /* fits int64 */
    CKPT_PV_BIGINT,     /* s: little-endian two's complement, or decimal
                           text when flags & CKPT_PV_DECIMAL */
    CKPT_PV_FLOAT,
    CKPT_PV_STR,        /* s: UTF-8 bytes (not validated) */
    CKPT_PV_BYTES,
    CKPT_PV_BYTEARRAY,
    CKPT_PV_TUPLE,      /* seq */
    CKPT_PV_LIST,       /* seq */
    CKPT_PV_SET,        /* seq */
    CKPT_PV_FROZENSET,  /* seq */
    CKPT_PV_DICT,       /* dict: any keys (objects too), in insertion order;
                           duplicate keys are kept, the last one wins */
    CKPT_PV_GLOBAL,     /* global: a class or function, by name */
    CKPT_PV_CALL,       /* call: fn(*args, **kwargs) then items and state */
    CKPT_PV_BUILD,      /* build: BUILD applied to a non-call object, or a
                           second BUILD on one call */
    CKPT_PV_PERSID      /* persid: a persistent id (torch storages) */
};

#define CKPT_PV_DECIMAL 1u   /* BIGINT text from protocol 0 'L' */
#define CKPT_PV_BINSTR 2u    /* STR that came from a Python 2 str opcode */

enum ckpt_call_how {
    CKPT_CALL_REDUCE = 0,  /* REDUCE, INST, OBJ: fn(*args) */
    CKPT_CALL_NEWOBJ,      /* cls.__new__(cls, *args) */
    CKPT_CALL_NEWOBJ_EX    /* cls.__new__(cls, *args, **kwargs) */
};

struct ckpt_pv;

struct ckpt_pv_seq {
    struct ckpt_pv **v;     /* arena; n used of cap */
    size_t n, cap;
};

struct ckpt_pv_dict {
    struct ckpt_pv **k, **v;
    size_t n, cap;
};

struct ckpt_pv {
    enum ckpt_pv_kind kind;
    unsigned flags : 8;
    unsigned depth : 24;    /* nesting below this node, as the loader saw it
                               (bounds hostile input; 0 for built nodes) */
    union {
        int b;
        int64_t i;
        double f;
        struct { const char *p; size_t len; } s;  /* NUL-terminated too */
        struct ckpt_pv_seq seq;
        struct ckpt_pv_dict dict;
        struct { const char *module, *name; } global;
        struct {
            struct ckpt_pv *fn;       /* usually a GLOBAL */
            struct ckpt_pv *args;     /* a TUPLE (INST/OBJ args too) */
            struct ckpt_pv *kwargs;   /* DICT for NEWOBJ_EX, else NULL */
            struct ckpt_pv *state;    /* from BUILD, or NULL */
            struct ckpt_pv *listitems;/* LIST from APPEND(S), or NULL */
            struct ckpt_pv *dictitems;/* DICT from SETITEM(S), or NULL */
            enum ckpt_call_how how;
        } call;
        struct { struct ckpt_pv *obj, *state; } build;
        struct { struct ckpt_pv *pid; } persid;
    } u;
};

/* Called for every GLOBAL / STACK_GLOBAL / INST while loading. Return 0 to
 * allow, -1 to refuse (the load then fails with CKPT_EUNSAFE and the
 * message "NAME: pickle global 'module.name' is not allowed"). */
typedef int (*ckpt_pickle_allow_fn)(void *ud, const char *module,
                                    const char *name);

struct ckpt_pickle_opts {
    const char *name;             /* for messages, e.g. "data.pkl" */
    ckpt_pickle_allow_fn allow;   /* NULL: every global allowed */
    void *ud;
    size_t max_values;            /* 0: CKPT_PICKLE_MAX_VALUES */
    size_t max_bytes;             /* 0: CKPT_PICKLE_MAX_BYTES */
};

/*
 * Parse one pickle from data[0..len) into arena a. On success *out is the
 * unpickled value (allocated in a) and *used (if not NULL) the number of
 * bytes up to and including STOP. Returns 0, or -1 with err set:
 * CKPT_EFORMAT (malformed, truncated, unsupported opcode, nested deeper
 * than CKPT_PICKLE_MAX_DEPTH, memo index beyond the values so far),
 * CKPT_EUNSAFE (refused global), CKPT_ENOMEM (arena limit, or more values
 * or decoded bytes than opts allow: "NAME: pickle too large: ...").
 */
int ckpt_pickle_load(struct ckpt_arena *a, const void *data, size_t len,
                     const struct ckpt_pickle_opts *opts,
                     struct ckpt_pv **out, size_t *used,
                     struct ckpt_err *err);

/*
 * Append v as a protocol 2 pickle (PROTO 2 ... STOP) to out. Shared nodes
 * are memoized once and referenced again (memo numbered afresh), cycles
 * through lists, dicts, sets and calls are kept. Values that protocol 2
 * cannot spell directly are written as Python does: bytes as
 * _codecs.encode(str, 'latin1'), sets as builtins.set([...]). Fails with
 * CKPT_EFORMAT for nesting over CKPT_PICKLE_MAX_DEPTH or names that contain
 * a newline, CKPT_EUNSUPPORTED for NEWOBJ_EX.
 */
int ckpt_pickle_dump(const struct ckpt_pv *v, struct ckpt_buf *out,
                     struct ckpt_err *err);

/* Constructors (arena-allocated; NULL when the arena refuses). */
struct ckpt_pv *ckpt_pv_new(struct ckpt_arena *a, enum ckpt_pv_kind kind);
struct ckpt_pv *ckpt_pv_int(struct ckpt_arena *a, int64_t i);
struct ckpt_pv *ckpt_pv_bool(struct ckpt_arena *a, int b);
struct ckpt_pv *ckpt_pv_str(struct ckpt_arena *a, const char *s, size_t len);
struct ckpt_pv *ckpt_pv_global(struct ckpt_arena *a, const char *module,
                               const char *name);
/* fn(*args) with how. args must be a TUPLE. */
struct ckpt_pv *ckpt_pv_call(struct ckpt_arena *a, struct ckpt_pv *fn,
                             struct ckpt_pv *args, enum ckpt_call_how how);
/* Append to a TUPLE/LIST/SET/FROZENSET; 0 or -1 (arena limit). */
int ckpt_pv_push(struct ckpt_arena *a, struct ckpt_pv *seq,
                 struct ckpt_pv *item);
/* Append a key/value pair to a DICT; 0 or -1. */
int ckpt_pv_dict_add(struct ckpt_arena *a, struct ckpt_pv *d,
                     struct ckpt_pv *k, struct ckpt_pv *v);

/* Accessors. All accept NULL and return NULL/0 on a kind mismatch. */
/* Value for the str key (last one wins), or NULL. */
struct ckpt_pv *ckpt_pv_dict_get(const struct ckpt_pv *d, const char *key);
/* 1 if v is a STR equal to s. */
int ckpt_pv_str_eq(const struct ckpt_pv *v, const char *s);
/* 1 if v is a GLOBAL named module.name. */
int ckpt_pv_is_global(const struct ckpt_pv *v, const char *module,
                      const char *name);
/* The callable of a CALL if it is a GLOBAL, else NULL. */
const struct ckpt_pv *ckpt_pv_call_global(const struct ckpt_pv *v);
/* The items of a dict: v itself when it is a DICT, the SETITEMS of an
 * OrderedDict() call (how torch pickles state dicts), else NULL. */
struct ckpt_pv *ckpt_pv_dict_items(const struct ckpt_pv *v);
/* The attribute dict BUILD (or a CALL's state) gave an object, as
 * pickle's default __setstate__ reads it: a dict, or the slots dict of a
 * (None, slots) pair; NULL if it has none. */
struct ckpt_pv *ckpt_pv_attrs(const struct ckpt_pv *v);
/* Item i of a TUPLE/LIST, or NULL. */
struct ckpt_pv *ckpt_pv_item(const struct ckpt_pv *v, size_t i);
/* Number of items of a sequence or dict; 0 otherwise. */
size_t ckpt_pv_len(const struct ckpt_pv *v);
/* INT (or BOOL) value into *out; 0 or -1. */
int ckpt_pv_get_int(const struct ckpt_pv *v, int64_t *out);
/* Name of a kind: "None", "int", "str", "dict", ... */
const char *ckpt_pv_kind_name(enum ckpt_pv_kind k);

/* Append a Python-like one-line rendering of v to out, cut after about
 * max bytes ("..."). Cycles print as "...". For tests and messages. */
int ckpt_pv_repr(const struct ckpt_pv *v, struct ckpt_buf *out, size_t max);

/* Call fn on every node reachable from v once (pre-order, cycle-safe,
 * iterative: no depth limit). fn returns 0 to go on, non-zero to stop;
 * that value is returned. -1 from the walker itself means out of memory. */
typedef int (*ckpt_pv_visit_fn)(void *ud, const struct ckpt_pv *v);
int ckpt_pv_walk(const struct ckpt_pv *v, ckpt_pv_visit_fn fn, void *ud);

#endif
