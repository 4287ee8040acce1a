/*
 * account.c - delete by accounting (docs/reliability.md, "Delete by
 * accounting"): a run is bad only when every file in it is accounted for,
 * never because ckpt found no complete checkpoint where it looked. A file
 * is accounted for when it is
 *  - a file of a step-0 checkpoint, or one its layout owns (or small
 *    debris) in a checkpoint proven incomplete (judge.c records the first
 *    other one as the checkpoint's `foreign`);
 *  - run debris: a small regular file that is not weights-like, anywhere;
 *    any size in the debris directories and for log-like names;
 *  - OLMo's `latest` / `latest-unsharded` link at the top (a link: its
 *    removal loses no bytes).
 * Anything else (a weights-like or large file outside a judged checkpoint,
 * a FIFO, socket, device or other symlink) is not, and the run is
 * `error: cannot account for FILE`.
 *
 * Also here: "one run is one run". A directory that holds runs is never
 * itself judged as one; run_holds_run finds the first run below the top.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/util.h"
#include "run_int.h"

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int ends(const char *s, const char *suffix)
{
    return ckpt_str_endswith(s, suffix);
}

int ckpt_weights_like(const char *path)
{
    static const char *const exts[] = {
        ".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".distcp",
        ".msgpack", ".h5", ".hdf5", ".onnx", ".gguf", ".pkl", ".pickle",
        ".npy", ".npz", ".tar", ".tgz", ".zip", ".metadata", NULL
    };
    static const char *const names[] = {
        ".metadata", "_CHECKPOINT_METADATA", "_METADATA", "manifest.ocdbt",
        ".zgroup", ".zarray", "zarr.json", "commit_success.txt", NULL
    };
    const char *b = base_of(path);
    for (const char *const *n = names; *n; n++)
        if (!strcmp(b, *n))
            return 1;
    /* (matched without regard to case: `MODEL.PT` is a model too) */
    size_t bl = strlen(b);
    for (const char *const *e = exts; *e; e++) {
        size_t el = strlen(*e);
        if (bl > el && !strcasecmp(b + bl - el, *e))
            return 1;
    }
    /* any compressed tar, known to ckpt or not: `*.tar.*` */
    for (const char *p = b; (p = strcasestr(p, ".tar.")) != NULL; p++)
        if (p[5])
            return 1;
    return 0;
}

/* Directories whose files are debris of any size (weights-like ones
 * aside): W&B's run logs, OLMo's data order, training logs. */
static int in_debris_dir(const char *path)
{
    static const char *const dirs[] = { "wandb/", "train_data/", "logs/",
                                        NULL };
    for (const char *const *d = dirs; *d; d++)
        if (ckpt_str_startswith(path, *d))
            return 1;
    return 0;
}

static int log_like(const char *path)
{
    const char *b = base_of(path);
    return ends(b, ".log") || ends(b, ".out") || ends(b, ".err") ||
           ends(b, ".jsonl") || ckpt_str_startswith(b, "events.out.tfevents.");
}

int ckpt_debris(const char *path, const struct ckpt_tree_file *f)
{
    if (f->type != CKPT_ENTRY_FILE)
        return 0;
    /* OLMo's data indices are .npy, and can be GBs. */
    if (ckpt_str_startswith(path, "train_data/") && ends(path, ".npy"))
        return 1;
    if (ckpt_weights_like(path))
        return 0;
    return f->size < CKPT_DEBRIS_MAX || in_debris_dir(path) ||
           log_like(path);
}

/* The target of link f of t (malloced), or NULL: an archive's as stored,
 * a local directory's by readlink. */
static char *link_target(const struct ckpt_tree *t,
                         const struct ckpt_tree_file *f)
{
    if (f->symlink)
        return ckpt_xstrdup(f->symlink);
    if (t->archive != CKPT_ARCHIVE_NONE || !t->st ||
        !ckpt_storage_is_local(t->st))
        return NULL;
    char *p = ckpt_path_join(t->key, f->path), buf[4096];
    ssize_t n = readlink(p, buf, sizeof(buf) - 1);
    free(p);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    return ckpt_xstrdup(buf);
}

