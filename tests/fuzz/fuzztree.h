/*
 * fuzztree.h - the file tree the layout and dsunshard fuzz targets build
 * from their input: one checked name rule and one writer, so both targets
 * accept the same names and neither reads past a name that is not
 * NUL-terminated in the input.
 */
#ifndef CKPT_FUZZTREE_H
#define CKPT_FUZZTREE_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/util.h"

static int fuzztree_rm_one(const char *p, const struct stat *sb, int flag,
                           struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Removes the temporary tree DIR and everything under it. */
static inline void fuzztree_rm(const char *dir)
{
    nftw(dir, fuzztree_rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* A relative path with at most one '/', no "..", no control byte: the
 * file stays inside the temporary tree. N is NUL-terminated. */
static inline int fuzztree_ok_name(const char *n)
{
    size_t len = strlen(n);
    int slashes = 0;
    if (!len || len > 64 || n[0] == '/' || n[len - 1] == '/' ||
        strstr(n, "..") || strstr(n, "//") || strcmp(n, ".") == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (n[i] == '/')
            slashes++;
        if ((unsigned char)n[i] < 0x20 || n[i] == '\\')
            return 0;
    }
    return slashes <= 1;
}

/* Writes CONTENT (N bytes) as DIR/NAME, NAME being the NL bytes at NM
 * (not NUL-terminated); names that fail fuzztree_ok_name are skipped. */
static inline void fuzztree_put(const char *dir, const char *nm, size_t nl,
                                const void *content, size_t n)
{
    char name[80];
    if (nl >= sizeof(name) || memchr(nm, '\0', nl))
        return;
    memcpy(name, nm, nl);
    name[nl] = '\0';
    if (!fuzztree_ok_name(name))
        return;
    char *path = ckpt_path_join(dir, name);
    char *sub = ckpt_path_dirname(path);
    mkdir(sub, 0755);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(content, 1, n, f);
        fclose(f);
    }
    free(sub);
    free(path);
}

/* One record "NAME\0CONTENT" (N bytes at REC) written below STEP, or
 * below TOP when NAME starts with '=' (the '=' dropped). */
static inline void fuzztree_record(const char *top, const char *step,
                                   const uint8_t *rec, size_t n)
{
    const uint8_t *z = memchr(rec, 0, n);
    if (!z)
        return;
    size_t nl = (size_t)(z - rec);
    size_t at = nl && rec[0] == '=';
    fuzztree_put(at ? top : step, (const char *)rec + at, nl - at, z + 1,
                 n - nl - 1);
}

/* The layout targets' input: records separated by 0xff, each written by
 * fuzztree_record. */
static inline void fuzztree_records(const char *top, const char *step,
                                    const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size;) {
        const uint8_t *end = memchr(data + i, 0xff, size - i);
        size_t n = end ? (size_t)(end - (data + i)) : size - i;
        fuzztree_record(top, step, data + i, n);
        i += n + 1;
    }
}

#endif
