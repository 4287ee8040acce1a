/*
 * orbax.c - an Orbax item directory as a key-value store: OCDBT
 * (manifest.ocdbt, the latest generation's B+tree loaded into a sorted key
 * table, values inline or in data files) or the old format (one zarr v2
 * directory per array, keys are files). Arrays are the keys ending in
 * "/.zarray" or "/zarr.json". Local directories only for now.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/msgpack.h"
#include "ckpt/orbax.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"

#define MAX_KEYS (1u << 24)
#define MAX_DEPTH 16
/* A B+tree is a DAG on disk: a hostile one can reference the same nodes
 * over and over. Caps on what one database may make ckpt read and keep. */
#define MAX_NODE_VISITS (1u << 20)
#define MAX_NODE_BYTES ((uint64_t)4 << 30)
#define MAX_KEY_BYTES ((uint64_t)256 << 20)
#define MAX_META (1u << 20)

struct kvent {
    char *key;                      /* malloced */
    const unsigned char *value;     /* inline (in a node arena) */
    const char *file;               /* indirect: path under the root */
    uint64_t off, len;
};

/* An item in a ckpt_storage. */
struct sio {
    struct ckpt_storage *st;
    const char *dir;
};

struct ckpt_orbax {
    char *dir;
    struct sio sio;
    const struct ckpt_orbax_io *io;     /* OCDBT reads */
    struct ckpt_orbax_io local_io, remote_io;
    int ocdbt;
    struct kvent *kv;
    size_t nkv, kvcap;
    /* inline values and data file paths the keys point to (nodes are
     * freed as soon as they are read: a tree can be a large DAG) */
    struct ckpt_arena *kva;
    struct ckpt_orbax_array *arrays;
    size_t narrays;
    /* sizes of the data files seen (a database has few; remote stats
     * are requests) */
    struct { char *path; uint64_t size; } sizes[16];
    int nsizes, nextsize;
    /* a referenced data file is missing or too short (the database is
     * incomplete), as opposed to undecodable */
    int incomplete;
    uint64_t visits, node_bytes, key_bytes;
    /* last shard index read (sharded zarr3) */
    char *ixkey;
    uint64_t *ix;
    /* ckpt_orbax_chunk runs in several threads at once (the unshard
     * engine's workers): mu guards sizes and incomplete, ixmu ixkey/ix */
    pthread_mutex_t mu, ixmu;
};

static void locks_init(struct ckpt_orbax *o)
{
    pthread_mutex_init(&o->mu, NULL);
    pthread_mutex_init(&o->ixmu, NULL);
}

static void locks_destroy(struct ckpt_orbax *o)
{
    pthread_mutex_destroy(&o->mu);
    pthread_mutex_destroy(&o->ixmu);
}

static struct ckpt_orbax *orbax_new(const char *dir)
{
    struct ckpt_orbax *o = ckpt_xcalloc(1, sizeof(*o));
    o->dir = ckpt_xstrdup(dir);
    locks_init(o);
    return o;
}

int ckpt_orbax_is_item(const char *dir)
{
    return ckpt_is_file_in(dir, "manifest.ocdbt") ||
           ckpt_is_file_in(dir, "_METADATA") ||
           ckpt_is_file_in(dir, "checkpoint");
}

/* A data file path from a node: relative, no "..", no empty components. */
static int safe_rel(const char *p)
{
    if (!*p || *p == '/')
        return 0;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') ||
            (n == 2 && s[0] == '.' && s[1] == '.'))
            return 0;
        s += n + (e ? 1 : 0);
    }
    return 1;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off,
                     const char *name, struct ckpt_err *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got,
                          (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ckpt_err_sys(err, "read '%s'", name);
        if (r == 0)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s': ends before byte "
                                "%llu", name, (unsigned long long)(off + n));
        got += (size_t)r;
    }
    return 0;
}

/* Read [off, off+len) of file rel under dir; the file must hold it. */
static int read_range(const char *dir, const char *rel, uint64_t off,
                      uint64_t len, void *buf, struct ckpt_err *err)
{
    if (!safe_rel(rel))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file path '%s' "
                            "leaves the checkpoint", dir, rel);
    char *p = ckpt_path_join(dir, rel);
    int fd = ckpt_local_open_read(p, CKPT_OPEN_FOLLOW, err);
    struct stat sb;
    int rc;
    if (fd < 0 && err->code == CKPT_EUNSAFE)
        rc = -1;
    else if (fd < 0 || fstat(fd, &sb) != 0)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' missing: referenced by "
                          "the OCDBT tree (%s)", p, strerror(errno));
    else if ((uint64_t)sb.st_size < off + len)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' has %llu bytes, the OCDBT "
                          "tree references bytes up to %llu (truncated)", p,
                          (unsigned long long)sb.st_size,
                          (unsigned long long)(off + len));
    else
        rc = pread_all(fd, buf, (size_t)len, off, p, err);
    if (fd >= 0)
        close(fd);
    free(p);
    return rc;
}

static int file_size(const char *dir, const char *rel, uint64_t *size,
                     struct ckpt_err *err)
{
    char *p = ckpt_path_join(dir, rel);
    struct stat sb;
    int rc = 0;
    if (!safe_rel(rel))
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: data file path '%s' "
                          "leaves the checkpoint", dir, rel);
    else if (stat(p, &sb) != 0)
        rc = ckpt_err_set(err, errno == ENOENT ? CKPT_ENOTFOUND : CKPT_EIO,
                          "'%s' missing: referenced by the OCDBT tree", p);
    else
        *size = (uint64_t)sb.st_size;
    free(p);
    return rc;
}

