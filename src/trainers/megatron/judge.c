/*
 * megatron/judge.c - Megatron-LM's iter_NNNNNNN/ (or release/) steps.
 *
 * Legacy torch layout (megatron/training/checkpointing.py,
 * get_checkpoint_name): one mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt per
 * tensor (TT), pipeline (PPP, only when pipeline parallel) and expert
 * (EEE, only when expert parallel) rank. Each file records the run's
 * argparse Namespace (`args`) with tensor_model_parallel_size,
 * pipeline_model_parallel_size and expert_model_parallel_size: a step is
 * complete when every rank those sizes call for has its file and every
 * torch file is whole. The sizes are read from the pickle without
 * executing it; a file without them is judged by its torch zips alone
 * and the rank grid found (every combination of the ranks seen).
 *
 * torch_dist (megatron/core/dist_checkpointing: save writes the DCP
 * checkpoint, then rank 0 writes metadata.json, `save_config`, last): a
 * step without metadata.json never finished; with it, the DCP .metadata
 * and every file it names must be there. Other sharded_backend values
 * (zarr) are not judged: unknown.
 */
#include <ctype.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

#define RANKFILE "model_optim_rng.pt"

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* "mp_rank_TT[_NNN[_NNN]]": 1 with the numbers (*n of them), else 0. */
static int rank_dir(const char *name, size_t len, long r[3], int *n)
{
    if (len < 10 || strncmp(name, "mp_rank_", 8) != 0)
        return 0;
    size_t i = 8;
    *n = 0;
    while (i < len && *n < 3) {
        long v = 0;
        size_t s = i;
        while (i < len && isdigit((unsigned char)name[i]) && v < 1000000)
            v = v * 10 + (name[i++] - '0');
        if (i == s || i - s != (*n ? 3u : 2u))
            return 0;
        r[(*n)++] = v;
        if (i == len)
            return 1;
        if (name[i++] != '_')
            return 0;
    }
    return 0;
}

/* A legacy rank file: 1 with its rank numbers. */
static int rank_file(const char *rel, long r[3], int *n)
{
    const char *sl = strchr(rel, '/');
    return sl && !strcmp(sl + 1, RANKFILE) &&
           rank_dir(rel, (size_t)(sl - rel), r, n);
}

/* A top-level DCP file "__*suffix". */
static int has_dcp(const struct judge_view *v, const char *suffix)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        if (v->t->files[i].type != CKPT_ENTRY_DIR && !strchr(r, '/') &&
            ckpt_str_startswith(r, "__") &&
            ckpt_str_endswith(r, suffix))
            return 1;
    }
    return 0;
}

static int has_distcp(const struct judge_view *v)
{
    return has_dcp(v, ".distcp");
}

static int iter_name(const char *dir)
{
    const char *b = base_of(dir);
    if (!strcmp(b, "release"))
        return 1;
    if (strncmp(b, "iter_", 5) != 0 || strlen(b) < 12)
        return 0;
    for (const char *p = b + 5; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    return 1;
}

int megatron_recognise(const struct judge_view *v)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        long r[3];
        int n;
        if (rank_file(judge_rel(v, i), r, &n))
            return 1;
    }
    if (judge_get(v, "metadata.json") &&
        (judge_get(v, ".metadata") || has_distcp(v) ||
         judge_get(v, "common.pt")))
        return 1;
    /* A torch_dist save killed before its metadata: no .metadata, no
     * metadata.json (a rank-local DCP save has __R.metadata: dcp's). */
    return iter_name(v->dir) && has_distcp(v) && !judge_get(v, ".metadata") &&
           !has_dcp(v, ".metadata");
}

/* The run's parallel sizes from a rank file's args, 0 if unrecorded. */
static int mg_sizes(const struct judge_view *v, const char *rel,
                    int64_t sz[3], struct ckpt_err *err)
{
    static const char *keys[3] = {
        "tensor_model_parallel_size", "pipeline_model_parallel_size",
        "expert_model_parallel_size",
    };
    struct ckpt_arena *a = ckpt_arena_new((size_t)256 << 20);
    struct ckpt_pv *root = NULL;
    char *why = NULL;
    int rc = judge_torch_pickle(v, rel, a, &root, &why, err);
    free(why);
    if (rc < 0) {
        ckpt_arena_free(a);
        return -1;
    }
    struct ckpt_pv *args = rc ? NULL : ckpt_pv_dict_get(
        ckpt_pv_dict_items(root), "args");
    /* A Namespace pickles as NEWOBJ + BUILD: its fields are the state. */
    struct ckpt_pv *st = args && args->kind == CKPT_PV_CALL
                             ? args->u.call.state : NULL;
    int ok = st != NULL;
    for (int k = 0; k < 3 && ok; k++) {
        struct ckpt_pv *x = ckpt_pv_dict_get(st, keys[k]);
        if (!x && k == 2)
            sz[k] = 1;   /* older Megatron: no expert parallelism */
        else if (ckpt_pv_get_int(x, &sz[k]) != 0 || sz[k] < 1 ||
                 sz[k] > 100000)
            ok = 0;
    }
    ckpt_arena_free(a);
    return ok && sz[0] * sz[1] * sz[2] <= 1000000 ? 1 : 0;
}

