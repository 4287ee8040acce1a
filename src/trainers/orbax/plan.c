/*
 * orbax/plan.c - Orbax steps (JAX): <step>/<item>/ in OCDBT or the old
 * one-zarr-directory-per-array format (docs/formats/orbax.md).
 *
 * Each array becomes one output tensor keyed by its dotted pytree path
 * (prefixed by the item name when the step has several items). Chunks
 * are compressed: they are placed on the array's chunk grid (engine/grid.c, as
 * for zarr v2) and the engine decodes each once, in its workers, straight
 * into the output (engine/decode.c). A chunk never written takes
 * fill_value.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/orbax.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "trainers/trainer.h"

/* One output tensor: its array and the grid it is stored on. */
struct oarr {
    struct ckpt_orbax *ob;
    size_t ai;
    struct ugrid g;
    int64_t *strides;
};

/* Lives until the job ends: the engine decodes from the open items. */
struct oplan {
    struct ujob *j;
    struct ckpt_orbax **obs;
    size_t nobs;
    struct oarr *arrs;      /* per entry */
};

/* Local directories (st NULL) or a ckpt_storage prefix (remote SRC). */
static int fs_is_file(struct ckpt_storage *st, const char *dir,
                      const char *name)
{
    if (!st)
        return ckpt_is_file_in(dir, name);
    char *k = ckpt_path_join(dir, name);
    struct ckpt_stat sb;
    struct ckpt_err e = CKPT_ERR_INIT;
    int is = ckpt_storage_stat(st, k, &sb, &e) == 0 &&
             sb.type == CKPT_ENTRY_FILE;
    free(k);
    return is;
}

static int fs_is_item(struct ckpt_storage *st, const char *dir)
{
    return fs_is_file(st, dir, "manifest.ocdbt") ||
           fs_is_file(st, dir, "_METADATA") ||
           fs_is_file(st, dir, "checkpoint");
}

/* No path: run mode prints it after the step's name. */
#define ORBAX_NO_ARRAYS "Orbax step without arrays: no item (manifest.ocdbt, " \
    "_METADATA or a legacy msgpack 'checkpoint') holds any"

struct subdirs {
    char **v;
    size_t n;
};

static int add_subdir(void *ud, const struct ckpt_entry *e)
{
    struct subdirs *s = ud;
    if (e->type == CKPT_ENTRY_DIR && !strchr(e->name, '/')) {
        s->v = ckpt_xreallocarray(s->v, s->n + 2, sizeof(*s->v));
        s->v[s->n++] = ckpt_xstrdup(e->name);
    }
    return 0;
}

static void list_subdirs(struct ckpt_storage *st, const char *dir,
                         struct subdirs *s)
{
    if (st) {
        struct ckpt_err e = CKPT_ERR_INIT;
        ckpt_storage_list(st, dir, 0, add_subdir, s, &e);
        return;
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char *p = ckpt_path_join(dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) &&
            strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            add_subdir(s, &(struct ckpt_entry){ .name = de->d_name,
                                                .type = CKPT_ENTRY_DIR });
        free(p);
    }
    if (d)
        closedir(d);
}