/* OLMo's pointer to its newest step, `latest` (`latest-unsharded`) at
 * the top naming one of the run's checkpoint directories by a relative
 * name: removing that link loses no bytes. */
static int olmo_latest_link(const struct ckpt_run *run,
                            const struct ckpt_tree *t, const char *path,
                            const struct ckpt_tree_file *f)
{
    if (f->type != CKPT_ENTRY_LINK || f->hardlink ||
        (strcmp(path, "latest") && strcmp(path, "latest-unsharded")))
        return 0;
    char *to = link_target(t, f);
    if (!to)
        return 0;
    char *n = to;
    while (!strncmp(n, "./", 2))
        n += 2;
    size_t len = strlen(n);
    while (len && n[len - 1] == '/')
        n[--len] = '\0';
    int ok = 0;
    for (size_t i = 0; len && !strchr(n, '/') && i < run->n && !ok; i++)
        ok = !strcmp(run->ckpts[i].dir, n);
    free(to);
    return ok;
}

/* The checkpoint of run that holds path, or NULL. */
static const struct ckpt_checkpoint *holder(const struct ckpt_run *run,
                                            const char *path)
{
    const struct ckpt_checkpoint *best = NULL;
    size_t bl = 0;
    for (size_t i = 0; i < run->n; i++) {
        const struct ckpt_checkpoint *c = &run->ckpts[i];
        size_t dl = strlen(c->dir);
        int in = !dl || (!strncmp(path, c->dir, dl) &&
                         (path[dl] == '/' || path[dl] == '\0'));
        if (in && (!best || dl > bl)) {
            best = c;
            bl = dl;
        }
    }
    return best;
}

static void add(struct ckpt_run *run, const char *path, size_t n)
{
    if (!n)
        return;
    if (!run->unaccounted || strcmp(path, run->unaccounted) < 0) {
        free(run->unaccounted);
        run->unaccounted = ckpt_xstrdup(path);
    }
    run->nunaccounted += n;
}

int ckpt_run_unaccounted_each(const struct ckpt_run *run,
                               const struct ckpt_tree *t,
                               ckpt_unaccounted_fn fn, void *ud)
{
    int rc = 0;
    for (size_t i = 0; i < t->n && !rc; i++) {
        const struct ckpt_tree_file *f = &t->files[i];
        if (f->type != CKPT_ENTRY_DIR && !holder(run, f->path) &&
            !ckpt_debris(f->path, f) && !olmo_latest_link(run, t, f->path, f))
            rc = fn(ud, f->path, f->size, 1);
    }
    /* In a checkpoint: a step-0 one accounts for every regular file, one
     * proven incomplete for what its layout owns and debris (judge.c
     * found the rest); a complete or unknown one keeps the run, or makes
     * it an error, whatever it holds. */
    for (size_t i = 0; i < run->n && !rc; i++) {
        const struct ckpt_checkpoint *c = &run->ckpts[i];
        const char *p = NULL;
        size_t n = 0;
        if (c->step == 0 && !c->root && c->special) {
            p = c->special;
            n = c->nspecial;
        } else if ((c->step != 0 || c->root) && !c->complete &&
                   !c->unknown && c->foreign) {
            p = c->foreign;
            n = c->nforeign;
        }
        const struct ckpt_tree_file *f = p ? ckpt_tree_find(t, p) : NULL;
        if (p)
            rc = fn(ud, p, f ? f->size : 0, n);
    }
    return rc;
}

static int add_cb(void *ud, const char *path, uint64_t size, size_t n)
{
    (void)size;
    add(ud, path, n);
    return 0;
}

void ckpt_run_account(struct ckpt_run *run, const struct ckpt_tree *t)
{
    free(run->unaccounted);
    run->unaccounted = NULL;
    run->nunaccounted = 0;
    ckpt_run_unaccounted_each(run, t, add_cb, run);
}

/* --- one run is one run ------------------------------------------------ */

