/*
 * deepspeed/plan.c - DeepSpeed ZeRO-1/2/3 steps (`engine.save_checkpoint`,
 * docs/formats/deepspeed.md) into the one fp32 state dict DeepSpeed's own
 * utils/zero_to_fp32.py makes of them, without loading a rank file whole.
 *
 * The fp32 master weights are in the optimizer files
 * ((bf16_)zero_pp_rank_R_mp_rank_00_optim_states.pt), one flat 1-D tensor
 * per parameter group and rank; the model states name what they hold
 * (param_shapes: per group, names and shapes in flattening order). How
 * the flat partitions are cut follows zero_to_fp32 (0.19.6):
 *   ZeRO-1/2  group g's vector is the ranks' partitions of g end to end;
 *             its parameters follow each other from element 0; what is
 *             left after the last one is alignment padding (less than
 *             2 * world size elements once both are aligned to it).
 *   ZeRO-3    every rank holds ceil(numel / W) elements of every
 *             parameter, in param_shapes order, its groups end to end;
 *             rank r holds elements [r * part, (r + 1) * part) (the last
 *             ones padding), and a part may straddle two groups.
 * Every parameter becomes slices of the rank files (file, storage record,
 * element offset, stride); engine/flat.c cuts each slice into boxes, which are
 * chunks the DCP engine copies with pread/pwrite. Nothing but pickles and
 * zip directories is read while planning.
 *
 * The output, in zero_to_fp32's key order: the module's buffers (every
 * dtype turned float32, as .float() does: decoded here, chunk by chunk),
 * the frozen parameters (ZeRO-2: frozen_param_fragments as saved, dtype
 * kept; ZeRO-3: the ranks' fragments end to end, cut to the shape; ZeRO-1
 * records none), the trainable parameters, then shared_params: a tied
 * name is the same tensor as its source (one storage in a torch file, a
 * copy of the bytes in safetensors, which cannot share).
 *
 * --weights module: the module's state dict as trained instead. ZeRO-1/2
 * keep it whole in the model states (module_weights); ZeRO-3 keeps every
 * parameter empty there, so it is the partitions cut as above and cast
 * to the module's dtype, as save_16bit_model's gather gives (module3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/trainer.h"

#define MAX_PKL (512u << 20)
#define MAX_RANKS 65536
#define CONV_PIECE ((uint64_t)1 << 20)   /* elements decoded per chunk */

/* Elements [start, start+count) of an output tensor's flattening, at
 * element soff of the storage record at data, every step elements. */
struct dslice {
    uint64_t start, count;
    struct usrc *src;
    uint64_t data;
    int64_t soff, step;
    int big_endian;
};

enum { K_FLAT, K_PLAIN, K_CONVERT };

/* One value of the output state dict. */
struct dsout {
    const char *name;           /* meta arena */
    int alias;                  /* shared_params: index of the source, or
                                   -1 */
    int kind;
    const struct ckpt_dtype *dtype;
    int ndim;
    const uint64_t *size;       /* meta arena */
    struct dslice *sl;          /* K_FLAT: malloced */
    size_t nsl, slcap;
    /* K_PLAIN, K_CONVERT: a tensor of a model-states file */
    struct usrc *src;
    uint64_t data;
    int64_t soff;
    const int64_t *stride;      /* meta arena */
    int big_endian;
    const struct ckpt_dtype *from;  /* K_CONVERT: its dtype; K_FLAT:
                                       the groups' (fp32), cast to dtype
                                       (--weights module, ZeRO-3) */
    int requires_grad;          /* as zero_to_fp32's tensor has it */
    size_t entry;               /* in the plan (not for an alias in a
                                   torch file) */
};

/* Where chunk c of an entry is. */
struct dsloc {
    struct usrc *src;
    uint64_t data;
    int64_t soff;
    const int64_t *stride;      /* ndim */
    int big_endian;
    const struct ckpt_dtype *from;  /* decoded from this dtype, or NULL */
    uint64_t count;             /* decoded: elements */
};

/* One flat group tensor of one rank. */
struct dsgroup {
    struct usrc *src;
    uint64_t data, numel;
    int64_t soff, step;
    int big_endian;
    int requires_grad;
};

struct dsplan {
    struct ujob *j;
    int stage, world;
    int bf16;                   /* optim files are bf16_ prefixed */
    const struct ckpt_dtype *gdtype;
    size_t ngroups;
    struct dsgroup *groups;     /* malloced; world * ngroups */
    struct dsout *outs;         /* malloced */
    size_t nouts, outcap;
    size_t *order;              /* output keys in order: indexes of outs */
    size_t norder;
    struct strmap byname;       /* name -> position in order */
    struct dsloc **locs;        /* per entry, malloced */
    size_t nlocs;
    int *conv;                  /* per entry: decoded (K_CONVERT) */
    int *rg;                    /* per entry: requires_grad */
    int module;                 /* --weights module */
};

/* --- small readers ------------------------------------------------------ */

static struct ckpt_arena *ma(struct dsplan *p)
{
    return p->j->plan.meta->arena;
}

static int oom(struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
}

static int get_u64(const struct ckpt_pv *v, uint64_t *out)
{
    int64_t x;
    if (!v || v->kind == CKPT_PV_BOOL || ckpt_pv_get_int(v, &x) != 0 || x < 0)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

/* An int, or an enum member pickled as a call of its class with the
 * value (ZeroStageEnum.weights -> 3). */
static int enum_int(const struct ckpt_pv *v, uint64_t *out)
{
    if (v && v->kind == CKPT_PV_CALL)
        v = ckpt_pv_item(v->u.call.args, 0);
    return get_u64(v, out);
}

/* torch.Size(tuple), a tuple or a list of sizes: ndim, sizes in the meta
 * arena, numel. */
static int shape_of(struct dsplan *p, const struct ckpt_pv *v, int *ndim,
                    const uint64_t **size, uint64_t *numel)
{
    if (v && v->kind == CKPT_PV_CALL &&
        ckpt_pv_is_global(ckpt_pv_call_global(v), "torch", "Size"))
        v = ckpt_pv_item(v->u.call.args, 0);
    if (!v || (v->kind != CKPT_PV_TUPLE && v->kind != CKPT_PV_LIST) ||
        v->u.seq.n > CKPT_MAX_DIMS)
        return -1;
    uint64_t *s = ckpt_arena_array(ma(p), v->u.seq.n + 1, sizeof(*s));
    if (!s)
        return -1;
    *numel = 1;
    for (size_t d = 0; d < v->u.seq.n; d++)
        if (get_u64(v->u.seq.v[d], &s[d]) != 0 ||
            ckpt_mul_u64(*numel, s[d], numel) != 0)
            return -1;
    *ndim = (int)v->u.seq.n;
    *size = s;
    return 0;
}

static char *mstr(struct dsplan *p, const struct ckpt_pv *k)
{
    return ckpt_arena_strndup(ma(p), k->u.s.p, k->u.s.len);
}

/* --- files ------------------------------------------------------------- */

struct dsfile {
    const char *rel;            /* meta arena */
    struct usrc *src;
    struct ckpt_tzip *z;
    struct ckpt_arena *a;       /* the pickle's graph */
    struct ckpt_pv *root;       /* its top-level dict items */
};

static void file_close(struct dsfile *f)
{
    ckpt_tzip_free(f->z);
    ckpt_arena_free(f->a);
    memset(f, 0, sizeof(*f));
}

/* Open rel, parse its data.pkl (nothing executed: every global is a
 * node) into an arena of its own. */
static int file_open(struct dsplan *p, const char *rel, struct dsfile *f,
                     struct ckpt_err *err)
{
    struct ckpt_rd rd;
    struct src_cache cache;
    const struct ckpt_tzip_entry *pe = NULL;
    struct ckpt_pv *root = NULL;
    char *pkl = NULL;
    size_t plen;
    memset(f, 0, sizeof(*f));
    f->rel = ckpt_arena_strdup(ma(p), rel);
    f->a = ckpt_arena_new(2048ULL << 20);
    if (!f->rel || !f->a)
        return oom(err);
    if (uns_src_get(p->j, f->rel, &f->src, err) != 0)
        return -1;
    /* Remote: the zip's records and data.pkl in a few ranged GETs. */
    uns_src_rd_cached(&rd, &cache, f->src, 0, f->src->size);
    struct ckpt_pickle_opts po = { .name = "data.pkl", .allow = NULL,
                                   .max_values = SIZE_MAX,
                                   .max_bytes = SIZE_MAX };
    int rc = ckpt_tzip_open(&f->z, &rd, err);
    if (rc == 0 && !(pe = ckpt_tzip_find(f->z, "data.pkl")))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "record 'data.pkl' missing");
    if (rc == 0)
        rc = ckpt_tzip_read(f->z, &rd, pe, MAX_PKL, &pkl, &plen, err);
    if (rc == 0)
        rc = ckpt_pickle_load(f->a, pkl, plen, &po, &root, NULL, err);
    if (rc == 0 && !(f->root = ckpt_pv_dict_items(root)))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "not a dict");
    free(pkl);
    uns_src_cache_release(&cache);
    if (rc != 0 && !strstr(err->msg, f->rel))
        ckpt_err_prefix(err, "%s", f->rel);
    return rc;
}

