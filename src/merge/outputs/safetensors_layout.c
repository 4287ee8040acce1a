/*
 * outputs/safetensors_layout.c - --format safetensors: tensors into model.safetensors (split
 * into model-0000K-of-0000N.safetensors + model.safetensors.index.json
 * above --max-shard-size, the Hugging Face convention), non-tensor values
 * into extra.json.
 *
 * A safetensors file is an 8-byte little-endian header length, a JSON
 * header {name: {dtype, shape, data_offsets}}, then the data; the header
 * is padded with spaces to a multiple of 8 so data stays aligned.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"

#define DEFAULT_SHARD (5ULL << 30)

/* --- JSON for non-tensor values ---------------------------------------- */

static cJSON *to_json(const struct ckpt_pv *v, int depth);

static cJSON *opaque(const struct ckpt_pv *v)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_pv_repr(v, &b, 4096);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "__object__", b.ptr);
    ckpt_buf_release(&b);
    return o;
}

static cJSON *base64(const struct ckpt_pv *v)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v->u.s.p;
    size_t n = v->u.s.len;
    struct ckpt_buf b = CKPT_BUF_INIT;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t x = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            x |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            x |= p[i + 2];
        ckpt_buf_addch(&b, tab[(x >> 18) & 63]);
        ckpt_buf_addch(&b, tab[(x >> 12) & 63]);
        ckpt_buf_addch(&b, i + 1 < n ? tab[(x >> 6) & 63] : '=');
        ckpt_buf_addch(&b, i + 2 < n ? tab[x & 63] : '=');
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "__bytes__", b.ptr);
    ckpt_buf_release(&b);
    return o;
}

/* Two's complement little-endian bytes -> decimal text (LONG1/LONG4). */
static void big_decimal(const struct ckpt_pv *v, struct ckpt_buf *out)
{
    size_t n = v->u.s.len;
    unsigned char *m = ckpt_xmalloc(n ? n : 1);
    memcpy(m, v->u.s.p, n);
    int neg = n && (m[n - 1] & 0x80);
    for (size_t i = 0, carry = 1; neg && i < n; i++) {
        unsigned x = (unsigned char)~m[i] + (unsigned)carry;
        m[i] = (unsigned char)x;
        carry = x >> 8;
    }
    struct ckpt_buf digits = CKPT_BUF_INIT;
    for (;;) {
        unsigned rem = 0;
        int nonzero = 0;
        for (size_t i = n; i-- > 0;) {   /* divide by 10, top byte first */
            unsigned cur = (rem << 8) | m[i];
            m[i] = (unsigned char)(cur / 10);
            rem = cur % 10;
            nonzero |= m[i] != 0;
        }
        ckpt_buf_addch(&digits, (char)('0' + rem));
        if (!nonzero)
            break;
    }
    if (neg)
        ckpt_buf_addch(out, '-');
    for (size_t i = digits.len; i-- > 0;)
        ckpt_buf_addch(out, digits.ptr[i]);
    ckpt_buf_release(&digits);
    free(m);
}

/* Numbers as raw JSON tokens, the way Python's json writes them: ints
 * exact at any size, floats in repr form (-0.0 stays a float), NaN and
 * Infinity as Python's non-standard tokens. */
static cJSON *json_number(const struct ckpt_pv *v)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    if (v->kind == CKPT_PV_INT)
        ckpt_buf_addf(&b, "%lld", (long long)v->u.i);
    else if (v->kind == CKPT_PV_BIGINT && (v->flags & CKPT_PV_DECIMAL))
        ckpt_buf_add(&b, v->u.s.p, v->u.s.len);
    else if (v->kind == CKPT_PV_BIGINT)
        big_decimal(v, &b);
    else if (isnan(v->u.f))
        ckpt_buf_addstr(&b, "NaN");
    else if (isinf(v->u.f))
        ckpt_buf_addstr(&b, v->u.f > 0 ? "Infinity" : "-Infinity");
    else
        ckpt_pv_repr(v, &b, 64);
    cJSON *o = cJSON_CreateRaw(b.ptr);
    ckpt_buf_release(&b);
    return o;
}

