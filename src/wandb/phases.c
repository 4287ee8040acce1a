/*
 * phases.c - the three searches of the resolver (see resolve.c) and the
 * offline mode: which keys a run contributes, the filter for a chunk of
 * keys, and how the returned W&B runs decide the run's path.
 */
#include "resolve_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

static char *print_filter(cJSON *f)
{
    char *s = cJSON_PrintUnformatted(f);
    cJSON_Delete(f);
    if (!s)
        ckpt_die_oom("printing a W&B query filter");
    return s;
}

/* Append to *hits every run returned by j's queries that fits j, once. */
typedef int (*fits_fn)(const struct job *, const struct ckpt_wandb_run *);

static void collect(struct resolver *r, struct job *j, fits_fn fits,
                    struct ckpt_wandb_run ***hits, size_t *n)
{
    for (size_t i = 0; i < j->nqs; i++) {
        struct query *q = r->q[j->qs[i]];
        for (size_t k = 0; k < q->runs.n; k++) {
            struct ckpt_wandb_run *run = &q->runs.v[k];
            int dup = 0;
            for (size_t h = 0; h < *n && !dup; h++)
                dup = !strcmp((*hits)[h]->name, run->name);
            if (dup || !fits(j, run))
                continue;
            *hits = ckpt_xreallocarray(*hits, *n + 1, sizeof(**hits));
            (*hits)[(*n)++] = run;
        }
    }
}

/* ---- local ids ---- */

static void local_keys(struct resolver *r, struct job *j)
{
    for (size_t i = 0; i < j->ev->nruns; i++)
        if (!wb_strv_has(&j->keys, j->ev->runs[i].id))
            wb_strv_push(&j->keys, j->ev->runs[i].id);
}

/* One id: a Run query (api.run); more: {"name":{"$in":[...]}}. */
static char *local_filter(char *const *keys, size_t n)
{
    if (n == 1)
        return NULL;
    cJSON *f = cJSON_CreateObject();
    cJSON *cond = cJSON_AddObjectToObject(f, "name");
    cJSON_AddItemToObject(cond, "$in", cJSON_CreateStringArray(
                              (const char *const *)keys, (int)n));
    return print_filter(f);
}

static int local_fits(const struct job *j, const struct ckpt_wandb_run *run)
{
    return wb_strv_has(&j->keys, run->name);
}

static const char *local_dir(const struct job *j, const char *id)
{
    for (size_t i = j->ev->nruns; i-- > 0;)
        if (!strcmp(j->ev->runs[i].id, id))
            return j->ev->runs[i].dir;
    return id;
}

static void local_eval(struct resolver *r, struct job *j)
{
    if (wb_check_failure(r, j))
        return;
    struct ckpt_wandb_run **hits = NULL;
    size_t n = 0;
    collect(r, j, local_fits, &hits, &n);
    if (!n) {
        char *ids = wb_joined(&j->keys, 5);
        wb_note(j, "local W&B run%s %s not found in %s/%s",
                j->keys.n > 1 ? "s" : "", ids, j->entity, j->project);
        free(ids);
        return;
    }
    ckpt_sort(hits, n, sizeof(*hits), wb_cmp_created);
    const char *dir = local_dir(j, hits[n - 1]->name);
    char *ev;
    if (n == 1 && j->ev->nruns == 1)
        ev = ckpt_xasprintf("wandb run dir %s, confirmed by W&B", dir);
    else
        ev = ckpt_xasprintf("wandb run dir %s, confirmed by W&B; the "
                            "latest of %zu W&B runs of %zu wandb run dirs "
                            "(requeued)", dir, n, j->ev->nruns);
    wb_found(j, hits, n, "local-id", ev);
    free(hits);
}

const struct phase phase_local = { "local-id", local_keys, local_filter,
                                   local_eval };

/* ---- searches matched on the config ---- */

/* Requeues of one job share their save_folder (and so the config). */
static int same_job(struct ckpt_wandb_run **m, size_t n)
{
    const char *sf = ckpt_json_str(m[0]->config, "save_folder");
    if (!sf || !*sf)
        return 0;
    for (size_t i = 1; i < n; i++) {
        const char *o = ckpt_json_str(m[i]->config, "save_folder");
        if (!o || strcmp(o, sf))
            return 0;
    }
    return 1;
}

