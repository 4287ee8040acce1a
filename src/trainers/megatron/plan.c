/*
 * megatron/plan.c - Megatron-LM torch_dist steps (megatron.core
 * dist_checkpointing; docs/formats/megatron.md).
 *
 * A torch_dist step is a DCP checkpoint whose non-sharded ("common")
 * state is kept either inside it, as the ShardedObject 'common_state'
 * (byte item "common_state/shard_0_1" holding [state_dict]: megatron.core
 * 0.15 and later), or in common.pt beside the DCP files (torch.save of the
 * state dict: older versions). The output is what Megatron's own loader
 * returns for the whole checkpoint (serialization.py load /
 * load_plain_tensors): the common state dict, with every other entry
 * merged into it under its key as dict_utils.merge does (dicts merged key
 * by key, lists of equal length item by item, anything else in both is an
 * error). When both exist, Megatron reads common.pt
 * (load_common_state_dict): so does ckpt, and the item stays under its
 * own key (nothing is dropped). A step without DCP metadata that holds
 * mp_rank_* directories is the legacy layout: megatron/plan_legacy.c.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/sources/sources.h"
#include "trainers/megatron/megatron.h"
#include "trainers/trainer.h"

#define COMMON_ITEM "common_state/shard_0_1"
#define COMMON_PT "common.pt"

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

/* common.pt becomes one more byte item of the plan: the whole file, a
 * torch zip, read like any DCP byte item (engine/tree.c object_node). */
static int add_common_pt(struct ujob *j, uint64_t size, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = j->plan.meta;
    struct ckpt_dcp_entry *v = ckpt_arena_array(m->arena, m->n + 1,
                                                sizeof(*v));
    if (!v)
        return oom(err);
    if (m->n)
        memcpy(v, m->entries, m->n * sizeof(*v));
    m->entries = v;
    m->cap = m->n + 1;
    struct ckpt_dcp_entry *e = &v[m->n++];
    memset(e, 0, sizeof(*e));
    e->fqn = COMMON_PT;
    e->kind = CKPT_DCP_BYTES;
    e->st.file = COMMON_PT;
    e->st.length = size;
    return 0;
}

int uns_mg_open(struct ujob *j, struct ckpt_err *err)
{
    char *p = ckpt_path_join(j->src.dir, COMMON_PT);
    uint64_t size;
    struct ckpt_err e2 = CKPT_ERR_INIT;
    int rc = uns_src_stat(j, p, &size, &e2) == 0 ? add_common_pt(j, size, err)
                                                 : 0;
    free(p);
    return rc;
}

int uns_mg_is_legacy(struct ujob *j)
{
    struct uns_dir d = { NULL, 0, 0 };
    struct ckpt_err e2 = CKPT_ERR_INIT;
    int legacy = 0;
    if (!j->src.dir || uns_fs_list(j, j->src.dir, 0, &d, &e2) != 0)
        return 0;
    for (size_t i = 0; i < d.n && !legacy; i++)
        legacy = ckpt_str_startswith(d.v[i].name, "mp_rank_");
    uns_fs_free(&d);
    return legacy;
}

/* --- dict_utils.merge --------------------------------------------------- */

/* "s:<str>" or "i:<int>": a dict key for the strmap (Megatron's keys are
 * str; ints are told apart). NULL for other keys (never equal). */
static char *key_of(const struct ckpt_pv *k, size_t *len)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    if (k->kind == CKPT_PV_STR) {
        ckpt_buf_add(&b, "s:", 2);
        ckpt_buf_add(&b, k->u.s.p, k->u.s.len);
    } else if (k->kind == CKPT_PV_INT) {
        ckpt_buf_addf(&b, "i:%lld", (long long)k->u.i);
    } else {
        return NULL;
    }
    return ckpt_buf_detach(&b, len);
}

static int merge(struct ujob *j, struct ckpt_pv *x1, struct ckpt_pv *x2,
                 const char *at, int depth, struct ckpt_err *err);

static int clash(const char *at, const struct ckpt_pv *x1,
                 const struct ckpt_pv *x2, struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "Megatron common state and "
                        "checkpoint both hold '%s' (%s and %s): Megatron's "
                        "loader refuses such a checkpoint too", at,
                        ckpt_pv_kind_name(x1->kind),
                        ckpt_pv_kind_name(x2->kind));
}

/* x1[k] = merge(x1[k], v) for every (k, v) of x2. The keys of x1 are
 * looked up in a map of its own keys (x2's are distinct), so a step of
 * many thousands of tensors merges in linear time. */
static int merge_dicts(struct ujob *j, struct ckpt_pv *x1,
                       const struct ckpt_pv *x2, const char *at, int depth,
                       struct ckpt_err *err)
{
    struct strmap seen = STRMAP_INIT;
    size_t n1 = x1->u.dict.n;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n1; i++) {
        size_t len;
        char *k = key_of(x1->u.dict.k[i], &len);
        /* The map keeps the key's pointer: the arena's copy. */
        const char *kept = k ? ckpt_arena_strndup(j->plan.arena, k, len)
                             : NULL;
        if (k && (!kept || tf_strmap_put(&seen, kept, len, i) != 0))
            rc = oom(err);
        free(k);
    }
    for (size_t i = 0; rc == 0 && i < x2->u.dict.n; i++) {
        struct ckpt_pv *k2 = x2->u.dict.k[i], *v2 = x2->u.dict.v[i];
        size_t len;
        uint64_t at1;
        char *k = key_of(k2, &len);
        if (k && tf_strmap_get(&seen, k, len, &at1)) {
            char *sub = ckpt_xasprintf("%s%s%s", at, *at ? "." : "", k + 2);
            rc = merge(j, x1->u.dict.v[at1], v2, sub, depth + 1, err);
            free(sub);
        } else if (ckpt_pv_dict_add(j->plan.arena, x1, k2, v2) != 0) {
            rc = oom(err);
        }
        free(k);
    }
    tf_strmap_release(&seen);
    return rc;
}