/* _codecs.encode(text, 'latin1'): bytes as protocol 2 spells them. */
static cJSON *latin1_bytes(const struct ckpt_pv *v)
{
    const struct ckpt_pv *g = ckpt_pv_call_global(v);
    const struct ckpt_pv *t = ckpt_pv_item(v->u.call.args, 0);
    const struct ckpt_pv *enc = ckpt_pv_item(v->u.call.args, 1);
    if (!ckpt_pv_is_global(g, "_codecs", "encode") || !t ||
        t->kind != CKPT_PV_STR || !(ckpt_pv_str_eq(enc, "latin1") ||
                                    ckpt_pv_str_eq(enc, "latin-1")))
        return NULL;
    struct ckpt_buf b = CKPT_BUF_INIT;
    const unsigned char *p = (const unsigned char *)t->u.s.p;
    for (size_t i = 0; i < t->u.s.len; i++) {
        if (p[i] >= 0xc0 && i + 1 < t->u.s.len) {   /* U+0080..U+00FF */
            ckpt_buf_addch(&b, (char)(((p[i] & 0x03) << 6) |
                                      (p[i + 1] & 0x3f)));
            i++;
        } else {
            ckpt_buf_addch(&b, (char)p[i]);
        }
    }
    struct ckpt_pv tmp = { .kind = CKPT_PV_BYTES };
    tmp.u.s.p = b.ptr;
    tmp.u.s.len = b.len;
    cJSON *o = base64(&tmp);
    ckpt_buf_release(&b);
    return o;
}

static cJSON *json_dict(const struct ckpt_pv *d, int depth)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < d->u.dict.n; i++) {
        const struct ckpt_pv *k = d->u.dict.k[i];
        struct ckpt_buf kb = CKPT_BUF_INIT;
        if (k->kind == CKPT_PV_STR)
            ckpt_buf_add(&kb, k->u.s.p, k->u.s.len);
        else
            ckpt_pv_repr(k, &kb, 256);
        cJSON_AddItemToObject(o, kb.ptr, to_json(d->u.dict.v[i], depth + 1));
        ckpt_buf_release(&kb);
    }
    return o;
}

/* complex(real, imag) as Python pickles a complex value:
 * {"__complex__": [real, imag]}, or NULL. */
static cJSON *complex_json(const struct ckpt_pv *v)
{
    const struct ckpt_pv *g = ckpt_pv_call_global(v);
    const struct ckpt_pv *a = g ? v->u.call.args : NULL;
    if (!g || strcmp(g->u.global.name, "complex") ||
        (strcmp(g->u.global.module, "builtins") &&
         strcmp(g->u.global.module, "__builtin__")) ||
        v->u.call.how != CKPT_CALL_REDUCE || ckpt_pv_len(a) != 2 ||
        v->u.call.state || v->u.call.listitems || v->u.call.dictitems)
        return NULL;
    for (size_t i = 0; i < 2; i++)
        if (a->u.seq.v[i]->kind != CKPT_PV_FLOAT &&
            a->u.seq.v[i]->kind != CKPT_PV_INT)
            return NULL;
    cJSON *pair = cJSON_CreateArray();
    cJSON_AddItemToArray(pair, json_number(a->u.seq.v[0]));
    cJSON_AddItemToArray(pair, json_number(a->u.seq.v[1]));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "__complex__", pair);
    return o;
}

static cJSON *to_json(const struct ckpt_pv *v, int depth)
{
    if (!v || depth > CKPT_PICKLE_MAX_DEPTH)
        return cJSON_CreateNull();
    switch (v->kind) {
    case CKPT_PV_NONE: return cJSON_CreateNull();
    case CKPT_PV_BOOL: return cJSON_CreateBool(v->u.b);
    case CKPT_PV_INT:
    case CKPT_PV_BIGINT:
    case CKPT_PV_FLOAT: return json_number(v);
    case CKPT_PV_STR: return cJSON_CreateString(v->u.s.p);
    case CKPT_PV_BYTES:
    case CKPT_PV_BYTEARRAY: return base64(v);
    case CKPT_PV_DICT: return json_dict(v, depth);
    case CKPT_PV_TUPLE:
    case CKPT_PV_LIST:
    case CKPT_PV_SET:
    case CKPT_PV_FROZENSET: {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; a && i < v->u.seq.n; i++)
            cJSON_AddItemToArray(a, to_json(v->u.seq.v[i], depth + 1));
        return a;
    }
    default: {
        cJSON *b = latin1_bytes(v);
        if (b)
            return b;
        cJSON *c = complex_json(v);
        if (c)
            return c;
        if (ckpt_pv_is_global(ckpt_pv_call_global(v), "collections",
                              "OrderedDict"))
            return v->u.call.dictitems ? json_dict(v->u.call.dictitems,
                                                   depth)
                                       : cJSON_CreateObject();
        return opaque(v);
    }
    }
}

