/*
 * engine/tree.c - the consolidated state dict as a pickle graph.
 *
 * Nesting is restored from planner_data exactly as torch's
 * dcp_to_torch_save does (_traverse.set_element): dicts for str keys,
 * lists for int keys, lists padded with None. Without planner_data (torch
 * 1.13, flatten_state_dict=False) keys stay flat. Tensors become
 * torch._utils._rebuild_tensor_v2/_v3 calls over a storage persistent id
 * whose key is filled in when files are laid out. Byte items are their own
 * unpickled graphs spliced in whole, with their storages (if any) renamed
 * to records of the output file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

#define MAX_OBJECT (1024ULL << 20)  /* one byte item, decompressed */
/* Its data.pkl: read whole, so capped like what it decodes to; with the
 * load's default caps a hostile one stays within 64 MiB of RSS
 * (docs/formats/pickle.md). */
#define MAX_OBJECT_PKL CKPT_PICKLE_MAX_BYTES
#define MAX_LIST_INDEX 10000000

struct tree {
    struct ujob *j;
    struct ckpt_arena *a;
    struct strmap keys;        /* "container|key" -> index in the dict */
    struct ckpt_pv *none, *no, *zero, *s_storage, *s_cpu;
    struct ckpt_pv *g_v2, *g_v3, *g_od, *g_untyped;
    const struct ckpt_dcp_entry *cur;   /* byte item being loaded */
};

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

static struct ckpt_pv *tuple_of(struct ckpt_arena *a, size_t n,
                                struct ckpt_pv **items)
{
    struct ckpt_pv *t = ckpt_pv_new(a, CKPT_PV_TUPLE);
    for (size_t i = 0; t && i < n; i++)
        if (!items[i] || ckpt_pv_push(a, t, items[i]) != 0)
            return NULL;
    return t;
}

static struct ckpt_pv *dims_tuple(struct ckpt_arena *a, const uint64_t *v,
                                  int n, int strides)
{
    struct ckpt_pv *t = ckpt_pv_new(a, CKPT_PV_TUPLE);
    uint64_t s = 1;
    for (int i = 0; t && i < n; i++) {
        /* Contiguous strides: product of the later sizes. */
        uint64_t x = strides ? 1 : v[i];
        if (strides) {
            s = 1;
            for (int k = i + 1; k < n; k++)
                s *= v[k];
            x = s;
        }
        if (ckpt_pv_push(a, t, ckpt_pv_int(a, (int64_t)x)) != 0)
            return NULL;
    }
    return t;
}

/* _rebuild_tensor_v2(persid(('storage', torch.FloatStorage, key, 'cpu',
 * numel)), 0, size, stride, False, OrderedDict()) -- or _v3 with an
 * UntypedStorage counted in bytes and the dtype, for dtypes without a
 * typed storage class. */
static struct ckpt_pv *tensor_node(struct tree *tr, struct utensor *t)
{
    struct ckpt_arena *a = tr->a;
    const struct ckpt_dcp_entry *e = t->e;
    const struct ckpt_dtype *dt = e->dtype;
    int v3 = dt->storage == NULL;
    t->keystr = ckpt_pv_str(a, "", 0);
    struct ckpt_pv *type = v3 ? tr->g_untyped
                              : ckpt_pv_global(a, "torch", dt->storage);
    struct ckpt_pv *pidv[] = {
        tr->s_storage, type, t->keystr, tr->s_cpu,
        ckpt_pv_int(a, (int64_t)(v3 ? t->nbytes : t->nbytes / dt->itemsize))
    };
    struct ckpt_pv *persid = ckpt_pv_new(a, CKPT_PV_PERSID);
    if (!persid || !(persid->u.persid.pid = tuple_of(a, 5, pidv)))
        return NULL;
    struct ckpt_pv *hooks = ckpt_pv_call(a, tr->g_od,
                                         ckpt_pv_new(a, CKPT_PV_TUPLE),
                                         CKPT_CALL_REDUCE);
    struct ckpt_pv *args[] = {
        persid, tr->zero, dims_tuple(a, e->size, e->ndim, 0),
        dims_tuple(a, e->size, e->ndim, 1), tr->no, hooks,
        v3 ? ckpt_pv_global(a, "torch", dt->name) : NULL
    };
    struct ckpt_pv *tup = tuple_of(a, v3 ? 7 : 6, args);
    return tup ? ckpt_pv_call(a, v3 ? tr->g_v3 : tr->g_v2, tup,
                              CKPT_CALL_REDUCE) : NULL;
}

/* --- byte items --------------------------------------------------------- */

struct persids {
    struct ckpt_pv **v;
    size_t n, cap;
};

