/*
 * tree.c - a sorted snapshot of the files of a run, from a directory
 * listing or one pass over an archive.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/buf.h"
#include "ckpt/run.h"
#include "ckpt/orbax.h"
#include "ckpt/torchfmt.h"
#include "ckpt/util.h"

#define CAPTURE_MAX (64u << 20)
/* Torch zips and safetensors files in a compressed archive: the first
 * bytes (a zip's signature and usually data.pkl's start; a safetensors
 * header) and, of the last TAIL_RING bytes, what the wholeness check
 * reads; all members' together at most ENDS_BUDGET. */
#define HEAD_KEEP (4u << 10)
#define TAIL_RING (1u << 20)
#define ENDS_BUDGET (64u << 20)
#define ST_HEAD_MAX (1u << 20)

struct builder {
    struct ckpt_tree *t;
    size_t cap;
    char *ring;                 /* TAIL_RING bytes, made on first use */
    uint64_t ends_used;         /* heads and tails kept */
};

static struct ckpt_tree_file *add_file(struct builder *b, const char *path,
                                       uint64_t size,
                                       enum ckpt_entry_type type)
{
    struct ckpt_tree *t = b->t;
    if (t->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        t->files = ckpt_xreallocarray(t->files, b->cap, sizeof(*t->files));
    }
    struct ckpt_tree_file *f = &t->files[t->n++];
    memset(f, 0, sizeof(*f));
    f->path = ckpt_xstrdup(path);
    f->size = size;
    f->type = type;
    f->data_offset = CKPT_NO_OFFSET;
    return f;
}

/* A mount point the local listing found: counted, the smallest kept. */
static void note_mount(struct ckpt_tree *t, const char *path)
{
    t->mounts++;
    if (!t->mount_first || strcmp(path, t->mount_first) < 0) {
        free(t->mount_first);
        t->mount_first = ckpt_xstrdup(path);
    }
}

static int list_cb(void *ud, const struct ckpt_entry *e)
{
    struct builder *b = ud;
    if (e->mount)
        note_mount(b->t, e->name);
    if (e->mount && e->type == CKPT_ENTRY_DIR)
        return 0; /* (CKPT_LIST_MOUNTS: not a file) */
    struct ckpt_tree_file *f = add_file(b, e->name, e->size, e->type);
    f->mtime = e->mtime;
    f->ctime = e->ctime;
    return 0;
}

static int dir_cb(void *ud, const struct ckpt_entry *e)
{
    /* One-level pass: recursive listings omit directories, and an empty
     * wandb/ or step0/ still tells us something. */
    if (e->type == CKPT_ENTRY_DIR) {
        struct builder *b = ud;
        struct ckpt_tree_file *f = add_file(b, e->name, e->size, e->type);
        f->mtime = e->mtime;
        f->ctime = e->ctime;
    }
    return 0;
}

static int cmp_path(const void *a, const void *b)
{
    const struct ckpt_tree_file *x = a, *y = b;
    return strcmp(x->path, y->path);
}

static const char *base_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

size_t ckpt_tree_want_default(const char *path, uint64_t size)
{
    static const char *names[] = {
        "config.yaml", ".metadata", ".zattrs", ".zgroup",
        "_CHECKPOINT_METADATA", "metadata.yaml", "metadata.json",
        "wandb-metadata.json", "wandb-summary.json",
        "model.safetensors.index.json",
    };
    const char *b = base_of(path);
    /* W&B run logs can be GBs; their run record is at the start. */
    if (ckpt_str_startswith(b, "run-") && ckpt_str_endswith(b, ".wandb"))
        return 256u << 10;
    if (size > CAPTURE_MAX)
        return 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(b, names[i]))
            return CAPTURE_MAX;
    /* OCDBT manifests (Orbax), single and numbered: judging reads them. */
    uint64_t gen;
    if (!strcmp(b, "manifest.ocdbt") || ckpt_ocdbt_numbered_name(b, &gen))
        return CAPTURE_MAX;
    /* Rank-local DCP metadata: __N.metadata */
    if (ckpt_str_startswith(b, "__") && ckpt_str_endswith(b, ".metadata"))
        return CAPTURE_MAX;
    return 0;
}

