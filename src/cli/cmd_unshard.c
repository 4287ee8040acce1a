/*
 * cmd_unshard.c - `ckpt unshard [options] SRC DEST`: consolidate a sharded
 * checkpoint (DCP, OLMo torch_legacy, local and olmo_core, zarr, Orbax), or
 * every sharded step of a run directory or archive, into whole tensors.
 * Phases: parse, find checkpoints, unshard each, report.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/archive.h"
#include "ckpt/interrupt.h"
#include "ckpt/ratelimit.h"
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
    "DEST (--format hf: a Hugging Face model directory of its model),"
    ,
    "from PyTorch DCP (.metadata and __R_N.distcp files, also",
    "model_and_optim/ of an OLMo step), OLMo torch_legacy (rank*.pt), OLMo",
    "local (model/, optim/, train/rank*.pt, metadata.yaml), OLMo olmo_core",
    "(model/ and optim/ rank_*.safetensors), zarr v2 (.zgroup) and",
    "Orbax steps (OCDBT, per-array zarr or msgpack items). Every format",
    "is read in place from S3/GCS/R2 and from a plain .tar. If SRC is a",
    "run (directory or archive), each complete sharded stepN becomes",
    "DEST/stepN-unsharded/ (--format hf: DEST/stepN-hf/); step 0 only",
    "with --unshard-step0 or --step 0, as in process.",
    "DEST may be s3://, r2:// or gs://: outputs are uploaded as they are",
    "written (no local copy), DEST-unfinished marks them until all are.",
    "Outputs appear atomically; nothing is executed from any pickle.",
    "--threads default: one per CPU core (decoding is CPU-bound). -j, runs",
    "at once in the other commands, is refused here.",
    "examples:",
    "  ckpt unshard RUN/step1000 out/                    out/checkpoint.pt",
    "  ckpt unshard --format safetensors RUN/step1000 out/",
    "  ckpt unshard --format hf RUN/step1000 hf/         a Hugging Face model",
    "  ckpt unshard RUN s3://b/unsharded/                every step of a run",
    NULL
};

struct cmd {
    struct ckpt_opts g;
    const char *layout, *format, *rank_values, *weights, *dtype, *part;
    const char *config_dir;
    uint64_t max_shard, memory;
    uint64_t bwlimit;           /* --bwlimit: bytes a second to DEST */
    struct ckpt_rate *rate;     /* its limit, shared by every worker */
    uint64_t spool_limit;       /* UINT64_MAX: not given */
    int allow_replicas, allow_unsafe_pickle, verify, latest, delete_sharded;
    int step0;                  /* --unshard-step0 */
    int threads;                /* --threads: worker threads */
    int no_sync;
    const char *step;
    struct ckpt_unshard_opts uo;
    struct progress *prog;
    const char *spool_dir;      /* --tmp-dir, else $TMPDIR or /tmp */
    struct ckpt_spool_budget spools;    /* --spool-limit */
    struct progress *spool_prog;/* the spool pass, on a terminal */
    char *spool_what;           /* "read NAME" */
    uint64_t spool_read;        /* the archive's bytes read so far */
};

