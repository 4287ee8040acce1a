/*
 * olmo/export_hf.c - the OLMo family of an export: OLMo's model (allenai/OLMo,
 * every sharded checkpointer) as HF `olmo` or `olmo2`, the way
 * transformers' convert_olmo_weights_to_hf.py and
 * convert_olmo2_weights_to_hf.py write it (read at transformers 5.x;
 * their output under transformers 5.12.1 is the reference of
 * tests/fixtures/olmo-hf/):
 *
 *   config.yaml `model`          config.json
 *   d_model                      hidden_size
 *   n_heads                      num_attention_heads
 *   n_kv_heads (else 1 with      num_key_value_heads
 *     multi_query_attention,
 *     else n_heads)
 *   n_layers                     num_hidden_layers
 *   mlp_hidden_size (else        intermediate_size = half of it
 *     d_model * mlp_ratio)
 *   embedding_size (else         vocab_size (the padded rows the
 *     vocab_size)                  embedding really has)
 *   max_sequence_length          max_position_embeddings
 *   weight_tying                 tie_word_embeddings
 *   pad_token_id, eos_token_id   the same (olmo2: eos 0 becomes 50279,
 *                                  the script's fix)
 *   rope_theta                   rope_parameters.rope_theta
 *   clip_qkv                     clip_qkv (olmo)
 *   layer_norm_eps               rms_norm_eps (olmo2)
 *
 * olmo2 when attention_layer_norm and norm_after are set (the olmo2
 * script refuses anything else), else olmo. Tensors, per block N:
 *
 *   transformer.blocks.N.att_proj  rows [0, d) self_attn.q_proj, the next
 *                                  kv*hd k_proj, the last kv*hd v_proj
 *                                  (torch.split(fused_dims, dim=0))
 *   ...attn_out                    self_attn.o_proj
 *   ...ff_proj                     first half mlp.up_proj, second half
 *                                  mlp.gate_proj (torch.chunk(2, 0))
 *   ...ff_out                      mlp.down_proj
 *   ...q_norm, k_norm (olmo2)      self_attn.q_norm, self_attn.k_norm
 *   ...attn_norm (olmo2)           post_attention_layernorm
 *   ...ff_norm (olmo2)             post_feedforward_layernorm
 *   transformer.wte                model.embed_tokens
 *   transformer.ln_f (olmo2)       model.norm
 *   transformer.ff_out             lm_head (untied; without it the
 *                                  scripts use wte)
 *
 * with model.layers.N. before the block names. A tied model has no
 * lm_head (save_pretrained drops the tied copy). Any other model tensor
 * (biases, OLMo 1 layer norm weights, which HF olmo cannot hold) is an
 * error naming it, never dropped. One deviation: the 5.x olmo script
 * writes rope_theta 10000.0 whatever config.yaml says (its own code:
 * `base = 10000.0`); ckpt writes config.yaml's rope_theta, the value the
 * model was trained with (equal whenever that is 10000).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/torchfmt.h"
#include "ckpt/util.h"
#include "merge/hf/hf.h"
#include "merge/job.h"

#define TRANSFORMERS_VERSION "5.12.1"

struct ocfg {
    const cJSON *m;             /* the `model` section */
    const char *name;           /* config file, for messages */
    int olmo2;
    long long d, heads, kv, layers, hidden, vocab, maxpos;
    int tied;
};

/* An integer of the model section; absent or null: def (or an error
 * when def < 0). */
static int get_int(const struct ocfg *c, const char *key, long long def,
                   long long *out, struct ckpt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->m, key);
    if ((!v || cJSON_IsNull(v)) && def >= 0) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < 0 || v->valuedouble > 1e15)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: model.%s %s", c->name,
                            key, v ? "is not a whole number" : "missing");
    *out = (long long)v->valuedouble;
    return 0;
}

static int get_bool(const struct ocfg *c, const char *key, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->m, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* A number (or null) of the model section, copied into config.json. */
static cJSON *number_or_null(const struct ocfg *c, const char *key,
                             double def, int as_float)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->m, key);
    double d = def;
    if (cJSON_IsNumber(v))
        d = v->valuedouble;
    else if (v && cJSON_IsNull(v))
        return cJSON_CreateNull();
    else if (isnan(def))
        return cJSON_CreateNull();
    return as_float ? uns_hf_json_float(d) : cJSON_CreateNumber(d);
}

