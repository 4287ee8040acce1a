/*
 * megatron/export_hf.c - `ckpt unshard --format hf` of a Megatron step
 * (torch_dist, or legacy with its ranks merged): a megatron.core GPT
 * model of Llama's shape as HF `llama`, by the mapping NVIDIA's
 * Megatron-Bridge publishes (src/megatron/bridge/models/llama/
 * llama_bridge.py, its mapping registry; conversion/param_mapping.py
 * QKVMapping with split_qkv_weights, GatedMLPMapping):
 *
 *   embedding.word_embeddings.weight      model.embed_tokens.weight
 *   output_layer.weight                   lm_head.weight (untied only)
 *   decoder.final_layernorm.weight        model.norm.weight
 *   decoder.layers.N.
 *     self_attention.linear_qkv.          model.layers.N.input_layernorm
 *       layer_norm_weight (TE spec), or     .weight
 *       input_layernorm.weight (local)
 *     mlp.linear_fc1.layer_norm_weight    ...post_attention_layernorm
 *       (TE), or pre_mlp_layernorm.weight   .weight
 *       (local)
 *     self_attention.linear_qkv.weight    ...self_attn.q_proj, k_proj,
 *                                           v_proj (below)
 *     self_attention.linear_proj.weight   ...self_attn.o_proj.weight
 *     mlp.linear_fc1.weight               ...mlp.gate_proj (first half),
 *                                           up_proj (second half)
 *     mlp.linear_fc2.weight               ...mlp.down_proj.weight
 *
 * linear_qkv holds, per query group g, heads/groups query heads, one key
 * head and one value head, head_dim rows each: q_proj is the query rows
 * of every group in order, k_proj and v_proj the key and value rows
 * (split_qkv_weights). Each is read in place, rows in blocks of the
 * fused tensor (hf_piece.blk), never copied twice. linear_fc1 is [gate;
 * up] as merged (a legacy step's ranks each hold [gate_r; up_r]:
 * megatron/plan_legacy.c puts the gates first, as GatedMLPMapping does).
 *
 * config.json is the model's own (the checkpoint's, the directory above
 * it, or --config-dir), copied: a Megatron checkpoint does not say which
 * HF model it is. Its model_type must be llama, and every shape must fit
 * it (hidden_size, num_attention_heads, num_key_value_heads, head_dim,
 * intermediate_size, vocab_size, num_hidden_layers): a mismatch is an
 * error naming both. Biases, LayerNorm (non-RMS) biases, MoE, an
 * _extra_state with content (TE's FP8 metadata) and any other tensor are
 * errors naming it: the mapping has no place for them. An _extra_state
 * of None is nothing to export.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "trainers/trainer.h"

#define EXTRA "._extra_state"

struct lcfg {
    const char *path;
    long long hidden, heads, kv, hd, inter, vocab, layers;
    int tied;
};

struct mgmap {
    const struct hf_model *mt;
    const struct lcfg *c;
    struct hf_map *m;
    char *used;                 /* per model tensor: mapped */
    struct ckpt_err *err;
};

/* An integer of config.json, 1 to 1e9 (products of a few stay in range);
 * absent or null: def (an error when def < 1). */
static int cfg_int(const cJSON *o, const char *path, const char *key,
                   long long def, long long *out, struct ckpt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if ((!v || cJSON_IsNull(v)) && def >= 1) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < 1 || v->valuedouble > 1e9)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: %s %s", path, key,
                            v ? "is not a whole number from 1 to 1e9"
                              : "missing");
    *out = (long long)v->valuedouble;
    return 0;
}

static int read_config(const cJSON *o, struct lcfg *c, struct ckpt_err *err)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    const char *type = cJSON_IsString(t) ? t->valuestring : NULL;
    if (!type || strcmp(type, "llama") != 0)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: model_type %s%s%s: "
                            "a Megatron GPT model is exported as HF llama "
                            "only (Megatron-Bridge's Llama mapping)",
                            c->path, type ? "'" : "",
                            type ? type : "missing", type ? "'" : "");
    static const char *const biases[] = { "attention_bias", "mlp_bias" };
    for (int i = 0; i < 2; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, biases[i])))
            return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: %s is true: "
                                "Megatron-Bridge's Llama mapping has no "
                                "biases", c->path, biases[i]);
    if (cfg_int(o, c->path, "hidden_size", -1, &c->hidden, err) != 0 ||
        cfg_int(o, c->path, "num_attention_heads", -1, &c->heads, err) ||
        cfg_int(o, c->path, "num_key_value_heads", c->heads, &c->kv, err) ||
        cfg_int(o, c->path, "head_dim", c->hidden / c->heads, &c->hd,
                err) ||
        cfg_int(o, c->path, "intermediate_size", -1, &c->inter, err) ||
        cfg_int(o, c->path, "vocab_size", -1, &c->vocab, err) ||
        cfg_int(o, c->path, "num_hidden_layers", -1, &c->layers, err))
        return -1;
    if (c->heads % c->kv)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: num_attention_heads %lld "
                            "is not a multiple of num_key_value_heads %lld",
                            c->path, c->heads, c->kv);
    c->tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        o, "tie_word_embeddings"));
    return 0;
}

