/*
 * cmd_unshard.c - `ckpt unshard [options] SRC DEST`: consolidate a sharded
 * checkpoint (DCP, OLMo torch_legacy, local and olmo_core, zarr, Orbax), or
 * every sharded step of a run directory or archive, into whole tensors.
 * Phases: parse, find checkpoints, unshard each, report.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/archive.h"
#include "ckpt/run.h"
#include "ckpt/storage.h"
#include "ckpt/tempname.h"
#include "ckpt/unshard.h"
#include "ckpt/upload.h"
#include "ckpt/text.h"
#include "ckpt/util.h"
#include "cli.h"
#include "runs.h"

static const char *const usage[] = {
    "ckpt unshard [options] SRC DEST",
    "",
    "Merge the shards of a checkpoint into whole tensors in directory",
    "DEST: PyTorch DCP (.metadata and __R_N.distcp files, also",
    "model_and_optim/ of an OLMo step), OLMo torch_legacy (rank*.pt), OLMo",
    "local (model/, optim/, train/rank*.pt, metadata.yaml), OLMo olmo_core",
    "(model/ and optim/ rank_*.safetensors), zarr v2 (.zgroup) and",
    "Orbax steps (OCDBT, per-array zarr or msgpack items; read in place",
    "from S3/GCS/R2 too). If SRC is a run (directory or archive), each",
    "complete sharded stepN becomes DEST/stepN-unsharded/.",
    "Outputs appear atomically; nothing is executed from any pickle.",
    "-j default: one worker per CPU core (decoding is CPU-bound); fetching",
    "a remote run: 16 files in flight.",
    NULL
};

struct cmd {
    struct ckpt_opts g;
    const char *layout, *format;
    uint64_t max_shard;
    int allow_replicas, allow_unsafe_pickle, verify, latest, delete_sharded;
    int no_sync;
    const char *step;
    struct ckpt_unshard_opts uo;
    struct progress *prog;
};

/* Ctrl-C / SIGTERM: the run stops at the next piece and removes its
 * temporary outputs; a second signal kills as usual. */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = 1;
    signal(sig, SIG_DFL);
}

static int parse(struct cmd *c, int *argc, char **argv)
{
    struct option opts[] = {
        OPT_STR_(0, "layout", &c->layout, "L",
                 "single (checkpoint.pt) or olmo (model/optim/train.pt)"),
        OPT_STR_(0, "format", &c->format, "F", "torch or safetensors"),
        OPT_SIZE_(0, "max-shard-size", &c->max_shard, "SIZE",
                  "split safetensors output above SIZE (default 5G)"),
        OPT_BOOL_(0, "allow-replicas", &c->allow_replicas,
                  "accept identical replicated chunks"),
        OPT_BOOL_(0, "allow-unsafe-pickle", &c->allow_unsafe_pickle,
                  "also write pickled globals torch.load(weights_only) "
                  "refuses (warns)"),
        OPT_BOOL_(0, "verify", &c->verify,
                  "re-read the output and compare with the sources"),
        OPT_BOOL_(0, "latest", &c->latest, "run: only the newest step"),
        OPT_STR_(0, "step", &c->step, "N", "run: only step N"),
        OPT_BOOL_(0, "delete-sharded", &c->delete_sharded,
                  "run: delete each sharded step once verified"),
        OPT_BOOL_(0, "no-sync", &c->no_sync,
                  "do not fsync outputs before renaming them"),
        OPT_END_(),
    };
    int n = cli_parse_options(*argc, argv, opts, usage, &c->g);
    if (n < 0)
        return n == -2 ? EXIT_OK : EXIT_USAGE;
    *argc = n;
    return -1;
}

static int usage_err(const char *msg, const char *arg)
{
    char *e = ckpt_escape(arg);
    fprintf(stderr, "ckpt unshard: error: ");
    fprintf(stderr, msg, e);
    free(e);
    fprintf(stderr, "\nusage: %s\n(see 'ckpt unshard --help')\n", usage[0]);
    return EXIT_USAGE;
}

/* Remote output does not exist yet: a remote DEST would otherwise be
 * taken for a local path and make a directory named "s3:". */
