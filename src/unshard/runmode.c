/*
 * runmode.c - unshard every sharded step of a run (SPEC "ckpt unshard",
 * run mode; include/ckpt/unshard.h): used by `ckpt unshard RUN DEST` and
 * by `ckpt process`. Nothing is printed: one event per step.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/archive.h"
#include "ckpt/buf.h"
#include "ckpt/gate.h"
#include "ckpt/run.h"
#include "ckpt/storage.h"
#include "ckpt/tempname.h"
#include "ckpt/unshard.h"
#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"

/* What this file removes of its own (gate.h). */
#define OWN_SCRATCH CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, \
                          "unshard's scratch copy of an archived step")

/* --- runs ---------------------------------------------------------------- */

/*
 * Run mode: SRC is a run directory or archive. The run is read into a tree
 * and classified (ckpt_run_scan); every complete sharded checkpoint whose
 * "-unsharded" sibling exists neither in the run nor at DEST becomes
 * DEST/NAME-unsharded/. Every format is read in place from a local or
 * remote run (ranged reads) and from a plain tar (member reads through
 * ckpt_storage_open_members: pread locally, ranged GETs remotely). Only
 * the steps of a compressed archive (one streaming pass) or a zip are
 * extracted into a scratch directory, one step at a time, so scratch
 * space never exceeds one step.
 */

static const char *const msg_done[] = { "unsharded", "would-unshard" };

struct runctx {
    const struct ckpt_unshard_run_cfg *cfg;
    struct ckpt_unshard_opts uo;   /* cfg->uo, set per step */
    struct ckpt_storage *st;    /* borrowed */
    int remote;                 /* a run directory in object storage */
    struct ckpt_tree *tree;     /* owned */
    struct ckpt_run run;
    const char *src, *dest;     /* as given */
    char *scratch;              /* owned: extracted steps go here */
    char *config;               /* owned: the run's config.yaml (a key of
                                   the step's storage when read in place,
                                   else a local file), or NULL */
    struct ckpt_storage *members;   /* owned: a plain tar's members */
    char *spooled;              /* owned: a compressed archive spooled
                                   by the caller (ckpt_archive_spool):
                                   the run's files at their own paths,
                                   read there; or NULL */
    int dest_remote;            /* DEST is object storage */
};

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int cancelled(const struct runctx *r)
{
    return r->uo.cancel && *r->uo.cancel;
}

int ckpt_unshard_supported(int format)
{
    enum ckpt_format f = (enum ckpt_format)format;
    return f == CKPT_FMT_DCP || f == CKPT_FMT_OLMO_LEGACY ||
           f == CKPT_FMT_ZARR || f == CKPT_FMT_OLMO_LOCAL ||
           f == CKPT_FMT_OLMO_CORE || f == CKPT_FMT_ORBAX ||
           f == CKPT_FMT_DEEPSPEED || f == CKPT_FMT_MEGATRON ||
           f == CKPT_FMT_DCP_HF || f == CKPT_FMT_HF;
}

const char *ckpt_unshard_partial(const struct ckpt_checkpoint *c)
{
    enum ckpt_format format = c->format;
    if (c->partial)
        return c->partial;
    /* zero_to_fp32's state dict: the optimizer's other states, the
     * scheduler and the client state stay only in the step (and
     * DeepSpeed's `latest` names it). */
    if (format == CKPT_FMT_DEEPSPEED)
        return "its unsharded output holds the fp32 weights only, not the "
               "optimizer states, scheduler and client state it holds";
    /* accelerate merge-weights' state dict: the model's FSDP shards only;
     * optimizer_0/, the scheduler, sampler and RNG states stay in the
     * step. */
    if (format == CKPT_FMT_HF)
        return "its unsharded output holds the model weights only, not the "
               "optimizer, scheduler and RNG states it holds";
    return NULL;
}

static int supported(enum ckpt_format f)
{
    return ckpt_unshard_supported((int)f);
}

/* A step's output beside it: NAME-unsharded, or for an HF export
 * NAME-hf. */
static const char *suffix(const struct runctx *r)
{
    return r->uo.format == CKPT_FORMAT_HF ? "-hf" : "-unsharded";
}

static const char *done_word(const struct runctx *r)
{
    return r->uo.format == CKPT_FORMAT_HF ? "exported" : "unsharded";
}

/* One event for step k (NULL: the run as a whole). */
static void step_row(struct runctx *r, const char *action,
                     const struct ckpt_checkpoint *k, const char *detail,
                     const struct ckpt_unshard_result *res, const char *out)
{
    struct ckpt_unshard_step_event ev = { action, r->src, k, detail, res,
                                          out };
    if (r->cfg->on_step)
        r->cfg->on_step(r->cfg->ud, &ev);
}

static int run_unshard(struct runctx *r, enum ckpt_format f, const char *src,
                       const char *dest, struct ckpt_unshard_result *res,
                       struct ckpt_err *err)
{
    if (!supported(f))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': unsupported "
                            "checkpoint format '%s'", src,
                            ckpt_format_name(f));
    struct ckpt_unshard_opts uo = r->uo;
    uo.source_format = (int)f;
    return ckpt_unshard_dcp(src, dest, &uo, res, err);
}

static int extract_member(struct ckpt_archive *a, const char *to,
                          const char *name, struct ckpt_err *err)
{
    char *parent = ckpt_path_dirname(to);
    int rc = ckpt_mkdirs(parent, err);
    free(parent);
    if (rc != 0)
        return -1;
    int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ckpt_err_sys(err, "create '%s'", to);
    char *buf = ckpt_xmalloc(1 << 20);
    for (;;) {
        size_t n;
        if ((rc = ckpt_archive_read(a, buf, 1 << 20, &n, err)) != 0) {
            ckpt_err_prefix(err, "%s", name);
            break;
        }
        if (n == 0)
            break;
        if (write(fd, buf, n) != (ssize_t)n) {
            rc = ckpt_err_sys(err, "write '%s'", to);
            break;
        }
    }
    free(buf);
    if (close(fd) != 0 && rc == 0)
        rc = ckpt_err_sys(err, "close '%s'", to);
    return rc;
}