static int merge(struct ujob *j, struct ckpt_pv *x1, struct ckpt_pv *x2,
                 const char *at, int depth, struct ckpt_err *err)
{
    if (depth > CKPT_PICKLE_MAX_DEPTH)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': nested too deeply",
                            at);
    if (x1->kind == CKPT_PV_DICT && x2->kind == CKPT_PV_DICT)
        return merge_dicts(j, x1, x2, at, depth, err);
    if (x1->kind == CKPT_PV_LIST && x2->kind == CKPT_PV_LIST) {
        if (x1->u.seq.n != x2->u.seq.n)
            return ckpt_err_set(err, CKPT_EFORMAT, "Megatron common state "
                                "and checkpoint both hold '%s': lists of "
                                "%zu and %zu items", at, x1->u.seq.n,
                                x2->u.seq.n);
        for (size_t i = 0; i < x1->u.seq.n; i++) {
            char *sub = ckpt_xasprintf("%s[%zu]", at, i);
            int rc = merge(j, x1->u.seq.v[i], x2->u.seq.v[i], sub, depth + 1,
                           err);
            free(sub);
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    return clash(at, x1, x2, err);
}

/* --- the output root ---------------------------------------------------- */

/* Index of the entry holding the common state, or -1 (none). */
static long common_entry(const struct ujob *j)
{
    const struct ckpt_dcp_meta *m = j->plan.meta;
    long item = -1;
    for (size_t i = 0; i < m->n; i++) {
        const struct ckpt_dcp_entry *e = &m->entries[i];
        if (e->kind != CKPT_DCP_BYTES)
            continue;
        if (!strcmp(e->fqn, COMMON_PT) && e->st.file &&
            !strcmp(e->st.file, COMMON_PT) && !e->st.offset)
            return (long)i;          /* common.pt wins, as in Megatron */
        if (!strcmp(e->fqn, COMMON_ITEM) && !e->path)
            item = (long)i;
    }
    return item;
}

/* The state dict inside the entry's value: common.pt holds it, the DCP
 * item a one-item list of it (Megatron returns loaded[0]). */
static struct ckpt_pv *common_dict(const struct ujob *j, long ei,
                                   struct ckpt_err *err)
{
    const struct ckpt_dcp_entry *e = &j->plan.meta->entries[ei];
    struct ckpt_pv *v = j->plan.values[ei];
    if (strcmp(e->fqn, COMMON_PT) != 0) {
        if (!v || v->kind != CKPT_PV_LIST || v->u.seq.n != 1) {
            ckpt_err_set(err, CKPT_EFORMAT, "'%s': Megatron common state "
                         "is a %s, not a list of one state dict", e->fqn,
                         v ? ckpt_pv_kind_name(v->kind) : "?");
            return NULL;
        }
        v = v->u.seq.v[0];
    }
    struct ckpt_pv *d = ckpt_pv_dict_items(v);
    if (!d)
        ckpt_err_set(err, CKPT_EFORMAT, "'%s': Megatron common state is a "
                     "%s, not a dict", e->fqn,
                     v ? ckpt_pv_kind_name(v->kind) : "?");
    return d;
}

int uns_mg_merge(struct ujob *j, struct ckpt_pv **root, struct ckpt_err *err)
{
    long ei = common_entry(j);
    if (ei < 0)
        return 0;
    struct ckpt_pv *common = common_dict(j, ei, err);
    if (!common)
        return -1;
    const char *fqn = j->plan.meta->entries[ei].fqn;
    struct ckpt_arena *a = j->plan.arena;
    struct ckpt_pv *out = ckpt_pv_new(a, CKPT_PV_DICT);
    struct ckpt_pv *rest = ckpt_pv_new(a, CKPT_PV_DICT);
    if (!out || !rest)
        return oom(err);
    for (size_t i = 0; i < common->u.dict.n; i++)
        if (ckpt_pv_dict_add(a, out, common->u.dict.k[i],
                             common->u.dict.v[i]) != 0)
            return oom(err);
    /* Everything but the common state itself, in the checkpoint's order
     * (its entries are flat: Megatron writes no planner_data). */
    for (size_t i = 0; i < (*root)->u.dict.n; i++) {
        const struct ckpt_pv *k = (*root)->u.dict.k[i];
        if (k->kind == CKPT_PV_STR && k->u.s.len == strlen(fqn) &&
            !memcmp(k->u.s.p, fqn, k->u.s.len))
            continue;
        if (ckpt_pv_dict_add(a, rest, (*root)->u.dict.k[i],
                             (*root)->u.dict.v[i]) != 0)
            return oom(err);
    }
    if (merge(j, out, rest, "", 0, err) != 0)
        return -1;
    *root = out;
    return 0;
}

/* A torch_dist step is DCP with its common state merged in. */
int uns_mg_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    j->plan.megatron = 1;
    return uns_dcp_plan(j, src, err);
}