static int local_dest(const char *dest)
{
    struct ckpt_loc loc;
    struct ckpt_err err;
    if (ckpt_loc_parse(&loc, dest, &err) != 0)
        return usage_err("%s", err.msg);
    int remote = loc.scheme != CKPT_SCHEME_LOCAL;
    ckpt_loc_release(&loc);
    if (remote)
        return usage_err("DEST '%s' is remote: unshard writes to a local "
                         "directory only (unshard there, then ckpt upload)",
                         dest);
    return -1;
}

static int validate(struct cmd *c, int argc, char **argv)
{
    struct ckpt_unshard_opts *o = &c->uo;
    if (argc != 2)
        return usage_err("%s", "expected SRC and DEST");
    int rc = local_dest(argv[1]);
    if (rc >= 0)
        return rc;
    if (!c->layout)
        o->layout = CKPT_LAYOUT_AUTO;
    else if (!strcmp(c->layout, "single"))
        o->layout = CKPT_LAYOUT_SINGLE;
    else if (!strcmp(c->layout, "olmo"))
        o->layout = CKPT_LAYOUT_OLMO;
    else
        return usage_err("unknown --layout '%s' (single or olmo)", c->layout);
    if (!c->format || !strcmp(c->format, "torch"))
        o->format = CKPT_FORMAT_TORCH;
    else if (!strcmp(c->format, "safetensors"))
        o->format = CKPT_FORMAT_SAFETENSORS;
    else
        return usage_err("unknown --format '%s' (torch or safetensors)",
                         c->format);
    uint64_t step;
    if (c->step && ckpt_parse_u64(c->step, &step) != 0)
        return usage_err("--step needs a number, got '%s'", c->step);
    o->max_shard_size = c->max_shard;
    o->allow_replicas = c->allow_replicas;
    o->allow_unsafe_pickle = c->allow_unsafe_pickle;
    o->verify = c->verify || c->delete_sharded;
    o->jobs = c->g.jobs;
    o->insecure = c->g.insecure;
    o->retries = c->g.retries;
    o->dry_run = c->g.dry_run;
    o->sync = !c->no_sync;
    o->tmp_dir = c->g.tmp_dir;
    o->cancel = &interrupted;
    return -1;
}

/* --- progress -------------------------------------------------------- */

static void on_planned(void *ud, const struct ckpt_unshard_result *r)
{
    struct cmd *c = ud;
    cli_debugf("plan (%s): %llu tensors in %llu chunks, %llu objects, %zu "
               "files, %llu bytes", r->metadata, (unsigned long long)r->tensors,
               (unsigned long long)r->chunks, (unsigned long long)r->objects,
               r->nfiles, (unsigned long long)r->bytes);
    if (!c->g.dry_run)
        c->prog = cli_progress_new(&c->g, "unshard", r->pieces, r->bytes);
}

static void on_progress(void *ud, uint64_t bytes)
{
    struct cmd *c = ud;
    cli_progress_add(c->prog, 1, bytes);
}

static void on_unsafe_pickle(void *ud, const char *item, const char *module,
                             const char *name)
{
    (void)ud;
    cli_warnf("%s: passing pickle global '%s.%s' through "
              "(--allow-unsafe-pickle): a plain torch.load of the output "
              "calls it", item, module, name);
}

/* --- reporting --------------------------------------------------------- */

