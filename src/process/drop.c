/*
 * drop.c - what `ckpt process` leaves out of DEST (docs/commands/
 * process.md "Leaving files out"): steps dropped on purpose
 * (--drop-sharded, --drop-incomplete), deleted with the source once
 * everything uploaded was verified, and files the --include/--exclude
 * rules leave out, which are never deleted (never delete a file that was
 * not uploaded and verified).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dcp.h"
#include "ckpt/run.h"
#include "ckpt/upload.h"
#include "ckpt/unshard.h"
#include "ckpt/util.h"
#include "process_int.h"

static void add_dir(struct proc_drops *d, const char *dir)
{
    d->dirs = ckpt_xreallocarray(d->dirs, d->n + 1, sizeof(*d->dirs));
    d->dirs[d->n++] = ckpt_xstrdup(dir);
}

/* What an OLMo step's unsharded copy holds when it holds the whole step
 * (OLMo's unsharder, ckpt's own output): the model, the optimizer and
 * the trainer state, one file of each group, the last two where the step
 * holds them. */
static const char *const whole_groups[][3] = {
    { "model.pt", "model.safetensors", NULL },
    { "optim.pt", "optim.safetensors", NULL },
    { "train.pt", NULL, NULL },
};

static int holds_group(const struct ckpt_tree *tree, const char *dir,
                       const char *const *names)
{
    int found = 0;
    for (int i = 0; !found && i < 3 && names[i]; i++) {
        char *p = ckpt_path_join(dir, names[i]);
        const struct ckpt_tree_file *f = ckpt_tree_find(tree, p);
        found = f && f->type == CKPT_ENTRY_FILE;
        free(p);
    }
    return found;
}

/* 1 when a DCP .metadata below step c stores optimizer state (an
 * "optim" key), or cannot be read (taken as holding it); 0 when none
 * does. */
static int dcp_has_optim(struct ckpt_tree *tree,
                         const struct ckpt_checkpoint *c)
{
    size_t lo, hi;
    int found = 0;
    ckpt_tree_range(tree, c->dir, &lo, &hi);
    for (size_t i = lo; !found && i < hi; i++) {
        const char *p = tree->files[i].path;
        const char *b = strrchr(p, '/');
        if (strcmp(b ? b + 1 : p, ".metadata"))
            continue;
        char *data = NULL;
        size_t len = 0;
        struct ckpt_err e = CKPT_ERR_INIT;
        struct ckpt_dcp_meta *m = ckpt_dcp_meta_new();
        if (ckpt_tree_read(tree, p, 64u << 20, &data, &len, &e) != 0 ||
            ckpt_dcp_meta_add(m, data, len, p, &e) != 0)
            found = 1;
        for (size_t k = 0; !found && k < m->n; k++)
            found = !strncmp(m->entries[k].fqn, "optim", 5);
        ckpt_dcp_meta_free(m);
        free(data);
    }
    return found;
}

/* 1 when a file below step c has a path (in the step) starting with
 * what: "train" (train/rank0.pt, train.pt), "optim" (optim/rank0.pt). */
static int step_holds(const struct ckpt_tree *tree,
                      const struct ckpt_checkpoint *c, const char *what)
{
    size_t lo, hi, n = strlen(c->dir);
    ckpt_tree_range(tree, c->dir, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const char *rel = tree->files[i].path + n + (n ? 1 : 0);
        if (!strncmp(rel, what, strlen(what)))
            return 1;
    }
    return 0;
}

/* 1 when an -unsharded copy of step c in the run holds all the step
 * does: complete, an OLMo step's, with the model, and the optimizer and
 * the trainer state where the step holds them (as OLMo's unsharder and
 * ckpt write them). A copy of the weights alone (a model-only or HF
 * export) holds less: what a drop deletes would be gone. Other layouts'
 * copies in the run are never taken for the step (ckpt's own output,
 * made by this pass, is). */
