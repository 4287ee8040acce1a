/*
 * clean.c - clean's rules (SPEC "ckpt clean"), shared by `ckpt clean` and
 * `ckpt process`: judge a run keep / delete / skip / error (live-run
 * guard, damaged archives, refused paths), then act on the verdict: a bad
 * run is re-read and deleted rename-first, a kept one optionally pruned.
 * Nothing is printed: the verdict and its reason are in the item.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/clean.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"

void ckpt_clean_item_init(struct ckpt_clean_item *it, struct ckpt_storage *st,
                          const char *key, const char *arg,
                          const struct ckpt_clean_opts *co)
{
    memset(it, 0, sizeof(*it));
    it->arg = arg;
    it->key = ckpt_xstrdup(key);
    it->st = st;
    it->co = co;
    ckpt_buf_init(&it->reason);
    ckpt_buf_init(&it->pruned);
}

void ckpt_clean_item_release(struct ckpt_clean_item *it)
{
    free(it->key);
    ckpt_buf_release(&it->reason);
    ckpt_buf_release(&it->pruned);
    if (it->scanned)
        ckpt_run_release(&it->run);
    cJSON_Delete(it->pruned_json);
    free(it->resume);
    for (size_t j = 0; j < it->nresume_prune; j++)
        free(it->resume_prune[j]);
    free(it->resume_prune);
    memset(it, 0, sizeof(*it));
}

/* A local delete starts by renaming the directory to a hidden sibling
 * ".BASE.ckpt-del-HOST-PID" (ckpt_del_rename): that rename is the commit
 * point, so a kill afterwards leaves a name a rerun can recognise and
 * finish, instead of a half-deleted run that no longer looks like a run.
 * Temp dirs inside the run RUN that dead deletes of this host left (a
 * prune, or unshard --delete-sharded's step) are finished with it. */
static void find_dead_prunes(struct ckpt_clean_item *it)
{
    size_t n, w = 0;
    char **v = ckpt_del_dead_in(it->key, &n), *x;
    for (size_t i = 0; i < n; i++) {
        /* (checked again: a pid reused since the listing is live) */
        if (!ckpt_del_dead(v[i], &x)) {
            free(v[i]);
            continue;
        }
        ckpt_buf_addf(&it->reason, "; %s an interrupted prune of %s",
                      it->co->dry_run ? "would finish" : "finished", x);
        free(x);
        v[w++] = v[i];
    }
    it->resume_prune = v;
    it->nresume_prune = w;
}

static const char *msg_delete(const struct ckpt_clean_opts *co)
{
    return co->dry_run ? "would-delete" : "delete";
}

/* Why a run is bad: the checkpoints it has and why none counts. */
static void bad_reason(struct ckpt_clean_item *it)
{
    struct ckpt_buf *r = &it->reason;
    if (!it->run.n) {
        ckpt_buf_addstr(r, "no checkpoint");
        return;
    }
    ckpt_buf_addstr(r, "no complete checkpoint with step > 0 (");
    for (size_t i = 0; i < it->run.n; i++) {
        const struct ckpt_checkpoint *c = &it->run.ckpts[i];
        ckpt_buf_addf(r, "%s%s: %s", i ? "; " : "", c->name,
                      !c->complete ? c->why : "step 0");
    }
    ckpt_buf_addch(r, ')');
}

/* Lexically clean a local RUN: "." components and repeated or trailing
 * slashes go, and ".." takes off the component before it, which must not
 * be a symlink (then ".." would climb out of the link's target, not out
 * of the link's directory). Returns the cleaned path ("." for none), or
 * NULL with err set. */
char *ckpt_clean_path(const char *key, struct ckpt_err *err)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    int abs = key[0] == '/';
    const char *p = key;
    if (abs)
        ckpt_buf_addch(&b, '/');
    while (*p) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        size_t root = abs ? 1 : 0;
        int above = b.len == root ||
                    (b.len >= root + 2 &&
                     !strcmp(b.ptr + b.len - 2, "..") &&
                     (b.len == root + 2 || b.ptr[b.len - 3] == '/'));
        if (n == 2 && p[0] == '.' && p[1] == '.' && !above) {
            struct stat lsb;
            if (lstat(b.ptr, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
                ckpt_err_set(err, CKPT_EUNSAFE, "'%s' goes through the "
                             "symbolic link '%s'; not deleting through it "
                             "(give the real path)", key, b.ptr);
                ckpt_buf_release(&b);
                return NULL;
            }
            char *slash = strrchr(b.ptr, '/');
            size_t keep = slash ? (size_t)(slash - b.ptr) : 0;
            ckpt_buf_setlen(&b, keep < root ? root : keep);
            ckpt_buf_addstr(&b, "");
        } else if (n && !(n == 1 && p[0] == '.')) {
            if (b.len > root)
                ckpt_buf_addch(&b, '/');
            ckpt_buf_add(&b, p, n);
        }
        p += n;
        while (*p == '/')
            p++;
    }
    if (!b.len)
        ckpt_buf_addstr(&b, ".");
    return ckpt_buf_detach(&b, NULL);
}

