/*
 * evidence.c - what a run directory says about its W&B run, read through
 * a struct ckpt_wandb_src (a storage directory here; an archive through
 * the archive module's adapter):
 *
 *   <run>/config.yaml                  wandb.{entity,project,name,group},
 *                                      save_folder (ends in the Slurm id)
 *   <run>/stepN/config.yaml            the same, when the root has none
 *   <run>/{wandb,.wandb}[/wandb]...    wandb dirs, nested at any depth up
 *                                      to MAX_NEST (OLMo: wandb/wandb/)
 *     run-YYYYMMDD_HHMMSS-ID[-x]/      one W&B run (offline-run-... too)
 *       run-ID.wandb                   RunRecord: entity, project, name
 *       files/wandb-metadata.json      slurm.job_id
 *       files/wandb-summary.json       _step (last step logged)
 *       files/config.yaml              the config as W&B stored it
 *     settings                         [default] entity/project
 *
 * A source only lists a few directories and reads small files or the
 * first bytes of a .wandb log, so remote runs and archives stay cheap.
 */
#include "wandb_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/run.h"
#include "ckpt/util.h"

#define MAX_NEST 3                 /* wandb/wandb/wandb */
#define MAX_CONFIG (8u << 20)
#define MAX_JSON (16u << 20)
#define WANDB_PREFIX (256u << 10)  /* of a .wandb log: the RunRecord */

/* ---- the storage source ---- */

struct dirsrc {
    struct ckpt_storage *st;  /* borrowed */
    char *dir;                /* owned */
};

struct list_adapter {
    ckpt_wandb_entry_fn fn;
    void *ud;
};

static int list_cb(void *ud, const struct ckpt_entry *e)
{
    struct list_adapter *a = ud;
    return a->fn(a->ud, e->name, e->type == CKPT_ENTRY_DIR);
}

static char *dir_path(const struct dirsrc *d, const char *rel)
{
    return rel[0] ? ckpt_path_join(d->dir, rel) : ckpt_xstrdup(d->dir);
}

static int ds_list(void *ctx, const char *rel, ckpt_wandb_entry_fn fn,
                   void *ud, struct ckpt_err *err)
{
    struct dirsrc *d = ctx;
    struct list_adapter a = { fn, ud };
    char *p = dir_path(d, rel);
    int rc = ckpt_storage_list(d->st, p, 0, list_cb, &a, err);
    free(p);
    return rc;
}

static int ds_read(void *ctx, const char *rel, size_t max, char **data,
                   size_t *len, int *truncated, struct ckpt_err *err)
{
    struct dirsrc *d = ctx;
    char *p = dir_path(d, rel);
    struct ckpt_buf b = CKPT_BUF_INIT;
    int rc = 0;
    *truncated = 0;
    /* Read one byte past max to tell "exactly max" from "longer". */
    while (b.len <= max) {
        size_t want = max + 1 - b.len < 65536 ? max + 1 - b.len : 65536;
        ckpt_buf_grow(&b, want);
        size_t got;
        rc = ckpt_storage_read(d->st, p, b.len, b.ptr + b.len, want, &got,
                               err);
        if (rc != 0)
            break;
        ckpt_buf_setlen(&b, b.len + got);
        if (got < want)
            break;
    }
    free(p);
    if (rc != 0) {
        ckpt_buf_release(&b);
        return -1;
    }
    if (b.len > max) {
        *truncated = 1;
        ckpt_buf_setlen(&b, max);
    }
    *data = ckpt_buf_detach(&b, len);
    return 0;
}

static void ds_release(void *ctx)
{
    struct dirsrc *d = ctx;
    free(d->dir);
    free(d);
}

void ckpt_wandb_src_storage(struct ckpt_wandb_src *src,
                            struct ckpt_storage *st, const char *dir)
{
    struct dirsrc *d = ckpt_xcalloc(1, sizeof(*d));
    d->st = st;
    d->dir = ckpt_xstrdup(dir);
    src->ctx = d;
    src->list = ds_list;
    src->read = ds_read;
    src->release = ds_release;
}

void ckpt_wandb_src_release(struct ckpt_wandb_src *src)
{
    if (src && src->release)
        src->release(src->ctx);
    if (src)
        memset(src, 0, sizeof(*src));
}

/* ---- names ---- */

