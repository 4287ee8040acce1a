/*
 * orbax/judge.c - Orbax steps: a commit marker (commit_success.txt,
 * _CHECKPOINT_METADATA) and whole OCDBT databases.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/orbax.h"
#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/orbax/orbax.h"
#include "trainers/trainer.h"

/* Each OCDBT database (manifest.ocdbt outside ocdbt.process_*) must be
 * whole, inside archives too (plain tar members by ranged reads, a
 * compressed archive by a few more passes). A damaged archive's listing
 * may miss members, so nothing is judged missing there: markers only;
 * databases ckpt cannot read (CKPT_EUNSUPPORTED) by the markers too. */
static int judge_ocdbt(const struct judge_view *v, struct ckpt_checkpoint *c,
                       struct ckpt_err *err)
{
    if (v->t->damage)
        return 0;
    for (size_t i = v->lo; i < v->hi && c->complete; i++) {
        const char *r = judge_rel(v, i);
        if (strcmp(judge_base(r), "manifest.ocdbt") ||
            strstr(r, "ocdbt.process_"))
            continue;
        char *db = ckpt_path_dirname(v->t->files[i].path);
        struct orbax_tio x;
        struct ckpt_orbax_io io;
        orbax_tree_io(&x, &io, v->t, db);
        struct ckpt_err e = CKPT_ERR_INIT;
        uint64_t nkeys;
        int rc = ckpt_ocdbt_check(&io, db, &nkeys, &e);
        free(db);
        /* Only a missing or short data file makes the step incomplete
         * (clean deletes those); a manifest or node ckpt cannot decode
         * is an error: when unsure, never delete. */
        if (rc == 1)
            judge_set_why(c, "%s", e.msg);
        else if (rc != 0 && e.code != CKPT_EUNSUPPORTED) {
            *err = e;
            return -1;
        }
    }
    return 0;
}

/* Array data ckpt can read: an OCDBT manifest or a zarr array. */
static int has_arrays(const struct judge_view *v)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *b = judge_base(judge_rel(v, i));
        if (!strcmp(b, "manifest.ocdbt") || !strcmp(b, ".zarray") ||
            !strcmp(b, "zarr.json"))
            return 1;
    }
    return 0;
}

/* No marker. Older Orbax committed by renaming the tmp directory and
 * wrote commit_success.txt only on GCS, so a step with arrays and no
 * marker may well be complete: unknown, never "incomplete" (clean would
 * delete it). A database found damaged is still incomplete. */
static int judge_unmarked(const struct judge_view *v, struct ckpt_checkpoint *c,
                          struct ckpt_err *err)
{
    if (!has_arrays(v))
        return judge_set_why(c, "%s", "no commit_success.txt or "
                                "_CHECKPOINT_METADATA");
    if (judge_ocdbt(v, c, err) != 0)
        return -1;
    if (!c->complete)
        return 0;
    c->unknown_commit = 1;
    return judge_set_unknown(c, "%s", "no commit marker (older Orbax "
                             "commits by rename): cannot tell whether it "
                             "is complete");
}

int orbax_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err)
{
    if (strstr(c->name, ".orbax-checkpoint-tmp"))
        return judge_set_why(c, "%s", "temporary orbax directory");
    /* Every directory holding ocdbt.process_* needs its merged manifest. */
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        const char *op = strstr(r, "ocdbt.process_");
        if (!op || (op != r && op[-1] != '/'))
            continue;
        char *parent = ckpt_xstrndup(r, (size_t)(op - r));
        char *man = ckpt_xasprintf("%smanifest.ocdbt", parent);
        int ok = judge_get(v, man) != NULL;
        if (!ok)
            judge_set_why(c, "%s missing (per-process files not merged)", man);
        free(parent);
        free(man);
        if (!ok)
            return 0;
    }
    for (size_t i = v->lo; i < v->hi; i++)
        if (!strcmp(judge_base(judge_rel(v, i)), "commit_success.txt"))
            return judge_ocdbt(v, c, err);
    if (!judge_get(v, "_CHECKPOINT_METADATA"))
        return judge_unmarked(v, c, err);
    cJSON *j;
    if (judge_json(v, "_CHECKPOINT_METADATA", &j, err) != 0)
        return -1;
    cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "commit_timestamp_nsecs");
    if (!cJSON_IsNumber(ts))
        judge_set_why(c, "%s", "_CHECKPOINT_METADATA has no "
                               "commit_timestamp_nsecs");
    cJSON_Delete(j);
    return c->complete ? judge_ocdbt(v, c, err) : 0;
}

int orbax_recognise(const struct judge_view *v)
{
    static const char *marks[] = {
        "_CHECKPOINT_METADATA", "commit_success.txt", "manifest.ocdbt",
        "orbax.checkpoint",
    };
    for (size_t i = v->lo; i < v->hi; i++) {
        const char *r = judge_rel(v, i);
        const char *b = judge_base(r);
        for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++)
            if (!strcmp(b, marks[k]))
                return 1;
        if (strstr(r, "ocdbt.process_"))
            return 1;
        /* An item's pytree metadata, "<item>/_METADATA": older Orbax
         * steps have no step-level marker. */
        const char *sl = strchr(r, '/');
        if (sl && sl == b - 1 && !strcmp(b, "_METADATA"))
            return 1;
        /* The item itself (`ckpt unshard STEP/default`). */
        if (v->dir[0] == '\0' && !strcmp(r, "_METADATA"))
            return 1;
    }
    return 0;
}
