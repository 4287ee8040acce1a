/*
 * trainer.h - the trainer table: one entry per trainer (or checkpoint
 * format) that ckpt reads, the one place that says which code knows a
 * trainer's checkpoints. The judge (src/run/judge.c) asks the entries in
 * order and the first that recognises a checkpoint judges it; unshard
 * (src/unshard/unshard.c) plans a step with the entry of the format the
 * judge named. An entry's code lives in src/trainers/<name>/: judge.c
 * (recognise, judge, owns, root, list, named), plan*.c (the unshard
 * plan), export (--format hf), and whatever else is that trainer's
 * alone. The helpers every judge shares are src/trainers/judge.c; run/
 * asks the table and never names a trainer. Adding a trainer is its folder and one
 * line of trainers.c (docs/internals/new-format.md). Private to src/.
 */
#ifndef CKPT_TRAINERS_TRAINER_H
#define CKPT_TRAINERS_TRAINER_H

#include "ckpt/run.h"

struct cJSON;
struct ckpt_pv;
struct hf_map;
struct hf_model;
struct judge_view;
struct ujob;

struct trainer {
    const char *name;          /* for docs and messages */
    enum ckpt_format format;   /* what its checkpoints are judged as;
                                  one entry per format */
    /* 1 if the checkpoint is this trainer's, from names alone. */
    int (*recognise)(const struct judge_view *v);
    /* Set c->complete / why / unknown; -1 (err) only when files cannot
     * be read. */
    int (*judge)(const struct judge_view *v, struct ckpt_checkpoint *c,
                 struct ckpt_err *err);
    /* The format from names alone (ckpt_judge_format); NULL: format. */
    enum ckpt_format (*format_of)(const struct judge_view *v);
    /* 1 if file rel (relative to the checkpoint) is one this trainer's
     * writer writes, so that its judgement covers it; NULL: every file
     * of the directory is (Orbax, zarr, Lightning). A weights-like file
     * it does not own in a checkpoint it proved incomplete is not
     * accounted for (account.c): the run is then never bad. */
    int (*owns)(const struct judge_view *v, const char *rel);
    /* Plan the unshard of one step (src/merge/job.h): its
     * tensors, byte items and output files; nothing is written. NULL:
     * the step is read as torch DCP (dcp/plan.c), whose errors say what
     * is missing. */
    int (*plan)(struct ujob *j, const char *src, struct ckpt_err *err);
    /* 1: plan is given SRC as the user gave it and opens it itself (the
     * DCP reader, src/merge/sources/source.c); 0: the step is opened first and
     * plan is given its path where it is read. */
    int plan_opens;
    /* --format hf: lay out the Hugging Face model directory of the
     * planned step (its tensors in j->plan, its value tree root) in place
     * of the torch or safetensors files. trainers.c's hf_export (the
     * directory of src/merge/hf/export.c, with OLMo's and OLMo-core's
     * names mapped by olmo/export_hf.c) serves most; a trainer
     * whose names have no published HF mapping refuses, saying so. NULL:
     * refused as not exportable. */
    int (*export)(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err);
    /* 1 when v, a directory given as itself (`ckpt unshard DIR`, a step
     * given as a run), is one checkpoint by this trainer's names at its
     * top, beside the generic marks run.c knows (.metadata, .zgroup ...);
     * NULL: those marks alone. */
    int (*root)(const struct judge_view *v);
    /* Checkpoints this trainer keeps where no checkpoint name shows them
     * (Lightning's *.ckpt): 1 when file f of a run is such a checkpoint
     * or lies in one, whose directory is f->path's first *dir_len bytes,
     * its name those from *name_at, its step *step (-1: unknown until
     * judged). NULL: its checkpoints are found by name (stepN,
     * checkpoint-N, ...: ckpt_checkpoint_name). */
    int (*list)(const struct ckpt_tree_file *f, size_t *dir_len,
                size_t *name_at, int64_t *step);
    /* A directory at a checkpoint's place without a step in its name
     * (final/, release/) is a checkpoint when recognise takes it and,
     * where set, this does too. NULL: recognise is enough. */
    int (*named)(const struct judge_view *v);
};

/* The trainer of v: the first entry of the table that recognises it
 * (never NULL: the last entry, plain unsharded files, takes the rest). */
const struct trainer *trainer_find(const struct judge_view *v);
/* The entry of format f, or NULL (CKPT_FMT_UNKNOWN). */
const struct trainer *trainer_of_format(enum ckpt_format f);
/* The HF export of the step j planned: its trainer's export (that of
 * j->o->source_format; trainers.c's hf_export when no entry names it). */
int trainer_export(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err);
/* The files of the step j planned, as --format asks: the HF model
 * directory of trainer_export, safetensors (uns_st_layout) or torch zips
 * (uns_torch_layout). Every plan ends here. */
int trainer_layout(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err);
/* 1 when an entry's root takes v (the directory given as itself). */
int trainer_root(const struct judge_view *v);
/* The first entry's list that takes file f of a run (see list). */
int trainer_list(const struct ckpt_tree_file *f, size_t *dir_len,
                 size_t *name_at, int64_t *step);

/* --- the entries' code, one block per trainer (src/trainers/<name>/) --- */