static int read_config(struct ocfg *c, struct ckpt_err *err)
{
    long long ratio, mlp, emb, mq;
    c->olmo2 = get_bool(c, "attention_layer_norm", 0) &&
               get_bool(c, "norm_after", 0);
    if (get_int(c, "d_model", -1, &c->d, err) != 0 ||
        get_int(c, "n_heads", -1, &c->heads, err) != 0 ||
        get_int(c, "n_layers", -1, &c->layers, err) != 0 ||
        get_int(c, "max_sequence_length", -1, &c->maxpos, err) != 0 ||
        get_int(c, "vocab_size", -1, &c->vocab, err) != 0 ||
        get_int(c, "embedding_size", c->vocab, &emb, err) != 0 ||
        get_int(c, "mlp_ratio", 4, &ratio, err) != 0 ||
        get_int(c, "mlp_hidden_size", 0, &mlp, err) != 0)
        return -1;
    mq = get_bool(c, "multi_query_attention", 0);
    if (get_int(c, "n_kv_heads", mq ? 1 : c->heads, &c->kv, err) != 0)
        return -1;
    c->vocab = emb;
    c->hidden = mlp ? mlp : c->d * ratio;
    c->tied = get_bool(c, "weight_tying", 1);
    if (!c->heads || c->d % c->heads || !c->kv || c->hidden % 2)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: model: d_model %lld, "
                            "n_heads %lld, n_kv_heads %lld, MLP %lld do not "
                            "make an OLMo model", c->name, c->d, c->heads,
                            c->kv, c->hidden);
    return 0;
}

/* config.json of the model, as the scripts' OlmoConfig / Olmo2Config
 * save_pretrained writes it. */
static cJSON *make_config(const struct ocfg *c, const char *dtype)
{
    cJSON *o = cJSON_CreateObject(), *rope = cJSON_CreateObject();
    cJSON *arch = cJSON_CreateArray();
    const char *cls = c->olmo2 ? "Olmo2ForCausalLM" : "OlmoForCausalLM";
    cJSON_AddItemToArray(arch, cJSON_CreateString(cls));
    cJSON_AddItemToObject(o, "architectures", arch);
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddItemToObject(o, "attention_dropout", uns_hf_json_float(0));
    cJSON_AddNullToObject(o, "bos_token_id");
    if (!c->olmo2)
        cJSON_AddItemToObject(o, "clip_qkv",
                              number_or_null(c, "clip_qkv", NAN, 1));
    cJSON_AddStringToObject(o, "dtype", dtype);
    cJSON *eos = number_or_null(c, "eos_token_id", NAN, 0);
    if (c->olmo2 && cJSON_IsNumber(eos) && eos->valuedouble == 0)
        cJSON_SetNumberValue(eos, 50279);
    cJSON_AddItemToObject(o, "eos_token_id", eos);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "hidden_size", (double)c->d);
    cJSON_AddItemToObject(o, "initializer_range", uns_hf_json_float(0.02));
    cJSON_AddNumberToObject(o, "intermediate_size", (double)(c->hidden / 2));
    cJSON_AddNumberToObject(o, "max_position_embeddings", (double)c->maxpos);
    cJSON_AddStringToObject(o, "model_type", c->olmo2 ? "olmo2" : "olmo");
    cJSON_AddNumberToObject(o, "num_attention_heads", (double)c->heads);
    cJSON_AddNumberToObject(o, "num_hidden_layers", (double)c->layers);
    cJSON_AddNumberToObject(o, "num_key_value_heads", (double)c->kv);
    cJSON_AddItemToObject(o, "pad_token_id",
                          number_or_null(c, "pad_token_id", NAN, 0));
    if (c->olmo2)
        cJSON_AddItemToObject(o, "rms_norm_eps",
                              number_or_null(c, "layer_norm_eps", 1e-5, 1));
    /* olmo: the script's float 10000.0; olmo2: config.yaml's value as
     * it reads (an int stays an int). */
    cJSON_AddItemToObject(rope, "rope_theta",
                          number_or_null(c, "rope_theta", 10000, !c->olmo2));
    cJSON_AddStringToObject(rope, "rope_type", "default");
    cJSON_AddItemToObject(o, "rope_parameters", rope);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tied);
    cJSON_AddStringToObject(o, "transformers_version", TRANSFORMERS_VERSION);
    cJSON_AddBoolToObject(o, "use_cache", 1);
    cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab);
    return o;
}

