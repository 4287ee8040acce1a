/*
 * plain/judge.c - unsharded files (model.pt, *.safetensors, HF weights
 * and their indexes), judged by their structure: the last entry of the
 * trainer table, which takes whatever no trainer claims.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

static int file_whole(const struct judge_view *v, const char *rel, int st,
                      char **msg, struct ckpt_err *err)
{
    return judge_file_whole(v, rel, st, msg, NULL, err);
}

/* What judge_unsharded found: the first proof of incompleteness (cut) and
 * the first file it could not judge (unknown). */
struct ufind {
    char *cut, *unknown;
    int found;            /* a file ckpt knows the structure of */
};

static void note(struct ufind *u, int w, char *msg)
{
    char **slot = w == JW_CUT ? &u->cut : &u->unknown;
    if (w != JW_WHOLE && !*slot)
        *slot = msg;
    else
        free(msg);
}

/* A file the checkpoint lacks: proof, unless the listing may miss files
 * (a damaged archive). */
static void note_missing(const struct judge_view *v, struct ufind *u, char *msg)
{
    note(u, v->t->damage ? JW_UNKNOWN : JW_CUT, msg);
}

static int check_file(const struct judge_view *v, struct ufind *u, const char *rel,
                      int st, struct ckpt_err *err)
{
    char *msg;
    int w = file_whole(v, rel, st, &msg, err);
    if (w < 0)
        return -1;
    u->found = 1;
    note(u, w, msg);
    return 0;
}

/* A safetensors file torch DCP's HuggingFaceStorageWriter wrote without
 * save_distributed on several ranks (each rank writes the same file name
 * with its own rows, the last one stays) records where its rows sit in
 * __metadata__["DCP_SHARDING_INFO"]: a tensor saved at a non-zero offset
 * is part of a tensor, not the whole. *bytes: its tensors' bytes, *dcp:
 * whether it was written by a DCP writer (1), else 0. */
static int check_st_part(const struct judge_view *v, struct ufind *u,
                         const char *rel, uint64_t *bytes, int *dcp,
                         struct ckpt_err *err)
{
    struct ckpt_safetensors *h = NULL;
    char *msg;
    *bytes = 0;
    *dcp = 0;
    int w = judge_file_whole(v, rel, 1, &msg, &h, err);
    if (w < 0)
        return -1;
    u->found = 1;
    note(u, w, msg);
    if (!h)
        return 0;   /* (cut, or in a compressed archive) */
    *dcp = h->dcp_sharding != NULL;
    for (size_t i = 0; i < h->n; i++) {
        const struct ckpt_safetensors_tensor *t = &h->tensors[i];
        uint64_t off[8];
        struct ckpt_err e = CKPT_ERR_INIT;
        *bytes += t->nbytes;
        int r = t->ndim <= 8 ? ckpt_safetensors_saved_offsets(h, t, off, rel,
                                                              &e) : 0;
        int part = 0;
        for (int d = 0; r == 1 && d < t->ndim; d++)
            part |= off[d] != 0;
        if (part)
            note(u, JW_CUT, ckpt_xasprintf("%s holds part of tensor '%s' "
                                          "(DCP_SHARDING_INFO: saved at a "
                                          "non-zero offset)", rel, t->name));
        else if (r < 0)
            note(u, JW_UNKNOWN, ckpt_xstrdup(e.msg));
    }
    ckpt_safetensors_free(h);
    return 0;
}

/* An index's total_size against the bytes of the tensors its shards
 * hold: torch DCP's HuggingFaceStorageWriter counts every rank's rows,
 * so less present than it says is proof of a part-saved tensor; HF's
 * own writers' totals are not checked against (unknown at most). */
static void check_total(const struct judge_view *v, struct ufind *u,
                        const char *rel, uint64_t have, int dcp)
{
    cJSON *j = NULL;
    struct ckpt_err e = CKPT_ERR_INIT;
    if (judge_json(v, rel, &j, &e) != 0)
        return;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "metadata");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(m, "total_size");
    if (cJSON_IsNumber(ts) && ts->valuedouble > (double)have)
        note(u, dcp ? JW_CUT : JW_UNKNOWN,
             ckpt_xasprintf("%s: total_size %.0f, but its shards hold "
                            "%llu bytes of tensors", rel, ts->valuedouble,
                            (unsigned long long)have));
    cJSON_Delete(j);
}