/* --- files --------------------------------------------------------------- */

static struct ufile *raw_file(struct ujob *j, char *name, char *text)
{
    j->dst.files = ckpt_xreallocarray(j->dst.files, j->dst.nfiles + 1, sizeof(*j->dst.files));
    struct ufile *f = &j->dst.files[j->dst.nfiles++];
    memset(f, 0, sizeof(*f));
    f->name = name;
    f->prefix = ckpt_xstrdup("");
    f->fd = -1;
    f->raw = 1;
    ckpt_buf_init(&f->head);
    ckpt_buf_addstr(&f->head, text);
    f->size = f->head.len;
    free(text);
    return f;
}

static int is_tensor_node(const struct ckpt_pv *v)
{
    const struct ckpt_pv *g = ckpt_pv_call_global(v);
    return ckpt_pv_is_global(g, "torch._utils", "_rebuild_tensor_v2") ||
           ckpt_pv_is_global(g, "torch._utils", "_rebuild_tensor_v3");
}

/* A Megatron step's values are its merged root's (megatron/plan.c): the
 * common state's keys, then the other byte items; flat (no planner_data),
 * so every top-level value is a tensor or not. */
static int extra_megatron(const struct ckpt_pv *root, cJSON *o)
{
    int any = 0;
    for (size_t i = 0; i < root->u.dict.n; i++) {
        const struct ckpt_pv *k = root->u.dict.k[i];
        if (is_tensor_node(root->u.dict.v[i]))
            continue;
        struct ckpt_buf kb = CKPT_BUF_INIT;
        if (k->kind == CKPT_PV_STR)
            ckpt_buf_add(&kb, k->u.s.p, k->u.s.len);
        else
            ckpt_pv_repr(k, &kb, 256);
        cJSON_AddItemToObject(o, kb.ptr, to_json(root->u.dict.v[i], 0));
        ckpt_buf_release(&kb);
        any = 1;
    }
    return any;
}

static int extra_json(struct ujob *j, const struct ckpt_pv *root,
                      struct ckpt_err *err)
{
    cJSON *o = cJSON_CreateObject();
    int any = j->plan.megatron ? extra_megatron(root, o) : 0;
    for (size_t i = 0; !j->plan.megatron && i < j->plan.meta->n; i++) {
        if (j->plan.meta->entries[i].kind != CKPT_DCP_BYTES)
            continue;
        cJSON_AddItemToObject(o, j->plan.meta->entries[i].fqn,
                              to_json(j->plan.values[i], 0));
        any = 1;
    }
    char *text = any ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (any && !text)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (any)
        raw_file(j, ckpt_xstrdup("extra.json"), text);
    return 0;
}

/* Name of t inside its part: the planner path below the part's key. */
static const char *st_name(struct ujob *j, const struct utensor *t,
                           int olmo)
{
    const struct ckpt_pv *p = j->plan.paths[t->e - j->plan.meta->entries];
    if (!olmo || !p || p->u.seq.n < 2)
        return t->e->fqn;
    struct ckpt_buf b = CKPT_BUF_INIT;
    for (size_t i = 1; i < p->u.seq.n; i++) {
        const struct ckpt_pv *k = p->u.seq.v[i];
        if (i > 1)
            ckpt_buf_addch(&b, '.');
        if (k->kind == CKPT_PV_STR)
            ckpt_buf_add(&b, k->u.s.p, k->u.s.len);
        else
            ckpt_buf_addf(&b, "%lld", (long long)k->u.i);
    }
    char *s = ckpt_arena_strndup(j->plan.arena, b.ptr, b.len);
    ckpt_buf_release(&b);
    return s ? s : t->e->fqn;
}

struct part {
    char *base;             /* "model" */
    size_t *tensors;        /* indexes into j->plan.tensors */
    size_t n;
};

