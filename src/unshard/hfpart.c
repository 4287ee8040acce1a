/*
 * hfpart.c - --part I/N of an export (hfexport.h).
 */
#include "hfexport.h"
#include "unshard_int.h"

int uns_hf_part_plan(struct ujob *j, struct ckpt_err *err)
{
    (void)j;
    return ckpt_err_set(err, CKPT_EUNSUPPORTED, "--part: not yet");
}