/* One tensor the mapping takes: the model tensor and, for torch_dist's
 * stacked layers (decoder.layers.X of [num_hidden_layers, ...]), the
 * layer's index along dim 0 (-1: the tensor as it is). */
struct mgt {
    long i;
    int64_t layer;
};

/* Whether model tensor i is shaped want[0..nd) (after `lead` leading
 * dimensions); else an error naming both (-2). */
static int check_shape(struct mgmap *x, long i, const uint64_t *want, int nd,
                       int lead, const char *what)
{
    const struct ckpt_dcp_entry *e = x->mt->v[i].t->e;
    int ok = e->ndim == nd + lead;
    for (int d = 0; ok && d < nd; d++)
        ok = e->size[lead + d] == want[d];
    if (ok && lead)
        ok = e->size[0] == (uint64_t)x->c->layers;
    if (ok)
        return 0;
    uint64_t full[4] = { (uint64_t)x->c->layers, 0, 0, 0 };
    for (int d = 0; d < nd; d++)
        full[lead + d] = want[d];
    char have[96], w[96];
    uns_fmt_shape(have, sizeof(have), e->size, e->ndim < 8 ? e->ndim : 8);
    uns_fmt_shape(w, sizeof(w), full, nd + lead);
    ckpt_err_set(x->err, CKPT_EFORMAT, "Megatron tensor '%s' is %s; %s says "
                 "%s (%s%s)", x->mt->v[i].name, have, x->c->path, w,
                 lead ? "num_hidden_layers, " : "", what);
    return -2;
}

/* A top-level tensor of shape [rows, cols] (cols 0: [rows]); -1 (an error
 * when req) when absent, -2 on a mismatch. */
static long need(struct mgmap *x, const char *name, long long rows,
                 long long cols, const char *what, int req)
{
    long i = uns_hf_find(x->mt, name);
    if (i < 0) {
        if (req)
            ckpt_err_set(x->err, CKPT_EFORMAT, "Megatron tensor '%s' missing "
                         "(HF llama of %s)", name, x->c->path);
        return -1;
    }
    uint64_t want[2] = { (uint64_t)rows, (uint64_t)cols };
    if (check_shape(x, i, want, cols ? 2 : 1, 0, what) != 0)
        return -2;
    x->used[i] = 1;
    return i;
}

/* Layer n's tensor `suffix` (then `alt`, the other spec's spelling, when
 * not NULL): decoder.layers.N.suffix, or layer n of the stacked
 * decoder.layers.suffix. t->i -1 when absent (an error), -2 on a
 * mismatch. */
static int need_layer(struct mgmap *x, long long n, const char *suffix,
                      const char *alt, long long rows, long long cols,
                      const char *what, struct mgt *t)
{
    uint64_t want[2] = { (uint64_t)rows, (uint64_t)cols };
    const char *names[2] = { suffix, alt };
    for (int k = 0; k < 2 && names[k]; k++) {
        char *one = ckpt_xasprintf("decoder.layers.%lld.%s", n, names[k]);
        char *all = ckpt_xasprintf("decoder.layers.%s", names[k]);
        long i = uns_hf_find(x->mt, one);
        int lead = 0;
        if (i < 0) {
            i = uns_hf_find(x->mt, all);
            lead = 1;
        }
        free(one);
        free(all);
        if (i < 0)
            continue;
        if (check_shape(x, i, want, cols ? 2 : 1, lead, what) != 0)
            return -1;
        x->used[i] = 1;
        t->i = i;
        t->layer = lead ? n : -1;
        return 0;
    }
    if (alt)
        return ckpt_err_set(x->err, CKPT_EFORMAT, "Megatron tensor "
                            "'decoder.layers.%lld.%s' (or '...%s') missing "
                            "(HF llama of %s)", n, alt, suffix, x->c->path);
    return ckpt_err_set(x->err, CKPT_EFORMAT, "Megatron tensor "
                        "'decoder.layers.%lld.%s' missing (HF llama of %s)",
                        n, suffix, x->c->path);
}

