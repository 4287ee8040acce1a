/*
 * hf/hf.h - `ckpt unshard --format hf`: the model weights of a planned
 * checkpoint as a Hugging Face model directory (config.json,
 * generation_config.json, tokenizer files, model.safetensors or its
 * shards and model.safetensors.index.json). Private to src/: do not
 * expose.
 *
 *   hf/export.c   the export's layout: which tensors are the model's, their
 *                 HF names (through a family's map), the shards, the index
 *                 and the files written or copied beside them
 *   src/trainers/olmo/export_hf.c
 *                 the OLMo family: config.yaml -> config.json, OLMo's and
 *                 OLMo-core's names -> HF olmo / olmo2, as transformers'
 *                 and OLMo-core's converters map them
 *   src/trainers/megatron/export_hf.c
 *                 megatron.core GPT names -> HF llama, as Megatron-Bridge
 *                 maps them (struct hf_names' own)
 *   hf/cast.c     --dtype: floating tensors cast as torch casts them
 *   hf/json.c     JSON as Python's json module writes it (config.json)
 *   hf/part.c     --part I/N: a share of the shards, the index by the last
 *
 * The engine copies every output tensor as it copies any tensor; an
 * export only adds slices (a tensor that is some rows of a fused one,
 * contiguous or in blocks, or one layer of stacked layers: utensor.whole)
 * and casts (utensor.cast). See docs/formats/hf-export.md.
 */
#ifndef CKPT_MERGE_HF_H
#define CKPT_MERGE_HF_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"

struct ujob;
struct hf_model;
struct hf_map;
struct utensor;
struct ckpt_pv;
struct ckpt_unshard_result;
struct cJSON;

struct hf_names;
/* The outputs of an export, in place of outputs/torch_layout.c's (CKPT_FORMAT_HF):
 * every output file planned, every exported tensor given its file and
 * offset, every other tensor left out (file -1). root: the step's value
 * tree; names: the trainers' name families to try (NULL: HF names only).
 * 0, or -1 with err naming what is missing (no config, a tensor no map
 * knows). */
int uns_hf_layout(struct ujob *j, const struct ckpt_pv *root,
                  const struct hf_names *names, struct ckpt_err *err);

/* A family that names its own tensors and reads config.json (found as
 * for HF names: the checkpoint, the directory above it, --config-dir;
 * parsed, at config_path), which the export copies; root is the step's
 * value tree: 0 with m filled, or -1 with err naming what does not fit. */
typedef int (*uns_hf_map_fn)(struct ujob *j, const struct ckpt_pv *root,
                             const struct hf_model *mt,
                             const struct cJSON *config,
                             const char *config_path, struct hf_map *m,
                             struct ckpt_err *err);

/* The result's counts for an export: the tensors and bytes written. */
void uns_hf_result(const struct ujob *j, struct ckpt_unshard_result *res);

/* --- the family maps (hf/export.c asks each in turn) --------------------- */

/* One output tensor: rows [row0, row0 + rows) along dim 0 of the model
 * tensor src (all of its rows: the tensor as it is); with blk, rows in
 * blocks of blk, one every stride rows from row0 (row r of the piece is
 * row row0 + (r / blk) * stride + r % blk of src). */
struct hf_piece {
    char *name;             /* HF name; owned */
    size_t src;             /* index into hf_model.v */
    uint64_t row0, rows;
    uint64_t blk, stride;   /* 0: contiguous */
    int64_t layer;          /* >= 0: src is layers stacked on dim 0, the
                               piece is of that layer (rows along dim 1);
                               -1: src as it is */
};

/* The model's tensors as the planner found them. */
struct hf_model {
    struct hf_mtensor {
        const char *name;   /* below the state dict's "model" entry, or
                               the whole key; borrowed (plan arena) */
        struct utensor *t;  /* borrowed */
    } *v;
    size_t n;
};

/* What a family makes of the model: its pieces in the HF model's order,
 * and config.json (and generation_config.json) to write, or NULL to
 * copy the source's. */
struct hf_map {
    struct hf_piece *v;
    size_t n, cap;
    struct cJSON *config;       /* owned, or NULL */
    struct cJSON *generation;   /* owned, or NULL */
    const char *family;         /* "olmo", "olmo2", "hf" (static) */
};

/* Append a piece (name malloced, taken over). */
void uns_hf_add(struct hf_map *m, char *name, size_t src, uint64_t row0,
                uint64_t rows);