/* generation_config.json: GenerationConfig.from_model_config, which
 * save_pretrained writes for a model that generates. */
static cJSON *make_generation(const cJSON *config)
{
    cJSON *g = cJSON_CreateObject();
    cJSON_AddBoolToObject(g, "_from_model_config", 1);
    static const char *const keys[] = { "bos_token_id", "eos_token_id",
                                        "pad_token_id" };
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, keys[i]);
        if (cJSON_IsNumber(v))
            cJSON_AddNumberToObject(g, keys[i], v->valuedouble);
    }
    cJSON_AddStringToObject(g, "transformers_version", TRANSFORMERS_VERSION);
    cJSON_AddBoolToObject(g, "use_cache", 1);
    return g;
}

struct olmap {
    const struct hf_model *mt;
    const struct ocfg *c;
    struct hf_map *m;
    char *used;                 /* per model tensor: mapped */
    struct ckpt_err *err;
};

/* The model tensor name (absent: -1, an error when need), its rows
 * checked against want (0: any 2-D... any shape). */
static long need(struct olmap *x, const char *name, uint64_t want, int req)
{
    long i = uns_hf_find(x->mt, name);
    if (i < 0) {
        if (req)
            ckpt_err_set(x->err, CKPT_EFORMAT, "OLMo tensor '%s' missing "
                         "(HF %s)", name, x->c->olmo2 ? "olmo2" : "olmo");
        return -1;
    }
    const struct ckpt_dcp_entry *e = x->mt->v[i].t->e;
    if (want && (e->ndim < 1 || e->size[0] != want)) {
        ckpt_err_set(x->err, CKPT_EFORMAT, "OLMo tensor '%s' has %llu rows; "
                     "%s says %llu", name,
                     (unsigned long long)(e->ndim ? e->size[0] : 0),
                     x->c->name, (unsigned long long)want);
        return -2;
    }
    x->used[i] = 1;
    return i;
}

static void add(struct olmap *x, long src, const char *fmt, long long layer,
                uint64_t row0, uint64_t rows)
{
    char *name = layer >= 0 ? ckpt_xasprintf(fmt, layer) : ckpt_xstrdup(fmt);
    if (!rows) {
        const struct ckpt_dcp_entry *e = x->mt->v[src].t->e;
        rows = e->ndim ? e->size[0] : 1;
    }
    uns_hf_add(x->m, name, (size_t)src, row0, rows);
}

/* One OLMo block as HF layer n. */
static int map_block(struct olmap *x, long long n)
{
    const struct ocfg *c = x->c;
    uint64_t d = (uint64_t)c->d, kvd = (uint64_t)(c->kv * (c->d / c->heads));
    uint64_t h = (uint64_t)c->hidden;
    char name[96];
#define T(part) (snprintf(name, sizeof(name), "transformer.blocks.%lld.%s", \
                          n, part), name)
    long qkv, out, ffp, ffo, qn, kn, an, fn;
    if ((qkv = need(x, T("att_proj.weight"), d + 2 * kvd, 1)) < 0 ||
        (out = need(x, T("attn_out.weight"), d, 1)) < 0 ||
        (ffp = need(x, T("ff_proj.weight"), h, 1)) < 0 ||
        (ffo = need(x, T("ff_out.weight"), d, 1)) < 0)
        return -1;
    add(x, qkv, "model.layers.%lld.self_attn.q_proj.weight", n, 0, d);
    add(x, qkv, "model.layers.%lld.self_attn.k_proj.weight", n, d, kvd);
    add(x, qkv, "model.layers.%lld.self_attn.v_proj.weight", n, d + kvd, kvd);
    add(x, out, "model.layers.%lld.self_attn.o_proj.weight", n, 0, 0);
    if (c->olmo2) {
        if ((qn = need(x, T("q_norm.weight"), d, 1)) < 0 ||
            (kn = need(x, T("k_norm.weight"), kvd, 1)) < 0)
            return -1;
        add(x, qn, "model.layers.%lld.self_attn.q_norm.weight", n, 0, 0);
        add(x, kn, "model.layers.%lld.self_attn.k_norm.weight", n, 0, 0);
    }
    add(x, ffp, "model.layers.%lld.mlp.gate_proj.weight", n, h / 2, h / 2);
    add(x, ffp, "model.layers.%lld.mlp.up_proj.weight", n, 0, h / 2);
    add(x, ffo, "model.layers.%lld.mlp.down_proj.weight", n, 0, 0);
    if (c->olmo2) {
        if ((an = need(x, T("attn_norm.weight"), d, 1)) < 0 ||
            (fn = need(x, T("ff_norm.weight"), d, 1)) < 0)
            return -1;
        add(x, an, "model.layers.%lld.post_attention_layernorm.weight", n,
            0, 0);
        add(x, fn, "model.layers.%lld.post_feedforward_layernorm.weight", n,
            0, 0);
    }