/* Another trainer's torch.save file beside the weights (HF Trainer's
 * optimizer.pt, scheduler.pt, rng_state.pth, training_args.bin): a zip
 * cut short proves the step incomplete; a file that is no zip says
 * nothing (not every .bin is torch's). */
static int other_torch(const char *r, const char **known, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(r, known[i]))
            return 0;
    return ckpt_str_endswith(r, ".pt") || ckpt_str_endswith(r, ".pth") ||
           ckpt_str_endswith(r, ".bin");
}

static int check_other(const struct judge_view *v, struct ufind *u, const char *rel,
                       struct ckpt_err *err)
{
    char *msg;
    int w = file_whole(v, rel, 0, &msg, err);
    if (w < 0)
        return -1;
    note(u, w == JW_CUT ? JW_CUT : JW_WHOLE, msg);
    return 0;
}

/* "NAME-0000K-of-0000N.safetensors" (or .bin): a shard of a split file. */
static int split_shard_of(const char *name, const char *suffix)
{
    const char *o = strstr(name, "-of-");
    size_t n = strlen(name), sl = strlen(suffix);
    if (!o || o - name < 6 || n < 5 + sl ||
        strcmp(name + n - sl, suffix) != 0)
        return 0;
    for (const char *p = o - 5; p < o; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    return o[-6] == '-';
}

static int split_shard(const char *name)
{
    return split_shard_of(name, ".safetensors");
}

/* HF's torch.save weights (save_pretrained with safe_serialization off,
 * transformers < 4.35's default): pytorch_model.bin, its shards
 * pytorch_model-0000K-of-0000N.bin, PEFT's adapter_model.bin. Zips since
 * torch 1.6, so judged strictly, as model.pt. */
static int hf_weights_bin(const char *name)
{
    return !strcmp(name, "pytorch_model.bin") ||
           !strcmp(name, "adapter_model.bin") ||
           (ckpt_str_startswith(name, "pytorch_model-") &&
            split_shard_of(name, ".bin"));
}

/* An index (`*.safetensors.index.json`, written by ckpt unshard and HF):
 * every shard its weight_map names must be here and whole. */
static int check_index(const struct judge_view *v, struct ufind *u, const char *rel,
                       struct ckpt_err *err)
{
    cJSON *j;
    if (judge_json(v, rel, &j, err) != 0)
        return -1;
    u->found = 1;
    cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!cJSON_IsObject(map)) {
        note(u, JW_CUT, ckpt_xasprintf("%s: no weight_map", rel));
        cJSON_Delete(j);
        return 0;
    }
    /* Each shard once, though many tensors name it. */
    cJSON *seen = cJSON_CreateObject(), *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') ||
            !*e->valuestring) {
            /* shards in subdirectories: not a layout ckpt or HF writes */
            note(u, JW_UNKNOWN, ckpt_xasprintf("%s: a shard name ckpt does "
                                              "not judge", rel));
            break;
        }
        const char *s = e->valuestring;
        if (cJSON_GetObjectItemCaseSensitive(seen, s))
            continue;
        cJSON_AddTrueToObject(seen, s);
        if (!judge_get(v, s))
            note_missing(v, u, ckpt_xasprintf("%s (named by %s) missing", s,
                                              rel));
    }
    cJSON_Delete(seen);
    cJSON_Delete(j);
    return 0;
}

/* The OLMo layout's model part, in either format (or --layout single's
 * checkpoint.pt). */