/* Tensor v of file f: its description and storage record, checked to
 * hold it. what names it in messages. 0, or -1 with err. */
static int file_tensor(struct dsfile *f, const struct ckpt_pv *v,
                       const char *what, struct ckpt_tensor *t,
                       const struct ckpt_tzip_entry **ze,
                       struct ckpt_err *err)
{
    char rec[64];
    struct ckpt_pv plain;
    /* torch.save spells a plain tensor with Python attributes (ZeRO-3's
     * fp32_flat_groups) _rebuild_from_type_v2(rebuild, torch.Tensor,
     * args, state): the rebuild call inside is the tensor. */
    if (v && v->kind == CKPT_PV_CALL &&
        ckpt_pv_is_global(ckpt_pv_call_global(v), "torch._tensor",
                          "_rebuild_from_type_v2") &&
        ckpt_pv_is_global(ckpt_pv_item(v->u.call.args, 1), "torch",
                          "Tensor") &&
        ckpt_pv_item(v->u.call.args, 0) && ckpt_pv_item(v->u.call.args, 2)) {
        plain = *v;
        plain.u.call.fn = ckpt_pv_item(v->u.call.args, 0);
        plain.u.call.args = ckpt_pv_item(v->u.call.args, 2);
        plain.u.call.state = NULL;
        v = &plain;
    }
    int rc = ckpt_tensor_from_pv(v, t, f->rel, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': %s is not a tensor",
                            f->rel, what);
    snprintf(rec, sizeof(rec), "data/%s", t->key);
    *ze = ckpt_tzip_find(f->z, rec);
    if (!*ze || ckpt_tensor_check_bounds(t, f->rel, err) != 0 ||
        (*ze)->size < t->storage_nbytes)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': storage record '%s' "
                            "of %s is missing or short", f->rel, rec, what);
    uns_src_note_record(f->src, (*ze)->data_off, (*ze)->size, (*ze)->crc,
                        f->z->prefix, (*ze)->name);
    return 0;
}

static struct ckpt_pv *field(const struct dsfile *f, const char *key)
{
    return ckpt_pv_dict_get(f->root, key);
}

/* --- the optimizer files ------------------------------------------------ */

static const char *optim_name(struct dsplan *p, int r, char *buf, size_t n)
{
    snprintf(buf, n, "%szero_pp_rank_%d_mp_rank_00_optim_states.pt",
             p->bf16 ? "bf16_" : "", r);
    return buf;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* partition_count: one int (ZeRO-3), or one per group (ZeRO-1/2; expert
 * groups may differ): the world is the largest, as zero_to_fp32 takes
 * it. 0, or -1 when it is missing or malformed. */
static int world_of(const struct ckpt_pv *pc, uint64_t *world)
{
    *world = 0;
    if (pc && (pc->kind == CKPT_PV_LIST || pc->kind == CKPT_PV_TUPLE)) {
        for (size_t i = 0; i < pc->u.seq.n; i++) {
            uint64_t x;
            if (get_u64(pc->u.seq.v[i], &x) != 0)
                return -1;
            *world = x > *world ? x : *world;
        }
    } else if (get_u64(pc, world) != 0) {
        return -1;
    }
    return *world >= 1 && *world <= MAX_RANKS ? 0 : -1;
}

/* optimizer_state_dict's ZeRO stage and world size: rank 0 sets them,
 * the others must agree. */
static int optim_header(struct dsplan *p, int r, const struct dsfile *f,
                        const struct ckpt_pv *osd, struct ckpt_err *err)
{
    uint64_t stage, world;
    if (!osd || enum_int(ckpt_pv_dict_get(osd, "zero_stage"), &stage) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s' is not a ZeRO "
                            "optimizer file (no optimizer_state_dict."
                            "zero_stage)", f->rel);
    if (stage < 1 || stage > 3)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': ZeRO stage %llu "
                            "(zero_to_fp32 reads stages 1 to 3)", f->rel,
                            (unsigned long long)stage);
    if (world_of(ckpt_pv_dict_get(osd, "partition_count"), &world) != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': no partition_count "
                            "between 1 and %d", f->rel, MAX_RANKS);
    if (r == 0) {
        p->stage = (int)stage;
        p->world = (int)world;
    } else if ((int)stage != p->stage || (int)world != p->world) {
        return ckpt_err_set(err, CKPT_EFORMAT, "ranks 0 and %d disagree on "
                            "the ZeRO stage or partition count (%s)", r,
                            f->rel);
    }
    return 0;
}

/* Rank r's flat groups: 1-D tensors of one dtype, as many as rank 0's. */
static int optim_groups(struct dsplan *p, int r, struct dsfile *f,
                        const struct ckpt_pv *osd, struct ckpt_err *err)
{
    const char *key = p->stage == 3 ? "fp32_flat_groups"
                                    : "single_partition_of_fp32_groups";
    const struct ckpt_pv *gs = ckpt_pv_dict_get(osd, key);
    if (!gs || (gs->kind != CKPT_PV_LIST && gs->kind != CKPT_PV_TUPLE) ||
        !gs->u.seq.n)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': no %s list", f->rel,
                            key);
    if (r == 0) {
        p->ngroups = gs->u.seq.n;
        p->groups = ckpt_xcalloc((size_t)p->world * p->ngroups,
                                 sizeof(*p->groups));
    } else if (gs->u.seq.n != p->ngroups) {
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': %zu parameter groups, "
                            "rank 0 %zu", f->rel, gs->u.seq.n, p->ngroups);
    }
    for (size_t g = 0; g < p->ngroups; g++) {
        struct ckpt_tensor t;
        const struct ckpt_tzip_entry *ze;
        char what[96];
        snprintf(what, sizeof(what), "%s[%zu]", key, g);
        if (file_tensor(f, gs->u.seq.v[g], what, &t, &ze, err) != 0)
            return -1;
        if (t.ndim != 1)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': %s is not 1-D",
                                f->rel, what);
        if (r == 0 && g == 0)
            p->gdtype = t.dtype;
        if (t.dtype != p->gdtype)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': %s is %s, rank "
                                "0's first group %s", f->rel, what,
                                t.dtype->name, p->gdtype->name);
        p->groups[(size_t)r * p->ngroups + g] = (struct dsgroup){
            f->src, ze->data_off, (uint64_t)t.size[0], t.storage_offset,
            t.stride[0], f->z->big_endian, t.requires_grad };
    }
    return 0;
}

