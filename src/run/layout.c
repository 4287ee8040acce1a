/*
 * layout.c - the table of trainer layouts (layout.h), asked in order
 * before judge.c's own formats: the first that recognises a checkpoint
 * judges it.
 */
#include "layout.h"

static const struct judge_layout *const layouts[] = {
    &judge_layout_deepspeed,
    &judge_layout_megatron,
    &judge_layout_hf,
};

const struct judge_layout *judge_layout_find(const struct judge_view *v)
{
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        if (layouts[i]->recognise(v))
            return layouts[i];
    return NULL;
}
