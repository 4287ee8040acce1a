/*
 * hf/export.c - the layout of `ckpt unshard --format hf` (hf/hf.h).
 *
 * The planner has found every tensor of the checkpoint; here:
 *
 * 1. The model's tensors: those under the state dict's top-level
 *    "model" entry (DCP of accelerate FSDP and OLMo torch_new, OLMo's
 *    legacy, local and olmo_core steps), named by their path below it;
 *    or, where nothing is nested under "model" (DeepSpeed's consolidated
 *    state dict, safetensors files), every tensor by its key. Optimizer
 *    and trainer state is left out (file -1: never read).
 * 2. A family the caller hands in (struct hf_names) maps them to HF
 *    names: OLMo's (trainers/olmo/export_hf.c), which also makes
 *    config.json, or a trainer's own (hf_names.own: Megatron's); else the
 *    names are HF's already (HF Trainer, accelerate, DeepSpeed, DCP
 *    written with HF keys) and config.json comes from the checkpoint (or its run, or --config-dir), copied; a
 *    tied model's lm_head.weight is left out, as save_pretrained does.
 * 3. Each piece becomes an output tensor: the tensor itself, or a slice
 *    of its rows (utensor.whole: q/k/v out of OLMo's fused att_proj;
 *    rows in blocks, Megatron's per-group q/k/v; one layer of Megatron
 *    torch_dist's stacked layers), cast with --dtype (utensor.cast).
 *    A trainer with names of its own maps them itself (hf_names.own:
 *    Megatron's).
 * 4. Shards as transformers 5 save_pretrained cuts them: tensors in name
 *    order, a new shard when the next one would pass --max-shard-size
 *    (default 50 GB, 50e9 bytes, transformers' default), names
 *    model-0000K-of-0000N.safetensors and model.safetensors.index.json
 *    ({"metadata": {"total_parameters", "total_size"}, "weight_map"},
 *    sorted, indent 2); one shard is model.safetensors. Inside a file
 *    tensors go in safetensors' order (dtype, largest first, then name),
 *    header {"__metadata__":{"format":"pt"}, ...} padded with spaces to
 *    8 bytes: the bytes safetensors.torch.save_file writes.
 * 5. Beside them: config.json, generation_config.json (made, or copied
 *    from the checkpoint where it has one), and the tokenizer files the
 *    checkpoint (else its run, else --config-dir) holds, copied.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/run.h"
#include "ckpt/util.h"
#include "ckpt/yaml.h"
#include "merge/engine/engine.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

#define DEFAULT_SHARD 50000000000ULL    /* transformers 5: "50GB" */
#define AUX_MAX (64u << 20)             /* config files read whole */

/* Files copied beside the weights when the checkpoint holds them. */
static const char *const tokenizer_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt",
    "tokenizer.model", "spiece.model", "chat_template.jinja",
    "chat_template.json", NULL
};

void uns_hf_add_layer(struct hf_map *m, char *name, size_t src, int64_t layer,
                      uint64_t row0, uint64_t rows, uint64_t blk,
                      uint64_t stride)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->v = ckpt_xreallocarray(m->v, m->cap, sizeof(*m->v));
    }
    m->v[m->n++] = (struct hf_piece){ name, src, row0, rows, blk, stride,
                                      layer };
}

void uns_hf_add(struct hf_map *m, char *name, size_t src, uint64_t row0,
                uint64_t rows)
{
    uns_hf_add_layer(m, name, src, -1, row0, rows, 0, 0);
}

long uns_hf_find(const struct hf_model *mt, const char *name)
{
    for (size_t i = 0; i < mt->n; i++)
        if (!strcmp(mt->v[i].name, name))
            return (long)i;
    return -1;
}

static void map_release(struct hf_map *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i].name);
    free(m->v);
    cJSON_Delete(m->config);
    cJSON_Delete(m->generation);
}

/* --- 1. the model's tensors ------------------------------------------- */

static const struct ckpt_pv *path_of(const struct ujob *j,
                                     const struct utensor *t)
{
    return j->plan.paths[t->e - j->plan.meta->entries];
}

static int under_model(const struct ckpt_pv *p)
{
    const struct ckpt_pv *k = p->u.seq.v[0];
    return p->u.seq.n >= 2 && k->kind == CKPT_PV_STR &&
           !strcmp(k->u.s.p, "model");
}