static int has_whole_unsharded(struct ckpt_tree *tree,
                               const struct ckpt_run *run,
                               const struct ckpt_checkpoint *c)
{
    if (c->format != CKPT_FMT_DCP && c->format != CKPT_FMT_OLMO_LEGACY &&
        c->format != CKPT_FMT_OLMO_LOCAL)
        return 0;
    /* OLMo's legacy rank files hold the model, optimizer and trainer
     * state each: a copy holds all three or less than the step. */
    int legacy = c->format == CKPT_FMT_OLMO_LEGACY;
    int need[3] = { 1, legacy || step_holds(tree, c, "optim"),
                    legacy || step_holds(tree, c, "train") };
    if (c->format == CKPT_FMT_DCP)
        need[1] = dcp_has_optim(tree, c);
    for (size_t i = 0; i < run->n; i++) {
        const struct ckpt_checkpoint *u = &run->ckpts[i];
        if (!u->unsharded_name || u->step != c->step || !u->complete)
            continue;
        int all = 1;
        for (size_t g = 0; all && g < 3; g++)
            all = !need[g] || holds_group(tree, u->dir, whole_groups[g]);
        if (all)
            return 1;
    }
    return 0;
}

/* An -unsharded copy of step in the run, whatever it holds. */
static int has_unsharded(const struct ckpt_run *run, int64_t step)
{
    for (size_t i = 0; i < run->n; i++)
        if (run->ckpts[i].unsharded_name && run->ckpts[i].step == step)
            return 1;
    return 0;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const struct proc_drop_file *)a)->rel,
                  ((const struct proc_drop_file *)b)->rel);
}

struct listed {
    char **names;
    uint64_t *sizes;
    int64_t *mtimes;
    char **etags;
    size_t n;
};

static int listed_cb(void *ud, const struct ckpt_entry *e)
{
    struct listed *l = ud;
    if (e->type != CKPT_ENTRY_FILE)
        return 0;
    l->names = ckpt_xreallocarray(l->names, l->n + 1, sizeof(char *));
    l->sizes = ckpt_xreallocarray(l->sizes, l->n + 1, sizeof(uint64_t));
    l->mtimes = ckpt_xreallocarray(l->mtimes, l->n + 1, sizeof(int64_t));
    l->etags = ckpt_xreallocarray(l->etags, l->n + 1, sizeof(char *));
    l->names[l->n] = ckpt_xstrdup(e->name);
    l->sizes[l->n] = e->size;
    l->mtimes[l->n] = e->mtime;
    l->etags[l->n++] = ckpt_xstrdup(e->etag ? e->etag : "");
    return 0;
}

static void listed_release(struct listed *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->names[i]);
        free(l->etags[i]);
    }
    free(l->names);
    free(l->sizes);
    free(l->mtimes);
    free(l->etags);
}

/* An object-storage file of a dropped step: its ETag from a listing of
 * the step taken right after judging; changed when that listing no
 * longer says what the judged one did. */
static void record_remote(struct proc_drop_file *x, const struct listed *l,
                          const char *rel, const struct ckpt_tree_file *f)
{
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->names[i], rel) != 0)
            continue;
        x->v.size = l->sizes[i];
        x->v.regular = 1;
        snprintf(x->etag, sizeof(x->etag), "%s", l->etags[i]);
        if (l->sizes[i] != f->size || l->mtimes[i] != f->mtime)
            x->changed = ckpt_xstrdup("changed while its step was judged");
        return;
    }
    x->changed = ckpt_xstrdup("gone while its step was judged");
}

static void record_local(struct proc_drop_file *x, const char *key,
                         const struct ckpt_tree_file *f)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_srcver_get(key, 0, &x->v, &err) != 0)
        x->changed = ckpt_xstrdup(err.msg);
    else if (!x->v.regular || x->v.size != f->size ||
             x->v.mtime_ns / 1000000000 != f->mtime)
        x->changed = ckpt_xstrdup("changed while its step was judged");
}