int ckpt_wandb_parse_rundir(const char *name, char **id, char stamp[16],
                            int *offline)
{
    const char *p = name;
    *offline = ckpt_str_startswith(name, "offline-run-");
    if (*offline)
        p += 12;
    else if (ckpt_str_startswith(name, "run-"))
        p += 4;
    else
        return -1;
    for (int i = 0; i < 15; i++)
        if (i == 8 ? p[i] != '_' : !isdigit((unsigned char)p[i]))
            return -1;
    if (p[15] != '-')
        return -1;
    /* The id runs to the next '-' (OLMo: name.split("-")[2]); a suffix
     * may follow. run-ID.wandb, when present, settles ids with '-'. */
    const char *s = p + 16;
    size_t n = strcspn(s, "-");
    if (n == 0)
        return -1;
    memcpy(stamp, p, 15);
    stamp[15] = '\0';
    *id = ckpt_xstrndup(s, n);
    return 0;
}

/* Checkpoint directory names that carry a step (SPEC "Run directories"),
 * epoch_N excepted: an epoch is not a step. -1 if none. */
static int64_t step_of(const char *name)
{
    int64_t step;
    int unsharded;
    if (ckpt_str_startswith(name, "epoch_") ||
        !ckpt_checkpoint_name(name, &step, &unsharded))
        return -1;
    return step;
}

/* ---- gathering ---- */

struct stepdir {
    int64_t step;
    char *name;                      /* owned */
};

struct gather {
    const struct ckpt_wandb_src *src;
    struct ckpt_wandb_evidence *ev;
    struct ckpt_buf problems;
    int root_config;                 /* root has config.yaml */
    char **wandb_dirs;               /* owned; relative paths */
    size_t nwandb;
    struct stepdir *stepdirs;        /* owned; checkpoint directories */
    size_t nstepdirs;
};

static void problem(struct gather *g, const char *fmt, ...)
    CKPT_PRINTF(2, 3);

static void problem(struct gather *g, const char *fmt, ...)
{
    va_list ap;
    if (g->problems.len)
        ckpt_buf_addstr(&g->problems, "; ");
    va_start(ap, fmt);
    ckpt_buf_vaddf(&g->problems, fmt, ap);
    va_end(ap);
}

/* Read a small file (or, with prefix, the first max bytes of any); NULL
 * if missing (silently) or unreadable or too large (noted as a problem). */
static char *read_file(struct gather *g, const char *rel, size_t max,
                       int prefix, size_t *len)
{
    char *data = NULL;
    int trunc = 0;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (g->src->read(g->src->ctx, rel, max, &data, len, &trunc, &err) != 0) {
        if (err.code != CKPT_ENOTFOUND)
            problem(g, "%s: %s", rel, err.msg);
        return NULL;
    }
    if (trunc && !prefix) {
        problem(g, "%s: larger than %zu bytes", rel, max);
        free(data);
        return NULL;
    }
    return data;
}