/* 1 if dir is real or one of its parents. */
static int is_at_or_below(const char *dir, const char *real)
{
    size_t n = strlen(real);
    return !strncmp(dir, real, n) &&
           (dir[n] == '/' || dir[n] == '\0' || n == 1);
}

/* Up front, before anything is read: never "/", $HOME or a directory
 * holding it, nor a mount point (its device differs from its parent's):
 * walking those is pointless and deleting them a disaster. */
static int refuse_root(const char *key, struct ckpt_err *err)
{
    char real[PATH_MAX], rhome[PATH_MAX];
    if (!realpath(key, real))
        return 0; /* reported when the run is read */
    const char *home = getenv("HOME");
    if (!strcmp(real, "/"))
        return ckpt_err_set(err, CKPT_EUNSAFE, "refusing to clean '%s': it "
                            "is the root directory", key);
    if (home && realpath(home, rhome) && is_at_or_below(rhome, real))
        return ckpt_err_set(err, CKPT_EUNSAFE, "refusing to clean '%s' (%s):"
                            " it is or holds the home directory", key, real);
    struct stat sb, psb;
    char *parent = ckpt_path_dirname(real);
    int mount = stat(real, &sb) == 0 && S_ISDIR(sb.st_mode) &&
                stat(parent, &psb) == 0 && sb.st_dev != psb.st_dev;
    free(parent);
    if (mount)
        return ckpt_err_set(err, CKPT_EUNSAFE, "refusing to clean '%s' (%s):"
                            " it is a mount point", key, real);
    return 0;
}

/* Refuse paths whose deletion would be a disaster whatever they hold. */
static int unsafe_local(const char *key, struct ckpt_err *err)
{
    char real[PATH_MAX], cwd[PATH_MAX];
    if (!realpath(key, real))
        return ckpt_err_sys(err, "resolve '%s'", key);
    if (refuse_root(key, err) != 0)
        return -1;
    if (getcwd(cwd, sizeof(cwd)) && is_at_or_below(cwd, real))
        return ckpt_err_set(err, CKPT_EUNSAFE,
                            "refusing to delete '%s' (%s)", key, real);
    return 0;
}

/* Why checkpoint c, complete, is never pruned whatever the options say
 * (NULL: it may be): the writer pins it, its step is not known, or it
 * holds a file its layout does not own (pruning would delete that too). */
static char *never_pruned(const struct ckpt_checkpoint *c)
{
    if (c->pinned)
        return ckpt_xstrdup(c->pinned);
    if (c->named)
        return ckpt_xstrdup("its step is not known");
    return ckpt_checkpoint_unowned(c);
}

/* Checkpoints to prune in a kept run, per --keep-last / --keep-every.
 * Never the newest complete one, never the complete predecessor of an
 * incomplete (possibly still being written) newer one; never one
 * never_pruned keeps, whose name and reason go to *held (when not NULL)
 * if the options alone would have pruned it. */
