/*
 * mghf_fuzz.c - property: any set of files in a Megatron step directory
 * (legacy mp_rank_TT/ rank files or torch_dist DCP files, and the
 * config.json beside them, names and contents from the input) exported
 * with --format hf through src/trainers/megatron/export_hf.c never
 * crashes or leaks; a run that succeeds wrote exactly the files it
 * planned, and one that fails says why.
 *
 * Input: records as mglegacy_fuzz.c's (a 1-byte name length, the name, a
 * 4-byte little-endian content length and the content), written under a
 * fresh temporary `iter_0000010/`, then exported (one worker, verified)
 * into a directory beside it. The corpus (mghf_corpus.py) holds the TP=2
 * legacy and torch_dist steps of tests/fixtures/megatron_llama with their
 * config.json.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>

#include "ckpt/run.h"
#include "fuzztree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzztree_unshard_step_as(data, size, "iter_0000010", CKPT_FMT_MEGATRON,
                             CKPT_FORMAT_HF);
    return 0;
}
