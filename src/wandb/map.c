/*
 * map.c - the mapping file: what `map-wandb --output` writes and
 * `upload --wandb-map` reads (format in ckpt/wandb.h). Entries keep the
 * line they were read from, so rewriting a file after mapping more runs
 * leaves the other lines byte for byte as they were.
 */
#include "wandb_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/text.h"
#include "ckpt/util.h"

#define MAX_MAP (256u << 20)

static const char *const status_names[] = { "found", "ambiguous", "unknown",
                                            "error" };

int ckpt_wandb_path_valid(const char *path)
{
    /* Three components; each becomes a directory under upload's DEST, so
     * "." and ".." (and blanks) are refused, and so is every hidden name:
     * ".ckpt-process/x/y" would put the run in DEST's state directory. */
    int parts = 0;
    const char *p = path;
    while (p && *p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || p[0] == '.')
            return 0;
        for (size_t i = 0; i < n; i++)
            if (isspace((unsigned char)p[i]) || iscntrl((unsigned char)p[i]))
                return 0;
        parts++;
        p += n;
        if (*p == '/' && !*++p)
            return 0;
    }
    return parts == 3;
}

struct ckpt_wandb_map *ckpt_wandb_map_new(void)
{
    return ckpt_xcalloc(1, sizeof(struct ckpt_wandb_map));
}

void ckpt_wandb_map_entry_release(struct ckpt_wandb_map_entry *e)
{
    if (!e)
        return;
    free(e->line);
    free(e->run);
    free(e->path);
    free(e->evidence);
    for (size_t i = 0; i < e->nsteps; i++)
        free(e->steps[i].path);
    free(e->steps);
    memset(e, 0, sizeof(*e));
}

void ckpt_wandb_map_free(struct ckpt_wandb_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        ckpt_wandb_map_entry_release(&m->v[i]);
    free(m->v);
    free(m);
}

static void copy_entry(struct ckpt_wandb_map_entry *d,
                       const struct ckpt_wandb_map_entry *s)
{
    d->line = s->line ? ckpt_xstrdup(s->line) : NULL;
    d->run = ckpt_xstrdup(s->run);
    d->path = s->path ? ckpt_xstrdup(s->path) : NULL;
    d->evidence = ckpt_xstrdup(s->evidence ? s->evidence : "");
    d->nsteps = s->nsteps;
    d->steps = ckpt_xcalloc(s->nsteps ? s->nsteps : 1, sizeof(*d->steps));
    for (size_t i = 0; i < s->nsteps; i++) {
        d->steps[i].step = s->steps[i].step;
        d->steps[i].path = ckpt_xstrdup(s->steps[i].path);
    }
}

const struct ckpt_wandb_map_entry *
ckpt_wandb_map_find(const struct ckpt_wandb_map *m, const char *run)
{
    for (size_t i = 0; m && i < m->n; i++)
        if (!strcmp(m->v[i].run, run))
            return &m->v[i];
    return NULL;
}

void ckpt_wandb_map_put(struct ckpt_wandb_map *m,
                        const struct ckpt_wandb_map_entry *e)
{
    struct ckpt_wandb_map_entry *old =
        (struct ckpt_wandb_map_entry *)ckpt_wandb_map_find(m, e->run);
    if (old) {
        ckpt_wandb_map_entry_release(old);
        copy_entry(old, e);
        return;
    }
    m->v = ckpt_xreallocarray(m->v, m->n + 1, sizeof(*m->v));
    copy_entry(&m->v[m->n++], e);
}