static void plan_prune(const struct ckpt_run *run, const struct ckpt_clean_opts *co,
                       int *prune, struct ckpt_buf *held)
{
    size_t n = run->n;
    int *keep = ckpt_xcalloc(n ? n : 1, sizeof(int));
    int kept_steps = 0;
    int64_t last_step = INT64_MIN;
    for (size_t i = n; i-- > 0;) {
        const struct ckpt_checkpoint *c = &run->ckpts[i];
        /* Lightning's checkpoints are files and its own save_top_k
         * prunes them: not counted, never pruned here. A named one has
         * no step to count by. */
        if (!c->complete || c->format == CKPT_FMT_LIGHTNING || c->named) {
            keep[i] = 1;
            continue;
        }
        if (c->step != last_step) {
            last_step = c->step;
            kept_steps++;
        }
        int newest = kept_steps == 1;
        int in_last = co->keep_last > 0 && kept_steps <= co->keep_last;
        int every = co->keep_every > 0 && c->step % co->keep_every == 0;
        keep[i] = newest || in_last || every;
    }
    for (size_t i = 0; i < n; i++) {
        if (run->ckpts[i].complete)
            continue;
        for (size_t j = i; j-- > 0;)
            if (run->ckpts[j].complete) {
                /* every complete dir of that step */
                for (size_t k = 0; k < n; k++)
                    if (run->ckpts[k].step == run->ckpts[j].step)
                        keep[k] = 1;
                break;
            }
    }
    for (size_t i = 0; i < n; i++) {
        char *why = keep[i] ? NULL : never_pruned(&run->ckpts[i]);
        prune[i] = !keep[i] && !why;
        if (why && held)
            ckpt_buf_addf(held, "%s%s (%s)", held->len ? ", " : "",
                          run->ckpts[i].name, why);
        free(why);
    }
    free(keep);
}

static void verdict(struct ckpt_clean_item *it);
static int is_live(struct ckpt_clean_item *it, const struct ckpt_tree *t);

/* A dead process's delete renamed the run to it->resume and was killed.
 * That run was judged bad then, but a writer holding the directory open
 * may have written since: judge what is there again. A complete
 * checkpoint is an error (left in place), a file written within --min-age
 * makes it live (skipped); otherwise the delete is finished. */
static void resume_verdict(struct ckpt_clean_item *it)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_tree *t = NULL;
    struct ckpt_run run;
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    char *b = ckpt_path_basename(it->resume);
    it->action = "error";
    if (ckpt_run_load_flags(it->st, it->resume, 0, CKPT_TREE_SALVAGE, &sb,
                            &status, &t, &run, &err) != 0) {
        ckpt_buf_addf(&it->reason, "%s (an interrupted delete): %s", b,
                      err.msg);
        free(b);
        return;
    }
    const struct ckpt_checkpoint *best =
        status == CKPT_LOAD_OK ? ckpt_run_best(&run) : NULL;
    const struct ckpt_checkpoint *unk =
        status == CKPT_LOAD_OK && !best ? ckpt_run_unknown(&run) : NULL;
    if (unk)
        ckpt_buf_addf(&it->reason, "%s (an interrupted delete) now holds "
                      "checkpoint %s that ckpt cannot judge (%s); left in "
                      "place", b, unk->name, unk->why);
    else if (best)
        ckpt_buf_addf(&it->reason, "%s (an interrupted delete) now holds "
                      "complete checkpoint %s (%s); left in place", b,
                      best->name, ckpt_format_name(best->format));
    else if (status == CKPT_LOAD_OK && (run.unaccounted || run.holds_run))
        ckpt_buf_addf(&it->reason, "%s (an interrupted delete) now holds "
                      "%s, which nothing accounts for; left in place", b,
                      run.unaccounted ? run.unaccounted : run.holds_run);
    else if (status != CKPT_LOAD_OK)
        ckpt_buf_addf(&it->reason, "%s (an interrupted delete) is not a "
                      "directory; left in place", b);
    else if (!is_live(it, t)) {
        it->action = msg_delete(it->co);
        ckpt_buf_addf(&it->reason, "%s an interrupted delete (%s)",
                      it->co->dry_run ? "finishes" : "finished", b);
    }
    if (status == CKPT_LOAD_OK)
        ckpt_run_release(&run);
    ckpt_tree_free(t);
    free(b);
}

/* When a file was last written: the newer of its mtime and ctime. A copy
 * that keeps mtimes (tar x, rsync -a, cp -p) makes a half-copied run look
 * days old, but each file it creates or changes has ctime now. */
static int64_t written(int64_t mtime, int64_t ctime)
{
    return ctime > mtime ? ctime : mtime;
}

int64_t ckpt_clean_newest(const struct ckpt_tree *t)
{
    int64_t newest = 0;
    /* Directories do not count: deleting or renaming inside one (as this
     * clean or process does) changes its times. */
    for (size_t i = 0; i < t->n; i++)
        if (t->files[i].type != CKPT_ENTRY_DIR &&
            written(t->files[i].mtime, t->files[i].ctime) > newest)
            newest = written(t->files[i].mtime, t->files[i].ctime);
    return newest;
}

