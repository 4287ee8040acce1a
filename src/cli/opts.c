/*
 * opts.c - a small parse-options: each command has a usage array and an
 * option table; the global options are appended to every table.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ckpt/text.h"
#include "ckpt/util.h"

static int want_help, want_version;

/* Optimal string alignment distance: insertions, deletions,
 * substitutions and transpositions of neighbours each cost 1. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    size_t d[65][65];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
                a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

int cli_did_you_mean(const char *what, const char *name,
                     const char *const *cands, size_t n)
{
    size_t best = SIZE_MAX, len = strlen(name);
    for (size_t i = 0; i < n; i++) {
        size_t dist = edit_distance(name, cands[i]);
        if (len >= 2 && !strncmp(cands[i], name, len))
            dist = 1;   /* a prefix: as near as one typo */
        if (dist < best)
            best = dist;
    }
    if (best > 2 || best * 2 >= len)
        return 0;
    struct ckpt_buf b = CKPT_BUF_INIT;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t dist = edit_distance(name, cands[i]);
        if (len >= 2 && !strncmp(cands[i], name, len))
            dist = 1;
        if (dist == best)
            ckpt_buf_addf(&b, "%s'%s'", k++ ? ", " : "", cands[i]);
    }
    fprintf(stderr, "hint: did you mean %s%s%s%s?\n",
            k > 1 ? "one of the " : "", k > 1 ? what : "", k > 1 ? "s " : "",
            b.ptr);
    ckpt_buf_release(&b);
    return k;
}

/* --log-file: what would go to stderr (messages, log lines) is appended to
 * FILE, as rclone's --log-file does; rows stay on stdout. Opened O_APPEND,
 * so several workers (cron, GNU parallel) can share one file line by line. */
