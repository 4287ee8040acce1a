/*
 * trainers.c - the trainer table (trainer.h), asked in order: the first
 * entry that recognises a checkpoint judges it. The trainers' entries
 * come first (a DeepSpeed or HF step may hold files of the generic
 * formats below), plain unsharded files last: that entry claims
 * whatever is left, and judges it unknown when it knows no file.
 * Every entry that has a Hugging Face export but Megatron's uses
 * hf_export: src/merge/hf/export.c's directory, with OLMo's and
 * OLMo-core's names mapped by olmo/export_hf.c.
 * Adding a trainer: its folder src/trainers/<name>/ and one line here
 * (docs/internals/new-format.md).
 */
#include <stddef.h>

#include "merge/hf/hf.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "trainers/trainer.h"

/* The HF export of every entry that has one but Megatron's: the names
 * as HF's, or OLMo's and OLMo-core's mapped to them (olmo/export_hf.c),
 * told apart by the model's tensor names. */
static const struct hf_names hf_names = {
    .with_yaml = uns_hf_olmo_map, .with_json = uns_hf_olmocore_map,
};

static int hf_export(struct ujob *j, struct ckpt_pv *root,
                     struct ckpt_err *err)
{
    return uns_hf_layout(j, root, &hf_names, err);
}

/* Each entry names only the fields it has (trainer.h says what each
 * is for); the order is the order in which the judge asks them. */
static const struct trainer table[] = {
    { .name = "lightning", .format = CKPT_FMT_LIGHTNING,
      .recognise = lightning_recognise, .judge = lightning_judge,
      .export = hf_export, .list = lightning_list },
    { .name = "deepspeed", .format = CKPT_FMT_DEEPSPEED,
      .recognise = deepspeed_recognise, .judge = deepspeed_judge,
      .owns = deepspeed_owns, .plan = uns_ds_plan, .export = hf_export,
      .root = deepspeed_recognise },
    { .name = "megatron", .format = CKPT_FMT_MEGATRON,
      .recognise = megatron_recognise, .judge = megatron_judge,
      .owns = megatron_owns, .plan = uns_mg_plan, .plan_opens = 1,
      .export = uns_mg_export, .root = megatron_recognise },
    { .name = "dcp-hf", .format = CKPT_FMT_DCP_HF,
      .recognise = dcp_hf_recognise, .judge = dcp_hf_judge,
      .owns = dcp_hf_owns, .plan = uns_hfst_plan, .export = hf_export,
      .root = dcp_hf_recognise },
    { .name = "hf", .format = CKPT_FMT_HF, .recognise = hf_recognise,
      .judge = hf_judge, .format_of = hf_format, .owns = hf_owns,
      .export = hf_export, .root = hf_root },
    { .name = "orbax", .format = CKPT_FMT_ORBAX, .recognise = orbax_recognise,
      .judge = orbax_judge, .plan = uns_orbax_plan, .export = hf_export },
    { .name = "dcp", .format = CKPT_FMT_DCP, .recognise = dcp_recognise,
      .judge = dcp_judge, .owns = dcp_owns, .plan = uns_dcp_plan,
      .plan_opens = 1, .export = hf_export },
    { .name = "zarr", .format = CKPT_FMT_ZARR, .recognise = zarr_recognise,
      .judge = zarr_judge, .plan = uns_zarr_plan, .export = hf_export },
    { .name = "olmo-core", .format = CKPT_FMT_OLMO_CORE,
      .recognise = olmo_core_recognise, .judge = olmo_core_judge,
      .owns = olmo_core_owns, .plan = uns_olmocore_plan,
      .export = hf_export },
    { .name = "olmo-local", .format = CKPT_FMT_OLMO_LOCAL,
      .recognise = olmo_local_recognise, .judge = olmo_local_judge,
      .owns = olmo_local_owns, .plan = uns_olmolocal_plan,
      .export = hf_export },
    { .name = "olmo-legacy", .format = CKPT_FMT_OLMO_LEGACY,
      .recognise = olmo_legacy_recognise, .judge = olmo_legacy_judge,
      .owns = olmo_legacy_owns, .plan = uns_legacy_plan,
      .export = hf_export, .named = olmo_legacy_named },
    /* Last: whatever no other entry claims. Given directly, whole
     * safetensors files (a Hugging Face model directory,
     * HuggingFaceStorageWriter's consolidated output) are planned as
     * dcp-hf's. */
    { .name = "unsharded", .format = CKPT_FMT_UNSHARDED,
      .recognise = plain_recognise, .judge = plain_judge, .owns = plain_owns,
      .plan = uns_hfst_plan, .export = hf_export,
      .named = plain_named_weights },
};

#define NTRAINERS (sizeof(table) / sizeof(table[0]))

const struct trainer *trainer_find(const struct judge_view *v)
{
    for (size_t i = 0; i < NTRAINERS; i++)
        if (table[i].recognise(v))
            return &table[i];
    return &table[NTRAINERS - 1];  /* not reached: it recognises all */
}

const struct trainer *trainer_of_format(enum ckpt_format f)
{
    for (size_t i = 0; i < NTRAINERS; i++)
        if (table[i].format == f)
            return &table[i];
    return NULL;
}

int trainer_export(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err)
{
    const struct trainer *T =
        trainer_of_format((enum ckpt_format)j->o->source_format);
    if (!T)
        return hf_export(j, root, err);
    if (!T->export)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: no Hugging Face "
                            "export of %s checkpoints", j->src.top, T->name);
    return T->export(j, root, err);
}

int trainer_layout(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err)
{
    if (j->o->format == CKPT_FORMAT_HF)
        return trainer_export(j, root, err);
    if (j->o->format == CKPT_FORMAT_SAFETENSORS)
        return uns_st_layout(j, root, err);
    return uns_torch_layout(j, root, err);
}

int trainer_root(const struct judge_view *v)
{
    for (size_t i = 0; i < NTRAINERS; i++)
        if (table[i].root && table[i].root(v))
            return 1;
    return 0;
}

int trainer_list(const struct ckpt_tree_file *f, size_t *dir_len,
                 size_t *name_at, int64_t *step)
{
    for (size_t i = 0; i < NTRAINERS; i++)
        if (table[i].list && table[i].list(f, dir_len, name_at, step))
            return 1;
    return 0;
}