/* The live-run guard: a run (or archive) written to within --min-age may
 * still be growing; it is skipped whatever it holds. */
static int is_live(struct ckpt_clean_item *it, const struct ckpt_tree *t)
{
    if (it->co->min_age <= 0)
        return 0;
    int64_t newest = it->is_archive ? written(it->sb.mtime, it->sb.ctime)
                                    : ckpt_clean_newest(t);
    int64_t age = (int64_t)time(NULL) - newest;
    if (age >= it->co->min_age)
        return 0;
    if (age < 0)
        age = 0;
    it->action = "skip";
    const char *what = it->is_archive ? "archive" : "newest file";
    if (age < 120)
        ckpt_buf_addf(&it->reason, "live: %s written %lld s ago", what,
                      (long long)age);
    else if (age < 7200)
        ckpt_buf_addf(&it->reason, "live: %s written %lld min ago", what,
                      (long long)(age / 60));
    else if (age < 2 * 86400)
        ckpt_buf_addf(&it->reason, "live: %s written %lld h ago", what,
                      (long long)(age / 3600));
    else
        ckpt_buf_addf(&it->reason, "live: %s written %lld d ago", what,
                      (long long)(age / 86400));
    return 1;
}
static size_t want_nothing(const char *path, uint64_t size)
{
    (void)path;
    (void)size;
    return 0;
}

int ckpt_clean_live(struct ckpt_clean_item *it, struct ckpt_err *err)
{
    struct ckpt_tree *t = NULL;
    it->is_archive = ckpt_archive_kind_of(it->key) != CKPT_ARCHIVE_NONE;
    if (it->co->min_age <= 0)
        return 0;
    if (it->is_archive ? ckpt_storage_stat(it->st, it->key, &it->sb, err)
                       : ckpt_tree_load(&t, it->st, it->key, want_nothing,
                                        err))
        return -1;
    int live = is_live(it, t);
    ckpt_tree_free(t);
    return live;
}

static int refuse_path(struct ckpt_clean_item *it, struct ckpt_err *err);
static int will_prune(const struct ckpt_clean_item *it);

/* A local run gone (before or while it was read) because another
 * process renamed it aside to delete it (two cleaners over the same runs
 * under GNU parallel): skipped, not an error; the other one reports it.
 * 1 with the verdict set, else 0. */
static int being_deleted(struct ckpt_clean_item *it)
{
    char *sib = ckpt_storage_is_local(it->st) ? ckpt_del_sibling(it->key)
                                              : NULL;
    if (!sib)
        return 0;
    it->action = "skip";
    ckpt_buf_reset(&it->reason);
    ckpt_buf_addf(&it->reason, "being deleted by another process (%s)",
                  sib);
    free(sib);
    return 1;
}

/* Is path (in the run) at a checkpoint's place, or inside one: NAME,
 * checkpoints/NAME or checkpoint/NAME with NAME a checkpoint name, as
 * the run's checkpoints are found? */
static int at_checkpoint(const char *path)
{
    const char *rest = path;
    if (ckpt_str_startswith(rest, "checkpoints/"))
        rest += strlen("checkpoints/");
    else if (ckpt_str_startswith(rest, "checkpoint/"))
        rest += strlen("checkpoint/");
    const char *slash = strchr(rest, '/');
    char *name = ckpt_xstrndup(rest, slash ? (size_t)(slash - rest)
                                           : strlen(rest));
    int64_t step;
    int uns;
    int hit = ckpt_checkpoint_name(name, &step, &uns);
    free(name);
    return hit;
}

/* A symlink where a checkpoint (or part of one) belongs: what it points
 * at was never judged, so the run cannot be proven bad, nor its steps
 * pruned. The first one's message (malloced), or NULL. */
static char *link_in_checkpoint(const struct ckpt_tree *t)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->files[i].type == CKPT_ENTRY_LINK &&
            at_checkpoint(t->files[i].path))
            return ckpt_xasprintf("%s is a symbolic link, not judged; "
                                  "not deleted", t->files[i].path);
    return NULL;
}

/* A local directory run holding a mount point (another filesystem: a
 * tmpfs, a bind mount): never deleted across it. Found by the listing
 * that built the tree (one walk, not two). The message (malloced), or
 * NULL. */
