/*
 * hf/judge.c - HF Trainer checkpoint-N/ directories (transformers
 * Trainer._save_checkpoint), accelerate's FSDP sharded state inside them,
 * PEFT adapters.
 *
 * The writer's rule (transformers 5.x Trainer._save_checkpoint): the
 * weights first (save_model: model.safetensors, or shards +
 * model.safetensors.index.json, or adapter_model.safetensors, plus
 * training_args.bin), then unless save_only_model the optimizer and
 * scheduler (optimizer.pt, scheduler.pt; with FSDP SHARDED_STATE_DICT
 * accelerate's DCP directories pytorch_model_fsdp_N/ and optimizer_N/),
 * the RNG state (rng_state.pth, rng_state_<process>.pth), and last
 * trainer_state.json. So a step holding what _save_checkpoint writes
 * after the weights (optimizer, scheduler, RNG state) but no
 * trainer_state.json never finished. A directory with weights and
 * training_args.bin alone may be a save_model() a user named like a
 * checkpoint, or a save_only_model step: it is judged by its files'
 * structure only (never deleted for lacking trainer_state.json).
 * With DeepSpeed the engine saves its own checkpoint into the step
 * (global_stepN/) in place of optimizer.pt: judged by DeepSpeed's rule.
 * accelerate's own Accelerator.save_state folders (checkpoints/
 * checkpoint_N/: model.safetensors or pytorch_model_fsdp_N/, optimizer.bin
 * or optimizer_N/, scheduler.bin, random_states_R.pkl) have no
 * Trainer files and no last file to look for: judged by their files'
 * structure and DCP directories alone.
 * Every file is judged by its structure as judge.c does for unsharded
 * files (whole zips, safetensors headers, every shard an index names);
 * each DCP directory as DCP.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

/* "pytorch_model_fsdp_N" or "optimizer_N" as the first component of rel:
 * its length, else 0. */
static size_t fsdp_dir(const char *rel)
{
    static const char *pre[] = { "pytorch_model_fsdp_", "optimizer_" };
    const char *sl = strchr(rel, '/');
    if (!sl)
        return 0;
    size_t n = (size_t)(sl - rel);
    for (size_t k = 0; k < 2; k++) {
        size_t pl = strlen(pre[k]);
        if (n <= pl || strncmp(rel, pre[k], pl) != 0)
            continue;
        size_t i = pl;
        while (i < n && rel[i] >= '0' && rel[i] <= '9')
            i++;
        if (i == n)
            return n;
    }
    return 0;
}

static int has_top(const struct judge_view *v, const char *prefix,
                   const char *suffix)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        if (!strchr(r, '/') && ckpt_str_startswith(r, prefix) &&
            ckpt_str_endswith(r, suffix))
            return 1;
    }
    return 0;
}

static int has_fsdp(const struct judge_view *v)
{
    for (size_t i = v->lo; i < v->hi; i++)
        if (fsdp_dir(judge_rel(v, i)))
            return 1;
    return 0;
}

/* accelerate's own Accelerator.save_state (checkpoints/checkpoint_N/):
 * names the HF Trainer never writes (accelerate's save_accelerator_state:
 * optimizer.bin, scheduler.bin, sampler.bin, random_states_R.pkl; with
 * FSDP FULL_STATE_DICT pytorch_model_fsdp.bin). */
static int acc_state(const struct judge_view *v)
{
    return has_top(v, "random_states_", ".pkl") ||
           has_top(v, "scheduler", ".bin") || has_top(v, "optimizer", ".bin") ||
           has_top(v, "sampler", ".bin") ||
           has_top(v, "pytorch_model_fsdp", ".bin");
}

int hf_recognise(const struct judge_view *v)
{
    return judge_get(v, "trainer_state.json") ||
           judge_get(v, "training_args.bin") ||
           has_top(v, "rng_state", ".pth") || has_fsdp(v) || acc_state(v);
}

/* A step given as itself whose top holds accelerate's FSDP directories
 * (pytorch_model_fsdp_N/, optimizer_N/): one checkpoint, not a run (no
 * run keeps them at its top; accelerate's save_state(DIR) writes them
 * there). */