/* Keep the first cap bytes of the current member (after those kept
 * already); libarchive skips the rest when we move to the next header. */
static int capture(struct ckpt_archive *a, struct ckpt_tree_file *f,
                   size_t cap, struct ckpt_err *err)
{
    struct ckpt_buf buf = CKPT_BUF_INIT;
    ckpt_buf_add(&buf, f->content ? f->content : "", f->content_len);
    free(f->content);
    f->content = NULL;
    while (buf.len < cap) {
        size_t room = cap - buf.len < 65536 ? cap - buf.len : 65536;
        ckpt_buf_grow(&buf, room);
        size_t n;
        if (ckpt_archive_read(a, buf.ptr + buf.len, room, &n, err) != 0) {
            ckpt_buf_release(&buf);
            f->content_len = 0;
            return -1;
        }
        if (n == 0)
            break;
        ckpt_buf_setlen(&buf, buf.len + n);
    }
    f->content = ckpt_buf_detach(&buf, &f->content_len);
    return 0;
}

/* Members the judge checks whole from their ends: torch zips (model.pt,
 * rank files, pytorch_model.bin, Lightning's *.ckpt...) and safetensors
 * files (their header). */
enum { ENDS_ZIP = 1, ENDS_ST };

static int ends_kind(const char *path)
{
    static const char *zip[] = { ".pt", ".pth", ".bin", ".ckpt" };
    for (size_t i = 0; i < sizeof(zip) / sizeof(zip[0]); i++)
        if (ckpt_str_endswith(path, zip[i]))
            return ENDS_ZIP;
    return ckpt_str_endswith(path, ".safetensors") ? ENDS_ST : 0;
}

/* The member's head and last bytes as the pass streamed them: reads
 * inside them are served, any other is refused and remembered. */
struct ends {
    const char *head, *last;
    size_t head_len, last_len;
    uint64_t size, low;         /* low: the first byte read of last */
    int outside;
};

static int ends_read(void *ctx, uint64_t off, void *buf, size_t len,
                     struct ckpt_err *err)
{
    struct ends *x = ctx;
    uint64_t last_off = x->size - x->last_len;
    if (off + len <= x->head_len) {
        memcpy(buf, x->head + off, len);
        return 0;
    }
    if (off >= last_off && off + len <= x->size) {
        memcpy(buf, x->last + (off - last_off), len);
        if (off < x->low)
            x->low = off;
        return 0;
    }
    x->outside = 1;
    return ckpt_err_set(err, CKPT_EIO, "not kept");
}

/* Keep what ckpt_tzip_whole reads of a zip's end (the judge asks the
 * same later, and then needs no second pass over the archive): all of it
 * or, when it reads further back than the ring (a central directory over
 * about 1 MiB) or the budget is spent, nothing (the archive's own end
 * check then stands for the member, as for any other). A safetensors
 * file's check reads its header alone: its last byte says so. */
static void keep_tail(struct builder *b, struct ckpt_tree_file *f, int kind,
                      const char *last, size_t last_len)
{
    struct ends x = { f->content, last, f->content_len, last_len, f->size,
                      f->size - 1, 0 };
    if (kind == ENDS_ZIP) {
        struct ckpt_rd rd = { ends_read, &x, 0, f->size, f->path };
        struct ckpt_err e = CKPT_ERR_INIT;
        x.low = f->size;
        (void)ckpt_tzip_whole(&rd, &e);
        if (x.low == f->size)
            x.low = f->size - 1;    /* (no zip: the last byte says "read") */
    }
    uint64_t n = f->size - x.low;
    if (x.outside || b->ends_used + n > ENDS_BUDGET)
        return;
    f->tail = ckpt_xmalloc((size_t)n);
    memcpy(f->tail, last + (last_len - n), (size_t)n);
    f->tail_off = x.low;
    b->ends_used += n;
}

/* How much of the member's start to keep: a zip's first HEAD_KEEP bytes;
 * a safetensors file's 8-byte length and the header it gives, when at
 * most ST_HEAD_MAX (else only the length: the judge reads the rest by a
 * pass of its own). Reads the head into content. */
