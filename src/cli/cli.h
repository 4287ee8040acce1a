/*
 * cli.h - shared by the subcommands in src/cli: global options, the option
 * parser, and output (result rows, log lines, progress). Only cli/ prints
 * and picks exit codes.
 */
#ifndef CKPT_CLI_H
#define CKPT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/err.h"
#include "ckpt/storage.h"

struct cJSON;

/* Exit codes (SPEC). */
#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2

/* Which of the global options a command takes besides those every
 * command takes (ckpt_opts.takes): the others are not in its --help and
 * are refused there (docs/ckpt.md "Global options"). */
#define CLI_TAKES_DRY_RUN  1u   /* -n, --dry-run: it changes something */
#define CLI_TAKES_TMP_DIR  2u   /* --tmp-dir: it spools */
#define CLI_TAKES_PROGRESS 4u   /* --progress, --no-progress */
#define CLI_TAKES_JOBS     8u   /* -j, --jobs: it works on runs, N at once
                                 * (cp's files in flight are --transfers,
                                 * unshard's threads --threads) */

/* Global options, parsed by every command; const once parsed. */
struct ckpt_opts {
    unsigned takes;    /* CLI_TAKES_*, set by the command before parsing */
    int dry_run;
    int jobs;          /* 0: command's default */
    int json;
    int quiet;
    int verbose;
    int no_progress;
    int progress;      /* --progress: lines on a non-terminal stderr too */
    int human;         /* -H: sizes for people (default: stdout a tty) */
    int insecure;
    int retries;       /* 0: default */
    int wandb_timeout; /* s per W&B request; 0: default (map-wandb and
                        * upload --wandb set it) */
    const char *tmp_dir;
    const char *log_file;  /* messages (stderr) appended there instead */
    /* aws-cli's --profile, --endpoint-url, --region (ckpt_storage_cfg) */
    const char *profile;
    const char *endpoint_url;
    const char *region;
};

enum opt_type { OPT_END = 0, OPT_BOOL, OPT_INT, OPT_STR, OPT_SIZE, OPT_LIST };

/* One option. value points at: int (BOOL, INT), const char * (STR),
 * uint64_t (SIZE), struct opt_list (LIST: repeatable string). */
struct option {
    enum opt_type type;
    int short_name;        /* 0 if none */
    const char *long_name;
    void *value;
    const char *argh;      /* argument name in help, e.g. "N" */
    const char *help;
};

struct opt_list {
    const char **items;    /* owned array, borrowed strings */
    int n;
};

#define OPT_BOOL_(s, l, v, h) { OPT_BOOL, s, l, v, NULL, h }
#define OPT_INT_(s, l, v, a, h) { OPT_INT, s, l, v, a, h }
#define OPT_STR_(s, l, v, a, h) { OPT_STR, s, l, v, a, h }
#define OPT_SIZE_(s, l, v, a, h) { OPT_SIZE, s, l, v, a, h }
#define OPT_LIST_(s, l, v, a, h) { OPT_LIST, s, l, v, a, h }
#define OPT_END_() { OPT_END, 0, NULL, NULL, NULL, NULL }

/* Parse argv (argv[0] is the command name) against the command's options
 * plus the global ones. Non-option arguments are moved to argv[0..n-1] and
 * n is returned. Returns -1 after printing a usage error, -2 after printing
 * help (the command then exits EXIT_OK). usage[0] is the synopsis line(s),
 * a NULL-terminated array whose remaining lines describe the command. */
int cli_parse_options(int argc, char **argv, const struct option *opts,
                  const char *const *usage, struct ckpt_opts *g);
void cli_opt_list_release(struct opt_list *l);

/* Say on stderr which of cands[0..n) the mistyped name most likely meant
 * ("hint: did you mean 'ls'?"): those nearest by edit distance (a
 * transposition counting one), at most 2 and under half the name, or
 * that the name begins. Returns how many were named. */
int cli_did_you_mean(const char *what, const char *name,
                     const char *const *cands, size_t n);

/* Storage settings derived from the global options. */
struct ckpt_storage_cfg cli_storage_cfg(const struct ckpt_opts *g);

/* Messages to stderr: "ckpt: error: ...", warnings hidden by -q, info
 * shown unless -q, notes always, debug only with -v. When stderr is not
 * a terminal each line starts with an ISO-8601 timestamp. The formatted message is
 * escaped (ckpt/text.h), so it is always one line without control bytes. */
void cli_init_output(const struct ckpt_opts *g);
void cli_errorf(const char *fmt, ...) CKPT_PRINTF(1, 2);
/* As info, but shown with -q too (an interrupt's last word). */
void cli_notef(const char *fmt, ...) CKPT_PRINTF(1, 2);
void cli_warnf(const char *fmt, ...) CKPT_PRINTF(1, 2);
void cli_infof(const char *fmt, ...) CKPT_PRINTF(1, 2);
void cli_debugf(const char *fmt, ...) CKPT_PRINTF(1, 2);

/* The output contract (docs/output.md, docs/output.schema.json): every
 * JSON line starts {"type":TYPE,"schema":CLI_SCHEMA,...}; the schema
 * number changes only when a key is renamed, removed or retyped. */
#define CLI_SCHEMA 1
struct cJSON *cli_json_row(const char *type);
/* A row's verb from the library's word for what happened: one verb set
 * in every command, present tense (delete, keep, skip, error, copy,
 * unshard, process, abort), "would-VERB" under -n for what would change
 * something ("deleted" -> "delete", "failed" -> "error", "would-skip" ->
 * "skip"). Words already in the set are returned as they are. */
const char *cli_verb(const char *word);

/* A size for a row: bytes, or with -H (the default when stdout is a
 * terminal) for people, "1.5 GiB". Returns buf. */
const char *cli_fmt_bytes(uint64_t bytes, char *buf, size_t len);
/* 1 when rows are for people (-H, or stdout a terminal): sizes as
 * cli_fmt_bytes, and a header line above the rows. */
int cli_human(void);

/* Print one JSON object as a single line on stdout and free it. A string
 * or key that is not valid UTF-8 is replaced by its escaped form
 * (ckpt_escape), so the line is always valid UTF-8 JSON. */
void cli_out_json(struct cJSON *obj);
/* Print fields joined by TAB, newline-terminated, on stdout; each field
 * escaped (ckpt_escape: \t \n \\ \xNN), so a row is one line and its
 * fields split on TAB exactly. */
void cli_out_tsv(int n, const char *const *fields);
/* The total row that ends process and cp: "total", NAME=VALUE for each
 * of the n counters (sizes as cli_fmt_bytes for the names ending in
 * "bytes" or "freed", and "bytes_*"), then seconds; with --json one
 * "total" line with dry_run and the same keys. Summed over workers as
 * docs/deploy.md says. */
void cli_out_total(int json, int dry_run, int n, const char *const *names,
                   const uint64_t *v, double seconds);
/* The column names above the rows, once, when they are for people
 * (cli_human); nothing in pipes. */
void cli_out_header(int n, const char *const *names);

/* -H, --human-readable: for the commands whose rows hold sizes. */
#define OPT_HUMAN_(g) OPT_BOOL_('H', "human-readable", &(g)->human, \
    "sizes for people (1.5 GiB): the default when stdout is a terminal")