static int collect_persid(void *ud, const struct ckpt_pv *v)
{
    struct persids *p = ud;
    if (v->kind != CKPT_PV_PERSID)
        return 0;
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 8;
        p->v = ckpt_xreallocarray(p->v, p->cap, sizeof(*p->v));
    }
    p->v[p->n++] = (struct ckpt_pv *)v;
    return 0;
}

static struct ucopy *new_copy(struct ujob *j)
{
    if (j->plan.ncopies == j->plan.copycap) {
        j->plan.copycap = j->plan.copycap ? j->plan.copycap * 2 : 8;
        j->plan.copies = ckpt_xreallocarray(j->plan.copies, j->plan.copycap,
                                       sizeof(*j->plan.copies));
    }
    struct ucopy *c = &j->plan.copies[j->plan.ncopies++];
    memset(c, 0, sizeof(*c));
    c->file = -1;
    return c;
}

/* Point one storage persistent id of a byte item at a new record. */
static int remap_persid(struct tree *tr, struct ckpt_pv *p,
                        const struct ckpt_tzip *z, const struct ckpt_rd *rd,
                        struct usrc *src, struct ckpt_err *err)
{
    struct ckpt_pv *pid = p->u.persid.pid;
    const struct ckpt_pv *key = ckpt_pv_item(pid, 2);
    char rec[64];
    if (!pid || pid->kind != CKPT_PV_TUPLE || pid->u.seq.n < 5 ||
        !key || key->kind != CKPT_PV_STR || key->u.s.len > 20)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: unknown persistent id",
                            rd->name);
    snprintf(rec, sizeof(rec), "data/%s", key->u.s.p);
    const struct ckpt_tzip_entry *e = ckpt_tzip_find(z, rec);
    if (!e)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: record '%s' missing",
                            rd->name, rec);
    if (z->big_endian)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: big-endian object "
                            "with tensors", rd->name);
    struct ucopy *c = new_copy(tr->j);
    c->e = tr->cur;
    c->src = src;
    c->off = rd->base + e->data_off;
    c->nbytes = e->size;
    uns_src_note_record(src, c->off, e->size, e->crc, z->prefix, e->name);
    c->keystr = ckpt_pv_str(tr->a, "", 0);
    /* One record per storage key; views sharing a storage keep sharing. */
    pid->u.seq.v[2] = c->keystr;
    pid->u.seq.v[3] = tr->s_cpu;
    return c->keystr ? 0 : oom(err);
}

static int remap_all(struct tree *tr, struct ckpt_pv *root,
                     const struct ckpt_tzip *z, const struct ckpt_rd *rd,
                     struct usrc *src, struct ckpt_err *err)
{
    struct persids p = { NULL, 0, 0 };
    struct strmap seen = STRMAP_INIT;
    int rc = ckpt_pv_walk(root, collect_persid, &p) ? oom(err) : 0;
    for (size_t i = 0; rc == 0 && i < p.n; i++) {
        const struct ckpt_pv *key = ckpt_pv_item(p.v[i]->u.persid.pid, 2);
        uint64_t ci;
        if (key && key->kind == CKPT_PV_STR &&
            tf_strmap_get(&seen, key->u.s.p, key->u.s.len, &ci)) {
            p.v[i]->u.persid.pid->u.seq.v[2] = tr->j->plan.copies[ci].keystr;
            p.v[i]->u.persid.pid->u.seq.v[3] = tr->s_cpu;
            continue;
        }
        rc = remap_persid(tr, p.v[i], z, rd, src, err);
        if (rc == 0 && tf_strmap_put(&seen, key->u.s.p, key->u.s.len,
                                     tr->j->plan.ncopies - 1) != 0)
            rc = oom(err);
    }
    free(p.v);
    tf_strmap_release(&seen);
    return rc;
}

/* Unpickle byte item e (a torch.save of any object) into the output
 * arena, storages remapped. */
static struct ckpt_pv *object_node(struct tree *tr,
                                   const struct ckpt_dcp_entry *e,
                                   struct ckpt_err *err)
{
    struct usrc *src;
    uint64_t off, len;
    struct ckpt_rd rd;
    struct ckpt_tzip *z = NULL;
    char *pkl = NULL;
    size_t plen;
    struct ckpt_pv *v = NULL;
    struct src_cache cache = { 0 };
    if (uns_src_item(tr->j, &e->st, MAX_OBJECT, &src, &off, &len, err) != 0)
        goto out;
    /* Remote: the item's zip records from a window or two, not a ranged
     * GET per record. */
    uns_src_rd_cached(&rd, &cache, src, off, len);
    const struct ckpt_tzip_entry *pe;
    if (ckpt_tzip_open(&z, &rd, err) != 0)
        goto out;
    if (!(pe = ckpt_tzip_find(z, "data.pkl"))) {
        ckpt_err_set(err, CKPT_EFORMAT, "%s: record 'data.pkl' missing",
                     rd.name);
        goto out;
    }
    /* Any class, within the default caps: nothing is executed, and what
     * is written is checked against the allow-list in outputs/torch_layout.c. */
    struct ckpt_pickle_opts po = { .name = "data.pkl" };
    if (ckpt_tzip_read(z, &rd, pe, MAX_OBJECT_PKL, &pkl, &plen, err) != 0 ||
        ckpt_pickle_load(tr->a, pkl, plen, &po, &v, NULL, err) != 0 ||
        remap_all(tr, v, z, &rd, src, err) != 0)
        v = NULL;
out:
    if (!v)
        ckpt_err_prefix(err, "object '%s'", e->fqn);
    free(pkl);
    ckpt_tzip_free(z);
    uns_src_cache_release(&cache);
    return v;
}

