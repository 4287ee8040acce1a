/*
 * loc_fuzz - location parsing (ckpt_loc_parse / ckpt_loc_format in
 * src/storage/storage.c): local paths, file://, s3://, r2://, gs://.
 *
 * Input: the location text (up to the first NUL).
 * Properties: never crashes or leaks; a parsed location keeps what the
 * user wrote as its display; object-storage locations have a non-empty
 * bucket without '/', and a key without leading or trailing '/'; local
 * keys are non-empty and end in '/' only as "/". Round trip: the location
 * re-formatted for its own key (what every message and listing prints)
 * parses back to the same scheme, bucket and key.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/storage.h"

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    struct ckpt_loc loc;
    struct ckpt_err err;
    if (ckpt_loc_parse(&loc, s, &err) != 0) {
        free(s);
        return 0;
    }
    if (strcmp(loc.display, s) != 0)
        __builtin_trap();
    size_t kl = strlen(loc.key);
    if (loc.scheme == CKPT_SCHEME_LOCAL) {
        if (loc.bucket || kl == 0 || (kl > 1 && loc.key[kl - 1] == '/'))
            __builtin_trap();
    } else {
        if (!loc.bucket || !loc.bucket[0] || strchr(loc.bucket, '/') ||
            (kl && (loc.key[0] == '/' || loc.key[kl - 1] == '/')))
            __builtin_trap();
    }
    char *canon = ckpt_loc_format(&loc, loc.key);
    struct ckpt_loc back;
    if (ckpt_loc_parse(&back, canon, &err) != 0 ||
        back.scheme != loc.scheme || !same(back.bucket, loc.bucket) ||
        strcmp(back.key, loc.key) != 0)
        __builtin_trap();   /* what we print names another location */
    ckpt_loc_release(&back);
    free(canon);
    ckpt_loc_release(&loc);
    free(s);
    return 0;
}
