/*
 * dcp/plan.c - the unshard plan of a torch DCP step: its metadata and
 * data files opened where they are (src/merge/sources/source.c), every chunk
 * located and checked, the output value tree built. Megatron torch_dist
 * (megatron/plan.c) and accelerate FSDP steps (hf/) are read with it too,
 * and so is a step whose trainer has no plan of its own.
 */
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/megatron/megatron.h"
#include "trainers/trainer.h"

int uns_dcp_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct ckpt_pv *root;
    if (uns_src_open(j, src, err) != 0) {
        if (!j->plan.megatron || !uns_mg_is_legacy(j))
            return -1;
        ckpt_err_clear(err);
        return uns_mg_legacy_plan(j, err);
    }
    if (uns_rank_values(j, err) != 0)
        return -1;
    /* accelerate's DCP is {"model": state_dict}: model.pt (or
     * model.safetensors) holds the state dict, as merge-weights writes it. */
    j->plan.olmo = j->o->layout == CKPT_LAYOUT_OLMO ||
              (j->o->layout == CKPT_LAYOUT_AUTO &&
               (j->src.olmo_step || j->src.accelerate));
    if ((j->plan.megatron && uns_mg_open(j, err) != 0) ||
        uns_plan_tensors(j, err) != 0 || uns_tree_build(j, &root, err) != 0 ||
        (j->plan.megatron && uns_mg_merge(j, &root, err) != 0))
        return -1;
    return trainer_layout(j, root, err);
}