static int local_size(void *ctx, const char *rel, uint64_t *size,
                      struct ckpt_err *err)
{
    return file_size(ctx, rel, size, err);
}

static int local_read(void *ctx, const char *rel, uint64_t off, uint64_t len,
                      void *buf, struct ckpt_err *err)
{
    return read_range(ctx, rel, off, len, buf, err);
}

/* Size of a data file through io, remembered. */
static int cached_size(struct ckpt_orbax *o, const char *rel, uint64_t *size,
                       struct ckpt_err *err)
{
    pthread_mutex_lock(&o->mu);
    for (int i = 0; i < o->nsizes; i++)
        if (!strcmp(o->sizes[i].path, rel)) {
            *size = o->sizes[i].size;
            pthread_mutex_unlock(&o->mu);
            return 0;
        }
    int rc = o->io->size(o->io->ctx, rel, size, err);
    if (rc != 0) {
        o->incomplete = err->code == CKPT_ENOTFOUND;
    } else {
        int i = o->nsizes < 16 ? o->nsizes++ : o->nextsize++ % 16;
        free(o->sizes[i].path);
        o->sizes[i].path = ckpt_xstrdup(rel);
        o->sizes[i].size = *size;
    }
    pthread_mutex_unlock(&o->mu);
    return rc != 0 ? -1 : 0;
}

static void set_incomplete(struct ckpt_orbax *o)
{
    pthread_mutex_lock(&o->mu);
    o->incomplete = 1;
    pthread_mutex_unlock(&o->mu);
}

/* Bounds-checked read through io: the file must hold [off, off+len). */
static int io_read(struct ckpt_orbax *o, const char *rel, uint64_t off,
                   uint64_t len, void *buf, struct ckpt_err *err)
{
    uint64_t size = 0;
    if (!safe_rel(rel))
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file path '%s' "
                            "leaves the checkpoint", o->dir, rel);
    if (cached_size(o, rel, &size, err) != 0)
        return -1;
    if (size < off + len) {
        set_incomplete(o);
        return ckpt_err_set(err, CKPT_EFORMAT, "'%s/%s' has %llu bytes, the "
                            "OCDBT tree references bytes up to %llu "
                            "(truncated)", o->dir, rel,
                            (unsigned long long)size,
                            (unsigned long long)(off + len));
    }
    return o->io->read(o->io->ctx, rel, off, len, buf, err);
}

/* --- OCDBT ---------------------------------------------------------------- */

static int add_key(struct ckpt_orbax *o, const char *prefix, size_t plen,
                   const struct ckpt_ocdbt_entry *e, struct ckpt_err *err)
{
    o->key_bytes += plen + e->keylen + sizeof(struct kvent);
    if (o->nkv >= MAX_KEYS || o->key_bytes > MAX_KEY_BYTES)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: more than %u keys or "
                            "%llu bytes of keys", o->dir, MAX_KEYS,
                            (unsigned long long)MAX_KEY_BYTES);
    if (o->nkv == o->kvcap) {
        o->kvcap = o->kvcap ? 2 * o->kvcap : 64;
        o->kv = ckpt_xreallocarray(o->kv, o->kvcap, sizeof(*o->kv));
    }
    struct kvent *k = &o->kv[o->nkv];
    k->key = ckpt_xmalloc(plen + e->keylen + 1);
    memcpy(k->key, prefix, plen);
    memcpy(k->key + plen, e->key, e->keylen);
    k->key[plen + e->keylen] = 0;
    if (memchr(k->key, 0, plen + e->keylen)) {
        free(k->key);
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: key with a NUL byte",
                            o->dir);
    }
    k->value = NULL;
    k->file = NULL;
    if (!o->kva)
        o->kva = ckpt_arena_new(MAX_KEY_BYTES);
    if (!e->indirect) {
        unsigned char *v = o->kva ? ckpt_arena_alloc(o->kva, e->ref.length
                                                     ? e->ref.length : 1)
                                  : NULL;
        if (!v)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: more than %llu "
                                "bytes of inline values and keys", o->dir,
                                (unsigned long long)MAX_KEY_BYTES);
        memcpy(v, e->value, (size_t)e->ref.length);
        k->value = v;
    } else if (o->nkv && o->kv[o->nkv - 1].file &&
               !strcmp(o->kv[o->nkv - 1].file, e->ref.file->path)) {
        k->file = o->kv[o->nkv - 1].file;
    } else {
        k->file = o->kva ? ckpt_arena_strdup(o->kva, e->ref.file->path)
                         : NULL;
        if (!k->file)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: more than %llu "
                                "bytes of inline values and keys", o->dir,
                                (unsigned long long)MAX_KEY_BYTES);
    }
    k->off = e->ref.offset;
    k->len = e->ref.length;
    o->nkv++;
    if (e->indirect) {
        uint64_t size = 0;
        if (!safe_rel(k->file))
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: data file path '%s' "
                                "leaves the checkpoint", o->dir, k->file);
        if (cached_size(o, k->file, &size, err) != 0)
            return -1;
        o->incomplete = size < k->off + k->len;
        if (size < k->off + k->len)
            return ckpt_err_set(err, CKPT_EFORMAT, "'%s/%s' has %llu bytes, "
                                "value '%s' needs bytes up to %llu "
                                "(truncated)", o->dir, k->file,
                                (unsigned long long)size, k->key,
                                (unsigned long long)(k->off + k->len));
    }
    return 0;
}