static int parse(struct cmd *c, int *argc, char **argv)
{
    struct option opts[] = {
        OPT_STR_(0, "layout", &c->layout, "L",
                 "single (checkpoint.pt) or olmo (model/optim/train.pt)"),
        OPT_STR_(0, "format", &c->format, "F", "torch, safetensors or hf "
                 "(a Hugging Face model directory)"),
        OPT_SIZE_(0, "max-shard-size", &c->max_shard, "SIZE",
                  "split safetensors output above SIZE (default 5G; hf: "
                  "50000000000, transformers')"),
        OPT_STR_(0, "dtype", &c->dtype, "T", "hf: cast floating weights "
                 "to fp32, bf16 or fp16"),
        OPT_STR_(0, "config-dir", &c->config_dir, "DIR", "hf: config.json, "
                 "generation config and tokenizer from DIR"),
        OPT_STR_(0, "part", &c->part, "I/N", "hf: write part I (0..N-1) of "
                 "N of the shards; the last part to finish writes the index"),
        OPT_BOOL_(0, "allow-replicas", &c->allow_replicas,
                  "accept identical replicated chunks"),
        OPT_STR_(0, "rank-values", &c->rank_values, "M",
                 "rank-local DCP, ranks saved different values under one "
                 "key: error (default), rank0 or per-rank (KEY.rankR)"),
        OPT_STR_(0, "weights", &c->weights, "W",
                 "DeepSpeed: master (fp32, as zero_to_fp32; default) or "
                 "module (the module's weights as trained, e.g. bf16)"),
        OPT_BOOL_(0, "allow-unsafe-pickle", &c->allow_unsafe_pickle,
                  "also write pickled globals torch.load(weights_only) "
                  "refuses (warns)"),
        OPT_BOOL_(0, "verify", &c->verify,
                  "re-read the output and compare with the sources"),
        OPT_BOOL_(0, "latest", &c->latest, "run: only the newest step"),
        OPT_STR_(0, "step", &c->step, "N", "run: only step N"),
        OPT_BOOL_(0, "unshard-step0", &c->step0, "run: also step 0 (the "
                  "initial weights; skipped by default, as by process)"),
        OPT_BOOL_(0, "delete-sharded", &c->delete_sharded,
                  "run: delete each sharded step once verified"),
        OPT_SIZE_(0, "memory", &c->memory, "SIZE", "remote DEST: part "
                  "buffers held at once (default 96M)"),
        OPT_SIZE_(0, "bwlimit", &c->bwlimit, "RATE", "remote DEST: send "
                  "at most RATE bytes a second, all workers together (10M: "
                  "10 MiB/s), as cp's"),
        OPT_SIZE_(0, "spool-limit", &c->spool_limit, "SIZE", "most disk "
                  "the spool of a compressed archive takes in --tmp-dir "
                  "(default: all but its last GiB); 0: no spool, read the "
                  "archive once per pass"),
        OPT_INT_(0, "threads", &c->threads, "N", "worker threads (default: "
                 "one per CPU core)"),
        OPT_BOOL_(0, "no-sync", &c->no_sync,
                  "do not fsync outputs before renaming them"),
        OPT_END_(),
    };
    c->g.takes = CLI_TAKES_DRY_RUN | CLI_TAKES_TMP_DIR | CLI_TAKES_PROGRESS;
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

static int dtype_ok(const char *s)
{
    static const char *const names[] = { "fp32", "bf16", "fp16", "float32",
                                         "bfloat16", "float16", NULL };
    for (size_t i = 0; names[i]; i++)
        if (!strcmp(s, names[i]))
            return 1;
    return 0;
}

/* "I/N", 0 <= I < N. */
static int parse_part(const char *s, unsigned *i, unsigned *n)
{
    const char *sl = strchr(s, '/');
    uint64_t a, b;
    char *first = sl ? ckpt_xstrndup(s, (size_t)(sl - s)) : NULL;
    int rc = sl && ckpt_parse_u64(first, &a) == 0 &&
             ckpt_parse_u64(sl + 1, &b) == 0 && b >= 1 && a < b &&
             b <= 1000000 ? 0 : -1;
    free(first);
    if (rc == 0) {
        *i = (unsigned)a;
        *n = (unsigned)b;
    }
    return rc;
}

static int validate(struct cmd *c, int argc, char **argv)
{
    struct ckpt_unshard_opts *o = &c->uo;
    if (argc != 2)
        return usage_err("%s", "expected SRC and DEST");
    struct ckpt_loc loc;
    struct ckpt_err err;
    if (ckpt_loc_parse(&loc, argv[1], &err) != 0)
        return usage_err("%s", err.msg);
    int dest_remote = loc.scheme != CKPT_SCHEME_LOCAL;
    ckpt_loc_release(&loc);
    if (c->memory && c->memory < (16u << 20))
        return usage_err("%s", "--memory must be at least 16M");
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
    else if (!strcmp(c->format, "hf"))
        o->format = CKPT_FORMAT_HF;
    else
        return usage_err("unknown --format '%s' (torch, safetensors or hf)",
                         c->format);
    if (o->format != CKPT_FORMAT_HF && (c->dtype || c->config_dir || c->part))
        return usage_err("%s", "--dtype, --config-dir and --part go with "
                         "--format hf");
    if (c->dtype && !dtype_ok(c->dtype))
        return usage_err("unknown --dtype '%s' (fp32, bf16 or fp16)",
                         c->dtype);
    if (c->part && parse_part(c->part, &o->part, &o->nparts) != 0)
        return usage_err("--part needs I/N with 0 <= I < N, got '%s'",
                         c->part);
    if (o->format == CKPT_FORMAT_HF && c->delete_sharded)
        return usage_err("%s", "--delete-sharded with --format hf: the "
                         "export holds the model only, never the step's "
                         "optimizer and trainer state");
    if (o->nparts > 1 && dest_remote)
        return usage_err("%s", "--part writes a local DEST");
    o->dtype = c->dtype;
    o->config_dir = c->config_dir;
    if (ckpt_rank_values_parse(c->rank_values, &o->rank_values) != 0)
        return usage_err("unknown --rank-values '%s' (error, rank0 or "
                         "per-rank)", c->rank_values);
    if (!c->weights || !strcmp(c->weights, "master"))
        o->weights = CKPT_WEIGHTS_MASTER;
    else if (!strcmp(c->weights, "module"))
        o->weights = CKPT_WEIGHTS_MODULE;
    else
        return usage_err("unknown --weights '%s' (master or module)",
                         c->weights);
    uint64_t step;
    if (c->step && ckpt_parse_u64(c->step, &step) != 0)
        return usage_err("--step needs a number, got '%s'", c->step);
    o->max_shard_size = c->max_shard;
    o->allow_replicas = c->allow_replicas;
    o->allow_unsafe_pickle = c->allow_unsafe_pickle;
    o->verify = c->verify || c->delete_sharded;
    o->jobs = c->threads;
    o->storage_cfg = cli_storage_cfg(&c->g);
    o->dry_run = c->g.dry_run;
    o->sync = !c->no_sync;
    o->memory = c->memory;
    o->tmp_dir = c->g.tmp_dir;
    /* SIGINT/SIGTERM/SIGHUP (main.c catches them): the run stops at the
     * next piece and removes its temporary outputs. */
    o->cancel = ckpt_interrupt_flag();
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

/* "files": how many; "outputs": each one's name, bytes and tensors. */
static void add_outputs(cJSON *o, const struct ckpt_unshard_result *r)
{
    cJSON_AddNumberToObject(o, "files", (double)r->nfiles);
    cJSON *files = cJSON_AddArrayToObject(o, "outputs");
    for (size_t i = 0; i < r->nfiles; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", r->files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)r->files[i].size);
        cJSON_AddNumberToObject(f, "tensors", (double)r->files[i].tensors);
        cJSON_AddItemToArray(files, f);
    }
}

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
                 "%llu chunks, %zu files, %.1f MB/s%s",
                 (unsigned long long)r->tensors,
                 (unsigned long long)r->objects,
                 (unsigned long long)r->chunks, r->nfiles,
                 secs > 0 ? (double)r->bytes / secs / 1e6 : 0.0,
                 c->uo.nparts < 2 ? "" : r->part_done == 1
                 ? "; every part done: index written"
                 : r->part_done == 2 ? "; the export was complete already"
                 : "; part recorded (the last part writes the index)");
    if (!c->g.json) {
        const char *f[] = { action, src, dest, detail };
        cli_out_tsv(4, f);
        return;
    }
    cJSON *o = cli_json_row("step");
    cJSON_AddStringToObject(o, "action", action);
    cJSON_AddStringToObject(o, "src", src);
    cJSON_AddStringToObject(o, "dest", dest);
    if (err) {
        cJSON_AddStringToObject(o, "reason", err->msg);
        cli_out_json(o);
        return;
    }
    cJSON_AddStringToObject(o, "layout", r->layout);
    cJSON_AddNumberToObject(o, "tensors", (double)r->tensors);
    cJSON_AddNumberToObject(o, "objects", (double)r->objects);
    cJSON_AddNumberToObject(o, "chunks", (double)r->chunks);
    cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
    cJSON_AddNumberToObject(o, "seconds", secs);
    if (r->buffers_peak)
        cJSON_AddNumberToObject(o, "buffers_peak", (double)r->buffers_peak);
    if (c->uo.nparts > 1) {
        static const char *const done[] = { "recorded", "finished",
                                            "complete" };
        cJSON_AddStringToObject(o, "part", c->part);
        cJSON_AddStringToObject(o, "part_state", done[r->part_done]);
    }
    add_outputs(o, r);
    cli_out_json(o);
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
    if (!ckpt_unshard_supported((int)f))
        rc = ckpt_err_set(err, CKPT_EUNSUPPORTED, "'%s': unsupported "
                          "checkpoint format '%s'", src,
                          ckpt_format_name(f));
    else
        rc = ckpt_unshard_dcp(src, dest, &c->uo, r, err);
    cli_progress_done(c->prog);
    c->prog = NULL;
    return rc;
}

