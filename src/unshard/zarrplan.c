/*
 * zarrplan.c - zarr v2 pytree checkpoints (seqax training_io.py: a zarr
 * group, one array per leaf at its keypath, chunks = shards, blosc by
 * default; docs/formats/zarr.md).
 *
 * Each array becomes one output tensor keyed by its path in the group.
 * Chunks are compressed, so they cannot be pread in place: they are placed
 * on the array's chunk grid (grid.c, shared with Orbax) and the engine
 * decodes each once, in its workers, straight into the output
 * (decode.c). Edge chunks are stored full-size: their box is clipped to
 * the array and their strides stay those of the full chunk (C or F
 * order). A missing chunk (found while planning) takes fill_value, or is
 * an error when fill_value is null.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/util.h"
#include "ckpt/zarr.h"
#include "unshard_int.h"

#define MAX_ZARRAY (1u << 20)
#define MAX_DEPTH 32

/* One array: lives until the job ends (the engine decodes its chunks). */
struct zarr_a {
    char *adir;             /* malloced */
    struct ckpt_zarray za;
    struct ugrid g;
    int64_t *strides;
    unsigned char *missing; /* arena, per chunk: takes fill_value */
};

struct zplan {
    struct ujob *j;
    char **arrays;          /* malloced relative paths, sorted */
    size_t n, cap;
    struct zarr_a *arrs;    /* per entry */
};

static int read_small(const char *path, size_t max, char **out, size_t *len,
                      struct ckpt_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int rc = ckpt_err_sys(err, "open '%s'", path);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    if ((uint64_t)sb.st_size > max) {
        close(fd);
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s' is larger than %zu "
                            "bytes", path, max);
    }
    char *b = ckpt_xmalloc((size_t)sb.st_size + 1);
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        ssize_t n = pread(fd, b + got, (size_t)sb.st_size - got,
                          (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(b);
            close(fd);
            return n < 0 ? ckpt_err_sys(err, "read '%s'", path)
                         : ckpt_err_set(err, CKPT_EIO, "read '%s': "
                                        "file shrank", path);
        }
        got += (size_t)n;
    }
    close(fd);
    b[got] = 0;
    *out = b;
    *len = got;
    return 0;
}

/* Root .zattrs must say write_completed (set after the final barrier). */
static int check_completed(const char *src, struct ckpt_err *err)
{
    char *p = ckpt_path_join(src, ".zattrs"), *text = NULL;
    size_t len;
    int rc = 0;
    if (!ckpt_is_file_in(src, ".zattrs"))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' missing: the checkpoint "
                          "is incomplete (no write_completed)", p);
    else if (read_small(p, MAX_ZARRAY, &text, &len, err) != 0)
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

/* Every directory below src holding .zarray (dot-named ones included). */
static int find_arrays(struct zplan *z, const char *src, const char *rel,
                       int depth, struct ckpt_err *err)
{
    char *dir = *rel ? ckpt_path_join(src, rel) : ckpt_xstrdup(src);
    DIR *d = opendir(dir);
    int rc = 0;
    if (!d) {
        rc = ckpt_err_sys(err, "open '%s'", dir);
        free(dir);
        return rc;
    }
    if (*rel && ckpt_is_file_in(dir, ".zarray")) {
        if (z->n == z->cap) {
            z->cap = z->cap ? 2 * z->cap : 16;
            z->arrays = ckpt_xreallocarray(z->arrays, z->cap,
                                           sizeof(*z->arrays));
        }
        z->arrays[z->n++] = ckpt_xstrdup(rel);
    }
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = ckpt_path_join(dir, de->d_name);
        struct stat sb;
        int sub = lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
        free(p);
        if (!sub)
            continue;
        if (depth >= MAX_DEPTH) {
            rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': directories nested "
                              "too deep", dir);
            break;
        }
        char *r = *rel ? ckpt_path_join(rel, de->d_name)
                       : ckpt_xstrdup(de->d_name);
        rc = find_arrays(z, src, r, depth + 1, err);
        free(r);
    }
    closedir(d);
    free(dir);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *chunk_path(const struct zarr_a *a, const uint64_t *idx)
{
    struct ckpt_buf key = CKPT_BUF_INIT;
    for (int d = 0; d < a->za.ndim; d++)
        ckpt_buf_addf(&key, "%s%llu", d ? (char[]){ a->za.sep, 0 } : "",
                      (unsigned long long)idx[d]);
    if (a->za.ndim == 0)
        ckpt_buf_addstr(&key, "0");
    char *path = ckpt_path_join(a->adir, key.ptr);
    ckpt_buf_release(&key);
    return path;
}