static int load_node(struct ckpt_orbax *o, const struct ckpt_ocdbt_ref *ref,
                     int height, const char *prefix, size_t plen, int depth,
                     struct ckpt_err *err)
{
    if (depth > MAX_DEPTH)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: B+tree deeper than %d",
                            o->dir, MAX_DEPTH);
    if (ref->length > CKPT_OCDBT_MAX_NODE)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: B+tree node of %llu "
                            "bytes", o->dir,
                            (unsigned long long)ref->length);
    o->node_bytes += ref->length;
    if (++o->visits > MAX_NODE_VISITS || o->node_bytes > MAX_NODE_BYTES)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: B+tree of more than %u "
                            "nodes or %llu bytes", o->dir, MAX_NODE_VISITS,
                            (unsigned long long)MAX_NODE_BYTES);
    char *buf = ckpt_xmalloc(ref->length ? (size_t)ref->length : 1);
    char *name = ckpt_xasprintf("%s/%s@%llu", o->dir, ref->file->path,
                                (unsigned long long)ref->offset);
    struct ckpt_ocdbt_btree *t = NULL;
    char *base = ckpt_xstrndup(ref->file->path, ref->file->base_len);
    int rc = io_read(o, ref->file->path, ref->offset, ref->length, buf,
                     err);
    if (rc == 0)
        rc = ckpt_ocdbt_btree_parse(buf, (size_t)ref->length, base, name, &t,
                                    err);
    free(buf);
    free(base);
    if (rc == 0 && t->height != height)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: height %u, the parent "
                          "says %d", name, t->height, height);
    for (size_t i = 0; rc == 0 && i < t->n; i++) {
        const struct ckpt_ocdbt_entry *e = &t->entries[i];
        if (t->height == 0) {
            rc = add_key(o, prefix, plen, e, err);
            continue;
        }
        char *p = ckpt_xmalloc(plen + e->subtree_prefix_len + 1);
        memcpy(p, prefix, plen);
        memcpy(p + plen, e->key, e->subtree_prefix_len);
        rc = load_node(o, &e->ref, t->height - 1, p,
                       plen + e->subtree_prefix_len, depth + 1, err);
        free(p);
    }
    if (t)
        ckpt_arena_free(t->arena);
    free(name);
    return rc;
}

/* Read and parse the manifest file rel of the database. */
static int read_manifest(struct ckpt_orbax *o, const char *rel,
                         struct ckpt_ocdbt_manifest **m, struct ckpt_err *err)
{
    char *path = ckpt_path_join(o->dir, rel), *buf = NULL;
    uint64_t size = 0;
    int rc = o->io->size(o->io->ctx, rel, &size, err);
    if (rc == 0 && size > CKPT_OCDBT_MAX_NODE)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' is larger than %zu bytes",
                          path, CKPT_OCDBT_MAX_NODE);
    if (rc == 0) {
        buf = ckpt_xmalloc((size_t)size + 1);
        rc = o->io->read(o->io->ctx, rel, 0, size, buf, err);
    }
    if (rc == 0)
        rc = ckpt_ocdbt_manifest_parse(buf, (size_t)size, path, m, err);
    free(buf);
    free(path);
    return rc;
}

struct newest {
    uint64_t gen;
};

static int note_numbered(void *ud, const char *name)
{
    struct newest *n = ud;
    uint64_t g;
    if (ckpt_ocdbt_numbered_name(name, &g) && g > n->gen)
        n->gen = g;
    return 0;
}

/* manifest_kind 1: manifest.ocdbt holds the config only; the database is
 * the newest numbered manifest, manifest.%016x, a single-kind manifest
 * whose latest generation is its number (TensorStore io/manifest_cache.cc
 * writes one per commit and deletes old ones). *m is replaced by it. */
static int load_numbered(struct ckpt_orbax *o, struct ckpt_ocdbt_manifest **m,
                         struct ckpt_err *err)
{
    struct newest n = { 0 };
    char name[32];
    if (!o->io->names)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s: numbered manifests "
                            "(manifest_kind 1) cannot be listed here",
                            o->dir);
    if (o->io->names(o->io->ctx, note_numbered, &n, err) != 0)
        return -1;
    ckpt_arena_free((*m)->arena);
    *m = NULL;
    if (!n.gen)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: manifest.ocdbt says "
                            "numbered manifests, and there is none "
                            "(manifest.NNNNNNNNNNNNNNNN): no generation to "
                            "read", o->dir);
    snprintf(name, sizeof(name), "manifest.%016llx",
             (unsigned long long)n.gen);
    if (read_manifest(o, name, m, err) != 0) {
        if (err->code == CKPT_ENOTFOUND)    /* vanished since the listing */
            err->code = CKPT_EIO;
        return -1;
    }
    const struct ckpt_ocdbt_manifest *x = *m;
    if (x->manifest_kind != 0)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s/%s: a numbered manifest "
                            "of manifest_kind %u (must be 0)", o->dir, name,
                            x->manifest_kind);
    if (x->versions[x->nversions - 1].generation != n.gen)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s/%s: latest generation "
                            "%llu, the name says %llu", o->dir, name,
                            (unsigned long long)
                            x->versions[x->nversions - 1].generation,
                            (unsigned long long)n.gen);
    return 0;
}

static int load_ocdbt(struct ckpt_orbax *o, struct ckpt_err *err)
{
    struct ckpt_ocdbt_manifest *m = NULL;
    int rc = read_manifest(o, "manifest.ocdbt", &m, err);
    if (rc == 0 && m->manifest_kind != 0)
        rc = load_numbered(o, &m, err);
    if (rc == 0) {
        const struct ckpt_ocdbt_version *v = &m->versions[m->nversions - 1];
        if (v->root.file)
            rc = load_node(o, &v->root, v->root_height, "", 0, 0, err);
    }
    if (m)
        ckpt_arena_free(m->arena);
    return rc;
}