/* The item directories of a step, or "" for the step itself. */
static char **items_of(struct ckpt_storage *st, const char *dir, size_t *n)
{
    struct subdirs s = { NULL, 0 }, items = { NULL, 0 };
    if (fs_is_item(st, dir)) {
        items.v = ckpt_xcalloc(2, sizeof(*items.v));
        items.v[items.n++] = ckpt_xstrdup("");
        *n = items.n;
        return items.v;
    }
    list_subdirs(st, dir, &s);
    for (size_t i = 0; i < s.n; i++) {
        char *p = ckpt_path_join(dir, s.v[i]);
        if (s.v[i][0] != '.' && !strstr(s.v[i], ".orbax-checkpoint-tmp") &&
            fs_is_item(st, p)) {
            items.v = ckpt_xreallocarray(items.v, items.n + 2,
                                         sizeof(*items.v));
            items.v[items.n++] = s.v[i];
        } else {
            free(s.v[i]);
        }
        free(p);
    }
    free(s.v);
    *n = items.n;
    return items.v;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* commit_success.txt, or _CHECKPOINT_METADATA with commit_timestamp_nsecs
 * (written when the save is finalized), in the step directory. */
static int check_committed(struct ckpt_storage *st, const char *step,
                           struct ckpt_err *err)
{
    if (strstr(step, ".orbax-checkpoint-tmp"))
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s': temporary Orbax "
                            "directory (the save did not finish)", step);
    if (fs_is_file(st, step, "commit_success.txt"))
        return 0;
    char *p = ckpt_path_join(step, "_CHECKPOINT_METADATA"), *text = NULL;
    size_t len;
    struct ckpt_err e = CKPT_ERR_INIT;
    if (!st)
        text = ckpt_read_small_file(p, 1u << 20);
    else if (ckpt_storage_read_all(st, p, 1u << 20, &text, &len, &e) != 0)
        text = NULL;
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    int ok = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(
        o, "commit_timestamp_nsecs"));
    cJSON_Delete(o);
    free(text);
    int rc = ok ? 0 : ckpt_err_set(err, CKPT_EFORMAT, "'%s': no "
                                   "commit_success.txt and no "
                                   "commit_timestamp_nsecs in %s: the "
                                   "checkpoint is incomplete", step, p);
    free(p);
    return rc;
}

/* Chunk idx of array ai of item ob, decoded in a pool worker. A chunk
 * never written takes fill_value. */
static int odecode(struct ujob *j, const struct utensor *t,
                   const struct uchunk *c, char *out, struct ckpt_err *err)
{
    struct oplan *z = j->plan.fmtplan;
    const struct oarr *a = &z->arrs[t->e - j->plan.meta->entries];
    const struct ckpt_orbax_array *oa = ckpt_orbax_get(a->ob, a->ai);
    uint64_t idx[CKPT_MAX_DIMS];
    uns_grid_index(c, &a->g, idx);
    /* zarr3 codecs (transpose, zstd) need a second chunk buffer. */
    char *scratch = oa->v3 ? ckpt_xmalloc((size_t)oa->chunk_bytes + 1)
                           : NULL;
    int rc = ckpt_orbax_chunk(a->ob, a->ai, idx, out, scratch, err);
    free(scratch);
    if (rc == 1 && !oa->has_fill)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: a chunk is missing and "
                            "the array has no fill_value", t->e->fqn);
    if (rc == 1)
        uns_grid_fill(out, oa->chunk_bytes, oa->fill, oa->dtype->itemsize);
    return rc < 0 ? -1 : 0;
}

static int add_array(struct oplan *z, struct ckpt_orbax *ob, size_t ai,
                     const char *prefix, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = z->j->plan.meta;
    const struct ckpt_orbax_array *oa = ckpt_orbax_get(ob, ai);
    struct ckpt_dcp_entry *e = &m->entries[m->n];
    struct oarr *a = &z->arrs[m->n];
    char *fqn = ckpt_xasprintf("%s%s", prefix, oa->name);
    uint64_t *shape = ckpt_arena_array(m->arena, (size_t)oa->ndim + 1, 8);
    e->fqn = ckpt_arena_strdup(m->arena, fqn);
    free(fqn);
    if (!shape || !e->fqn)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    memcpy(shape, oa->shape, sizeof(uint64_t) * (size_t)oa->ndim);
    e->kind = CKPT_DCP_TENSOR;
    e->dtype = oa->dtype;
    e->ndim = oa->ndim;
    e->size = shape;
    a->ob = ob;
    a->ai = ai;
    a->g = (struct ugrid){ oa->ndim, oa->shape, oa->chunks, oa->fortran,
                           oa->chunk_bytes };
    if (uns_grid_chunks(z->j, e, &a->g, &a->strides, err) != 0)
        return -1;
    m->n++;
    return 0;
}

