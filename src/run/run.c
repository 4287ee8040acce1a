/*
 * run.c - find the checkpoints of a run and judge them (SPEC table
 * "Run directories and checkpoints").
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/archive.h"
#include "ckpt/run.h"
#include "ckpt/util.h"
#include "run_int.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

/* A bare step number (all digits, not absurdly long), as names.c reads
 * one. */
static int is_bare(const char *name)
{
    size_t n = strlen(name);
    return n && n <= 18 && strspn(name, "0123456789") == n;
}

/* Named the way a checkpoint directory is named (stepN, checkpoint-N,
 * global_stepN, ...; a bare integer too). */
static int is_named(const char *name)
{
    int64_t step;
    int uns;
    return ckpt_checkpoint_name(name, &step, &uns);
}

static int root_marked(const struct ckpt_tree *t);

static int cmp_ckpt(const void *a, const void *b)
{
    const struct ckpt_checkpoint *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void add_ckpt(struct ckpt_run *run, size_t *cap, const char *dir,
                     const char *name, int64_t step, int uns)
{
    for (size_t i = 0; i < run->n; i++)
        if (!strcmp(run->ckpts[i].dir, dir))
            return;
    if (run->n == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        run->ckpts = ckpt_xreallocarray(run->ckpts, *cap,
                                        sizeof(*run->ckpts));
    }
    struct ckpt_checkpoint *c = &run->ckpts[run->n++];
    memset(c, 0, sizeof(*c));
    c->name = ckpt_xstrdup(name);
    c->dir = ckpt_xstrdup(dir);
    c->step = step;
    c->unsharded_name = uns;
}

/* Checkpoints that a trainer keeps where no checkpoint name shows them
 * (the table's list: Lightning's *.ckpt). */
static void find_listed(struct ckpt_run *run, size_t *cap,
                        const struct ckpt_tree_file *f)
{
    size_t n, at;
    int64_t step;
    if (!trainer_list(f, &n, &at, &step))
        return;
    char *dir = ckpt_xstrndup(f->path, n);
    char *name = ckpt_xstrndup(f->path + at, n - at);
    add_ckpt(run, cap, dir, name, step, 0);
    free(dir);
    free(name);
}

/* The directory at a checkpoint's place that file f is in or is: the
 * top of the run, or one level down in checkpoints/ or checkpoint/
 * (torchtitan, HF trainers, accelerate). Its length in f->path and the
 * offset of its name, or 0 for a file at that level. */
static size_t place_dir(const struct ckpt_tree_file *f, size_t *skip)
{
    const char *p = f->path;
    *skip = 0;
    if (ckpt_str_startswith(p, "checkpoints/"))
        *skip = strlen("checkpoints/");
    else if (ckpt_str_startswith(p, "checkpoint/"))
        *skip = strlen("checkpoint/");
    const char *rest = p + *skip;
    const char *slash = strchr(rest, '/');
    /* A file at this level is not a checkpoint directory. */
    if (!slash && f->type != CKPT_ENTRY_DIR)
        return 0;
    return *skip + (slash ? (size_t)(slash - rest) : strlen(rest));
}

static void find_ckpts(struct ckpt_run *run, const struct ckpt_tree *t,
                       size_t *cap)
{
    for (size_t i = 0; i < t->n; i++) {
        find_listed(run, cap, &t->files[i]);
        size_t skip, n = place_dir(&t->files[i], &skip);
        if (!n)
            continue;
        const char *p = t->files[i].path;
        char *name = ckpt_xstrndup(p + skip, n - skip);
        int64_t step;
        int uns;
        if (ckpt_checkpoint_name(name, &step, &uns)) {
            char *dir = ckpt_xstrndup(p, n);
            add_ckpt(run, cap, dir, name, step, uns);
            free(dir);
        }
        free(name);
    }
}

/* Not a checkpoint whatever it holds: debris directories, the
 * containers, the parts of a checkpoint (a step given as a run has them
 * at its top: OLMo's train/ and model_and_optim/, accelerate's
 * pytorch_model_fsdp_0/, Megatron's mp_rank_00/), hidden names (our own
 * temporaries, rename-aside deletes). */
static int never_named(const char *name)
{
    static const char *const names[] = {
        "wandb", "train_data", "logs", "checkpoints", "checkpoint", "train",
        "model", "optim", "model_and_optim", "sharded", NULL
    };
    static const char *const prefixes[] = {
        "pytorch_model_fsdp_", "optimizer_", "mp_rank_", "ocdbt.process_",
        NULL
    };
    if (name[0] == '.')
        return 1;
    for (const char *const *n = names; *n; n++)
        if (!strcmp(name, *n))
            return 1;
    for (const char *const *n = prefixes; *n; n++)
        if (ckpt_str_startswith(name, *n))
            return 1;
    return 0;
}

/* A directory at a checkpoint's place under a name without a step
 * (`final/`, Megatron's `release/`, a DeepSpeed tag `best-model/`, an
 * HF export `hf/`) whose files a layout recognises is a checkpoint too,
 * step unknown (-1): judged, so that a complete one keeps the run and an
 * incomplete one is accounted for. */
static void find_named(struct ckpt_run *run, const struct ckpt_tree *t,
                       size_t *cap)
{
    char *last = NULL;
    for (size_t i = 0; i < t->n; i++) {
        size_t skip, n = place_dir(&t->files[i], &skip);
        const char *p = t->files[i].path;
        if (!n || (last && strlen(last) == n && !strncmp(p, last, n)))
            continue;
        free(last);
        last = ckpt_xstrndup(p, n);
        const char *name = last + skip;
        int64_t step;
        int uns;
        int known = 0;
        for (size_t k = 0; k < run->n && !known; k++)
            known = !strcmp(run->ckpts[k].dir, last);
        if (known || never_named(name) || ckpt_checkpoint_name(name, &step, &uns) ||
            !ckpt_judge_recognised(t, last))
            continue;
        add_ckpt(run, cap, last, name, -1, 0);
        run->ckpts[run->n - 1].named = 1;
    }
    free(last);
}

/* Checkpoint files that make a directory one checkpoint when they sit at
 * its top (what `ckpt unshard DIR` takes as a single checkpoint). Only the
 * top counts: a run holds such names deeper, inside its steps. */
static int root_marked(const struct ckpt_tree *t)
{
    static const char *const marks[] = {
        ".metadata", "__0.metadata", "model_and_optim/.metadata",
        "model_and_optim/__0.metadata", ".zgroup",
        "model/rank0.pt", "model/metadata.json", "model/rank_0.safetensors",
        "_CHECKPOINT_METADATA", "commit_success.txt", "manifest.ocdbt",
        "metadata.yaml", "_METADATA", NULL
    };
    for (const char *const *m = marks; *m; m++) {
        const struct ckpt_tree_file *f = ckpt_tree_find(t, *m);
        if (f && f->type == CKPT_ENTRY_FILE)
            return 1;
    }
    /* A trainer's own names at the top (the table's root): a DeepSpeed
     * tag directory (global_stepN/ given as itself), a Megatron step
     * (legacy mp_rank_TT/ files), torch DCP's HuggingFaceStorageWriter
     * shards or their consolidated form (shards moved to sharded/). */
    struct judge_view v = { (struct ckpt_tree *)t, "", 0, 0, 0 };
    ckpt_tree_range(t, "", &v.lo, &v.hi);
    if (v.lo < v.hi && trainer_root(&v))
        return 1;
    for (size_t i = 0; i < t->n; i++)
        if (t->files[i].type == CKPT_ENTRY_FILE &&
            ckpt_str_startswith(t->files[i].path, "sharded/shard-") &&
            ckpt_str_endswith(t->files[i].path, ".safetensors"))
            return 1;
    /* Any __R_N.distcp: a DCP checkpoint whose .metadata is missing (a
     * save killed before its end) is still that checkpoint, judged
     * incomplete as it is inside a run. */
    for (size_t i = 0; i < t->n; i++) {
        const char *p = t->files[i].path;
        if (t->files[i].type == CKPT_ENTRY_FILE && !strchr(p, '/') &&
            p[0] == '_' && p[1] == '_' && ckpt_str_endswith(p, ".distcp"))
            return 1;
    }
    /* Any rank<N>.pt: an OLMo torch_legacy step whose rank0.pt is the
     * one missing is still that step (unshard then says so). */
    for (size_t i = 0; i < t->n; i++) {
        const char *p = t->files[i].path;
        size_t l = strlen(p);
        if (t->files[i].type == CKPT_ENTRY_FILE && !strchr(p, '/') &&
            l > 7 && !strncmp(p, "rank", 4) && p[4] >= '0' && p[4] <= '9' &&
            !strcmp(p + l - 3, ".pt"))
            return 1;
    }
    return 0;
}

/* The name a root checkpoint goes by: the archive's top directory, else
 * the archive's stem or the directory's base name. */
static char *root_name(const struct ckpt_tree *t)
{
    size_t sl = t->strip ? strlen(t->strip) : 0;
    if (sl > 1)
        return ckpt_xstrndup(t->strip, sl - 1);
    char *base = ckpt_path_basename(t->key);
    if (t->archive == CKPT_ARCHIVE_NONE)
        return base;
    char *stem = ckpt_archive_stem(base);
    free(base);
    return stem;
}

/* A directory (or archive) that holds no checkpoint directories but is
 * itself one (`tar czf ck.tar.gz dcp/`): one checkpoint at "", so that an
 * archive behaves like the directory it contains, and `clean --force` of
 * a checkpoint directory judges the checkpoint instead of "no
 * checkpoint". */
static int add_root(struct ckpt_run *run, struct ckpt_tree *t,
                    struct ckpt_err *err)
{
    if (run->n || !root_marked(t))
        return 0;
    size_t cap = 0;
    char *name = root_name(t);
    int64_t step;
    int uns;
    if (!ckpt_checkpoint_name(name, &step, &uns)) {
        step = -1;
        uns = 0;
    }
    add_ckpt(run, &cap, "", name, step, uns);
    free(name);
    run->ckpts[0].root = 1;
    return ckpt_judge_checkpoint(t, &run->ckpts[0], err);
}

int ckpt_run_root_format(const struct ckpt_tree *t)
{
    struct ckpt_run run;
    size_t cap = 0;
    memset(&run, 0, sizeof(run));
    find_ckpts(&run, t, &cap);
    size_t n = run.n;
    ckpt_run_release(&run);
    if (n || !root_marked(t))
        return -1;
    return (int)ckpt_judge_format(t, "");
}

int ckpt_run_root_whole(struct ckpt_tree *t)
{
    struct ckpt_checkpoint c;
    struct ckpt_err err;
    memset(&c, 0, sizeof(c));
    c.dir = "";
    int whole = ckpt_judge_checkpoint(t, &c, &err) == 0 &&
                c.format == CKPT_FMT_UNSHARDED && c.complete && c.nfiles;
    free(c.why);
    return whole;
}

void ckpt_checkpoint_release(struct ckpt_checkpoint *c)
{
    free(c->name);
    free(c->dir);
    free(c->why);
    free(c->foreign);
    free(c->special);
    free(c->pinned);
    memset(c, 0, sizeof(*c));
}

char *ckpt_checkpoint_unowned(const struct ckpt_checkpoint *c)
{
    if (c->special)
        return ckpt_xasprintf("%s is not a regular file", c->special);
    if (c->foreign)
        return ckpt_xasprintf("cannot account for %s%s", c->foreign,
                              c->nforeign > 1 ? " and more" : "");
    return NULL;
}

void ckpt_run_release(struct ckpt_run *run)
{
    for (size_t i = 0; i < run->n; i++)
        ckpt_checkpoint_release(&run->ckpts[i]);
    free(run->ckpts);
    free(run->unaccounted);
    free(run->holds_run);
    memset(run, 0, sizeof(*run));
}

/* What each -unsharded copy needs depends on the step it was made from,
 * when that step is still in the run. */
static void judge_copies(struct ckpt_run *run, struct ckpt_tree *t)
{
    for (size_t i = 0; i < run->n; i++) {
        struct ckpt_checkpoint *c = &run->ckpts[i];
        for (size_t k = 0; c->unsharded_name && k < run->n; k++)
            if (!run->ckpts[k].unsharded_name &&
                run->ckpts[k].step == c->step && !run->ckpts[k].root)
                ckpt_judge_olmo_copy(t, c, &run->ckpts[k]);
    }
}

int ckpt_run_scan(struct ckpt_run *run, struct ckpt_tree *t,
                  struct ckpt_err *err)
{
    memset(run, 0, sizeof(*run));
    const struct ckpt_tree_file *cfg = ckpt_tree_find(t, "config.yaml");
    run->has_config = cfg && cfg->type == CKPT_ENTRY_FILE;
    run->has_wandb = ckpt_tree_has_dir(t, "wandb");
    run->has_train_data = ckpt_tree_has_dir(t, "train_data");
    for (size_t i = 0; i < t->n; i++) {
        run->size += t->files[i].size;
        run->nfiles += t->files[i].type != CKPT_ENTRY_DIR;
    }
    size_t cap = 0;
    find_ckpts(run, t, &cap);
    /* (a directory that is itself one checkpoint has its parts at its
     * top, an Orbax step its items: none of them is a checkpoint) */
    if (!root_marked(t))
        find_named(run, t, &cap);
    size_t w = 0;
    for (size_t i = 0; i < run->n; i++) {
        struct ckpt_checkpoint *c = &run->ckpts[i];
        if (ckpt_judge_checkpoint(t, c, err) != 0) {
            ckpt_err_prefix(err, "%s", t->display);
            ckpt_run_release(run);
            return -1;
        }
        /* A bare integer is also how Slurm names runs: such a directory is
         * a checkpoint only if it holds one, and is no run (a run with a
         * stray model.safetensors at its top is a run). Otherwise a
         * directory of runs would look like one run full of incomplete
         * checkpoints. The same holds for any directory not named as a
         * checkpoint that holds checkpoint directories (an HF Trainer
         * output_dir: its final model.safetensors beside checkpoint-N/):
         * it is a run inside this one, never one of its checkpoints. */
        if ((is_bare(c->name) || !is_named(c->name)) &&
            (c->format == CKPT_FMT_UNKNOWN ||
             ckpt_tree_dir_is_run(t, c->dir))) {
            ckpt_checkpoint_release(c);
            continue;
        }
        run->ckpts[w++] = *c;
    }
    run->n = w;
    if (add_root(run, t, err) != 0) {
        ckpt_err_prefix(err, "%s", t->display);
        ckpt_run_release(run);
        return -1;
    }
    if (run->n)
        ckpt_sort(run->ckpts, run->n, sizeof(*run->ckpts), cmp_ckpt);
    judge_copies(run, t);
    if (t->archive == CKPT_ARCHIVE_NONE)
        ckpt_run_pins(run, t);
    run->holds_run = ckpt_run_holds_run(run, t);
    ckpt_run_account(run, t);
    return 0;
}

int ckpt_run_looks_like_run(const struct ckpt_run *run)
{
    /* A bare checkpoint directory is not a run: `clean` needs --force for
     * it, as before it was recognised. */
    if (run->holds_run)
        return 0;
    return (run->has_config && (run->has_wandb || run->has_train_data)) ||
           (run->n > 0 && !run->ckpts[0].root);
}

/* A complete checkpoint of a step > 0, a root one, or a named one (its
 * step unknown: it may well be the final one). */
const struct ckpt_checkpoint *ckpt_run_best(const struct ckpt_run *run)
{
    for (size_t i = run->n; i-- > 0;)
        if (run->ckpts[i].complete &&
            (run->ckpts[i].step > 0 || run->ckpts[i].root ||
             run->ckpts[i].named))
            return &run->ckpts[i];
    return NULL;
}

const struct ckpt_checkpoint *ckpt_run_unknown(const struct ckpt_run *run)
{
    for (size_t i = run->n; i-- > 0;)
        if (run->ckpts[i].unknown &&
            (run->ckpts[i].step != 0 || run->ckpts[i].root))
            return &run->ckpts[i];
    return NULL;
}

int ckpt_run_load(struct ckpt_storage *st, const char *key,
                  uint64_t max_archive, struct ckpt_stat *sb,
                  enum ckpt_load_status *status, struct ckpt_tree **tree,
                  struct ckpt_run *run, struct ckpt_err *err)
{
    return ckpt_run_load_flags(st, key, max_archive, 0, sb, status, tree,
                               run, err);
}

int ckpt_run_load_flags(struct ckpt_storage *st, const char *key,
                        uint64_t max_archive, unsigned flags,
                        struct ckpt_stat *sb, enum ckpt_load_status *status,
                        struct ckpt_tree **tree, struct ckpt_run *run,
                        struct ckpt_err *err)
{
    *tree = NULL;
    *status = CKPT_LOAD_OK;
    if (ckpt_storage_stat(st, key, sb, err) != 0)
        return -1;
    if (sb->type == CKPT_ENTRY_FILE) {
        if (ckpt_archive_kind_of(key) == CKPT_ARCHIVE_NONE) {
            *status = CKPT_LOAD_NOT_RUN_FILE;
            return 0;
        }
        if (max_archive && sb->size > max_archive) {
            *status = CKPT_LOAD_TOO_LARGE;
            return 0;
        }
    } else if (sb->type != CKPT_ENTRY_DIR) {
        *status = CKPT_LOAD_NOT_RUN_FILE;
        return 0;
    }
    if (ckpt_tree_load_flags(tree, st, key, NULL, flags, err) != 0)
        return -1;
    if (ckpt_run_scan(run, *tree, err) != 0) {
        ckpt_tree_free(*tree);
        *tree = NULL;
        return -1;
    }
    return 0;
}