/* Rank r's optimizer file (rank 0 sets stage, world size, groups). */
static int optim_rank(struct dsplan *p, int r, struct ckpt_err *err)
{
    char name[96];
    struct dsfile f;
    int rc = file_open(p, optim_name(p, r, name, sizeof(name)), &f, err);
    const struct ckpt_pv *osd = rc ? NULL
        : ckpt_pv_dict_items(field(&f, "optimizer_state_dict"));
    if (rc == 0)
        rc = optim_header(p, r, &f, osd, err);
    if (rc == 0)
        rc = optim_groups(p, r, &f, osd, err);
    file_close(&f);
    return rc;
}

/* The optimizer files: as many as the partition count says, the one of
 * every rank (zero_to_fp32 counts `*_optim_states.pt` against it). */
static int optim_files(struct dsplan *p, const struct uns_dir *d,
                       struct ckpt_err *err)
{
    char name[96];
    size_t n = 0;
    /* bf16_ names when any optimizer file has one (rank 0's may be the
     * one missing). */
    for (size_t i = 0; i < d->n; i++) {
        int o = ends_with(d->v[i].name, "_optim_states.pt");
        n += o;
        p->bf16 |= o && !strncmp(d->v[i].name, "bf16_", 5);
    }
    if (!n)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s': no "
                            "*_optim_states.pt files (zero_to_fp32 reads "
                            "the fp32 weights from a ZeRO optimizer's "
                            "files)", p->j->src.dir);
    optim_name(p, 0, name, sizeof(name));
    if (!uns_fs_has_file(d, name))
        return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing",
                            p->j->src.dir, name);
    if (uns_src_prefetch(p->j, ckpt_arena_strdup(ma(p), name),
                         uns_fs_find(d, name), err) != 0 ||
        optim_rank(p, 0, err) != 0)
        return -1;
    for (int r = 1; r < p->world; r++) {
        char r0[96];
        optim_name(p, r, name, sizeof(name));
        if (!uns_fs_has_file(d, name))
            return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing "
                                "(partition_count %d in %s)", p->j->src.dir,
                                name, p->world,
                                optim_name(p, 0, r0, sizeof(r0)));
    }
    if (n != (size_t)p->world)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': %zu *_optim_states.pt "
                            "files, but partition_count is %d",
                            p->j->src.dir, n, p->world);
    for (int r = 1; r < p->world; r++) {
        optim_name(p, r, name, sizeof(name));
        if (uns_src_prefetch(p->j, ckpt_arena_strdup(ma(p), name),
                             uns_fs_find(d, name), err) != 0 ||
            optim_rank(p, r, err) != 0)
            return -1;
    }
    return 0;
}

/* --- outputs ------------------------------------------------------------ */

static struct dsout *new_out(struct dsplan *p, const char *name);

/* Entry i of a {name: torch.Size} dict (param_shapes,
 * frozen_param_shapes) as a new output with its shape, numel in *numel;
 * NULL when the entry is not a name and a shape (the caller says where). */
static struct dsout *shape_entry(struct dsplan *p, const struct ckpt_pv *d,
                                 size_t i, uint64_t *numel)
{
    const struct ckpt_pv *k = d->u.dict.k[i];
    char *name = k->kind == CKPT_PV_STR ? mstr(p, k) : NULL;
    struct dsout *o = name ? new_out(p, name) : NULL;
    if (!o || shape_of(p, d->u.dict.v[i], &o->ndim, &o->size, numel) != 0)
        return NULL;
    return o;
}

static struct dsout *new_out(struct dsplan *p, const char *name)
{
    if (p->nouts == p->outcap) {
        p->outcap = p->outcap ? 2 * p->outcap : 64;
        p->outs = ckpt_xreallocarray(p->outs, p->outcap, sizeof(*p->outs));
        p->order = ckpt_xreallocarray(p->order, p->outcap,
                                      sizeof(*p->order));
    }
    struct dsout *o = &p->outs[p->nouts++];
    memset(o, 0, sizeof(*o));
    o->name = name;
    o->alias = -1;
    return o;
}

/* state_dict[name] = o (the last one added): a new key goes last, an
 * existing one keeps its place. */
static int put_key(struct dsplan *p, struct ckpt_err *err)
{
    size_t oi = p->nouts - 1;
    const char *name = p->outs[oi].name;
    uint64_t pos;
    if (tf_strmap_get(&p->byname, name, strlen(name), &pos)) {
        p->order[pos] = oi;
        return 0;
    }
    p->order[p->norder] = oi;
    return tf_strmap_put(&p->byname, name, strlen(name), p->norder++)
           ? oom(err) : 0;
}

static struct dslice *add_slice(struct dsout *o)
{
    if (o->nsl == o->slcap) {
        o->slcap = o->slcap ? 2 * o->slcap : 4;
        o->sl = ckpt_xreallocarray(o->sl, o->slcap, sizeof(*o->sl));
    }
    memset(&o->sl[o->nsl], 0, sizeof(o->sl[0]));
    return &o->sl[o->nsl++];
}

/* Output elements [start, start+count) are elements [at, at+count) of
 * group g of rank r. */
static void from_group(struct dsout *o, const struct dsgroup *g,
                       uint64_t start, uint64_t count, uint64_t at)
{
    struct dslice *s = add_slice(o);
    s->start = start;
    s->count = count;
    s->src = g->src;
    s->data = g->data;
    s->step = g->step;
    s->soff = g->soff + (int64_t)at * g->step;
    s->big_endian = g->big_endian;
}

/* A tensor of a model-states file, as stored (K_PLAIN) or turned
 * float32 (K_CONVERT). */
static int plain_out(struct dsplan *p, struct dsfile *f, const char *name,
                     const struct ckpt_pv *v, int to_f32,
                     struct ckpt_err *err)
{
    struct ckpt_tensor t;
    const struct ckpt_tzip_entry *ze;
    char what[600];
    snprintf(what, sizeof(what), "'%s'", name);
    if (file_tensor(f, v, what, &t, &ze, err) != 0)
        return -1;
    struct dsout *o = new_out(p, name);
    uint64_t *size = ckpt_arena_array(ma(p), (size_t)t.ndim + 1, 8);
    int64_t *stride = ckpt_arena_array(ma(p), (size_t)t.ndim + 1, 8);
    if (!size || !stride)
        return oom(err);
    for (int d = 0; d < t.ndim; d++)
        size[d] = (uint64_t)t.size[d];
    if (t.ndim)     /* a 0-dim tensor's stride may be NULL */
        memcpy(stride, t.stride, sizeof(int64_t) * (size_t)t.ndim);
    o->ndim = t.ndim;
    o->size = size;
    o->stride = stride;
    o->src = f->src;
    o->data = ze->data_off;
    o->soff = t.storage_offset;
    o->big_endian = f->z->big_endian;
    o->dtype = t.dtype;
    o->kind = K_PLAIN;
    o->requires_grad = t.requires_grad;
    if (to_f32 && strcmp(t.dtype->name, "float32") != 0) {
        int64_t s = 1;
        for (int d = t.ndim - 1; d >= 0; d--) {
            if (t.size[d] != 1 && stride[d] != s)
                return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': buffer "
                                    "'%s' is a non-contiguous %s view; "
                                    "only contiguous ones are turned "
                                    "float32", f->rel, name, t.dtype->name);
            s *= t.size[d];
        }
        if (strcmp(t.dtype->name, "float16") && strcmp(t.dtype->name,
            "bfloat16") && strcmp(t.dtype->name, "float64") &&
            strcmp(t.dtype->name, "int8") && strcmp(t.dtype->name, "uint8") &&
            strcmp(t.dtype->name, "int16") && strcmp(t.dtype->name, "int32") &&
            strcmp(t.dtype->name, "int64") && strcmp(t.dtype->name, "bool"))
            return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': buffer '%s' "
                                "is %s, which ckpt does not turn float32",
                                f->rel, name, t.dtype->name);
        o->kind = K_CONVERT;
        o->from = t.dtype;
        o->dtype = ckpt_dtype_by_name("float32");
    }
    return put_key(p, err);
}