static int cmp_step(const void *a, const void *b)
{
    const struct ckpt_wandb_step *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

const char *ckpt_wandb_map_path(const struct ckpt_wandb_map *m,
                                const char *run, int64_t step)
{
    const struct ckpt_wandb_map_entry *e = ckpt_wandb_map_find(m, run);
    if (!e || !e->path)
        return NULL;
    struct ckpt_wandb_step key = { step, NULL };
    const struct ckpt_wandb_step *s =
        step >= 0 && e->nsteps
            ? bsearch(&key, e->steps, e->nsteps, sizeof(key), cmp_step)
            : NULL;
    return s ? s->path : e->path;
}

/* ---- parsing ---- */

static int bad_line(struct ckpt_err *err, const char *name, int lineno,
                    const char *what, const char *detail)
{
    return ckpt_err_set(err, CKPT_EFORMAT, "%s:%d: %s%s%s%s", name, lineno,
                        what, detail ? " '" : "", detail ? detail : "",
                        detail ? "'" : "");
}

static int parse_tsv(char *line, struct ckpt_wandb_map_entry *e,
                     const char *name, int lineno, struct ckpt_err *err)
{
    char *t1 = strchr(line, '\t');
    if (!t1 || t1 == line)
        return bad_line(err, name, lineno, "expected RUN_ID<TAB>PATH"
                        "<TAB>EVIDENCE", NULL);
    char *t2 = strchr(t1 + 1, '\t');
    *t1 = '\0';
    if (t2)
        *t2 = '\0';
    const char *path = t1 + 1;
    if (strcmp(path, "-") && !ckpt_wandb_path_valid(path))
        return bad_line(err, name, lineno, "bad W&B path", path);
    e->run = ckpt_unescape(line);
    e->path = strcmp(path, "-") ? ckpt_xstrdup(path) : NULL;
    e->evidence = ckpt_unescape(t2 ? t2 + 1 : "");
    *t1 = '\t';
    if (t2)
        *t2 = '\t';
    return 0;
}

static int parse_steps(const cJSON *steps, struct ckpt_wandb_map_entry *e,
                       const char *name, int lineno, struct ckpt_err *err)
{
    int n = cJSON_GetArraySize(steps);
    e->steps = ckpt_xcalloc(n > 0 ? (size_t)n : 1, sizeof(*e->steps));
    for (const cJSON *s = steps->child; s; s = s->next) {
        uint64_t v;
        if (!s->string || ckpt_parse_u64(s->string, &v) != 0)
            return bad_line(err, name, lineno, "bad step", s->string);
        if (!cJSON_IsString(s) || !ckpt_wandb_path_valid(s->valuestring))
            return bad_line(err, name, lineno, "bad W&B path for step",
                            s->string);
        e->steps[e->nsteps].step = (int64_t)v;
        e->steps[e->nsteps++].path = ckpt_xstrdup(s->valuestring);
    }
    ckpt_sort(e->steps, e->nsteps, sizeof(*e->steps), cmp_step);
    return 0;
}

static int parse_json_line(const char *line, struct ckpt_wandb_map_entry *e,
                           const char *name, int lineno,
                           struct ckpt_err *err)
{
    cJSON *j = cJSON_Parse(line);
    int rc = 0;
    const char *run = ckpt_json_str(j, "run");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(j, "path");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
    if (!cJSON_IsObject(j) || !run || !*run)
        rc = bad_line(err, name, lineno, "expected a JSON object with "
                      "\"run\"", NULL);
    else if (path && !cJSON_IsNull(path) &&
             (!cJSON_IsString(path) ||
              !ckpt_wandb_path_valid(path->valuestring)))
        rc = bad_line(err, name, lineno, "bad W&B path",
                      cJSON_IsString(path) ? path->valuestring : NULL);
    if (rc == 0) {
        const char *ev = ckpt_json_str(j, "evidence");
        e->run = ckpt_xstrdup(run);
        e->path = cJSON_IsString(path) ? ckpt_xstrdup(path->valuestring)
                                       : NULL;
        e->evidence = ckpt_xstrdup(ev ? ev : "");
        if (cJSON_IsObject(steps))
            rc = parse_steps(steps, e, name, lineno, err);
    }
    cJSON_Delete(j);
    return rc;
}

int ckpt_wandb_map_parse(struct ckpt_wandb_map **out, const char *data,
                         size_t len, const char *name, struct ckpt_err *err)
{
    struct ckpt_wandb_map *m = ckpt_wandb_map_new();
    int lineno = 0, rc = 0;
    *out = NULL;
    for (size_t pos = 0; pos < len && rc == 0;) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        char *line = ckpt_xstrndup(data + pos, end - pos);
        size_t ll = strlen(line);
        pos = nl ? end + 1 : len;
        lineno++;
        if (ll && line[ll - 1] == '\r')
            line[--ll] = '\0';
        if (ll && line[0] != '#') {
            struct ckpt_wandb_map_entry e = { 0 };
            rc = line[0] == '{' ? parse_json_line(line, &e, name, lineno, err)
                                : parse_tsv(line, &e, name, lineno, err);
            if (rc == 0) {
                e.line = line;
                line = NULL;
                ckpt_wandb_map_put(m, &e);
            }
            ckpt_wandb_map_entry_release(&e);
        }
        free(line);
    }
    if (rc != 0) {
        ckpt_wandb_map_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

int ckpt_wandb_map_load(struct ckpt_wandb_map **out, const char *location,
                        const struct ckpt_storage_cfg *cfg,
                        struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    char *data = NULL;
    size_t len = 0;
    int rc = ckpt_loc_parse(&loc, location, err);
    if (rc == 0)
        rc = ckpt_storage_open(&st, &loc, cfg, err);
    if (rc == 0)
        rc = ckpt_storage_read_all(st, loc.key, MAX_MAP, &data, &len, err);
    if (rc == 0)
        rc = ckpt_wandb_map_parse(out, data, len, location, err);
    free(data);
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    return rc;
}

/* ---- writing ---- */

static void add_field(struct ckpt_buf *b, const char *s)
{
    /* One row per run, fields split on TAB: escaped as on stdout
     * (docs/output.md), so "a<TAB>b" and "a b" stay two runs. */
    ckpt_escape_add(b, s, strlen(s));
}

static char *tsv_line(const char *run, const char *path, const char *ev)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    add_field(&b, run);
    ckpt_buf_addch(&b, '\t');
    add_field(&b, path ? path : "-");
    ckpt_buf_addch(&b, '\t');
    add_field(&b, ev ? ev : "");
    return ckpt_buf_detach(&b, NULL);
}

static cJSON *steps_json(const struct ckpt_wandb_step *s, size_t n)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof(k), "%lld", (long long)s[i].step);
        cJSON_AddStringToObject(o, k, s[i].path);
    }
    return o;
}