/* The path's keys from `from` on, joined with dots (in the arena). */
static const char *join(struct ujob *j, const struct ckpt_pv *p, size_t from)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    for (size_t i = from; i < p->u.seq.n; i++) {
        const struct ckpt_pv *k = p->u.seq.v[i];
        if (i > from)
            ckpt_buf_addch(&b, '.');
        if (k->kind == CKPT_PV_STR)
            ckpt_buf_add(&b, k->u.s.p, k->u.s.len);
        else
            ckpt_buf_addf(&b, "%lld", (long long)k->u.i);
    }
    char *s = ckpt_arena_strndup(j->plan.arena, b.ptr, b.len);
    ckpt_buf_release(&b);
    return s;
}

static int model_tensors(struct ujob *j, struct hf_model *mt,
                         struct ckpt_err *err)
{
    int nested = 0;
    for (size_t i = 0; i < j->plan.ntensors && !nested; i++)
        nested = under_model(path_of(j, &j->plan.tensors[i]));
    mt->v = ckpt_xcalloc(j->plan.ntensors + 1, sizeof(*mt->v));
    mt->n = 0;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        struct utensor *t = &j->plan.tensors[i];
        const struct ckpt_pv *p = path_of(j, t);
        t->file = -1;
        if (nested && !under_model(p))
            continue;
        const char *name = join(j, p, nested ? 1 : 0);
        if (!name)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        mt->v[mt->n].name = name;
        mt->v[mt->n++].t = t;
    }
    if (!mt->n)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: no model weights (no "
                            "tensor under a top-level 'model' entry, or "
                            "none at all)", j->src.top);
    return 0;
}

/* --- files around the weights ------------------------------------------- */

/* Where a file NAME beside the weights is looked for, first found wins:
 * --config-dir (local), the checkpoint, the directory above it (the run,
 * or the checkpoint-N of an accelerate pytorch_model_fsdp_0/ given
 * directly). *local: the path is a local file, not one of SRC. */
static char *find_aux(struct ujob *j, const char *name, int *local)
{
    struct stat sb;
    uint64_t size;
    struct ckpt_err e;
    if (j->o->config_dir) {
        char *p = ckpt_path_join(j->o->config_dir, name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
            *local = 1;
            return p;
        }
        free(p);
    }
    *local = !j->src.st;
    char *p = ckpt_path_join(j->src.top, name);
    if (uns_src_stat(j, p, &size, &e) == 0)
        return p;
    free(p);
    if (!*j->src.top || !strcmp(j->src.top, "/"))
        return NULL;
    char *up = ckpt_path_dirname(j->src.top);
    p = ckpt_path_join(up, name);
    free(up);
    if (uns_src_stat(j, p, &size, &e) == 0)
        return p;
    free(p);
    return NULL;
}

static int read_aux(struct ujob *j, const char *path, int local, char **data,
                    size_t *len, struct ckpt_err *err)
{
    struct usrc s;
    if (uns_src_file(j, path, local, &s, err) != 0)
        return -1;
    int rc = s.size > AUX_MAX
        ? ckpt_err_set(err, CKPT_EFORMAT, "'%s' is larger than %u bytes",
                       path, AUX_MAX)
        : 0;
    *data = rc ? NULL : ckpt_xmalloc((size_t)s.size + 1);
    if (rc == 0 && uns_src_read(&s, 0, *data, (size_t)s.size, err) != 0)
        rc = -1;
    if (s.fd >= 0)
        close(s.fd);
    if (rc != 0) {
        free(*data);
        *data = NULL;
        return -1;
    }
    (*data)[s.size] = '\0';
    *len = (size_t)s.size;
    return 0;
}

static struct ufile *new_file(struct ujob *j, char *name)
{
    j->dst.files = ckpt_xreallocarray(j->dst.files, j->dst.nfiles + 1,
                                      sizeof(*j->dst.files));
    struct ufile *f = &j->dst.files[j->dst.nfiles++];
    memset(f, 0, sizeof(*f));
    f->name = name;
    f->prefix = ckpt_xstrdup("");
    f->fd = -1;
    ckpt_buf_init(&f->head);
    return f;
}

/* A file whose whole content is text (taken over). */
static void text_file(struct ujob *j, const char *name, char *text)
{
    struct ufile *f = new_file(j, ckpt_xstrdup(name));
    f->raw = 1;
    ckpt_buf_addstr(&f->head, text);
    f->size = f->head.len;
    free(text);
}