/* rel (a run-relative path) lies below run-relative directory dir. */
static int below(const char *rel, const char *dir)
{
    size_t dl = strlen(dir);
    if (!dl)    /* a root checkpoint: the whole run */
        return 1;
    return !strncmp(rel, dir, dl) && rel[dl] == '/';
}

/* Extract the files below dir (run-relative) into the scratch directory.
 * Plain tars and zips seek past the other members, so this reads little
 * more than the step itself. */
static int extract(struct runctx *r, const char *dir, struct ckpt_err *err)
{
    struct ckpt_archive *a;
    struct ckpt_archive_entry e;
    const char *strip = r->tree->strip;
    size_t sl = strlen(strip);
    int rc;
    if (ckpt_archive_open(&a, r->st, r->tree->key, err) != 0)
        return -1;
    while ((rc = ckpt_archive_next(a, &e, err)) == 1) {
        if (e.type != CKPT_ENTRY_FILE || strncmp(e.path, strip, sl) != 0)
            continue;
        const char *rel = e.path + sl;
        if (!below(rel, dir))
            continue;
        char *to = ckpt_path_join(r->scratch, rel);
        rc = extract_member(a, to, e.path, err);
        free(to);
        if (rc != 0)
            break;
    }
    ckpt_archive_close(a);
    if (rc < 0)
        ckpt_err_prefix(err, "%s", r->src);
    return rc < 0 ? -1 : 0;
}

/* Delete the sharded step k of the run: rename-first for a local run
 * (ckpt_gate_delete_tree_aside), so that a kill leaves the whole step
 * or a hidden .DIR.ckpt-del-HOST-PID that a rerun finishes, never part of
 * a step under its name; a remote step's objects go in batches. */
struct step_check {
    struct runctx *r;
    const struct ckpt_checkpoint *k;
    const char *key;
    uint64_t files, bytes;
};

static int count_file(void *ud, const struct ckpt_entry *e)
{
    struct step_check *c = ud;
    if (e->type != CKPT_ENTRY_DIR) {
        c->files++;
        c->bytes += e->size;
    }
    return 0;
}

/* The gate's re-check, right before the step goes: it holds no more
 * files and bytes than the step that was unsharded (a trainer writing
 * into it meanwhile keeps it). */
static int step_unchanged(void *data, struct ckpt_err *err)
{
    struct step_check *c = data;
    c->files = c->bytes = 0;
    if (ckpt_storage_list(c->r->st, c->key, CKPT_LIST_RECURSIVE, count_file,
                          c, err) < 0)
        return err->code == CKPT_ENOTFOUND ? 1 : -1;
    if (c->files > c->k->nfiles || c->bytes > c->k->size)
        return ckpt_err_set(err, CKPT_EUNSAFE, "%s changed after it was "
                            "unsharded (%llu files, %llu bytes now); not "
                            "deleted", c->k->name,
                            (unsigned long long)c->files,
                            (unsigned long long)c->bytes);
    return 0;
}

static int delete_step(struct runctx *r, const struct ckpt_checkpoint *k,
                       struct ckpt_err *err)
{
    char *key = ckpt_path_join(r->tree->key, k->dir);
    struct step_check c = { r, k, key, 0, 0 };
    struct ckpt_gate_proof p = {
        .rule = CKPT_GATE_UNSHARDED, .recheck = step_unchanged, .data = &c,
        .evidence = "its unsharded output verified against it",
    };
    int rc = ckpt_gate_delete_tree_aside(&p, r->st, key, err);
    free(key);
    return rc;
}

/* -n: what delete_step would refuse (a mount point inside the step). */
static int step_mount(struct runctx *r, const struct ckpt_checkpoint *k,
                      struct ckpt_err *err)
{
    char *key = ckpt_path_join(r->tree->key, k->dir);
    int rc = ckpt_storage_mount_fault(r->st, key, err);
    free(key);
    return rc;
}

/* Where a step's -unsharded copy already is. */
enum copy { COPY_NONE, COPY_IN_RUN, COPY_AT_DEST };

static int dest_complete(struct runctx *r, const char *out);

/* Is k the whole of SRC, to be unsharded into DEST itself? A run whose
 * root is k, and an archive that holds nothing but k's directory
 * (`tar cf s.tar step100/`): an archive holding one checkpoint under any
 * name unshards as that checkpoint's directory does. An archive whose
 * top directory was stepped into (`run/step100/`) is that run's. */
static int whole(const struct runctx *r, const struct ckpt_checkpoint *k)
{
    const struct ckpt_tree *t = r->tree;
    if (k->root)
        return 1;
    if (t->archive == CKPT_ARCHIVE_NONE || (t->strip && *t->strip) ||
        r->run.n != 1 || !*k->dir)
        return 0;
    size_t n = strlen(k->dir);
    for (size_t i = 0; i < t->n; i++)
        if (strncmp(t->files[i].path, k->dir, n) != 0 ||
            (t->files[i].path[n] != '/' && t->files[i].path[n] != '\0'))
            return 0;
    return 1;
}

/* Why checkpoint k is not unsharded (a skip reason), or NULL. Sets *failed
 * for reasons that are errors. */
