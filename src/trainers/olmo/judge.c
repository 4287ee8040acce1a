/*
 * olmo/judge.c - OLMo steps of the legacy (rank*.pt), local
 * ({model,optim,train}/rank*.pt + metadata.yaml) and olmo_core (OLMo-core
 * 0.1 safetensors + metadata.json) formats; OLMo torch_new steps are DCP
 * (dcp/judge.c).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

/* "world_size: N" from metadata.yaml, or -1. */
static long world_size(const char *yaml)
{
    const char *p = strstr(yaml, "world_size:");
    if (!p || (p != yaml && p[-1] != '\n'))
        return -1;
    p += strlen("world_size:");
    while (*p == ' ')
        p++;
    char *end;
    long n = strtol(p, &end, 10);
    return end == p || n < 0 ? -1 : n;
}

int olmo_local_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                     struct ckpt_err *err)
{
    long m = judge_rank_set(v, c, "model", "rank", ".pt");
    long o = m < 0 ? -1 : judge_rank_set(v, c, "optim", "rank", ".pt");
    long tr = o < 0 ? -1 : judge_rank_set(v, c, "train", "rank", ".pt");
    if (tr < 0)
        return 0;
    if (m != o || o != tr)
        return judge_set_why(c, "%s", "model/, optim/ and train/ rank counts "
                                "differ");
    /* OLMo writes metadata.yaml (world_size) with the rank files; a step
     * without it never finished saving. */
    if (!judge_get(v, "metadata.yaml"))
        return judge_set_why(c, "%s", "metadata.yaml missing");
    char *full = ckpt_path_join(v->dir, "metadata.yaml");
    char *data;
    size_t len;
    int rc = ckpt_tree_read(v->t, full, JUDGE_META_MAX, &data, &len, err);
    free(full);
    if (rc != 0)
        return -1;
    long ws = world_size(data);
    free(data);
    if (ws >= 0 && ws != m) {
        char what[96];
        snprintf(what, sizeof(what), "%ld of %ld ranks present", m, ws);
        judge_set_why(c, "%s", what);
    }
    return 0;
}

int olmo_core_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                    struct ckpt_err *err)
{
    static const char *subs[] = { "model", "optim" };
    for (size_t s = 0; s < 2; s++) {
        char *meta = ckpt_xasprintf("%s/metadata.json", subs[s]);
        cJSON *j = NULL;
        int rc = judge_get(v, meta) ? judge_json(v, meta, &j, err) : 0;
        if (rc != 0) {
            free(meta);
            return -1;
        }
        if (!j) {
            judge_set_why(c, "%s missing or invalid", meta);
            free(meta);
            return 0;
        }
        free(meta);
        cJSON *tensors = cJSON_GetObjectItemCaseSensitive(j, "tensors");
        cJSON *tensor;
        cJSON_ArrayForEach(tensor, tensors) {
            /* Earlier OLMo-core wrote flattened_offsets_per_file. */
            cJSON *spec = cJSON_GetObjectItemCaseSensitive(
                tensor, "shard_spec_per_file");
            if (!spec)
                spec = cJSON_GetObjectItemCaseSensitive(
                    tensor, "flattened_offsets_per_file");
            cJSON *file;
            cJSON_ArrayForEach(file, spec) {
                char *rel = ckpt_xasprintf("%s/%s", subs[s], file->string);
                int ok = judge_get(v, rel) != NULL;
                if (!ok)
                    judge_set_why(c, "%s missing", rel);
                free(rel);
                if (!ok) {
                    cJSON_Delete(j);
                    return 0;
                }
            }
        }
        cJSON_Delete(j);
    }
    return 0;
}

int olmo_core_recognise(const struct judge_view *v)
{
    return judge_has_ranked(v, "model", "rank_", ".safetensors");
}

int olmo_local_recognise(const struct judge_view *v)
{
    return judge_has_ranked(v, "model", "rank", ".pt") ||
           judge_has_ranked(v, "optim", "rank", ".pt");
}

int olmo_legacy_recognise(const struct judge_view *v)
{
    return judge_has_ranked(v, "", "rank", ".pt");
}

int olmo_legacy_judge(const struct judge_view *v,
                      struct ckpt_checkpoint *c, struct ckpt_err *err)
{
    (void)err;
    judge_rank_set(v, c, "", "rank", ".pt");
    return 0;
}

int olmo_core_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    return judge_ranked_in(rel, "model", "rank_", ".safetensors") ||
           judge_ranked_in(rel, "optim", "rank_", ".safetensors") ||
           judge_ranked_in(rel, "train", "rank", ".pt");
}

int olmo_local_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    return judge_ranked_in(rel, "model", "rank", ".pt") ||
           judge_ranked_in(rel, "optim", "rank", ".pt") ||
           judge_ranked_in(rel, "train", "rank", ".pt");
}

/* A directory without a step in its name is never an OLMo legacy step:
 * rank<N>.pt alone is too common a name to stand for OLMo. */
int olmo_legacy_named(const struct judge_view *v)
{
    (void)v;
    return 0;
}

int olmo_legacy_owns(const struct judge_view *v, const char *rel)
{
    (void)v;
    return !strchr(rel, '/') && judge_rank_of(rel, "rank", ".pt") >= 0;
}
