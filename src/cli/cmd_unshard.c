/*
 * cmd_unshard.c - `ckpt unshard [options] SRC DEST`: consolidate a sharded
 * PyTorch DCP checkpoint (or every sharded step of a run) into whole
 * tensors. Phases: parse, find checkpoints, unshard each, report.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/storage.h"
#include "ckpt/unshard.h"
#include "ckpt/util.h"
#include "cli.h"

static const char *const usage[] = {
    "ckpt unshard [options] SRC DEST",
    "",
    "Merge the shards of a PyTorch distributed checkpoint (DCP: .metadata",
    "and __R_N.distcp files, also model_and_optim/ of an OLMo step) into",
    "whole tensors in directory DEST. If SRC is a run holding several",
    "sharded steps, each stepN becomes DEST/stepN-unsharded/.",
    "Outputs appear atomically; nothing is executed from any pickle.",
    NULL
};

struct cmd {
    struct ckpt_opts g;
    const char *layout, *format;
    uint64_t max_shard;
    int allow_replicas, verify, latest, delete_sharded, no_sync;
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
    int n = parse_options(*argc, argv, opts, usage, &c->g);
    if (n < 0)
        return n == -2 ? EXIT_OK : EXIT_USAGE;
    *argc = n;
    return -1;
}

static int usage_err(const char *msg, const char *arg)
{
    fprintf(stderr, "ckpt unshard: error: ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, "\nusage: %s\n(see 'ckpt unshard --help')\n", usage[0]);
    return EXIT_USAGE;
}

static int validate(struct cmd *c, int argc)
{
    struct ckpt_unshard_opts *o = &c->uo;
    if (argc != 2)
        return usage_err("%s", "expected SRC and DEST");
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
    o->verify = c->verify || c->delete_sharded;
    o->jobs = c->g.jobs;
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
    debugf("plan (%s): %llu tensors in %llu chunks, %llu objects, %zu "
           "files, %llu bytes", r->metadata, (unsigned long long)r->tensors,
           (unsigned long long)r->chunks, (unsigned long long)r->objects,
           r->nfiles, (unsigned long long)r->bytes);
    if (!c->g.dry_run)
        c->prog = progress_new(&c->g, "unshard", r->pieces, r->bytes);
}

static void on_progress(void *ud, uint64_t bytes)
{
    struct cmd *c = ud;
    progress_add(c->prog, 1, bytes);
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
        out_tsv(4, f);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "src", src);
    cJSON_AddStringToObject(o, "dest", dest);
    cJSON_AddStringToObject(o, "action", action);
    if (err) {
        cJSON_AddStringToObject(o, "error", err->msg);
        out_json(o);
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
    out_json(o);
}

static int unshard_one(struct cmd *c, const char *src, const char *dest)
{
    struct ckpt_unshard_result r;
    struct ckpt_err err = CKPT_ERR_INIT;
    double t0 = ckpt_now();
    c->uo.planned = on_planned;
    c->uo.progress = on_progress;
    c->uo.progress_ud = c;
    c->prog = NULL;
    int rc = ckpt_unshard_dcp(src, dest, &c->uo, &r, &err);
    progress_done(c->prog);
    c->prog = NULL;
    report(c, src, dest, &r, ckpt_now() - t0, rc ? &err : NULL);
    if (rc != 0)
        errorf("%s", err.msg);
    ckpt_unshard_result_release(&r);
    return rc;
}

/* --- runs ------------------------------------------------------------------ */

static int is_file(const char *dir, const char *name)
{
    char *p = ckpt_path_join(dir, name);
    struct stat sb;
    int r = stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    free(p);
    return r;
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* A DCP checkpoint directory (global or rank-local metadata, or OLMo). */
static int is_dcp(const char *dir)
{
    if (is_file(dir, ".metadata") || is_file(dir, "__0.metadata") ||
        is_file(dir, "model_and_optim/.metadata"))
        return 1;
    return 0;
}

/* Step number of a checkpoint directory name, or -1. */
static long long step_of(const char *name)
{
    static const char *const prefixes[] = {
        "global_step", "checkpoint-", "step_", "step-", "epoch_", "iter_",
        "step", ""
    };
    uint64_t v;
    if (ckpt_str_endswith(name, "-unsharded"))
        return -1;
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (!strncmp(name, prefixes[i], n) && name[n] &&
            ckpt_parse_u64(name + n, &v) == 0)
            return (long long)v;
    }
    return -1;
}

