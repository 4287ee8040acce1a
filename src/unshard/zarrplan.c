/*
 * zarrplan.c - zarr v2 pytree checkpoints (seqax training_io.py: a zarr
 * group, one array per leaf at its keypath, chunks = shards, blosc by
 * default; docs/formats/zarr.md).
 *
 * Each array becomes one output tensor keyed by its path in the group.
 * Chunks are compressed, so they cannot be pread in place: while planning,
 * each chunk is decoded (one at a time, one chunk buffer in memory) and
 * appended to one unlinked temporary file in the output's temporary
 * directory; the engine then copies from there like any DCP chunk. Edge
 * chunks are stored full-size: their box is clipped to the array and
 * their strides stay those of the full chunk (C or F order). A missing
 * chunk takes fill_value (one fill chunk per array is written), or is an
 * error when fill_value is null.
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

struct zloc {
    uint64_t off;           /* in the temporary file */
    const int64_t *stride;
    int big_endian;
};

struct zplan {
    struct ujob *j;
    char **arrays;          /* malloced relative paths, sorted */
    size_t n, cap;
    struct zloc **locs;     /* per entry, arena arrays per chunk */
    struct usrc *tmp;
    int fd;
    uint64_t size;          /* bytes appended to the temporary file */
    char *buf;              /* one decoded chunk */
};

int uns_zarr_is_step(const char *dir)
{
    return ckpt_is_file_in(dir, ".zgroup") &&
           !ckpt_is_file_in(dir, ".metadata");
}

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