/* Which chunks exist (a stat each): a missing one takes fill_value, or
 * fails the plan when the array has none. */
static int find_missing(struct zplan *z, struct zarr_a *a,
                        const struct ckpt_dcp_entry *e, struct ckpt_err *err)
{
    a->missing = ckpt_arena_array(z->j->meta->arena, e->nchunks + 1, 1);
    if (!a->missing)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (size_t c = 0; c < e->nchunks; c++) {
        uint64_t idx[CKPT_MAX_DIMS];
        struct uchunk uc = { .meta = &e->chunks[c] };
        uns_grid_index(&uc, &a->g, idx);
        char *path = chunk_path(a, idx);
        struct stat sb;
        a->missing[c] = stat(path, &sb) != 0 && errno == ENOENT;
        int rc = a->missing[c] && !a->za.has_fill
                 ? ckpt_err_set(err, CKPT_EFORMAT, "'%s' missing and the "
                                "array has no fill_value", path) : 0;
        free(path);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Decode a chunk file in a pool worker. */
static int zdecode(struct ujob *j, const struct utensor *t,
                   const struct uchunk *c, char *out, struct ckpt_err *err)
{
    struct zplan *z = j->fmtplan;
    const struct zarr_a *a = &z->arrs[t->e - j->meta->entries];
    const struct ckpt_zarray *za = &a->za;
    uint64_t idx[CKPT_MAX_DIMS];
    char *in = NULL;
    size_t len;
    if (a->missing[c->meta - t->e->chunks]) {
        uns_grid_fill(out, za->chunk_bytes, za->fill, za->dtype->itemsize);
        return 0;
    }
    uns_grid_index(c, &a->g, idx);
    char *path = chunk_path(a, idx);
    /* A compressed frame may exceed the raw size by its header and a few
     * bytes per block; anything far larger is not a chunk of this array. */
    int rc = read_small(path, (size_t)za->chunk_bytes * 2 + 65536, &in, &len,
                        err);
    if (rc == 0)
        rc = ckpt_zarr_decode(za, in, len, out, path, err);
    free(in);
    free(path);
    return rc;
}

static int add_array(struct zplan *z, const char *src, const char *rel,
                     struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = z->j->meta;
    struct zarr_a *a = &z->arrs[m->n];
    struct ckpt_zarray *za = &a->za;
    char *doc, *text = NULL;
    size_t len;
    a->adir = ckpt_path_join(src, rel);
    doc = ckpt_path_join(a->adir, ".zarray");
    int rc = read_small(doc, MAX_ZARRAY, &text, &len, err);
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
    struct zplan *z = j->fmtplan;
    const struct zarr_a *a = &z->arrs[t->e - j->meta->entries];
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
    for (size_t i = 0; i < z->n; i++) {
        free(z->arrays[i]);
        if (z->arrs)
            free(z->arrs[i].adir);
    }
    free(z->arrays);
    free(z->arrs);
    free(z);
}

int uns_zarr_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct zplan *z = ckpt_xcalloc(1, sizeof(*z));
    struct ckpt_pv *root;
    z->j = j;
    j->dir = ckpt_xstrdup(src);
    j->metaname = ".zarray";
    j->meta = ckpt_dcp_meta_new();
    j->fmtplan = z;
    j->fmtfree = zplan_free;
    j->locate = zlocate;
    j->decode = zdecode;
    j->olmo = j->o->layout == CKPT_LAYOUT_OLMO;
    int rc = j->meta ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = check_completed(src, err);
    if (rc == 0)
        rc = find_arrays(z, src, "", 0, err);
    if (rc == 0 && !z->n)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': zarr group without "
                          "arrays", src);
    if (rc == 0) {
        ckpt_sort(z->arrays, z->n, sizeof(*z->arrays), cmp_str);
        j->meta->entries = ckpt_arena_array(j->meta->arena, z->n,
                                            sizeof(*j->meta->entries));
        z->arrs = ckpt_xcalloc(z->n, sizeof(*z->arrs));
        if (!j->meta->entries)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; rc == 0 && i < z->n; i++)
        rc = add_array(z, src, z->arrays[i], err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = uns_tree_build(j, &root, err);
    if (rc == 0)
        rc = uns_layout_files(j, root, err);
    return rc;
}
