/*
 * runs.c - helpers shared by the commands that take RUN arguments: one
 * storage handle per (scheme, bucket), and JSON for checkpoints.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "runs.h"
#include "ckpt/util.h"

int cli_storages_get(struct storages *s, const struct ckpt_loc *loc,
                     const struct ckpt_opts *g, struct ckpt_storage **out,
                     struct ckpt_err *err)
{
    for (size_t i = 0; i < s->n; i++) {
        const struct ckpt_loc *l = &s->locs[i];
        if (l->scheme == loc->scheme &&
            (l->scheme == CKPT_SCHEME_LOCAL || !strcmp(l->bucket, loc->bucket))) {
            *out = s->handles[i];
            return 0;
        }
    }
    struct ckpt_storage_cfg cfg = cli_storage_cfg(g);
    struct ckpt_storage *st;
    if (ckpt_storage_open(&st, loc, &cfg, err) != 0)
        return -1;
    s->locs = ckpt_xreallocarray(s->locs, s->n + 1, sizeof(*s->locs));
    s->handles = ckpt_xreallocarray(s->handles, s->n + 1,
                                    sizeof(*s->handles));
    s->locs[s->n] = (struct ckpt_loc){
        loc->scheme, loc->bucket ? ckpt_xstrdup(loc->bucket) : NULL,
        ckpt_xstrdup(""), ckpt_xstrdup("")
    };
    s->handles[s->n++] = st;
    *out = st;
    return 0;
}

void cli_storages_release(struct storages *s)
{
    for (size_t i = 0; i < s->n; i++) {
        ckpt_loc_release(&s->locs[i]);
        ckpt_storage_close(s->handles[i]);
    }
    free(s->locs);
    free(s->handles);
    memset(s, 0, sizeof(*s));
}

static cJSON *json_checkpoint(const struct ckpt_checkpoint *c, int sizes)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    if (c->step >= 0)
        cJSON_AddNumberToObject(o, "step", (double)c->step);
    else
        cJSON_AddNullToObject(o, "step");   /* a root checkpoint's name
                                               carries no step */
    if (c->root)
        cJSON_AddBoolToObject(o, "root", 1);
    cJSON_AddStringToObject(o, "format", ckpt_format_name(c->format));
    cJSON_AddBoolToObject(o, "complete", c->complete);
    cJSON_AddStringToObject(o, "verdict", c->complete ? "complete"
                            : c->unknown ? "unknown" : "incomplete");
    if (!c->complete && c->why)
        cJSON_AddStringToObject(o, "reason", c->why);
    if (sizes) {
        cJSON_AddNumberToObject(o, "bytes", (double)c->size);
        cJSON_AddNumberToObject(o, "files", (double)c->nfiles);
    }
    return o;
}

cJSON *cli_json_checkpoints(const struct ckpt_run *run, int sizes)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < run->n; i++)
        cJSON_AddItemToArray(a, json_checkpoint(&run->ckpts[i], sizes));
    return a;
}

void cli_hint_all_live(size_t rows, size_t live, const char *min_age)
{
    if (!rows || live != rows)
        return;
    cli_infof("hint: %s skipped as live: written to within --min-age "
              "(%s); a shorter one takes runs written to more recently "
              "('--min-age 1h'; '--min-age 0' once nothing writes to them)",
              rows == 1 ? "the run was" : "every run was",
              min_age ? min_age : "1d, the default");
}

int cli_default_jobs(const struct ckpt_opts *g, int items, int cap)
{
    int j = g->jobs > 0 ? g->jobs : cap;
    if (j > items)
        j = items;
    return j < 1 ? 1 : j;
}