#undef T
    return 0;
}

static int map_olmo(struct olmap *x)
{
    const struct ocfg *c = x->c;
    long wte = need(x, "transformer.wte.weight", (uint64_t)c->vocab, 1);
    if (wte < 0)
        return -1;
    add(x, wte, "model.embed_tokens.weight", -1, 0, 0);
    for (long long n = 0; n < c->layers; n++)
        if (map_block(x, n) != 0)
            return -1;
    if (c->olmo2) {
        long ln = need(x, "transformer.ln_f.weight", (uint64_t)c->d, 1);
        if (ln < 0)
            return -1;
        add(x, ln, "model.norm.weight", -1, 0, 0);
    }
    long head = need(x, "transformer.ff_out.weight", (uint64_t)c->vocab, 0);
    if (head == -2)
        return -1;
    if (!c->tied)
        add(x, head >= 0 ? head : wte, "lm_head.weight", -1, 0, 0);
    for (size_t i = 0; i < x->mt->n; i++)
        if (!x->used[i])
            return ckpt_err_set(x->err, CKPT_EUNSUPPORTED, "OLMo tensor '%s' "
                                "has no place in HF %s (the conversion "
                                "script maps no such tensor)",
                                x->mt->v[i].name, c->olmo2 ? "olmo2" : "olmo");
    return 0;
}

int uns_hf_olmo_map(const struct hf_model *mt, const cJSON *config,
                    const char *config_name, struct hf_map *m,
                    struct ckpt_err *err)
{
    if (uns_hf_find(mt, "transformer.wte.weight") < 0)
        return 0;
    struct ocfg c;
    memset(&c, 0, sizeof(c));
    c.name = config_name ? config_name : "config.yaml";
    if (!config)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "no config.yaml in the "
                            "checkpoint or its run: an OLMo model's "
                            "config.json is made from its `model` section");
    c.m = cJSON_GetObjectItemCaseSensitive(config, "model");
    if (!cJSON_IsObject(c.m))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s has no `model` section",
                            c.name);
    if (read_config(&c, err) != 0)
        return -1;
    struct olmap x = { mt, &c, m, ckpt_xcalloc(mt->n + 1, 1), err };
    int rc = map_olmo(&x);
    free(x.used);
    if (rc != 0)
        return -1;
    const struct ckpt_dtype *dt = mt->v[uns_hf_find(mt,
                                        "transformer.wte.weight")].t->e->dtype;
    m->config = make_config(&c, dt->name);
    m->generation = make_generation(m->config);
    m->family = c.olmo2 ? "olmo2" : "olmo";
    return 1;
}

/* --- OLMo-core ------------------------------------------------------------ */

/*
 * OLMo-core's own model (olmo_core.nn.transformer) names its weights
 * differently; its HF converter (allenai/OLMo-core
 * src/olmo_core/nn/hf/convert.py, OLMO_CORE_TO_HF_WEIGHT_MAPPINGS and
 * the model-type overrides) maps them one to one, nothing fused:
 *
 *   embeddings.weight                     model.embed_tokens.weight
 *   lm_head.norm.weight                   model.norm.weight
 *   lm_head.w_out.weight                  lm_head.weight
 *   blocks.N.attention.w_q/w_k/w_v/w_out  model.layers.N.self_attn.
 *     (.weight, .bias)                      q_proj/k_proj/v_proj/o_proj
 *   blocks.N.attention.q_norm/k_norm      ...self_attn.q_norm/k_norm
 *   blocks.N.feed_forward.w1/w2/w3        ...mlp.gate_proj/down_proj/up_proj
 *   blocks.N.attention_norm               ...post_attention_layernorm
 *                                           (llama, qwen: input_layernorm)
 *   blocks.N.feed_forward_norm            ...post_feedforward_layernorm
 *                                           (llama, qwen: post_attention_
 *                                           layernorm)
 *
 * The HF config (model_type) comes from config.json beside the
 * checkpoint or --config-dir: OLMo-core builds it from the live model
 * object (get_hf_config), which a checkpoint does not hold.
 */