static int capture_head(struct builder *b, struct ckpt_archive *a,
                        struct ckpt_tree_file *f, int kind,
                        struct ckpt_err *err)
{
    size_t head = kind == ENDS_ZIP ? HEAD_KEEP : 8;
    if (f->size < head)
        head = (size_t)f->size;
    if (capture(a, f, head, err) != 0)
        return -1;
    if (kind == ENDS_ST && f->content_len == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | (unsigned char)f->content[i];
        if (n <= ST_HEAD_MAX && n <= f->size - 8 &&
            b->ends_used + 8 + n <= ENDS_BUDGET &&
            capture(a, f, 8 + (size_t)n, err) != 0)
            return -1;
    }
    b->ends_used += f->content_len;
    return 0;
}

/* Stream a zip or safetensors member (nothing of it read yet) keeping
 * its head as content and, through a ring, its last TAIL_RING bytes;
 * then its tail. */
static int capture_ends(struct builder *b, struct ckpt_archive *a,
                        struct ckpt_tree_file *f, int kind,
                        struct ckpt_err *err)
{
    if (b->ends_used + HEAD_KEEP > ENDS_BUDGET)
        return 0;
    if (capture_head(b, a, f, kind, err) != 0)
        return -1;
    if (f->content_len == f->size)
        return 0;   /* (the whole member is content) */
    if (!b->ring)
        b->ring = ckpt_xmalloc(TAIL_RING);
    uint64_t pos = f->content_len;
    for (;;) {
        size_t at = (size_t)(pos % TAIL_RING), n;
        if (ckpt_archive_read(a, b->ring + at, TAIL_RING - at, &n, err) != 0)
            return -1;
        if (n == 0)
            break;
        pos += n;
    }
    if (pos != f->size)
        return 0;   /* short: the archive's damage says so */
    /* The last bytes in order, [size - len, size): the whole member when
     * the ring holds all after the head (so that no read of the check
     * straddles the two), else the ring. */
    size_t len = f->size - f->content_len <= TAIL_RING ? (size_t)f->size
                                                       : TAIL_RING;
    char *last = ckpt_xmalloc(len);
    size_t have = len - (len == f->size ? f->content_len : 0);
    if (len == f->size)
        memcpy(last, f->content, f->content_len);
    size_t from = (size_t)((f->size - have) % TAIL_RING);
    size_t first = TAIL_RING - from < have ? TAIL_RING - from : have;
    memcpy(last + (len - have), b->ring + from, first);
    memcpy(last + (len - have) + first, b->ring, have - first);
    keep_tail(b, f, kind, last, len);
    free(last);
    return 0;
}