/* A file copied from path (its size from a stat). */
static void copy_file(struct ujob *j, const char *name, char *path,
                      int local)
{
    struct stat sb;
    uint64_t size = 0;
    struct ckpt_err e;
    if (local)
        size = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    else
        uns_src_stat(j, path, &size, &e);
    struct ufile *f = new_file(j, ckpt_xstrdup(name));
    f->copy_from = path;
    f->copy_local = local;
    f->size = size;
}

/* --- 2. the families --------------------------------------------------- */

/* A trainer's names read with config.yaml (OLMo's): 1 taken, 0 not its
 * names. OLMo's names are told by their embedding. */
static int yaml_family(struct ujob *j, const struct hf_model *mt,
                       const struct hf_names *names, struct hf_map *m,
                       struct ckpt_err *err)
{
    if (!names || !names->with_yaml ||
        uns_hf_find(mt, "transformer.wte.weight") < 0)
        return 0;
    int local;
    char *path = find_aux(j, "config.yaml", &local), *text = NULL;
    cJSON *cfg = NULL;
    size_t len;
    struct stat sb;
    /* The run's config.yaml that run mode passes (a scratch copy for a
     * compressed archive). */
    if (!path && j->o->config_yaml) {
        path = ckpt_xstrdup(j->o->config_yaml);
        local = !j->o->storage;
        if (local && (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))) {
            free(path);
            path = NULL;
        }
    }
    int rc = 0;
    if (path && (read_aux(j, path, local, &text, &len, err) != 0 ||
                 ckpt_yaml_parse(text, len, path, &cfg, err) != 0))
        rc = -1;
    if (rc == 0)
        rc = names->with_yaml(mt, cfg, path, m, err);
    cJSON_Delete(cfg);
    free(text);
    free(path);
    return rc;
}

/* HF names already (or OLMo-core's, renamed: olmo/export_hf.c): config.json
 * from the checkpoint, copied; a tied lm_head.weight left out. */
static int load_config(struct ujob *j, cJSON **config, char **config_path,
                       int *config_local, struct ckpt_err *err)
{
    char *text = NULL;
    size_t len;
    *config_path = find_aux(j, "config.json", config_local);
    if (!*config_path)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no config.json in the "
                            "checkpoint or the directory above it (give "
                            "the model's with --config-dir DIR)",
                            j->src.top);
    if (read_aux(j, *config_path, *config_local, &text, &len, err) != 0)
        return -1;
    *config = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(*config))
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s' is not a JSON object",
                            *config_path);
    return 0;
}

static int hf_family(struct ujob *j, const struct hf_model *mt,
                     const struct hf_names *names, struct hf_map *m,
                     cJSON **config, char **config_path,
                     int *config_local, struct ckpt_err *err)
{
    if (load_config(j, config, config_path, config_local, err) != 0)
        return -1;
    int rc = names && names->with_json ?
             names->with_json(mt, *config, m, err) : 0;
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(*config,
                                                        "tie_word_embeddings");
    int tied = cJSON_IsTrue(tie);
    for (size_t i = 0; i < mt->n; i++) {
        if (tied && !strcmp(mt->v[i].name, "lm_head.weight"))
            continue;
        const struct ckpt_dcp_entry *e = mt->v[i].t->e;
        uns_hf_add(m, ckpt_xstrdup(mt->v[i].name), i, 0,
                   e->ndim ? e->size[0] : 1);
    }
    m->family = "hf";
    return 0;
}

/* --- 3. output tensors -------------------------------------------------- */

static int is_float(const struct ckpt_dtype *d)
{
    return !strcmp(d->name, "float32") || !strcmp(d->name, "bfloat16") ||
           !strcmp(d->name, "float16") || !strcmp(d->name, "float64");
}

