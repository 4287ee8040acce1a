/*
 * zarr/plan.c - zarr v2 pytree checkpoints (seqax training_io.py: a zarr
 * group, one array per leaf at its keypath, chunks = shards, blosc by
 * default; docs/formats/zarr.md).
 *
 * Each array becomes one output tensor keyed by its path in the group.
 * Chunks are compressed, so they cannot be pread in place: they are placed
 * on the array's chunk grid (engine/grid.c, shared with Orbax) and the engine
 * decodes each once, in its workers, straight into the output
 * (engine/decode.c). Edge chunks are stored full-size: their box is clipped to
 * the array and their strides stay those of the full chunk (C or F
 * order). A missing chunk (found while planning) takes fill_value, or is
 * an error when fill_value is null.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "ckpt/zarr.h"
#include "merge/engine/engine.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"
#include "merge/sources/sources.h"
#include "trainers/trainer.h"

#define MAX_ZARRAY (1u << 20)
#define MAX_DEPTH 32

/* One array: lives until the job ends (the engine decodes its chunks). */
struct zarr_a {
    const char *rel;        /* the array's path in the group (z->arrays) */
    struct ckpt_zarray za;
    struct ugrid g;
    int64_t *strides;
    unsigned char *missing; /* arena, per chunk: takes fill_value */
};

struct zplan {
    struct ujob *j;
    struct uns_dir ls;      /* every file below the group, listed once */
    char **arrays;          /* malloced relative paths, sorted */
    size_t n, cap;
    struct zarr_a *arrs;    /* per entry */
};

/* A file of the group (rel below j->src.dir), as listed. */
static int read_small(struct zplan *z, const char *rel, size_t max,
                      char **out, size_t *len, struct ckpt_err *err)
{
    const struct uns_dent *e = uns_fs_find(&z->ls, rel);
    char *path = ckpt_path_join(z->j->src.dir, rel);
    int rc = uns_fs_read(z->j, path, e, max, out, len, err);
    free(path);
    return rc;
}

/* Root .zattrs must say write_completed (set after the final barrier). */
static int check_completed(struct zplan *z, struct ckpt_err *err)
{
    char *p = ckpt_path_join(z->j->src.dir, ".zattrs"), *text = NULL;
    size_t len;
    int rc = 0;
    if (!uns_fs_has_file(&z->ls, ".zattrs"))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' missing: the checkpoint "
                          "is incomplete (no write_completed)", p);
    else if (read_small(z, ".zattrs", MAX_ZARRAY, &text, &len, err) != 0)
        rc = -1;
    if (rc == 0) {
        cJSON *o = cJSON_ParseWithLength(text, len);
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(o,
                                                          "write_completed");
        if (!cJSON_IsTrue(w))
            rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': write_completed "
                              "missing: the checkpoint is incomplete", p);
        cJSON_Delete(o);
    }
    free(text);
    free(p);
    return rc;
}

/* Every directory below the group holding .zarray (dot-named ones
 * included), from the listing. */
