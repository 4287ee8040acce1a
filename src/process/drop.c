/*
 * drop.c - what `ckpt process` leaves out of DEST (docs/commands/
 * process.md "Leaving files out"): steps dropped on purpose
 * (--drop-sharded, --drop-incomplete), deleted with the source once
 * everything uploaded was verified, and files the --include/--exclude
 * rules leave out, which are never deleted (never delete a file that was
 * not uploaded and verified).
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/run.h"
#include "ckpt/upload.h"
#include "ckpt/util.h"
#include "process_int.h"

static void add_dir(struct proc_drops *d, const char *dir)
{
    d->dirs = ckpt_xreallocarray(d->dirs, d->n + 1, sizeof(*d->dirs));
    d->dirs[d->n++] = ckpt_xstrdup(dir);
}

/* A complete -unsharded copy of step in the run. */
static int has_unsharded(const struct ckpt_run *run, int64_t step)
{
    for (size_t i = 0; i < run->n; i++)
        if (run->ckpts[i].unsharded_name && run->ckpts[i].step == step &&
            run->ckpts[i].complete)
            return 1;
    return 0;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const struct proc_drop_file *)a)->rel,
                  ((const struct proc_drop_file *)b)->rel);
}

/* Every file of the dropped steps, as the judging listed it: recorded
 * with its version now, and marked changed when that is no longer what
 * was listed (its size or mtime moved while the run was judged). */
static void record_files(struct proc_drops *d, const struct ckpt_tree *t)
{
    for (size_t k = 0; k < d->n; k++) {
        size_t lo, hi;
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
            struct ckpt_err err = CKPT_ERR_INIT;
            if (ckpt_srcver_get(key, 0, &x->v, &err) != 0)
                x->changed = ckpt_xstrdup(err.msg);
            else if (!x->v.regular || x->v.size != f->size ||
                     x->v.mtime_ns / 1000000000 != f->mtime)
                x->changed = ckpt_xstrdup("changed while its step was "
                                          "judged");
            free(key);
        }
    }
    if (d->nfiles)
        ckpt_sort(d->files, d->nfiles, sizeof(*d->files), cmp_file);
    d->local = 1;
}

int proc_drop_unchanged(const struct proc_drops *d, const char *key,
                        const char *rel, struct ckpt_err *err)
{
    if (!d->local)
        return 0;
    struct proc_drop_file want = { (char *)rel, { 0 }, NULL };
    const struct proc_drop_file *f =
        d->nfiles ? bsearch(&want, d->files, d->nfiles, sizeof(*d->files),
                            cmp_file) : NULL;
    struct ckpt_srcver now;
    const char *what;
    if (!f)
        return ckpt_err_set(err, CKPT_EUNSAFE, "written after its step was "
                            "judged");
    if (f->changed)
        return ckpt_err_set(err, CKPT_EUNSAFE, "%s", f->changed);
    if (ckpt_srcver_get(key, 0, &now, err) != 0)
        return -1;
    if ((what = ckpt_srcver_diff(&f->v, &now)) != NULL)
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
        int drop = incomplete && !c->complete && !c->unknown;
        if (sharded && c->complete && !c->unsharded_name &&
            c->format != CKPT_FMT_UNSHARDED &&
            (has_unsharded(&run, c->step) ||
             made_unsharded(made, nmade, c->step)))
            drop = 1;
        if (drop)
            add_dir(d, c->dir);
    }
    /* Recorded right after judging: what is deleted later must be this. */
    if (d->n && tree->archive == CKPT_ARCHIVE_NONE &&
        ckpt_storage_is_local(st))
        record_files(d, tree);
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