static char *mount_inside(const struct ckpt_clean_item *it,
                          const struct ckpt_tree *t)
{
    if (it->is_archive || !ckpt_storage_is_local(it->st) || !t->mounts)
        return NULL;
    if (t->mounts > 1)
        return ckpt_xasprintf("holds %zu mount points (other filesystems), "
                              "first %s; not deleting across them",
                              t->mounts, t->mount_first);
    return ckpt_xasprintf("holds a mount point (another filesystem): "
                          "%s; not deleting across it", t->mount_first);
}

void ckpt_clean_judge(struct ckpt_clean_item *it)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_tree *tree = NULL;
    enum ckpt_load_status status;
    it->action = "error";
    if (ckpt_run_load_flags(it->st, it->key, it->co->max_archive,
                            CKPT_TREE_SALVAGE, &it->sb, &status, &tree,
                            &it->run, &err) != 0) {
        if (err.code == CKPT_ENOTFOUND && ckpt_storage_is_local(it->st) &&
            (it->resume = ckpt_del_dead_sibling(it->key)) != NULL) {
            resume_verdict(it);
            return;
        }
        if (err.code == CKPT_ENOTFOUND && being_deleted(it))
            return;
        ckpt_buf_addstr(&it->reason, err.msg);
        return;
    }
    it->is_archive = ckpt_archive_kind_of(it->key) != CKPT_ARCHIVE_NONE;
    if (status == CKPT_LOAD_TOO_LARGE) {
        char a[32], b[32];
        it->action = "skip";
        ckpt_buf_addf(&it->reason, "archive is %s, above --max-archive-size "
                      "%s", ckpt_fmt_size(it->sb.size, a, sizeof(a)),
                      ckpt_fmt_size(it->co->max_archive, b, sizeof(b)));
        return;
    }
    if (status == CKPT_LOAD_NOT_RUN_FILE) {
        it->action = "skip";
        ckpt_buf_addstr(&it->reason, "not a directory or archive");
        return;
    }
    it->scanned = 1;
    it->fetched = tree->fetched;
    int live = is_live(it, tree);
    char *damage = tree->damage ? ckpt_xasprintf("%s: %s", tree->display,
                                                 tree->damage)
                                : NULL;
    char *link = link_in_checkpoint(tree);
    char *mount = mount_inside(it, tree);
    ckpt_tree_free(tree);
    if (live) {
        free(damage);
        free(link);
        free(mount);
        return;
    }
    verdict(it);
    /* What ckpt cannot prove is kept: a run holding another filesystem
     * is an error whatever it holds, a link at a checkpoint's place when
     * anything would be deleted. */
    if (!strcmp(it->action, "skip")) {
        free(mount);
        mount = NULL;
    }
    if (mount || (link && (!strcmp(it->action, msg_delete(it->co)) ||
                           will_prune(it) ||
                           (!strcmp(it->action, "error") &&
                            it->run.unaccounted)))) {
        it->action = "error";
        ckpt_buf_reset(&it->reason);
        ckpt_buf_addstr(&it->reason, mount ? mount : link);
    }
    free(mount);
    free(link);
    /* A damaged archive may hold more than was listed: only a complete
     * checkpoint found anyway (keep, which changes nothing) stands. */
    if (damage && strcmp(it->action, "keep") != 0) {
        it->action = "error";
        ckpt_buf_reset(&it->reason);
        ckpt_buf_addstr(&it->reason, damage);
    }
    free(damage);
    /* Refused paths are refused in the verdict, so that -n predicts
     * exactly what the real run does. */
    int deletes = !strcmp(it->action, msg_delete(it->co)) || will_prune(it);
    if (deletes && refuse_path(it, &err) != 0 &&
        !(err.sys_errno == ENOENT && being_deleted(it))) {
        it->action = "error";
        ckpt_buf_reset(&it->reason);
        ckpt_buf_addstr(&it->reason, err.msg);
    }
    if (!strcmp(it->action, "keep") && !it->is_archive &&
        ckpt_storage_is_local(it->st))
        find_dead_prunes(it);
}

