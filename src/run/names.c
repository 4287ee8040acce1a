/*
 * names.c - the names of formats and of checkpoint directories (stepN,
 * checkpoint-N, global_stepN, NAME-unsharded, ...): pure functions of a
 * name, below everything that reads a run (tree.c, account.c, run.c,
 * the trainers, unshard), so that none of them calls another for them.
 */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "ckpt/run.h"
#include "ckpt/util.h"

const char *ckpt_format_name(enum ckpt_format f)
{
    switch (f) {
    case CKPT_FMT_DCP: return "dcp";
    case CKPT_FMT_OLMO_LEGACY: return "olmo-legacy";
    case CKPT_FMT_OLMO_LOCAL: return "olmo-local";
    case CKPT_FMT_OLMO_CORE: return "olmo-core";
    case CKPT_FMT_ZARR: return "zarr";
    case CKPT_FMT_ORBAX: return "orbax";
    case CKPT_FMT_UNSHARDED: return "unsharded";
    case CKPT_FMT_HF: return "hf";
    case CKPT_FMT_DEEPSPEED: return "deepspeed";
    case CKPT_FMT_MEGATRON: return "megatron";
    case CKPT_FMT_DCP_HF: return "dcp-hf";
    case CKPT_FMT_LIGHTNING: return "lightning";
    default: return "unknown";
    }
}

/* s is all digits (and non-empty, not absurdly long): *v = its value. */
static int all_digits(const char *s, size_t n, int64_t *v)
{
    if (n == 0 || n > 18)
        return 0;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return 1;
}

/* Orbax writes a step under "<step>.orbax-checkpoint-tmp-<time>" and
 * renames it when done: the step's name with that suffix is the step,
 * judged (an unfinished one is incomplete, judge.c). */
static int orbax_tmp(const char *s)
{
    static const char tmp[] = ".orbax-checkpoint-tmp-";
    if (strncmp(s, tmp, sizeof(tmp) - 1) != 0)
        return 0;
    for (s += sizeof(tmp) - 1; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

/* name (n bytes) is a step spelt PREFIX<digits>, with an optional
 * suffix after '-' or '.' (`step1000-final`, OLMo's `step1000-hf`,
 * `step1000.0`) unless the prefix is empty (a bare number is exactly
 * that, or Orbax's temporary name). Prefixes match without regard to
 * case (`Step1000`). */
static int prefixed_step(const char *name, size_t n, const char *prefix,
                         int64_t *step)
{
    size_t pl = strlen(prefix), d = pl;
    if (n <= pl || strncasecmp(name, prefix, pl) != 0)
        return 0;
    while (d < n && isdigit((unsigned char)name[d]))
        d++;
    if (d == pl)
        return 0;
    if (d < n && !(*prefix ? (name[d] == '-' || name[d] == '.') && d + 1 < n
                           : orbax_tmp(name + d)))
        return 0;
    return all_digits(name + pl, d - pl, step);
}

int ckpt_checkpoint_name(const char *name, int64_t *step, int *unsharded)
{
    static const char *prefixes[] = {
        "global_step", "step_", "step-", "step=", "step", "iter_",
        "checkpoint-", "checkpoint_", "ckpt_", "ckpt-", "epoch_",
        "dist_epoch_", "",
    };
    size_t len = strlen(name);
    *unsharded = 0;
    /* NAME-unsharded is the copy unshard's run mode writes beside step
     * NAME, whatever its spelling (OLMo's stepN, Orbax's bare N,
     * checkpoint-N): every command must know it as a checkpoint, or a run
     * holding only such copies looks empty. */
    if (ckpt_str_endswith(name, "-unsharded")) {
        *unsharded = 1;
        len -= strlen("-unsharded");
    }
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (prefixed_step(name, len, prefixes[i], step))
            return 1;
    *unsharded = 0;
    return 0;
}
