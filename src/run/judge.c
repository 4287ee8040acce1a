/*
 * judge.c - which format a checkpoint directory holds and whether it is
 * complete: the trainer table (src/trainers/trainers.c) names the
 * trainer whose checkpoint it is, and that trainer's judge (the rules of
 * SPEC's table, src/trainers/<name>/judge.c) gives the verdict. Here is
 * what the dispatch adds to every trainer's verdict: files that no
 * trainer owns (foreign, special), unfinished markers, an OLMo step's
 * unsharded copy. The helpers the judges share (trainers/judge.h) are in
 * src/trainers/judge.c. Reasons for "incomplete" name the missing piece.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "run_int.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

/* NeMo marks an unfinished checkpoint with a sibling "<name>-unfinished",
 * and so does `ckpt unshard` while it writes to object storage. A root
 * checkpoint (`ckpt ls s3://b/out`) has no sibling in the tree: its
 * marker is looked up in the storage. */
static int root_unfinished(const struct judge_view *v)
{
    const char *k = v->t->key;
    size_t n = k ? strlen(k) : 0;
    if (v->t->archive != CKPT_ARCHIVE_NONE || !v->t->st || !n ||
        k[n - 1] == '/' || !strcmp(k, "."))
        return 0;
    char *p = ckpt_xasprintf("%s-unfinished", k);
    struct ckpt_stat sb;
    struct ckpt_err err;
    int r = ckpt_storage_stat(v->t->st, p, &sb, &err) == 0;
    free(p);
    return r;
}

static int nemo_unfinished(const struct judge_view *v)
{
    if (!*v->dir)
        return root_unfinished(v);
    char *p = ckpt_xasprintf("%s-unfinished", v->dir);
    int r = ckpt_tree_find(v->t, p) != NULL;
    free(p);
    return r;
}


enum ckpt_format ckpt_judge_format(const struct ckpt_tree *t,
                                   const char *dir)
{
    struct judge_view v = { (struct ckpt_tree *)t, dir, 0, 0, 0 };
    ckpt_tree_range(t, dir, &v.lo, &v.hi);
    if (v.lo >= v.hi)
        return CKPT_FMT_UNKNOWN;
    const struct trainer *L = trainer_find(&v);
    return L->format_of ? L->format_of(&v) : L->format;
}

/* Record in c the files of v that L's judgement does not cover: not
 * regular (special), or neither owned by L nor debris (foreign). Paths
 * are the run's. */
static void find_foreign(const struct judge_view *v, const struct trainer *L,
                         struct ckpt_checkpoint *c)
{
    for (size_t i = v->lo; i < v->hi; i++) {
        const struct ckpt_tree_file *f = &v->t->files[i];
        if (f->type == CKPT_ENTRY_DIR)
            continue;
        const char *rel = v->one_file ? "" : judge_rel(v, i);
        int special = f->type != CKPT_ENTRY_FILE;
        if (special) {
            if (!c->nspecial++)
                c->special = ckpt_xstrdup(f->path);
        } else if (v->one_file || !L->owns || L->owns(v, rel) ||
                   ckpt_debris(f->path, f)) {
            continue;
        }
        if (!c->nforeign++)
            c->foreign = ckpt_xstrdup(f->path);
    }
}

int ckpt_judge_recognised(const struct ckpt_tree *t, const char *dir)
{
    struct judge_view v = { (struct ckpt_tree *)t, dir, 0, 0, 0 };
    ckpt_tree_range(t, dir, &v.lo, &v.hi);
    if (v.lo >= v.hi)
        return 0;
    const struct trainer *L = trainer_find(&v);
    return L->named ? L->named(&v) : 1;
}

/* A checkpoint that is one file (Lightning's "epoch=0-step=100.ckpt"):
 * judged as the view of its directory holding that file alone. */
static int judge_one_file(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          const struct ckpt_tree_file *f,
                          struct ckpt_err *err)
{
    const char *slash = strrchr(c->dir, '/');
    char *parent = ckpt_xstrndup(c->dir, slash ? (size_t)(slash - c->dir)
                                               : 0);
    struct judge_view v = { t, parent, (size_t)(f - t->files),
                            (size_t)(f - t->files) + 1, 1 };
    c->size = f->size;
    c->nfiles = 1;
    c->complete = 1;
    const struct trainer *L = trainer_find(&v);
    c->format = L->format;
    int rc = L->judge(&v, c, err);
    find_foreign(&v, L, c);
    free(parent);
    return rc;
}

int ckpt_judge_checkpoint(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          struct ckpt_err *err)
{
    struct judge_view v = { t, c->dir, 0, 0, 0 };
    const struct ckpt_tree_file *f = *c->dir ? ckpt_tree_find(t, c->dir)
                                             : NULL;
    if (f && f->type == CKPT_ENTRY_FILE)
        return judge_one_file(t, c, f, err);
    ckpt_tree_range(t, c->dir, &v.lo, &v.hi);
    for (size_t i = v.lo; i < v.hi; i++) {
        c->size += t->files[i].size;
        c->nfiles += t->files[i].type != CKPT_ENTRY_DIR;
    }
    c->complete = 1;
    if (!c->nfiles) {
        c->format = CKPT_FMT_UNKNOWN;
        return judge_set_why(c, "%s", "empty");
    }
    const struct trainer *L = trainer_find(&v);
    c->format = L->format;
    find_foreign(&v, L, c);
    if (nemo_unfinished(&v))
        judge_set_why(c, "%s", "marked unfinished");
    else if (L->judge(&v, c, err) != 0)
        return -1;   /* (a FIFO it had to read: an error naming it) */
    /* A FIFO, socket, device or link where a file belongs says nothing
     * about the checkpoint (a FIFO has size 0: "empty" would be false
     * proof): whatever the layout concluded, ckpt cannot tell. */
    if (c->special)
        judge_set_unknown(c, "%s is not a regular file", c->special);
    return 0;
}

/* ckpt's unshard writes model.pt, optim.pt and train.pt for an OLMo step;
 * OLMo's own unsharder the same, or model.pt alone (--model-only, which
 * leaves out optimizer and trainer state together): a copy of one with
 * optim.pt but no train.pt was cut short. */
void ckpt_judge_olmo_copy(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          const struct ckpt_checkpoint *src)
{
    struct judge_view v = { t, c->dir, 0, 0, 0 };
    struct judge_view s = { t, src->dir, 0, 0, 0 };
    int olmo = src->format == CKPT_FMT_OLMO_LEGACY ||
               src->format == CKPT_FMT_OLMO_LOCAL ||
               src->format == CKPT_FMT_OLMO_CORE ||
               (src->format == CKPT_FMT_DCP &&
                (judge_get(&s, "model_and_optim/.metadata") ||
                 judge_has_file_like(&s, "model_and_optim", "__",
                                     ".metadata", 0)));
    if (!olmo || !c->complete || c->format != CKPT_FMT_UNSHARDED ||
        t->damage || !judge_get(&v, "model.pt") ||
        !judge_get(&v, "optim.pt") ||
        judge_get(&v, "train.pt"))
        return;
    judge_set_why(c, "%s", "train.pt missing (an OLMo step's unsharded copy "
                           "with optim.pt has train.pt)");
}