static int find_arrays(struct zplan *z, struct ckpt_err *err)
{
    static const char tail[] = "/.zarray";
    for (size_t i = 0; i < z->ls.n; i++) {
        const char *name = z->ls.v[i].name;
        size_t depth = 0, l = strlen(name);
        for (const char *c = name; *c; c++)
            depth += *c == '/';
        if (depth > MAX_DEPTH)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s/%s': directories "
                                "nested too deep", z->j->src.dir, name);
        if (l <= sizeof(tail) - 1 || strcmp(name + l - (sizeof(tail) - 1),
                                            tail) ||
            !uns_fs_has_file(&z->ls, name))
            continue;
        if (z->n == z->cap) {
            z->cap = z->cap ? 2 * z->cap : 16;
            z->arrays = ckpt_xreallocarray(z->arrays, z->cap,
                                           sizeof(*z->arrays));
        }
        z->arrays[z->n++] = ckpt_xstrndup(name, l - (sizeof(tail) - 1));
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The chunk's path in the group. */
static char *chunk_rel(const struct zarr_a *a, const uint64_t *idx)
{
    struct ckpt_buf key = CKPT_BUF_INIT;
    for (int d = 0; d < a->za.ndim; d++)
        ckpt_buf_addf(&key, "%s%llu", d ? (char[]){ a->za.sep, 0 } : "",
                      (unsigned long long)idx[d]);
    if (a->za.ndim == 0)
        ckpt_buf_addstr(&key, "0");
    char *rel = ckpt_path_join(a->rel, key.ptr);
    ckpt_buf_release(&key);
    return rel;
}

/* Which chunks exist (in the listing): a missing one takes fill_value,
 * or fails the plan when the array has none. */
static int find_missing(struct zplan *z, struct zarr_a *a,
                        const struct ckpt_dcp_entry *e, struct ckpt_err *err)
{
    a->missing = ckpt_arena_array(z->j->plan.meta->arena, e->nchunks + 1, 1);
    if (!a->missing)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t c = 0; c < e->nchunks; c++) {
        uint64_t idx[CKPT_MAX_DIMS];
        struct uchunk uc = { .meta = &e->chunks[c] };
        uns_grid_index(&uc, &a->g, idx);
        char *rel = chunk_rel(a, idx);
        a->missing[c] = !uns_fs_has_file(&z->ls, rel);
        int rc = 0;
        if (a->missing[c] && !a->za.has_fill) {
            char *path = ckpt_path_join(z->j->src.dir, rel);
            rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' missing and the "
                              "array has no fill_value", path);
            free(path);
        }
        free(rel);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Decode a chunk file in a pool worker. */
static int zdecode(struct ujob *j, const struct utensor *t,
                   const struct uchunk *c, char *out, struct ckpt_err *err)
{
    struct zplan *z = j->plan.fmtplan;
    const struct zarr_a *a = &z->arrs[t->e - j->plan.meta->entries];
    const struct ckpt_zarray *za = &a->za;
    uint64_t idx[CKPT_MAX_DIMS];
    char *in = NULL;
    size_t len;
    if (a->missing[c->meta - t->e->chunks]) {
        uns_grid_fill(out, za->chunk_bytes, za->fill, za->dtype->itemsize);
        return 0;
    }
    uns_grid_index(c, &a->g, idx);
    char *rel = chunk_rel(a, idx);
    char *path = ckpt_path_join(j->src.dir, rel);
    /* A compressed frame may exceed the raw size by its header and a few
     * bytes per block; anything far larger is not a chunk of this array.
     * One read of the whole chunk: one GET of an object. */
    int rc = read_small(z, rel, (size_t)za->chunk_bytes * 2 + 65536, &in,
                        &len, err);
    if (rc == 0)
        rc = ckpt_zarr_decode(za, in, len, out, path, err);
    free(in);
    free(rel);
    free(path);
    return rc;
}

static int add_array(struct zplan *z, const char *rel, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = z->j->plan.meta;
    struct zarr_a *a = &z->arrs[m->n];
    struct ckpt_zarray *za = &a->za;
    char *doc, *text = NULL;
    size_t len;
    a->rel = rel;
    char *drel = ckpt_path_join(rel, ".zarray");
    doc = ckpt_path_join(z->j->src.dir, drel);
    int rc = read_small(z, drel, MAX_ZARRAY, &text, &len, err);
    free(drel);
    if (rc == 0)
        rc = ckpt_zarray_parse(text, len, doc, za, err);
    struct ckpt_dcp_entry *e = &m->entries[m->n];
    if (rc == 0) {
        uint64_t *shape = ckpt_arena_array(m->arena, (size_t)za->ndim + 1, 8);
        e->fqn = ckpt_arena_strndup(m->arena, rel, strlen(rel));
        if (!shape || !e->fqn)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        else
            memcpy(shape, za->shape, sizeof(uint64_t) * (size_t)za->ndim);
        e->kind = CKPT_DCP_TENSOR;
        e->dtype = za->dtype;
        e->ndim = za->ndim;
        e->size = shape;
        a->g = (struct ugrid){ za->ndim, za->shape, za->chunks, za->fortran,
                               za->chunk_bytes };
    }
    if (rc == 0)
        rc = uns_grid_chunks(z->j, e, &a->g, &a->strides, err);
    if (rc == 0)
        rc = find_missing(z, a, e, err);
    if (rc == 0)
        m->n++;
    free(text);
    free(doc);
    return rc;
}

static int zlocate(struct ujob *j, struct utensor *t, struct uchunk *c,
                   struct ckpt_err *err)
{
    struct zplan *z = j->plan.fmtplan;
    const struct zarr_a *a = &z->arrs[t->e - j->plan.meta->entries];
    /* The fill element is little-endian whatever the array's order. */
    size_t ci = c->meta - t->e->chunks;
    (void)err;
    uns_grid_locate(c, &a->g, a->strides,
                    a->missing[ci] ? 0 : a->za.big_endian);
    return 0;
}

static void zplan_free(void *p)
{
    struct zplan *z = p;
    if (!z)
        return;
    for (size_t i = 0; i < z->n; i++)
        free(z->arrays[i]);
    uns_fs_free(&z->ls);
    free(z->arrays);
    free(z->arrs);
    free(z);
}

int uns_zarr_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct zplan *z = ckpt_xcalloc(1, sizeof(*z));
    struct ckpt_pv *root;
    z->j = j;
    j->src.dir = ckpt_xstrdup(src);
    j->src.metaname = ".zarray";
    j->plan.meta = ckpt_dcp_meta_new();
    j->plan.fmtplan = z;
    j->plan.fmtfree = zplan_free;
    j->plan.locate = zlocate;
    j->plan.decode = zdecode;
    j->plan.olmo = j->o->layout == CKPT_LAYOUT_OLMO;
    int rc = j->plan.meta ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = uns_fs_list(j, src, 1, &z->ls, err);
    if (rc == 0)
        rc = check_completed(z, err);
    if (rc == 0)
        rc = find_arrays(z, err);
    if (rc == 0 && !z->n)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': zarr group without "
                          "arrays", src);
    if (rc == 0) {
        ckpt_sort(z->arrays, z->n, sizeof(*z->arrays), cmp_str);
        j->plan.meta->entries = ckpt_arena_array(j->plan.meta->arena, z->n,
                                            sizeof(*j->plan.meta->entries));
        z->arrs = ckpt_xcalloc(z->n, sizeof(*z->arrs));
        if (!j->plan.meta->entries)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; rc == 0 && i < z->n; i++)
        rc = add_array(z, z->arrays[i], err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = uns_tree_build(j, &root, err);
    if (rc == 0)
        rc = trainer_layout(j, root, err);
    return rc;
}