/* The status line: one line kept at the bottom of stderr when it is a
 * terminal (cli_status_enabled: and neither --no-progress nor -q), rows
 * and messages printed above it. cli_status_show replaces it (cut to the
 * terminal's width; the caller escapes names in it); cli_status_end
 * erases it, or with keep leaves it as an ordinary last line. No-ops
 * when stderr is not a terminal. */
int cli_status_enabled(const struct ckpt_opts *g);
void cli_status_show(const char *line);
void cli_status_end(int keep);

/* Progress: a bar on a terminal (unless --no-progress/-q), periodic plain
 * lines otherwise (timestamped, every 10 s; with --progress every second,
 * from the start, and with -q too). Counters are atomic; any thread may add. */
struct progress;
struct progress *cli_progress_new(const struct ckpt_opts *g, const char *what,
                              uint64_t total_items, uint64_t total_bytes);
void cli_progress_add(struct progress *p, uint64_t items, uint64_t bytes);
void cli_progress_done(struct progress *p); /* prints the final line, frees */
/* The bytes this run moved so far (a total, not an increment): the rate
 * counts these, the size every byte done (resumed parts, skipped files).
 * Without it the rate counts every byte added. */
void cli_progress_sent(struct progress *p, uint64_t sent);

/* Subcommands: argc/argv start at the command name. */
int cmd_clean(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_du(int argc, char **argv);     /* ls --summary --by-run */
int cmd_map_wandb(int argc, char **argv);
int cmd_process(int argc, char **argv);
int cmd_unshard(int argc, char **argv);
int cmd_upload(int argc, char **argv);

#endif
