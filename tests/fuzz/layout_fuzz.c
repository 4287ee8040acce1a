/*
 * layout_fuzz.c - property: any set of files in a step directory (names
 * and contents from the input) judged through the trainer layout table
 * (src/run/layout*.c: Lightning, DeepSpeed, Megatron, HF names, their
 * pickles and metadata.json) and judge.c never crashes or leaks, and
 * every verdict that is not complete says why.
 *
 * Input: records separated by 0xff, each "NAME\0CONTENT". NAME is a path
 * inside the step (at most one '/', no "..", no leading '/'); records
 * with other names are skipped. The files are written under a fresh
 * temporary run directory, `global_step5/`, then scanned as a run; a
 * NAME starting with '=' is written at the run's top instead (without the
 * '='): Lightning's `last.ckpt` files and sharded `x.ckpt/` directories.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char tmpl[] = "/tmp/ckpt-layout-fuzz-XXXXXX";
    if (!mkdtemp(tmpl))
        return 0;
    char *step = ckpt_path_join(tmpl, "global_step5");
    mkdir(step, 0755);
    fuzztree_records(tmpl, step, data, size);
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_err err;
    struct ckpt_tree *t;
    struct ckpt_run r;
    if (ckpt_loc_parse(&loc, tmpl, NULL) == 0) {
        if (ckpt_storage_open(&st, &loc, NULL, NULL) == 0) {
            if (ckpt_tree_load(&t, st, tmpl, NULL, &err) == 0) {
                if (ckpt_run_scan(&r, t, &err) == 0) {
                    for (size_t i = 0; i < r.n; i++)
                        if (!r.ckpts[i].complete && !r.ckpts[i].why)
                            abort();
                    ckpt_run_release(&r);
                }
                ckpt_tree_free(t);
            }
            ckpt_storage_close(st);
        }
        ckpt_loc_release(&loc);
    }
    free(step);
    fuzztree_rm(tmpl);
    return 0;
}