int hf_root(const struct judge_view *v)
{
    return has_fsdp(v);
}

/* An accelerate save_state folder without FSDP directories: each torch
 * file at its top whole (.bin are torch.save zips), and its weights there
 * (model.safetensors, pytorch_model.bin, FULL_STATE_DICT's
 * pytorch_model_fsdp.bin). */
static int acc_plain(const struct judge_view *v, struct ckpt_checkpoint *c,
                     struct ckpt_err *err)
{
    int weights = 0;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        if (strchr(r, '/') || v->t->files[i].type == CKPT_ENTRY_DIR)
            continue;
        int st = ckpt_str_endswith(r, ".safetensors");
        if (!st && !ckpt_str_endswith(r, ".bin"))
            continue;
        weights |= st || ckpt_str_startswith(r, "pytorch_model");
        if (judge_whole(v, c, r, st, err) != 0)
            return -1;
    }
    if (!weights)
        judge_unknown(c, "%s", "no model weights at its top (accelerate "
                      "save_state of a DeepSpeed or Megatron model?)");
    return 0;
}

enum ckpt_format hf_format(const struct judge_view *v)
{
    return has_fsdp(v) ? CKPT_FMT_HF : CKPT_FMT_UNSHARDED;
}

/* The FSDP case: each DCP directory, and the torch files beside. */
static int hf_fsdp(const struct judge_view *v, struct ckpt_checkpoint *c,
                   struct ckpt_err *err)
{
    const char *last = NULL;
    size_t lastn = 0;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        size_t n = fsdp_dir(r);
        if (n && !(last && n == lastn && !strncmp(r, last, n))) {
            last = r;
            lastn = n;
            char *d = ckpt_xstrndup(r, n);
            int rc = judge_dcp_dir(v, c, d, err);
            free(d);
            if (rc != 0)
                return -1;
        }
        if (strchr(r, '/') || v->t->files[i].type == CKPT_ENTRY_DIR)
            continue;
        if (ckpt_str_endswith(r, ".pt") || ckpt_str_endswith(r, ".pth") ||
            ckpt_str_endswith(r, ".bin")) {
            if (judge_whole(v, c, r, 0, err) != 0)
                return -1;
        } else if (ckpt_str_endswith(r, ".safetensors") &&
                   judge_whole(v, c, r, 1, err) != 0) {
            return -1;
        }
    }
    return 0;
}

/* With DeepSpeed, _save_optimizer_and_scheduler has the engine save its
 * checkpoint into the step (checkpoint-N/global_stepN/, `latest`): each
 * such directory judged by DeepSpeed's rule (deepspeed/judge.c), its
 * verdict named by the directory (c NULL: only counted). Returns the
 * number found, or -1. */
static int hf_deepspeed(const struct judge_view *v, struct ckpt_checkpoint *c,
                        struct ckpt_err *err)
{
    int found = 0;
    const char *last = NULL;
    size_t lastn = 0;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        const char *sl = strchr(r, '/');
        if (!sl || (last && (size_t)(sl - r) == lastn &&
                    !strncmp(r, last, lastn)))
            continue;
        last = r;
        lastn = (size_t)(sl - r);
        char *sub = ckpt_xstrndup(r, lastn);
        char *dir = ckpt_path_join(v->dir, sub);
        struct judge_view sv = { v->t, dir, 0, 0, 0 };
        ckpt_tree_range(v->t, dir, &sv.lo, &sv.hi);
        int rc = 0;
        if (deepspeed_recognise(&sv) && !c) {
            found++;
        } else if (deepspeed_recognise(&sv)) {
            struct ckpt_checkpoint d;
            memset(&d, 0, sizeof(d));
            d.complete = 1;
            found++;
            rc = deepspeed_judge(&sv, &d, err);
            if (rc == 0 && !d.complete) {
                char *why = ckpt_xasprintf("%s/%s", sub, d.why ? d.why : "?");
                if (d.unknown)
                    judge_unknown(c, "%s", why);
                else
                    judge_incomplete(c, "%s", why);
                free(why);
            }
            free(d.why);
        }
        free(dir);
        free(sub);
        if (rc != 0)
            return -1;
    }
    return found;
}