/* Header for tensors[lo..hi) of a part; sets their offsets. */
static char *header(struct ujob *j, struct part *p, size_t lo, size_t hi,
                    uint64_t *data_start)
{
    cJSON *h = cJSON_CreateObject(), *md = cJSON_CreateObject();
    cJSON_AddStringToObject(md, "format", "pt");
    cJSON_AddItemToObject(h, "__metadata__", md);
    uint64_t off = 0;
    for (size_t i = lo; i < hi; i++) {
        struct utensor *t = &j->plan.tensors[p->tensors[i]];
        cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
        cJSON *offs = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "dtype", t->e->dtype->st);
        for (int d = 0; d < t->e->ndim; d++)
            cJSON_AddItemToArray(shape,
                                 cJSON_CreateNumber((double)t->e->size[d]));
        cJSON_AddItemToObject(o, "shape", shape);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs,
                             cJSON_CreateNumber((double)(off + t->nbytes)));
        cJSON_AddItemToObject(o, "data_offsets", offs);
        cJSON_AddItemToObject(h, t->stname, o);
        t->out_off = off;
        off += t->nbytes;
    }
    char *s = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t n = strlen(s), padded = (n + 7) & ~(size_t)7;
    char *text = ckpt_xmalloc(8 + padded + 1);
    for (int i = 0; i < 8; i++)
        text[i] = (char)((uint64_t)padded >> (8 * i));
    memcpy(text + 8, s, n);
    memset(text + 8 + n, ' ', padded - n);
    text[8 + padded] = '\0';
    free(s);
    *data_start = 8 + padded;
    for (size_t i = lo; i < hi; i++)
        j->plan.tensors[p->tensors[i]].out_off += *data_start;
    return text;
}

static void add_shard(struct ujob *j, struct part *p, size_t lo, size_t hi,
                      char *name)
{
    uint64_t start;
    char *text = header(j, p, lo, hi, &start);
    j->dst.files = ckpt_xreallocarray(j->dst.files, j->dst.nfiles + 1, sizeof(*j->dst.files));
    struct ufile *f = &j->dst.files[j->dst.nfiles++];
    memset(f, 0, sizeof(*f));
    f->name = name;
    f->prefix = ckpt_xstrdup(p->base);
    f->fd = -1;
    ckpt_buf_init(&f->head);
    ckpt_buf_add(&f->head, text, 8);
    ckpt_buf_addstr(&f->head, text + 8);
    free(text);
    f->data_start = start;
    f->size = start;
    for (size_t i = lo; i < hi; i++) {
        struct utensor *t = &j->plan.tensors[p->tensors[i]];
        t->file = (int)(j->dst.nfiles - 1);
        f->size += t->nbytes;
        f->ntensors++;
    }
}

/* Cut a part into shards of at most max bytes (a bigger tensor gets a
 * shard of its own), then name them K-of-N and write the index. */
static void shard_part(struct ujob *j, struct part *p, uint64_t max)
{
    size_t *cut = ckpt_xcalloc(p->n + 1, sizeof(*cut)), ncut = 0;
    uint64_t sz = 0, total = 0;
    for (size_t i = 0; i < p->n; i++) {
        uint64_t b = j->plan.tensors[p->tensors[i]].nbytes;
        if (i && sz + b > max) {
            cut[ncut++] = i;
            sz = 0;
        }
        sz += b;
        total += b;
    }
    cut[ncut++] = p->n;
    if (ncut == 1) {
        add_shard(j, p, 0, p->n, ckpt_xasprintf("%s.safetensors", p->base));
        free(cut);
        return;
    }
    cJSON *idx = cJSON_CreateObject(), *md = cJSON_CreateObject();
    cJSON *wm = cJSON_CreateObject();
    cJSON_AddNumberToObject(md, "total_size", (double)total);
    cJSON_AddItemToObject(idx, "metadata", md);
    cJSON_AddItemToObject(idx, "weight_map", wm);
    for (size_t k = 0, lo = 0; k < ncut; lo = cut[k++]) {
        char *name = ckpt_xasprintf("%s-%05zu-of-%05zu.safetensors", p->base,
                                    k + 1, ncut);
        for (size_t i = lo; i < cut[k]; i++)
            cJSON_AddStringToObject(wm, j->plan.tensors[p->tensors[i]].stname,
                                    name);
        add_shard(j, p, lo, cut[k], name);
    }
    raw_file(j, ckpt_xasprintf("%s.safetensors.index.json", p->base),
             cJSON_Print(idx));
    cJSON_Delete(idx);
    free(cut);
}

