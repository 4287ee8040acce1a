/* filter.h - the copy filters of cp and process (cli only). */
#ifndef CKPT_CLI_FILTER_H
#define CKPT_CLI_FILTER_H

#include "cli.h"

struct ckpt_filter;

struct cli_filter_opts {
    struct opt_list include, exclude, filter_from;
};

/* The options' table entries (rclone's names). */
#define OPT_FILTERS_(fo)                                                    \
    OPT_LIST_(0, "include", &(fo)->include, "GLOB", "copy only matching "  \
              "files (repeatable, rclone's rules); the rest stays at the " \
              "source"),                                                   \
    OPT_LIST_(0, "exclude", &(fo)->exclude, "GLOB", "do not copy "         \
              "matching files (repeatable); they stay at the source"),     \
    OPT_LIST_(0, "filter-from", &(fo)->filter_from, "FILE", "rules from "  \
              "FILE: '+ GLOB' includes, '- GLOB' excludes, '#' comments")

/* The rules in command-line order (given: argv as typed, before the
 * parser reordered it), into *out (NULL when there are none). -1 with
 * err (CKPT_EUSAGE) for a rule or file that cannot be taken. */
int cli_filter_build(char *const *given, int argc,
                     const struct cli_filter_opts *fo,
                     struct ckpt_filter **out, struct ckpt_err *err);
void cli_filter_opts_release(struct cli_filter_opts *fo);

#endif
