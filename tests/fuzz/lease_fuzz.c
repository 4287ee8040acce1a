/*
 * lease_fuzz - the lease object `ckpt process` keeps per run under
 * DEST/.ckpt-process/ (src/process/lease.c): every worker reads the
 * leases of the others, so its bytes are whatever DEST holds.
 *
 * Input: the object's bytes.
 * Properties: never crashes or leaks; what parses has a token; written
 * again and re-read it gives the same holder (host, pid, run, token, and
 * the times and pid, which parse only within 2^53, held exactly by a
 * JSON number).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/lease.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_lease_holder h, g;
    if (ckpt_lease_parse((const char *)data, size, &h) != 0)
        return 0;
    if (!h.token[0])
        __builtin_trap();
    size_t len;
    char *text = ckpt_lease_format(&h, &len);
    if (len != strlen(text) || ckpt_lease_parse(text, len, &g) != 0 ||
        strcmp(g.host, h.host) || strcmp(g.run, h.run) ||
        strcmp(g.token, h.token) || g.pid != h.pid ||
        g.acquired != h.acquired || g.expires != h.expires)
        __builtin_trap();
    free(text);
    return 0;
}