static void report(struct cmd *c, const char *src, const char *dest,
                   const struct ckpt_unshard_result *r, double secs,
                   const struct ckpt_err *err)
{
    const char *action = err ? "error" : c->g.dry_run ? "would-unshard"
                                                      : "unshard";
    char detail[600];
    if (err)
        snprintf(detail, sizeof(detail), "%s", err->msg);
    else if (c->g.dry_run)
        snprintf(detail, sizeof(detail), "%llu tensors, %llu objects, "
                 "%llu chunks, %zu files, %llu bytes",
                 (unsigned long long)r->tensors,
                 (unsigned long long)r->objects,
                 (unsigned long long)r->chunks, r->nfiles,
                 (unsigned long long)r->bytes);
    else
        snprintf(detail, sizeof(detail), "%llu tensors, %llu objects, "
                 "%llu chunks, %zu files, %.1f MB/s",
                 (unsigned long long)r->tensors,
                 (unsigned long long)r->objects,
                 (unsigned long long)r->chunks, r->nfiles,
                 secs > 0 ? (double)r->bytes / secs / 1e6 : 0.0);
    if (!c->g.json) {
        const char *f[] = { action, src, dest, detail };
        cli_out_tsv(4, f);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "src", src);
    cJSON_AddStringToObject(o, "dest", dest);
    cJSON_AddStringToObject(o, "action", action);
    if (err) {
        cJSON_AddStringToObject(o, "error", err->msg);
        cli_out_json(o);
        return;
    }
    cJSON_AddStringToObject(o, "layout", r->layout);
    cJSON_AddNumberToObject(o, "tensors", (double)r->tensors);
    cJSON_AddNumberToObject(o, "objects", (double)r->objects);
    cJSON_AddNumberToObject(o, "chunks", (double)r->chunks);
    cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
    cJSON_AddNumberToObject(o, "seconds", secs);
    cJSON *files = cJSON_AddArrayToObject(o, "files");
    for (size_t i = 0; i < r->nfiles; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", r->files[i].name);
        cJSON_AddNumberToObject(f, "size", (double)r->files[i].size);
        cJSON_AddNumberToObject(f, "tensors", (double)r->files[i].tensors);
        cJSON_AddItemToArray(files, f);
    }
    cli_out_json(o);
}

static int supported(enum ckpt_format f)
{
    return f == CKPT_FMT_DCP || f == CKPT_FMT_OLMO_LEGACY ||
           f == CKPT_FMT_ZARR || f == CKPT_FMT_OLMO_LOCAL ||
           f == CKPT_FMT_OLMO_CORE || f == CKPT_FMT_ORBAX;
}

static int run_unshard(struct cmd *c, enum ckpt_format f, const char *src,
                       const char *dest, struct ckpt_unshard_result *r,
                       struct ckpt_err *err)
{
    c->uo.planned = on_planned;
    c->uo.progress = on_progress;
    c->uo.unsafe_pickle = on_unsafe_pickle;
    c->uo.progress_ud = c;
    c->prog = NULL;
    int rc;
    if (!supported(f))
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': unsupported "
                          "checkpoint format '%s'", src,
                          ckpt_format_name(f));
    else
        rc = ckpt_unshard_dcp(src, dest, &c->uo, r, err);
    cli_progress_done(c->prog);
    c->prog = NULL;
    return rc;
}

static int unshard_one(struct cmd *c, const char *src, const char *dest)
{
    struct ckpt_unshard_result r;
    struct ckpt_err err = CKPT_ERR_INIT;
    double t0 = ckpt_now();
    /* ckpt_unshard_dcp recognises legacy, local, olmo_core and zarr steps
     * itself. */
    int rc = run_unshard(c, CKPT_FMT_DCP, src, dest, &r, &err);
    report(c, src, dest, &r, ckpt_now() - t0, rc ? &err : NULL);
    if (rc != 0)
        cli_errorf("%s", err.msg);
    ckpt_unshard_result_release(&r);
    return rc;
}

/* --- runs ---------------------------------------------------------------- */

/*
 * Run mode: SRC is a run directory or archive. The run is read into a tree
 * and classified (ckpt_run_scan); every complete sharded checkpoint whose
 * "-unsharded" sibling exists neither in the run nor at DEST becomes
 * DEST/NAME-unsharded/. Steps of an archive are extracted one at a time
 * into a scratch directory, so scratch space never exceeds one step.
 */

static const char *const msg_done[] = { "unsharded", "would-unshard" };

struct runctx {
    struct cmd *c;
    struct storages *sts;
    struct ckpt_storage *st;    /* borrowed from storages */
    int remote;                 /* a run directory in object storage */
    struct ckpt_tree *tree;     /* owned */
    struct ckpt_run run;
    const char *src, *dest;     /* as given */
    char *scratch;              /* owned: archive and remote steps go here */
    char *config;               /* owned: the run's config.yaml, or NULL */
    struct ckpt_storage *members;   /* owned: a plain tar's members */
};

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* rank<N>.pt: an OLMo torch_legacy rank file. */
static int rank_name(const char *s)
{
    size_t l = strlen(s);
    return l > 7 && !strncmp(s, "rank", 4) && !strcmp(s + l - 3, ".pt") &&
           s[4] >= '0' && s[4] <= '9';
}