/* The module's buffers, in module order, made float32. */
static int buffers(struct dsplan *p, struct dsfile *f, struct ckpt_err *err)
{
    const struct ckpt_pv *names = field(f, "buffer_names");
    const struct ckpt_pv *mod = ckpt_pv_dict_items(field(f, "module"));
    if (!names || (names->kind != CKPT_PV_LIST &&
                   names->kind != CKPT_PV_TUPLE) || !mod)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s' is not a model state "
                            "checkpoint (no buffer_names or module)", f->rel);
    for (size_t i = 0; i < mod->u.dict.n; i++) {
        const struct ckpt_pv *k = mod->u.dict.k[i];
        int buf = 0;
        for (size_t b = 0; k->kind == CKPT_PV_STR && !buf &&
                           b < names->u.seq.n; b++)
            buf = names->u.seq.v[b]->kind == CKPT_PV_STR &&
                  names->u.seq.v[b]->u.s.len == k->u.s.len &&
                  !memcmp(names->u.seq.v[b]->u.s.p, k->u.s.p, k->u.s.len);
        char *name = buf ? mstr(p, k) : NULL;
        if (buf && !name)
            return oom(err);
        if (buf && plain_out(p, f, name, mod->u.dict.v[i], 1, err) != 0)
            return -1;
    }
    return 0;
}

/* ZeRO-1/2: frozen_param_fragments[name], whole, as saved. */
static int frozen2(struct dsplan *p, struct dsfile *f, struct ckpt_err *err)
{
    const struct ckpt_pv *sh = ckpt_pv_dict_items(field(f,
                                                  "frozen_param_shapes"));
    const struct ckpt_pv *fr = ckpt_pv_dict_items(field(f,
                                                  "frozen_param_fragments"));
    for (size_t i = 0; sh && i < sh->u.dict.n; i++) {
        const struct ckpt_pv *k = sh->u.dict.k[i];
        char *name = k->kind == CKPT_PV_STR ? mstr(p, k) : NULL;
        const struct ckpt_pv *v = name && fr ? ckpt_pv_dict_get(fr, name)
                                             : NULL;
        if (!v)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': frozen parameter "
                                "%zu has no frozen_param_fragments entry",
                                f->rel, i);
        if (plain_out(p, f, name, v, 0, err) != 0)
            return -1;
    }
    return 0;
}

/* ZeRO-3: the fragments of every rank's model states end to end, cut to
 * the shape. */
static int frozen3(struct dsplan *p, struct dsfile *m, struct ckpt_err *err)
{
    const struct ckpt_pv *sh = ckpt_pv_dict_items(field(&m[0],
                                                  "frozen_param_shapes"));
    for (size_t i = 0; sh && i < sh->u.dict.n; i++) {
        uint64_t numel, at = 0;
        struct dsout *o = shape_entry(p, sh, i, &numel);
        if (!o)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': malformed "
                                "frozen_param_shapes entry %zu", m[0].rel, i);
        const char *name = o->name;
        o->kind = K_FLAT;
        for (int r = 0; r < p->world && at < numel; r++) {
            const struct ckpt_pv *fr = ckpt_pv_dict_items(field(&m[r],
                                            "frozen_param_fragments"));
            const struct ckpt_pv *v = fr ? ckpt_pv_dict_get(fr, name) : NULL;
            struct ckpt_tensor t;
            const struct ckpt_tzip_entry *ze;
            char what[600];
            snprintf(what, sizeof(what), "frozen fragment of '%s'", name);
            if (!v)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': no frozen "
                                    "fragment of '%s'", m[r].rel, name);
            if (file_tensor(&m[r], v, what, &t, &ze, err) != 0)
                return -1;
            if (t.ndim != 1 || (r && t.dtype != o->dtype))
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': %s is not 1-D "
                                    "or not of rank 0's dtype", m[r].rel,
                                    what);
            o->dtype = t.dtype;
            uint64_t n = (uint64_t)t.size[0];
            struct dsgroup g = { m[r].src, ze->data_off, n,
                                 t.storage_offset, t.stride[0],
                                 m[r].z->big_endian, t.requires_grad };
            o->requires_grad |= t.requires_grad;
            uint64_t take = n < numel - at ? n : numel - at;
            if (take)
                from_group(o, &g, at, take, 0);
            at += take;
        }
        if (at < numel)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': the ranks' frozen "
                                "fragments of '%s' hold %llu of its %llu "
                                "elements", p->j->src.dir, name,
                                (unsigned long long)at,
                                (unsigned long long)numel);
        if (put_key(p, err) != 0)
            return -1;
    }
    return 0;
}

/* Elements [pos, pos+count) of the logical vector v (the groups glued end
 * to end: group g of rank r for each g) become output elements from
 * start on. Returns -1 past the end. */
static int from_rank(struct dsplan *p, struct dsout *o, int r, uint64_t pos,
                     uint64_t count, uint64_t start)
{
    uint64_t base = 0;
    for (size_t g = 0; g < p->ngroups && count; g++) {
        const struct dsgroup *gr = &p->groups[(size_t)r * p->ngroups + g];
        uint64_t end = base + gr->numel;
        if (pos < end) {
            uint64_t take = end - pos < count ? end - pos : count;
            from_group(o, gr, start, take, pos - base);
            o->requires_grad |= gr->requires_grad;
            pos += take;
            start += take;
            count -= take;
        }
        base = end;
    }
    return count ? -1 : 0;
}

static int shapes_list(struct dsplan *p, struct dsfile *f,
                       const struct ckpt_pv **ps, struct ckpt_err *err)
{
    *ps = field(f, "param_shapes");
    if (!*ps || ((*ps)->kind != CKPT_PV_LIST && (*ps)->kind != CKPT_PV_TUPLE))
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s' records no "
                            "param_shapes (not a ZeRO checkpoint)", f->rel);
    (void)p;
    return 0;
}

static uint64_t align2w(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* ZeRO-1/2: each group's parameters one after another in the ranks'
 * partitions end to end. */
static int trainable2(struct dsplan *p, struct dsfile *f,
                      struct ckpt_err *err)
{
    const struct ckpt_pv *ps;
    if (shapes_list(p, f, &ps, err) != 0)
        return -1;
    if (ps->u.seq.n != p->ngroups)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': param_shapes lists "
                            "%zu groups, the optimizer files %zu", f->rel,
                            ps->u.seq.n, p->ngroups);
    for (size_t g = 0; g < p->ngroups; g++) {
        const struct ckpt_pv *d = ckpt_pv_dict_items(ps->u.seq.v[g]);
        uint64_t avail = 0, off = 0;
        for (int r = 0; r < p->world; r++)
            avail += p->groups[(size_t)r * p->ngroups + g].numel;
        for (size_t i = 0; d && i < d->u.dict.n; i++) {
            uint64_t numel;
            struct dsout *o = shape_entry(p, d, i, &numel);
            if (!o)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': malformed "
                                    "param_shapes entry %zu of group %zu",
                                    f->rel, i, g);
            const char *name = o->name;
            o->kind = K_FLAT;
            o->dtype = p->gdtype;
            if (numel > avail - off)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': parameter "
                                    "'%s' ends past the %llu elements of "
                                    "group %zu", p->j->src.dir, name,
                                    (unsigned long long)avail, g);
            /* Cut by the ranks' partitions of the group. */
            uint64_t base = 0, pos = off, left = numel;
            for (int r = 0; r < p->world && left; r++) {
                const struct dsgroup *gr =
                    &p->groups[(size_t)r * p->ngroups + g];
                uint64_t end = base + gr->numel;
                if (pos < end) {
                    uint64_t take = end - pos < left ? end - pos : left;
                    from_group(o, gr, pos - off, take, pos - base);
                    o->requires_grad |= gr->requires_grad;
                    pos += take;
                    left -= take;
                }
                base = end;
            }
            off += numel;
            if (put_key(p, err) != 0)
                return -1;
        }
        uint64_t a = 2 * (uint64_t)p->world;
        if (align2w(off, a) != align2w(avail, a))
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': group %zu: the "
                                "parameters take %llu of its %llu elements "
                                "(more than alignment padding left)",
                                p->j->src.dir, g, (unsigned long long)off,
                                (unsigned long long)avail);
    }
    return 0;
}

