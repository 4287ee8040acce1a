/*
 * megatron/plan_legacy.c - Megatron-LM legacy steps (ckpt_format=torch):
 * iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt, one torch.save per
 * tensor-parallel rank TT of pipeline stage PPP (docs/formats/megatron.md).
 *
 * Each file's "model" is that rank's part of the megatron.core GPT state
 * dict. The output is the model Megatron would hold at TP=1 PP=1, as its
 * checkpoint converter (tools/checkpoint) merges it:
 *   - column-parallel tensors (linear_qkv, linear_fc1, word embeddings,
 *     output_layer) concatenated on dim 0, row-parallel weights
 *     (linear_proj, linear_fc2) on dim 1;
 *   - a gated linear_fc1 (args.swiglu) holds [gate_r; up_r] on rank r
 *     (ColumnParallelLinear stride 2): the gates of every rank, then the
 *     ups;
 *   - everything else that is a tensor (norms, row-parallel biases,
 *     position embeddings) is replicated: every rank's copy is compared
 *     with rank 0's as it is copied, and differing bytes are an error;
 *   - stages hold local layer numbers: decoder.layers.N of stage s becomes
 *     N plus the layers of the stages before it.
 * Which tensor is split how is known from its name alone (the file keeps
 * no partition attributes): a key this file does not know is an error,
 * never a guess. The pickles alone are read while planning (each rank's
 * graph lives in the plan arena: names and storage keys, no tensor
 * bytes); the engine then copies each rank's storage bytes into place in
 * bands. The output holds {"model", "checkpoint_version", "iteration"}:
 * "args" describes the sharded run, "rng_state" and "optimizer" are per
 * rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/megatron/megatron.h"
#include "trainers/trainer.h"

#define MAX_PKL (512u << 20)
#define MAX_MP 4096
#define RANK_FILE "model_optim_rng.pt"

enum split { SPLIT_COL, SPLIT_GLU, SPLIT_ROW, SPLIT_REPL };

/* One rank file, its graph in the plan arena. */
struct mrank {
    const char *file;           /* "mp_rank_TT_PPP/model_optim_rng.pt" */
    struct usrc *src;
    struct ckpt_tzip *z;
    struct ckpt_pv *root, *model;
};

/* Where one chunk's elements are; parallel to the entry's chunks. */
struct mplan {
    struct ujob *j;
    int tp, pp, pp_dirs;        /* pp_dirs: names carry _PPP */
    int swiglu;
    struct mrank *ranks;        /* malloced, [stage * tp + t] */
    struct uns_zloc **locs;     /* malloced, per tensor entry (arena) */
    size_t nlocs;
};

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

/* --- names -------------------------------------------------------------- */

/* "mp_rank_TT" or "mp_rank_TT_PPP": 1 or 2 numbers, 0 for anything else
 * (three numbers, expert parallel, are counted as 3). */
