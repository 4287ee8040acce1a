/*
 * fuzztree.h - the file tree the layout, dsunshard and mglegacy fuzz
 * targets build from their input: one checked name rule and one writer,
 * so every target accepts the same names and none reads past a name that
 * is not NUL-terminated in the input; and the unshard targets' one body.
 */
#ifndef CKPT_FUZZTREE_H
#define CKPT_FUZZTREE_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/unshard.h"
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

/* The body of the unshard fuzz targets (dsunshard, mglegacy): the input's
 * records (a 1-byte name length, the name, a 4-byte little-endian content
 * length, the content, cut at the input's end) written under a fresh
 * temporary STEP/, unsharded as FORMAT (one worker, verified) into a
 * directory beside it. A run that succeeds wrote exactly the files it
 * planned, one that fails says why; anything else aborts. */
static inline void fuzztree_unshard_step_as(const uint8_t *data,
                                            size_t size,
                                            const char *step_name,
                                            int format, int out_format)
{
    char tmpl[] = "/tmp/ckpt-unshard-fuzz-XXXXXX";
    if (!mkdtemp(tmpl))
        return;
    char *step = ckpt_path_join(tmpl, step_name);
    char *out = ckpt_path_join(tmpl, "out");
    mkdir(step, 0755);
    for (size_t i = 0; i < size;) {
        size_t nl = data[i++];
        if (nl > size - i)
            break;
        const char *nm = (const char *)data + i;
        i += nl;
        if (size - i < 4)
            break;
        size_t n = (size_t)data[i] | (size_t)data[i + 1] << 8 |
                   (size_t)data[i + 2] << 16 | (size_t)data[i + 3] << 24;
        i += 4;
        if (n > size - i)
            n = size - i;
        fuzztree_put(step, nm, nl, data + i, n);
        i += n;
    }
    struct ckpt_unshard_opts o;
    struct ckpt_unshard_result res;
    struct ckpt_err err = CKPT_ERR_INIT;
    memset(&o, 0, sizeof(o));
    o.source_format = format;
    o.format = out_format;
    o.jobs = 1;
    o.verify = 1;
    if (ckpt_unshard_dcp(step, out, &o, &res, &err) == 0) {
        struct stat sb;
        for (size_t i = 0; i < res.nfiles; i++) {
            char *p = ckpt_path_join(out, res.files[i].name);
            if (stat(p, &sb) != 0 || (uint64_t)sb.st_size != res.files[i].size)
                abort();
            free(p);
        }
        ckpt_unshard_result_release(&res);
    } else if (!err.msg[0]) {
        abort();
    }
    free(out);
    free(step);
    fuzztree_rm(tmpl);
}

/* The step unsharded to torch files. */
static inline void fuzztree_unshard_step(const uint8_t *data, size_t size,
                                         const char *step_name, int format)
{
    fuzztree_unshard_step_as(data, size, step_name, format,
                             CKPT_FORMAT_TORCH);
}

#endif