static void need_rank(const struct judge_view *v, struct ckpt_checkpoint *c,
                      long t, long p, long e, int pp, int ep)
{
    char name[96];
    int k = snprintf(name, sizeof(name), "mp_rank_%02ld", t);
    if (pp)
        k += snprintf(name + k, sizeof(name) - (size_t)k, "_%03ld", p);
    if (ep)
        k += snprintf(name + k, sizeof(name) - (size_t)k, "_%03ld", e);
    snprintf(name + k, sizeof(name) - (size_t)k, "/%s", RANKFILE);
    if (!judge_get(v, name))
        judge_missing(v, c, name, "the recorded parallel sizes call for it");
}

static int mg_legacy(const struct judge_view *v, struct ckpt_checkpoint *c,
                     struct ckpt_err *err)
{
    /* Its unsharded output is the model at TP=1 PP=1 (plan_legacy.c):
     * the optimizer and RNG states of each rank stay only in the step. */
    c->partial = "its unsharded output holds the model weights only, not "
                 "the optimizer, RNG states and args of its ranks";
    const char *first = NULL;
    long max[3] = { -1, -1, -1 };
    int ndim = -1;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        long rk[3];
        int n;
        if (v->t->files[i].type != CKPT_ENTRY_DIR &&
            ckpt_str_endswith(r, ".pt") && judge_whole(v, c, r, 0, err))
            return -1;
        if (!rank_file(r, rk, &n))
            continue;
        if (ndim >= 0 && n != ndim) {
            judge_unknown(c, "%s", "rank directories of different shapes");
            continue;
        }
        ndim = n;
        for (int k = 0; k < n; k++)
            if (rk[k] > max[k])
                max[k] = rk[k];
        if (!first || strcmp(r, first) < 0)
            first = r;
    }
    if (!c->complete)
        return 0;
    int64_t sz[3];
    int rc = mg_sizes(v, first, sz, err);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        int pp = sz[1] > 1, ep = sz[2] > 1;
        if (ndim != 1 + pp + ep)
            judge_unknown(c, "%s", "rank directory names do not match the "
                                   "recorded parallel sizes");
        for (long t = 0; t < sz[0] && c->complete; t++)
            for (long p = 0; p < sz[1] && c->complete; p++)
                for (long e = 0; e < sz[2] && c->complete; e++)
                    need_rank(v, c, t, p, e, pp, ep);
        return 0;
    }
    /* No recorded sizes: every combination of the ranks seen. */
    for (long t = 0; t <= max[0] && c->complete; t++)
        for (long p = 0; p <= (ndim > 1 ? max[1] : 0) && c->complete; p++)
            for (long e = 0; e <= (ndim > 2 ? max[2] : 0) && c->complete;
                 e++)
                need_rank(v, c, t, p, e, ndim > 1, ndim > 2);
    return 0;
}

static int mg_dist(const struct judge_view *v, struct ckpt_checkpoint *c,
                   struct ckpt_err *err)
{
    if (!judge_get(v, "metadata.json")) {
        judge_missing(v, c, "metadata.json",
                      "Megatron writes it last, after the DCP files");
        return 0;
    }
    char *full = ckpt_path_join(v->dir, "metadata.json");
    char *data;
    size_t len;
    int rc = ckpt_tree_read(v->t, full, 1u << 20, &data, &len, err);
    free(full);
    if (rc != 0)
        return -1;
    cJSON *j = cJSON_ParseWithLength(data, len);
    free(data);
    cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "sharded_backend");
    if (!cJSON_IsString(b))
        judge_unknown(c, "%s", "metadata.json names no sharded_backend");
    else if (strcmp(b->valuestring, "torch_dist") != 0)
        judge_unknown(c, "sharded_backend '%s' is not judged",
                      b->valuestring);
    cJSON_Delete(j);
    if (judge_get(v, "common.pt") &&
        judge_whole(v, c, "common.pt", 0, err) != 0)
        return -1;
    return judge_dcp_dir(v, c, "", err);
}

int megatron_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                   struct ckpt_err *err)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        long r[3];
        int n;
        if (rank_file(judge_rel(v, i), r, &n))
            return mg_legacy(v, c, err);
    }
    return mg_dist(v, c, err);
}

/* The rank directories' torch files (model_optim_rng.pt, the
 * distributed optimizer's distrib_optim.pt), torch_dist's DCP files and
 * common.pt. */
int megatron_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    const char *sl = strchr(rel, '/');
    long r[3];
    int n;
    if (sl)
        return !strchr(sl + 1, '/') && ckpt_str_endswith(rel, ".pt") &&
               rank_dir(rel, (size_t)(sl - rel), r, &n);
    return judge_dcp_file(rel, "") || !strcmp(rel, "common.pt");
}
