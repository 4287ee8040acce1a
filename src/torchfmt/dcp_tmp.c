/* TEMPORARY until the DCP reader lands. */
#include <stdlib.h>
#include "ckpt/dcp.h"
int ckpt_dcp_required_sizes(const void *data, size_t len,
                            struct ckpt_dcp_filereq **out, size_t *n,
                            struct ckpt_err *err)
{
    *out = NULL;
    *n = 0;
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "DCP metadata not readable yet");
}
void ckpt_dcp_filereqs_free(struct ckpt_dcp_filereq *r, size_t n)
{
    (void)n;
    free(r);
}
