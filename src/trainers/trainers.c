/*
 * trainers.c - the trainer table (trainer.h), asked in order: the first
 * entry that recognises a checkpoint judges it. The trainers' entries
 * come first (a DeepSpeed or HF step may hold files of the generic
 * formats below), plain unsharded files last: that entry claims
 * whatever is left, and judges it unknown when it knows no file.
 * Every entry that has a Hugging Face export but Megatron's uses
 * uns_hf_layout (src/unshard/hf/export.c: OLMo's, OLMo-core's and HF's
 * own names, told apart by the model's tensor names).
 * Adding a trainer: its folder src/trainers/<name>/ and one line here
 * (docs/internals/new-format.md).
 */
#include <stddef.h>

#include "trainers/trainer.h"
#include "unshard/hf/hf.h"
#include "unshard/job.h"

/* name, format, recognise, judge, format_of, owns, plan, plan_opens,
 * export */
static const struct trainer table[] = {
    { "lightning", CKPT_FMT_LIGHTNING, lightning_recognise, lightning_judge,
      NULL, NULL, NULL, 0, uns_hf_layout },
    { "deepspeed", CKPT_FMT_DEEPSPEED, deepspeed_recognise, deepspeed_judge,
      NULL, deepspeed_owns, uns_ds_plan, 0, uns_hf_layout },
    { "megatron", CKPT_FMT_MEGATRON, megatron_recognise, megatron_judge,
      NULL, megatron_owns, uns_mg_plan, 1, uns_mg_export },
    { "dcp-hf", CKPT_FMT_DCP_HF, dcp_hf_recognise, dcp_hf_judge, NULL,
      dcp_hf_owns, uns_hfst_plan, 0, uns_hf_layout },
    { "hf", CKPT_FMT_HF, hf_recognise, hf_judge, hf_format, hf_owns, NULL,
      0, uns_hf_layout },
    { "orbax", CKPT_FMT_ORBAX, orbax_recognise, orbax_judge, NULL, NULL,
      uns_orbax_plan, 0, uns_hf_layout },
    { "dcp", CKPT_FMT_DCP, dcp_recognise, dcp_judge, NULL, dcp_owns,
      uns_dcp_plan, 1, uns_hf_layout },
    { "zarr", CKPT_FMT_ZARR, zarr_recognise, zarr_judge, NULL, NULL,
      uns_zarr_plan, 0, uns_hf_layout },
    { "olmo-core", CKPT_FMT_OLMO_CORE, olmo_core_recognise, olmo_core_judge,
      NULL, olmo_core_owns, uns_olmocore_plan, 0, uns_hf_layout },
    { "olmo-local", CKPT_FMT_OLMO_LOCAL, olmo_local_recognise,
      olmo_local_judge, NULL, olmo_local_owns, uns_olmolocal_plan, 0,
      uns_hf_layout },
    { "olmo-legacy", CKPT_FMT_OLMO_LEGACY, olmo_legacy_recognise,
      olmo_legacy_judge, NULL, olmo_legacy_owns, uns_legacy_plan, 0,
      uns_hf_layout },
    /* Last: whatever no other entry claims. Given directly, whole
     * safetensors files (a Hugging Face model directory,
     * HuggingFaceStorageWriter's consolidated output) are planned as
     * dcp-hf's. */
    { "unsharded", CKPT_FMT_UNSHARDED, plain_recognise, plain_judge, NULL,
      plain_owns, uns_hfst_plan, 0, uns_hf_layout },
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
        return uns_hf_layout(j, root, err);
    if (!T->export)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: no Hugging Face "
                            "export of %s checkpoints", j->src.top, T->name);
    return T->export(j, root, err);
}
