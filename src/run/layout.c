/*
 * layout.c - the table of checkpoint layouts (layout.h), asked in order:
 * the first that recognises a checkpoint judges it. The trainers' layouts
 * come first (a DeepSpeed or HF step may hold files of the generic
 * formats below), plain unsharded files last: that entry claims
 * whatever is left, and judges it unknown when it knows no file.
 */
#include "layout.h"

static const struct judge_layout *const layouts[] = {
    &judge_layout_lightning,
    &judge_layout_deepspeed,
    &judge_layout_megatron,
    &judge_layout_dcp_hf,
    &judge_layout_hf,
    &judge_layout_orbax,
    &judge_layout_dcp,
    &judge_layout_zarr,
    &judge_layout_olmo_core,
    &judge_layout_olmo_local,
    &judge_layout_olmo_legacy,
    &judge_layout_plain,
};

const struct judge_layout *judge_layout_find(const struct judge_view *v)
{
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        if (layouts[i]->recognise(v))
            return layouts[i];
    return &judge_layout_plain;  /* not reached: it recognises all */
}