/* ZeRO-3: every parameter's part on every rank, in param_shapes order
 * (the groups' dicts merged). */
static int trainable3(struct dsplan *p, struct dsfile *f,
                      struct ckpt_err *err)
{
    const struct ckpt_pv *ps;
    uint64_t total = 0, off = 0, W = (uint64_t)p->world;
    if (shapes_list(p, f, &ps, err) != 0)
        return -1;
    for (size_t g = 0; g < p->ngroups; g++)
        total += p->groups[g].numel;
    for (int r = 1; r < p->world; r++)
        for (size_t g = 0; g < p->ngroups; g++)
            if (p->groups[(size_t)r * p->ngroups + g].numel !=
                p->groups[g].numel)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': flat group "
                                    "%zu of rank %d differs in size from "
                                    "rank 0's", p->j->src.dir, g, r);
    for (size_t gi = 0; gi < ps->u.seq.n; gi++) {
        const struct ckpt_pv *d = ckpt_pv_dict_items(ps->u.seq.v[gi]);
        for (size_t i = 0; d && i < d->u.dict.n; i++) {
            uint64_t numel;
            struct dsout *o = shape_entry(p, d, i, &numel);
            if (!o)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': malformed "
                                    "param_shapes entry %zu of group %zu",
                                    f->rel, i, gi);
            const char *name = o->name;
            if (tf_strmap_get(&p->byname, name, strlen(name), NULL))
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': '%s' is "
                                    "listed twice", f->rel, name);
            o->kind = K_FLAT;
            o->dtype = p->gdtype;
            uint64_t part = (numel + W - 1) / W;
            if (part > total - off)
                return ckpt_err_set(err, CKPT_EFORMAT, "'%s': parameter "
                                    "'%s' ends past the %llu elements each "
                                    "rank holds", p->j->src.dir, name,
                                    (unsigned long long)total);
            for (uint64_t r = 0; r < W && r * part < numel; r++) {
                uint64_t n = numel - r * part < part ? numel - r * part
                                                     : part;
                if (from_rank(p, o, (int)r, off, n, r * part) != 0)
                    return ckpt_err_set(err, CKPT_EINTERNAL, "'%s': range",
                                        name);
            }
            off += part;
            if (put_key(p, err) != 0)
                return -1;
        }
    }
    if (off != total)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': the parameters take "
                            "%llu of the %llu elements each rank holds",
                            p->j->src.dir, (unsigned long long)off,
                            (unsigned long long)total);
    return 0;
}

/* shared_params {name: source}: state_dict[name] = state_dict[source]
 * when the source is there. */
static int shared(struct dsplan *p, struct dsfile *f, struct ckpt_err *err)
{
    const struct ckpt_pv *sp = ckpt_pv_dict_items(field(f, "shared_params"));
    for (size_t i = 0; sp && i < sp->u.dict.n; i++) {
        const struct ckpt_pv *k = sp->u.dict.k[i], *v = sp->u.dict.v[i];
        uint64_t pos;
        if (k->kind != CKPT_PV_STR || v->kind != CKPT_PV_STR)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': malformed "
                                "shared_params", f->rel);
        if (!tf_strmap_get(&p->byname, v->u.s.p, v->u.s.len, &pos))
            continue;
        size_t target = p->order[pos];
        while (p->outs[target].alias >= 0)
            target = (size_t)p->outs[target].alias;
        char *name = mstr(p, k);
        if (!name)
            return oom(err);
        struct dsout *o = new_out(p, name);
        o->alias = (int)target;
        if (put_key(p, err) != 0)
            return -1;
    }
    return 0;
}

/* --- model states ---------------------------------------------------------- */

static int check_world(struct dsfile *f, struct ckpt_err *err)
{
    int64_t mp = 1;
    const struct ckpt_pv *v = field(f, "mp_world_size");
    if (v && (ckpt_pv_get_int(v, &mp) != 0 || mp != 1))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': mp_world_size "
                            "%lld: model-parallel ZeRO checkpoints are not "
                            "consolidated (zero_to_fp32 neither)", f->rel,
                            (long long)mp);
    return 0;
}

static int is_buffer(const struct ckpt_pv *names, const struct ckpt_pv *k)
{
    for (size_t b = 0; k->kind == CKPT_PV_STR && b < names->u.seq.n; b++)
        if (names->u.seq.v[b]->kind == CKPT_PV_STR &&
            names->u.seq.v[b]->u.s.len == k->u.s.len &&
            !memcmp(names->u.seq.v[b]->u.s.p, k->u.s.p, k->u.s.len))
            return 1;
    return 0;
}

/* Output o holds a parameter whose module tensor (empty in ZeRO-3's
 * model states) is of dtype dt: the fp32 master cast to it, as DeepSpeed
 * last copied it into the 16-bit partition (copy_, round to nearest
 * even). Only the casts checked against save_16bit_model's output. */
static int module_dtype(struct dsplan *p, struct dsout *o,
                        const struct ckpt_dtype *dt, const char *key,
                        struct ckpt_err *err)
{
    if (o->dtype == dt)
        return 0;
    if (o->kind == K_FLAT && o->dtype == p->gdtype &&
        !strcmp(o->dtype->name, "float32") && !strcmp(dt->name, "bfloat16")) {
        for (size_t i = 0; i < o->nsl; i++)
            if (o->sl[i].step != 1)
                return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': the "
                                    "flat group holding '%s' is strided",
                                    p->j->src.dir, key);
        o->from = o->dtype;
        o->dtype = dt;
        return 0;
    }
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': '%s' is %s in the "
                        "module, %s in the checkpoint: --weights module of "
                        "ZeRO-3 casts fp32 master weights to bfloat16 only "
                        "(the cast checked against DeepSpeed's "
                        "save_16bit_model)", p->j->src.dir, key, dt->name,
                        o->dtype->name);
}

/* ZeRO-3, --weights module: the state dict DeepSpeed's
 * _zero3_consolidated_16bit_state_dict (save_16bit_model) gives, in the
 * module's key order (rank 0's model states list it, every parameter
 * empty): buffers as the module holds them, parameters from the
 * partitions (frozen ones as saved, trainable ones cast to the module's
 * dtype), a tied one the same tensor as its source; no requires_grad. */