static void add(struct mgmap *x, const struct mgt *t, char *name,
                uint64_t row0, uint64_t rows, uint64_t blk, uint64_t stride)
{
    const struct ckpt_dcp_entry *e = x->mt->v[t->i].t->e;
    if (!rows)
        rows = e->size[t->layer >= 0 ? 1 : 0];
    uns_hf_add_layer(x->m, name, (size_t)t->i, t->layer, row0, rows, blk,
                     stride);
}

static int map_layer(struct mgmap *x, long long n)
{
    const struct lcfg *c = x->c;
    long long qkv_rows = (c->heads + 2 * c->kv) * c->hd;
    uint64_t hd = (uint64_t)c->hd, hpg = (uint64_t)(c->heads / c->kv);
    uint64_t group = (hpg + 2) * hd, I = (uint64_t)c->inter;
    struct mgt in, post, qkv, proj, fc1, fc2;
    if (need_layer(x, n, "self_attention.linear_qkv.layer_norm_weight",
                   "input_layernorm.weight", c->hidden, 0, "hidden_size",
                   &in) != 0 ||
        need_layer(x, n, "mlp.linear_fc1.layer_norm_weight",
                   "pre_mlp_layernorm.weight", c->hidden, 0, "hidden_size",
                   &post) != 0 ||
        need_layer(x, n, "self_attention.linear_qkv.weight", NULL, qkv_rows,
                   c->hidden, "(num_attention_heads + 2 * "
                   "num_key_value_heads) * head_dim, hidden_size",
                   &qkv) != 0 ||
        need_layer(x, n, "self_attention.linear_proj.weight", NULL,
                   c->hidden, c->heads * c->hd, "hidden_size, "
                   "num_attention_heads * head_dim", &proj) != 0 ||
        need_layer(x, n, "mlp.linear_fc1.weight", NULL, 2 * c->inter,
                   c->hidden, "2 * intermediate_size, hidden_size",
                   &fc1) != 0 ||
        need_layer(x, n, "mlp.linear_fc2.weight", NULL, c->hidden, c->inter,
                   "hidden_size, intermediate_size", &fc2) != 0)
        return -1;
#define H(s) ckpt_xasprintf("model.layers.%lld.%s", n, s)
    add(x, &in, H("input_layernorm.weight"), 0, 0, 0, 0);
    add(x, &post, H("post_attention_layernorm.weight"), 0, 0, 0, 0);
    add(x, &qkv, H("self_attn.q_proj.weight"), 0, (uint64_t)c->heads * hd,
        hpg * hd, group);
    add(x, &qkv, H("self_attn.k_proj.weight"), hpg * hd,
        (uint64_t)c->kv * hd, hd, group);
    add(x, &qkv, H("self_attn.v_proj.weight"), (hpg + 1) * hd,
        (uint64_t)c->kv * hd, hd, group);
    add(x, &proj, H("self_attn.o_proj.weight"), 0, 0, 0, 0);
    add(x, &fc1, H("mlp.gate_proj.weight"), 0, I, 0, 0);
    add(x, &fc1, H("mlp.up_proj.weight"), I, I, 0, 0);
    add(x, &fc2, H("mlp.down_proj.weight"), 0, 0, 0, 0);
#undef H
    return 0;
}

/* Why a tensor the mapping does not take has no place in HF llama. */
static int unmapped(struct mgmap *x, const char *name)
{
    const char *why = "Megatron-Bridge's Llama mapping has no such tensor";
    if (ckpt_str_endswith(name, EXTRA))
        why = "an _extra_state with content (Transformer Engine's FP8 "
              "metadata) has no place in an HF model";
    else if (strstr(name, ".experts.") || strstr(name, ".router."))
        why = "a mixture-of-experts layer: only dense Llama models are "
              "mapped";
    else if (ckpt_str_endswith(name, ".bias"))
        why = "a bias: HF llama with attention_bias and mlp_bias false has "
              "none, and RMSNorm has no bias";
    else if (strstr(name, "decoder.layers."))
        why = "not a layer of Megatron-Bridge's Llama mapping (or a layer "
              "past num_hidden_layers)";
    return ckpt_err_set(x->err, CKPT_EUNSUPPORTED, "Megatron tensor '%s': %s",
                        name, why);
}

