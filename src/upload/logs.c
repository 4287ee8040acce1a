/*
 * logs.c - which log files belong to a run (`upload --logs`, `process
 * --logs`): Slurm and launcher logs are named by job id, which is the run
 * directory's name, or by the W&B run id.
 */
#include <ctype.h>
#include <string.h>

#include "ckpt/upload.h"

/* Does `id` occur in name as a whole token (not inside a longer id)? */
static int has_token(const char *name, const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (!n)
        return 0;
    for (const char *p = strstr(name, id); p; p = strstr(p + 1, id)) {
        int before = p == name || !isalnum((unsigned char)p[-1]);
        int after = !isalnum((unsigned char)p[n]);
        if (before && after)
            return 1;
    }
    return 0;
}

int ckpt_upload_is_log_of(const char *base, const char *run, const char *wid)
{
    return has_token(base, run) || has_token(base, wid);
}