/* --- set_element ---------------------------------------------------------- */

static const char *slot_key(struct tree *tr, const struct ckpt_pv *c,
                            const struct ckpt_pv *k, size_t *len)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addf(&b, "%p|", (const void *)c);
    if (k->kind == CKPT_PV_STR)
        ckpt_buf_add(&b, k->u.s.p, k->u.s.len);
    else
        ckpt_buf_addf(&b, "#%lld", (long long)k->u.i);
    char *s = ckpt_arena_strndup(tr->a, b.ptr, b.len);
    *len = b.len;
    ckpt_buf_release(&b);
    return s;
}

/* d[k] = v (replacing), or with v == NULL and def: d.setdefault(k, def).
 * Returns the value now at d[k]. */
static struct ckpt_pv *dict_slot(struct tree *tr, struct ckpt_pv *d,
                                 const struct ckpt_pv *k, struct ckpt_pv *v,
                                 struct ckpt_pv *def)
{
    size_t len;
    uint64_t i;
    const char *key = slot_key(tr, d, k, &len);
    if (!key)
        return NULL;
    if (tf_strmap_get(&tr->keys, key, len, &i)) {
        if (v)
            d->u.dict.v[i] = v;
        return d->u.dict.v[i];
    }
    if (ckpt_pv_dict_add(tr->a, d, (struct ckpt_pv *)k, v ? v : def) ||
        tf_strmap_put(&tr->keys, key, len, d->u.dict.n - 1))
        return NULL;
    return v ? v : def;
}

static int extend_list(struct tree *tr, struct ckpt_pv *l, int64_t idx)
{
    if (idx >= MAX_LIST_INDEX)
        return -1;
    while ((int64_t)l->u.seq.n <= idx)
        if (ckpt_pv_push(tr->a, l, tr->none) != 0)
            return -1;
    return 0;
}

static int conflict(const char *fqn, struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "'%s': planner_data path "
                        "conflicts with another entry", fqn);
}

/* One step down from cur through key prev, creating a dict (next key is
 * a str) or list (next key is an int) when missing. */
static struct ckpt_pv *descend(struct tree *tr, struct ckpt_pv *cur,
                               const struct ckpt_pv *prev,
                               const struct ckpt_pv *next)
{
    struct ckpt_pv *def = ckpt_pv_new(tr->a, next->kind == CKPT_PV_STR ?
                                      CKPT_PV_DICT : CKPT_PV_LIST);
    if (!def)
        return NULL;
    if (cur->kind == CKPT_PV_DICT)
        return dict_slot(tr, cur, prev, NULL, def);
    if (cur->kind != CKPT_PV_LIST || prev->kind != CKPT_PV_INT ||
        extend_list(tr, cur, prev->u.i) != 0)
        return NULL;
    if (cur->u.seq.v[prev->u.i]->kind == CKPT_PV_NONE)
        cur->u.seq.v[prev->u.i] = def;
    return cur->u.seq.v[prev->u.i];
}

static int set_element(struct tree *tr, struct ckpt_pv *root,
                       const struct ckpt_pv *path, struct ckpt_pv *value,
                       const char *fqn, struct ckpt_err *err)
{
    struct ckpt_pv *cur = root;
    size_t n = path->u.seq.n;
    for (size_t i = 1; i < n; i++) {
        cur = descend(tr, cur, path->u.seq.v[i - 1], path->u.seq.v[i]);
        if (!cur || (cur->kind != CKPT_PV_DICT && cur->kind != CKPT_PV_LIST))
            return conflict(fqn, err);
    }
    const struct ckpt_pv *key = path->u.seq.v[n - 1];
    if (cur->kind == CKPT_PV_DICT)
        return dict_slot(tr, cur, key, value, NULL) ? 0 : oom(err);
    if (key->kind != CKPT_PV_INT || extend_list(tr, cur, key->u.i) != 0)
        return conflict(fqn, err);
    cur->u.seq.v[key->u.i] = value;
    return 0;
}