/* --- old format: one zarr v2 directory per array -------------------------- */

static int add_doc(void *ud, const char *rel)
{
    struct ckpt_orbax *o = ud;
    if (o->nkv >= MAX_KEYS)
        return -1;
    if (o->nkv == o->kvcap) {
        o->kvcap = o->kvcap ? 2 * o->kvcap : 64;
        o->kv = ckpt_xreallocarray(o->kv, o->kvcap, sizeof(*o->kv));
    }
    o->kv[o->nkv++] = (struct kvent){ ckpt_xstrdup(rel), NULL, NULL, 0, 0 };
    return 0;
}

static int local_list(void *ctx, int (*fn)(void *ud, const char *rel),
                      void *ud, struct ckpt_err *err)
{
    DIR *d = opendir(ctx);
    struct dirent *de;
    int rc = 0;
    if (!d)
        return ckpt_err_sys(err, "open '%s'", (const char *)ctx);
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char *sub = ckpt_path_join(ctx, de->d_name);
        const char *doc = ckpt_is_file_in(sub, ".zarray") ? ".zarray"
                        : ckpt_is_file_in(sub, "zarr.json") ? "zarr.json"
                        : NULL;
        free(sub);
        if (doc) {
            char *rel = ckpt_xasprintf("%s/%s", de->d_name, doc);
            rc = fn(ud, rel);
            free(rel);
        }
    }
    closedir(d);
    return rc;
}

static int local_names(void *ctx, int (*fn)(void *ud, const char *name),
                       void *ud, struct ckpt_err *err)
{
    DIR *d = opendir(ctx);
    struct dirent *de;
    int rc = 0;
    if (!d)
        return ckpt_err_sys(err, "open '%s'", (const char *)ctx);
    while (rc == 0 && (de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            rc = fn(ud, de->d_name);
    closedir(d);
    return rc;
}

static int load_dirs(struct ckpt_orbax *o, struct ckpt_err *err)
{
    if (o->io->list(o->io->ctx, add_doc, o, err) == 0)
        return 0;
    return o->nkv >= MAX_KEYS ? ckpt_err_set(err, CKPT_EFORMAT, "%s: too "
                                             "many arrays", o->dir) : -1;
}

/* --- key lookup and values ------------------------------------------------ */

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const struct kvent *)a)->key,
                  ((const struct kvent *)b)->key);
}

static struct kvent *find(struct ckpt_orbax *o, const char *key)
{
    struct kvent k = { (char *)key, NULL, NULL, 0, 0 };
    if (!o->ocdbt)
        return NULL;
    return bsearch(&k, o->kv, o->nkv, sizeof(*o->kv), cmp_kv);
}

/* Size of key's value: 0, 1 if absent, -1 error. */
static int value_size(struct ckpt_orbax *o, const char *key, uint64_t *size,
                      struct ckpt_err *err)
{
    if (o->ocdbt) {
        struct kvent *k = find(o, key);
        if (!k)
            return 1;
        *size = k->len;
        return 0;
    }
    if (o->io != &o->local_io) {
        int rc = o->io->size(o->io->ctx, key, size, err);
        return rc != 0 && err->code == CKPT_ENOTFOUND ? 1 : rc;
    }
    char *p = ckpt_path_join(o->dir, key);
    struct stat sb;
    int rc = stat(p, &sb) == 0 ? 0 : errno == ENOENT ? 1 : -1;
    if (rc < 0)
        ckpt_err_sys(err, "stat '%s'", p);
    else if (rc == 0)
        *size = (uint64_t)sb.st_size;
    free(p);
    return rc;
}

static int value_read(struct ckpt_orbax *o, const char *key, uint64_t off,
                      uint64_t len, void *buf, struct ckpt_err *err)
{
    if (!o->ocdbt)
        return io_read(o, key, off, len, buf, err);
    struct kvent *k = find(o, key);
    if (!k || off > k->len || len > k->len - off)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: value '%s' range out "
                            "of bounds", o->dir, key);
    if (k->value) {
        memcpy(buf, k->value + off, (size_t)len);
        return 0;
    }
    return io_read(o, k->file, k->off + off, len, buf, err);
}

/* --- arrays --------------------------------------------------------------- */

/* The fields that point into the array's own metadata (again after the
 * array moved). */
static void set_views(struct ckpt_orbax_array *a)
{
    int v3 = a->v3;
    if (a->raw) {
        a->shape = a->raw_shape;
        a->chunks = a->raw_chunks;
        a->fill = a->z2.fill;
        return;
    }
    a->dtype = v3 ? a->z3.dtype : a->z2.dtype;
    a->ndim = v3 ? a->z3.ndim : a->z2.ndim;
    a->shape = v3 ? a->z3.shape : a->z2.shape;
    a->chunks = v3 ? (a->z3.sharded ? a->z3.inner : a->z3.chunks)
                   : a->z2.chunks;
    a->chunk_bytes = v3 ? a->z3.chunk_bytes : a->z2.chunk_bytes;
    a->fortran = v3 ? 0 : a->z2.fortran;
    a->has_fill = v3 ? a->z3.has_fill : a->z2.has_fill;
    a->fill = v3 ? a->z3.fill : a->z2.fill;
}