static int append(struct zplan *z, const void *p, uint64_t n, uint64_t *off,
                  struct ckpt_err *err)
{
    *off = z->size;
    uint64_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(z->fd, (const char *)p + done, n - done,
                           (off_t)(z->size + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ckpt_err_sys(err, "write temporary file in '%s'",
                                z->j->tmpdir);
        done += (uint64_t)w;
    }
    z->size += n;
    z->tmp->size = z->size;
    return 0;
}

/* Decode chunk file path into the temporary file. 1 if it is missing. */
static int load_chunk(struct zplan *z, const struct ckpt_zarray *za,
                      const char *path, uint64_t *off, struct ckpt_err *err)
{
    struct stat sb;
    char *in = NULL;
    size_t len;
    *off = 0;   /* defined on every path: the caller reads it unless < 0 */
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return 1;
    /* A compressed frame may exceed the raw size by its header and a few
     * bytes per block; anything far larger is not a chunk of this array. */
    if (read_small(path, (size_t)za->chunk_bytes * 2 + 65536, &in, &len,
                   err) != 0)
        return -1;
    int rc = ckpt_zarr_decode(za, in, len, z->buf, path, err);
    free(in);
    if (rc == 0)
        rc = append(z, z->buf, za->chunk_bytes, off, err);
    return rc;
}

/* Contiguous element strides of a full chunk in C or F order. */
static int64_t *chunk_strides(struct ckpt_arena *a,
                              const struct ckpt_zarray *za)
{
    int64_t *s = ckpt_arena_array(a, (size_t)za->ndim + 1, sizeof(*s));
    int64_t acc = 1;
    if (!s)
        return NULL;
    for (int k = 0; k < za->ndim; k++) {
        int d = za->fortran ? k : za->ndim - 1 - k;
        s[d] = acc;
        acc *= (int64_t)za->chunks[d];
    }
    return s;
}

static int add_chunks(struct zplan *z, const char *adir,
                      const struct ckpt_zarray *za,
                      struct ckpt_dcp_entry *e, struct zloc *locs,
                      struct ckpt_err *err)
{
    struct ckpt_arena *ma = z->j->meta->arena;
    uint64_t grid[CKPT_MAX_DIMS], idx[CKPT_MAX_DIMS], fill_off = 0;
    int have_fill = 0, nd = za->ndim;
    int64_t *stride = chunk_strides(ma, za);
    if (!stride)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    for (int d = 0; d < nd; d++) {
        grid[d] = (za->shape[d] + za->chunks[d] - 1) / za->chunks[d];
        idx[d] = 0;
    }
    for (size_t c = 0; c < e->chunkcap; c++) {
        struct ckpt_buf key = CKPT_BUF_INIT;
        uint64_t *off = ckpt_arena_array(ma, (size_t)nd + 1, 8);
        uint64_t *size = ckpt_arena_array(ma, (size_t)nd + 1, 8);
        if (!off || !size)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        for (int d = 0; d < nd; d++) {
            off[d] = idx[d] * za->chunks[d];
            size[d] = za->shape[d] - off[d] < za->chunks[d]
                      ? za->shape[d] - off[d] : za->chunks[d];
            ckpt_buf_addf(&key, "%s%llu", d ? (char[]){ za->sep, 0 } : "",
                          (unsigned long long)idx[d]);
        }
        if (nd == 0)
            ckpt_buf_addstr(&key, "0");
        char *path = ckpt_path_join(adir, key.ptr);
        ckpt_buf_release(&key);
        uint64_t at;
        int rc = load_chunk(z, za, path, &at, err);
        if (rc == 1 && !za->has_fill)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' missing and the "
                              "array has no fill_value", path);
        int missing = rc == 1;
        if (missing && !have_fill) {
            size_t isz = za->dtype->itemsize;
            for (uint64_t b = 0; b < za->chunk_bytes; b += isz)
                memcpy(z->buf + b, za->fill, isz);
            rc = append(z, z->buf, za->chunk_bytes, &fill_off, err);
            have_fill = rc == 0;
        }
        free(path);
        if (rc < 0)
            return -1;
        e->chunks[c].offsets = off;
        e->chunks[c].sizes = size;
        /* The fill element is little-endian whatever the array's order. */
        locs[c].off = missing ? fill_off : at;
        locs[c].stride = stride;
        locs[c].big_endian = missing ? 0 : za->big_endian;
        e->nchunks++;
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < grid[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}

static int add_array(struct zplan *z, const char *src, const char *rel,
                     struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = z->j->meta;
    struct ckpt_zarray za;
    char *adir = ckpt_path_join(src, rel);
    char *doc = ckpt_path_join(adir, ".zarray"), *text = NULL;
    size_t len;
    uint64_t nchunks = 1;
    int rc = read_small(doc, MAX_ZARRAY, &text, &len, err);
    if (rc == 0)
        rc = ckpt_zarray_parse(text, len, doc, &za, err);
    for (int d = 0; rc == 0 && d < za.ndim; d++)
        if (ckpt_mul_u64(nchunks, (za.shape[d] + za.chunks[d] - 1) /
                         za.chunks[d], &nchunks) != 0 || nchunks > (1u << 24))
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: too many chunks", doc);
    struct ckpt_dcp_entry *e = &m->entries[m->n];
    if (rc == 0) {
        uint64_t *shape = ckpt_arena_array(m->arena, (size_t)za.ndim + 1, 8);
        e->chunks = ckpt_arena_array(m->arena, nchunks + 1,
                                     sizeof(*e->chunks));
        z->locs[m->n] = ckpt_arena_array(m->arena, nchunks + 1,
                                         sizeof(struct zloc));
        e->fqn = ckpt_arena_strndup(m->arena, rel, strlen(rel));
        if (!shape || !e->chunks || !z->locs[m->n] || !e->fqn)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        else
            memcpy(shape, za.shape, sizeof(uint64_t) * (size_t)za.ndim);
        e->kind = CKPT_DCP_TENSOR;
        e->dtype = za.dtype;
        e->ndim = za.ndim;
        e->size = shape;
        e->chunkcap = nchunks;
    }
    if (rc == 0) {
        free(z->buf);
        z->buf = ckpt_xmalloc(za.chunk_bytes ? za.chunk_bytes : 1);
        rc = add_chunks(z, adir, &za, e, z->locs[m->n], err);
    }
    if (rc == 0)
        m->n++;
    free(text);
    free(doc);
    free(adir);
    return rc;
}

static int zlocate(struct ujob *j, struct utensor *t, struct uchunk *c,
                   struct ckpt_err *err)
{
    struct zplan *z = j->fmtplan;
    const struct zloc *l = &z->locs[t->e - j->meta->entries]
                                   [c->meta - t->e->chunks];
    (void)err;
    c->src = z->tmp;
    c->item_off = 0;
    c->data = l->off;
    memcpy(c->stride, l->stride, sizeof(int64_t) * (size_t)t->e->ndim);
    c->soff = 0;
    c->big_endian = l->big_endian;
    return 0;
}

static int open_tmp(struct zplan *z, struct ckpt_err *err)
{
    struct ujob *j = z->j;
    int fd = uns_src_tmp_fd(j, err);
    if (fd < 0)
        return -1;
    z->fd = fd;
    z->tmp = uns_src_add(j, ckpt_xasprintf("%s (decoded chunks)", j->dir), fd,
                         0);
    return 0;
}

int uns_zarr_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct zplan z;
    struct ckpt_pv *root;
    memset(&z, 0, sizeof(z));
    z.j = j;
    j->dir = ckpt_xstrdup(src);
    j->metaname = ".zarray";
    j->meta = ckpt_dcp_meta_new();
    j->fmtplan = &z;
    j->locate = zlocate;
    j->olmo = j->o->layout == CKPT_LAYOUT_OLMO;
    int rc = j->meta ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = check_completed(src, err);
    if (rc == 0)
        rc = find_arrays(&z, src, "", 0, err);
    if (rc == 0 && !z.n)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': zarr group without "
                          "arrays", src);
    if (rc == 0) {
        ckpt_sort(z.arrays, z.n, sizeof(*z.arrays), cmp_str);
        j->meta->entries = ckpt_arena_array(j->meta->arena, z.n,
                                            sizeof(*j->meta->entries));
        z.locs = ckpt_xcalloc(z.n, sizeof(*z.locs));
        if (!j->meta->entries)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    }
    if (rc == 0)
        rc = open_tmp(&z, err);
    for (size_t i = 0; rc == 0 && i < z.n; i++)
        rc = add_array(&z, src, z.arrays[i], err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = uns_tree_build(j, &root, err);
    if (rc == 0)
        rc = uns_layout_files(j, root, err);
    for (size_t i = 0; i < z.n; i++)
        free(z.arrays[i]);
    free(z.arrays);
    free(z.locs);
    free(z.buf);
    j->fmtplan = NULL;
    return rc;
}
