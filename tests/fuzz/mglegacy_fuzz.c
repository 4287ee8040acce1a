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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/run.h"
#include "ckpt/unshard.h"
#include "ckpt/util.h"
#include "fuzztree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char tmpl[] = "/tmp/ckpt-mglegacy-fuzz-XXXXXX";
    if (!mkdtemp(tmpl))
        return 0;
    char *step = ckpt_path_join(tmpl, "iter_0000010");
    char *out = ckpt_path_join(tmpl, "out");
    mkdir(step, 0755);
    for (size_t i = 0; i < size;) {
        size_t nl = data[i++];
        if (nl > size - i)
            break;
        const char *nm = (const char *)data + i;
        i += nl;
        if (size - i < 4)
            break;
        size_t n = (size_t)data[i] | (size_t)data[i + 1] << 8 |
                   (size_t)data[i + 2] << 16 | (size_t)data[i + 3] << 24;
        i += 4;
        if (n > size - i)
            n = size - i;
        fuzztree_put(step, nm, nl, data + i, n);
        i += n;
    }
    struct ckpt_unshard_opts o;
    struct ckpt_unshard_result res;
    struct ckpt_err err = CKPT_ERR_INIT;
    memset(&o, 0, sizeof(o));
    o.source_format = CKPT_FMT_MEGATRON;
    o.jobs = 1;
    o.verify = 1;
    if (ckpt_unshard_dcp(step, out, &o, &res, &err) == 0) {
        struct stat sb;
        for (size_t i = 0; i < res.nfiles; i++) {
            char *p = ckpt_path_join(out, res.files[i].name);
            if (stat(p, &sb) != 0 || (uint64_t)sb.st_size != res.files[i].size)
                abort();
            free(p);
        }
        ckpt_unshard_result_release(&res);
    } else if (!err.msg[0]) {
        abort();
    }
    free(out);
    free(step);
    fuzztree_rm(tmpl);
    return 0;
}
