/*
 * dcp_metadata_fuzz.c - property: interpreting any bytes as DCP .metadata
 * (the completeness API and the full parser, twice to exercise rank-local
 * merging) never crashes or leaks.
 */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/dcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_dcp_filereq *r;
    size_t n;
    struct ckpt_err err;
    if (ckpt_dcp_required_sizes(data, size, &r, &n, &err) == 0)
        ckpt_dcp_filereqs_free(r, n);
    struct ckpt_dcp_meta *m = ckpt_dcp_meta_new();
    if (m && ckpt_dcp_meta_add(m, data, size, ".metadata", &err) == 0)
        ckpt_dcp_meta_add(m, data, size, "__1.metadata", &err);
    ckpt_dcp_meta_free(m);
    return 0;
}