static int mp_name(const char *s, long *v)
{
    if (strncmp(s, "mp_rank_", 8) != 0)
        return 0;
    s += 8;
    int n = 0;
    for (;;) {
        char *end;
        if (*s < '0' || *s > '9' || n == 3)
            return 0;
        long x = strtol(s, &end, 10);
        if (x < 0 || x >= MAX_MP)
            return 0;
        v[n++] = x;
        if (!*end)
            return n;
        if (*end != '_')
            return 0;
        s = end + 1;
    }
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* How tensor `name` (a stage's local key) is split across tensor-parallel
 * ranks, from megatron.core's GPT modules (ColumnParallelLinear,
 * RowParallelLinear, VocabParallelEmbedding; norms and the row-parallel
 * bias are whole on every rank); -1 when it is not known. */
static int split_of(const char *name, int swiglu)
{
    static const char *const col[] = {
        "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
    };
    static const char *const row[] = {
        "self_attention.linear_proj.weight", "mlp.linear_fc2.weight",
    };
    static const char *const repl[] = {
        "input_layernorm.weight", "input_layernorm.bias",
        "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias",
        "self_attention.q_layernorm.weight", "self_attention.q_layernorm.bias",
        "self_attention.k_layernorm.weight", "self_attention.k_layernorm.bias",
        "self_attention.linear_qkv.layer_norm_weight",
        "self_attention.linear_qkv.layer_norm_bias",
        "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.layer_norm_bias",
        "self_attention.linear_proj.bias", "mlp.linear_fc2.bias",
    };
    if (!strcmp(name, "embedding.word_embeddings.weight") ||
        !strcmp(name, "output_layer.weight") ||
        !strcmp(name, "output_layer.bias"))
        return SPLIT_COL;
    if (!strcmp(name, "embedding.position_embeddings.weight") ||
        !strcmp(name, "decoder.final_layernorm.weight") ||
        !strcmp(name, "decoder.final_layernorm.bias"))
        return SPLIT_REPL;
    if (strncmp(name, "decoder.layers.", 15) != 0)
        return -1;
    const char *p = name + 15;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p == name + 15 || *p != '.')
        return -1;
    p++;
    if (!strcmp(p, "mlp.linear_fc1.weight") ||
        !strcmp(p, "mlp.linear_fc1.bias"))
        return swiglu ? SPLIT_GLU : SPLIT_COL;
    for (size_t i = 0; i < sizeof(col) / sizeof(col[0]); i++)
        if (!strcmp(p, col[i]))
            return SPLIT_COL;
    for (size_t i = 0; i < sizeof(row) / sizeof(row[0]); i++)
        if (!strcmp(p, row[i]))
            return SPLIT_ROW;
    for (size_t i = 0; i < sizeof(repl) / sizeof(repl[0]); i++)
        if (!strcmp(p, repl[i]))
            return SPLIT_REPL;
    return -1;
}

/* "decoder.layers.N.rest" -> N (else -1), *rest after "N". */
static long layer_of(const char *name, const char **rest)
{
    if (strncmp(name, "decoder.layers.", 15) != 0)
        return -1;
    char *end;
    long n = strtol(name + 15, &end, 10);
    if (end == name + 15 || *end != '.' || n < 0)
        return -1;
    *rest = end;
    return n;
}

/* --- args --------------------------------------------------------------- */

static int arg_int(const struct ckpt_pv *a, const char *k, int64_t *v)
{
    const struct ckpt_pv *x = ckpt_pv_dict_get(a, k);
    if (x && x->kind == CKPT_PV_BOOL) {
        *v = x->u.b;
        return 0;
    }
    return ckpt_pv_get_int(x, v);
}

/* The run's sizes from rank 0's args, held to the directories found. */
static int read_args(struct mplan *p, int64_t *layers, struct ckpt_err *err)
{
    const char *f = p->ranks[0].file;
    const struct ckpt_pv *a =
        ckpt_pv_attrs(ckpt_pv_dict_get(p->ranks[0].root, "args"));
    int64_t tp, pp, sw = 0;
    if (!a || arg_int(a, "tensor_model_parallel_size", &tp) != 0 ||
        arg_int(a, "num_layers", layers) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': no args with "
                            "tensor_model_parallel_size and num_layers: "
                            "how its tensors are split is not known", f);
    if (arg_int(a, "pipeline_model_parallel_size", &pp) != 0)
        pp = 1;
    const struct ckpt_pv *v = ckpt_pv_dict_get(a, "swiglu");
    if (v && v->kind != CKPT_PV_NONE && arg_int(a, "swiglu", &sw) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': args.swiglu is not a "
                            "bool", f);
    v = ckpt_pv_dict_get(a, "virtual_pipeline_model_parallel_size");
    if (v && v->kind != CKPT_PV_NONE)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': a virtual "
                            "pipeline (model0, model1, ... per file) is not "
                            "merged", f);
    if (tp != p->tp || pp != p->pp)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': args say tensor "
                            "parallel %lld and pipeline parallel %lld, the "
                            "step holds %d x %d rank directories", f,
                            (long long)tp, (long long)pp, p->tp, p->pp);
    p->swiglu = sw != 0;
    return 0;
}

/* --- ranks -------------------------------------------------------------- */

