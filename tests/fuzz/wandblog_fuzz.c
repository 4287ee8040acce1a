/*
 * wandblog_fuzz - the run-ID.wandb reader (src/wandb/wandbfile.c): LevelDB
 * log framing and protobuf fields on arbitrary bytes.
 * Property: never crashes, never reads past the input, never leaks.
 */
#include <stdint.h>

#include "wandb/wandb_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_wandb_runrecord r;
    struct ckpt_err err;
    if (ckpt_wandbfile_runrecord(data, size, &r, &err) == 0)
        ckpt_wandb_runrecord_release(&r);
    return 0;
}