static char *skip_reason(struct runctx *r, const struct ckpt_checkpoint *k,
                         const char *out, int *failed, enum copy *copy)
{
    char *sib = ckpt_xasprintf("%s%s", k->dir, suffix(r));
    int at_src = ckpt_tree_has_dir(r->tree, sib);
    free(sib);
    *failed = 0;
    *copy = COPY_NONE;
    if (k->format == CKPT_FMT_UNSHARDED && (k->complete || k->unknown))
        return ckpt_xstrdup("not sharded");
    /* Judged only: a Lightning checkpoint (a file, or an FSDP sharded
     * directory) is copied as it is, never unsharded. */
    if (k->format == CKPT_FMT_LIGHTNING)
        return ckpt_xstrdup("a Lightning checkpoint: copied as it is");
    if (k->format == CKPT_FMT_UNKNOWN && k->nfiles) {
        /* A step directory holding files ckpt does not recognise (an
         * empty one is an aborted save: skipped as incomplete). */
        *failed = 1;
        return ckpt_xstrdup("unsupported checkpoint format 'unknown' (no "
                            "recognised checkpoint files)");
    }
    /* HuggingFaceStorageWriter shards ckpt cannot prove whole (no file
     * records the world size) are unsharded all the same: the unshard
     * checks that every tensor's chunks tile it. Never deleted (below). */
    if (!k->complete && !(k->format == CKPT_FMT_DCP_HF && k->unknown))
        return ckpt_xasprintf("%s: %s", k->unknown ? "not judged"
                              : "incomplete", k->why ? k->why : "?");
    if (at_src) {
        *copy = COPY_IN_RUN;
        return ckpt_xasprintf("already %s: %s%s in the run", done_word(r),
                              k->name, suffix(r));
    }
    if (!whole(r, k) &&
        (r->dest_remote ? dest_complete(r, out) : is_dir(out))) {
        *copy = COPY_AT_DEST;
        return ckpt_xasprintf("already %s: %s exists", done_word(r), out);
    }
    if (!supported(k->format)) {
        *failed = 1;
        return ckpt_xasprintf("unsupported checkpoint format '%s'",
                              ckpt_format_name(k->format));
    }
    return NULL;
}

/* The run's config.yaml, when the run is a compressed archive or a zip:
 * copied once from the run tree (which kept it while indexing the
 * archive) into the scratch directory. It travels into every output
 * whose step has none. */
static int save_config(struct runctx *r, struct ckpt_err *err)
{
    char *data = NULL;
    size_t len;
    int rc = ckpt_tree_read(r->tree, "config.yaml", 64u << 20, &data, &len,
                            err);
    r->config = ckpt_path_join(r->scratch, "run-config.yaml");
    if (rc == 0 && ckpt_mkdirs(r->scratch, err) == 0) {
        FILE *fp = fopen(r->config, "wb");
        if (!fp || fwrite(data, 1, len, fp) != len || fclose(fp) != 0)
            rc = ckpt_err_sys(err, "write '%s'", r->config);
    } else {
        rc = -1;
    }
    free(data);
    return rc;
}

/* Steps of a remote run (ranged reads) and of a plain tar (member reads)
 * are read in place; a local directory's are read where they are. */
static int in_place(const struct runctx *r)
{
    return r->remote || r->tree->archive == CKPT_ARCHIVE_TAR;
}

/* Steps are read from a scratch copy, removed once it has been used: a
 * zip's (a compressed archive's are spooled, spool_run). */
static int copied(const struct runctx *r)
{
    return r->tree->archive != CKPT_ARCHIVE_NONE && !in_place(r);
}

static int open_members(struct runctx *r, struct ckpt_err *err)
{
    struct ckpt_member *v = ckpt_xcalloc(r->tree->n + 1, sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < r->tree->n; i++) {
        const struct ckpt_tree_file *f = &r->tree->files[i];
        if (f->type == CKPT_ENTRY_FILE && f->data_offset != CKPT_NO_OFFSET)
            v[n++] = (struct ckpt_member){ f->path, f->data_offset, f->size };
    }
    int rc = ckpt_storage_open_members(&r->members, r->st, r->tree->key, v,
                                       n, err);
    free(v);
    return rc;
}

/* Where checkpoint k is read from: in place (a local run; a step of a
 * remote run through the run's storage; a step of a plain tar through
 * its members), or a scratch copy (a step of a zip, extracted). */
static char *step_dir(struct runctx *r, const struct ckpt_checkpoint *k,
                      struct ckpt_err *err)
{
    if (r->tree->archive == CKPT_ARCHIVE_NONE && !r->remote)
        return ckpt_path_join(r->tree->key, k->dir);
    if (in_place(r)) {
        if (!r->remote && !r->members && open_members(r, err) != 0)
            return NULL;
        char *why = ckpt_xasprintf("read in place from %s", r->src);
        step_row(r, "info", k, why, NULL, NULL);
        free(why);
        r->uo.storage = r->remote ? r->st : r->members;
        return ckpt_path_join(r->tree->key, k->dir);
    }
    char *to = ckpt_path_join(r->scratch, k->dir);
    (void)ckpt_gate_rm_tree(OWN_SCRATCH, to, NULL);
    if (ckpt_mkdirs(r->scratch, err) != 0 || extract(r, k->dir, err) != 0) {
        (void)ckpt_gate_rm_tree(OWN_SCRATCH, to, NULL);
        free(to);
        return NULL;
    }
    return to;
}

/* Unshard checkpoint k, read from dir (a local directory, or a location
 * of a remote run), into out, then delete the sharded original when
 * asked; one row either way. */