/* The step's rank directories: every mp_rank_TT[_PPP] of the grid. */
static int find_ranks(struct mplan *p, struct ckpt_err *err)
{
    struct ujob *j = p->j;
    struct uns_dir d;
    long maxt = -1, maxp = -1;
    int kinds = 0;
    if (uns_fs_list(j, j->src.dir, 0, &d, err) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < d.n; i++) {
        long v[3];
        int n = mp_name(d.v[i].name, v);
        if (n == 3)
            rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s/%s': expert "
                              "parallel ranks are not merged", j->src.dir,
                              d.v[i].name);
        if (!n || rc)
            continue;
        kinds |= n;
        maxt = v[0] > maxt ? v[0] : maxt;
        if (n == 2)
            maxp = v[1] > maxp ? v[1] : maxp;
    }
    if (rc == 0 && maxt < 0)
        rc = ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': no mp_rank_* "
                          "directories", j->src.dir);
    if (rc == 0 && kinds == 3)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': mp_rank_TT and "
                          "mp_rank_TT_PPP directories mixed", j->src.dir);
    uns_fs_free(&d);
    if (rc != 0)
        return -1;
    p->tp = (int)maxt + 1;
    p->pp_dirs = kinds == 2;
    p->pp = p->pp_dirs ? (int)maxp + 1 : 1;
    p->ranks = ckpt_xcalloc((size_t)p->tp * (size_t)p->pp, sizeof(*p->ranks));
    for (int s = 0; s < p->pp; s++)
        for (int t = 0; t < p->tp; t++) {
            char name[64];
            if (p->pp_dirs)
                snprintf(name, sizeof(name), "mp_rank_%02d_%03d/" RANK_FILE,
                         t, s);
            else
                snprintf(name, sizeof(name), "mp_rank_%02d/" RANK_FILE, t);
            char *path = ckpt_path_join(j->src.dir, name);
            int there = uns_fs_is_file(j, path);
            free(path);
            if (!there)
                return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is "
                                    "missing (the step has %d tensor x %d "
                                    "pipeline ranks)", j->src.dir, name,
                                    p->tp, p->pp);
            p->ranks[s * p->tp + t].file =
                ckpt_arena_strdup(j->plan.meta->arena, name);
            if (!p->ranks[s * p->tp + t].file)
                return oom(err);
        }
    return 0;
}

/* Open one rank's zip and parse its data.pkl into the plan arena. */
static int load_rank(struct mplan *p, struct mrank *r, struct ckpt_err *err)
{
    struct ckpt_rd rd;
    struct src_cache cache;
    char *pkl = NULL;
    size_t plen;
    const struct ckpt_tzip_entry *pe;
    struct ckpt_pickle_opts po = { .name = "data.pkl", .allow = NULL,
                                   .max_values = SIZE_MAX,
                                   .max_bytes = SIZE_MAX };
    if (uns_src_get(p->j, r->file, &r->src, err) != 0)
        return -1;
    uns_src_rd_cached(&rd, &cache, r->src, 0, r->src->size);
    int rc = ckpt_tzip_open(&r->z, &rd, err);
    if (rc == 0 && !(pe = ckpt_tzip_find(r->z, "data.pkl")))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "record 'data.pkl' missing");
    if (rc == 0)
        rc = ckpt_tzip_read(r->z, &rd, pe, MAX_PKL, &pkl, &plen, err);
    if (rc == 0)
        rc = ckpt_pickle_load(p->j->plan.arena, pkl, plen, &po, &r->root,
                              NULL, err);
    if (rc == 0 && !ckpt_pv_dict_items(r->root))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "not a state dict");
    if (rc == 0 && !ckpt_pv_dict_items(r->model =
                                       ckpt_pv_dict_get(r->root, "model")))
        rc = ckpt_err_set(err, CKPT_EFORMAT, ckpt_pv_dict_get(r->root,
                          "model0") ? "a virtual pipeline (model0, model1, "
                          "...) is not merged" : "no 'model' state dict");
    free(pkl);
    uns_src_cache_release(&cache);
    if (rc != 0 && !strstr(err->msg, r->src ? r->src->name : r->file))
        ckpt_err_prefix(err, "%s", r->src ? r->src->name : r->file);
    return rc;
}

/* --- entries ------------------------------------------------------------ */