static int init_tree(struct tree *tr, struct ujob *j)
{
    struct ckpt_arena *a = j->plan.arena;
    memset(tr, 0, sizeof(*tr));
    tr->j = j;
    tr->a = a;
    tr->none = ckpt_pv_new(a, CKPT_PV_NONE);
    tr->no = ckpt_pv_bool(a, 0);
    tr->zero = ckpt_pv_int(a, 0);
    tr->s_storage = ckpt_pv_str(a, "storage", 7);
    tr->s_cpu = ckpt_pv_str(a, "cpu", 3);
    tr->g_v2 = ckpt_pv_global(a, "torch._utils", "_rebuild_tensor_v2");
    tr->g_v3 = ckpt_pv_global(a, "torch._utils", "_rebuild_tensor_v3");
    tr->g_od = ckpt_pv_global(a, "collections", "OrderedDict");
    tr->g_untyped = ckpt_pv_global(a, "torch.storage", "UntypedStorage");
    return tr->none && tr->no && tr->zero && tr->s_storage && tr->s_cpu &&
           tr->g_v2 && tr->g_v3 && tr->g_od && tr->g_untyped ? 0 : -1;
}

/* The value of entry i: its tensor node or its unpickled object. */
static struct ckpt_pv *entry_value(struct tree *tr, size_t i, size_t *ti,
                                   struct ckpt_err *err)
{
    struct ujob *j = tr->j;
    const struct ckpt_dcp_entry *e = &j->plan.meta->entries[i];
    if (e->kind == CKPT_DCP_BYTES) {
        j->plan.objects++;
        tr->cur = e;
        return object_node(tr, e, err);
    }
    struct ckpt_pv *v = tensor_node(tr, &j->plan.tensors[(*ti)++]);
    if (!v)
        oom(err);
    return v;
}

/* Without planner_data (torch 1.13) keys are flat; for the OLMo layout a
 * flat "model.x" / "optim.x" still belongs to model.pt / optim.pt as key
 * "x": the path becomes ("model", "x"). Other keys stay whole. */
static const struct ckpt_pv *flat_path(struct tree *tr, const char *fqn)
{
    static const char *const parts[] = { "model", "optim", "optimizer" };
    struct ckpt_pv *k[2] = { NULL, NULL };
    size_t n = 1;
    for (size_t i = 0; tr->j->plan.olmo && i < 3 && n == 1; i++) {
        size_t pl = strlen(parts[i]);
        if (!strncmp(fqn, parts[i], pl) && fqn[pl] == '.' && fqn[pl + 1]) {
            k[0] = ckpt_pv_str(tr->a, fqn, pl);
            k[1] = ckpt_pv_str(tr->a, fqn + pl + 1, strlen(fqn + pl + 1));
            n = 2;
        }
    }
    if (n == 1)
        k[0] = ckpt_pv_str(tr->a, fqn, strlen(fqn));
    return tuple_of(tr->a, n, k);
}

int uns_tree_build(struct ujob *j, struct ckpt_pv **root, struct ckpt_err *err)
{
    struct tree tr;
    size_t ti = 0;
    int rc = 0;
    if (init_tree(&tr, j) != 0 || !(*root = ckpt_pv_new(j->plan.arena,
                                                        CKPT_PV_DICT)))
        return oom(err);
    j->plan.values = ckpt_xcalloc(j->plan.meta->n + 1, sizeof(*j->plan.values));
    j->plan.paths = ckpt_xcalloc(j->plan.meta->n + 1, sizeof(*j->plan.paths));
    for (size_t i = 0; rc == 0 && i < j->plan.meta->n; i++) {
        const struct ckpt_dcp_entry *e = &j->plan.meta->entries[i];
        struct ckpt_pv *v = entry_value(&tr, i, &ti, err);
        const struct ckpt_pv *path = e->path;
        if (!v) {
            rc = -1;
            break;
        }
        j->plan.values[i] = v;
        if (!path && !(path = flat_path(&tr, e->fqn))) {
            rc = oom(err);
            break;
        }
        j->plan.paths[i] = path;
        rc = set_element(&tr, *root, path, v, e->fqn, err);
    }
    tf_strmap_release(&tr.keys);
    return rc;
}

struct ckpt_pv *uns_tree_tensor(struct ujob *j, struct utensor *t)
{
    struct tree tr;
    return init_tree(&tr, j) == 0 ? tensor_node(&tr, t) : NULL;
}

int uns_tree_remap(struct ujob *j, const struct ckpt_dcp_entry *e,
                   struct ckpt_pv *v, const struct ckpt_tzip *z,
                   const struct ckpt_rd *rd, struct usrc *src,
                   struct ckpt_err *err)
{
    struct tree tr;
    if (init_tree(&tr, j) != 0)
        return oom(err);
    tr.cur = e;
    int rc = remap_all(&tr, v, z, rd, src, err);
    tf_strmap_release(&tr.keys);
    return rc;
}