struct step {
    char *name;
    long long n;
};

static int cmp_step(const void *a, const void *b)
{
    long long x = ((const struct step *)a)->n, y = ((const struct step *)b)->n;
    return x < y ? -1 : x > y;
}

static struct step *list_steps(const char *run, size_t *n)
{
    DIR *d = opendir(run);
    struct step *v = NULL;
    *n = 0;
    if (!d)
        return NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long long s = step_of(de->d_name);
        char *p = ckpt_path_join(run, de->d_name);
        if (s >= 0 && is_dir(p) && is_dcp(p)) {
            v = ckpt_xreallocarray(v, *n + 1, sizeof(*v));
            v[*n].name = ckpt_xstrdup(de->d_name);
            v[(*n)++].n = s;
        }
        free(p);
    }
    closedir(d);
    if (*n)
        qsort(v, *n, sizeof(*v), cmp_step);
    return v;
}

static int delete_step(const char *dir, struct ckpt_err *err)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_storage_cfg cfg = { 0, 0, 0, 1 };
    if (ckpt_loc_parse(&loc, dir, err) != 0)
        return -1;
    int rc = ckpt_storage_open(&st, &loc, &cfg, err);
    if (rc == 0) {
        rc = ckpt_storage_delete_tree(st, loc.key, err);
        ckpt_storage_close(st);
    }
    ckpt_loc_release(&loc);
    return rc;
}

static int unshard_step(struct cmd *c, const char *run, const char *dest,
                        const char *name)
{
    char *src = ckpt_path_join(run, name);
    char *outname = ckpt_xasprintf("%s-unsharded", name);
    char *at_src = ckpt_path_join(run, outname);
    char *out = ckpt_path_join(dest, outname);
    int rc = 0;
    if (is_dir(at_src) || is_dir(out)) {
        const char *f[] = { "skip", src, is_dir(out) ? out : at_src,
                            "already unsharded" };
        if (!c->g.json) {
            out_tsv(4, f);
        } else {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "src", f[1]);
            cJSON_AddStringToObject(o, "dest", f[2]);
            cJSON_AddStringToObject(o, "action", "skip");
            cJSON_AddStringToObject(o, "reason", f[3]);
            out_json(o);
        }
    } else {
        rc = unshard_one(c, src, out);
        struct ckpt_err err = CKPT_ERR_INIT;
        if (rc == 0 && c->delete_sharded && !c->g.dry_run &&
            delete_step(src, &err) != 0) {
            errorf("%s", err.msg);
            rc = -1;
        }
    }
    free(src);
    free(outname);
    free(at_src);
    free(out);
    return rc;
}

static int unshard_run(struct cmd *c, const char *run, const char *dest)
{
    size_t n;
    struct step *steps = list_steps(run, &n);
    char *config = ckpt_path_join(run, "config.yaml");
    int failed = 0;
    uint64_t want = 0;
    if (c->step)
        ckpt_parse_u64(c->step, &want);
    c->uo.config_yaml = config;
    if (!n)
        errorf("'%s': no DCP checkpoint and no sharded steps", run);
    for (size_t i = 0; i < n && !interrupted; i++) {
        if ((c->latest && i + 1 != n) ||
            (c->step && (uint64_t)steps[i].n != want))
            continue;
        failed |= unshard_step(c, run, dest, steps[i].name) != 0;
    }
    for (size_t i = 0; i < n; i++)
        free(steps[i].name);
    free(steps);
    free(config);
    return !n || failed ? EXIT_FAILED : EXIT_OK;
}

int cmd_unshard(int argc, char **argv)
{
    struct cmd c;
    memset(&c, 0, sizeof(c));
    int rc = parse(&c, &argc, argv);
    if (rc >= 0)
        return rc;
    if ((rc = validate(&c, argc)) >= 0)
        return rc;
    cli_init_output(&c.g);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const char *src = argv[0], *dest = argv[1];
    if (is_dir(src) && !is_dcp(src))
        return unshard_run(&c, src, dest);
    return unshard_one(&c, src, dest) ? EXIT_FAILED : EXIT_OK;
}
