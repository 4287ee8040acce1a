/*
 * filter_fuzz - rclone-style filter files (ckpt_filter_add_rules in
 * src/upload/filter.c, `--filter-from`) and the glob matcher they feed.
 *
 * Input: a path to match (up to the first '\n'), then the file's text.
 * Properties: never crashes, never reads past the text, never leaks; an
 * accepted text holds exactly one rule per line whose first non-blank
 * character is '+' or '-' (every other line is blank or a comment), and
 * a refused one names its line; matching the path returns 0 or 1.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/upload.h"
#include "ckpt/util.h"

static size_t rule_lines(const char *t, size_t n)
{
    size_t k = 0;
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(t + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - t) : n;
        size_t i = at;
        while (i < end && (t[i] == ' ' || t[i] == '\t'))
            i++;
        if (i < end && (t[i] == '+' || t[i] == '-'))
            k++;
        at = end + 1;
    }
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *d = (const char *)data;
    const char *nl = memchr(d, '\n', size);
    size_t plen = nl ? (size_t)(nl - d) : size;
    char *path = ckpt_xstrndup(d, plen);
    const char *text = nl ? nl + 1 : d + size;
    size_t tlen = nl ? size - plen - 1 : 0;
    /* a copy of exactly tlen bytes: a read past it is caught by ASan */
    char *t = malloc(tlen ? tlen : 1);
    memcpy(t, text, tlen);
    struct ckpt_filter *f = ckpt_filter_new();
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_filter_add_rules(f, t, tlen, "fuzz", &err) == 0) {
        if (ckpt_filter_count(f) != rule_lines(t, tlen))
            abort();
    } else if (!strstr(err.msg, " line ")) {
        abort();
    }
    int m = ckpt_filter_match(f, path);
    if (m != 0 && m != 1)
        abort();
    ckpt_filter_free(f);
    free(t);
    free(path);
    return 0;
}
