/*
 * archtree_fuzz.c - property: a run judged from a compressed archive is
 * judged as the same run as a directory. The files come from the input as
 * in layout_fuzz.c (records "NAME\0CONTENT" separated by 0xff, below a
 * step directory `global_step5/`, or with '=' at the run's top); the run
 * is also written as run.tar.gz (libarchive, pax). Both are scanned
 * (src/run: the trainer layout table, judge.c, and tree.c's heads and
 * tails of torch zips and safetensors files kept while the archive is
 * listed) and every checkpoint must have the same name, step, format and
 * verdict (complete, unknown, why). Inputs stay far below tree.c's ring
 * and budget, so no member falls back to the archive's own end check.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <archive.h>
#include <archive_entry.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/run.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"
#include "fuzztree.h"

static struct archive *tar_out;
static size_t tar_root;           /* strlen of the directory above run/ */

static int add_one(const char *p, const struct stat *sb, int flag,
                   struct FTW *ftw)
{
    (void)ftw;
    if (flag != FTW_F && flag != FTW_D)
        return 0;
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, p + tar_root + 1);
    archive_entry_set_size(e, flag == FTW_F ? sb->st_size : 0);
    archive_entry_set_filetype(e, flag == FTW_F ? AE_IFREG : AE_IFDIR);
    archive_entry_set_perm(e, flag == FTW_F ? 0644 : 0755);
    archive_write_header(tar_out, e);
    archive_entry_free(e);
    if (flag != FTW_F)
        return 0;
    FILE *f = fopen(p, "rb");
    char buf[65536];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof(buf), f)) > 0)
        archive_write_data(tar_out, buf, n);
    if (f)
        fclose(f);
    return 0;
}

/* dir/run as dir/run.tar.gz, members "run/...". */
static int make_tar(const char *dir, const char *run, const char *out)
{
    tar_out = archive_write_new();
    archive_write_add_filter_gzip(tar_out);
    archive_write_set_format_pax_restricted(tar_out);
    int rc = archive_write_open_filename(tar_out, out);
    tar_root = strlen(dir);
    if (rc == ARCHIVE_OK)
        rc = nftw(run, add_one, 8, FTW_PHYS);
    archive_write_close(tar_out);
    archive_write_free(tar_out);
    return rc;
}

static int scan(struct ckpt_storage *st, const char *key, struct ckpt_run *r)
{
    struct ckpt_tree *t;
    struct ckpt_err err;
    if (ckpt_tree_load(&t, st, key, NULL, &err) != 0)
        return -1;
    int rc = ckpt_run_scan(r, t, &err);
    ckpt_tree_free(t);
    return rc;
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static void compare(const struct ckpt_run *d, const struct ckpt_run *a)
{
    if (d->n != a->n)
        abort();
    for (size_t i = 0; i < d->n; i++) {
        const struct ckpt_checkpoint *x = &d->ckpts[i], *y = &a->ckpts[i];
        if (!same_str(x->name, y->name) || x->step != y->step ||
            x->format != y->format || x->complete != y->complete ||
            x->unknown != y->unknown || !same_str(x->why, y->why)) {
            fprintf(stderr, "directory: %s %s; archive: %s %s\n", x->name,
                    x->why ? x->why : "complete", y->name,
                    y->why ? y->why : "complete");
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char tmpl[] = "/tmp/ckpt-archtree-fuzz-XXXXXX";
    if (!mkdtemp(tmpl))
        return 0;
    char *run = ckpt_path_join(tmpl, "run");
    char *step = ckpt_path_join(run, "global_step5");
    char *tgz = ckpt_path_join(tmpl, "run.tar.gz");
    mkdir(run, 0755);
    mkdir(step, 0755);
    fuzztree_records(run, step, data, size);
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_run d, a;
    if (make_tar(tmpl, run, tgz) == 0 &&
        ckpt_loc_parse(&loc, tmpl, NULL) == 0) {
        if (ckpt_storage_open(&st, &loc, NULL, NULL) == 0) {
            if (scan(st, run, &d) == 0) {
                if (scan(st, tgz, &a) != 0)
                    abort();    /* a whole archive of a readable run */
                compare(&d, &a);
                ckpt_run_release(&a);
                ckpt_run_release(&d);
            }
            ckpt_storage_close(st);
        }
        ckpt_loc_release(&loc);
    }
    free(run);
    free(step);
    free(tgz);
    fuzztree_rm(tmpl);
    return 0;
}