/* A slice of rows [row0, row0 + rows) of w, named name. */
static int make_slice(struct ujob *j, struct utensor *s, struct utensor *w,
                      const char *name, const struct hf_piece *p,
                      struct ckpt_err *err)
{
    struct ckpt_dcp_entry *e = ckpt_arena_array(j->plan.arena, 1, sizeof(*e));
    uint64_t *size = ckpt_arena_array(j->plan.arena, (size_t)w->e->ndim + 1,
                                      sizeof(*size));
    if (!e || !size)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    *e = *w->e;
    memcpy(size, w->e->size, sizeof(*size) * (size_t)w->e->ndim);
    /* A layer of stacked layers: [1, rows, ...] (header without the 1). */
    int rd = p->layer >= 0 ? 1 : 0;
    uint64_t last = p->rows ? p->row0 + (p->blk ? ((p->rows - 1) / p->blk) *
                                         p->stride + (p->rows - 1) % p->blk
                                                 : p->rows - 1)
                            : 0;
    if (w->e->ndim <= rd || !p->rows || last >= w->e->size[rd] ||
        (p->blk && p->stride < p->blk) ||
        (rd && (uint64_t)p->layer >= w->e->size[0]))
        return ckpt_err_set(err, CKPT_EFORMAT, "tensor '%s': '%s' is not "
                            "inside it", w->e->fqn, name);
    uint64_t per = w->nbytes / w->e->size[0];
    if (rd)
        per = per / w->e->size[1];
    size[rd] = p->rows;
    if (rd)
        size[0] = 1;
    e->size = size;
    e->fqn = name;
    memset(s, 0, sizeof(*s));
    s->e = e;
    s->chunks = w->chunks;
    s->row0 = p->row0;
    s->rblk = p->blk;
    s->rstride = p->stride;
    s->stacked = rd;
    s->layer = rd ? (uint64_t)p->layer : 0;
    s->file = -1;
    s->nbytes = per * p->rows;
    uns_plan_cut_bands(s, j->plan.band);
    return 0;
}

/* The map's pieces as output tensors, appended to the plan's (whose
 * array is reallocated: wholes are linked after). */
static int make_outputs(struct ujob *j, const struct hf_model *mt,
                        const struct hf_map *m, struct ckpt_err *err)
{
    size_t n0 = j->plan.ntensors;
    const struct ckpt_dtype *to = uns_hf_dtype(j->o->dtype);
    size_t *whole = ckpt_xcalloc(m->n + 1, sizeof(*whole));
    size_t *src = ckpt_xcalloc(mt->n + 1, sizeof(*src));
    char *used = ckpt_xcalloc(n0 + 1, 1);
    /* mt points into the array about to move: by index from here. */
    for (size_t i = 0; i < mt->n; i++)
        src[i] = (size_t)(mt->v[i].t - j->plan.tensors);
    j->plan.tensors = ckpt_xreallocarray(j->plan.tensors, n0 + m->n + 1,
                                         sizeof(*j->plan.tensors));
    int rc = 0, cast = 0;
    for (size_t i = 0; rc == 0 && i < m->n; i++) {
        const struct hf_piece *p = &m->v[i];
        size_t wi = src[p->src];
        struct utensor *w = &j->plan.tensors[wi];
        uint64_t all = w->e->ndim ? w->e->size[0] : 1;
        struct utensor *o = w;
        const char *name = ckpt_arena_strndup(j->plan.arena, p->name,
                                              strlen(p->name));
        if (p->row0 || p->rows != all || p->blk || p->layer >= 0 ||
            used[wi]) {
            o = &j->plan.tensors[j->plan.ntensors++];
            whole[i] = wi + 1;
            rc = name ? make_slice(j, o, w, name, p, err)
                      : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        }
        used[wi] = 1;
        o->stname = name;
        o->file = -2;           /* exported: a shard is given below */
        if (rc == 0 && to && is_float(o->e->dtype) && o->e->dtype != to) {
            o->cast = to;
            cast = 1;
        }
        if (rc == 0 && w->chunked && (o != w || o->cast))
            rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "tensor '%s': stored "
                              "in chunks decoded one by one, it cannot be "
                              "%s", w->e->fqn, o != w ? "split" : "cast");
    }
    /* Link the slices to their wholes now that the array stays put. */
    for (size_t i = 0, k = n0; rc == 0 && i < m->n; i++)
        if (whole[i])
            j->plan.tensors[k++].whole = &j->plan.tensors[whole[i] - 1];
    if (cast)
        j->bufs.mult = 5;
    free(whole);
    free(src);
    free(used);
    return rc;
}

/* --- 4. shards ------------------------------------------------------------ */

/* safetensors' dtype order (its Dtype enum, largest first in a file). */
static int st_rank(const char *st)
{
    static const char *const order[] = {
        "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
        "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64",
        "I64", "U64", NULL
    };
    for (int i = 0; order[i]; i++)
        if (!strcmp(order[i], st))
            return i;
    return -1;
}

static const struct ckpt_dtype *out_dtype(const struct utensor *t)
{
    return t->cast ? t->cast : t->e->dtype;
}

static int by_name(const void *a, const void *b)
{
    const struct utensor *x = *(struct utensor *const *)a;
    const struct utensor *y = *(struct utensor *const *)b;
    return strcmp(x->stname, y->stname);
}

