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

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int ok_name(const char *n, size_t len)
{
    int slashes = 0;
    if (!len || len > 64 || n[0] == '/' || n[len - 1] == '/' ||
        strstr(n, ".."))
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (n[i] == '/')
            slashes++;
        if ((unsigned char)n[i] < 0x20 || n[i] == '\\')
            return 0;
    }
    return slashes <= 1 && !strstr(n, "//") && strcmp(n, ".") != 0;
}

static void put(const char *top, const char *step, const uint8_t *rec,
                size_t n)
{
    const uint8_t *z = memchr(rec, 0, n);
    if (!z)
        return;
    size_t nl = (size_t)(z - rec);
    char name[80];
    size_t at = nl && rec[0] == '=';
    if (!ok_name((const char *)rec + at, nl - at))
        return;
    memcpy(name, rec + at, nl - at);
    name[nl - at] = '\0';
    char *path = ckpt_path_join(at ? top : step, name);
    char *dir = ckpt_path_dirname(path);
    mkdir(dir, 0755);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(z + 1, 1, n - nl - 1, f);
        fclose(f);
    }
    free(dir);
    free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char tmpl[] = "/tmp/ckpt-layout-fuzz-XXXXXX";
    if (!mkdtemp(tmpl))
        return 0;
    char *step = ckpt_path_join(tmpl, "global_step5");
    mkdir(step, 0755);
    for (size_t i = 0; i < size;) {
        const uint8_t *end = memchr(data + i, 0xff, size - i);
        size_t n = end ? (size_t)(end - (data + i)) : size - i;
        put(tmpl, step, data + i, n);
        i += n + 1;
    }
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
    nftw(tmpl, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}