/* Every file of the dropped steps, as the judging listed it: recorded
 * with its version now (a local file's stat, an object's ETag from a
 * listing of the step), and marked changed when that is no longer what
 * was listed (its size or mtime moved while the run was judged). */
static void record_files(struct proc_drops *d, struct ckpt_storage *st,
                         const struct ckpt_tree *t)
{
    int local = ckpt_storage_is_local(st);
    for (size_t k = 0; k < d->n; k++) {
        size_t lo, hi;
        struct listed l = { NULL, NULL, NULL, NULL, 0 };
        char *dkey = ckpt_tree_key(t, d->dirs[k]);
        struct ckpt_err err = CKPT_ERR_INIT;
        int lrc = local ? 0 : ckpt_storage_list(st, dkey, CKPT_LIST_RECURSIVE,
                                                listed_cb, &l, &err);
        free(dkey);
        ckpt_tree_range(t, d->dirs[k], &lo, &hi);
        for (size_t i = lo; i < hi; i++) {
            const struct ckpt_tree_file *f = &t->files[i];
            if (f->type == CKPT_ENTRY_DIR)
                continue;
            d->files = ckpt_xreallocarray(d->files, d->nfiles + 1,
                                          sizeof(*d->files));
            struct proc_drop_file *x = &d->files[d->nfiles++];
            memset(x, 0, sizeof(*x));
            x->rel = ckpt_xstrdup(f->path);
            char *key = ckpt_tree_key(t, f->path);
            if (local)
                record_local(x, key, f);
            else if (lrc != 0)
                x->changed = ckpt_xstrdup(err.msg);
            else
                record_remote(x, &l, ckpt_tree_rel(t, i, d->dirs[k]), f);
            free(key);
        }
        listed_release(&l);
    }
    if (d->nfiles)
        ckpt_sort(d->files, d->nfiles, sizeof(*d->files), cmp_file);
    d->recorded = 1;
    d->st = st;
}

/* What differs between the object now and as recorded, or NULL. */
static const char *remote_diff(const struct proc_drop_file *f,
                               const struct ckpt_stat *sb)
{
    if (sb->type != CKPT_ENTRY_FILE)
        return "type";
    if (sb->size != f->v.size)
        return "size";
    if (*f->etag && *sb->etag && strcmp(f->etag, sb->etag) != 0)
        return "ETag";
    return NULL;
}

int proc_drop_unchanged(const struct proc_drops *d, const char *key,
                        const char *rel, struct ckpt_err *err)
{
    if (!d->recorded)
        return 0;
    struct proc_drop_file want = { (char *)rel, { 0 }, "", NULL };
    const struct proc_drop_file *f =
        d->nfiles ? bsearch(&want, d->files, d->nfiles, sizeof(*d->files),
                            cmp_file) : NULL;
    struct ckpt_srcver now;
    struct ckpt_stat sb;
    const char *what;
    if (!f)
        return ckpt_err_set(err, CKPT_EUNSAFE, "written after its step was "
                            "judged");
    if (f->changed)
        return ckpt_err_set(err, CKPT_EUNSAFE, "%s", f->changed);
    if (!ckpt_storage_is_local(d->st)) {
        if (ckpt_storage_stat(d->st, key, &sb, err) != 0)
            return err->code == CKPT_ENOTFOUND ? 0 : -1;
        what = remote_diff(f, &sb);
    } else {
        if (ckpt_srcver_get(key, 0, &now, err) != 0)
            return -1;
        what = ckpt_srcver_diff(&f->v, &now);
    }
    if (what)
        return ckpt_err_set(err, CKPT_EUNSAFE, "changed since its step was "
                            "judged (%s differs)", what);
    return 0;
}

static int made_unsharded(const int64_t *made, size_t nmade, int64_t step)
{
    for (size_t i = 0; i < nmade; i++)
        if (made[i] == step)
            return 1;
    return 0;
}