static int unshard_step(struct runctx *r, const struct ckpt_checkpoint *k,
                        const char *dir, const char *out)
{
    const struct ckpt_unshard_run_cfg *c = r->cfg;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_unshard_result res;
    r->uo.config_yaml = r->config;
    memset(&res, 0, sizeof(res));
    if (run_unshard(r, k->format, dir, out, &res, &err) != 0) {
        step_row(r, "error", k, err.msg, NULL, NULL);
        return -1;
    }
    int failed = 0;
    char *why = ckpt_xasprintf("%s: %zu file%s, %llu tensors", out,
                               res.nfiles, res.nfiles == 1 ? "" : "s",
                               (unsigned long long)res.tensors);
    const char *partial = ckpt_unshard_partial(k);
    char *unowned = ckpt_checkpoint_unowned(k);
    if (unowned && !partial)
        partial = unowned;
    if (c->delete_sharded && !k->complete) {
        /* Not proven complete: the copy licenses no delete. */
        char *w = ckpt_xasprintf("%s; %s kept (not judged complete: %s)",
                                 why, k->name, k->why ? k->why : "?");
        free(why);
        why = w;
    } else if (c->delete_sharded && partial) {
        /* The copy holds less than the step: it licenses no delete. */
        char *w = ckpt_xasprintf("%s; %s kept (%s)", why, k->name, partial);
        free(why);
        why = w;
    } else if (c->delete_sharded && !c->uo.dry_run) {
        char *sharded = ckpt_path_join(r->src, k->dir);
        if (delete_step(r, k, &err) != 0) {
            failed = 1;
            step_row(r, "error", k, err.msg, &res, out);
        } else {
            char *w = ckpt_xasprintf("%s; deleted %s", why, sharded);
            free(why);
            why = w;
        }
        free(sharded);
    } else if (c->delete_sharded && step_mount(r, k, &err) != 0) {
        /* -n: the delete that would follow is refused (a mount inside) */
        failed = 1;
        step_row(r, "error", k, err.msg, &res, out);
    } else if (c->delete_sharded) {
        /* -n says the delete the real run would do, as it would say it */
        char *sharded = ckpt_path_join(r->src, k->dir);
        char *w = ckpt_xasprintf("%s; would delete %s", why, sharded);
        free(why);
        why = w;
        free(sharded);
    }
    free(unowned);
    if (!failed)
        step_row(r, msg_done[c->uo.dry_run ? 1 : 0], k, why, &res, out);
    ckpt_unshard_result_release(&res);
    free(why);
    return failed ? -1 : 0;
}

static char *out_dir_of(struct runctx *r, const struct ckpt_checkpoint *k)
{
    if (whole(r, k))
        return ckpt_xstrdup(r->dest);
    char *name = ckpt_xasprintf("%s%s", k->name, suffix(r));
    char *out = ckpt_path_join(r->dest, name);
    free(name);
    return out;
}

/* Why the copy named dir in run is not a complete unsharded checkpoint
 * (malloced), or NULL when it is one. */
static char *copy_fault(const struct ckpt_run *run, const char *dir)
{
    for (size_t i = 0; i < run->n; i++) {
        const struct ckpt_checkpoint *c = &run->ckpts[i];
        if (strcmp(c->dir, dir) != 0)
            continue;
        if (!c->complete)
            return ckpt_xstrdup(c->why ? c->why : "incomplete");
        if (c->format != CKPT_FMT_UNSHARDED)
            return ckpt_xasprintf("it is a %s checkpoint, not unsharded",
                                  ckpt_format_name(c->format));
        return NULL;
    }
    return ckpt_xstrdup("not a checkpoint directory");
}

/* copy_fault of the copy out in the local directory DEST, judged as
 * `ckpt ls DEST` judges it. -1 (err) if DEST cannot be read. */
static int dest_copy_fault(struct runctx *r, const char *out, char **bad,
                           struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st = r->cfg->uo.dest_storage;
    struct ckpt_storage_cfg scfg = r->uo.storage_cfg;
    scfg.jobs = 1;
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    struct ckpt_tree *t = NULL;
    struct ckpt_run run;
    const char *key = r->dest;
    int rc = 0;
    memset(&loc, 0, sizeof(loc));
    if (!st) {  /* DEST as a location: opened for this look */
        if (ckpt_loc_parse(&loc, r->dest, err) != 0)
            return -1;
        rc = ckpt_storage_open(&st, &loc, &scfg, err);
        key = loc.key;
    }
    if (rc == 0)
        rc = ckpt_run_load(st, key, 0, &sb, &status, &t, &run, err);
    if (rc == 0 && status != CKPT_LOAD_OK)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s' is not a directory",
                          r->dest);
    else if (rc == 0) {
        char *name = ckpt_path_basename(out);
        *bad = copy_fault(&run, name);
        free(name);
        ckpt_run_release(&run);
    }
    ckpt_tree_free(t);
    if (st != r->cfg->uo.dest_storage)
        ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    return rc;
}

/* A remote DEST's copy counts as there only when `ckpt ls` would judge
 * it complete: one a killed run left (marked unfinished) is redone. */
static int dest_complete(struct runctx *r, const char *out)
{
    char *bad = NULL;
    struct ckpt_err err;
    int ok = dest_copy_fault(r, out, &bad, &err) == 0 && !bad;
    free(bad);
    return ok;
}

/* A copy found complete by its structure licenses no delete until its
 * bytes are shown to be this step's: the step is unsharded again into
 * scratch (unshard is deterministic) and each file it makes must be in
 * the copy (out: its location; in the run: the sibling) with the same
 * bytes. NULL when they are, else why not (malloced). */