static const struct { const char *from, *to; } core_map[] = {
    { "attention.w_q.", "self_attn.q_proj." },
    { "attention.w_k.", "self_attn.k_proj." },
    { "attention.w_v.", "self_attn.v_proj." },
    { "attention.w_out.", "self_attn.o_proj." },
    { "attention.q_norm.", "self_attn.q_norm." },
    { "attention.k_norm.", "self_attn.k_norm." },
    { "feed_forward.w1.", "mlp.gate_proj." },
    { "feed_forward.w2.", "mlp.down_proj." },
    { "feed_forward.w3.", "mlp.up_proj." },
    { "attention_norm.", NULL },        /* by model type, below */
    { "feed_forward_norm.", NULL },
};

static char *core_name(const char *name, int prenorm)
{
    static const char *const top[][2] = {
        { "embeddings.weight", "model.embed_tokens.weight" },
        { "lm_head.norm.weight", "model.norm.weight" },
        { "lm_head.w_out.weight", "lm_head.weight" },
        { "lm_head.w_out.bias", "lm_head.bias" },
    };
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
        if (!strcmp(name, top[i][0]))
            return ckpt_xstrdup(top[i][1]);
    unsigned long layer;
    int n = 0;
    if (sscanf(name, "blocks.%lu.%n", &layer, &n) != 1 || !n)
        return NULL;
    const char *rest = name + n;
    for (size_t i = 0; i < sizeof(core_map) / sizeof(core_map[0]); i++) {
        size_t l = strlen(core_map[i].from);
        if (strncmp(rest, core_map[i].from, l) != 0 ||
            (strcmp(rest + l, "weight") && strcmp(rest + l, "bias")))
            continue;
        const char *to = core_map[i].to;
        if (!to && i + 2 == sizeof(core_map) / sizeof(core_map[0]))
            to = prenorm ? "input_layernorm." : "post_attention_layernorm.";
        else if (!to)
            to = prenorm ? "post_attention_layernorm."
                         : "post_feedforward_layernorm.";
        return ckpt_xasprintf("model.layers.%lu.%s%s", layer, to, rest + l);
    }
    return NULL;
}

int uns_hf_olmocore_map(const struct hf_model *mt, const cJSON *config,
                        struct hf_map *m, struct ckpt_err *err)
{
    if (uns_hf_find(mt, "embeddings.weight") < 0)
        return 0;
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(config,
                                                          "model_type");
    const char *type = cJSON_IsString(mtype) ? mtype->valuestring : "";
    static const char *const prenorm_types[] = { "llama", "qwen2", "qwen3" };
    static const char *const reordered[] = { "olmo2", "olmo3" };
    int prenorm = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(type, prenorm_types[i]))
            prenorm = 1;
    for (int i = 0; i < 2; i++)
        if (!strcmp(type, reordered[i]))
            prenorm = 0;
    if (prenorm < 0)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "OLMo-core weights as "
                            "HF model_type '%s': no mapping (olmo2, olmo3, "
                            "llama, qwen2, qwen3 are mapped)", type);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(config,
                                                        "tie_word_embeddings");
    for (size_t i = 0; i < mt->n; i++) {
        char *to = core_name(mt->v[i].name, prenorm);
        if (!to)
            return ckpt_err_set(err, CKPT_EUNSUPPORTED, "OLMo-core tensor "
                                "'%s' has no place in HF %s (OLMo-core's "
                                "converter maps no such dense tensor)",
                                mt->v[i].name, type);
        if (cJSON_IsTrue(tie) && !strcmp(to, "lm_head.weight")) {
            free(to);
            continue;
        }
        const struct ckpt_dcp_entry *e = mt->v[i].t->e;
        uns_hf_add(m, to, i, 0, e->ndim ? e->size[0] : 1);
    }
    m->family = "olmo-core";
    return 1;
}