static int unshard_one(struct cmd *c, const char *src, const char *dest,
                       int format)
{
    struct ckpt_unshard_result r;
    struct ckpt_err err = CKPT_ERR_INIT;
    double t0 = ckpt_now();
    /* The run module's verdict picks ckpt_unshard_dcp's planner; what it
     * could not name is read as DCP, whose errors say why. */
    c->uo.source_format = format;
    int rc = run_unshard(c, CKPT_FMT_DCP, src, dest, &r, &err);
    /* (A failure is its error row, not a message too.) */
    report(c, src, dest, &r, ckpt_now() - t0, rc ? &err : NULL);
    ckpt_unshard_result_release(&r);
    return rc;
}

/* --- runs ---------------------------------------------------------------- */

/*
 * Run mode: SRC is a run directory or archive. The run is read into a tree
 * and classified (ckpt_run_scan); every complete sharded checkpoint whose
 * "-unsharded" sibling exists neither in the run nor at DEST becomes
 * DEST/NAME-unsharded/ (src/unshard/runmode.c says where each step is
 * read from).
 */

/* SRC as the run module sees it: loaded once (ckpt_run_load) through the
 * storage run mode then reads it with; loaded is 0 when it could not be
 * read as a run (the single-checkpoint path then reports why). */
struct verdict {
    struct ckpt_loc loc;
    struct ckpt_storage *st;    /* borrowed from the storages */
    struct ckpt_tree *tree;
    struct ckpt_run run;
    int loaded;
    int root_format;            /* not loaded: ckpt_run_root_format of
                                   its tree, or -2 (no tree either) */
};