static char *copy_not_ours(struct runctx *r, const struct ckpt_checkpoint *k,
                           const char *out, enum copy copy)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_unshard_result res;
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    struct ckpt_storage_cfg scfg = r->uo.storage_cfg;
    scfg.jobs = 1;
    const char *base = r->cfg->tmp_dir ? r->cfg->tmp_dir
                     : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *scratch = ckpt_temp_path(base), *why = NULL, *dir = NULL;
    char *key = NULL;
    memset(&res, 0, sizeof(res));
    memset(&loc, 0, sizeof(loc));
    char *sdir = step_dir(r, k, &err);
    struct ckpt_unshard_opts uo = r->uo;
    uo.source_format = (int)k->format;
    uo.dest_storage = NULL;
    uo.dry_run = 0;
    uo.checksum = 1;
    uo.config_yaml = r->config;
    uo.planned = NULL;
    uo.progress = NULL;
    if (!sdir || ckpt_unshard_dcp(sdir, scratch, &uo, &res, &err) != 0)
        why = ckpt_xasprintf("it could not be unsharded again to compare: "
                             "%s", err.msg);
    if (!why && copy == COPY_IN_RUN) {
        st = r->st;
        dir = ckpt_xasprintf("%s-unsharded", k->dir);
        key = ckpt_path_join(r->tree->key, dir);
    } else if (!why && (st = r->cfg->uo.dest_storage)) {
        key = ckpt_xstrdup(out);
    } else if (!why && (ckpt_loc_parse(&loc, out, &err) != 0 ||
                        ckpt_storage_open(&st, &loc, &scfg, &err) != 0)) {
        why = ckpt_xstrdup(err.msg);
        st = NULL;
    } else if (!why) {
        key = ckpt_xstrdup(loc.key);
    }
    if (!why)
        why = uns_copy_differs(st, key, &res);
    if (st && st != r->st && st != r->cfg->uo.dest_storage)
        ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    ckpt_unshard_result_release(&res);
    (void)ckpt_gate_rm_tree(OWN_SCRATCH, scratch, NULL);
    free(scratch);
    free(sdir);
    free(dir);
    free(key);
    return why;
}

/* --delete-sharded on a step whose -unsharded copy exists already (made
 * earlier, or by a run killed between renaming the output into place and
 * the delete): the sharded step goes when the copy is a complete unsharded
 * checkpoint by the rules of `ckpt ls`; otherwise it stays, as an error. */
static int delete_copied(struct runctx *r, const struct ckpt_checkpoint *k,
                         const char *out, enum copy copy)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    char *where = copy == COPY_IN_RUN
                  ? ckpt_xasprintf("%s-unsharded in the run", k->name)
                  : ckpt_xstrdup(out);
    char *bad = NULL, *why = NULL;
    int rc = 0;
    const char *partial = ckpt_unshard_partial(k);
    char *unowned = ckpt_checkpoint_unowned(k);
    if (partial || unowned) {
        /* Whatever the copy is, it holds less than the step. */
        why = ckpt_xasprintf("already unsharded: %s exists; %s kept (%s)",
                             where, k->name, partial ? partial : unowned);
        free(unowned);
        step_row(r, "skip", k, why, NULL, copy == COPY_AT_DEST ? out : NULL);
        free(why);
        free(where);
        return 0;
    }
    if (copy == COPY_IN_RUN) {
        char *sib = ckpt_xasprintf("%s-unsharded", k->dir);
        bad = copy_fault(&r->run, sib);
        free(sib);
    } else {
        rc = dest_copy_fault(r, out, &bad, &err);
    }
    if (rc != 0)
        why = ckpt_xasprintf("already unsharded: %s exists, but it could not "
                             "be checked (%s); %s not deleted", where,
                             err.msg, k->name);
    else if (bad)
        why = ckpt_xasprintf("already unsharded: %s exists, but it is not "
                             "complete (%s); %s not deleted", where, bad,
                             k->name);
    else if ((bad = copy_not_ours(r, k, out, copy)))
        why = ckpt_xasprintf("already unsharded: %s exists, but it is not "
                             "what %s unshards to (%s); %s not deleted",
                             where, k->name, bad, k->name);
    else if (r->cfg->uo.dry_run && (rc = step_mount(r, k, &err)) != 0)
        why = ckpt_xstrdup(err.msg);
    else if (r->cfg->uo.dry_run)
        step_row(r, "would-delete", k, (why = ckpt_xasprintf(
                     "already unsharded: %s is complete", where)), NULL,
                 NULL);
    else if ((rc = delete_step(r, k, &err)) != 0)
        why = ckpt_xstrdup(err.msg);
    else {
        char *sharded = ckpt_path_join(r->src, k->dir);
        step_row(r, "deleted", k, (why = ckpt_xasprintf(
                     "already unsharded: %s is complete; deleted %s", where,
                     sharded)), NULL, NULL);
        free(sharded);
    }
    int failed = rc != 0 || bad;
    if (failed)
        step_row(r, "error", k, why, NULL, NULL);
    free(why);
    free(bad);
    free(where);
    return failed ? -1 : 0;
}

/* Skip k with a row if it has nothing to do: 1 (skipped), or 0. With
 * --delete-sharded, a step already unsharded is deleted instead. */
static int skip_step(struct runctx *r, const struct ckpt_checkpoint *k,
                     const char *out, int *failed)
{
    enum copy copy;
    char *why = skip_reason(r, k, out, failed, &copy);
    if (why && copy != COPY_NONE && r->cfg->delete_sharded) {
        free(why);
        *failed = delete_copied(r, k, out, copy) != 0;
        return 1;
    }
    if (why)
        step_row(r, *failed ? "error" : "skip", k, why, NULL,
                 copy == COPY_AT_DEST ? out : NULL);
    free(why);
    return why != NULL;
}

static int do_step(struct runctx *r, const struct ckpt_checkpoint *k)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    char *out = out_dir_of(r, k);
    int failed = 0;
    if (skip_step(r, k, out, &failed)) {
        free(out);
        return failed ? -1 : 0;
    }
    char *dir = step_dir(r, k, &err);
    if (!dir) {
        step_row(r, "error", k, err.msg, NULL, NULL);
        failed = 1;
    } else {
        failed = unshard_step(r, k, dir, out) != 0;
    }
    r->uo.storage = NULL;
    /* Scratch copies (extracted) go as soon as they are used. */
    if (dir && copied(r))
        (void)ckpt_gate_rm_tree(OWN_SCRATCH, dir, NULL);
    free(dir);
    free(out);
    return failed ? -1 : 0;
}

/* --- compressed archives: one streaming pass ----------------------------- */