static int has_model(const struct judge_view *v)
{
    static const char *names[] = {
        "model.pt", "model.safetensors", "model.safetensors.index.json",
        "checkpoint.pt",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (judge_get(v, names[i]))
            return 1;
    return 0;
}

/* Unsharded files are judged by their structure, not by being there:
 * every torch file is a whole zip, every safetensors file's header
 * parses and its tensors end at the file's end, every index names shards
 * that are here, and the OLMo layout has its model file. A directory with
 * none of these files is unknown: ckpt cannot judge it. */
int plain_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err)
{
    static const char *torch[] = {
        "model.pt", "checkpoint.pt", "optim.pt", "train.pt",
    };
    struct ufind u = { NULL, NULL, 0 };
    int rc = 0, split = 0, index = 0, splitb = 0, indexb = 0, dcp = 0;
    uint64_t st_bytes = 0;
    const char *st_index = NULL;
    for (size_t i = 0; rc == 0 && i < sizeof(torch) / sizeof(torch[0]); i++)
        if (judge_get(v, torch[i]))
            rc = check_file(v, &u, torch[i], 0, err);
    for (size_t i = v->lo; rc == 0 && i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        if (strchr(r, '/') || v->t->files[i].type == CKPT_ENTRY_DIR)
            continue;
        if (ckpt_str_endswith(r, ".safetensors")) {
            uint64_t b = 0;
            int d = 0;
            split |= split_shard(r);
            rc = check_st_part(v, &u, r, &b, &d, err);
            st_bytes += b;
            dcp |= d;
        } else if (ckpt_str_endswith(r, ".safetensors.index.json")) {
            index = 1;
            st_index = r;
            rc = check_index(v, &u, r, err);
        } else if (hf_weights_bin(r)) {
            splitb |= split_shard_of(r, ".bin");
            rc = check_file(v, &u, r, 0, err);
        } else if (ckpt_str_endswith(r, ".bin.index.json")) {
            indexb = 1;
            rc = check_index(v, &u, r, err);
        } else if (other_torch(r, torch, sizeof(torch) / sizeof(torch[0]))) {
            rc = check_other(v, &u, r, err);
        }
    }
    if (rc == 0 && splitb && !indexb)
        note_missing(v, &u, ckpt_xstrdup("split pytorch_model-*.bin without "
                                         "pytorch_model.bin.index.json"));
    if (rc == 0 && split && !index)
        note_missing(v, &u, ckpt_xstrdup("split safetensors without their "
                                         "*.safetensors.index.json"));
    if (rc == 0 && st_index && !u.cut && !v->t->damage)
        check_total(v, &u, st_index, st_bytes, dcp);
    if (rc == 0 && !has_model(v) &&
        (judge_get(v, "optim.pt") || judge_get(v, "optim.safetensors") ||
         judge_get(v, "train.pt")))
        note_missing(v, &u, ckpt_xstrdup("no model file (model.pt, "
                                         "model.safetensors) beside "
                                         "optim/train"));
    if (!u.found)
        c->format = CKPT_FMT_UNKNOWN;
    if (rc == 0 && u.cut)
        judge_set_why(c, "%s", u.cut);
    else if (rc == 0 && u.unknown)
        judge_set_unknown(c, "%s", u.unknown);
    else if (rc == 0 && !u.found)
        judge_set_unknown(c, "%s", "no file ckpt recognises (model.pt, "
                             "*.safetensors, .metadata, ...)");
    free(u.cut);
    free(u.unknown);
    return rc;
}

/* Last in the table: whatever no other layout claims is judged as
 * unsharded files, by their structure (unknown when none is known). */
int plain_recognise(const struct judge_view *v)
{
    (void)v;
    return 1;
}

/* judge_unsharded judges every torch and safetensors file at the top. */
int plain_owns(const struct judge_view *v, const char *rel)
{
    static const char *const sfx[] = { ".safetensors", ".pt", ".pth", ".bin",
                                       NULL };
    (void)v;
    return judge_top_with(rel, sfx);
}

int judge_plain(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err)
{
    return plain_judge(v, c, err);
}

/* 1 when v holds a weights file judge_unsharded knows by name (not any
 * .bin: token data is .bin too), so that a directory of plain files is
 * recognised as a checkpoint (ckpt_judge_recognised). */
int plain_named_weights(const struct judge_view *v)
{
    static const char *const known[] = {
        "model.pt", "checkpoint.pt", "optim.pt", "train.pt", NULL
    };
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        int k = 0;
        for (const char *const *n = known; *n && !k; n++)
            k = !strcmp(r, *n);
        if (v->t->files[i].type == CKPT_ENTRY_FILE && !strchr(r, '/') &&
            (k || ckpt_str_endswith(r, ".safetensors") || hf_weights_bin(r)))
            return 1;
    }
    return 0;
}
