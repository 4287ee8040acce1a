/*
 * dcp_int.h - shared by dcp.c (entry points, helpers) and dcp_items.c
 * (storage_data and state_dict_metadata). Private: do not expose.
 */
#ifndef CKPT_DCP_INT_H
#define CKPT_DCP_INT_H

#include "ckpt/dcp.h"
#include "strmap.h"

struct dcp_index {
    struct strmap fqns;      /* fqn -> entry index */
    struct strmap storage;   /* dcp_key -> index into sts */
    struct strmap files;     /* relative_path -> index into m->files */
    struct ckpt_dcp_storage *sts;   /* arena */
    size_t nst, stcap;
    size_t filecap;
    unsigned part;           /* metadata files parsed so far */
};

const struct ckpt_pv *dcp_field(const struct ckpt_pv *obj, const char *name);
const char *dcp_class(const struct ckpt_pv *v);
int dcp_is_none(const struct ckpt_pv *v);
int dcp_dims(struct ckpt_arena *a, const struct ckpt_pv *v,
             const uint64_t **out);
const char *dcp_key(struct ckpt_arena *a, unsigned part, const char *fqn,
                    const uint64_t *offs, int ndim, size_t *len);

int dcp_storage_data(struct ckpt_dcp_meta *m, const struct ckpt_pv *sd,
                     const char *name, struct ckpt_err *err);
int dcp_state_dict(struct ckpt_dcp_meta *m, const struct ckpt_pv *sdm,
                   const struct ckpt_pv *planner, const char *name,
                   struct ckpt_err *err);
void dcp_sort_files(struct ckpt_dcp_meta *m);

#endif