/*
 * A .tar.gz/.zst/.bz2/.xz can only be read from the start. Rather than
 * decompressing it once per step, one pass spools the members of every
 * chosen step into the scratch directory and unshards a step (deleting
 * its spool) as soon as its last file has arrived, so scratch holds one
 * step at a time when steps are stored contiguously, as tar stores
 * directories. Rows then come in archive order.
 */
struct spooled {
    const struct ckpt_checkpoint *k;
    char *out;              /* owned */
    char *dir;              /* owned: scratch/<k->dir> */
    size_t left;            /* files still to arrive */
    int done;
};

static size_t step_files(const struct ckpt_tree *t, const char *dir)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += t->files[i].type == CKPT_ENTRY_FILE &&
             below(t->files[i].path, dir);
    return n;
}

static struct spooled *spool_of(struct spooled *v, size_t n, const char *rel)
{
    for (size_t i = 0; i < n; i++)
        if (!v[i].done && below(rel, v[i].k->dir))
            return &v[i];
    return NULL;
}

static int spool_pass(struct runctx *r, struct spooled *v, size_t n,
                      struct ckpt_err *err)
{
    struct ckpt_archive *a;
    struct ckpt_archive_entry e;
    const char *strip = r->tree->strip;
    size_t sl = strlen(strip);
    int rc = 0, failed = 0;
    if (ckpt_archive_open(&a, r->st, r->tree->key, err) != 0)
        return -1;
    while (!cancelled(r) && (rc = ckpt_archive_next(a, &e, err)) == 1) {
        if (e.type != CKPT_ENTRY_FILE || strncmp(e.path, strip, sl) != 0)
            continue;
        struct spooled *s = spool_of(v, n, e.path + sl);
        if (!s)
            continue;
        if (!r->spooled) {
            char *to = ckpt_path_join(r->scratch, e.path + sl);
            rc = extract_member(a, to, e.path, err);
            free(to);
            if (rc != 0)
                break;
        }
        if (--s->left)
            continue;
        s->done = 1;
        failed |= unshard_step(r, s->k, s->dir, s->out) != 0;
        if (!r->spooled)
            (void)ckpt_gate_rm_tree(OWN_SCRATCH, s->dir, NULL);
    }
    ckpt_archive_close(a);
    if (rc < 0)
        ckpt_err_prefix(err, "%s", r->src);
    return rc < 0 ? -1 : failed;
}

static int spool_run(struct runctx *r, const size_t *pick, size_t n)
{
    struct spooled *v = ckpt_xcalloc(n + 1, sizeof(*v));
    struct ckpt_err err = CKPT_ERR_INIT;
    size_t m = 0;
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        const struct ckpt_checkpoint *k = &r->run.ckpts[pick[i]];
        char *out = out_dir_of(r, k);
        int f = 0;
        if (skip_step(r, k, out, &f)) {
            failed |= f;
            free(out);
            continue;
        }
        /* A spooled archive's step is read where the spool has it;
         * the steps still come in archive order, as a pass gives them. */
        v[m] = (struct spooled){ k, out, ckpt_path_join(r->spooled
                                                        ? r->spooled
                                                        : r->scratch,
                                                        k->dir),
                                 step_files(r->tree, k->dir), 0 };
        m++;
    }
    int rc = m ? spool_pass(r, v, m, &err) : 0;
    if (rc < 0)
        failed = 1;
    for (size_t i = 0; i < m; i++) {
        if (!v[i].done && !cancelled(r))
            step_row(r, "error", v[i].k, rc < 0 ? err.msg : "the archive "
                     "ended before all of the step's files were read",
                     NULL, NULL);
        failed |= !v[i].done;
        if (!r->spooled)
            (void)ckpt_gate_rm_tree(OWN_SCRATCH, v[i].dir, NULL);
        free(v[i].dir);
        free(v[i].out);
    }
    free(v);
    return failed | rc;
}

/* Which checkpoints to act on: sharded ones, narrowed by --step and
 * --latest (the newest complete one). Returns a malloced index array. */
static size_t *choose(struct runctx *r, size_t *n)
{
    const struct ckpt_unshard_run_cfg *c = r->cfg;
    size_t *v = ckpt_xcalloc(r->run.n + 1, sizeof(*v)), latest = SIZE_MAX;
    *n = 0;
    for (size_t i = 0; i < r->run.n; i++) {
        const struct ckpt_checkpoint *k = &r->run.ckpts[i];
        if (k->unsharded_name || (c->has_step && k->step != c->step) ||
            (c->skip_step0 && k->step == 0))
            continue;
        if (c->latest) {
            if (k->complete && k->format != CKPT_FMT_UNSHARDED)
                latest = i;
            continue;
        }
        v[(*n)++] = i;
    }
    if (c->latest && latest != SIZE_MAX)
        v[(*n)++] = latest;
    return v;
}

static int open_run(struct runctx *r, const char *key, struct ckpt_err *err)
{
    struct ckpt_stat sb;
    enum ckpt_load_status status = CKPT_LOAD_OK;
    int rc = 0;
    if (r->cfg->tree) {     /* loaded by the caller: taken over */
        r->tree = r->cfg->tree;
        r->run = *r->cfg->run;
    } else {
        rc = ckpt_run_load(r->st, key, 0, &sb, &status, &r->tree, &r->run,
                           err);
    }
    if (rc == 0 && status != CKPT_LOAD_OK) {
        ckpt_tree_free(r->tree);
        r->tree = NULL;
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': not a run directory "
                          "or archive", r->src);
    }
    if (rc == 0)
        r->remote = r->tree->archive == CKPT_ARCHIVE_NONE &&
                    !ckpt_storage_is_local(r->st);
    char *root = rc == 0 && ckpt_archive_compressed(r->tree->archive)
               ? ckpt_archive_spool_root(r->st, key) : NULL;
    if (root) {
        r->spooled = ckpt_path_join(root, r->tree->strip);
        free(root);
    }
    return rc;
}