/* torch_dist keeps the optimizer's tensors beside the model's (optimizer.
 * ...): never exported. */
static int optimizer(const char *name)
{
    return !strncmp(name, "optimizer.", 10);
}

static int map_model(struct mgmap *x)
{
    const struct lcfg *c = x->c;
    long emb = need(x, "embedding.word_embeddings.weight", c->vocab,
                    c->hidden, "vocab_size, hidden_size", 1);
    if (emb < 0)
        return -1;
    struct mgt t = { emb, -1 };
    add(x, &t, ckpt_xstrdup("model.embed_tokens.weight"), 0, 0, 0, 0);
    for (long long n = 0; n < c->layers; n++)
        if (map_layer(x, n) != 0)
            return -1;
    long norm = need(x, "decoder.final_layernorm.weight", c->hidden, 0,
                     "hidden_size", 1);
    if (norm < 0)
        return -1;
    t.i = norm;
    add(x, &t, ckpt_xstrdup("model.norm.weight"), 0, 0, 0, 0);
    long head = need(x, "output_layer.weight", c->vocab, c->hidden,
                     "vocab_size, hidden_size", 0);
    if (head == -2)
        return -1;
    if (head >= 0 && c->tied)
        return ckpt_err_set(x->err, CKPT_EFORMAT, "Megatron tensor "
                            "'output_layer.weight': the model's output "
                            "layer is its own, but %s says "
                            "tie_word_embeddings true", c->path);
    if (head < 0 && !c->tied)
        return ckpt_err_set(x->err, CKPT_EFORMAT, "Megatron tensor "
                            "'output_layer.weight' missing: the embedding "
                            "is shared (--untie-embeddings-and-output-"
                            "weights not given), but %s says "
                            "tie_word_embeddings false", c->path);
    t.i = head;
    if (head >= 0)
        add(x, &t, ckpt_xstrdup("lm_head.weight"), 0, 0, 0, 0);
    for (size_t i = 0; i < x->mt->n; i++)
        if (!x->used[i] && !optimizer(x->mt->v[i].name))
            return unmapped(x, x->mt->v[i].name);
    return 0;
}

/* An _extra_state that is not a tensor (a legacy step of the TE spec
 * pickles a BytesIO) and not None: content that has no place either. */
static int extra_states(const struct ckpt_pv *root, struct ckpt_err *err)
{
    const struct ckpt_pv *d = ckpt_pv_dict_items(root);
    const struct ckpt_pv *model = d ? ckpt_pv_dict_get(d, "model") : NULL;
    if (model)
        d = ckpt_pv_dict_items(model);
    for (size_t i = 0; d && i < d->u.dict.n; i++) {
        const struct ckpt_pv *k = d->u.dict.k[i], *v = d->u.dict.v[i];
        size_t el = strlen(EXTRA);
        if (k->kind != CKPT_PV_STR || k->u.s.len < el ||
            memcmp(k->u.s.p + k->u.s.len - el, EXTRA, el) != 0 ||
            v->kind == CKPT_PV_NONE || v->kind == CKPT_PV_CALL ||
            v->kind == CKPT_PV_PERSID)
            continue;
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "Megatron tensor '%.*s': "
                            "an _extra_state with content (a %s: Transformer "
                            "Engine's FP8 metadata) has no place in an HF "
                            "model", (int)k->u.s.len, k->u.s.p,
                            ckpt_pv_kind_name(v->kind));
    }
    return 0;
}

static int megatron_map(struct ujob *j, const struct ckpt_pv *root,
                        const struct hf_model *mt,
                        const cJSON *config, const char *config_path,
                        struct hf_map *m, struct ckpt_err *err)
{
    (void)j;
    struct lcfg c;
    memset(&c, 0, sizeof(c));
    c.path = config_path;
    if (read_config(config, &c, err) != 0)
        return -1;
    if (root && extra_states(root, err) != 0)
        return -1;
    struct mgmap x = { mt, &c, m, ckpt_xcalloc(mt->n + 1, 1), err };
    int rc = map_model(&x);
    free(x.used);
    m->family = "llama";
    return rc;
}

int uns_mg_export(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err)
{
    static const struct hf_names names = { .own = megatron_map };
    if (uns_hf_layout(j, root, &names, err) == 0)
        return 0;
    /* Named by the step, whichever layout planned it. */
    size_t n = strlen(j->src.top);
    if (err && (strncmp(err->msg, j->src.top, n) != 0 || err->msg[n] != ':'))
        ckpt_err_prefix(err, "%s", j->src.top);
    return -1;
}