static int by_file_order(const void *a, const void *b)
{
    const struct utensor *x = *(struct utensor *const *)a;
    const struct utensor *y = *(struct utensor *const *)b;
    int rx = st_rank(out_dtype(x)->st), ry = st_rank(out_dtype(y)->st);
    if (rx != ry)
        return rx > ry ? -1 : 1;
    return strcmp(x->stname, y->stname);
}

/* Shard file `name` of tensors v[0..n) (sorted here into file order):
 * its header, offsets and size. */
static void add_shard(struct ujob *j, struct utensor **v, size_t n,
                      char *name)
{
    qsort(v, n, sizeof(*v), by_file_order);
    cJSON *h = cJSON_CreateObject(), *md = cJSON_CreateObject();
    cJSON_AddStringToObject(md, "format", "pt");
    cJSON_AddItemToObject(h, "__metadata__", md);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        struct utensor *t = v[i];
        uint64_t size = uns_hf_cast_size(t, t->nbytes);
        cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
        cJSON *offs = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "dtype", out_dtype(t)->st);
        for (int d = t->stacked; d < t->e->ndim; d++)
            cJSON_AddItemToArray(shape,
                                 cJSON_CreateNumber((double)t->e->size[d]));
        cJSON_AddItemToObject(o, "shape", shape);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + size)));
        cJSON_AddItemToObject(o, "data_offsets", offs);
        cJSON_AddItemToObject(h, t->stname, o);
        t->out_off = off;
        off += size;
    }
    char *s = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t len = strlen(s), padded = (len + 7) & ~(size_t)7;
    struct ufile *f = new_file(j, name);
    for (int i = 0; i < 8; i++)
        ckpt_buf_addch(&f->head, (char)((uint64_t)padded >> (8 * i)));
    ckpt_buf_add(&f->head, s, len);
    for (size_t i = len; i < padded; i++)
        ckpt_buf_addch(&f->head, ' ');
    free(s);
    f->data_start = 8 + padded;
    f->size = f->data_start + off;
    for (size_t i = 0; i < n; i++) {
        v[i]->out_off += f->data_start;
        v[i]->file = (int)(j->dst.nfiles - 1);
        f->ntensors++;
    }
}

static int shard(struct ujob *j, struct ckpt_err *err)
{
    size_t n = 0;
    struct utensor **v = ckpt_xcalloc(j->plan.ntensors + 1, sizeof(*v));
    for (size_t i = 0; i < j->plan.ntensors; i++)
        if (j->plan.tensors[i].file == -2)
            v[n++] = &j->plan.tensors[i];
    qsort(v, n, sizeof(*v), by_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(v[i]->stname, v[i - 1]->stname)) {
            int rc = ckpt_err_set(err, CKPT_EFORMAT, "tensor name '%s' "
                                  "occurs twice", v[i]->stname);
            free(v);
            return rc;
        }
    uint64_t max = j->o->max_shard_size ? j->o->max_shard_size
                                        : DEFAULT_SHARD;
    /* huggingface_hub's split_torch_state_dict_into_shards: a tensor
     * larger than max alone, else a new shard when it would pass max. */
    size_t *cut = ckpt_xcalloc(n + 2, sizeof(*cut)), ncut = 0;
    uint64_t cur = 0, total = 0, params = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = uns_hf_cast_size(v[i], v[i]->nbytes);
        if (cur && (b > max || cur + b > max)) {
            cut[ncut++] = i;
            cur = 0;
        }
        cur += b;
        total += b;
        params += v[i]->nbytes / v[i]->e->dtype->itemsize;
        if (b > max && i + 1 < n) {
            cut[ncut++] = i + 1;
            cur = 0;
        }
    }
    cut[ncut++] = n;
    cJSON *idx = cJSON_CreateObject(), *md = cJSON_CreateObject();
    cJSON *wm = cJSON_CreateObject();
    cJSON_AddNumberToObject(md, "total_parameters", (double)params);
    cJSON_AddNumberToObject(md, "total_size", (double)total);
    cJSON_AddItemToObject(idx, "metadata", md);
    cJSON_AddItemToObject(idx, "weight_map", wm);
    for (size_t k = 0, lo = 0; k < ncut; lo = cut[k++]) {
        char *name = ncut == 1 ? ckpt_xstrdup("model.safetensors")
                   : ckpt_xasprintf("model-%05zu-of-%05zu.safetensors",
                                    k + 1, ncut);
        for (size_t i = lo; i < cut[k]; i++)
            cJSON_AddStringToObject(wm, v[i]->stname, name);
        add_shard(j, v + lo, cut[k] - lo, name);
    }
    if (ncut > 1)
        text_file(j, "model.safetensors.index.json", uns_hf_json(idx));
    cJSON_Delete(idx);
    free(cut);
    free(v);
    return 0;
}