static int load_archive(struct builder *b, ckpt_tree_want_fn want,
                        unsigned flags, struct ckpt_err *err)
{
    struct ckpt_tree *t = b->t;
    struct ckpt_archive *a;
    if (ckpt_archive_open(&a, t->st, t->key, err) != 0)
        return -1;
    ckpt_archive_set_salvage(a, (flags & CKPT_TREE_SALVAGE) != 0);
    int rc;
    struct ckpt_archive_entry e;
    int plain = ckpt_archive_kind(a) == CKPT_ARCHIVE_TAR;
    while ((rc = ckpt_archive_next(a, &e, err)) == 1) {
        if (!*e.path)
            continue; /* "./" itself */
        struct ckpt_tree_file *f = add_file(b, e.path, e.size, e.type);
        f->data_offset = e.data_offset;
        if (e.hardlink)
            f->hardlink = ckpt_xstrdup(e.hardlink);
        if (e.symlink)
            f->symlink = ckpt_xstrdup(e.symlink);
        size_t cap = !plain && e.type == CKPT_ENTRY_FILE
                   ? want(e.path, e.size) : 0;
        if (cap && capture(a, f, cap, err) != 0) {
            rc = -1;
            break;
        }
        int kind = !cap && !plain && e.type == CKPT_ENTRY_FILE &&
                   !e.hardlink && e.size ? ends_kind(e.path) : 0;
        if (kind && capture_ends(b, a, f, kind, err) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ckpt_archive_damage(a))
        t->damage = ckpt_xstrdup(ckpt_archive_damage(a));
    t->archive_size = ckpt_archive_file_size(a);
    t->fetched = ckpt_archive_bytes_fetched(a);
    ckpt_archive_close(a);
    free(b->ring);
    b->ring = NULL;
    return rc;
}

/* Does top/ hold a run (config.yaml, wandb/, train_data/ or a checkpoint
 * directory) rather than being a checkpoint itself? */
static int holds_run(const struct ckpt_tree *t, size_t len)
{
    for (size_t i = 0; i < t->n; i++) {
        const char *rest = t->files[i].path + len;
        if (*rest != '/')
            continue;
        rest++;
        const char *slash = strchr(rest, '/');
        size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
        char *child = ckpt_xstrndup(rest, n);
        int64_t step;
        int uns;
        int dir = slash || t->files[i].type == CKPT_ENTRY_DIR;
        int hit = !strcmp(child, "config.yaml") ||
                  (dir && (!strcmp(child, "wandb") ||
                           !strcmp(child, "train_data") ||
                           ckpt_checkpoint_name(child, &step, &uns)));
        free(child);
        if (hit)
            return 1;
    }
    return 0;
}

/* Step into a single redundant top-level directory (SPEC "Locations").
 * Runs are often named by Slurm job id, a bare integer like Orbax steps,
 * so the name alone cannot tell: a top directory named like a checkpoint
 * (or wandb/, train_data/) is kept unless it holds a run. */
static void strip_top(struct ckpt_tree *t)
{
    if (!t->n)
        return;
    const char *first = t->files[0].path;
    const char *slash = strchr(first, '/');
    size_t len = slash ? (size_t)(slash - first) : strlen(first);
    int below = 0;
    for (size_t i = 0; i < t->n; i++) {
        const char *p = t->files[i].path;
        if (strncmp(p, first, len) != 0 || (p[len] != '/' && p[len] != '\0'))
            return;
        if (p[len] == '\0' && t->files[i].type != CKPT_ENTRY_DIR)
            return;
        below |= p[len] == '/';
    }
    if (!below)
        return;
    char *top = ckpt_xstrndup(first, len);
    int64_t step;
    int uns;
    int special = ckpt_checkpoint_name(top, &step, &uns) ||
                  !strcmp(top, "wandb") || !strcmp(top, "train_data");
    if (special && !holds_run(t, len)) {
        free(top);
        return;
    }
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++) {
        struct ckpt_tree_file *f = &t->files[i];
        if (f->path[len] == '\0') {
            free(f->path);
            free(f->content);
            free(f->hardlink);
            free(f->symlink);
            continue;
        }
        memmove(f->path, f->path + len + 1, strlen(f->path + len + 1) + 1);
        t->files[w++] = *f;
    }
    t->n = w;
    free(t->strip);
    t->strip = ckpt_xasprintf("%s/", top);
    free(top);
}

/* Archives may list a path twice (appended tars); qsort is not stable, so
 * which copy survives is unspecified, but there is one entry per path. */
static void dedupe(struct ckpt_tree *t)
{
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (w && !strcmp(t->files[w - 1].path, t->files[i].path)) {
            free(t->files[w - 1].path);
            free(t->files[w - 1].content);
            free(t->files[w - 1].tail);
            free(t->files[w - 1].hardlink);
            free(t->files[w - 1].symlink);
            t->files[w - 1] = t->files[i];
            continue;
        }
        t->files[w++] = t->files[i];
    }
    t->n = w;
}

/* A hard link member is its target's content (GNU tar stores the second
 * name of a file as a 0-byte link): it takes the target's size, offset and
 * captured bytes. A link to a member the archive lacks makes the listing
 * damaged: extracting it would fail. Runs before strip_top, while paths
 * are still as stored (link targets are named from the archive root). */