/* rank<N>.pt files directly in dir (an OLMo torch_legacy step). */
static int has_rank_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int is = 0;
    while (d && !is && (de = readdir(d)) != NULL) {
        is = rank_name(de->d_name);
    }
    if (d)
        closedir(d);
    return is;
}

static int note_ckpt_file(void *ud, const struct ckpt_entry *e)
{
    const char *s = e->name;
    if (e->type == CKPT_ENTRY_FILE &&
        (!strcmp(s, ".metadata") || !strcmp(s, "__0.metadata") ||
         !strcmp(s, ".zgroup") || rank_name(s) ||
         !strcmp(s, "_CHECKPOINT_METADATA") ||
         !strcmp(s, "commit_success.txt") || !strcmp(s, "manifest.ocdbt")))
        *(int *)ud = 1;
    return 0;
}

/* A prefix in object storage is one checkpoint if it holds checkpoint
 * files of its own (one listing, one level), else a run. */
static int is_remote_run(const struct ckpt_loc *loc, const struct cmd *c,
                         struct storages *sts)
{
    struct ckpt_storage *st;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_stat sb;
    int ckpt = 0;
    /* A storage that cannot open: the single-checkpoint path reports it. */
    if (cli_storages_get(sts, loc, &c->g, &st, &err) != 0 ||
        ckpt_storage_list(st, loc->key, 0, note_ckpt_file, &ckpt, &err) != 0)
        return 0;
    if (ckpt)
        return 0;
    char *m = ckpt_path_join(loc->key, "model_and_optim/.metadata");
    ckpt = ckpt_storage_stat(st, m, &sb, &err) == 0;
    free(m);
    return !ckpt;
}

/* SRC names a run (not one checkpoint): an archive, or a directory that
 * holds no checkpoint files of its own. */
static int is_run(const char *src, const struct cmd *c, struct storages *sts)
{
    struct ckpt_loc loc;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_archive_kind_of(src) != CKPT_ARCHIVE_NONE)
        return 1;
    if (ckpt_loc_parse(&loc, src, &err) == 0) {
        int remote = loc.scheme != CKPT_SCHEME_LOCAL;
        int run = remote && is_remote_run(&loc, c, sts);
        ckpt_loc_release(&loc);
        if (remote)
            return run;
    }
    if (!is_dir(src))
        return 0;
    static const char *const marks[] = {
        ".metadata", "__0.metadata", "model_and_optim/.metadata", ".zgroup",
        "metadata.yaml", "model/rank0.pt", "model/metadata.json",
        "model/rank_0.safetensors", "_CHECKPOINT_METADATA",
        "commit_success.txt", "manifest.ocdbt", "_METADATA", NULL
    };
    for (const char *const *m = marks; *m; m++)
        if (ckpt_is_file_in(src, *m))
            return 0;
    return !has_rank_files(src);
}