/* The steps a killed `unshard --delete-sharded` (or clean's prune) of
 * this host renamed aside to .DIR.ckpt-del-HOST-PID: the rename committed
 * their delete, so --delete-sharded finishes it, one event each (without
 * it, a "warning" event says what is there). */
static int finish_dead_delete(struct runctx *r, const char *name)
{
    struct ckpt_checkpoint k;
    struct ckpt_err err = CKPT_ERR_INIT;
    memset(&k, 0, sizeof(k));
    /* Checked again: a pid reused since the listing is live, not ours. */
    if (!ckpt_del_dead(name, &k.name))
        return 0;
    ckpt_checkpoint_name(k.name, &k.step, &k.unsharded_name);
    char *path = ckpt_path_join(r->tree->key, name), *why = NULL;
    int rc = 0;
    if (!r->cfg->delete_sharded)
        step_row(r, "warning", &k, (why = ckpt_xasprintf(
                     "%s: left by an interrupted delete of %s; "
                     "--delete-sharded finishes it", path, k.name)), NULL,
                 NULL);
    else if (r->cfg->uo.dry_run)
        step_row(r, "would-delete", &k, (why = ckpt_xasprintf(
                     "finishes an interrupted delete (%s)", name)), NULL,
                 NULL);
    else if ((rc = ckpt_gate_delete_tree(&(struct ckpt_gate_proof){
                  .rule = CKPT_GATE_ASIDE, .recheck = ckpt_gate_dead_aside,
                  .data = path, .evidence = "a delete a dead process of "
                  "this host committed by its rename" }, r->st, path,
                  &err)) != 0)
        step_row(r, "error", &k, err.msg, NULL, NULL);
    else
        step_row(r, "deleted", &k, (why = ckpt_xasprintf(
                     "finished an interrupted delete (%s)", name)), NULL,
                 NULL);
    free(why);
    free(path);
    free(k.name);
    return rc;
}

static int finish_dead_deletes(struct runctx *r, size_t *found)
{
    size_t n;
    char **v = ckpt_del_dead_in(r->tree->key, &n);
    int failed = 0;
    *found = n;
    for (size_t i = 0; i < n; i++) {
        failed |= finish_dead_delete(r, v[i]) != 0;
        free(v[i]);
    }
    free(v);
    return failed ? -1 : 0;
}

/* SRC without checkpoints that is itself already whole (a step holding
 * model.pt, model.safetensors, ...: what ckpt ls calls unsharded): the
 * row's detail naming its files, or NULL. */
static char *whole_src(struct runctx *r)
{
    if (!ckpt_run_root_whole(r->tree))
        return NULL;
    struct ckpt_buf b = CKPT_BUF_INIT;
    size_t n = 0;
    static const char *const exts[] = { ".pt", ".pth", ".bin", ".ckpt",
                                        ".safetensors" };
    for (size_t i = 0; i < r->tree->n; i++) {
        const struct ckpt_tree_file *f = &r->tree->files[i];
        int weights = 0;
        for (size_t e = 0; e < sizeof(exts) / sizeof(exts[0]); e++)
            weights |= ckpt_str_endswith(f->path, exts[e]);
        /* The weights files, not config.yaml beside them. */
        if (f->type == CKPT_ENTRY_FILE && !strchr(f->path, '/') && weights)
            ckpt_buf_addf(&b, "%s%s", n++ ? ", " : "", f->path);
    }
    if (!n)
        ckpt_buf_addstr(&b, "its files");
    char *why = ckpt_xasprintf("not sharded: %s %s already whole, nothing "
                               "to merge", b.ptr, n == 1 ? "is" : "are");
    ckpt_buf_release(&b);
    return why;
}

/* --delete-sharded writes outputs and then deletes steps: DEST inside
 * (or at) any checkpoint directory of the run would be written into a
 * step and deleted with it. Refused before anything is done: -1 with err
 * naming both, else 0. */
static int dest_in_step(struct runctx *r, struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st = r->cfg->uo.dest_storage;
    struct ckpt_storage_cfg scfg = r->uo.storage_cfg;
    scfg.jobs = 1;
    const char *key = r->dest;
    int rc = 0;
    memset(&loc, 0, sizeof(loc));
    if (!st) {
        if (ckpt_loc_parse(&loc, r->dest, err) != 0)
            return -1;
        if (ckpt_storage_open(&st, &loc, &scfg, err) != 0) {
            ckpt_loc_release(&loc);
            return -1;
        }
        key = loc.key;
    }
    for (size_t i = 0; rc == 0 && i < r->run.n; i++) {
        const struct ckpt_checkpoint *k = &r->run.ckpts[i];
        char *ck = ckpt_tree_key(r->tree, k->dir);
        enum ckpt_loc_rel rel = ck ? ckpt_storage_relation(r->st, ck, st,
                                                           key)
                                   : CKPT_LOC_APART;
        if (rel == CKPT_LOC_SAME || rel == CKPT_LOC_B_INSIDE_A) {
            char *cd = ckpt_storage_display(r->st, ck);
            rc = ckpt_err_set(err, CKPT_EUSAGE, "--delete-sharded: DEST "
                              "'%s' is inside '%s', a checkpoint it may "
                              "delete; nothing done", r->dest, cd);
            free(cd);
        }
        free(ck);
    }
    if (st != r->cfg->uo.dest_storage)
        ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    return rc;
}

/* --format hf of SRC that is one whole checkpoint (an HF model
 * directory, an HF Trainer checkpoint-N: safetensors files): nothing to
 * merge, but its model becomes DEST as an export does (names as stored,
 * config.json beside). A directory only; 0 or -1, one row. */
