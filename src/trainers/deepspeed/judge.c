/*
 * deepspeed/judge.c - DeepSpeed's `engine.save_checkpoint` directories
 * (tag global_stepN by default): mp_rank_XX_model_states.pt (ZeRO-0/1/2;
 * ZeRO-3 writes zero_pp_rank_R_mp_rank_XX_model_states.pt per data-parallel
 * rank) and, with a ZeRO optimizer, (bf16_)zero_pp_rank_R_mp_rank_XX_
 * optim_states.pt per data-parallel rank R.
 *
 * The writer's rule (deepspeed/runtime/engine.py save_checkpoint, 0.19.6):
 * the model states are saved first (_save_checkpoint), then every rank's
 * ZeRO file (_save_zero_checkpoint), then rank 0 writes `latest`. The
 * model states record dp_world_size and mp_world_size, and param_shapes
 * only when a ZeRO optimizer partitions the state; zero_to_fp32.py
 * (parse_optim_states) refuses a directory whose optim files are fewer
 * than the partition count. So a step is complete when every
 * (dp, mp) file the recorded world sizes call for is there and every
 * file is a whole torch zip. The sizes are read from the pickle without
 * executing it.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

enum ds_kind { DS_NONE = 0, DS_MODEL, DS_OPTIM };

/* Digits at *p: value, *p moved past them; -1 if none. */
static long digits(const char **p)
{
    long v = 0;
    const char *s = *p;
    if (!isdigit((unsigned char)*s))
        return -1;
    while (isdigit((unsigned char)*s) && v < 100000000)
        v = v * 10 + (*s++ - '0');
    *p = s;
    return v;
}

static int eat(const char **p, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n) != 0)
        return 0;
    *p += n;
    return 1;
}

/* Parse a DeepSpeed file name: kind, *dp (-1 for mp_rank_XX_model_states),
 * *mp, *bf16. */
static enum ds_kind ds_name(const char *name, long *dp, long *mp, int *bf16)
{
    const char *p = name;
    *bf16 = eat(&p, "bf16_");
    *dp = -1;
    if (eat(&p, "zero_pp_rank_") && (*dp = digits(&p)) < 0)
        return DS_NONE;
    if (*dp < 0 && *bf16)
        return DS_NONE;
    if (*dp >= 0 && !eat(&p, "_"))
        return DS_NONE;
    if (!eat(&p, "mp_rank_") || (*mp = digits(&p)) < 0)
        return DS_NONE;
    if (!strcmp(p, "_model_states.pt"))
        return *bf16 ? DS_NONE : DS_MODEL;
    if (!strcmp(p, "_optim_states.pt") && *dp >= 0)
        return DS_OPTIM;
    return DS_NONE;
}

int deepspeed_recognise(const struct judge_view *v)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        long dp, mp;
        int bf16;
        if (!strchr(r, '/') && ds_name(r, &dp, &mp, &bf16) != DS_NONE)
            return 1;
    }
    return 0;
}

static void need(const struct judge_view *v, struct ckpt_checkpoint *c,
                 const char *name)
{
    if (!judge_get(v, name))
        judge_missing(v, c, name, "the recorded world size calls for it");
}

/* Every file the world sizes in the model states call for. */
static void ds_expect(const struct judge_view *v, struct ckpt_checkpoint *c,
                      int stage3, int bf16, int zero, int64_t dp,
                      int64_t mp)
{
    char name[128];
    for (int64_t m = 0; m < mp && c->complete; m++) {
        if (!stage3) {
            snprintf(name, sizeof(name), "mp_rank_%02lld_model_states.pt",
                     (long long)m);
            need(v, c, name);
        }
        for (int64_t d = 0; d < dp && c->complete; d++) {
            if (stage3) {
                snprintf(name, sizeof(name), "zero_pp_rank_%lld_mp_rank_"
                         "%02lld_model_states.pt", (long long)d,
                         (long long)m);
                need(v, c, name);
            }
            if (zero) {
                snprintf(name, sizeof(name), "%szero_pp_rank_%lld_mp_rank_"
                         "%02lld_optim_states.pt", bf16 ? "bf16_" : "",
                         (long long)d, (long long)m);
                need(v, c, name);
            }
        }
    }
}

int deepspeed_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                    struct ckpt_err *err)
{
    int stage3 = 0, bf16 = 0;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        long dp, mp;
        int b;
        if (strchr(r, '/') || v->t->files[i].type == CKPT_ENTRY_DIR)
            continue;
        enum ds_kind k = ds_name(r, &dp, &mp, &b);
        stage3 |= k == DS_MODEL && dp >= 0;
        bf16 |= k == DS_OPTIM && b;
        /* Every torch file of the step (expert and pipeline layer files
         * too) must be whole. */
        if (ckpt_str_endswith(r, ".pt") && judge_whole(v, c, r, 0, err))
            return -1;
    }
    if (!c->complete)
        return 0;
    const char *m0 = stage3 ? "zero_pp_rank_0_mp_rank_00_model_states.pt"
                            : "mp_rank_00_model_states.pt";
    if (!judge_get(v, m0)) {
        judge_missing(v, c, m0, "DeepSpeed saves the model states first");
        return 0;
    }
    struct ckpt_arena *a = ckpt_arena_new((size_t)256 << 20);
    struct ckpt_pv *root = NULL;
    char *why = NULL;
    int rc = judge_torch_pickle(v, m0, a, &root, &why, err);
    if (rc < 0) {
        ckpt_arena_free(a);
        return -1;
    }
    struct ckpt_pv *d = rc ? NULL : ckpt_pv_dict_items(root);
    int64_t dp = 0, mp = 0;
    if (rc) {
        judge_unknown(c, "cannot read the world size: %s", why);
    } else if (ckpt_pv_get_int(ckpt_pv_dict_get(d, "dp_world_size"),
                               &dp) != 0 || dp < 1 ||
               ckpt_pv_get_int(ckpt_pv_dict_get(d, "mp_world_size"),
                               &mp) != 0 || mp < 1 || dp * mp > 1000000) {
        judge_unknown(c, "%s records no dp_world_size/mp_world_size", m0);
    } else {
        struct ckpt_pv *ps = ckpt_pv_dict_get(d, "param_shapes");
        int zero = ps && ps->kind != CKPT_PV_NONE;
        ds_expect(v, c, stage3, bf16, zero, dp, mp);
    }
    free(why);
    ckpt_arena_free(a);
    return 0;
}

/* deepspeed_judge judges every torch file at the top of the step. */
int deepspeed_owns(const struct judge_view *v, const char *rel)
{
    static const char *const pt[] = { ".pt", NULL };
    (void)v;
    return judge_top_with(rel, pt);
}