/* --drop-sharded keeps step name whole: why, for the run's row. */
static void note_partial(struct proc_drops *d, const char *name,
                         const char *why)
{
    char *n = d->partial ? ckpt_xasprintf("%s; %s: %s", d->partial, name,
                                          why)
                         : ckpt_xasprintf("not dropped: %s: %s", name, why);
    free(d->partial);
    d->partial = n;
}

int proc_drops_find(struct proc_drops *d, struct ckpt_storage *st,
                    const char *key, uint64_t max_archive, int sharded,
                    int incomplete, const int64_t *made, size_t nmade,
                    struct ckpt_err *err)
{
    memset(d, 0, sizeof(*d));
    if (!sharded && !incomplete)
        return 0;
    struct ckpt_stat sb;
    enum ckpt_load_status ls;
    struct ckpt_tree *tree = NULL;
    struct ckpt_run run;
    if (ckpt_run_load(st, key, max_archive, &sb, &ls, &tree, &run, err)
        != 0)
        return -1;
    if (ls != CKPT_LOAD_OK)
        return ckpt_err_set(err, CKPT_EUNSAFE, "cannot read its steps to "
                            "drop them");
    for (size_t i = 0; i < run.n; i++) {
        const struct ckpt_checkpoint *c = &run.ckpts[i];
        if (c->root || !*c->dir)
            continue;  /* the run itself: never dropped */
        if (c->format == CKPT_FMT_LIGHTNING)
            continue;  /* files, not step directories: copied as they are */
        int drop = incomplete && !c->complete && !c->unknown;
        /* Only a step its unsharded copy holds whole (a DeepSpeed
         * step's copy is the weights alone): what is dropped is gone. */
        const char *partial = ckpt_unshard_partial(c);
        int sharded_step = sharded && c->complete && !c->unsharded_name &&
                           c->format != CKPT_FMT_UNSHARDED;
        if (sharded_step && (made_unsharded(made, nmade, c->step) ||
                             has_whole_unsharded(tree, &run, c))) {
            if (!partial)
                drop = 1;
            else
                note_partial(d, c->name, partial);
        } else if (sharded_step && has_unsharded(&run, c->step)) {
            note_partial(d, c->name, "its -unsharded copy in the run does "
                         "not hold it all (model, optimizer and trainer "
                         "state)");
        }
        /* A step holding a file its layout does not own (an HF export
         * beside a DCP step) is never dropped: that file would go too. */
        char *unowned = drop ? ckpt_checkpoint_unowned(c) : NULL;
        if (unowned)
            note_partial(d, c->name, unowned);
        else if (drop)
            add_dir(d, c->dir);
        free(unowned);
    }
    /* Recorded right after judging: what is deleted later must be this. */
    if (d->n && tree->archive == CKPT_ARCHIVE_NONE)
        record_files(d, st, tree);
    ckpt_run_release(&run);
    ckpt_tree_free(tree);
    return 0;
}

void proc_drops_release(struct proc_drops *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->dirs[i]);
    free(d->dirs);
    for (size_t i = 0; i < d->nfiles; i++) {
        free(d->files[i].rel);
        free(d->files[i].changed);
    }
    free(d->files);
    free(d->partial);
    memset(d, 0, sizeof(*d));
}

int proc_pick(const struct ckpt_filter *f, const struct proc_drops *d,
              const char *rel)
{
    /* The rules first: a file they leave out is never deleted. */
    if (!ckpt_filter_match(f, rel))
        return CKPT_PICK_LEAVE;
    for (size_t i = 0; d && i < d->n; i++) {
        size_t n = strlen(d->dirs[i]);
        if (!strncmp(rel, d->dirs[i], n) && rel[n] == '/')
            return CKPT_PICK_DROP;
    }
    return CKPT_PICK_COPY;
}