static void add_cands(struct job *j, struct ckpt_wandb_run **c, size_t n,
                      struct strv *paths)
{
    for (size_t i = 0; i < n; i++) {
        char *p = wb_path_of(j, c[i]->name);
        if (!wb_strv_has(&j->cands, p))
            wb_strv_push(&j->cands, p);
        if (paths)
            wb_strv_push(paths, p);
        free(p);
    }
}

/* Keep the candidates whose config matches; *diff describes the first
 * mismatch. */
static size_t config_matches(struct resolver *r, struct job *j,
                             struct ckpt_wandb_run **c, size_t n,
                             char *diff, size_t difflen)
{
    size_t m = 0;
    char d[256];
    diff[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (ckpt_wandb_config_match(j->ev->config, c[i]->config,
                                    r->o->ignore_keys, r->o->nignore, d,
                                    sizeof(d))) {
            c[m++] = c[i];
        } else if (!diff[0]) {
            snprintf(diff, difflen, "%s differs in %s", c[i]->name, d);
        }
    }
    return m;
}

static void no_config(struct job *j, struct ckpt_wandb_run **c, size_t n,
                      const char *source, const char *how)
{
    struct strv paths = { NULL, 0 };
    add_cands(j, c, n, &paths);
    char *list = wb_joined(&paths, 10);
    wb_set_candidates(j, &paths);
    wb_finish(j, CKPT_WANDB_UNKNOWN, source,
              ckpt_xasprintf("%zu W&B run%s with %s, but no local training "
                                "config to compare: %s", n, n > 1 ? "s" : "",
                                how, list));
    free(list);
    wb_strv_release(&paths);
}

static void decide(struct resolver *r, struct job *j, fits_fn fits,
                   const char *source, char *how /* owned */)
{
    struct ckpt_wandb_run **c = NULL;
    size_t n = 0;
    char diff[320];
    if (wb_check_failure(r, j))
        goto out;
    collect(r, j, fits, &c, &n);
    if (!n) {
        wb_note(j, "no W&B run with %s", how);
        goto out;
    }
    if (!j->ev->config) {
        no_config(j, c, n, source, how);
        goto out;
    }
    add_cands(j, c, n, NULL);
    size_t m = config_matches(r, j, c, n, diff, sizeof(diff));
    if (!m) {
        wb_note(j, "%zu W&B run%s with %s, none with a matching config (%s)",
                n, n > 1 ? "s" : "", how, diff);
        goto out;
    }
    ckpt_sort(c, m, sizeof(*c), wb_cmp_created);
    if (m == 1) {
        wb_found(j, c, 1, source, ckpt_xasprintf("%s; config matches", how));
    } else if (same_job(c, m)) {
        wb_found(j, c, m, source,
                 ckpt_xasprintf("%s; config matches %zu W&B runs of one "
                                   "requeued job, the latest chosen", how, m));
    } else {
        struct strv paths = { NULL, 0 };
        add_cands(j, c, m, &paths);
        char *list = wb_joined(&paths, 10);
        wb_set_candidates(j, &paths);
        wb_finish(j, CKPT_WANDB_AMBIGUOUS, source,
                  ckpt_xasprintf("%zu W&B runs with %s match the config: %s",
                                    m, how, list));
        free(list);
        wb_strv_release(&paths);
    }
out:
    free(c);
    free(how);
}

/* ---- Slurm job id in config.save_folder ---- */

static void slurm_keys(struct resolver *r, struct job *j)
{
    if (j->ev->slurm_job_id)
        wb_strv_push(&j->keys, j->ev->slurm_job_id);
}

/* {"config.save_folder":{"$regex":"/(1|2)$"}}: ids are digits only, so
 * they need no escaping. */
static char *slurm_filter(char *const *keys, size_t n)
{
    struct ckpt_buf re = CKPT_BUF_INIT;
    ckpt_buf_addstr(&re, n > 1 ? "/(" : "/");
    for (size_t i = 0; i < n; i++)
        ckpt_buf_addf(&re, "%s%s", i ? "|" : "", keys[i]);
    ckpt_buf_addstr(&re, n > 1 ? ")$" : "$");
    cJSON *f = cJSON_CreateObject();
    cJSON *cond = cJSON_AddObjectToObject(f, "config.save_folder");
    cJSON_AddStringToObject(cond, "$regex", re.ptr);
    ckpt_buf_release(&re);
    return print_filter(f);
}