/* lightning/: PyTorch Lightning .ckpt files and directories */
int lightning_recognise(const struct judge_view *v);
int lightning_list(const struct ckpt_tree_file *f, size_t *dir_len,
                   size_t *name_at, int64_t *step);
int lightning_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                    struct ckpt_err *err);

/* deepspeed/: DeepSpeed ZeRO-1/2/3 steps (global_stepN/), as zero_to_fp32 */
int deepspeed_recognise(const struct judge_view *v);
int deepspeed_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                    struct ckpt_err *err);
int deepspeed_owns(const struct judge_view *v, const char *rel);
int uns_ds_plan(struct ujob *j, const char *src, struct ckpt_err *err);

/* megatron/: Megatron-LM torch_dist (DCP + common.pt) and legacy
 * mp_rank_* steps */
int megatron_recognise(const struct judge_view *v);
int megatron_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                   struct ckpt_err *err);
int megatron_owns(const struct judge_view *v, const char *rel);
int uns_mg_plan(struct ujob *j, const char *src, struct ckpt_err *err);
/* --format hf: a Llama-shaped GPT as HF llama (megatron/export_hf.c). */
int uns_mg_export(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err);

/* dcphf/: torch DCP HuggingFaceStorageWriter shards */
int dcp_hf_recognise(const struct judge_view *v);
int dcp_hf_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                 struct ckpt_err *err);
int dcp_hf_owns(const struct judge_view *v, const char *rel);
/* The *.safetensors files of a directory as torch DCP's
 * HuggingFaceStorageReader reads them (DCP_SHARDING_INFO offsets); plain
 * safetensors directories are planned with it too. */
int uns_hfst_plan(struct ujob *j, const char *src, struct ckpt_err *err);

/* hf/: HF Trainer / accelerate checkpoint-N (FSDP DCP subdirectories,
 * DeepSpeed global_stepN/, whole weights) */
int hf_recognise(const struct judge_view *v);
int hf_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
             struct ckpt_err *err);
enum ckpt_format hf_format(const struct judge_view *v);
int hf_root(const struct judge_view *v);
int hf_owns(const struct judge_view *v, const char *rel);

/* orbax/: Orbax steps (<step>/<item>/, OCDBT or zarr v2 per array) */
int orbax_recognise(const struct judge_view *v);
int orbax_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err);
int uns_orbax_plan(struct ujob *j, const char *src, struct ckpt_err *err);

/* dcp/: torch DCP (OLMo torch_new among them) */
int dcp_recognise(const struct judge_view *v);
int dcp_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
              struct ckpt_err *err);
int dcp_owns(const struct judge_view *v, const char *rel);
int uns_dcp_plan(struct ujob *j, const char *src, struct ckpt_err *err);

/* zarr/: zarr v2 pytree checkpoints (.zgroup + one array per leaf) */
int zarr_recognise(const struct judge_view *v);
int zarr_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
               struct ckpt_err *err);
int uns_zarr_plan(struct ujob *j, const char *src, struct ckpt_err *err);

/* olmo/: OLMo olmo_core (OLMo-core 0.1 safetensors), local
 * ({model,optim,train}/rank{R}.pt) and legacy (rank*.pt) steps */
int olmo_core_recognise(const struct judge_view *v);
int olmo_core_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                    struct ckpt_err *err);
int olmo_core_owns(const struct judge_view *v, const char *rel);
int uns_olmocore_plan(struct ujob *j, const char *src, struct ckpt_err *err);
int olmo_local_recognise(const struct judge_view *v);
int olmo_local_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                     struct ckpt_err *err);
int olmo_local_owns(const struct judge_view *v, const char *rel);
int uns_olmolocal_plan(struct ujob *j, const char *src, struct ckpt_err *err);
int olmo_legacy_recognise(const struct judge_view *v);
int olmo_legacy_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                      struct ckpt_err *err);
int olmo_legacy_owns(const struct judge_view *v, const char *rel);
int olmo_legacy_named(const struct judge_view *v);
int uns_legacy_plan(struct ujob *j, const char *src, struct ckpt_err *err);
/* export_hf.c: the HF export's name families (struct hf_names,
 * src/merge/hf/hf.h). OLMo's names (transformer.blocks.N...) with the
 * step's or the run's config.yaml (config NULL: none found, an error);
 * OLMo-core's (embeddings.weight, blocks.N.attention.w_q.weight, ...) as
 * OLMo-core's HF converter maps them for config.json's model_type (olmo2,
 * olmo3: reordered norms; llama, qwen2, qwen3: pre-norm). 1 taken, 0 not
 * these names, -1 err (a tensor with no mapping, MoE). */
int uns_hf_olmo_map(const struct hf_model *mt, const struct cJSON *config,
                    const char *config_name, struct hf_map *m,
                    struct ckpt_err *err);
int uns_hf_olmocore_map(const struct hf_model *mt,
                        const struct cJSON *config, struct hf_map *m,
                        struct ckpt_err *err);

/* plain/: unsharded files (model.pt, *.safetensors, HF weights) */
int plain_recognise(const struct judge_view *v);
int plain_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err);
int plain_owns(const struct judge_view *v, const char *rel);
/* 1 when v holds a weights file plain_judge knows by name (named). */
int plain_named_weights(const struct judge_view *v);

#endif