static void resolve_hardlinks(struct ckpt_tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        struct ckpt_tree_file *f = &t->files[i];
        if (!f->hardlink)
            continue;
        const struct ckpt_tree_file *to = ckpt_tree_find(t, f->hardlink);
        /* (a chain of links resolves through the earlier ones: sorted
         * order is not link order, so follow it by hand) */
        for (int hops = 0; to && to->hardlink && hops < 32; hops++)
            to = ckpt_tree_find(t, to->hardlink);
        if (!to || to->type != CKPT_ENTRY_FILE) {
            if (!t->damage)
                t->damage = ckpt_xasprintf("hard link '%s' names '%s', "
                                           "which is not a file in the "
                                           "archive", f->path, f->hardlink);
            continue;
        }
        f->type = CKPT_ENTRY_FILE;
        f->size = to->size;
        f->data_offset = to->data_offset;
        if (to->content) {
            f->content = ckpt_xmalloc(to->content_len + 1);
            memcpy(f->content, to->content, to->content_len);
            f->content_len = to->content_len;
        }
        if (to->tail) {
            f->tail = ckpt_xmalloc((size_t)(to->size - to->tail_off));
            memcpy(f->tail, to->tail, (size_t)(to->size - to->tail_off));
            f->tail_off = to->tail_off;
        }
    }
}

int ckpt_tree_load(struct ckpt_tree **out, struct ckpt_storage *st,
                   const char *key, ckpt_tree_want_fn want,
                   struct ckpt_err *err)
{
    return ckpt_tree_load_flags(out, st, key, want, 0, err);
}

int ckpt_tree_load_flags(struct ckpt_tree **out, struct ckpt_storage *st,
                         const char *key, ckpt_tree_want_fn want,
                         unsigned flags, struct ckpt_err *err)
{
    struct ckpt_tree *t = ckpt_xcalloc(1, sizeof(*t));
    struct builder b = { t, 0, NULL, 0 };
    t->st = st;
    t->key = ckpt_xstrdup(key);
    t->display = ckpt_storage_display(st, key);
    t->strip = ckpt_xstrdup("");
    t->archive = ckpt_archive_kind_of(key);
    int rc;
    if (t->archive != CKPT_ARCHIVE_NONE) {
        rc = load_archive(&b, want ? want : ckpt_tree_want_default, flags,
                          err);
    } else {
        rc = ckpt_storage_list(st, key, CKPT_LIST_RECURSIVE |
                               CKPT_LIST_MOUNTS, list_cb, &b, err);
        if (rc == 0)
            rc = ckpt_storage_list(st, key, 0, dir_cb, &b, err);
    }
    if (rc != 0) {
        ckpt_tree_free(t);
        return -1;
    }
    if (t->n)
        ckpt_sort(t->files, t->n, sizeof(*t->files), cmp_path);
    dedupe(t);
    if (t->archive != CKPT_ARCHIVE_NONE) {
        resolve_hardlinks(t);
        strip_top(t);
    }
    *out = t;
    return 0;
}

void ckpt_tree_free(struct ckpt_tree *t)
{
    if (!t)
        return;
    free(t->mount_first);
    for (size_t i = 0; i < t->n; i++) {
        free(t->files[i].path);
        free(t->files[i].content);
        free(t->files[i].tail);
        free(t->files[i].hardlink);
        free(t->files[i].symlink);
    }
    free(t->files);
    free(t->damage);
    free(t->key);
    free(t->display);
    free(t->strip);
    free(t);
}

static size_t lower_bound(const struct ckpt_tree *t, const char *s)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(t->files[mid].path, s) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const struct ckpt_tree_file *ckpt_tree_find(const struct ckpt_tree *t,
                                            const char *path)
{
    size_t i = lower_bound(t, path);
    return i < t->n && !strcmp(t->files[i].path, path) ? &t->files[i] : NULL;
}

void ckpt_tree_range(const struct ckpt_tree *t, const char *dir, size_t *lo,
                     size_t *hi)
{
    if (!*dir) {
        *lo = 0;
        *hi = t->n;
        return;
    }
    /* Paths below "d" sort between "d/" and "d0" ('0' follows '/'). */
    char *a = ckpt_xasprintf("%s/", dir);
    char *b = ckpt_xasprintf("%s0", dir);
    *lo = lower_bound(t, a);
    *hi = lower_bound(t, b);
    free(a);
    free(b);
}

const char *ckpt_tree_rel(const struct ckpt_tree *t, size_t i,
                          const char *dir)
{
    size_t dl = strlen(dir);
    return t->files[i].path + (dl ? dl + 1 : 0);
}