static int redirect_stderr(const char *cmd, const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) {
        fprintf(stderr, "ckpt %s: error: --log-file '%s': %s\n", cmd, path,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* The global options; *groups gets each one's group: the commands that
 * take it (ckpt_opts.takes; 0: every command). */
static const struct option *global_opts(struct ckpt_opts *g,
                                        const unsigned **groups)
{
    static struct option t[17];
    static const unsigned grp[17] = {
        CLI_TAKES_DRY_RUN, CLI_TAKES_JOBS, 0, 0, 0, CLI_TAKES_TMP_DIR,
        CLI_TAKES_PROGRESS, CLI_TAKES_PROGRESS,
    };
    struct option tmp[] = {
        OPT_BOOL_('n', "dry-run", &g->dry_run,
                  "say what would happen, change nothing"),
        OPT_INT_('j', "jobs", &g->jobs, "N", "runs worked on at once (as "
                 "GNU parallel's jobs)"),
        OPT_BOOL_(0, "json", &g->json, "one JSON object per line on stdout"),
        OPT_BOOL_('q', "quiet", &g->quiet, "only errors on stderr"),
        OPT_BOOL_('v', "verbose", &g->verbose, "more detail on stderr"),
        OPT_STR_(0, "tmp-dir", &g->tmp_dir, "DIR", "directory for spooling"),
        OPT_BOOL_(0, "progress", &g->progress, "progress lines on stderr "
                  "when it is not a terminal too (timestamped, each second)"),
        OPT_BOOL_(0, "no-progress", &g->no_progress, "no progress output"),
        OPT_BOOL_(0, "insecure", &g->insecure, "do not verify TLS"),
        OPT_INT_(0, "retries", &g->retries, "N",
                 "attempts for transient failures"),
        OPT_STR_(0, "profile", &g->profile, "NAME",
                 "s3://: this AWS profile's credentials (as aws-cli's)"),
        OPT_STR_(0, "endpoint-url", &g->endpoint_url, "URL",
                 "s3://: this endpoint (as aws-cli's)"),
        OPT_STR_(0, "region", &g->region, "REGION",
                 "s3://: this AWS region (as aws-cli's)"),
        OPT_STR_(0, "log-file", &g->log_file, "FILE",
                 "append messages (stderr) to FILE instead, timestamped"),
        OPT_BOOL_(0, "version", &want_version, "print the version"),
        OPT_END_(),
    };
    memcpy(t, tmp, sizeof(tmp));
    if (groups)
        *groups = grp;
    return t;
}

/* The global options the command takes (its --help lists them), in t. */
static const struct option *taken_opts(struct ckpt_opts *g,
                                       struct option t[17])
{
    const unsigned *grp;
    const struct option *all = global_opts(g, &grp);
    int k = 0;
    for (int i = 0; all[i].type != OPT_END; i++)
        if (!grp[i] || (g->takes & grp[i]))
            t[k++] = all[i];
    t[k] = (struct option)OPT_END_();
    return t;
}

/* A global option that the command does not take: the option (by long
 * name, aws-cli's --dryrun too, or short name c), else NULL. */
static const struct option *not_taken(struct ckpt_opts *g, const char *name,
                                      size_t len, int c, unsigned *group)
{
    const unsigned *grp;
    const struct option *all = global_opts(g, &grp);
    int dryrun = !c && len == 6 && !strncmp(name, "dryrun", 6);
    for (int i = 0; all[i].type != OPT_END; i++) {
        if (!grp[i] || (g->takes & grp[i]))
            continue;
        if (c ? all[i].short_name == c
              : dryrun ? !strcmp(all[i].long_name, "dry-run")
              : strlen(all[i].long_name) == len &&
                !strncmp(all[i].long_name, name, len)) {
            *group = grp[i];
            return &all[i];
        }
    }
    return NULL;
}

/* A global option where it means nothing is refused (as git refuses an
 * option a command lacks), naming the commands that take it; except
 * --no-progress, which scripts pass to every command (as aws-cli's
 * global options are taken by all): accepted, it asks for nothing. 0
 * when o is accepted, else -1 after the message. */
static int refuse_not_taken(const char *cmd, const struct option *o,
                            unsigned group, const char *given)
{
    static const struct {
        unsigned group;
        const char *who, *why;
    } t[] = {
        { CLI_TAKES_DRY_RUN, "clean, cp, map-wandb, process and unshard",
          "changes nothing" },
        { CLI_TAKES_TMP_DIR, "process and unshard", "spools nothing" },
        { CLI_TAKES_PROGRESS, "cp, process and unshard",
          "shows no progress" },
    };
    if (!strcmp(o->long_name, "no-progress"))
        return 0;
    char *e = ckpt_escape(given);
    fprintf(stderr, "ckpt %s: error: unknown option '%s'\n", cmd, e);
    free(e);
    /* -j is runs at once in every command; the knob it used to be here
     * has its own name. */
    if (group == CLI_TAKES_JOBS) {
        int un = !strcmp(cmd, "unshard");
        fprintf(stderr, "hint: -j, --jobs is the runs worked on at once "
                "(clean, ls, map-wandb, process); 'ckpt %s' %s\n", cmd, un
                ? "works on one checkpoint or run: its worker threads are "
                  "--threads N"
                : "copies one SRC: its files in flight are --transfers N");
        return -1;
    }
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (t[i].group == group)
            fprintf(stderr, "hint: --%s is an option of %s; 'ckpt %s' %s\n",
                    o->long_name, t[i].who, cmd, t[i].why);
    return -1;
}

void cli_opt_list_release(struct opt_list *l)
{
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

static void print_table(FILE *f, const struct option *o)
{
    for (; o->type != OPT_END; o++) {
        char left[64];
        char sh[8] = "";
        if (o->short_name)
            snprintf(sh, sizeof(sh), "-%c, ", o->short_name);
        snprintf(left, sizeof(left), "%s--%s%s%s", sh, o->long_name,
                 o->argh ? " " : "", o->argh ? o->argh : "");
        fprintf(f, "    %-28s %s\n", left, o->help);
    }
}

static void print_usage(FILE *f, const struct option *opts,
                        const struct option *glob, const char *const *usage)
{
    fprintf(f, "usage: %s\n", usage[0]);
    for (int i = 1; usage[i]; i++)
        fprintf(f, "%s%s\n", usage[i][0] ? "    " : "", usage[i]);
    fprintf(f, "\n");
    print_table(f, opts);
    fprintf(f, "\nglobal options:\n");
    print_table(f, glob);
    fprintf(f, "    %-28s %s\n", "-h, --help", "show this help");
}

static const struct option *find_long(const struct option *a,
                                      const struct option *b, const char *n,
                                      size_t len)
{
    for (int pass = 0; pass < 2; pass++)
        for (const struct option *o = pass ? b : a; o->type != OPT_END; o++)
            if (strlen(o->long_name) == len &&
                !strncmp(o->long_name, n, len))
                return o;
    return NULL;
}

static const struct option *find_short(const struct option *a,
                                       const struct option *b, int c)
{
    for (int pass = 0; pass < 2; pass++)
        for (const struct option *o = pass ? b : a; o->type != OPT_END; o++)
            if (o->short_name == c)
                return o;
    return NULL;
}

/* Store arg into o. Returns 0 or -1 after printing an error. */
static int set_value(const struct option *o, const char *arg, const char *cmd)
{
    struct ckpt_err err;
    uint64_t v;
    switch (o->type) {
    case OPT_BOOL:
        *(int *)o->value = 1;
        return 0;
    case OPT_INT:
        if (ckpt_parse_u64(arg, &v) != 0 || v > 1000000) {
            char *e = ckpt_escape(arg);
            fprintf(stderr, "ckpt %s: error: --%s needs a number, got '%s'\n",
                    cmd, o->long_name, e);
            free(e);
            return -1;
        }
        *(int *)o->value = (int)v;
        return 0;
    case OPT_STR:
        *(const char **)o->value = arg;
        return 0;
    case OPT_SIZE:
        if (ckpt_parse_size(arg, (uint64_t *)o->value, &err) != 0) {
            char *e = ckpt_escape(err.msg);
            fprintf(stderr, "ckpt %s: error: --%s: %s\n", cmd, o->long_name,
                    e);
            free(e);
            return -1;
        }
        return 0;
    case OPT_LIST: {
        struct opt_list *l = o->value;
        l->items = ckpt_xreallocarray(l->items, (size_t)l->n + 1,
                                      sizeof(*l->items));
        l->items[l->n++] = arg;
        return 0;
    }
    default:
        return -1;
    }
}

/* Other tools' spellings of ckpt's options (aws-cli, OLMo's unshard
 * script, zero_to_fp32, transformers' save_pretrained): NAME is taken as
 * --TARGET (with VALUE, for an option that takes one) where the command
 * has --TARGET. */
static const struct {
    const char *name, *target, *value;
} aliases[] = {
    { "dryrun", "dry-run", NULL },                  /* aws s3 cp */
    { "safe-tensors", "format", "safetensors" },    /* OLMo's unshard */
    { "safe_serialization", "format", "safetensors" }, /* zero_to_fp32 */
    { "safe-serialization", "format", "safetensors" },
};

/* Spellings ckpt has no option for, and what does that job here. */
static const char *const foreign[][2] = {
    { "model-only", "ckpt unshard writes the model with the rest of the "
      "checkpoint (model.pt beside optim.pt and train.pt, as OLMo's "
      "unsharder does without --model-only); '--format hf' writes the "
      "model alone" },
    { "delete", "ckpt never deletes at DEST (it may hold the only copy); "
      "'--delete-source' deletes SRC once DEST is verified" },
    { "recursive", "directories are always copied whole, as 'aws s3 cp "
      "--recursive'" },
};

static const struct option *find_alias(const struct option *opts,
                                       const struct option *glob,
                                       const char *name, size_t len,
                                       const char **value)
{
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strlen(aliases[i].name) == len &&
            !strncmp(aliases[i].name, name, len)) {
            const struct option *o = find_long(opts, glob, aliases[i].target,
                                               strlen(aliases[i].target));
            if (o)
                *value = aliases[i].value;
            return o;
        }
    return NULL;
}

/* After "unknown option": what another tool's spelling is here, or the
 * options nearest the mistyped one (as git does). */
static void option_hint(const struct option *opts, const struct option *glob,
                        const char *name)
{
    const char *eq = strchr(name, '=');
    char *n = eq ? ckpt_xstrndup(name, (size_t)(eq - name))
                 : ckpt_xstrdup(name);
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
        if (!strcmp(n, foreign[i][0])) {
            fprintf(stderr, "hint: %s\n", foreign[i][1]);
            free(n);
            return;
        }
    size_t cap = 0, k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (const struct option *o = pass ? glob : opts; o->type != OPT_END;
             o++)
            cap++;
    const char **names = ckpt_xreallocarray(NULL, cap + 1, sizeof(*names));
    char **owned = ckpt_xreallocarray(NULL, cap + 1, sizeof(*owned));
    for (int pass = 0; pass < 2; pass++)
        for (const struct option *o = pass ? glob : opts; o->type != OPT_END;
             o++) {
            owned[k] = ckpt_xasprintf("--%s", o->long_name);
            names[k] = owned[k];
            k++;
        }
    char *dashed = ckpt_xasprintf("--%s", n);
    cli_did_you_mean("option", dashed, names, k);
    for (size_t i = 0; i < k; i++)
        free(owned[i]);
    free(owned);
    free(names);
    free(dashed);
    free(n);
}

static int usage_error(const char *cmd, const struct option *opts,
                       const char *const *usage, const char *fmt,
                       const char *what)
{
    char *e = ckpt_escape(what); /* an argument: any bytes */
    fprintf(stderr, "ckpt %s: error: ", cmd);
    fprintf(stderr, fmt, e);
    fprintf(stderr, "\n");
    free(e);
    fprintf(stderr, "usage: %s\n(see 'ckpt %s --help')\n", usage[0], cmd);
    (void)opts;
    return -1;
}

int cli_parse_options(int argc, char **argv, const struct option *opts,
                      const char *const *usage, struct ckpt_opts *g)
{
    const char *cmd = argv[0];
    want_help = want_version = 0;
    struct option shown[17];
    const struct option *glob = taken_opts(g, shown);
    int nargs = 0;
    int only_args = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_args || a[0] != '-' || a[1] == '\0') {
            argv[nargs++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_args = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            want_help = 1;
            continue;
        }
        const struct option *o;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            o = find_long(opts, glob, name, len);
            const char *fixed = NULL;
            if (!o && (o = find_alias(opts, glob, name, len, &fixed)) &&
                fixed) {
                if (eq)
                    return usage_error(cmd, opts, usage,
                                       "option '%s' takes no value", a);
                if (set_value(o, fixed, cmd) != 0)
                    return -1;
                continue;
            }
            unsigned grp = 0;
            const struct option *other = o ? NULL
                                       : not_taken(g, name, len, 0, &grp);
            if (other) {
                if (refuse_not_taken(cmd, other, grp, a) != 0)
                    return -1;
                *(int *)other->value = 1;   /* --no-progress */
                continue;
            }
            if (!o) {
                usage_error(cmd, opts, usage, "unknown option '%s'", a);
                option_hint(opts, glob, name);
                return -1;
            }
            if (eq) {
                if (o->type == OPT_BOOL)
                    return usage_error(cmd, opts, usage,
                                       "option '%s' takes no value", a);
                val = eq + 1;
            }
        } else {
            o = find_short(opts, glob, a[1]);
            unsigned grp = 0;
            const struct option *other = o ? NULL
                                       : not_taken(g, NULL, 0, a[1], &grp);
            if (other)
                return refuse_not_taken(cmd, other, grp, a);
            if (!o)
                return usage_error(cmd, opts, usage, "unknown option '%s'", a);
            if (a[2]) {
                if (o->type == OPT_BOOL) {
                    /* bundled flags: -nq */
                    for (const char *c = a + 1; *c; c++) {
                        const struct option *b = find_short(opts, glob, *c);
                        unsigned grp = 0;
                        const struct option *other =
                            b ? NULL : not_taken(g, NULL, 0, *c, &grp);
                        if (other)
                            return refuse_not_taken(cmd, other, grp, a);
                        if (!b || b->type != OPT_BOOL)
                            return usage_error(cmd, opts, usage,
                                               "unknown option in '%s'", a);
                        *(int *)b->value = 1;
                    }
                    continue;
                }
                val = a + 2;
            }
        }
        if (o->type != OPT_BOOL && !val) {
            if (i + 1 >= argc)
                return usage_error(cmd, opts, usage,
                                   "option '%s' needs a value", a);
            val = argv[++i];
        }
        if (set_value(o, val, cmd) != 0)
            return -1;
    }
    argv[nargs] = NULL;
    if (want_help) {
        print_usage(stdout, opts, glob, usage);
        return -2;
    }
    if (want_version) {
        printf("ckpt %s\n", CKPT_VERSION);
        return -2;
    }
    if (g->quiet && g->verbose)
        return usage_error(cmd, opts, usage, "%s",
                           "--quiet and --verbose exclude each other");
    if (g->progress && g->no_progress)
        return usage_error(cmd, opts, usage, "%s",
                           "--progress and --no-progress exclude each other");
    if (g->log_file && redirect_stderr(cmd, g->log_file) != 0)
        return -1;
    return nargs;
}