static int module3(struct dsplan *p, struct dsfile *f, struct ckpt_err *err)
{
    const struct ckpt_pv *names = field(f, "buffer_names");
    const struct ckpt_pv *mod = ckpt_pv_dict_items(field(f, "module"));
    if (!names || (names->kind != CKPT_PV_LIST &&
                   names->kind != CKPT_PV_TUPLE) || !mod)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s' is not a model state "
                            "checkpoint (no buffer_names or module)", f->rel);
    size_t *order = ckpt_xcalloc(mod->u.dict.n + 1, sizeof(*order));
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < mod->u.dict.n; i++) {
        const struct ckpt_pv *k = mod->u.dict.k[i];
        char *key = k->kind == CKPT_PV_STR ? mstr(p, k) : NULL;
        struct ckpt_tensor t;
        uint64_t pos;
        if (!key) {
            rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': module key %zu is "
                              "not a string", f->rel, i);
        } else if (is_buffer(names, k)) {
            if ((rc = plain_out(p, f, key, mod->u.dict.v[i], 0, err)) == 0)
                order[n++] = p->nouts - 1;
        } else if ((rc = ckpt_tensor_from_pv(mod->u.dict.v[i], &t, f->rel,
                                             err)) != 1) {
            if (rc == 0)
                ckpt_err_set(err, CKPT_EFORMAT, "'%s': module value '%s' "
                             "is not a tensor", f->rel, key);
            rc = -1;
        } else if (!tf_strmap_get(&p->byname, key, strlen(key), &pos)) {
            rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': module parameter "
                              "'%s' is not in param_shapes, "
                              "frozen_param_shapes or shared_params",
                              f->rel, key);
        } else {
            size_t oi = p->order[pos], target = oi;
            rc = 0;
            while (p->outs[target].alias >= 0)
                target = (size_t)p->outs[target].alias;
            rc = module_dtype(p, &p->outs[target], t.dtype, key, err);
            order[n++] = oi;
        }
    }
    for (size_t i = 0; i < p->nouts; i++)
        p->outs[i].requires_grad = 0;
    if (rc == 0) {
        free(p->order);
        p->order = order;
        p->norder = n;
    } else {
        free(order);
    }
    return rc;
}

static int model_states(struct dsplan *p, const struct uns_dir *d,
                        struct ckpt_err *err)
{
    int n = p->stage == 3 ? p->world : 1;
    struct dsfile *m = ckpt_xcalloc((size_t)n, sizeof(*m));
    int rc = 0;
    for (int r = 0; rc == 0 && r < n; r++) {
        char name[96];
        if (p->stage == 3)
            snprintf(name, sizeof(name), "zero_pp_rank_%d_mp_rank_00_"
                     "model_states.pt", r);
        else
            snprintf(name, sizeof(name), "mp_rank_00_model_states.pt");
        if (!uns_fs_has_file(d, name) && p->stage == 3)
            rc = ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing "
                              "(ZeRO-3 saves every rank's model states; "
                              "partition_count %d)", p->j->src.dir, name,
                              p->world);
        else if (!uns_fs_has_file(d, name))
            rc = ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing",
                              p->j->src.dir, name);
        if (rc == 0)
            rc = uns_src_prefetch(p->j, ckpt_arena_strdup(ma(p), name),
                                  uns_fs_find(d, name), err);
        if (rc == 0)
            rc = file_open(p, name, &m[r], err);
    }
    if (rc == 0)
        rc = check_world(&m[0], err);
    if (rc == 0 && p->module && p->stage != 3)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': ZeRO-%d optimizer "
                          "files without mp_rank_00_model_states.pt",
                          p->j->src.dir, p->stage);
    if (rc == 0 && !p->module)
        rc = buffers(p, &m[0], err);
    if (rc == 0)
        rc = p->stage == 3 ? frozen3(p, m, err) : frozen2(p, &m[0], err);
    if (rc == 0)
        rc = p->stage == 3 ? trainable3(p, &m[0], err)
                           : trainable2(p, &m[0], err);
    if (rc == 0)
        rc = shared(p, &m[0], err);
    if (rc == 0 && p->module)
        rc = module3(p, &m[0], err);
    for (int r = 0; r < n; r++)
        file_close(&m[r]);
    free(m);
    return rc;
}

/* --- --weights module ------------------------------------------------------ */

/* Output o (the last one added) is a view of the same record, offset,
 * shape and strides as an earlier one (a tied weight): it becomes that
 * one, as torch.load gives one storage for both. */
static void tie_view(struct dsplan *p)
{
    struct dsout *o = &p->outs[p->nouts - 1];
    for (size_t i = 0; i + 1 < p->nouts; i++) {
        const struct dsout *q = &p->outs[i];
        if (q->alias >= 0 || q->src != o->src || q->data != o->data ||
            q->soff != o->soff || q->dtype != o->dtype || q->ndim != o->ndim ||
            memcmp(q->size, o->size, sizeof(*o->size) * (size_t)o->ndim) ||
            memcmp(q->stride, o->stride, sizeof(*o->stride) * (size_t)o->ndim))
            continue;
        o->alias = (int)i;
        return;
    }
}

/* ZeRO-1/2: torch.load(mp_rank_00_model_states.pt)['module'], the
 * module's state dict as trained (engine.module_state_dict(): what
 * save_16bit_model writes for these stages), every tensor as saved. */
/* The module weights of a ZeRO-1/2 step come whole from its model
 * states, but a step some rank's optimizer file is missing from is an
 * interrupted save (the judge's verdict): refused as the master weights
 * are, every rank dp_world_size names present. */
static int saved_whole(struct dsplan *p, const struct uns_dir *d,
                       struct dsfile *f, struct ckpt_err *err)
{
    int64_t world = 0;
    const struct ckpt_pv *v = field(f, "dp_world_size");
    char name[96];
    if (!v || ckpt_pv_get_int(v, &world) != 0 || world < 1 || world > 65536)
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': no dp_world_size",
                            f->rel);
    for (size_t i = 0; i < d->n; i++)
        p->bf16 |= ends_with(d->v[i].name, "_optim_states.pt") &&
                   !strncmp(d->v[i].name, "bf16_", 5);
    for (int r = 0; r < (int)world; r++) {
        optim_name(p, r, name, sizeof(name));
        if (!uns_fs_has_file(d, name))
            return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing "
                                "(dp_world_size %lld in %s): the step's save "
                                "did not finish", p->j->src.dir, name,
                                (long long)world, f->rel);
    }
    return 0;
}

static int module_weights(struct dsplan *p, const struct uns_dir *d,
                          struct ckpt_err *err)
{
    const char *name = "mp_rank_00_model_states.pt";
    struct dsfile f;
    if (!uns_fs_has_file(d, name))
        return ckpt_err_set(err, CKPT_ENOTFOUND, "'%s/%s' is missing",
                            p->j->src.dir, name);
    if (uns_src_prefetch(p->j, ckpt_arena_strdup(ma(p), name),
                         uns_fs_find(d, name), err) != 0 ||
        file_open(p, name, &f, err) != 0)
        return -1;
    int rc = check_world(&f, err);
    if (rc == 0)
        rc = saved_whole(p, d, &f, err);
    const struct ckpt_pv *mod = ckpt_pv_dict_items(field(&f, "module"));
    if (rc == 0 && !mod)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' holds no module state "
                          "dict", f.rel);
    for (size_t i = 0; rc == 0 && i < mod->u.dict.n; i++) {
        const struct ckpt_pv *k = mod->u.dict.k[i];
        char *key = k->kind == CKPT_PV_STR ? mstr(p, k) : NULL;
        if (!key)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': module key %zu is "
                              "not a string", f.rel, i);
        else if ((rc = plain_out(p, &f, key, mod->u.dict.v[i], 0, err)) == 0)
            tie_view(p);
    }
    file_close(&f);
    return rc;
}

/* --- entries ------------------------------------------------------------ */

static int64_t *row_strides(struct dsplan *p, int ndim, const uint64_t *size)
{
    int64_t *st = ckpt_arena_array(ma(p), (size_t)ndim + 1, 8);
    for (int d = ndim - 1; st && d >= 0; d--)
        st[d] = d == ndim - 1 ? 1 : st[d + 1] * (int64_t)size[d + 1];
    return st;
}