static int add_array(struct ckpt_orbax *o, const char *key, int v3,
                     struct ckpt_err *err)
{
    struct ckpt_orbax_array *a = &o->arrays[o->narrays];
    uint64_t size;
    char *doc = NULL;
    char *name = ckpt_xasprintf("%s/%s", o->dir, key);
    int rc = value_size(o, key, &size, err);
    if (rc == 0 && size > MAX_META)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: larger than %u bytes",
                          name, MAX_META);
    if (rc == 0) {
        doc = ckpt_xmalloc((size_t)size + 1);
        rc = value_read(o, key, 0, size, doc, err);
    }
    memset(a, 0, sizeof(*a));
    if (rc == 0 && v3)
        rc = ckpt_zarr3_parse(doc, (size_t)size, name, &a->z3, err);
    else if (rc == 0)
        rc = ckpt_zarray_parse(doc, (size_t)size, name, &a->z2, err);
    free(doc);
    free(name);
    if (rc != 0)
        return -1;
    a->name = ckpt_xstrndup(key, strrchr(key, '/') - key);
    a->v3 = v3;
    set_views(a);
    a->nbytes = a->dtype->itemsize;
    for (int d = 0; d < a->ndim; d++)
        if (ckpt_mul_u64(a->nbytes, a->shape[d], &a->nbytes) != 0) {
            free(a->name);
            return ckpt_err_set(err, CKPT_EFORMAT, "%s: array too large",
                                key);
        }
    o->narrays++;
    return 0;
}

static int find_arrays(struct ckpt_orbax *o, struct ckpt_err *err)
{
    o->arrays = ckpt_xcalloc(o->nkv + 1, sizeof(*o->arrays));
    for (size_t i = 0; i < o->nkv; i++) {
        const char *k = o->kv[i].key;
        int v2 = ckpt_str_endswith(k, "/.zarray");
        int v3 = ckpt_str_endswith(k, "/zarr.json");
        if ((v2 || v3) && strchr(k, '/') == strrchr(k, '/') &&
            add_array(o, k, v3, err) != 0)
            return -1;
    }
    return 0;
}

/* --- legacy msgpack `checkpoint` (Flax serialization) -------------------- */

struct mpwalk {
    struct ckpt_orbax *o;
    const unsigned char *buf;
    size_t len, cap;
};

/* A Flax ndarray extension (type 1, or 3 for a numpy scalar): msgpack of
 * [shape, dtype name, C-order bytes]. */
static int add_raw(struct mpwalk *w, const char *name,
                   const struct ckpt_mp *ext, struct ckpt_arena *ar,
                   struct ckpt_err *err)
{
    struct ckpt_orbax *o = w->o;
    struct ckpt_mp *t;
    size_t used;
    char dt[32];
    if (ckpt_msgpack_parse(w->buf + ext->off, (size_t)ext->len, ar, name, &t,
                           &used, err) != 0)
        return -1;
    const struct ckpt_mp *sh = t->n == 3 ? &t->items[0] : NULL,
                         *d = sh ? &t->items[1] : NULL,
                         *b = sh ? &t->items[2] : NULL;
    if (t->type != CKPT_MP_ARRAY || !sh || sh->type != CKPT_MP_ARRAY ||
        sh->n > CKPT_MAX_DIMS || d->type != CKPT_MP_STR ||
        d->len >= sizeof(dt) || b->type != CKPT_MP_BIN)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s/checkpoint: '%s' is not "
                            "a Flax ndarray (shape, dtype, bytes)", o->dir,
                            name);
    memcpy(dt, w->buf + ext->off + d->off, (size_t)d->len);
    dt[d->len] = 0;
    if (w->len == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        o->arrays = ckpt_xreallocarray(o->arrays, o->narrays + w->cap,
                                       sizeof(*o->arrays));
    }
    struct ckpt_orbax_array *a = &o->arrays[o->narrays];
    memset(a, 0, sizeof(*a));
    a->raw = 1;
    a->dtype = ckpt_dtype_by_name(dt);
    a->ndim = (int)sh->n;
    uint64_t n = a->dtype ? a->dtype->itemsize : 0;
    for (int k = 0; k < a->ndim; k++) {
        const struct ckpt_mp *x = &sh->items[k];
        a->raw_shape[k] = x->type == CKPT_MP_UINT ? x->u : UINT64_MAX;
        if (ckpt_mul_u64(n, a->raw_shape[k], &n) != 0)
            n = UINT64_MAX;
    }
    if (!a->dtype)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s/checkpoint: '%s' "
                            "has dtype '%s'", o->dir, name, dt);
    if (n != b->len)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s/checkpoint: '%s' holds "
                            "%llu bytes, its shape needs %llu", o->dir, name,
                            (unsigned long long)b->len,
                            (unsigned long long)n);
    /* Chunks: runs of whole rows, at most CKPT_ORBAX_RAW_CHUNK bytes. */
    uint64_t row = a->dtype->itemsize;
    for (int k = 1; k < a->ndim; k++)
        row *= a->raw_shape[k];
    memcpy(a->raw_chunks, a->raw_shape, sizeof(a->raw_chunks));
    if (a->ndim && a->raw_shape[0] && row) {
        uint64_t rows = CKPT_ORBAX_RAW_CHUNK / row;
        a->raw_chunks[0] = rows < 1 ? 1 : rows < a->raw_shape[0]
                           ? rows : a->raw_shape[0];
    }
    a->chunk_bytes = a->ndim ? a->raw_chunks[0] * row : row;
    for (int k = 0; k < a->ndim; k++)
        if (!a->raw_chunks[k])
            a->raw_chunks[k] = 1;
    a->raw_off = ext->off + b->off;
    a->nbytes = n;
    a->name = ckpt_xstrdup(name);
    set_views(a);
    o->narrays++;
    w->len++;
    return 0;
}