static int check_tensor(struct utensor *t, struct strmap *names,
                        struct ckpt_err *err)
{
    if (!t->e->dtype->st)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "tensor '%s': dtype %s "
                            "has no safetensors equivalent (use --format "
                            "torch)", t->e->fqn, t->e->dtype->name);
    if (tf_strmap_get(names, t->stname, strlen(t->stname), NULL))
        return ckpt_err_set(err, CKPT_EFORMAT, "tensor name '%s' occurs "
                            "twice", t->stname);
    return tf_strmap_put(names, t->stname, strlen(t->stname), 0) ?
           ckpt_err_set(err, CKPT_ENOMEM, "out of memory") : 0;
}

/* A part copied whole (train.pt = train/rank0.pt of an OLMo step) stays
 * that torch file: OLMo's unsharder writes train.pt with --safe-tensors
 * too. Takes over part->copy_from. */
static void keep_copy(struct ujob *j, struct ufile *part)
{
    j->dst.files = ckpt_xreallocarray(j->dst.files, j->dst.nfiles + 1, sizeof(*j->dst.files));
    struct ufile *f = &j->dst.files[j->dst.nfiles++];
    memset(f, 0, sizeof(*f));
    f->name = ckpt_xasprintf("%s.pt", part->prefix);
    f->prefix = ckpt_xstrdup(part->prefix);
    f->fd = -1;
    f->copy_from = part->copy_from;
    part->copy_from = NULL;
    ckpt_buf_init(&f->head);
}

int uns_st_layout(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err)
{
    if (j->plan.ncopies)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "object '%s' holds "
                            "tensors; use --format torch", j->plan.copies[0].e->fqn);
    if (uns_layout_choose(j, root, "", err) != 0)
        return -1;
    int olmo = j->plan.olmo;
    /* The chosen files become parts; the real files are their shards. */
    struct ufile *parts = j->dst.files;
    size_t nparts = j->dst.nfiles;
    j->dst.files = NULL;
    j->dst.nfiles = 0;
    int rc = 0;
    uint64_t max = j->o->max_shard_size ? j->o->max_shard_size
                                        : DEFAULT_SHARD;
    /* Each tensor's part, read before shard_part renumbers t->file to
     * shard files whose indexes may equal later parts' indexes. */
    int *part = ckpt_xcalloc(j->plan.ntensors + 1, sizeof(*part));
    for (size_t i = 0; i < j->plan.ntensors; i++)
        part[i] = j->plan.tensors[i].file;
    for (size_t pi = 0; pi < nparts && rc == 0; pi++) {
        struct part p = { parts[pi].prefix, NULL, 0 };
        if (parts[pi].copy_from) {
            keep_copy(j, &parts[pi]);
            continue;
        }
        struct strmap names = STRMAP_INIT;
        p.tensors = ckpt_xcalloc(j->plan.ntensors + 1, sizeof(*p.tensors));
        for (size_t i = 0; i < j->plan.ntensors && rc == 0; i++) {
            struct utensor *t = &j->plan.tensors[i];
            if (part[i] != (int)pi)
                continue;
            t->stname = st_name(j, t, olmo);
            rc = check_tensor(t, &names, err);
            p.tensors[p.n++] = i;
        }
        if (rc == 0 && p.n)
            shard_part(j, &p, max);
        free(p.tensors);
        tf_strmap_release(&names);
    }
    /* No tensors at all (an empty state dict, or objects only): still a
     * model.safetensors, its header only, as safetensors' save_file({})
     * writes; --format torch writes checkpoint.pt of the empty dict too. */
    int any = 0;
    for (size_t i = 0; i < j->dst.nfiles; i++)
        any |= !j->dst.files[i].copy_from;
    for (size_t pi = 0; rc == 0 && !any && pi < nparts; pi++)
        if (!parts[pi].copy_from) {
            struct part p = { parts[pi].prefix, NULL, 0 };
            add_shard(j, &p, 0, 0,
                      ckpt_xasprintf("%s.safetensors", p.base));
            any = 1;
        }
    free(part);
    for (size_t pi = 0; pi < nparts; pi++) {
        free(parts[pi].name);
        free(parts[pi].prefix);
        free(parts[pi].copy_from);
        ckpt_buf_release(&parts[pi].head);
    }
    free(parts);
    return rc ? rc : extra_json(j, root, err);
}
