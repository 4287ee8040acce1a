/*
 * megatron/megatron.h - the Megatron hooks of the DCP reader
 * (dcp/plan.c): megatron/plan.c. Private to src/.
 */
#ifndef CKPT_TRAINERS_MEGATRON_H
#define CKPT_TRAINERS_MEGATRON_H

#include "merge/job.h"

/* megatron/plan.c: a Megatron torch_dist step, read as DCP. After the
 * metadata is read: common.pt, when present, becomes a byte item. */
int uns_mg_open(struct ujob *j, struct ckpt_err *err);
/* The DCP source could not be opened: 1 when it is a legacy Megatron step
 * (mp_rank_* directories), which megatron/plan_legacy.c plans. */
int uns_mg_is_legacy(struct ujob *j);
/* megatron/plan_legacy.c: the step j->src.dir, its tensor and pipeline
 * ranks merged into one model state dict. */
int uns_mg_legacy_plan(struct ujob *j, struct ckpt_err *err);
/* The tree built: the common state becomes the root, every other entry
 * merged into it (Megatron's dict_utils.merge). */
int uns_mg_merge(struct ujob *j, struct ckpt_pv **root,
                 struct ckpt_err *err);

#endif
