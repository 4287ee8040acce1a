/*
 * pins.c - the checkpoints a writer points at, which `--keep-last` and
 * `--keep-every` never prune (the writer's own rotation keeps them, and
 * resuming or loading the best model reads them):
 *  - HF Trainer: trainer_state.json's best_model_checkpoint (with
 *    load_best_model_at_end, _rotate_checkpoints keeps it however old);
 *  - DeepSpeed: the tag a `latest` file names (load_checkpoint reads it);
 *  - Megatron: the iteration latest_checkpointed_iteration.txt names
 *    (`release` for a release checkpoint).
 * A pin file that cannot be read pins nothing: pruning still keeps the
 * newest complete checkpoint, which is what these files usually name.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "run_int.h"

#define PIN_MAX (64u << 20)

/* The run's checkpoint whose directory is dir, or NULL. */
static struct ckpt_checkpoint *by_dir(struct ckpt_run *run, const char *dir)
{
    for (size_t i = 0; i < run->n; i++)
        if (!strcmp(run->ckpts[i].dir, dir))
            return &run->ckpts[i];
    return NULL;
}

static void pin(struct ckpt_checkpoint *c, const char *why)
{
    if (c && !c->pinned)
        c->pinned = ckpt_xstrdup(why);
}

/* The whole small regular file path of t, trimmed of white space at both
 * ends (malloced), or NULL. */
static char *read_small(struct ckpt_tree *t, const char *path)
{
    const struct ckpt_tree_file *f = ckpt_tree_find(t, path);
    struct ckpt_err err = CKPT_ERR_INIT;
    char *data;
    size_t len;
    if (!f || f->type != CKPT_ENTRY_FILE ||
        ckpt_tree_read(t, path, PIN_MAX, &data, &len, &err) != 0)
        return NULL;
    while (len && isspace((unsigned char)data[len - 1]))
        data[--len] = '\0';
    size_t lead = 0;
    while (lead < len && isspace((unsigned char)data[lead]))
        lead++;
    memmove(data, data + lead, len - lead + 1);
    return data;
}

/* HF: the newest checkpoint's trainer_state.json records the best one
 * as the path the trainer saved it under (".../checkpoint-2"). */
static void pin_hf(struct ckpt_run *run, struct ckpt_tree *t)
{
    for (size_t i = run->n; i-- > 0;) {
        char *p = ckpt_path_join(run->ckpts[i].dir, "trainer_state.json");
        char *text = read_small(t, p);
        if (!text) {
            free(p);
            continue;
        }
        cJSON *j = cJSON_Parse(text);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j,
                                                          "best_model_checkpoint");
        if (cJSON_IsString(b) && b->valuestring[0]) {
            char *base = ckpt_path_basename(b->valuestring);
            char *why = ckpt_xasprintf("best_model_checkpoint in %s", p);
            for (size_t k = 0; k < run->n; k++)
                if (!strcmp(run->ckpts[k].name, base))
                    pin(&run->ckpts[k], why);
            free(why);
            free(base);
        }
        cJSON_Delete(j);
        free(text);
        free(p);
        return;
    }
}

/* DeepSpeed's `latest` (a file; OLMo's `latest` is a link) and
 * Megatron's latest_checkpointed_iteration.txt, beside the steps. */
static void pin_latest(struct ckpt_run *run, struct ckpt_tree *t,
                       const char *place)
{
    char *p = ckpt_path_join(place, "latest");
    char *tag = read_small(t, p);
    if (tag && *tag && !strchr(tag, '/') && strcmp(tag, ".") &&
        strcmp(tag, "..")) {
        char *dir = ckpt_path_join(place, tag);
        char *why = ckpt_xasprintf("named by %s", p);
        pin(by_dir(run, dir), why);
        free(why);
        free(dir);
    }
    free(tag);
    free(p);
    p = ckpt_path_join(place, "latest_checkpointed_iteration.txt");
    char *it = read_small(t, p);
    if (it && *it) {
        char *end;
        long long n = strtoll(it, &end, 10);
        char *name = !strcmp(it, "release") ? ckpt_xstrdup("release")
                     : (!*end && n >= 0) ? ckpt_xasprintf("iter_%07lld", n)
                     : NULL;
        if (name) {
            char *dir = ckpt_path_join(place, name);
            char *why = ckpt_xasprintf("named by %s", p);
            pin(by_dir(run, dir), why);
            free(why);
            free(dir);
            free(name);
        }
    }
    free(it);
    free(p);
}

void ckpt_run_pins(struct ckpt_run *run, struct ckpt_tree *t)
{
    static const char *const places[] = { "", "checkpoints", "checkpoint" };
    pin_hf(run, t);
    for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++)
        pin_latest(run, t, places[i]);
}