static void judge_src(struct verdict *v, const char *src, struct cmd *c,
                      struct storages *sts)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_stat sb;
    enum ckpt_load_status status;
    memset(v, 0, sizeof(*v));
    memset(&sb, 0, sizeof(sb));
    v->root_format = -2;
    if (ckpt_loc_parse(&v->loc, src, &err) != 0 ||
        cli_storages_get(sts, &v->loc, &c->g, &v->st, &err) != 0)
        return;
    if (ckpt_run_load(v->st, v->loc.key, 0, &sb, &status, &v->tree, &v->run,
                      &err) != 0) {
        /* Files it could not judge: by their names, one checkpoint (its
         * planner reports what is wrong) or a run (run mode does). */
        struct ckpt_tree *t;
        if (sb.type == CKPT_ENTRY_DIR &&
            ckpt_tree_load(&t, v->st, v->loc.key, NULL, &err) == 0) {
            v->root_format = ckpt_run_root_format(t);
            ckpt_tree_free(t);
        }
        return;
    }
    v->loaded = status == CKPT_LOAD_OK;
    if (!v->loaded) {
        ckpt_tree_free(v->tree);
        v->tree = NULL;
    }
}

static void verdict_release(struct verdict *v)
{
    if (v->loaded) {
        ckpt_run_release(&v->run);
        ckpt_tree_free(v->tree);
    }
    ckpt_loc_release(&v->loc);
}

/* SRC is one checkpoint when the run module found only the root
 * checkpoint: its format, else -1 (a run). Archives are runs (run mode
 * reads their root checkpoint too). What could not be loaded goes to the
 * single-checkpoint path, except an archive, whose errors run mode
 * reports. */
