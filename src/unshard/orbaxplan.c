/*
 * orbaxplan.c - Orbax steps (JAX): <step>/<item>/ in OCDBT or the old
 * one-zarr-directory-per-array format (docs/formats/orbax.md).
 *
 * Each array becomes one output tensor keyed by its dotted pytree path
 * (prefixed by the item name when the step has several items). As in
 * zarrplan.c, chunks are compressed: while planning, each is decoded (one
 * chunk buffer in memory) and appended to one unlinked temporary file,
 * which the engine then copies from like any DCP chunk. A chunk never
 * written takes fill_value.
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
#include "unshard_int.h"

struct oloc {
    uint64_t off;
    const int64_t *stride;
};

struct oplan {
    struct ujob *j;
    struct oloc **locs;     /* per entry, per chunk */
    struct usrc *tmp;
    int fd;
    uint64_t size;
    char *buf, *scratch;    /* one decoded chunk each */
    size_t bufcap;
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

static int step_of(struct ckpt_storage *st, const char *dir)
{
    size_t n;
    char **v = items_of(st, dir, &n);
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    return n > 0 || fs_is_file(st, dir, "_CHECKPOINT_METADATA") ||
           fs_is_file(st, dir, "commit_success.txt");
}

/* Items, or Orbax's step markers (a step whose items ckpt cannot read
 * is then reported as such, not as another format). */
int uns_orbax_is_step(const char *dir)
{
    return step_of(NULL, dir);
}

int uns_orbax_is_remote_step(struct ckpt_storage *st, const char *key)
{
    return step_of(st, key);
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

static int append(struct oplan *z, const void *p, uint64_t n, uint64_t *off,
                  struct ckpt_err *err)
{
    *off = z->size;
    if (uns_pwrite_all(z->fd, p, (size_t)n, z->size, "temporary file",
                       err) != 0)
        return -1;
    z->size += n;
    z->tmp->size = z->size;
    return 0;
}

static int64_t *chunk_strides(struct ckpt_arena *a,
                              const struct ckpt_orbax_array *oa)
{
    int64_t *s = ckpt_arena_array(a, (size_t)oa->ndim + 1, sizeof(*s));
    int64_t acc = 1;
    if (!s)
        return NULL;
    for (int k = 0; k < oa->ndim; k++) {
        int d = oa->fortran ? k : oa->ndim - 1 - k;
        s[d] = acc;
        acc *= (int64_t)oa->chunks[d];
    }
    return s;
}

static int fill_chunk(struct oplan *z, const struct ckpt_orbax_array *oa,
                      const char *name, uint64_t *off, struct ckpt_err *err)
{
    size_t isz = oa->dtype->itemsize;
    if (!oa->has_fill)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: a chunk is missing and "
                            "the array has no fill_value", name);
    for (uint64_t b = 0; b < oa->chunk_bytes; b += isz)
        memcpy(z->buf + b, oa->fill, isz);
    return append(z, z->buf, oa->chunk_bytes, off, err);
}

