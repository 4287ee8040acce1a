/*
 * filter.c - --include, --exclude and --filter-from (cp, process) into one
 * rule list (src/upload/filter.c), in the order they were given: the
 * first rule that matches decides, as rclone's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filter.h"
#include "ckpt/buf.h"
#include "ckpt/upload.h"
#include "ckpt/util.h"

/* Where in the command line (argv as given) the option value v is. */
static int arg_index(char *const *argv, int argc, const char *v)
{
    for (int i = 0; i < argc; i++)
        if (v >= argv[i] && v <= argv[i] + strlen(argv[i]))
            return i;
    return argc;
}

static int add_file(struct ckpt_filter *f, const char *path,
                    struct ckpt_err *err)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return ckpt_err_set(err, CKPT_EUSAGE, "--filter-from '%s': %s",
                            path, strerror(errno));
    struct ckpt_buf b = CKPT_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0 && b.len < (1u << 20))
        ckpt_buf_add(&b, chunk, n);
    int bad = ferror(in), big = b.len >= (1u << 20);
    fclose(in);
    int rc = bad ? ckpt_err_set(err, CKPT_EUSAGE, "--filter-from '%s': read "
                                "error", path)
           : big ? ckpt_err_set(err, CKPT_EUSAGE, "--filter-from '%s': "
                                "larger than 1 MiB", path)
           : ckpt_filter_add_rules(f, b.ptr, b.len, path, err);
    ckpt_buf_release(&b);
    return rc;
}

int cli_filter_build(char *const *given, int argc,
                     const struct cli_filter_opts *fo,
                     struct ckpt_filter **out, struct ckpt_err *err)
{
    const struct opt_list *l[3] = { &fo->include, &fo->exclude,
                                    &fo->filter_from };
    int at[3] = { 0, 0, 0 };
    *out = NULL;
    if (!l[0]->n && !l[1]->n && !l[2]->n)
        return 0;
    struct ckpt_filter *f = ckpt_filter_new();
    for (;;) {
        int pick = -1, best = 0;
        for (int k = 0; k < 3; k++) {
            if (at[k] >= l[k]->n)
                continue;
            int idx = arg_index(given, argc, l[k]->items[at[k]]);
            if (pick < 0 || idx < best) {
                pick = k;
                best = idx;
            }
        }
        if (pick < 0)
            break;
        const char *v = l[pick]->items[at[pick]++];
        int rc = pick == 2 ? add_file(f, v, err)
                           : ckpt_filter_add(f, pick == 0, v, err);
        if (rc != 0) {
            ckpt_filter_free(f);
            return -1;
        }
    }
    *out = f;
    return 0;
}

void cli_filter_opts_release(struct cli_filter_opts *fo)
{
    cli_opt_list_release(&fo->include);
    cli_opt_list_release(&fo->exclude);
    cli_opt_list_release(&fo->filter_from);
}