/* The weights at the top are ZeRO-3's placeholders: model.safetensors
 * whose every tensor is empty, as a Trainer save of a partitioned model
 * without the 16-bit gather leaves it (accelerate's CPU rank race does;
 * tests/fixtures/real-writers/hf_ds_zero3_race). 1, 0, or -1 (err). */
static int placeholders(const struct judge_view *v, struct ckpt_checkpoint *c,
                        struct ckpt_err *err)
{
    struct ckpt_safetensors *h = NULL;
    if (!judge_get(v, "model.safetensors"))
        return 0;
    if (judge_whole_st(v, c, "model.safetensors", &h, err) != 0)
        return -1;
    int empty = h && h->n > 0;
    for (size_t i = 0; h && i < h->n && empty; i++)
        empty = h->tensors[i].numel == 0;
    ckpt_safetensors_free(h);
    return empty;
}

int hf_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
             struct ckpt_err *err)
{
    int fsdp = has_fsdp(v);
    int acc = acc_state(v) && !judge_get(v, "trainer_state.json") &&
              !judge_get(v, "training_args.bin");
    c->format = fsdp ? CKPT_FMT_HF : CKPT_FMT_UNSHARDED;
    if ((fsdp ? hf_fsdp(v, c, err) : acc ? acc_plain(v, c, err)
                                         : judge_plain(v, c, err)) != 0)
        return -1;
    if (c->unknown && c->why &&
        ckpt_str_startswith(c->why, "no file ckpt recognises") &&
        hf_deepspeed(v, NULL, err) > 0) {
        /* ZeRO-3 may leave no weights at the top: the DeepSpeed
         * directory holds them. */
        free(c->why);
        c->why = NULL;
        c->unknown = 0;
        c->complete = 1;
        c->format = CKPT_FMT_UNSHARDED;
    }
    int ds = hf_deepspeed(v, c, err);
    if (ds < 0)
        return -1;
    /* The engine's checkpoint is the only copy of the weights (no
     * weights at the top, or only placeholders): a DeepSpeed step,
     * unsharded from global_stepN/ (unshard's deepspeed/plan.c follows
     * `latest`). */
    int ph = !fsdp && ds > 0 ? placeholders(v, c, err) : 0;
    if (ph < 0)
        return -1;
    if (ds > 0 && !fsdp && (ph || (!has_top(v, "model", ".safetensors") &&
                                   !has_top(v, "pytorch_model", ".bin") &&
                                   !has_top(v, "adapter_model", ""))))
        c->format = CKPT_FMT_DEEPSPEED;
    /* accelerate's save_state writes each process's random_states_R.pkl
     * last (save_accelerator_state, after the model, optimizer, scheduler
     * and samplers); no trainer_state.json there. */
    if (acc) {
        if (!judge_get(v, "random_states_0.pkl"))
            judge_missing(v, c, "random_states_0.pkl", "accelerate's "
                          "save_state writes it last");
        return 0;
    }
    int after = judge_get(v, "optimizer.pt") || judge_get(v, "scheduler.pt") ||
                has_top(v, "rng_state", ".pth") || fsdp || ds;
    if (after && !judge_get(v, "trainer_state.json"))
        judge_missing(v, c, "trainer_state.json",
                      "HF Trainer writes it last, after the optimizer and "
                      "RNG state");
    return 0;
}

/* The weights and torch files at the top (accelerate's random_states_R
 * .pkl too), the FSDP directories' DCP files, and the DeepSpeed files of
 * the engine's own checkpoint in a subdirectory (global_stepN/). */
int hf_owns(const struct judge_view *v, const char *rel)
{
    static const char *const top[] = { ".safetensors", ".pt", ".pth", ".bin",
                                       ".pkl", NULL };
    (void)v;
    if (judge_top_with(rel, top))
        return 1;
    size_t n = fsdp_dir(rel);
    if (n) {
        char *d = ckpt_xstrndup(rel, n);
        int dcp = judge_dcp_file(rel, d);
        free(d);
        return dcp;
    }
    const char *sl = strchr(rel, '/');
    return sl && !strchr(sl + 1, '/') && ckpt_str_endswith(rel, ".pt");
}