/* Checked here too: a server that ignored the anchor would return more. */
static int slurm_fits(const struct job *j, const struct ckpt_wandb_run *run)
{
    char *id = ckpt_slurm_id_of(ckpt_json_str(run->config, "save_folder"));
    int ok = id && !strcmp(id, j->ev->slurm_job_id);
    free(id);
    return ok;
}

static void slurm_eval(struct resolver *r, struct job *j)
{
    decide(r, j, slurm_fits, "slurm",
           ckpt_xasprintf("config.save_folder ending in Slurm job %s",
                          j->ev->slurm_job_id));
}

const struct phase phase_slurm = { "slurm", slurm_keys, slurm_filter,
                                   slurm_eval };

/* ---- display name and group ---- */

/* Key: name, US, then 'G' group or 'N' for no group. */
static void name_keys(struct resolver *r, struct job *j)
{
    if (!j->name || !*j->name)
        return;
    char *k = j->group ? ckpt_xasprintf("%s\x1fG%s", j->name, j->group)
                       : ckpt_xasprintf("%s\x1fN", j->name);
    wb_strv_push(&j->keys, k);
    free(k);
}

/* OLMo's filter, {"display_name": N[, "group": G]}, or an $or of them. */
static char *name_filter(char *const *keys, size_t n)
{
    cJSON *or = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        const char *us = strchr(keys[i], '\x1f');
        char *name = ckpt_xstrndup(keys[i], (size_t)(us - keys[i]));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "display_name", name);
        if (us[1] == 'G')
            cJSON_AddStringToObject(o, "group", us + 2);
        cJSON_AddItemToArray(or, o);
        free(name);
    }
    if (n == 1) {
        cJSON *only = cJSON_DetachItemFromArray(or, 0);
        cJSON_Delete(or);
        return print_filter(only);
    }
    cJSON *f = cJSON_CreateObject();
    cJSON_AddItemToObject(f, "$or", or);
    return print_filter(f);
}

static int name_fits(const struct job *j, const struct ckpt_wandb_run *run)
{
    if (!run->display_name || strcmp(run->display_name, j->name))
        return 0;
    return !j->group || (run->group && !strcmp(run->group, j->group));
}

static void name_eval(struct resolver *r, struct job *j)
{
    char *how = j->group
        ? ckpt_xasprintf("display name '%s' and group '%s'", j->name,
                         j->group)
        : ckpt_xasprintf("display name '%s'", j->name);
    decide(r, j, name_fits, "display-name", how);
}

const struct phase phase_name = { "display-name", name_keys, name_filter,
                                  name_eval };

/* ---- offline ---- */

void wb_resolve_offline(struct job *j)
{
    const struct ckpt_wandb_evidence *ev = j->ev;
    if (!ev->nruns) {
        wb_note(j, "no local W&B run id (--offline uses local evidence only)");
        return;
    }
    if (!j->entity || !j->project)
        return;
    const char **ids = ckpt_xcalloc(ev->nruns, sizeof(*ids));
    int64_t *last = ckpt_xcalloc(ev->nruns, sizeof(*last));
    size_t n = 0;
    for (size_t i = 0; i < ev->nruns; i++) {
        int dup = 0;
        for (size_t k = 0; k < n && !dup; k++)
            dup = !strcmp(ids[k], ev->runs[i].id);
        if (dup)
            continue;
        ids[n] = ev->runs[i].id;
        last[n++] = wb_local_last_step(j, ev->runs[i].id);
    }
    const char *dir = ev->runs[ev->nruns - 1].dir;
    char *e = n == 1
        ? ckpt_xasprintf("wandb run dir %s (offline: not confirmed with "
                         "W&B)", dir)
        : ckpt_xasprintf("wandb run dir %s, the latest of %zu (offline: "
                         "not confirmed with W&B)", dir, n);
    wb_found_ids(j, ids, last, n, "offline", e);
    free(ids);
    free(last);
}