/* --- 5. beside the weights -------------------------------------------- */

/* The dtype config.json names: the embedding's as written. */
static const char *model_dtype(const struct ujob *j)
{
    const struct utensor *best = NULL;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        const struct utensor *t = &j->plan.tensors[i];
        if (t->file >= 0 && is_float(out_dtype(t)) &&
            (!best || strstr(t->stname, "embed")))
            best = t;
    }
    return best ? out_dtype(best)->name : "float32";
}

/* config.json: made (OLMo), or the checkpoint's copied as it is, or
 * with --dtype its dtype entries rewritten. */
static void write_config(struct ujob *j, struct hf_map *m, cJSON *src_config,
                         char *path, int local)
{
    const char *dt = model_dtype(j);
    if (m->config) {
        cJSON_ReplaceItemInObjectCaseSensitive(m->config, "dtype",
                                               cJSON_CreateString(dt));
        text_file(j, "config.json", uns_hf_json(m->config));
        free(path);
        return;
    }
    if (!j->o->dtype) {
        copy_file(j, "config.json", path, local);
        return;
    }
    static const char *const keys[] = { "dtype", "torch_dtype" };
    int any = 0;
    for (int i = 0; i < 2; i++)
        if (cJSON_GetObjectItemCaseSensitive(src_config, keys[i])) {
            cJSON_ReplaceItemInObjectCaseSensitive(src_config, keys[i],
                                                   cJSON_CreateString(dt));
            any = 1;
        }
    if (!any)
        cJSON_AddStringToObject(src_config, "dtype", dt);
    text_file(j, "config.json", uns_hf_json(src_config));
    free(path);
}

static void write_beside(struct ujob *j, struct hf_map *m)
{
    int local;
    char *p = find_aux(j, "generation_config.json", &local);
    if (p)
        copy_file(j, "generation_config.json", p, local);
    else if (m->generation)
        text_file(j, "generation_config.json", uns_hf_json(m->generation));
    for (size_t i = 0; tokenizer_files[i]; i++)
        if ((p = find_aux(j, tokenizer_files[i], &local)) != NULL)
            copy_file(j, tokenizer_files[i], p, local);
}

int uns_hf_layout(struct ujob *j, const struct ckpt_pv *root,
                  const struct hf_names *names, struct ckpt_err *err)
{
    struct hf_model mt = { NULL, 0 };
    struct hf_map m;
    cJSON *config = NULL;
    char *config_path = NULL;
    int local = 0, rc;
    memset(&m, 0, sizeof(m));
    rc = model_tensors(j, &mt, err);
    if (rc == 0 && names && names->own) {
        rc = load_config(j, &config, &config_path, &local, err);
        if (rc == 0)
            rc = names->own(j, root, &mt, config, config_path, &m, err);
    } else if (rc == 0) {
        rc = yaml_family(j, &mt, names, &m, err);
        if (rc == 0)
            rc = hf_family(j, &mt, names, &m, &config, &config_path,
                           &local, err);
        else if (rc > 0)
            rc = 0;
    }
    if (rc == 0)
        rc = make_outputs(j, &mt, &m, err);
    if (rc == 0)
        rc = shard(j, err);
    if (rc == 0) {
        write_config(j, &m, config, config_path, local);
        config_path = NULL;
        write_beside(j, &m);
    }
    if (rc == 0 && j->o->nparts > 1)
        rc = uns_hf_part_plan(j, err);
    free(config_path);
    cJSON_Delete(config);
    map_release(&m);
    free(mt.v);
    return rc;
}

void uns_hf_result(const struct ujob *j, struct ckpt_unshard_result *res)
{
    res->tensors = res->bytes = res->pieces = res->chunks = 0;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        const struct utensor *t = &j->plan.tensors[i];
        if (t->file < 0)
            continue;
        res->tensors++;
        res->bytes += uns_hf_cast_size(t, t->nbytes);
        res->pieces += t->nbands;
        res->chunks += t->whole ? 0 : t->e->nchunks;
    }
    res->layout = "hf";
}
