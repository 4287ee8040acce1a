/*
 * claim_fuzz - the batch claim `ckpt process --batch` keeps per run under
 * DEST/.ckpt-process/ (src/process/claim.c): every worker of a Slurm
 * array reads the claims of the others, so its bytes are whatever DEST
 * holds.
 *
 * Input: the object's bytes.
 * Properties: never crashes or leaks; what parses has a batch and a
 * token; written again and re-read it gives the same claim (batch, host,
 * run, token, pid within 2^53, done).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "process/process_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proc_claim_holder h, g;
    if (proc_claim_parse((const char *)data, size, &h) != 0)
        return 0;
    if (!h.batch[0] || !h.token[0])
        __builtin_trap();
    char *text = proc_claim_format(&h);
    if (proc_claim_parse(text, strlen(text), &g) != 0 ||
        strcmp(g.batch, h.batch) || strcmp(g.host, h.host) ||
        strcmp(g.run, h.run) || strcmp(g.token, h.token) ||
        g.pid != h.pid || g.done != h.done)
        __builtin_trap();
    free(text);
    return 0;
}