static int single_format(const struct verdict *v, const char *src)
{
    int f;
    if (v->loaded) {
        if (v->tree->archive != CKPT_ARCHIVE_NONE || v->run.n != 1 ||
            !v->run.ckpts[0].root)
            return -1;
        f = (int)v->run.ckpts[0].format;
        /* DCP files without their .metadata (a save killed before its
         * end): the row a run gives such a step, not an error. */
        if (f == CKPT_FMT_DCP && !v->run.ckpts[0].complete &&
            !ckpt_tree_find(v->tree, ".metadata") &&
            !ckpt_tree_find(v->tree, "__0.metadata"))
            return -1;
    } else if (v->root_format != -2) {
        if ((f = v->root_format) < 0)
            return -1;
    } else {
        return ckpt_archive_kind_of(src) != CKPT_ARCHIVE_NONE
                   ? -1 : CKPT_FMT_UNKNOWN;
    }
    return f;
}

/* --- one decompression pass ------------------------------------------ */

/* The spool pass's progress, on a terminal only (its line would be new
 * output in logs): the archive's bytes read of its size, and the rate. */
static void spool_read(void *ud, uint64_t read, uint64_t size)
{
    struct cmd *c = ud;
    if (!cli_status_enabled(&c->g))
        return;
    if (!c->spool_prog)
        c->spool_prog = cli_progress_new(&c->g, c->spool_what, 1, size);
    if (read < c->spool_read)
        return;
    int end = read >= size && c->spool_read < size;
    cli_progress_add(c->spool_prog, end, read - c->spool_read);
    c->spool_read = read;
}

/*
 * A compressed archive (.tar.gz/.bz2/.xz/.zst) is decompressed once,
 * here: its members go to a spool below --tmp-dir (else $TMPDIR or /tmp)
 * that the run's load and every step then read (ckpt_archive_spool), as
 * `ckpt process` does. One that does not fit the budget is read once per
 * pass, as before, with a warning; one that does not read to its proper
 * end is read again by run mode, which reports why. NULL: not spooled.
 */
static struct ckpt_archive_spool *spool_src(struct cmd *c, const char *src,
                                            struct storages *sts)
{
    if (c->spool_limit == 0 ||
        !ckpt_archive_compressed(ckpt_archive_kind_of(src)))
        return NULL;
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_archive_spool *s = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_spool_cfg sc = { c->spool_dir, &c->spools, spool_read, c, 0 };
    char *base = ckpt_path_basename(src);
    c->spool_what = ckpt_xasprintf("read %s", base);
    free(base);
    memset(&loc, 0, sizeof(loc));
    if (ckpt_loc_parse(&loc, src, &err) == 0 &&
        cli_storages_get(sts, &loc, &c->g, &st, &err) == 0 &&
        ckpt_archive_spool(&s, st, loc.key, &sc, &err) == 0)
        ckpt_archive_spool_attach(s);
    else if (c->spools.refused)
        cli_warnf("%s: not spooled (%s): each pass reads the archive again",
                  src, err.msg);
    else
        cli_debugf("%s: not spooled (%s)", src, err.msg);
    cli_progress_done(c->spool_prog);
    c->spool_prog = NULL;
    free(c->spool_what);
    c->spool_what = NULL;
    ckpt_loc_release(&loc);
    return s;
}

/* A step's row (ckpt_unshard_run's event). */
static void on_step(void *ud, const struct ckpt_unshard_step_event *ev)
{
    struct cmd *c = ud;
    const char *action = ev->action, *detail = ev->detail, *out = ev->out;
    const struct ckpt_checkpoint *k = ev->ckpt;
    const struct ckpt_unshard_result *res = ev->res;
    if (!strcmp(action, "info")) {
        cli_debugf("%s: %s", k ? k->name : ev->run, detail);
        return;
    }
    if (!strcmp(action, "warning")) {
        cli_warnf("%s", detail);
        return;
    }
    /* The step's progress bar ends before its row. */
    cli_progress_done(c->prog);
    c->prog = NULL;
    action = cli_verb(action);
    if (!c->g.json) {
        const char *f[] = { action, k ? k->name : "-", detail };
        cli_out_tsv(3, f);
        return;
    }
    cJSON *o = cli_json_row("step");
    cJSON_AddStringToObject(o, "action", action);
    cJSON_AddStringToObject(o, "run", ev->run);
    cJSON_AddStringToObject(o, "checkpoint", k ? k->name : "-");
    if (k) {
        if (k->step >= 0)
            cJSON_AddNumberToObject(o, "step", (double)k->step);
        else
            cJSON_AddNullToObject(o, "step");
        cJSON_AddStringToObject(o, "format", ckpt_format_name(k->format));
    }
    if (*detail)
        cJSON_AddStringToObject(o, "reason", detail);
    if (out)
        cJSON_AddStringToObject(o, "dest", out);
    if (res) {
        cJSON_AddStringToObject(o, "layout", res->layout);
        cJSON_AddNumberToObject(o, "tensors", (double)res->tensors);
        cJSON_AddNumberToObject(o, "bytes", (double)res->bytes);
        add_outputs(o, res);
    }
    cli_out_json(o);
}