static int walk_mp(struct mpwalk *w, const struct ckpt_mp *m, char *path,
                   struct ckpt_arena *ar, int depth, struct ckpt_err *err)
{
    if (m->type == CKPT_MP_EXT && (m->ext == 1 || m->ext == 3))
        return add_raw(w, path, m, ar, err);
    if (m->type != CKPT_MP_MAP || depth > CKPT_MSGPACK_MAX_DEPTH)
        return 0;   /* scalars, strings (placeholders of stored arrays) */
    for (size_t k = 0; k < m->n; k++) {
        const struct ckpt_mp *key = &m->items[2 * k];
        char *sub;
        if (key->type == CKPT_MP_STR)
            sub = ckpt_xasprintf("%s%s%.*s", path, *path ? "." : "",
                                 (int)key->len,
                                 (const char *)w->buf + key->off);
        else if (key->type == CKPT_MP_UINT)
            sub = ckpt_xasprintf("%s%s%llu", path, *path ? "." : "",
                                 (unsigned long long)key->u);
        else
            continue;
        int rc = walk_mp(w, &m->items[2 * k + 1], sub, ar, depth + 1, err);
        free(sub);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int load_msgpack(struct ckpt_orbax *o, struct ckpt_err *err)
{
    uint64_t size = 0;
    struct ckpt_err e2 = CKPT_ERR_INIT;
    if (o->io->size(o->io->ctx, "checkpoint", &size, &e2) != 0)
        return 0;   /* no legacy file */
    if (size > CKPT_ORBAX_MAX_MSGPACK)
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "%s/checkpoint: %llu "
                            "bytes; legacy msgpack files over %llu bytes are "
                            "not read", o->dir, (unsigned long long)size,
                            (unsigned long long)CKPT_ORBAX_MAX_MSGPACK);
    unsigned char *buf = ckpt_xmalloc(size ? (size_t)size : 1);
    struct ckpt_arena *ar = ckpt_arena_new(CKPT_ORBAX_MAX_MSGPACK);
    struct ckpt_mp *m;
    size_t used;
    char *name = ckpt_xasprintf("%s/checkpoint", o->dir);
    struct mpwalk w = { o, buf, 0, 0 };
    int rc = o->io->read(o->io->ctx, "checkpoint", 0, size, buf, err);
    if (rc == 0)
        rc = ckpt_msgpack_parse(buf, (size_t)size, ar, name, &m, &used, err);
    if (rc == 0 && used != size)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: %llu bytes after the "
                          "msgpack value", name,
                          (unsigned long long)(size - used));
    if (rc == 0)
        rc = walk_mp(&w, m, "", ar, 0, err);
    ckpt_arena_free(ar);
    free(buf);
    free(name);
    return rc;
}

static int cmp_array(const void *a, const void *b)
{
    return strcmp(((const struct ckpt_orbax_array *)a)->name,
                  ((const struct ckpt_orbax_array *)b)->name);
}

static int open_common(struct ckpt_orbax *o, struct ckpt_err *err)
{
    int rc = o->ocdbt ? load_ocdbt(o, err) : load_dirs(o, err);
    if (rc == 0) {
        ckpt_sort(o->kv, o->nkv, sizeof(*o->kv), cmp_kv);
        for (size_t i = 1; i < o->nkv; i++)
            if (!strcmp(o->kv[i - 1].key, o->kv[i].key)) {
                rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: key '%s' twice",
                                  o->dir, o->kv[i].key);
                break;
            }
    }
    if (rc == 0)
        rc = find_arrays(o, err);
    if (rc == 0)
        rc = load_msgpack(o, err);
    if (rc == 0) {
        ckpt_sort(o->arrays, o->narrays, sizeof(*o->arrays), cmp_array);
        for (size_t i = 0; i < o->narrays; i++) {
            set_views(&o->arrays[i]);
            if (i && !strcmp(o->arrays[i - 1].name, o->arrays[i].name))
                return ckpt_err_set(err, CKPT_EFORMAT, "%s: array '%s' "
                                    "twice", o->dir, o->arrays[i].name);
        }
    }
    return rc;
}

int ckpt_orbax_open(const char *dir, struct ckpt_orbax **out,
                    struct ckpt_err *err)
{
    struct ckpt_orbax *o = orbax_new(dir);
    o->local_io = (struct ckpt_orbax_io){ o->dir, local_size, local_read,
                                          local_list, local_names };
    o->io = &o->local_io;
    o->ocdbt = ckpt_is_file_in(dir, "manifest.ocdbt");
    if (open_common(o, err) != 0) {
        ckpt_orbax_close(o);
        return -1;
    }
    *out = o;
    return 0;
}

int ckpt_orbax_open_io(const struct ckpt_orbax_io *io, const char *name,
                       int ocdbt, struct ckpt_orbax **out,
                       struct ckpt_err *err)
{
    struct ckpt_orbax *o = orbax_new(name);
    o->io = io;
    o->ocdbt = ocdbt;
    if (open_common(o, err) != 0) {
        ckpt_orbax_close(o);
        return -1;
    }
    *out = o;
    return 0;
}

static int sio_size(void *ctx, const char *rel, uint64_t *size,
                    struct ckpt_err *err)
{
    struct sio *x = ctx;
    char *k = ckpt_path_join(x->dir, rel);
    struct ckpt_stat sb;
    int rc = ckpt_storage_stat(x->st, k, &sb, err);
    if (rc == 0)
        *size = sb.size;
    else if (err->code == CKPT_ENOTFOUND)
        ckpt_err_set(err, CKPT_ENOTFOUND, "%s missing: referenced by the "
                     "OCDBT tree", k);
    free(k);
    return rc;
}

