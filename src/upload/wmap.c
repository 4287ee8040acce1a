/*
 * wmap.c - read the mapping file `ckpt map-wandb --output` writes (TSV or
 * JSON lines; upload.h). Only what upload needs: run -> W&B path.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/upload.h"
#include "ckpt/wandb.h"
#include "ckpt/text.h"
#include "ckpt/util.h"

struct mrow {
    char *run;      /* owned */
    char *path;     /* owned, NULL when unmapped */
};

struct ckpt_upload_map {
    struct mrow *v; /* owned, file order */
    size_t n;
};

static void put(struct ckpt_upload_map *m, char *run, char *path)
{
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->v[i].run, run))
            continue;
        /* A later line replaces an earlier one. */
        free(m->v[i].path);
        m->v[i].path = path;
        free(run);
        return;
    }
    m->v = ckpt_xreallocarray(m->v, m->n + 1, sizeof(*m->v));
    m->v[m->n++] = (struct mrow){ run, path };
}

static int json_line(struct ckpt_upload_map *m, const char *line, size_t n,
                     char **run, char **path)
{
    cJSON *o = cJSON_ParseWithLength(line, n);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "run");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "path");
    int ok = cJSON_IsString(r) && (cJSON_IsString(p) || cJSON_IsNull(p) ||
                                   !p);
    if (ok) {
        *run = ckpt_xstrdup(r->valuestring);
        *path = cJSON_IsString(p) && strcmp(p->valuestring, "-")
              ? ckpt_xstrdup(p->valuestring) : NULL;
    }
    cJSON_Delete(o);
    return ok ? 0 : -1;
}

static int tsv_line(const char *line, size_t n, char **run, char **path)
{
    const char *t1 = memchr(line, '\t', n);
    if (!t1 || t1 == line)
        return -1;
    const char *rest = t1 + 1;
    size_t rn = n - (size_t)(rest - line);
    const char *t2 = memchr(rest, '\t', rn);
    size_t pn = t2 ? (size_t)(t2 - rest) : rn;
    /* map-wandb writes the run name escaped (ckpt_escape): read it as
     * ckpt_wandb_map_parse does, or a name with a backslash or a tab
     * would be another run here */
    char *raw = ckpt_xstrndup(line, (size_t)(t1 - line));
    *run = ckpt_unescape(raw);
    free(raw);
    *path = pn == 1 && rest[0] == '-' ? NULL : ckpt_xstrndup(rest, pn);
    return 0;
}

static int parse_line(struct ckpt_upload_map *m, const char *line, size_t n,
                      const char *name, int lineno, struct ckpt_err *err)
{
    while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
        n--;
    if (!n || line[0] == '#')
        return 0;
    char *run = NULL, *path = NULL;
    int rc = line[0] == '{' ? json_line(m, line, n, &run, &path)
                            : tsv_line(line, n, &run, &path);
    if (rc != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s:%d: not a mapping line "
                            "(RUN_ID<TAB>ENTITY/PROJECT/RUN_ID<TAB>EVIDENCE "
                            "or {\"run\":...,\"path\":...})", name, lineno);
    if (path && !ckpt_wandb_path_valid(path)) {
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s:%d: W&B path '%s' is not "
                          "ENTITY/PROJECT/RUN_ID", name, lineno, path);
        free(run);
        free(path);
        return rc;
    }
    put(m, run, path);
    return 0;
}

int ckpt_upload_map_parse(struct ckpt_upload_map **out, const char *data,
                          size_t len, const char *name, struct ckpt_err *err)
{
    struct ckpt_upload_map *m = ckpt_xcalloc(1, sizeof(*m));
    size_t start = 0;
    int lineno = 1;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && data[i] != '\n')
            continue;
        if (parse_line(m, data + start, i - start, name, lineno, err)
            != 0) {
            ckpt_upload_map_free(m);
            return -1;
        }
        start = i + 1;
        lineno++;
    }
    *out = m;
    return 0;
}

void ckpt_upload_map_free(struct ckpt_upload_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].run);
        free(m->v[i].path);
    }
    free(m->v);
    free(m);
}

const char *ckpt_upload_map_path(const struct ckpt_upload_map *m,
                                 const char *run, int *listed)
{
    *listed = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->v[i].run, run))
            continue;
        *listed = 1;
        return m->v[i].path;
    }
    return NULL;
}