/* Run mode (src/unshard/runmode.c): one row per step. The run loaded
 * into v is handed over. */
static int unshard_run(struct cmd *c, const char *src, const char *dest,
                       struct verdict *v, struct storages *sts)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_err err = CKPT_ERR_INIT;
    uint64_t step = 0;
    if (ckpt_loc_parse(&loc, src, &err) != 0 ||
        cli_storages_get(sts, &loc, &c->g, &st, &err) != 0) {
        struct ckpt_unshard_step_event ev = { "error", src, NULL, err.msg,
                                              NULL, NULL };
        on_step(c, &ev);
        ckpt_loc_release(&loc);
        return EXIT_FAILED;
    }
    if (c->step)
        ckpt_parse_u64(c->step, &step);
    c->uo.planned = on_planned;
    c->uo.progress = on_progress;
    c->uo.unsafe_pickle = on_unsafe_pickle;
    c->uo.progress_ud = c;
    struct ckpt_unshard_run_cfg rc = {
        .uo = c->uo, .latest = c->latest, .has_step = c->step != NULL,
        .step = (int64_t)step, .delete_sharded = c->delete_sharded,
        /* Step 0 holds the initial weights, which training rewrites: one
         * default with process (--unshard-step0 there too); --step 0
         * asks for it. */
        .skip_step0 = !c->step0 && !(c->step && step == 0),
        .tmp_dir = c->g.tmp_dir,
        .on_step = on_step, .ud = c,
        .tree = v->loaded ? v->tree : NULL,
        .run = v->loaded ? &v->run : NULL,
    };
    /* Step 0 left out by default: its row says how to have it. */
    for (size_t i = 0; rc.skip_step0 && !c->step && !c->latest && rc.run &&
                       i < rc.run->n; i++) {
        const struct ckpt_checkpoint *k = &rc.run->ckpts[i];
        if (k->step != 0 || !k->complete || k->unsharded_name ||
            k->format == CKPT_FMT_UNSHARDED)
            continue;
        struct ckpt_unshard_step_event ev = {
            "skip", src, k, "step 0, the initial weights: "
            "--unshard-step0 unshards it", NULL, NULL };
        on_step(c, &ev);
    }
    v->loaded = 0;  /* taken over */
    int r = ckpt_unshard_run(st, loc.key, src, dest, &rc);
    ckpt_loc_release(&loc);
    return r == 2 ? EXIT_USAGE : r ? EXIT_FAILED : EXIT_OK;
}

/* DEST named like a file (out/model.pt): unshard writes a directory
 * of files, so such a DEST would become a directory of that name. An
 * existing directory of that name is taken (a rerun). */
static int file_dest(const char *dest)
{
    static const char *const ext[] = { ".pt", ".pth", ".bin", ".ckpt",
                                       ".safetensors", ".pkl" };
    struct stat sb;
    size_t n = strlen(dest);
    if (n && dest[n - 1] == '/')
        return 0;
    if (!strstr(dest, "://") && stat(dest, &sb) == 0 && S_ISDIR(sb.st_mode))
        return 0;
    for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
        size_t k = strlen(ext[i]);
        if (n > k && !strcmp(dest + n - k, ext[i]))
            return 1;
    }
    return 0;
}

/* A local SRC below an archive file (RUN.tar/RUN/step1000): the length
 * of the archive's path in src, or 0. */