/* A chunk per box of [start, start+count) of o's flattening, its first
 * element at element soff of the record, every step elements after it
 * (row: o's row-major strides). Decoded chunks (proto->from) are read
 * whole and laid out contiguously within their box. */
static int add_boxes(struct dsplan *p, struct ckpt_dcp_entry *e,
                     struct dsloc *lv, const struct dsout *o,
                     uint64_t start, uint64_t count, int64_t soff,
                     int64_t step, const int64_t *row,
                     const struct dsloc *proto, struct ckpt_err *err)
{
    struct flat_box boxes[2 * CKPT_MAX_DIMS];
    int nb = uns_flat_boxes(o->ndim, o->size, start, count, boxes,
                            2 * CKPT_MAX_DIMS);
    if (nb < 0)
        return ckpt_err_set(err, CKPT_EINTERNAL, "'%s': range does not fit",
                            o->name);
    for (int b = 0; b < nb; b++) {
        size_t c = e->nchunks++;
        uint64_t *off = ckpt_arena_array(ma(p), (size_t)o->ndim + 1, 8);
        uint64_t *len = ckpt_arena_array(ma(p), (size_t)o->ndim + 1, 8);
        int64_t *st = ckpt_arena_array(ma(p), (size_t)o->ndim + 1, 8);
        if (!off || !len || !st)
            return oom(err);
        if (o->ndim) {
            memcpy(off, boxes[b].off, sizeof(*off) * (size_t)o->ndim);
            memcpy(len, boxes[b].len, sizeof(*len) * (size_t)o->ndim);
        }
        e->chunks[c].offsets = off;
        e->chunks[c].sizes = len;
        e->chunks[c].st.file = proto->src->name;
        e->chunks[c].st.offset = proto->data;
        lv[c] = *proto;
        lv[c].stride = st;
        lv[c].soff = soff + (int64_t)(boxes[b].first - start) * step;
        uint64_t vol = 1;
        for (int d = o->ndim - 1; d >= 0; d--) {
            st[d] = proto->from ? (int64_t)vol : row[d] * step;
            vol *= len[d];
        }
        lv[c].count = vol;
    }
    return 0;
}

static size_t max_chunks(const struct dsout *o)
{
    size_t per = 2 * (size_t)(o->ndim ? o->ndim : 1);
    if (o->kind == K_FLAT && o->from) {
        size_t n = 1;
        for (size_t i = 0; i < o->nsl; i++)
            n += (size_t)((o->sl[i].count + CONV_PIECE - 1) / CONV_PIECE) *
                 per;
        return n;
    }
    if (o->kind == K_FLAT)
        return o->nsl * per + 1;
    if (o->kind == K_PLAIN)
        return 1;
    uint64_t n = 1;
    for (int d = 0; d < o->ndim; d++)
        n *= o->size[d];
    return (size_t)((n + CONV_PIECE - 1) / CONV_PIECE) * per + 1;
}

/* Entry e (named name) of output o. */
static int make_entry(struct dsplan *p, struct ckpt_dcp_entry *e,
                      const char *name, const struct dsout *o,
                      struct ckpt_err *err)
{
    struct ckpt_arena *a = p->j->plan.arena;
    size_t ei = (size_t)(e - p->j->plan.meta->entries);
    size_t cap = max_chunks(o);
    struct ckpt_pv *path = ckpt_pv_new(a, CKPT_PV_TUPLE);
    e->fqn = ckpt_arena_strdup(a, name);
    if (!path || !e->fqn ||
        ckpt_pv_push(a, path, ckpt_pv_str(a, name, strlen(name))) != 0)
        return oom(err);
    e->path = path;
    e->kind = CKPT_DCP_TENSOR;
    e->dtype = o->dtype;
    e->ndim = o->ndim;
    e->size = o->size;
    e->chunks = ckpt_arena_array(ma(p), cap, sizeof(*e->chunks));
    p->locs[ei] = ckpt_xcalloc(cap, sizeof(**p->locs));
    const int64_t *row = row_strides(p, o->ndim, o->size);
    if (!e->chunks || !row)
        return oom(err);
    e->chunkcap = cap;
    struct dsloc *lv = p->locs[ei];
    if (o->kind == K_PLAIN) {
        uint64_t *off = ckpt_arena_array(ma(p), (size_t)o->ndim + 1, 8);
        if (!off)
            return oom(err);
        e->nchunks = 1;
        e->chunks[0].offsets = off;
        e->chunks[0].sizes = o->size;
        e->chunks[0].st.file = o->src->name;
        e->chunks[0].st.offset = o->data;
        lv[0] = (struct dsloc){ o->src, o->data, o->soff, o->stride,
                                o->big_endian, NULL, 0 };
        return 0;
    }
    if (o->kind == K_CONVERT) {
        uint64_t n = 1;
        struct dsloc proto = { o->src, o->data, 0, NULL, o->big_endian,
                               o->from, 0 };
        p->conv[ei] = 1;
        for (int d = 0; d < o->ndim; d++)
            n *= o->size[d];
        for (uint64_t at = 0; at < n; at += CONV_PIECE) {
            uint64_t cnt = n - at < CONV_PIECE ? n - at : CONV_PIECE;
            if (add_boxes(p, e, lv, o, at, cnt, o->soff + (int64_t)at, 1,
                          row, &proto, err) != 0)
                return -1;
        }
        return 0;
    }
    /* A cast slice (step 1) is decoded CONV_PIECE elements at a time. */
    p->conv[ei] = o->from != NULL;
    for (size_t i = 0; i < o->nsl; i++) {
        const struct dslice *s = &o->sl[i];
        struct dsloc proto = { s->src, s->data, 0, NULL, s->big_endian,
                               o->from, 0 };
        uint64_t piece = o->from ? CONV_PIECE : s->count;
        for (uint64_t at = 0; at < s->count; at += piece) {
            uint64_t cnt = s->count - at < piece ? s->count - at : piece;
            if (add_boxes(p, e, lv, o, s->start + at, cnt,
                          s->soff + (int64_t)at * s->step, s->step, row,
                          &proto, err) != 0)
                return -1;
        }
    }
    return 0;
}

/* One entry per output tensor in key order; a tied name shares its
 * source's entry in a torch file and is an entry of its own (the same
 * chunks) in safetensors. */
static int make_entries(struct dsplan *p, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = p->j->plan.meta;
    int st = p->j->o->format != CKPT_FORMAT_TORCH;
    m->entries = ckpt_arena_array(m->arena, p->norder + 1,
                                  sizeof(*m->entries));
    p->locs = ckpt_xcalloc(p->norder + 1, sizeof(*p->locs));
    p->conv = ckpt_xcalloc(p->norder + 1, sizeof(*p->conv));
    p->rg = ckpt_xcalloc(p->norder + 1, sizeof(*p->rg));
    if (!m->entries)
        return oom(err);
    for (size_t i = 0; i < p->norder; i++) {
        struct dsout *o = &p->outs[p->order[i]];
        if (o->alias >= 0 && !st)
            continue;
        const struct dsout *src = o->alias >= 0 ? &p->outs[o->alias] : o;
        o->entry = m->n++;
        p->nlocs = m->n;
        p->rg[o->entry] = src->requires_grad;
        if (make_entry(p, &m->entries[o->entry], o->name, src, err) != 0)
            return -1;
    }
    return 0;
}