static int olocate(struct ujob *j, struct utensor *t, struct uchunk *c,
                   struct ckpt_err *err)
{
    struct oplan *z = j->plan.fmtplan;
    const struct oarr *a = &z->arrs[t->e - j->plan.meta->entries];
    (void)err;
    /* ckpt_orbax_chunk decodes to little-endian. */
    uns_grid_locate(c, &a->g, a->strides, 0);
    return 0;
}

/* Open every item (kept open: the engine decodes the chunks); entries
 * are sized to the total array count. */
static int plan_items(struct oplan *z, const char *src, char **items,
                      size_t n, struct ckpt_err *err)
{
    size_t total = 0;
    int rc = 0;
    z->obs = ckpt_xcalloc(n ? n : 1, sizeof(*z->obs));
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *dir = *items[i] ? ckpt_path_join(src, items[i])
                              : ckpt_xstrdup(src);
        rc = z->j->src.st ? ckpt_orbax_open_storage(z->j->src.st, dir, &z->obs[i],
                                                err)
                      : ckpt_orbax_open(dir, &z->obs[i], err);
        if (rc == 0)
            total += ckpt_orbax_count(z->obs[i]);
        z->nobs = i + 1;
        free(dir);
    }
    if (rc == 0 && total == 0)
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, ORBAX_NO_ARRAYS);
    struct ckpt_dcp_meta *m = z->j->plan.meta;
    if (rc == 0) {
        m->entries = ckpt_arena_array(m->arena, total, sizeof(*m->entries));
        z->arrs = ckpt_xcalloc(total, sizeof(*z->arrs));
        if (!m->entries)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        else
            memset(m->entries, 0, total * sizeof(*m->entries));
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *prefix = n > 1 ? ckpt_xasprintf("%s.", items[i])
                             : ckpt_xstrdup("");
        for (size_t a = 0; rc == 0 && a < ckpt_orbax_count(z->obs[i]); a++)
            rc = add_array(z, z->obs[i], a, prefix, err);
        free(prefix);
    }
    return rc;
}

static void oplan_free(void *p)
{
    struct oplan *z = p;
    if (!z)
        return;
    for (size_t i = 0; i < z->nobs; i++)
        ckpt_orbax_close(z->obs[i]);
    free(z->obs);
    free(z->arrs);
    free(z);
}

int uns_orbax_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct oplan *z = ckpt_xcalloc(1, sizeof(*z));
    struct ckpt_pv *root;
    size_t n;
    z->j = j;
    j->src.dir = ckpt_xstrdup(src);
    j->src.metaname = "_METADATA";
    j->plan.meta = ckpt_dcp_meta_new();
    j->plan.fmtplan = z;
    j->plan.fmtfree = oplan_free;
    j->plan.locate = olocate;
    j->plan.decode = odecode;
    j->plan.olmo = j->o->layout == CKPT_LAYOUT_OLMO;
    struct ckpt_storage *st = j->src.st;    /* remote SRC, else NULL */
    char **items = items_of(st, src, &n);
    int item = n == 1 && !*items[0];
    char *step = item ? ckpt_path_dirname(src) : ckpt_xstrdup(src);
    int rc = j->plan.meta ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = check_committed(st, step, err);
    if (rc == 0 && n == 0)
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, ORBAX_NO_ARRAYS);
    if (rc == 0) {
        ckpt_sort(items, n, sizeof(*items), cmp_str);
        rc = plan_items(z, src, items, n, err);
    }
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = uns_tree_build(j, &root, err);
    if (rc == 0)
        rc = trainer_layout(j, root, err);
    for (size_t i = 0; i < n; i++)
        free(items[i]);
    free(items);
    free(step);
    return rc;
}