static size_t inside_archive(const char *src)
{
    struct stat sb;
    if (strstr(src, "://") || stat(src, &sb) == 0 || errno != ENOTDIR)
        return 0;
    char *p = ckpt_xstrdup(src);
    size_t found = 0;
    for (char *sl = strrchr(p, '/'); sl && !found; sl = strrchr(p, '/')) {
        *sl = 0;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode) &&
            ckpt_archive_kind_of(p) != CKPT_ARCHIVE_NONE)
            found = strlen(p);
    }
    free(p);
    return found;
}

/* SRC and DEST that cannot be what the user meant: said with the
 * command that does it. EXIT_USAGE, or -1 when they are fine. */
static int refused_paths(const char *src, const char *dest)
{
    if (file_dest(dest)) {
        char *e = ckpt_escape(dest), *dir = ckpt_path_dirname(dest);
        char *d = ckpt_escape(*dir ? dir : ".");
        fprintf(stderr, "ckpt unshard: error: DEST '%s' names a file: "
                "DEST is the directory the checkpoint's files are written "
                "into (checkpoint.pt, or model.pt, optim.pt and train.pt "
                "of an OLMo step; *.safetensors with --format "
                "safetensors)\nhint: ckpt unshard SRC %s/\n", e, d);
        free(e);
        free(d);
        free(dir);
        return EXIT_USAGE;
    }
    size_t a = inside_archive(src);
    if (!a)
        return -1;
    char *arc = ckpt_xstrndup(src, a), *base = ckpt_path_basename(src);
    char *e = ckpt_escape(src), *ea = ckpt_escape(arc);
    const char *digits = !strncmp(base, "step", 4) ? base + 4
                       : !strncmp(base, "global_step", 11) ? base + 11
                       : "";
    size_t nd = strspn(digits, "0123456789");
    fprintf(stderr, "ckpt unshard: error: SRC '%s' is inside the archive "
            "'%s', which unshard reads as a run\n", e, ea);
    if (nd && (!digits[nd] || digits[nd] == '-'))
        fprintf(stderr, "hint: ckpt unshard --step %.*s %s DEST\n",
                (int)nd, digits, ea);
    else
        fprintf(stderr, "hint: ckpt unshard %s DEST (each complete sharded "
                "step), or --step N for one\n", ea);
    free(e);
    free(ea);
    free(arc);
    free(base);
    return EXIT_USAGE;
}

int cmd_unshard(int argc, char **argv)
{
    struct cmd c;
    memset(&c, 0, sizeof(c));
    c.spool_limit = UINT64_MAX;
    int rc = parse(&c, &argc, argv);
    if (rc >= 0)
        return rc;
    if ((rc = validate(&c, argc, argv)) >= 0)
        return rc;
    const char *src = argv[0], *dest = argv[1];
    if ((rc = refused_paths(src, dest)) >= 0)
        return rc;
    cli_init_output(&c.g);
    c.rate = c.bwlimit ? ckpt_rate_new(c.bwlimit) : NULL;
    c.uo.rate = c.rate;
    if (ckpt_archive_kind_of(src) != CKPT_ARCHIVE_NONE && c.delete_sharded) {
        ckpt_rate_free(c.rate);
        cli_errorf("'%s': --delete-sharded never deletes inside an archive; "
                   "nothing done", src);
        return EXIT_USAGE;
    }
    /* One storage per bucket, shared by the verdict and the run. */
    struct storages sts = { 0 };
    c.spool_dir = c.g.tmp_dir ? c.g.tmp_dir
                : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    ckpt_spool_budget_init(&c.spools, c.spool_dir,
                           c.spool_limit == UINT64_MAX ? 0 : c.spool_limit);
    struct ckpt_archive_spool *spool = spool_src(&c, src, &sts);
    struct verdict v;
    judge_src(&v, src, &c, &sts);
    int format = single_format(&v, src);
    if (format < 0)
        rc = unshard_run(&c, src, dest, &v, &sts);
    else
        rc = unshard_one(&c, src, dest, format) ? EXIT_FAILED : EXIT_OK;
    verdict_release(&v);
    ckpt_archive_spool_free(spool);    /* before the storage it reads */
    ckpt_spool_budget_destroy(&c.spools);
    cli_storages_release(&sts);
    ckpt_rate_free(c.rate);
    return rc;
}