/* keep, delete or skip, from the scanned run. */
static void verdict(struct ckpt_clean_item *it)
{
    /* One run is one run: a directory of runs is judged run by run,
     * never as one (with --force neither). */
    if (it->run.holds_run) {
        it->action = "skip";
        ckpt_buf_addf(&it->reason, "holds runs (%s is one): a directory of "
                      "runs is never judged as one run", it->run.holds_run);
        return;
    }
    if (!ckpt_run_looks_like_run(&it->run) && !it->co->force) {
        it->action = "skip";
        ckpt_buf_addstr(&it->reason, "does not look like a run (no "
                        "config.yaml with wandb/ or train_data/, and no "
                        "checkpoint directory); use --force to clean it");
        return;
    }
    const struct ckpt_checkpoint *best = ckpt_run_best(&it->run);
    const struct ckpt_checkpoint *unk = best ? NULL
                                             : ckpt_run_unknown(&it->run);
    /* When unsure, error, never delete: a step > 0 ckpt cannot judge may
     * be the run's good checkpoint (the newest is named). */
    if (unk) {
        it->action = "error";
        if (unk->unknown_commit)
            ckpt_buf_addf(&it->reason, "cannot tell whether Orbax step %s "
                          "is complete (no commit marker: older Orbax "
                          "commits by rename)", unk->name);
        else
            ckpt_buf_addf(&it->reason, "cannot judge checkpoint %s (%s); "
                          "not deleted", unk->name, unk->why);
        return;
    }
    /* Bad by accounting only: every file is part of a checkpoint
     * proven incomplete (or of step 0), or debris. */
    if (!best && it->run.unaccounted) {
        it->action = "error";
        ckpt_buf_addf(&it->reason, "cannot account for %s", it->run.unaccounted);
        if (it->run.nunaccounted > 1)
            ckpt_buf_addf(&it->reason, " (and %zu more file%s)",
                          it->run.nunaccounted - 1,
                          it->run.nunaccounted == 2 ? "" : "s");
        ckpt_buf_addstr(&it->reason, ": no checkpoint layout or debris rule "
                        "covers it; not deleted");
        return;
    }
    if (!best) {
        it->action = msg_delete(it->co);
        bad_reason(it);
        return;
    }
    it->action = "keep";
    ckpt_buf_addf(&it->reason, "complete checkpoint %s (%s)", best->name,
                  ckpt_format_name(best->format));
}

/* Re-read the run right before deleting it: it must still be bad and must
 * not have grown (a trainer may have written a checkpoint since). It may
 * have shrunk, or vanished: another `ckpt clean` deleting the same run.
 * Returns 1 when the run is already gone, 0 to go ahead, -1 to refuse. */
static int verify_still_bad(struct ckpt_clean_item *it, struct ckpt_tree **out,
                            struct ckpt_err *err)
{
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    struct ckpt_tree *tree = NULL;
    struct ckpt_run run;
    *out = NULL;
    if (ckpt_run_load_flags(it->st, it->key, 0, CKPT_TREE_SALVAGE, &sb,
                            &status, &tree, &run, err) != 0)
        return err->code == CKPT_ENOTFOUND ? 1 : -1;
    int ok = status == CKPT_LOAD_OK && !tree->damage &&
             !ckpt_run_best(&run) && !ckpt_run_unknown(&run) &&
             !run.unaccounted && !run.holds_run &&
             run.nfiles <= it->run.nfiles && run.size <= it->run.size &&
             (!it->is_archive || (sb.size == it->sb.size &&
                                  sb.mtime == it->sb.mtime));
    if (status == CKPT_LOAD_OK)
        ckpt_run_release(&run);
    if (!ok) {
        ckpt_tree_free(tree);
        return ckpt_err_set(err, CKPT_EUNSAFE, "run changed while it was "
                            "checked; not deleted");
    }
    *out = tree;
    return 0;
}

static int first_left(void *ud, const struct ckpt_entry *e)
{
    struct ckpt_buf *b = ud;
    if (e->type == CKPT_ENTRY_DIR)
        return 0;
    ckpt_buf_addstr(b, e->name);
    return 1;
}

/* Delete exactly the files of the tree that was judged, then list again:
 * a file written meanwhile (a trainer saving a checkpoint) is left in
 * place, and the run is an error. */
