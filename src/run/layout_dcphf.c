/*
 * layout_dcphf.c - torch DCP's HuggingFaceStorageWriter with
 * save_distributed=True (torch/distributed/checkpoint/hf_storage.py,
 * _hf_utils.py): every rank R writes shard-RRRRR-model-KKKKK-of-
 * NNNNN.safetensors for each output file K its tensors map to, each
 * tensor with its offset in __metadata__["DCP_SHARDING_INFO"]. No
 * .metadata, no index: finish() writes nothing more (with
 * enable_consolidation it then merges the shards into model-KKKKK-of-
 * NNNNN.safetensors + model.safetensors.index.json beside sharded/, which
 * the plain rule judges as whole files).
 *
 * Complete when every shard file is a whole safetensors file (a file cut
 * short is proof) and all agree on NNNNN, with every KKKKK at most NNNNN.
 * The writer lists its files nowhere and a rank with nothing to write
 * writes no file, so a missing shard is not proof of anything here;
 * `ckpt unshard` finds it (the chunks of a tensor then do not tile it).
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "layout.h"

/* "shard-RRRRR-model-KKKKK-of-NNNNN.safetensors": 1 with K and N. */
static int shard_name(const char *r, long *k, long *n)
{
    long v[3];
    const char *pre[3] = { "shard-", "-model-", "-of-" };
    const char *p = r;
    if (strchr(r, '/'))
        return 0;
    for (int i = 0; i < 3; i++) {
        size_t pl = strlen(pre[i]);
        if (strncmp(p, pre[i], pl) != 0)
            return 0;
        p += pl;
        v[i] = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 9) {
            v[i] = v[i] * 10 + (*p++ - '0');
            digits++;
        }
        if (digits < 5 || v[i] < 1)
            return 0;
    }
    if (strcmp(p, ".safetensors") != 0)
        return 0;
    *k = v[1];
    *n = v[2];
    return 1;
}

static int dh_recognise(const struct judge_view *v)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        long k, n;
        if (v->t->files[i].type == CKPT_ENTRY_FILE &&
            shard_name(judge_rel(v, i), &k, &n))
            return !judge_get(v, ".metadata");
    }
    return 0;
}

static int dh_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                    struct ckpt_err *err)
{
    long files = -1;
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        long k, n;
        if (v->t->files[i].type != CKPT_ENTRY_FILE || !shard_name(r, &k, &n))
            continue;
        if (files >= 0 && n != files)
            judge_unknown(c, "%s", "shard files name different numbers of "
                                   "output files (-of-NNNNN)");
        else if (k > n)
            judge_unknown(c, "%s: output file number above the count", r);
        files = n;
        if (judge_whole(v, c, r, 1, err) != 0)
            return -1;
    }
    return 0;
}

const struct judge_layout judge_layout_dcp_hf = {
    "dcp-hf", CKPT_FMT_DCP_HF, dh_recognise, dh_judge, NULL,
};