struct build {
    struct mplan *p;
    size_t ntop;                /* the last entries: top-level values */
    struct ckpt_pv **slots;     /* malloced: per entry, its object value
                                   (NULL for tensors) */
    struct strmap keys;         /* output keys seen: two stages must not
                                   both hold one */
};

static struct ckpt_dcp_entry *new_entry(struct build *b)
{
    struct ckpt_dcp_meta *m = b->p->j->plan.meta;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        struct ckpt_dcp_entry *v = ckpt_arena_array(m->arena, cap,
                                                    sizeof(*v));
        if (!v)
            return NULL;
        if (m->n)
            memcpy(v, m->entries, m->n * sizeof(*v));
        m->entries = v;
        m->cap = cap;
        b->slots = ckpt_xreallocarray(b->slots, cap, sizeof(*b->slots));
        b->p->locs = ckpt_xreallocarray(b->p->locs, cap,
                                        sizeof(*b->p->locs));
    }
    struct ckpt_dcp_entry *e = &m->entries[m->n];
    memset(e, 0, sizeof(*e));
    b->slots[m->n] = NULL;
    b->p->locs[m->n] = NULL;
    m->n++;
    return e;
}

/* The tensor of key k in rank r's model, checked against the record it
 * names. */
static int rank_tensor(struct mrank *r, const struct ckpt_pv *v,
                       const char *key, struct ckpt_tensor *t,
                       const struct ckpt_tzip_entry **ze,
                       struct ckpt_err *err)
{
    char rec[64];
    int is = v ? ckpt_tensor_from_pv(v, t, r->file, err) : 0;
    if (is < 0)
        return -1;
    if (!is)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' is not a "
                            "tensor there", r->file, key);
    snprintf(rec, sizeof(rec), "data/%s", t->key);
    *ze = ckpt_tzip_find(r->z, rec);
    if (!*ze || ckpt_tensor_check_bounds(t, r->file, err) != 0 ||
        (*ze)->size < t->storage_nbytes)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': storage record of "
                            "'%s' is missing or short", r->file, key);
    return 0;
}

/* Chunk k of e: rows [lo, lo + n) along dim of rank r's tensor t, placed
 * at out along dim in the merged tensor. */
static int add_chunk(struct mplan *p, struct ckpt_dcp_entry *e,
                     struct uns_zloc *locs, struct mrank *r, unsigned part,
                     const struct ckpt_tensor *t,
                     const struct ckpt_tzip_entry *ze, int dim, uint64_t lo,
                     uint64_t n, uint64_t out, struct ckpt_err *err)
{
    struct ckpt_arena *ma = p->j->plan.meta->arena;
    size_t nd = (size_t)e->ndim + 1;
    uint64_t *off = ckpt_arena_array(ma, nd, 8);
    uint64_t *sz = ckpt_arena_array(ma, nd, 8);
    int64_t *stride = ckpt_arena_array(ma, nd, 8);
    if (!off || !sz || !stride)
        return oom(err);
    for (int d = 0; d < e->ndim; d++) {
        off[d] = d == dim ? out : 0;
        sz[d] = d == dim ? n : (uint64_t)t->size[d];
    }
    memcpy(stride, t->stride, sizeof(int64_t) * (size_t)e->ndim);
    struct ckpt_dcp_chunk *c = &e->chunks[e->nchunks];
    struct uns_zloc *l = &locs[e->nchunks++];
    c->offsets = off;
    c->sizes = sz;
    c->part = part;
    c->st.file = r->file;
    c->st.offset = ze->data_off;
    c->st.length = ze->size;
    uns_src_note_record(r->src, ze->data_off, ze->size, ze->crc,
                        r->z->prefix, ze->name);
    *l = (struct uns_zloc){ r->src, ze->data_off, stride,
                            t->storage_offset + (int64_t)lo *
                            (dim >= 0 ? t->stride[dim] : 0),
                            r->z->big_endian };
    return 0;
}