static int locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                  struct ckpt_err *err)
{
    struct dsplan *p = j->plan.fmtplan;
    size_t ei = (size_t)(t->e - j->plan.meta->entries);
    size_t ci = (size_t)(c->meta - t->e->chunks);
    const struct dsloc *l = &p->locs[ei][ci];
    (void)err;
    c->src = l->src;
    c->item_off = 0;
    c->data = l->data;
    if (t->e->ndim)
        memcpy(c->stride, l->stride, sizeof(int64_t) * (size_t)t->e->ndim);
    c->soff = l->from ? 0 : l->soff;
    c->big_endian = l->from ? 0 : l->big_endian;
    c->dec = l->from ? l->count * t->e->dtype->itemsize : 0;
    return 0;
}

static void swap_in_place(unsigned char *p, uint64_t n, unsigned size)
{
    for (uint64_t i = 0; i < n; i++)
        for (unsigned a = 0, b = size - 1; a < b; a++, b--) {
            unsigned char t = p[i * size + a];
            p[i * size + a] = p[i * size + b];
            p[i * size + b] = t;
        }
}

static int decode(struct ujob *j, const struct utensor *t,
                  const struct uchunk *c, char *out, struct ckpt_err *err)
{
    struct dsplan *p = j->plan.fmtplan;
    size_t ei = (size_t)(t->e - j->plan.meta->entries);
    size_t ci = (size_t)(c->meta - t->e->chunks);
    const struct dsloc *l = &p->locs[ei][ci];
    unsigned size = l->from->itemsize;
    unsigned char *in = ckpt_xmalloc((size_t)(l->count * size) + 1);
    int rc = uns_src_read(l->src, l->data + (uint64_t)l->soff * size, in,
                          (size_t)(l->count * size), err);
    if (rc == 0 && l->big_endian && size > 1)
        swap_in_place(in, l->count, size);
    if (rc == 0 && t->e->dtype->itemsize == 4) {
        uns_cast_to_f32(l->from, in, l->count, (float *)(void *)out);
    } else if (rc == 0) {   /* bfloat16 (module_dtype) */
        float *f = ckpt_xmalloc((size_t)(l->count * 4) + 1);
        uns_cast_to_f32(l->from, in, l->count, f);
        uns_cast_f32_to_bf16(f, l->count, (unsigned char *)out);
        free(f);
    }
    free(in);
    return rc;
}

/* --- output graph ----------------------------------------------------------- */

/* {name: tensor} in key order; a tied name is its source's node (one
 * storage, as torch.save writes a tensor held twice). */
static int build_root(struct dsplan *p, struct ckpt_pv **root,
                      struct ckpt_err *err)
{
    struct ujob *j = p->j;
    struct ckpt_arena *a = j->plan.arena;
    struct ckpt_dcp_meta *m = j->plan.meta;
    int st = j->o->format != CKPT_FORMAT_TORCH;
    j->plan.values = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.values));
    j->plan.paths = ckpt_xcalloc(m->n + 1, sizeof(*j->plan.paths));
    if (!(*root = ckpt_pv_new(a, CKPT_PV_DICT)))
        return oom(err);
    for (size_t i = 0; i < m->n; i++) {
        j->plan.paths[i] = m->entries[i].path;
        struct ckpt_pv *v = uns_tree_tensor(j, &j->plan.tensors[i]);
        if (!(j->plan.values[i] = v))
            return oom(err);
        /* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
         * hooks): the optimizer's flat groups require grad, and so do
         * zero_to_fp32's views of them. */
        if (p->rg[i] && !(v->u.call.args->u.seq.v[4] = ckpt_pv_bool(a, 1)))
            return oom(err);
    }
    for (size_t i = 0; i < p->norder; i++) {
        const struct dsout *o = &p->outs[p->order[i]];
        size_t e = o->alias >= 0 && !st ? p->outs[o->alias].entry : o->entry;
        if (ckpt_pv_dict_add(a, *root, ckpt_pv_str(a, o->name,
                                                   strlen(o->name)),
                             j->plan.values[e]) != 0)
            return oom(err);
    }
    return 0;
}

static void plan_free(void *v)
{
    struct dsplan *p = v;
    if (!p)
        return;
    for (size_t i = 0; i < p->nouts; i++)
        free(p->outs[i].sl);
    free(p->outs);
    free(p->order);
    for (size_t i = 0; i < p->nlocs; i++)
        free(p->locs[i]);
    free(p->locs);
    free(p->conv);
    free(p->rg);
    free(p->groups);
    tf_strmap_release(&p->byname);
    free(p);
}

/* An HF Trainer checkpoint-N whose weights the engine's checkpoint holds
 * (checkpoint-N/global_stepN/, named by checkpoint-N/latest; hf/judge.c
 * judges such a step DeepSpeed's): that directory, malloced; else src. */
static char *tag_dir(struct ujob *j, const char *src)
{
    struct uns_dir d;
    struct ckpt_err e = CKPT_ERR_INIT;
    char *tag = NULL, *at = NULL;
    size_t len;
    if (uns_fs_list(j, src, 0, &d, &e) != 0)
        return ckpt_xstrdup(src);
    int states = 0;
    for (size_t i = 0; i < d.n; i++)
        states |= ckpt_str_endswith(d.v[i].name, "model_states.pt");
    const struct uns_dent *l = states ? NULL : uns_fs_find(&d, "latest");
    char *lp = l ? ckpt_path_join(src, "latest") : NULL;
    if (lp && uns_fs_read(j, lp, l, 4096, &tag, &len, &e) == 0) {
        while (len && (tag[len - 1] == '\n' || tag[len - 1] == ' '))
            tag[--len] = '\0';
        const struct uns_dent *t = uns_fs_find(&d, tag);
        if (len && !strchr(tag, '/') && strcmp(tag, "..") && t)
            at = ckpt_path_join(src, tag);
    }
    free(lp);
    free(tag);
    uns_fs_free(&d);
    return at ? at : ckpt_xstrdup(src);
}

int uns_ds_plan(struct ujob *j, const char *top, struct ckpt_err *err)
{
    struct dsplan *p = ckpt_xcalloc(1, sizeof(*p));
    struct ckpt_pv *root;
    struct uns_dir d;
    int listed = 0;
    p->j = j;
    char *src = tag_dir(j, top);
    int rc = uns_plan_own_init(j, src, "mp_rank_00_model_states.pt", p,
                               locate, err);
    /* One state dict, not an OLMo step: checkpoint.pt unless asked. */
    j->src.olmo_step = 0;
    j->plan.olmo = j->o->layout == CKPT_LAYOUT_OLMO;
    j->plan.decode = decode;
    j->plan.fmtfree = plan_free;
    if (rc == 0)
        rc = uns_fs_list(j, src, 0, &d, err);
    listed = rc == 0;
    p->module = j->o->weights == CKPT_WEIGHTS_MODULE;
    /* ZeRO-1/2's module weights are whole in the model states; ZeRO-3's
     * come from the partitions, as the master weights do. */
    int whole = rc == 0 && p->module && (uns_fs_has_file(&d, "mp_rank_00_model_states.pt")
                || !uns_fs_has_file(&d, "zero_pp_rank_0_mp_rank_00_model_"
                                        "states.pt"));
    if (rc == 0 && whole)
        rc = module_weights(p, &d, err);
    else if (rc == 0)
        rc = optim_files(p, &d, err);
    if (rc == 0 && !whole && p->stage == 3)
        j->src.metaname = "zero_pp_rank_0_mp_rank_00_model_states.pt";
    if (rc == 0 && !whole)
        rc = model_states(p, &d, err);
    if (listed)
        uns_fs_free(&d);
    if (rc == 0)
        rc = make_entries(p, err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = build_root(p, &root, err);
    if (rc == 0)
        rc = trainer_layout(j, root, err);
    if (rc != 0 && err->msg[0] && !strstr(err->msg, src))
        ckpt_err_prefix(err, "%s", src);
    free(src);
    return rc;
}
