/*
 * dsunshard_fuzz.c - property: any set of files in a DeepSpeed step
 * directory (names and contents from the input: model states and ZeRO
 * optimizer files, their pickles and zip records) unsharded through
 * src/trainers/deepspeed/plan.c never crashes or leaks; a run that succeeds wrote
 * exactly the file it planned, and one that fails says why.
 *
 * Input: records, each a 1-byte name length, the name, a 4-byte
 * little-endian content length and the content (cut at the end of the
 * input): binary zips hold every byte value, so no separator would do.
 * Names as layout_fuzz.c allows; the files are written under a fresh
 * temporary `global_step5/`, then
 * unsharded (one worker) into a directory beside it. The corpus holds the
 * real ZeRO-1 bf16, ZeRO-2 fp32 and ZeRO-3 fp32 steps of
 * tests/fixtures/real-writers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>

#include "ckpt/run.h"
#include "fuzztree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzztree_unshard_step(data, size, "global_step5", CKPT_FMT_DEEPSPEED);
    return 0;
}