/* A repeated storage request, on stderr. A failed transfer (nothing
 * answers, a timeout, a reset) is said at once: every further attempt
 * waits on that endpoint, and without a word ten attempts are 30-60 s of
 * silence. A reply that asks to slow down or to try again (429, 5xx) is
 * routine under load: only -v says so, until one request has had three
 * in a row. */
static void said_retry(void *ud, const struct ckpt_storage_retry *r)
{
    (void)ud;
    char delay[32];
    snprintf(delay, sizeof(delay), r->delay < 10 ? "%.1f" : "%.0f",
             r->delay);
    if (r->transport || r->attempt > 3)
        cli_warnf("%s: retrying (%d/%d) in %s s: %s", r->what, r->attempt,
                  r->attempts, delay, r->why);
    else
        cli_debugf("%s: retrying (%d/%d) in %s s: %s", r->what, r->attempt,
                   r->attempts, delay, r->why);
}

struct ckpt_storage_cfg cli_storage_cfg(const struct ckpt_opts *g)
{
    struct ckpt_storage_cfg c = {
        .insecure = g->insecure,
        .retries = g->retries,
        .verbose = g->verbose,
        .jobs = g->jobs,
        .on_retry = said_retry,
        .profile = g->profile,
        .endpoint_url = g->endpoint_url,
        .region = g->region,
    };
    return c;
}
