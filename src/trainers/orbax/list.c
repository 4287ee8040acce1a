/*
 * orbax/list.c - Orbax items read through a run's tree (ls -l, judging):
 * file sizes come from the listing, bytes from ranged reads of the
 * storage (or of a plain tar's members; a compressed archive is streamed
 * again, a bounded number of times), so listing an OCDBT step reads its
 * manifest, B+tree nodes and array metadata, never the data.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/orbax.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"
#include "trainers/orbax/orbax.h"

static int tio_size(void *ctx, const char *rel, uint64_t *size,
                    struct ckpt_err *err)
{
    struct orbax_tio *x = ctx;
    char *p = ckpt_path_join(x->db, rel);
    const struct ckpt_tree_file *f = ckpt_tree_find(x->t, p);
    int rc = f && f->type != CKPT_ENTRY_DIR ? 0
           : ckpt_err_set(err, CKPT_ENOTFOUND, "%s missing: referenced by "
                          "the OCDBT tree", p);
    if (rc == 0)
        *size = f->size;
    free(p);
    return rc;
}

/* A compressed archive is streamed again for each read it did not
 * capture: at most this many passes per database, and this many archive
 * bytes in all, or the database is not read (judged by its markers). */
#define MAX_PASSES 32
#define MAX_PASS_BYTES ((uint64_t)4 << 30)

static int tio_read(void *ctx, const char *rel, uint64_t off, uint64_t len,
                    void *buf, struct ckpt_err *err)
{
    struct orbax_tio *x = ctx;
    char *p = ckpt_path_join(x->db, rel);
    int rc = 0;
    if (ckpt_tree_read_streams(x->t, p, off, (size_t)len) &&
        (x->passes >= MAX_PASSES ||
         (x->passes + 1) * x->t->archive_size > MAX_PASS_BYTES))
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: inside a compressed "
                          "archive, and reading it would take more than %d "
                          "passes or %llu GiB over the archive", p,
                          MAX_PASSES, (unsigned long long)(MAX_PASS_BYTES >>
                                                           30));
    if (rc == 0)
        rc = ckpt_tree_read_at(x->t, p, off, buf, (size_t)len, &x->passes,
                               err);
    free(p);
    return rc;
}

/* Array documents one directory below the item. */
static int tio_list(void *ctx, int (*fn)(void *ud, const char *rel),
                    void *ud, struct ckpt_err *err)
{
    struct orbax_tio *x = ctx;
    size_t lo, hi;
    (void)err;
    ckpt_tree_range(x->t, x->db, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const char *r = ckpt_tree_rel(x->t, i, x->db);
        const char *s = strchr(r, '/');
        if (!s || strchr(s + 1, '/') || r[0] == '.' ||
            (strcmp(s + 1, ".zarray") && strcmp(s + 1, "zarr.json")))
            continue;
        int rc = fn(ud, r);
        if (rc)
            return rc;
    }
    return 0;
}

/* Files directly in the database directory (numbered manifests). */
static int tio_names(void *ctx, int (*fn)(void *ud, const char *name),
                     void *ud, struct ckpt_err *err)
{
    struct orbax_tio *x = ctx;
    size_t lo, hi;
    (void)err;
    ckpt_tree_range(x->t, x->db, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const char *r = ckpt_tree_rel(x->t, i, x->db);
        if (strchr(r, '/') || x->t->files[i].type == CKPT_ENTRY_DIR)
            continue;
        int rc = fn(ud, r);
        if (rc)
            return rc;
    }
    return 0;
}

void orbax_tree_io(struct orbax_tio *x, struct ckpt_orbax_io *io,
                   struct ckpt_tree *t, const char *db)
{
    x->t = t;
    x->db = db;
    x->passes = 0;
    *io = (struct ckpt_orbax_io){ x, tio_size, tio_read, tio_list,
                                  tio_names };
}

static int is_item(struct ckpt_tree *t, const char *dir, int *ocdbt)
{
    char *m = ckpt_path_join(dir, "manifest.ocdbt");
    char *md = ckpt_path_join(dir, "_METADATA");
    char *cp = ckpt_path_join(dir, "checkpoint");
    const struct ckpt_tree_file *c = ckpt_tree_find(t, cp);
    free(cp);
    const struct ckpt_tree_file *a = ckpt_tree_find(t, m);
    const struct ckpt_tree_file *b = ckpt_tree_find(t, md);
    free(m);
    free(md);
    *ocdbt = a && a->type != CKPT_ENTRY_DIR;
    return *ocdbt || (b && b->type != CKPT_ENTRY_DIR) ||
           (c && c->type != CKPT_ENTRY_DIR);
}

static int list_item(struct ckpt_tree *t, const char *db, const char *item,
                     int ocdbt, ckpt_orbax_array_fn fn, void *ud,
                     struct ckpt_err *err)
{
    struct orbax_tio x;
    struct ckpt_orbax_io io;
    struct ckpt_orbax *o;
    orbax_tree_io(&x, &io, t, db);
    if (ckpt_orbax_open_io(&io, db, ocdbt, &o, err) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ckpt_orbax_count(o); i++)
        rc = fn(ud, item, ckpt_orbax_get(o, i));
    ckpt_orbax_close(o);
    return rc;
}

/* The item subdirectories of dir (sorted: tree files are). */
static char **items_of(struct ckpt_tree *t, const char *dir, size_t *n)
{
    size_t lo, hi;
    char **v = NULL;
    int ocdbt;
    *n = 0;
    ckpt_tree_range(t, dir, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const char *r = ckpt_tree_rel(t, i, dir);
        const char *s = strchr(r, '/');
        if (!s || strstr(r, ".orbax-checkpoint-tmp") ||
            (*n && !strncmp(v[*n - 1], r, (size_t)(s - r)) &&
             !v[*n - 1][s - r]))
            continue;
        char *item = ckpt_xstrndup(r, (size_t)(s - r));
        char *db = ckpt_path_join(dir, item);
        if (is_item(t, db, &ocdbt)) {
            v = ckpt_xreallocarray(v, *n + 1, sizeof(*v));
            v[(*n)++] = item;
        } else {
            free(item);
        }
        free(db);
    }
    return v;
}

int ckpt_orbax_tree_arrays(struct ckpt_tree *t, const char *dir,
                           ckpt_orbax_array_fn fn, void *ud,
                           struct ckpt_err *err)
{
    int ocdbt, rc = 0;
    size_t n;
    if (is_item(t, dir, &ocdbt))
        return list_item(t, dir, "", ocdbt, fn, ud, err);
    /* As `ckpt unshard` names them: the item prefixes the pytree path
     * only when the step has several items. */
    char **items = items_of(t, dir, &n);
    for (size_t i = 0; i < n; i++) {
        char *db = ckpt_path_join(dir, items[i]);
        is_item(t, db, &ocdbt);
        if (rc == 0)
            rc = list_item(t, db, n > 1 ? items[i] : "", ocdbt, fn, ud, err);
        free(db);
        free(items[i]);
    }
    free(items);
    return rc;
}