static int sio_read(void *ctx, const char *rel, uint64_t off, uint64_t len,
                    void *buf, struct ckpt_err *err)
{
    struct sio *x = ctx;
    char *k = ckpt_path_join(x->dir, rel);
    size_t got = 0;
    int rc = ckpt_storage_read(x->st, k, off, buf, (size_t)len, &got, err);
    if (rc == 0 && got != len)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: short read at %llu", k,
                          (unsigned long long)off);
    free(k);
    return rc;
}

struct sio_ls {
    struct sio *x;
    int (*fn)(void *ud, const char *rel);
    void *ud;
    int rc;
};

static int sio_entry(void *ud, const struct ckpt_entry *e)
{
    struct sio_ls *l = ud;
    const char *s = strchr(e->name, '/');
    if (l->rc || e->type != CKPT_ENTRY_FILE || !s || strchr(s + 1, '/') ||
        e->name[0] == '.' ||
        (strcmp(s + 1, ".zarray") && strcmp(s + 1, "zarr.json")))
        return 0;
    l->rc = l->fn(l->ud, e->name);
    return 0;
}

/* One recursive listing of the item (the array documents among it). */
static int sio_list(void *ctx, int (*fn)(void *ud, const char *rel),
                    void *ud, struct ckpt_err *err)
{
    struct sio_ls l = { ctx, fn, ud, 0 };
    struct sio *x = ctx;
    if (ckpt_storage_list(x->st, x->dir, CKPT_LIST_RECURSIVE, sio_entry, &l,
                          err) != 0)
        return -1;
    return l.rc;
}

static int sio_name(void *ud, const struct ckpt_entry *e)
{
    struct sio_ls l = *(struct sio_ls *)ud;
    if (e->type != CKPT_ENTRY_FILE || strchr(e->name, '/'))
        return 0;
    return l.fn(l.ud, e->name);
}

/* The files directly under the item (one level). */
static int sio_names(void *ctx, int (*fn)(void *ud, const char *name),
                     void *ud, struct ckpt_err *err)
{
    struct sio_ls l = { ctx, fn, ud, 0 };
    struct sio *x = ctx;
    return ckpt_storage_list(x->st, x->dir, 0, sio_name, &l, err);
}

int ckpt_orbax_open_storage(struct ckpt_storage *st, const char *dir,
                            struct ckpt_orbax **out, struct ckpt_err *err)
{
    struct ckpt_orbax *o = orbax_new(dir);
    struct ckpt_stat sb;
    struct ckpt_err e2 = CKPT_ERR_INIT;
    char *m = ckpt_path_join(dir, "manifest.ocdbt");
    o->sio = (struct sio){ st, o->dir };
    o->remote_io = (struct ckpt_orbax_io){ &o->sio, sio_size, sio_read,
                                           sio_list, sio_names };
    o->io = &o->remote_io;
    o->ocdbt = ckpt_storage_stat(st, m, &sb, &e2) == 0;
    free(m);
    if (open_common(o, err) != 0) {
        ckpt_orbax_close(o);
        return -1;
    }
    *out = o;
    return 0;
}

size_t ckpt_orbax_count(const struct ckpt_orbax *o)
{
    return o->narrays;
}

const struct ckpt_orbax_array *ckpt_orbax_get(const struct ckpt_orbax *o,
                                              size_t i)
{
    return &o->arrays[i];
}

void ckpt_orbax_grid(const struct ckpt_orbax *o, size_t i, uint64_t *grid)
{
    const struct ckpt_orbax_array *a = &o->arrays[i];
    for (int d = 0; d < a->ndim; d++)
        grid[d] = (a->shape[d] + a->chunks[d] - 1) / a->chunks[d];
}

/* --- chunks --------------------------------------------------------------- */

static char *chunk_key(const struct ckpt_orbax_array *a, const uint64_t *idx)
{
    struct ckpt_buf k = CKPT_BUF_INIT;
    int v2 = !a->v3 || a->z3.v2_keys;
    char sep = a->v3 ? a->z3.sep : a->z2.sep;
    ckpt_buf_addf(&k, "%s/%s", a->name, v2 ? "" : "c");
    for (int d = 0; d < a->ndim; d++)
        ckpt_buf_addf(&k, "%s%llu", (d || !v2) ? (char[]){ sep, 0 } : "",
                      (unsigned long long)idx[d]);
    if (a->ndim == 0 && v2)
        ckpt_buf_addch(&k, '0');
    return ckpt_buf_detach(&k, NULL);
}