static int export_whole(struct runctx *r)
{
    struct ckpt_checkpoint k;
    struct ckpt_err err = CKPT_ERR_INIT;
    memset(&k, 0, sizeof(k));
    k.name = ckpt_path_basename(r->src);
    k.dir = ckpt_xstrdup("");
    k.step = -1;
    k.format = CKPT_FMT_UNSHARDED;
    k.complete = 1;
    k.root = 1;
    r->uo.storage = r->remote ? r->st : NULL;
    struct ckpt_unshard_result res;
    memset(&res, 0, sizeof(res));
    struct ckpt_unshard_opts uo = r->uo;
    uo.source_format = CKPT_FMT_UNSHARDED;    /* read as safetensors */
    int rc = ckpt_unshard_dcp(r->tree->key, r->dest, &uo, &res, &err);
    r->uo.storage = NULL;
    if (rc != 0) {
        step_row(r, "error", &k, err.msg, NULL, NULL);
    } else {
        char *why = ckpt_xasprintf("%s: %zu file%s, %llu tensors", r->dest,
                                   res.nfiles, res.nfiles == 1 ? "" : "s",
                                   (unsigned long long)res.tensors);
        step_row(r, msg_done[r->uo.dry_run ? 1 : 0], &k, why, &res, r->dest);
        free(why);
    }
    ckpt_unshard_result_release(&res);
    free(k.name);
    free(k.dir);
    return rc;
}

int ckpt_unshard_run(struct ckpt_storage *st, const char *key,
                     const char *src, const char *dest,
                     const struct ckpt_unshard_run_cfg *cfg)
{
    struct runctx r;
    struct ckpt_err err = CKPT_ERR_INIT;
    int failed = 0;
    memset(&r, 0, sizeof(r));
    r.cfg = cfg;
    r.uo = cfg->uo;
    r.st = st;
    r.src = src;
    r.dest = dest;
    r.dest_remote = cfg->uo.dest_storage
                    ? !ckpt_storage_is_local(cfg->uo.dest_storage)
                    : strstr(dest, "://") && strncmp(dest, "file://", 7);
    if (open_run(&r, key, &err) != 0) {
        step_row(&r, "error", NULL, err.msg, NULL, NULL);
        failed = 1;
        goto out;
    }
    int archive = r.tree->archive != CKPT_ARCHIVE_NONE;
    size_t finished = 0;
    if (!archive && !r.remote)
        failed |= finish_dead_deletes(&r, &finished) != 0;
    if (cfg->uo.nparts > 1) {
        step_row(&r, "error", NULL, "--part writes a share of one "
                 "checkpoint's export: give the step, not a run; nothing "
                 "done", NULL, NULL);
        failed = 2;
        goto out;
    }
    if (cfg->delete_sharded && cfg->uo.format == CKPT_FORMAT_HF) {
        step_row(&r, "error", NULL, "--delete-sharded never deletes on the "
                 "strength of an HF export: it holds the model only, the "
                 "step is the only copy of its optimizer and trainer "
                 "state; nothing done", NULL, NULL);
        failed = 2;
        goto out;
    }
    if (archive && cfg->delete_sharded) {
        step_row(&r, "error", NULL, "--delete-sharded never deletes inside "
                 "an archive; nothing done", NULL, NULL);
        failed = 2;
        goto out;
    }
    if (cfg->delete_sharded && dest_in_step(&r, &err) != 0) {
        step_row(&r, "error", NULL, err.msg, NULL, NULL);
        failed = err.code == CKPT_EUSAGE ? 2 : 1;
        goto out;
    }
    /* Scratch beside the outputs (same file system, cleaned with them);
     * a dry run leaves DEST alone. */
    const char *base = cfg->tmp_dir ? cfg->tmp_dir : dest;
    if ((cfg->uo.dry_run || r.dest_remote) && !cfg->tmp_dir)
        base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int scratch = archive && !in_place(&r);
    if (scratch) {
        /* A killed run's scratch (a whole step) goes with the next run. */
        ckpt_temp_sweep(base);
        r.scratch = ckpt_temp_path(base);
    }
    if (scratch && r.run.has_config && save_config(&r, &err) != 0) {
        step_row(&r, "error", NULL, err.msg, NULL, NULL);
        failed = 1;
        goto out;
    } else if (!scratch && r.run.has_config) {
        /* Read where the steps are: a local file, or a key of the run's
         * storage (remote) or of the tar's members. */
        r.config = ckpt_path_join(r.tree->key, "config.yaml");
    }
    size_t n, *pick = choose(&r, &n);
    if (!n && !cfg->has_step && (r.run.n || finished)) {
        /* Only unsharded checkpoints: a rerun after everything was done. */
        step_row(&r, "skip", NULL, "no sharded checkpoint", NULL, NULL);
    } else if (!n) {
        /* A checkpoint that is whole already (a step of model.pt) is
         * what run mode skips as "not sharded": said so, not "none". */
        char *whole = cfg->has_step ? NULL : whole_src(&r);
        if (whole && cfg->uo.format == CKPT_FORMAT_HF && !archive)
            failed |= export_whole(&r) != 0;
        else
            step_row(&r, whole ? "skip" : "error", NULL, whole ? whole :
                     cfg->has_step ? "no sharded checkpoint with that step"
                                   : "no checkpoint", NULL, NULL);
        failed |= !whole;
        free(whole);
    }
    if (n && ckpt_archive_compressed(r.tree->archive))
        failed |= spool_run(&r, pick, n) != 0;
    else
        for (size_t i = 0; i < n && !cancelled(&r); i++)
            failed |= do_step(&r, &r.run.ckpts[pick[i]]) != 0;
    free(pick);
out:
    (void)ckpt_gate_rm_tree(OWN_SCRATCH, r.scratch, NULL);
    free(r.scratch);
    free(r.spooled);
    free(r.config);
    ckpt_storage_close(r.members);
    if (r.tree)
        ckpt_run_release(&r.run);
    ckpt_tree_free(r.tree);
    return failed;
}
