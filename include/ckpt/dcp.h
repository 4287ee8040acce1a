/* TEMPORARY until the DCP reader lands: the completeness API. */
#ifndef CKPT_DCP_H
#define CKPT_DCP_H
#include <stddef.h>
#include <stdint.h>
#include "ckpt/err.h"
struct ckpt_dcp_filereq {
    char *relative_path;
    uint64_t min_size;
};
int ckpt_dcp_required_sizes(const void *data, size_t len,
                            struct ckpt_dcp_filereq **out, size_t *n,
                            struct ckpt_err *err);
void ckpt_dcp_filereqs_free(struct ckpt_dcp_filereq *r, size_t n);
#endif
