/*
 * dcp_metadata_fuzz.c - any bytes as DCP .metadata: the completeness API
 * (ckpt_dcp_required_sizes, which judging uses) and the full parser
 * (ckpt_dcp_meta_add, which unshard uses), once and then again as a
 * second rank's file to exercise rank-local merging.
 * Properties: never crashes or leaks; and what the full parser accepts,
 *   - the completeness API accepts too, requiring the same files with the
 *     same minimum sizes;
 *   - every required file is a plain name inside the checkpoint directory
 *     (not empty, no '/', no '\', not "." or "..") and named once;
 *   - every stored piece (each tensor chunk, each byte item and its
 *     copies) is in a required file whose minimum size covers its end,
 *     so a checkpoint judged complete has every byte unshard reads;
 *   - every chunk lies inside its tensor.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ckpt/dcp.h"

static const struct ckpt_dcp_filereq *req(const struct ckpt_dcp_filereq *r,
                                          size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(r[i].name, name))
            return &r[i];
    return NULL;
}

static void covered(const struct ckpt_dcp_meta *m,
                    const struct ckpt_dcp_storage *st)
{
    const struct ckpt_dcp_filereq *f = req(m->files, m->nfiles, st->file);
    if (!f || st->offset + st->length < st->offset ||
        f->min_size < st->offset + st->length)
        __builtin_trap();
}

static void check_meta(const struct ckpt_dcp_meta *m)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        const char *s = m->files[i].name;
        if (!*s || strchr(s, '/') || strchr(s, '\\') || !strcmp(s, ".") ||
            !strcmp(s, "..") || req(m->files, i, s))
            __builtin_trap();
    }
    for (size_t i = 0; i < m->n; i++) {
        const struct ckpt_dcp_entry *e = &m->entries[i];
        if (e->kind == CKPT_DCP_BYTES) {
            covered(m, &e->st);
            for (size_t k = 0; k < e->ncopies; k++)
                covered(m, &e->copies[k].st);
            continue;
        }
        for (size_t c = 0; c < e->nchunks; c++) {
            const struct ckpt_dcp_chunk *ch = &e->chunks[c];
            for (int d = 0; d < e->ndim; d++)
                if (ch->offsets[d] > e->size[d] ||
                    ch->sizes[d] > e->size[d] - ch->offsets[d])
                    __builtin_trap();
            covered(m, &ch->st);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_dcp_filereq *r = NULL;
    size_t n = 0;
    struct ckpt_err err;
    int rrc = ckpt_dcp_required_sizes(data, size, &r, &n, &err);
    struct ckpt_dcp_meta *m = ckpt_dcp_meta_new();
    if (m && ckpt_dcp_meta_add(m, data, size, ".metadata", &err) == 0) {
        if (rrc != 0 || n != m->nfiles)
            __builtin_trap();
        for (size_t i = 0; i < n; i++) {
            const struct ckpt_dcp_filereq *f = req(m->files, m->nfiles,
                                                   r[i].name);
            if (!f || f->min_size != r[i].min_size)
                __builtin_trap();
        }
        check_meta(m);
        if (ckpt_dcp_meta_add(m, data, size, "__1.metadata", &err) == 0)
            check_meta(m);
    }
    if (rrc == 0)
        ckpt_dcp_filereqs_free(r, n);
    ckpt_dcp_meta_free(m);
    return 0;
}