/* Append a piece of rows in blocks (hf_piece.blk, stride >= blk; 0 0:
 * contiguous) of src, or of its layer `layer` when src's dim 0 stacks
 * layers (-1: src as it is). */
void uns_hf_add_layer(struct hf_map *m, char *name, size_t src, int64_t layer,
                      uint64_t row0, uint64_t rows, uint64_t blk,
                      uint64_t stride);
/* The model tensor named name, or -1. */
long uns_hf_find(const struct hf_model *mt, const char *name);

/* A trainer's own tensor names and how they become HF's, tried before
 * the names are taken as HF's already; the trainer table passes its
 * families (src/trainers/trainers.c). Each returns 1 when the model's
 * names are its (m filled), 0 when they are not, -1 with err. */
struct hf_names {
    /* A trainer whose names are its own alone (Megatron's,
     * src/trainers/megatron/export_hf.c): when set, the only family
     * asked, and it must take the model. */
    uns_hf_map_fn own;
    /* Names whose config.json is made from config.yaml (OLMo): config
     * the step's or the run's config.yaml parsed, config_name its path;
     * config NULL: none found. */
    int (*with_yaml)(const struct hf_model *mt, const struct cJSON *config,
                     const char *config_name, struct hf_map *m,
                     struct ckpt_err *err);
    /* Names mapped by the config.json that comes with the checkpoint
     * (OLMo-core's, by its model_type). */
    int (*with_json)(const struct hf_model *mt, const struct cJSON *config,
                     struct hf_map *m, struct ckpt_err *err);
};

/* --- hf/cast.c ------------------------------------------------------------ */

struct ckpt_dtype;
/* n elements of dtype from (little-endian) at in as float32 (torch's
 * Tensor.float() of a buffer; DeepSpeed's fp32 consolidation uses it). */
void uns_cast_to_f32(const struct ckpt_dtype *from, const unsigned char *in,
                     uint64_t n, float *out);
/* n float32 values as little-endian bfloat16, as torch casts them. */
void uns_cast_f32_to_bf16(const float *in, uint64_t n, unsigned char *out);

/* The dtype --dtype names ("fp32"/"float32", "bf16"/"bfloat16",
 * "fp16"/"float16"), or NULL. */
const struct ckpt_dtype *uns_hf_dtype(const char *name);
/* Bytes of the cast of n bytes of t (n when t is not cast). */
uint64_t uns_hf_cast_size(const struct utensor *t, uint64_t n);
/* The n bytes at in (elements of t->e->dtype) cast to t->cast into out
 * (room for uns_hf_cast_size(t, n)); returns that size. */
uint64_t uns_hf_cast_band(const struct utensor *t, const char *in,
                          uint64_t n, char *out);
/* n float32 values as IEEE half precision (little-endian), rounded to
 * nearest even as torch's float -> half conversion does (NaN: sign and
 * 0x7e00). Exported for the unit test. */
void uns_hf_f32_to_f16(const float *in, uint64_t n, unsigned char *out);

/* --- hf/json.c ------------------------------------------------------------ */

/* o as json.dumps(o, indent=2, sort_keys=True) + "\n" writes it
 * (transformers' config files): numbers as ints when integral (a float
 * is a node of uns_hf_json_float), non-ASCII as \uXXXX. Malloced. */
char *uns_hf_json(const struct cJSON *o);
/* A float, written as Python's repr writes it. */
struct cJSON *uns_hf_json_float(double v);
/* The double as Python's repr(float) writes it ("1e-05", "10000.0"). */
void uns_hf_py_float(double v, char *buf, size_t n);

/* --- hf/part.c ------------------------------------------------------------ */

/* --part I/N, after the layout: only the shards of part I stay in the
 * plan (the others' tensors are left out), the index and the files
 * beside the shards are left to the part that finishes last. 0 or -1. */
int uns_hf_part_plan(struct ujob *j, struct ckpt_err *err);
/* After part I's shards are in DEST: its record, and when every part's
 * record is there, the index and the other files (a rerun writes the
 * same bytes). *done: 0 recorded, 1 this call finished the export, 2 it
 * was finished already (no record left). */
int uns_hf_part_finish(struct ujob *j, const char *dest, int *done,
                       struct ckpt_err *err);
struct hf_part;
void uns_hf_part_free(struct hf_part *p);

#endif