static cJSON *strings_json(char *const *v, size_t n)
{
    return cJSON_CreateStringArray((const char *const *)v, (int)n);
}

cJSON *ckpt_wandb_result_json(const char *run,
                              const struct ckpt_wandb_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", run);
    if (r->path)
        cJSON_AddStringToObject(o, "path", r->path);
    else
        cJSON_AddNullToObject(o, "path");
    cJSON_AddStringToObject(o, "status", status_names[r->status & 3]);
    cJSON_AddStringToObject(o, "evidence", r->evidence ? r->evidence : "");
    if (r->source && *r->source)
        cJSON_AddStringToObject(o, "source", r->source);
    if (r->nruns > 1)
        cJSON_AddItemToObject(o, "runs", strings_json(r->runs, r->nruns));
    if (r->nsteps)
        cJSON_AddItemToObject(o, "steps", steps_json(r->steps, r->nsteps));
    if (r->ncandidates)
        cJSON_AddItemToObject(o, "candidates",
                              strings_json(r->candidates, r->ncandidates));
    return o;
}

static char *json_text(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        ckpt_die_oom("printing a JSON record");
    return s;
}

void ckpt_wandb_map_entry_of(struct ckpt_wandb_map_entry *e, const char *run,
                             const struct ckpt_wandb_result *r, int json)
{
    memset(e, 0, sizeof(*e));
    e->run = ckpt_xstrdup(run);
    /* A path W&B answered becomes a place below DEST as a map file's
     * does: one that a map file could not hold (a hidden component
     * would land in DEST/.ckpt-process/) leaves the run unmapped. */
    const char *bad = r->path && !ckpt_wandb_path_valid(r->path) ? r->path
                                                                  : NULL;
    for (size_t i = 0; i < r->nsteps && !bad; i++)
        if (!ckpt_wandb_path_valid(r->steps[i].path))
            bad = r->steps[i].path;
    if (bad) {
        e->evidence = ckpt_xasprintf("error: W&B path '%s' is no place "
                                     "below DEST (an empty, hidden, '.' or "
                                     "'..' component)", bad);
        e->steps = ckpt_xcalloc(1, sizeof(*e->steps));
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "run", run);
            cJSON_AddNullToObject(o, "path");
            cJSON_AddStringToObject(o, "status", "error");
            cJSON_AddStringToObject(o, "evidence", e->evidence);
            e->line = json_text(o);
        } else {
            e->line = tsv_line(run, NULL, e->evidence);
        }
        return;
    }
    e->path = r->path ? ckpt_xstrdup(r->path) : NULL;
    e->evidence = ckpt_xstrdup(r->evidence ? r->evidence : "");
    e->steps = ckpt_xcalloc(r->nsteps ? r->nsteps : 1, sizeof(*e->steps));
    for (size_t i = 0; i < r->nsteps; i++) {
        e->steps[i].step = r->steps[i].step;
        e->steps[i].path = ckpt_xstrdup(r->steps[i].path);
    }
    e->nsteps = r->nsteps;
    e->line = json ? json_text(ckpt_wandb_result_json(run, r))
                   : tsv_line(run, r->path, r->evidence);
}

cJSON *ckpt_wandb_map_entry_json(const struct ckpt_wandb_map_entry *e)
{
    cJSON *o = e->line && e->line[0] == '{' ? cJSON_Parse(e->line) : NULL;
    if (cJSON_IsObject(o))
        return o;
    cJSON_Delete(o);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", e->run);
    if (e->path)
        cJSON_AddStringToObject(o, "path", e->path);
    else
        cJSON_AddNullToObject(o, "path");
    cJSON_AddStringToObject(o, "status", e->path ? "found" : "unknown");
    cJSON_AddStringToObject(o, "evidence", e->evidence ? e->evidence : "");
    if (e->nsteps)
        cJSON_AddItemToObject(o, "steps", steps_json(e->steps, e->nsteps));
    return o;
}

char *ckpt_wandb_map_format(const struct ckpt_wandb_map_entry *e, int json)
{
    char *line;
    if (e->line)
        line = ckpt_xstrdup(e->line);
    else if (!json)
        line = tsv_line(e->run, e->path, e->evidence);
    else
        line = json_text(ckpt_wandb_map_entry_json(e));
    char *with_nl = ckpt_xasprintf("%s\n", line);
    free(line);
    return with_nl;
}

char *ckpt_wandb_map_text(const struct ckpt_wandb_map *m, int json)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    for (size_t i = 0; i < m->n; i++) {
        char *l = ckpt_wandb_map_format(&m->v[i], json);
        ckpt_buf_addstr(&b, l);
        free(l);
    }
    return ckpt_buf_detach(&b, NULL);
}