/* Locate inner chunk idx of a sharded array: its shard key and range. */
static int shard_locate_locked(struct ckpt_orbax *o, const struct ckpt_orbax_array *a,
                        const uint64_t *idx, char **key, uint64_t *off,
                        uint64_t *len, struct ckpt_err *err)
{
    const struct ckpt_zarr3 *z = &a->z3;
    uint64_t sidx[CKPT_MAX_DIMS], j = 0, size;
    for (int d = 0; d < a->ndim; d++) {
        uint64_t per = z->chunks[d] / z->inner[d];
        sidx[d] = idx[d] / per;
        j = j * per + idx[d] % per;
    }
    *key = chunk_key(&(struct ckpt_orbax_array){ .name = a->name, .v3 = 1,
                                                 .z3 = *z, .ndim = a->ndim },
                     sidx);
    int rc = value_size(o, *key, &size, err);
    if (rc != 0)
        return rc;
    uint64_t n = ckpt_zarr3_inner_per_shard(z);
    if (!o->ixkey || strcmp(o->ixkey, *key)) {
        uint64_t isz = n * 16 + (z->index_crc32c ? 4 : 0);
        if (isz > size)
            return ckpt_err_set(err, CKPT_EFORMAT, "%s/%s: shard smaller "
                                "than its index", o->dir, *key);
        unsigned char *ib = ckpt_xmalloc((size_t)isz);
        free(o->ix);
        free(o->ixkey);
        o->ixkey = NULL;
        o->ix = ckpt_xmalloc((size_t)n * 16);
        rc = value_read(o, *key, z->index_at_end ? size - isz : 0, isz, ib,
                        err);
        if (rc == 0)
            rc = ckpt_zarr3_shard_index(z, ib, (size_t)isz, size, n, o->ix,
                                        *key, err) == 0 ? 0 : -1;
        free(ib);
        if (rc != 0)
            return -1;
        o->ixkey = ckpt_xstrdup(*key);
    }
    *off = o->ix[2 * j];
    *len = o->ix[2 * j + 1];
    if (*off == UINT64_MAX && *len == UINT64_MAX)
        return 1;
    if (*off > size || *len > size - *off)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s/%s: inner chunk outside "
                            "the shard", o->dir, *key);
    return 0;
}

static int shard_locate(struct ckpt_orbax *o, const struct ckpt_orbax_array *a,
                        const uint64_t *idx, char **key, uint64_t *off,
                        uint64_t *len, struct ckpt_err *err)
{
    pthread_mutex_lock(&o->ixmu);
    int rc = shard_locate_locked(o, a, idx, key, off, len, err);
    pthread_mutex_unlock(&o->ixmu);
    return rc;
}

/* Rows [idx0 * chunk rows, ...) of a raw array, straight from the file. */
static int raw_chunk(struct ckpt_orbax *o, const struct ckpt_orbax_array *a,
                     const uint64_t *idx, void *out, struct ckpt_err *err)
{
    uint64_t row = a->dtype->itemsize, first, rows;
    for (int k = 1; k < a->ndim; k++)
        row *= a->shape[k];
    if (a->ndim == 0)
        return io_read(o, "checkpoint", a->raw_off, row, out, err);
    first = idx[0] * a->chunks[0];
    rows = a->shape[0] - first < a->chunks[0] ? a->shape[0] - first
                                              : a->chunks[0];
    return io_read(o, "checkpoint", a->raw_off + first * row, rows * row,
                   out, err);
}

int ckpt_orbax_chunk(struct ckpt_orbax *o, size_t i, const uint64_t *idx,
                     void *out, void *scratch, struct ckpt_err *err)
{
    const struct ckpt_orbax_array *a = &o->arrays[i];
    if (a->raw)
        return raw_chunk(o, a, idx, out, err);
    char *key = NULL;
    uint64_t off = 0, len = 0;
    int rc;
    if (a->v3 && a->z3.sharded)
        rc = shard_locate(o, a, idx, &key, &off, &len, err);
    else {
        key = chunk_key(a, idx);
        rc = value_size(o, key, &len, err);
    }
    /* A compressed chunk may exceed the raw size by a frame header and a
     * few bytes per block; anything far larger is not a chunk. */
    if (rc == 0 && len > a->chunk_bytes * 2 + 65536)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s/%s: %llu bytes for a chunk "
                          "of %llu", o->dir, key, (unsigned long long)len,
                          (unsigned long long)a->chunk_bytes);
    char *in = rc == 0 ? ckpt_xmalloc(len ? (size_t)len : 1) : NULL;
    if (rc == 0)
        rc = value_read(o, key, off, len, in, err);
    char *name = rc == 0 ? ckpt_xasprintf("%s/%s", o->dir, key) : NULL;
    if (rc == 0 && a->v3)
        rc = ckpt_zarr3_decode(&a->z3, in, (size_t)len, out, scratch, name,
                               err);
    else if (rc == 0)
        rc = ckpt_zarr_decode(&a->z2, in, (size_t)len, out, name, err);
    free(name);
    free(in);
    free(key);
    return rc;
}

int ckpt_ocdbt_check(const struct ckpt_orbax_io *io, const char *name,
                     uint64_t *nkeys, struct ckpt_err *err)
{
    struct ckpt_orbax o;
    memset(&o, 0, sizeof(o));
    locks_init(&o);
    o.dir = (char *)name;
    o.io = io;
    o.ocdbt = 1;
    int rc = load_ocdbt(&o, err);
    if (rc != 0 && o.incomplete)
        rc = 1;
    *nkeys = o.nkv;
    o.dir = NULL;
    for (size_t i = 0; i < o.nkv; i++)
        free(o.kv[i].key);
    ckpt_arena_free(o.kva);
    for (int i = 0; i < o.nsizes; i++)
        free(o.sizes[i].path);
    free(o.kv);
    locks_destroy(&o);
    return rc;
}

void ckpt_orbax_close(struct ckpt_orbax *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->nkv; i++)
        free(o->kv[i].key);
    ckpt_arena_free(o->kva);
    for (size_t i = 0; i < o->narrays; i++)
        free(o->arrays[i].name);
    free(o->arrays);
    free(o->kv);
    for (int i = 0; i < o->nsizes; i++)
        free(o->sizes[i].path);
    free(o->ixkey);
    free(o->ix);
    free(o->dir);
    locks_destroy(o);
    free(o);
}