static int add_chunks(struct oplan *z, struct ckpt_orbax *ob, size_t ai,
                      struct ckpt_dcp_entry *e, struct oloc *locs,
                      struct ckpt_err *err)
{
    const struct ckpt_orbax_array *oa = ckpt_orbax_get(ob, ai);
    struct ckpt_arena *ma = z->j->meta->arena;
    uint64_t grid[CKPT_MAX_DIMS], idx[CKPT_MAX_DIMS] = { 0 }, fill_off = 0;
    int have_fill = 0, nd = oa->ndim;
    int64_t *stride = chunk_strides(ma, oa);
    if (!stride)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    ckpt_orbax_grid(ob, ai, grid);
    for (size_t c = 0; c < e->chunkcap; c++) {
        uint64_t *off = ckpt_arena_array(ma, (size_t)nd + 1, 8);
        uint64_t *size = ckpt_arena_array(ma, (size_t)nd + 1, 8);
        if (!off || !size)
            return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        for (int d = 0; d < nd; d++) {
            off[d] = idx[d] * oa->chunks[d];
            size[d] = oa->shape[d] - off[d] < oa->chunks[d]
                      ? oa->shape[d] - off[d] : oa->chunks[d];
        }
        uint64_t at = 0;
        int rc = ckpt_orbax_chunk(ob, ai, idx, z->buf, z->scratch, err);
        if (rc == 0)
            rc = append(z, z->buf, oa->chunk_bytes, &at, err);
        else if (rc == 1 && !have_fill) {
            rc = fill_chunk(z, oa, e->fqn, &fill_off, err);
            have_fill = rc == 0;
            at = fill_off;
        } else if (rc == 1) {
            rc = 0;
            at = fill_off;
        }
        if (rc < 0)
            return -1;
        e->chunks[c].offsets = off;
        e->chunks[c].sizes = size;
        locs[c].off = at;
        locs[c].stride = stride;
        e->nchunks++;
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < grid[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}

static int add_array(struct oplan *z, struct ckpt_orbax *ob, size_t ai,
                     const char *prefix, struct ckpt_err *err)
{
    struct ckpt_dcp_meta *m = z->j->meta;
    const struct ckpt_orbax_array *oa = ckpt_orbax_get(ob, ai);
    struct ckpt_dcp_entry *e = &m->entries[m->n];
    uint64_t grid[CKPT_MAX_DIMS], nchunks = 1;
    ckpt_orbax_grid(ob, ai, grid);
    for (int d = 0; d < oa->ndim; d++)
        if (ckpt_mul_u64(nchunks, grid[d], &nchunks) != 0 ||
            nchunks > (1u << 24))
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: too many chunks",
                                oa->name);
    char *fqn = ckpt_xasprintf("%s%s", prefix, oa->name);
    uint64_t *shape = ckpt_arena_array(m->arena, (size_t)oa->ndim + 1, 8);
    e->chunks = ckpt_arena_array(m->arena, nchunks + 1, sizeof(*e->chunks));
    z->locs[m->n] = ckpt_arena_array(m->arena, nchunks + 1,
                                     sizeof(struct oloc));
    e->fqn = ckpt_arena_strdup(m->arena, fqn);
    free(fqn);
    if (!shape || !e->chunks || !z->locs[m->n] || !e->fqn)
        return ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    memcpy(shape, oa->shape, sizeof(uint64_t) * (size_t)oa->ndim);
    e->kind = CKPT_DCP_TENSOR;
    e->dtype = oa->dtype;
    e->ndim = oa->ndim;
    e->size = shape;
    e->chunkcap = nchunks;
    if (oa->chunk_bytes > z->bufcap) {
        free(z->buf);
        free(z->scratch);
        z->bufcap = (size_t)oa->chunk_bytes;
        z->buf = ckpt_xmalloc(z->bufcap);
        z->scratch = ckpt_xmalloc(z->bufcap);
    }
    if (add_chunks(z, ob, ai, e, z->locs[m->n], err) != 0)
        return -1;
    m->n++;
    return 0;
}

static int olocate(struct ujob *j, struct utensor *t, struct uchunk *c,
                   struct ckpt_err *err)
{
    struct oplan *z = j->fmtplan;
    const struct oloc *l = &z->locs[t->e - j->meta->entries]
                                   [c->meta - t->e->chunks];
    (void)err;
    c->src = z->tmp;
    c->item_off = 0;
    c->data = l->off;
    memcpy(c->stride, l->stride, sizeof(int64_t) * (size_t)t->e->ndim);
    c->soff = 0;
    c->big_endian = 0;
    return 0;
}

/* Open every item; entries are sized to the total array count. */
static int plan_items(struct oplan *z, const char *src, char **items,
                      size_t n, struct ckpt_err *err)
{
    struct ckpt_orbax **obs = ckpt_xcalloc(n, sizeof(*obs));
    size_t total = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *dir = *items[i] ? ckpt_path_join(src, items[i])
                              : ckpt_xstrdup(src);
        rc = z->j->st ? ckpt_orbax_open_storage(z->j->st, dir, &obs[i], err)
                      : ckpt_orbax_open(dir, &obs[i], err);
        if (rc == 0)
            total += ckpt_orbax_count(obs[i]);
        free(dir);
    }
    if (rc == 0 && total == 0)
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, ORBAX_NO_ARRAYS);
    struct ckpt_dcp_meta *m = z->j->meta;
    if (rc == 0) {
        m->entries = ckpt_arena_array(m->arena, total, sizeof(*m->entries));
        z->locs = ckpt_xcalloc(total, sizeof(*z->locs));
        if (!m->entries)
            rc = ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
        else
            memset(m->entries, 0, total * sizeof(*m->entries));
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *prefix = n > 1 ? ckpt_xasprintf("%s.", items[i])
                             : ckpt_xstrdup("");
        for (size_t a = 0; rc == 0 && a < ckpt_orbax_count(obs[i]); a++)
            rc = add_array(z, obs[i], a, prefix, err);
        free(prefix);
    }
    for (size_t i = 0; i < n; i++)
        ckpt_orbax_close(obs[i]);
    free(obs);
    return rc;
}

int uns_orbax_plan(struct ujob *j, const char *src, struct ckpt_err *err)
{
    struct oplan z;
    struct ckpt_pv *root;
    size_t n;
    memset(&z, 0, sizeof(z));
    z.j = j;
    j->dir = ckpt_xstrdup(src);
    j->metaname = "_METADATA";
    j->meta = ckpt_dcp_meta_new();
    j->fmtplan = &z;
    j->locate = olocate;
    j->olmo = j->o->layout == CKPT_LAYOUT_OLMO;
    struct ckpt_storage *st = j->st;    /* remote SRC, else NULL */
    char **items = items_of(st, src, &n);
    int item = n == 1 && !*items[0];
    char *step = item ? ckpt_path_dirname(src) : ckpt_xstrdup(src);
    int rc = j->meta ? 0 : ckpt_err_set(err, CKPT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = check_committed(st, step, err);
    if (rc == 0 && n == 0)
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, ORBAX_NO_ARRAYS);
    if (rc == 0) {
        ckpt_sort(items, n, sizeof(*items), cmp_str);
        rc = uns_src_tmp_fd(j, err);
        if (rc >= 0) {
            z.fd = rc;
            z.tmp = uns_src_add(j, ckpt_xasprintf("%s (decoded chunks)", src),
                                rc, 0);
            rc = 0;
        }
    }
    if (rc == 0)
        rc = plan_items(&z, src, items, n, err);
    if (rc == 0)
        rc = uns_plan_tensors(j, err);
    if (rc == 0)
        rc = uns_tree_build(j, &root, err);
    if (rc == 0)
        rc = uns_layout_files(j, root, err);
    for (size_t i = 0; i < n; i++)
        free(items[i]);
    free(items);
    free(step);
    free(z.locs);
    free(z.buf);
    free(z.scratch);
    j->fmtplan = NULL;
    return rc;
}