static int delete_judged(struct ckpt_clean_item *it, struct ckpt_tree *t,
                         const char *root, struct ckpt_err *err)
{
    char **keys = ckpt_xcalloc(t->n ? t->n : 1, sizeof(*keys));
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->files[i].type != CKPT_ENTRY_DIR)
            keys[n++] = ckpt_path_join(root, t->files[i].path);
    int rc = ckpt_storage_delete_keys(it->st, root, keys, n, err);
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    if (rc != 0)
        return -1;
    struct ckpt_buf left = CKPT_BUF_INIT;
    struct ckpt_err lerr = CKPT_ERR_INIT;
    rc = ckpt_storage_list(it->st, root, CKPT_LIST_RECURSIVE,
                           first_left, &left, &lerr);
    if (rc < 0 && lerr.code != CKPT_ENOTFOUND) {
        *err = lerr;
        rc = -1;
    } else if (left.len) {
        rc = ckpt_err_set(err, CKPT_EUNSAFE, "run changed during delete; "
                          "left in place: %s", left.ptr);
    } else {
        rc = 0;
    }
    ckpt_buf_release(&left);
    return rc;
}

/* Checks that hold whatever the run holds: never through a symlink, never
 * "/", $HOME, the cwd or its parents, never a whole bucket. */
static int refuse_path(struct ckpt_clean_item *it, struct ckpt_err *err)
{
    const char *key = it->key;
    if (!ckpt_storage_is_local(it->st))
        return *key ? 0 : ckpt_err_set(err, CKPT_EUNSAFE, "refusing to delete"
                                       " a whole bucket ('%s')", it->arg);
    struct stat lsb;
    if (lstat(key, &lsb) == 0 && S_ISLNK(lsb.st_mode))
        return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is a symbolic link; not "
                            "deleting through it (give the real path)",
                            it->arg);
    return unsafe_local(key, err);
}

static int delete_renamed(struct ckpt_clean_item *it, struct ckpt_tree *t,
                          struct ckpt_err *err);

static int delete_run(struct ckpt_clean_item *it, struct ckpt_err *err)
{
    struct ckpt_tree *tree = NULL;
    int v = verify_still_bad(it, &tree, err);
    if (v == 0 && refuse_path(it, err) != 0)
        v = err->code == CKPT_ENOTFOUND ? 1 : -1;
    if (v != 0) {
        /* Gone already: another cleaner got there first, which is what we
         * wanted. */
        if (v == 1) {
            ckpt_buf_addstr(&it->reason, " (already deleted by another "
                            "process)");
            it->gone = 1;
        }
        ckpt_tree_free(tree);
        return v < 0 ? -1 : 0;
    }
    int rc = it->is_archive ? ckpt_storage_delete(it->st, it->key, err)
                            : delete_renamed(it, tree, err);
    ckpt_tree_free(tree);
    return rc;
}

/* A local run: rename it aside, delete the judged files inside, then the
 * directory. What appeared meanwhile goes back under the run's name (if
 * that is still free) and the run is an error. */
static int delete_renamed(struct ckpt_clean_item *it, struct ckpt_tree *t,
                          struct ckpt_err *err)
{
    if (!ckpt_storage_is_local(it->st))
        return delete_judged(it, t, it->key, err);
    char *tmp;
    if (ckpt_del_rename(it->key, &tmp, err) != 0) {
        /* Renamed away since the re-check: another cleaner got there
         * first, which is what we wanted. */
        if (err->sys_errno != ENOENT)
            return -1;
        ckpt_buf_addstr(&it->reason, " (already deleted by another "
                        "process)");
        it->gone = 1;
        return 0;
    }
    if (!tmp)
        return delete_judged(it, t, it->key, err);
    int rc = delete_judged(it, t, tmp, err);
    struct stat sb;
    if (rc != 0 && lstat(tmp, &sb) == 0 && lstat(it->key, &sb) != 0 &&
        errno == ENOENT)
        (void)rename(tmp, it->key);
    free(tmp);
    return rc;
}

/* A kept run with checkpoints to prune (directories only). */
static int will_prune(const struct ckpt_clean_item *it)
{
    if (strcmp(it->action, "keep") != 0 || it->is_archive ||
        (it->co->keep_last <= 0 && it->co->keep_every <= 0))
        return 0;
    int *prune = ckpt_xcalloc(it->run.n ? it->run.n : 1, sizeof(int));
    plan_prune(&it->run, it->co, prune, NULL);
    int any = 0;
    for (size_t i = 0; i < it->run.n; i++)
        any |= prune[i];
    free(prune);
    return any;
}