int ckpt_tree_has_dir(const struct ckpt_tree *t, const char *dir)
{
    const struct ckpt_tree_file *f = ckpt_tree_find(t, dir);
    if (f)
        return f->type == CKPT_ENTRY_DIR;
    size_t lo, hi;
    ckpt_tree_range(t, dir, &lo, &hi);
    return hi > lo;
}

char *ckpt_tree_key(const struct ckpt_tree *t, const char *path)
{
    if (t->archive != CKPT_ARCHIVE_NONE)
        return NULL;
    return ckpt_path_join(t->key, path);
}

/* Fetch the head of a compressed-archive member that was not captured:
 * stream the archive again. */
/* Open the archive again and read up to member path: 1 with *a open at
 * it (*want: its name in the archive, malloced), or -1 (*a closed). */
static int seek_member(struct ckpt_tree *t, const char *path,
                       struct ckpt_archive **a, char **want,
                       struct ckpt_err *err)
{
    *want = NULL;
    if (ckpt_archive_open(a, t->st, t->key, err) != 0)
        return -1;
    *want = ckpt_xasprintf("%s%s", t->strip, path);
    struct ckpt_archive_entry e;
    int rc;
    while ((rc = ckpt_archive_next(*a, &e, err)) == 1)
        if (!strcmp(e.path, *want))
            break;
    if (rc == 0)
        rc = ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no member '%s'",
                          t->display, *want);
    if (rc != 1) {
        ckpt_archive_close(*a);
        *a = NULL;
    }
    return rc == 1 ? 1 : -1;
}

static int restream(struct ckpt_tree *t, const char *path, size_t max,
                    char **data, size_t *len, struct ckpt_err *err)
{
    struct ckpt_archive *a;
    char *want;
    int rc = seek_member(t, path, &a, &want, err);
    if (rc == 1) {
        struct ckpt_tree_file f = { .path = want };
        rc = capture(a, &f, max, err);
        if (rc == 0) {
            *data = f.content;
            *len = f.content_len;
        }
        ckpt_archive_close(a);
    }
    free(want);
    return rc;
}

/* Read [0, n) of a plain tar member or a directory file. */
static int read_range(struct ckpt_tree *t, const struct ckpt_tree_file *f,
                      size_t n, char **data, size_t *len,
                      struct ckpt_err *err)
{
    char *key = ckpt_tree_key(t, f->path);
    uint64_t off = key ? 0 : f->data_offset;
    char *buf = ckpt_xmalloc(n + 1);
    size_t got;
    int rc = ckpt_storage_read(t->st, key ? key : t->key, off, buf, n, &got,
                               err);
    free(key);
    if (rc == 0 && got != n && !key)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: member '%s' is truncated",
                          t->display, f->path);
    if (rc != 0) {
        free(buf);
        return -1;
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return 0;
}

/* Bytes [off, off+len) of a compressed-archive member: stream the
 * archive again up to it. */
static int restream_at(struct ckpt_tree *t, const char *path, uint64_t off,
                       char *buf, size_t len, struct ckpt_err *err)
{
    struct ckpt_archive *a;
    char *want;
    int rc = seek_member(t, path, &a, &want, err);
    char skip[65536];
    uint64_t pos = 0;
    size_t got = 0;
    while (rc == 1 && got < len) {
        size_t n, room = pos < off ? (off - pos < sizeof(skip)
                                      ? (size_t)(off - pos) : sizeof(skip))
                                   : len - got;
        char *to = pos < off ? skip : buf + got;
        if (ckpt_archive_read(a, to, room, &n, err) != 0)
            rc = -1;
        else if (n == 0)
            rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: member '%s' is "
                              "truncated", t->display, want);
        else if (pos < off)
            pos += n;
        else
            got += n;
    }
    free(want);
    if (a)
        ckpt_archive_close(a);
    return rc == 1 ? 0 : -1;
}

/* Only regular files are read: a FIFO where a checkpoint's .metadata
 * belongs would block the read forever, a symlink lead out of the run.
 * 0, or -1 with err naming what it is. */
