/*
 * mglegacy_fuzz.c - property: any set of files in a legacy Megatron step
 * directory (names and contents from the input: mp_rank_TT[_PPP]/
 * model_optim_rng.pt rank files, their pickles and zip records) unsharded
 * through src/trainers/megatron/plan_legacy.c never crashes or leaks; a
 * run that succeeds wrote exactly the files it planned, and one that fails
 * says why.
 *
 * Input: records, each a 1-byte name length, the name, a 4-byte
 * little-endian content length and the content (cut at the end of the
 * input), as dsunshard_fuzz.c. The files are written under a fresh
 * temporary `iter_0000010/`, then unsharded (one worker, verified) into a
 * directory beside it. The corpus holds the TP=2 x PP=2 step of
 * tests/fixtures/megatron_legacy.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>

#include "ckpt/run.h"
#include "fuzztree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzztree_unshard_step(data, size, "iter_0000010", CKPT_FMT_MEGATRON);
    return 0;
}