static int prune_run(struct ckpt_clean_item *it, struct ckpt_err *err)
{
    if (!it->co->dry_run && will_prune(it) && refuse_path(it, err) != 0)
        return -1;
    int *prune = ckpt_xcalloc(it->run.n ? it->run.n : 1, sizeof(int));
    struct ckpt_buf held = CKPT_BUF_INIT;
    plan_prune(&it->run, it->co, prune, &held);
    if (held.len)
        ckpt_buf_addf(&it->reason, "; kept %s", held.ptr);
    ckpt_buf_release(&held);
    int rc = 0;
    it->pruned_json = cJSON_CreateArray();
    for (size_t i = 0; i < it->run.n && rc == 0; i++) {
        if (!prune[i])
            continue;
        const struct ckpt_checkpoint *c = &it->run.ckpts[i];
        if (it->is_archive) {
            ckpt_buf_addstr(&it->reason, "; not pruning inside an archive");
            break;
        }
        if (!it->co->dry_run) {
            char *key = ckpt_path_join(it->key, c->dir);
            rc = ckpt_storage_delete_tree_aside(it->st, key, err);
            free(key);
            if (rc != 0)
                break;
        }
        ckpt_buf_addf(&it->pruned, "%s%s", it->pruned.len ? ", " : "",
                      c->name);
        it->bytes += c->size;
        cJSON_AddItemToArray(it->pruned_json, cJSON_CreateString(c->name));
    }
    if (it->pruned.len)
        ckpt_buf_addf(&it->reason, "; %s %s",
                      it->co->dry_run ? "would prune" : "pruned",
                      it->pruned.ptr);
    free(prune);
    return rc;
}

void ckpt_clean_act(struct ckpt_clean_item *it)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    int rc = 0;
    if (!strcmp(it->action, "delete") && it->resume)
        rc = ckpt_storage_delete_tree(it->st, it->resume, &err);
    else if (!strcmp(it->action, "delete"))
        rc = delete_run(it, &err);
    for (size_t i = 0; rc == 0 && !it->co->dry_run && i < it->nresume_prune;
         i++) {
        char *key = ckpt_path_join(it->key, it->resume_prune[i]);
        rc = ckpt_storage_delete_tree(it->st, key, &err);
        free(key);
    }
    if (rc == 0 && !strcmp(it->action, msg_delete(it->co)) && !it->gone)
        it->bytes = it->is_archive ? it->sb.size : it->run.size;
    else if (!strcmp(it->action, "keep") &&
             (it->co->keep_last > 0 || it->co->keep_every > 0))
        rc = prune_run(it, &err);
    if (rc != 0) {
        it->action = "error";
        ckpt_buf_reset(&it->reason);
        ckpt_buf_addstr(&it->reason, err.msg);
    }
}


/* A local RUN is cleaned of "." and ".." spellings (refusing ".." out of
 * a symlink) and refused up front if it is "/", $HOME or a mount point. */
int ckpt_clean_precheck(struct ckpt_clean_item *it, struct ckpt_err *err)
{
    if (!ckpt_storage_is_local(it->st))
        return 0;
    char *c = ckpt_clean_path(it->key, err);
    if (!c)
        return -1;
    free(it->key);
    it->key = c;
    /* One rule for clean and process, whatever the run holds: a run
     * given as a symlink is refused (deleting through it would delete
     * the target under another name, and process would file it under
     * the link's). */
    struct stat lsb;
    if (lstat(c, &lsb) == 0 && S_ISLNK(lsb.st_mode))
        return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is a symbolic link; "
                            "not deleting through it (give the real path)",
                            it->arg);
    return refuse_root(c, err);
}

/* rclone's spelling as the help gives it: whole decimal digits with an
 * optional unit s, m, h, d or w (plain: seconds). Nothing else: no sign,
 * space, hex, exponent or fraction (strtod took "0x10", "1e3", " 5"). */
int ckpt_parse_duration(const char *s, int64_t *out)
{
    static const struct { char unit; int64_t secs; } units[] = {
        { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 },
        { 'w', 604800 },
    };
    int64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > 1000000000000)
            return -1;  /* 31,000 years: beyond any age or lease */
        v = v * 10 + (*p - '0');
    }
    if (p == s)
        return -1;
    int64_t mult = 1;
    if (*p) {
        size_t i = 0;
        while (i < sizeof(units) / sizeof(units[0]) && units[i].unit != *p)
            i++;
        if (i == sizeof(units) / sizeof(units[0]) || p[1])
            return -1;
        mult = units[i].secs;
    }
    *out = v * mult;
    return 0;
}