static int readable(const struct ckpt_tree *t, const struct ckpt_tree_file *f,
                    const char *path, struct ckpt_err *err)
{
    if (!f || f->type == CKPT_ENTRY_DIR)
        return ckpt_err_set(err, CKPT_ENOTFOUND, "%s: no file '%s'",
                            t->display, path);
    if (f->type == CKPT_ENTRY_FILE)
        return 0;
    const char *what = f->type == CKPT_ENTRY_LINK ? "a symbolic link"
                                                  : "not a regular file";
    char *key = ckpt_tree_key(t, f->path);
    struct stat sb;
    if (key && ckpt_storage_is_local(t->st) && lstat(key, &sb) == 0)
        what = ckpt_local_kind(sb.st_mode);
    free(key);
    /* (the caller names the run) */
    return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is %s, not a regular file;"
                        " not read", path, what);
}

/* Bytes [off, off+len) of f as kept while the archive was listed (its
 * head, or its tail), or NULL. */
static const char *kept(const struct ckpt_tree_file *f, uint64_t off,
                        size_t len)
{
    if (f->content && off + len <= f->content_len)
        return f->content + off;
    if (f->tail && off >= f->tail_off && off + len <= f->size)
        return f->tail + (off - f->tail_off);
    return NULL;
}

int ckpt_tree_read_streams(const struct ckpt_tree *t, const char *path,
                           uint64_t off, size_t len)
{
    const struct ckpt_tree_file *f = ckpt_tree_find(t, path);
    return t->archive != CKPT_ARCHIVE_NONE && f &&
           f->data_offset == CKPT_NO_OFFSET && !kept(f, off, len);
}

int ckpt_tree_read_at(struct ckpt_tree *t, const char *path, uint64_t off,
                      void *buf, size_t len, unsigned *passes,
                      struct ckpt_err *err)
{
    const struct ckpt_tree_file *f = ckpt_tree_find(t, path);
    if (readable(t, f, path, err) != 0)
        return -1;
    if (off > f->size || len > f->size - off)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: '%s' has %llu bytes, "
                            "not %llu", t->display, path,
                            (unsigned long long)f->size,
                            (unsigned long long)(off + len));
    const char *k = kept(f, off, len);
    if (k) {
        memcpy(buf, k, len);
        return 0;
    }
    if (ckpt_tree_read_streams(t, path, off, len)) {
        if (passes)
            (*passes)++;
        return restream_at(t, path, off, buf, len, err);
    }
    char *key = ckpt_tree_key(t, f->path);
    uint64_t at = key ? off : f->data_offset + off;
    size_t got = 0;
    int rc = ckpt_storage_read(t->st, key ? key : t->key, at, buf, len, &got,
                               err);
    free(key);
    if (rc == 0 && got != len)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "%s: '%s' is shorter than "
                          "listed", t->display, path);
    return rc;
}

int ckpt_tree_read_head(struct ckpt_tree *t, const char *path, size_t max,
                        char **data, size_t *len, int *truncated,
                        struct ckpt_err *err)
{
    const struct ckpt_tree_file *f = ckpt_tree_find(t, path);
    if (readable(t, f, path, err) != 0)
        return -1;
    size_t n = f->size < max ? (size_t)f->size : max;
    *truncated = f->size > n;
    if (f->content && f->content_len >= n) {
        *data = ckpt_xmalloc(n + 1);
        memcpy(*data, f->content, n);
        (*data)[n] = '\0';
        *len = n;
        return 0;
    }
    if (t->archive != CKPT_ARCHIVE_NONE && f->data_offset == CKPT_NO_OFFSET)
        return restream(t, path, n, data, len, err);
    return read_range(t, f, n, data, len, err);
}

int ckpt_tree_read(struct ckpt_tree *t, const char *path, size_t max,
                   char **data, size_t *len, struct ckpt_err *err)
{
    const struct ckpt_tree_file *f = ckpt_tree_find(t, path);
    if (f && f->type != CKPT_ENTRY_DIR && f->size > max)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: '%s' is too large (%llu "
                            "bytes)", t->display, path,
                            (unsigned long long)f->size);
    int truncated;
    return ckpt_tree_read_head(t, path, max, data, len, &truncated, err);
}