static cJSON *read_json(struct gather *g, const char *rel)
{
    size_t len;
    char *s = read_file(g, rel, MAX_JSON, 0, &len);
    if (!s)
        return NULL;
    cJSON *j = cJSON_ParseWithLength(s, len);
    free(s);
    if (!cJSON_IsObject(j)) {
        problem(g, "%s: malformed JSON", rel);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static cJSON *read_yaml(struct gather *g, const char *rel)
{
    size_t len;
    char *s = read_file(g, rel, MAX_CONFIG, 0, &len);
    if (!s)
        return NULL;
    cJSON *j = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_yaml_parse(s, len, rel, &j, &err) != 0)
        problem(g, "%s", err.msg);
    else if (!cJSON_IsObject(j)) {
        problem(g, "%s: not a mapping", rel);
        cJSON_Delete(j);
        j = NULL;
    }
    free(s);
    return j;
}

static char *dup_or_null(const char *s)
{
    return s && *s ? ckpt_xstrdup(s) : NULL;
}

/* A JSON string or integer as text (slurm ids are strings, but a
 * hand-written file may hold a number). */
static char *json_text(const cJSON *j)
{
    if (cJSON_IsString(j))
        return dup_or_null(j->valuestring);
    if (cJSON_IsNumber(j) && j->valuedouble >= 0 && j->valuedouble < 1e15)
        return ckpt_xasprintf("%.0f", j->valuedouble);
    return NULL;
}

struct rundir_scan {
    char *wandb_file;  /* owned; "run-ID.wandb" */
};

static int rundir_cb(void *ud, const char *name, int is_dir)
{
    struct rundir_scan *s = ud;
    if (!is_dir && !s->wandb_file && ckpt_str_startswith(name, "run-") &&
        ckpt_str_endswith(name, ".wandb") && strlen(name) > 10)
        s->wandb_file = ckpt_xstrdup(name);
    return 0;
}

static void read_runrecord(struct gather *g, struct ckpt_wandb_localrun *r,
                           const char *file)
{
    char *rel = ckpt_path_join(r->dir, file);
    size_t len;
    char *data = read_file(g, rel, WANDB_PREFIX, 1, &len);
    struct ckpt_wandb_runrecord rr;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (data && ckpt_wandbfile_runrecord((unsigned char *)data, len, &rr,
                                         &err) == 0) {
        r->entity = rr.entity;
        r->project = rr.project;
        r->display_name = rr.display_name;
        r->group = rr.group;
        free(rr.run_id);
    } else if (data && err.code == CKPT_EFORMAT) {
        problem(g, "%s: %s", rel, err.msg);
    }
    free(data);
    free(rel);
}

static void read_run_files(struct gather *g, struct ckpt_wandb_localrun *r)
{
    char *rel = ckpt_path_join(r->dir, "files/wandb-metadata.json");
    cJSON *meta = read_json(g, rel);
    free(rel);
    cJSON *slurm = cJSON_GetObjectItemCaseSensitive(meta, "slurm");
    r->slurm_job_id = json_text(
        cJSON_GetObjectItemCaseSensitive(slurm, "job_id"));
    cJSON_Delete(meta);
    rel = ckpt_path_join(r->dir, "files/wandb-summary.json");
    cJSON *sum = read_json(g, rel);
    free(rel);
    cJSON *st = cJSON_GetObjectItemCaseSensitive(sum, "_step");
    if (cJSON_IsNumber(st) && st->valuedouble >= 0 && st->valuedouble < 9e15)
        r->last_step = (int64_t)st->valuedouble;
    cJSON_Delete(sum);
}

static void add_localrun(struct gather *g, const char *dir, const char *name)
{
    char *id, stamp[16];
    int offline;
    if (ckpt_wandb_parse_rundir(name, &id, stamp, &offline) != 0)
        return;
    struct ckpt_wandb_evidence *ev = g->ev;
    ev->runs = ckpt_xreallocarray(ev->runs, ev->nruns + 1, sizeof(*ev->runs));
    struct ckpt_wandb_localrun *r = &ev->runs[ev->nruns++];
    memset(r, 0, sizeof(*r));
    r->dir = ckpt_path_join(dir, name);
    r->id = id;
    memcpy(r->stamp, stamp, sizeof(r->stamp));
    r->offline = offline;
    r->last_step = -1;
    struct rundir_scan s = { NULL };
    struct ckpt_err err = CKPT_ERR_INIT;
    if (g->src->list(g->src->ctx, r->dir, rundir_cb, &s, &err) != 0)
        problem(g, "%s", err.msg);
    if (s.wandb_file) {
        free(r->id); /* run-ID.wandb names the id exactly */
        r->id = ckpt_xstrndup(s.wandb_file + 4, strlen(s.wandb_file) - 10);
        read_runrecord(g, r, s.wandb_file);
        free(s.wandb_file);
    }
    read_run_files(g, r);
}

/* [default] entity/project of a wandb settings file (INI). */
static void read_settings(struct gather *g, const char *rel)
{
    size_t len;
    char *s = read_file(g, rel, MAX_JSON, 0, &len);
    int in_default = 0;
    for (char *line = s, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *k = line;
        while (isspace((unsigned char)*k))
            k++;
        if (*k == '[') {
            in_default = ckpt_str_startswith(k, "[default]");
            continue;
        }
        char *eq = strchr(k, '=');
        if (!in_default || !eq)
            continue;
        char *v = eq + 1, *ke = eq;
        while (ke > k && isspace((unsigned char)ke[-1]))
            ke--;
        while (isspace((unsigned char)*v))
            v++;
        size_t vl = strlen(v);
        while (vl && isspace((unsigned char)v[vl - 1]))
            v[--vl] = '\0';
        char **dst = (size_t)(ke - k) == 6 && !strncmp(k, "entity", 6)
                         ? &g->ev->settings_entity
                     : (size_t)(ke - k) == 7 && !strncmp(k, "project", 7)
                         ? &g->ev->settings_project : NULL;
        if (dst && !*dst)
            *dst = dup_or_null(v);
    }
    free(s);
}

struct wdir_scan {
    struct gather *g;
    const char *dir;
    int depth;
    char **sub;       /* owned; nested wandb dirs */
    size_t nsub;
    char **runs;      /* owned; run dir names */
    size_t nruns;
    int settings;
};

static void push(char ***v, size_t *n, const char *s)
{
    *v = ckpt_xreallocarray(*v, *n + 1, sizeof(**v));
    (*v)[(*n)++] = ckpt_xstrdup(s);
}

static int is_wandb_dir(const char *name)
{
    return !strcmp(name, "wandb") || !strcmp(name, ".wandb");
}

static int wdir_cb(void *ud, const char *name, int is_dir)
{
    struct wdir_scan *s = ud;
    if (is_dir && is_wandb_dir(name))
        push(&s->sub, &s->nsub, name);
    else if (is_dir && (ckpt_str_startswith(name, "run-") ||
                        ckpt_str_startswith(name, "offline-run-")))
        push(&s->runs, &s->nruns, name);
    else if (!is_dir && !strcmp(name, "settings"))
        s->settings = 1;
    return 0;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void scan_wandb_dir(struct gather *g, const char *dir, int depth)
{
    struct wdir_scan s = { g, dir, depth, NULL, 0, NULL, 0, 0 };
    struct ckpt_err err = CKPT_ERR_INIT;
    if (g->src->list(g->src->ctx, dir, wdir_cb, &s, &err) != 0) {
        problem(g, "%s", err.msg);
        return;
    }
    for (size_t i = 0; i < s.nruns; i++)
        add_localrun(g, dir, s.runs[i]);
    if (s.settings) {
        char *rel = ckpt_path_join(dir, "settings");
        read_settings(g, rel);
        free(rel);
    }
    for (size_t i = 0; i < s.nsub && depth + 1 < MAX_NEST; i++) {
        char *sub = ckpt_path_join(dir, s.sub[i]);
        scan_wandb_dir(g, sub, depth + 1);
        free(sub);
    }
    free_strv(s.sub, s.nsub);
    free_strv(s.runs, s.nruns);
}

static int root_cb(void *ud, const char *name, int is_dir)
{
    struct gather *g = ud;
    struct ckpt_wandb_evidence *ev = g->ev;
    if (!is_dir && !strcmp(name, "config.yaml"))
        g->root_config = 1;
    if (!is_dir)
        return 0;
    if (is_wandb_dir(name)) {
        push(&g->wandb_dirs, &g->nwandb, name);
        return 0;
    }
    int64_t st = step_of(name);
    if (st >= 0) {
        ev->steps = ckpt_xreallocarray(ev->steps, ev->nsteps + 1,
                                       sizeof(*ev->steps));
        ev->steps[ev->nsteps++] = st;
        g->stepdirs = ckpt_xreallocarray(g->stepdirs, g->nstepdirs + 1,
                                         sizeof(*g->stepdirs));
        g->stepdirs[g->nstepdirs].step = st;
        g->stepdirs[g->nstepdirs++].name = ckpt_xstrdup(name);
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_localrun(const void *a, const void *b)
{
    const struct ckpt_wandb_localrun *x = a, *y = b;
    int c = strcmp(x->stamp, y->stamp);
    return c ? c : strcmp(x->id, y->id);
}

/* Newest first. */
static int cmp_stepdir(const void *a, const void *b)
{
    const struct stepdir *x = a, *y = b;
    return (x->step < y->step) - (x->step > y->step);
}

static void sort_unique_steps(struct ckpt_wandb_evidence *ev)
{
    if (!ev->nsteps)
        return;
    ckpt_sort(ev->steps, ev->nsteps, sizeof(*ev->steps), cmp_i64);
    size_t o = 1;
    for (size_t i = 1; i < ev->nsteps; i++)
        if (ev->steps[i] != ev->steps[o - 1])
            ev->steps[o++] = ev->steps[i];
    ev->nsteps = o;
}

/* Take config.yaml's wandb section apart; the rest is the training
 * config. */
static void use_olmo_config(struct ckpt_wandb_evidence *ev, cJSON *cfg,
                            const char *from)
{
    cJSON *w = cJSON_DetachItemFromObjectCaseSensitive(cfg, "wandb");
    ev->entity = dup_or_null(ckpt_json_str(w, "entity"));
    ev->project = dup_or_null(ckpt_json_str(w, "project"));
    ev->name = dup_or_null(ckpt_json_str(w, "name"));
    ev->group = dup_or_null(ckpt_json_str(w, "group"));
    cJSON_Delete(w);
    ev->config = cfg;
    ev->config_file = ckpt_xstrdup(from);
}

static void read_config(struct gather *g)
{
    struct ckpt_wandb_evidence *ev = g->ev;
    cJSON *cfg = g->root_config ? read_yaml(g, "config.yaml") : NULL;
    if (cfg) {
        use_olmo_config(ev, cfg, "config.yaml");
        return;
    }
    /* OLMo writes config.yaml into every checkpoint too; try the newest
     * few (older ones hold the same config). */
    if (g->nstepdirs)
        ckpt_sort(g->stepdirs, g->nstepdirs, sizeof(*g->stepdirs), cmp_stepdir);
    for (size_t i = 0; i < g->nstepdirs && i < 3 && !ev->config; i++) {
        char *rel = ckpt_path_join(g->stepdirs[i].name, "config.yaml");
        cfg = read_yaml(g, rel);
        if (cfg)
            use_olmo_config(ev, cfg, rel);
        free(rel);
    }
    /* Last resort: the config W&B stored, from the newest local run. */
    for (size_t i = ev->nruns; i-- > 0 && !ev->config;) {
        char *rel = ckpt_path_join(ev->runs[i].dir, "files/config.yaml");
        cfg = read_yaml(g, rel);
        if (cfg) {
            ckpt_gql_unwrap_config(cfg);
            ev->config = cfg;
            ev->config_file = ckpt_xstrdup(rel);
        }
        free(rel);
    }
}

static void derive_ids(struct ckpt_wandb_evidence *ev)
{
    ev->save_folder = dup_or_null(ckpt_json_str(ev->config, "save_folder"));
    ev->slurm_job_id = ckpt_slurm_id_of(ev->save_folder);
    for (size_t i = ev->nruns; i-- > 0 && !ev->slurm_job_id;) {
        const char *j = ev->runs[i].slurm_job_id;
        if (j && *j && strspn(j, "0123456789") == strlen(j))
            ev->slurm_job_id = ckpt_xstrdup(j);
    }
}

int ckpt_wandb_evidence_gather(struct ckpt_wandb_evidence **out,
                               const struct ckpt_wandb_src *src,
                               struct ckpt_err *err)
{
    struct ckpt_wandb_evidence *ev = ckpt_xcalloc(1, sizeof(*ev));
    struct gather g = { src, ev, CKPT_BUF_INIT, 0, NULL, 0, NULL, 0 };
    *out = NULL;
    if (src->list(src->ctx, "", root_cb, &g, err) != 0) {
        free_strv(g.wandb_dirs, g.nwandb);
        for (size_t i = 0; i < g.nstepdirs; i++)
            free(g.stepdirs[i].name);
        free(g.stepdirs);
        ckpt_wandb_evidence_free(ev);
        return -1;
    }
    sort_unique_steps(ev);
    for (size_t i = 0; i < g.nwandb; i++)
        scan_wandb_dir(&g, g.wandb_dirs[i], 0);
    free_strv(g.wandb_dirs, g.nwandb);
    g.wandb_dirs = NULL;
    if (ev->nruns)
        ckpt_sort(ev->runs, ev->nruns, sizeof(*ev->runs), cmp_localrun);
    read_config(&g);
    for (size_t i = 0; i < g.nstepdirs; i++)
        free(g.stepdirs[i].name);
    free(g.stepdirs);
    derive_ids(ev);
    ev->problems = g.problems.len ? ckpt_buf_detach(&g.problems, NULL) : NULL;
    ckpt_buf_release(&g.problems);
    *out = ev;
    return 0;
}

void ckpt_wandb_evidence_free(struct ckpt_wandb_evidence *ev)
{
    if (!ev)
        return;
    for (size_t i = 0; i < ev->nruns; i++) {
        struct ckpt_wandb_localrun *r = &ev->runs[i];
        free(r->dir);
        free(r->id);
        free(r->entity);
        free(r->project);
        free(r->display_name);
        free(r->group);
        free(r->slurm_job_id);
    }
    free(ev->runs);
    cJSON_Delete(ev->config);
    free(ev->config_file);
    free(ev->entity);
    free(ev->project);
    free(ev->name);
    free(ev->group);
    free(ev->settings_entity);
    free(ev->settings_project);
    free(ev->save_folder);
    free(ev->slurm_job_id);
    free(ev->steps);
    free(ev->problems);
    free(ev);
}