/* One tensor key of stage s, as every tensor rank of the stage holds it. */
static int tensor_entry(struct build *b, int s, const char *key,
                        const char *outkey, size_t kidx,
                        struct ckpt_err *err)
{
    struct mplan *p = b->p;
    struct ckpt_arena *ma = p->j->plan.meta->arena;
    int how = split_of(key, p->swiglu);
    struct mrank *r0 = &p->ranks[s * p->tp];
    if (how < 0)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': how tensor '%s' "
                            "is split across tensor-parallel ranks is not "
                            "known (the checkpoint does not say; this "
                            "version knows megatron.core GPT's keys)",
                            r0->file, key);
    struct ckpt_dcp_entry *e = new_entry(b);
    if (!e)
        return oom(err);
    size_t ei = p->j->plan.meta->n - 1;
    size_t cap = (size_t)p->tp * 2;
    struct uns_zloc *locs = ckpt_arena_array(ma, cap, sizeof(*locs));
    e->chunks = ckpt_arena_array(ma, cap, sizeof(*e->chunks));
    uint64_t *size = ckpt_arena_array(ma, CKPT_MAX_DIMS + 1, 8);
    if (!locs || !e->chunks || !size)
        return oom(err);
    e->chunkcap = cap;
    e->fqn = outkey;
    e->kind = CKPT_DCP_TENSOR;
    e->size = size;
    p->locs[ei] = locs;
    int dim = how == SPLIT_ROW ? 1 : how == SPLIT_REPL ? -1 : 0;
    struct ckpt_tensor t0;
    for (int t = 0; t < p->tp; t++) {
        struct mrank *r = &p->ranks[s * p->tp + t];
        struct ckpt_pv *items = ckpt_pv_dict_items(r->model);
        const struct ckpt_pv *v = NULL;
        /* Ranks of a stage list the same keys in the same order. */
        if (kidx < items->u.dict.n &&
            ckpt_pv_str_eq(items->u.dict.k[kidx], key))
            v = items->u.dict.v[kidx];
        else
            v = ckpt_pv_dict_get(r->model, key);
        if (!v)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s' has no '%s', "
                                "'%s' has", r->file, key, r0->file);
        struct ckpt_tensor tt;
        const struct ckpt_tzip_entry *ze = NULL;
        if (rank_tensor(r, v, key, &tt, &ze, err) != 0)
            return -1;
        if (t == 0) {
            t0 = tt;
            if (dim >= tt.ndim)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' has "
                                    "%d dims, it is split along dim %d",
                                    r->file, key, tt.ndim, dim);
            e->dtype = tt.dtype;
            e->ndim = tt.ndim;
            for (int d = 0; d < tt.ndim; d++)
                size[d] = (uint64_t)tt.size[d] *
                          (d == dim ? (uint64_t)p->tp : 1);
            if (how == SPLIT_GLU && tt.size[0] % 2)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': gated '%s' "
                                    "has an odd number of rows (%lld)",
                                    r->file, key, (long long)tt.size[0]);
        } else if (tt.dtype != t0.dtype || tt.ndim != t0.ndim ||
                   memcmp(tt.size, t0.size,
                          sizeof(int64_t) * (size_t)tt.ndim)) {
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s' and '%s' hold "
                                "'%s' in different dtypes or shapes",
                                r0->file, r->file, key);
        }
        uint64_t n = dim >= 0 ? (uint64_t)tt.size[dim] : 0;
        int rc;
        if (how == SPLIT_GLU) {
            /* [gate_t; up_t] -> gate at t * h, up at (tp + t) * h. */
            uint64_t h = n / 2;
            rc = add_chunk(p, e, locs, r, (unsigned)t, &tt, ze, 0, 0, h,
                           (uint64_t)t * h, err);
            if (rc == 0)
                rc = add_chunk(p, e, locs, r, (unsigned)t, &tt, ze, 0, h, h,
                               (uint64_t)(p->tp + t) * h, err);
        } else {
            rc = add_chunk(p, e, locs, r, (unsigned)t, &tt, ze, dim, 0, n,
                           (uint64_t)t * n, err);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* An object value (an _extra_state: None, or TE's BytesIO) of stage s:
 * tensor rank 0's. */
static int object_entry(struct build *b, struct ckpt_pv **slot,
                        const char *outkey, struct ckpt_err *err)
{
    struct ckpt_dcp_entry *e = new_entry(b);
    if (!e)
        return oom(err);
    e->fqn = outkey;
    e->kind = CKPT_DCP_BYTES;
    b->slots[b->p->j->plan.meta->n - 1] = *slot;
    return 0;
}

/* Every key of every stage, in stage order, layers renumbered. */
static int stage_entries(struct build *b, int s, int64_t *offset,
                         struct ckpt_err *err)
{
    struct mplan *p = b->p;
    struct ckpt_arena *ma = p->j->plan.meta->arena;
    struct mrank *r0 = &p->ranks[s * p->tp];
    struct ckpt_pv *items = ckpt_pv_dict_items(r0->model);
    int64_t nlayers = 0;
    for (int t = 1; t < p->tp; t++) {
        struct ckpt_pv *it = ckpt_pv_dict_items(p->ranks[s * p->tp + t].model);
        if (it->u.dict.n != items->u.dict.n)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s' holds %zu model "
                                "keys, '%s' %zu", p->ranks[s * p->tp + t].file,
                                it->u.dict.n, r0->file, items->u.dict.n);
    }
    for (size_t i = 0; i < items->u.dict.n; i++) {
        const struct ckpt_pv *k = items->u.dict.k[i];
        if (k->kind != CKPT_PV_STR)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': a model key is "
                                "not a str", r0->file);
        char *key = ckpt_arena_strndup(ma, k->u.s.p, k->u.s.len);
        const char *rest, *outkey = key;
        long n = key ? layer_of(key, &rest) : -1;
        if (!key)
            return oom(err);
        if (n >= 0) {
            struct ckpt_buf kb = CKPT_BUF_INIT;
            ckpt_buf_addf(&kb, "decoder.layers.%lld%s",
                          (long long)(n + *offset), rest);
            outkey = ckpt_arena_strndup(ma, kb.ptr, kb.len);
            ckpt_buf_release(&kb);
            if (!outkey)
                return oom(err);
            nlayers = n + 1 > nlayers ? n + 1 : nlayers;
        }
        uint64_t seen;
        if (tf_strmap_get(&b->keys, outkey, strlen(outkey), &seen))
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': key '%s' is also "
                                "an earlier stage's ('%s')", r0->file, outkey,
                                p->ranks[seen * (uint64_t)p->tp].file);
        if (tf_strmap_put(&b->keys, outkey, strlen(outkey), (uint64_t)s) != 0)
            return oom(err);
        struct ckpt_tensor t;
        struct ckpt_err e2 = CKPT_ERR_INIT;
        int is = ckpt_tensor_from_pv(items->u.dict.v[i], &t, r0->file, &e2);
        int rc;
        if (is == 0 && ends_with(key, "._extra_state"))
            rc = object_entry(b, &items->u.dict.v[i], outkey, err);
        else if (is == 0)
            rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': model key '%s' "
                              "is neither a tensor nor an _extra_state",
                              r0->file, key);
        else
            rc = tensor_entry(b, s, key, outkey, i, err);
        if (rc != 0)
            return -1;
    }
    *offset += nlayers;
    return 0;
}