static void step_row(struct runctx *r, const char *action,
                     const struct ckpt_checkpoint *k, const char *detail,
                     const struct ckpt_unshard_result *res, const char *out)
{
    if (!strcmp(action, "error"))
        cli_errorf("%s: %s", k ? k->name : r->src, detail);
    if (!r->c->g.json) {
        const char *f[] = { action, k ? k->name : "-", detail };
        cli_out_tsv(3, f);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", r->src);
    cJSON_AddStringToObject(o, "checkpoint", k ? k->name : "-");
    if (k) {
        cJSON_AddNumberToObject(o, "step", (double)k->step);
        cJSON_AddStringToObject(o, "format", ckpt_format_name(k->format));
    }
    cJSON_AddStringToObject(o, "action", action);
    cJSON_AddStringToObject(o, !strcmp(action, "error") ? "error" : "detail",
                            detail);
    if (out)
        cJSON_AddStringToObject(o, "dest", out);
    if (res) {
        cJSON_AddStringToObject(o, "layout", res->layout);
        cJSON_AddNumberToObject(o, "tensors", (double)res->tensors);
        cJSON_AddNumberToObject(o, "bytes", (double)res->bytes);
        cJSON *files = cJSON_AddArrayToObject(o, "files");
        for (size_t i = 0; i < res->nfiles; i++)
            cJSON_AddItemToArray(files,
                                 cJSON_CreateString(res->files[i].name));
    }
    cli_out_json(o);
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
 * (ckpt_storage_delete_tree_aside), so that a kill leaves the whole step
 * or a hidden .DIR.ckpt-del-HOST-PID that a rerun finishes, never part of
 * a step under its name; a remote step's objects go in batches. */
static int delete_step(struct runctx *r, const struct ckpt_checkpoint *k,
                       struct ckpt_err *err)
{
    char *key = ckpt_path_join(r->tree->key, k->dir);
    int rc = ckpt_storage_delete_tree_aside(r->st, key, err);
    free(key);
    return rc;
}

/* Where a step's -unsharded copy already is. */
enum copy { COPY_NONE, COPY_IN_RUN, COPY_AT_DEST };

/* Why checkpoint k is not unsharded (a skip reason), or NULL. Sets *failed
 * for reasons that are errors. */
static char *skip_reason(struct runctx *r, const struct ckpt_checkpoint *k,
                         const char *out, int *failed, enum copy *copy)
{
    char *sib = ckpt_xasprintf("%s-unsharded", k->dir);
    int at_src = ckpt_tree_has_dir(r->tree, sib);
    free(sib);
    *failed = 0;
    *copy = COPY_NONE;
    if (k->format == CKPT_FMT_UNSHARDED && k->complete)
        return ckpt_xstrdup("not sharded");
    if (k->format == CKPT_FMT_UNKNOWN && k->nfiles) {
        /* A step directory holding files ckpt does not recognise (an
         * empty one is an aborted save: skipped as incomplete). */
        *failed = 1;
        return ckpt_xstrdup("unsupported checkpoint format 'unknown' (no "
                            "recognised checkpoint files)");
    }
    if (!k->complete)
        return ckpt_xasprintf("incomplete: %s", k->why ? k->why : "?");
    if (at_src) {
        *copy = COPY_IN_RUN;
        return ckpt_xasprintf("already unsharded: %s-unsharded in the run",
                              k->name);
    }
    if (is_dir(out) && !k->root) {
        *copy = COPY_AT_DEST;
        return ckpt_xasprintf("already unsharded: %s exists", out);
    }
    if (!supported(k->format)) {
        *failed = 1;
        return ckpt_xasprintf("unsupported checkpoint format '%s'",
                              ckpt_format_name(k->format));
    }
    return NULL;
}

struct fetch {
    char *failed;       /* the first file that did not arrive; owned */
};

static void on_fetch(void *ud, const struct ckpt_upload_event *ev)
{
    struct fetch *f = ud;
    if (ev->action == CKPT_UP_FAILED && !f->failed)
        f->failed = ckpt_xasprintf("fetch '%s': %s", ev->src, ev->detail);
}

/* Copy every file below the remote key from into local directory to with
 * the upload engine: parallel, each file verified on arrival. */
static int fetch_tree(struct runctx *r, const char *from, const char *to,
                      struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_storage *lst;
    struct fetch f = { NULL };
    struct ckpt_upload_cfg cfg = {
        .jobs = cli_default_jobs(&r->c->g, 64, 16), .on_event = on_fetch,
        .ud = &f,
    };
    struct ckpt_upload_totals tot;
    if (ckpt_loc_parse(&loc, to, err) != 0)
        return -1;
    int rc = cli_storages_get(r->sts, &loc, &r->c->g, &lst, err);
    struct ckpt_upload *u = rc ? NULL : ckpt_upload_new(&cfg);
    if (u && ckpt_upload_add(u, r->st, from, lst, loc.key, 0, err) != 0)
        rc = -1;
    if (u && rc == 0 && ckpt_upload_run(u, &tot) != 0)
        rc = ckpt_err_set(err, CKPT_EIO, "%s", f.failed ? f.failed :
                          "fetch of the step failed");
    ckpt_upload_free(u);
    free(f.failed);
    ckpt_loc_release(&loc);
    return rc;
}

/* The run's config.yaml, when the run is an archive or remote: copied
 * once from the run tree (which kept it while indexing a compressed
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

/* DCP steps of a plain tar are read in place, through a storage over the
 * archive's members (pread locally, ranged GETs remotely). */
static int in_place(const struct runctx *r, const struct ckpt_checkpoint *k)
{
    return k->format == CKPT_FMT_DCP &&
           (r->remote || r->tree->archive == CKPT_ARCHIVE_TAR);
}

/* Step k is read from a scratch copy, removed once it has been used. */
static int copied(const struct runctx *r, const struct ckpt_checkpoint *k)
{
    return (r->remote || r->tree->archive != CKPT_ARCHIVE_NONE) &&
           !in_place(r, k);
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

/* Where checkpoint k is read from: in place (a local run; a DCP step of a
 * remote run or of a plain tar), or a scratch copy (a step of another
 * archive, extracted; a remote step of another format, fetched). */
static char *step_dir(struct runctx *r, const struct ckpt_checkpoint *k,
                      struct ckpt_err *err)
{
    if (r->tree->archive == CKPT_ARCHIVE_NONE && !r->remote)
        return ckpt_path_join(r->tree->key, k->dir);
    if (r->remote && k->format == CKPT_FMT_DCP)
        return ckpt_path_join(r->src, k->dir);
    if (in_place(r, k)) {
        if (!r->members && open_members(r, err) != 0)
            return NULL;
        cli_debugf("%s: read in place from %s", k->name, r->src);
        r->c->uo.storage = r->members;
        return ckpt_path_join(r->tree->key, k->dir);
    }
    if (r->remote) {
        char *from = ckpt_path_join(r->tree->key, k->dir);
        char *to = ckpt_path_join(r->scratch, k->dir);
        ckpt_rm_tree(to);
        int rc = fetch_tree(r, from, to, err);
        free(from);
        if (rc != 0) {
            ckpt_rm_tree(to);
            free(to);
            return NULL;
        }
        return to;
    }
    char *to = ckpt_path_join(r->scratch, k->dir);
    ckpt_rm_tree(to);
    if (ckpt_mkdirs(r->scratch, err) != 0 || extract(r, k->dir, err) != 0) {
        ckpt_rm_tree(to);
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
    struct cmd *c = r->c;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_unshard_result res;
    c->uo.config_yaml = r->config;
    if (run_unshard(c, k->format, dir, out, &res, &err) != 0) {
        step_row(r, "error", k, err.msg, NULL, NULL);
        return -1;
    }
    int failed = 0;
    char *why = ckpt_xasprintf("%s: %zu file%s, %llu tensors", out,
                               res.nfiles, res.nfiles == 1 ? "" : "s",
                               (unsigned long long)res.tensors);
    if (c->delete_sharded && !c->g.dry_run) {
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
    }
    if (!failed)
        step_row(r, msg_done[c->g.dry_run], k, why, &res, out);
    ckpt_unshard_result_release(&res);
    free(why);
    return failed ? -1 : 0;
}

static char *out_dir_of(struct runctx *r, const struct ckpt_checkpoint *k)
{
    /* An archive that is one checkpoint unshards into DEST itself, as the
     * directory it holds does. */
    if (k->root)
        return ckpt_xstrdup(r->dest);
    char *name = ckpt_xasprintf("%s-unsharded", k->name);
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

/* copy_fault of the copy out at DEST, judged as `ckpt ls DEST` judges it.
 * -1 (err) if DEST cannot be read. */
static int dest_copy_fault(struct runctx *r, const char *out, char **bad,
                           struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    struct ckpt_tree *t = NULL;
    struct ckpt_run run;
    if (ckpt_loc_parse(&loc, r->dest, err) != 0)
        return -1;
    int rc = cli_storages_get(r->sts, &loc, &r->c->g, &st, err);
    if (rc == 0)
        rc = ckpt_run_load(st, loc.key, 0, &sb, &status, &t, &run, err);
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
    ckpt_loc_release(&loc);
    return rc;
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
    else if (r->c->g.dry_run)
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
    if (why && copy != COPY_NONE && r->c->delete_sharded) {
        free(why);
        *failed = delete_copied(r, k, out, copy) != 0;
        return 1;
    }
    if (why)
        step_row(r, *failed ? "error" : "skip", k, why, NULL, NULL);
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
    r->c->uo.storage = NULL;
    /* Scratch copies (fetched or extracted) go as soon as they are used. */
    if (dir && copied(r, k))
        ckpt_rm_tree(dir);
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
    while (!interrupted && (rc = ckpt_archive_next(a, &e, err)) == 1) {
        if (e.type != CKPT_ENTRY_FILE || strncmp(e.path, strip, sl) != 0)
            continue;
        struct spooled *s = spool_of(v, n, e.path + sl);
        if (!s)
            continue;
        char *to = ckpt_path_join(r->scratch, e.path + sl);
        rc = extract_member(a, to, e.path, err);
        free(to);
        if (rc != 0)
            break;
        if (--s->left)
            continue;
        s->done = 1;
        failed |= unshard_step(r, s->k, s->dir, s->out) != 0;
        ckpt_rm_tree(s->dir);
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
        v[m] = (struct spooled){ k, out, ckpt_path_join(r->scratch, k->dir),
                                 step_files(r->tree, k->dir), 0 };
        m++;
    }
    int rc = m ? spool_pass(r, v, m, &err) : 0;
    if (rc < 0)
        failed = 1;
    for (size_t i = 0; i < m; i++) {
        if (!v[i].done && !interrupted)
            step_row(r, "error", v[i].k, rc < 0 ? err.msg : "the archive "
                     "ended before all of the step's files were read",
                     NULL, NULL);
        failed |= !v[i].done;
        ckpt_rm_tree(v[i].dir);
        free(v[i].dir);
        free(v[i].out);
    }
    free(v);
    return failed | rc;
}

static int stream_only(enum ckpt_archive_kind a)
{
    return a == CKPT_ARCHIVE_TAR_GZ || a == CKPT_ARCHIVE_TAR_BZ2 ||
           a == CKPT_ARCHIVE_TAR_ZST || a == CKPT_ARCHIVE_TAR_XZ;
}

/* Which checkpoints to act on: sharded ones, narrowed by --step and
 * --latest (the newest complete one). Returns a malloced index array. */
static size_t *choose(struct runctx *r, size_t *n)
{
    struct cmd *c = r->c;
    uint64_t want = 0;
    size_t *v = ckpt_xcalloc(r->run.n + 1, sizeof(*v)), latest = SIZE_MAX;
    *n = 0;
    if (c->step)
        ckpt_parse_u64(c->step, &want);
    for (size_t i = 0; i < r->run.n; i++) {
        const struct ckpt_checkpoint *k = &r->run.ckpts[i];
        if (k->unsharded_name || (c->step && (uint64_t)k->step != want))
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

static int open_run(struct runctx *r, struct storages *sts,
                    struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    if (ckpt_loc_parse(&loc, r->src, err) != 0)
        return -1;
    int rc = cli_storages_get(sts, &loc, &r->c->g, &r->st, err);
    if (rc == 0)
        rc = ckpt_run_load(r->st, loc.key, 0, &sb, &status, &r->tree,
                           &r->run, err);
    if (rc == 0 && status != CKPT_LOAD_OK)
        rc = ckpt_err_set(err, CKPT_EFORMAT, "'%s': not a run directory "
                          "or archive", r->src);
    if (rc == 0)
        r->remote = r->tree->archive == CKPT_ARCHIVE_NONE &&
                    loc.scheme != CKPT_SCHEME_LOCAL;
    ckpt_loc_release(&loc);
    return rc;
}

/* The steps a killed `unshard --delete-sharded` (or clean's prune) of
 * this host renamed aside to .DIR.ckpt-del-HOST-PID: the rename committed
 * their delete, so --delete-sharded finishes it, one row each (without
 * it, a warning says what is there). */
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
    if (!r->c->delete_sharded)
        cli_warnf("%s: left by an interrupted delete of %s; "
                  "--delete-sharded finishes it", path, k.name);
    else if (r->c->g.dry_run)
        step_row(r, "would-delete", &k, (why = ckpt_xasprintf(
                     "finishes an interrupted delete (%s)", name)), NULL,
                 NULL);
    else if ((rc = ckpt_storage_delete_tree(r->st, path, &err)) != 0)
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

static int unshard_run(struct cmd *c, const char *src, const char *dest,
                       struct storages *sts)
{
    struct runctx r;
    struct ckpt_err err = CKPT_ERR_INIT;
    int failed = 0;
    memset(&r, 0, sizeof(r));
    r.c = c;
    r.sts = sts;
    r.src = src;
    r.dest = dest;
    if (open_run(&r, sts, &err) != 0) {
        step_row(&r, "error", NULL, err.msg, NULL, NULL);
        failed = 1;
        goto out;
    }
    int archive = r.tree->archive != CKPT_ARCHIVE_NONE;
    size_t finished = 0;
    if (!archive && !r.remote)
        failed |= finish_dead_deletes(&r, &finished) != 0;
    if (archive && c->delete_sharded) {
        cli_errorf("'%s': --delete-sharded never deletes inside an archive; "
                   "nothing done", src);
        failed = 2;
        goto out;
    }
    /* Scratch beside the outputs (same file system, cleaned with them);
     * a dry run leaves DEST alone. */
    const char *base = c->g.tmp_dir ? c->g.tmp_dir : dest;
    if (c->g.dry_run && !c->g.tmp_dir)
        base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (archive || r.remote) {
        /* A killed run's scratch (a whole step) goes with the next run. */
        ckpt_temp_sweep(base);
        r.scratch = ckpt_temp_path(base);
    }
    if ((archive || r.remote) && r.run.has_config &&
        save_config(&r, &err) != 0) {
        step_row(&r, "error", NULL, err.msg, NULL, NULL);
        failed = 1;
        goto out;
    } else if (!archive && !r.remote && r.run.has_config) {
        r.config = ckpt_path_join(r.tree->key, "config.yaml");
    }
    size_t n, *pick = choose(&r, &n);
    if (!n && !c->step && (r.run.n || finished)) {
        /* Only unsharded checkpoints: a rerun after everything was done. */
        step_row(&r, "skip", NULL, "no sharded checkpoint", NULL, NULL);
    } else if (!n) {
        step_row(&r, "error", NULL, c->step ? "no sharded checkpoint with "
                 "that step" : "no checkpoint", NULL, NULL);
        failed = 1;
    }
    if (n && stream_only(r.tree->archive))
        failed |= spool_run(&r, pick, n) != 0;
    else
        for (size_t i = 0; i < n && !interrupted; i++)
            failed |= do_step(&r, &r.run.ckpts[pick[i]]) != 0;
    free(pick);
out:
    ckpt_rm_tree(r.scratch);
    free(r.scratch);
    free(r.config);
    ckpt_storage_close(r.members);
    ckpt_run_release(&r.run);
    ckpt_tree_free(r.tree);
    return failed == 2 ? EXIT_USAGE : failed ? EXIT_FAILED : EXIT_OK;
}


int cmd_unshard(int argc, char **argv)
{
    struct cmd c;
    memset(&c, 0, sizeof(c));
    int rc = parse(&c, &argc, argv);
    if (rc >= 0)
        return rc;
    if ((rc = validate(&c, argc, argv)) >= 0)
        return rc;
    cli_init_output(&c.g);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const char *src = argv[0], *dest = argv[1];
    /* One storage per bucket, shared by run detection and the run. */
    struct storages sts = { 0 };
    if (is_run(src, &c, &sts))
        rc = unshard_run(&c, src, dest, &sts);
    else
        rc = unshard_one(&c, src, dest) ? EXIT_FAILED : EXIT_OK;
    cli_storages_release(&sts);
    return rc;
}