/* Is dir (a directory of t below the top) inside one of run's
 * checkpoints, or in a debris directory? Then what it holds is not a
 * run. */
static int not_a_run_place(const struct ckpt_run *run, const char *dir)
{
    static const char *const debris[] = { "wandb/", "train_data/", "logs/",
                                          NULL };
    char *d = ckpt_xasprintf("%s/", dir);
    int skip = 0;
    for (const char *const *n = debris; *n && !skip; n++)
        skip = ckpt_str_startswith(d, *n);
    free(d);
    return skip || holder(run, dir) != NULL;
}

/* A name a checkpoint directory goes by, bare integers aside (Slurm's
 * job ids name runs: a bare number proves nothing by itself). */
static int ckpt_named(const char *name)
{
    int64_t step;
    int uns;
    for (const char *p = name; *p; p++)
        if (!isdigit((unsigned char)*p))
            return ckpt_checkpoint_name(name, &step, &uns);
    return 0;
}

static int is_dir_of(const struct ckpt_tree *t, const char *dir,
                     const char *name)
{
    char *p = ckpt_path_join(dir, name);
    int r = ckpt_tree_has_dir(t, p);
    free(p);
    return r;
}

/* The run that directory d (below the top) with entry x (path's rest
 * after d) shows, malloced, or NULL: d holds config.yaml beside wandb/
 * or train_data/, or a checkpoint directory (directly, or in its own
 * checkpoints/ or checkpoint/). */
static char *run_at(const struct ckpt_tree *t, const char *d, const char *x)
{
    if (!strcmp(x, "config.yaml") &&
        (is_dir_of(t, d, "wandb") || is_dir_of(t, d, "train_data")))
        return ckpt_xstrdup(d);
    const char *xe = strchr(x, '/');
    if (!xe)
        return NULL;
    char *xn = ckpt_xstrndup(x, (size_t)(xe - x));
    int named = ckpt_named(xn);
    free(xn);
    if (!named)
        return NULL;
    const char *b = base_of(d);
    if (strcmp(b, "checkpoints") != 0 && strcmp(b, "checkpoint") != 0)
        return ckpt_xstrdup(d);
    return b == d ? NULL : ckpt_xstrndup(d, (size_t)(b - 1 - d));
}

/* run_at() for d's entry x, and for x inside d's own checkpoints/ or
 * checkpoint/ directory (a run keeps its steps there too). */
static int shows_run(const struct ckpt_tree *t, const char *d, const char *x)
{
    char *r = run_at(t, d, x);
    for (const char *const *c = (const char *const[]){ "checkpoints/",
                                                       "checkpoint/", NULL };
         !r && *c; c++) {
        if (!ckpt_str_startswith(x, *c))
            continue;
        char *sub = ckpt_xstrndup(*c, strlen(*c) - 1);
        char *sd = ckpt_path_join(d, sub);
        r = run_at(t, sd, x + strlen(*c));
        free(sd);
        free(sub);
    }
    int hit = r != NULL;
    free(r);
    return hit;
}

int ckpt_tree_dir_is_run(const struct ckpt_tree *t, const char *dir)
{
    size_t lo, hi, dl = strlen(dir);
    ckpt_tree_range(t, dir, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const char *p = t->files[i].path;
        if (strncmp(p, dir, dl) != 0 || p[dl] != '/')
            continue;
        if (shows_run(t, dir, p + dl + 1))
            return 1;
    }
    return 0;
}

char *ckpt_run_holds_run(const struct ckpt_run *run, const struct ckpt_tree *t)
{
    char *found = NULL;
    for (size_t i = 0; i < t->n && !found; i++) {
        const char *p = t->files[i].path;
        for (const char *s = strchr(p, '/'); s && !found;
             s = strchr(s + 1, '/')) {
            char *d = ckpt_xstrndup(p, (size_t)(s - p));
            char *r = run_at(t, d, s + 1);
            if (r && !not_a_run_place(run, r))
                found = r;
            else
                free(r);
            free(d);
        }
    }
    return found;
}