static int locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                  struct ckpt_err *err)
{
    struct mplan *p = j->plan.fmtplan;
    const struct uns_zloc *l = &p->locs[t->e - j->plan.meta->entries]
                                   [c->meta - t->e->chunks];
    (void)err;
    uns_chunk_at(c, l, t->e->ndim);
    return 0;
}

/* {"model": merged, then rank 0's checkpoint_version and iteration (object
 * entries, last: build_root puts them at the top)}. */
static int build_root(struct build *b, struct ckpt_pv **root,
                      struct ckpt_err *err)
{
    struct ujob *j = b->p->j;
    struct ckpt_dcp_meta *m = j->plan.meta;
    struct ckpt_arena *a = j->plan.arena;
    struct ckpt_pv *model = ckpt_pv_new(a, CKPT_PV_DICT);
    struct ckpt_pv *mk = ckpt_pv_str(a, "model", 5);
    *root = ckpt_pv_new(a, CKPT_PV_DICT);
    if (!model || !mk || !*root || ckpt_pv_dict_add(a, *root, mk, model))
        return oom(err);
    j->plan.values = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.values));
    j->plan.paths = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.paths));
    size_t ti = 0;
    for (size_t i = 0; i < m->n; i++) {
        struct ckpt_dcp_entry *e = &m->entries[i];
        int top = i >= m->n - b->ntop;
        struct ckpt_pv *v;
        if (e->kind == CKPT_DCP_TENSOR) {
            v = uns_tree_tensor(j, &j->plan.tensors[ti++]);
        } else {
            v = b->slots[i];
            j->plan.objects++;
        }
        struct ckpt_pv *k = ckpt_pv_str(a, e->fqn, strlen(e->fqn));
        struct ckpt_pv *path = ckpt_pv_new(a, CKPT_PV_TUPLE);
        if (!v || !k || !path || (!top && ckpt_pv_push(a, path, mk) != 0) ||
            ckpt_pv_push(a, path, k) != 0 ||
            ckpt_pv_dict_add(a, top ? *root : model, k, v) != 0)
            return oom(err);
        e->path = path;
        j->plan.paths[i] = path;
        j->plan.values[i] = v;
    }
    return 0;
}

/* Rank 0's iteration and checkpoint_version: object entries at the top. */
static int top_entries(struct build *b, struct ckpt_err *err)
{
    static const char *const keep[] = { "iteration", "checkpoint_version" };
    struct ckpt_pv *items = ckpt_pv_dict_items(b->p->ranks[0].root);
    for (size_t i = 0; i < items->u.dict.n; i++)
        for (size_t k = 0; k < 2; k++)
            if (ckpt_pv_str_eq(items->u.dict.k[i], keep[k])) {
                if (object_entry(b, &items->u.dict.v[i], keep[k], err) != 0)
                    return -1;
                b->ntop++;
            }
    return 0;
}

static void free_plan(struct mplan *p)
{
    if (p->ranks)
        for (int i = 0; i < p->tp * p->pp; i++)
            ckpt_tzip_free(p->ranks[i].z);
    free(p->ranks);
    free(p->locs);
    p->ranks = NULL;
    p->locs = NULL;
}

int uns_mg_legacy_plan(struct ujob *j, struct ckpt_err *err)
{
    struct mplan p;
    struct build b;
    struct ckpt_pv *root = NULL;
    int64_t layers = 0, offset = 0;
    memset(&p, 0, sizeof(p));
    memset(&b, 0, sizeof(b));
    p.j = j;
    b.p = &p;
    ckpt_dcp_meta_free(j->plan.meta);
    j->plan.meta = ckpt_dcp_meta_new();
    if (!j->plan.meta)
        return oom(err);
    j->src.metaname = "mp_rank_*/" RANK_FILE;
    j->plan.fmtplan = &p;
    j->plan.locate = locate;
    j->plan.olmo = 0;
    j->plan.megatron = 0;
    j->plan.mg_legacy = 1;
    /* Replicated tensors are chunks of the same box on every rank: kept
     * once, every other copy compared with it as it is copied. */
    j->src.allow_replicas = 1;
    j->src.rank_check = 1;
    int rc = find_ranks(&p, err);
    for (int i = 0; rc == 0 && i < p.tp * p.pp; i++)
        rc = load_rank(&p, &p.ranks[i], err);
    if (rc == 0)
        rc = read_args(&p, &layers, err);
    for (int s = 0; rc == 0 && s < p.pp; s++)
        rc = stage_entries(&b, s, &offset, err);
    if (rc == 0 && offset != layers)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "the stages hold %lld layers, "
                          "args.num_layers is %lld", (long long)offset,
                          (long long)layers);
    if (rc == 0)
        rc = top_entries(&b, err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = build_root(&b, &root, err);
    if (rc == 0)
        rc = trainer_layout(j, root, err);
    if (rc != 0 && err->msg[0] && !strstr(err->msg, j->src.dir))
        ckpt_err_prefix(err, "%s", j->src.dir);
    /* Every chunk was located by uns_plan_tensors (probed while
     * planning, as j->plan.locate is set): the plan state ends here. */
    free(b.slots);
    tf_strmap_release(&b.keys);
    free_plan(&p);
    j->plan.fmtplan = NULL;
    return rc;
}
