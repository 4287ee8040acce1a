/*
 * match.c - does a W&B run's config describe this training run?
 *
 * OLMo's storage_cleaner demands exact equality of the whole config, which
 * breaks when a code version adds a default, when a resume edits a value,
 * or on float spelling. Here only keys present on both sides are compared
 * (recursively), numbers numerically, and scalars leniently across the
 * YAML/JSON spellings of one value ("1e-4" and 0.0001, "True" and true,
 * "None" and null); lists must have the same length. At least one
 * top-level key must be shared, so an empty config matches nothing.
 */
#include "wandb_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

/* Never compared: wandb's bookkeeping, the `wandb` section (OLMo passes
 * the config without it), and load_path, which requeued and resumed jobs
 * point at their latest checkpoint. */
static const char *const skipped[] = { "wandb", "_wandb", "wandb_version",
                                       "load_path", NULL };

static int skip_key(const char *k, const char *const *ignore, size_t n)
{
    for (const char *const *s = skipped; *s; s++)
        if (!strcmp(k, *s))
            return 1;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, ignore[i]))
            return 1;
    return 0;
}

static int num_eq(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (a == b)
        return 1;
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

/* A string that spells a number, as a number. */
static int str_num(const char *s, double *v)
{
    while (isspace((unsigned char)*s))
        s++;
    if (!*s)
        return 0;
    char *end;
    *v = strtod(s, &end);
    while (isspace((unsigned char)*end))
        end++;
    return *end == '\0';
}

static int str_in(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (!strcmp(s, *set))
            return 1;
    return 0;
}

static int scalar_eq(const cJSON *a, const cJSON *b)
{
    static const char *const t[] = { "true", "True", "TRUE", "yes", "on",
                                     NULL };
    static const char *const f[] = { "false", "False", "FALSE", "no", "off",
                                     NULL };
    static const char *const nul[] = { "None", "null", "~", NULL };
    if (cJSON_IsString(a) && !cJSON_IsString(b)) {
        const cJSON *x = a;
        a = b;
        b = x;
    }
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return num_eq(a->valuedouble, b->valuedouble);
    if (cJSON_IsString(a) && cJSON_IsString(b))
        return !strcmp(a->valuestring, b->valuestring);
    if (cJSON_IsBool(a) && cJSON_IsBool(b))
        return cJSON_IsTrue(a) == cJSON_IsTrue(b);
    if (cJSON_IsNull(a) && cJSON_IsNull(b))
        return 1;
    if (!cJSON_IsString(b))
        return 0;
    /* a is a non-string scalar, b a string. */
    double v;
    const char *s = b->valuestring;
    if (cJSON_IsNumber(a))
        return str_num(s, &v) && num_eq(a->valuedouble, v);
    if (cJSON_IsTrue(a))
        return str_in(s, t);
    if (cJSON_IsFalse(a))
        return str_in(s, f);
    if (cJSON_IsNull(a))
        return str_in(s, nul);
    return 0;
}

static void diff_at(char *diff, size_t len, const char *path)
{
    if (diff && len && !diff[0])
        snprintf(diff, len, "%s", path);
}

static int equal(const cJSON *a, const cJSON *b, struct ckpt_buf *path,
                 char *diff, size_t difflen);

static int objects_equal(const cJSON *a, const cJSON *b,
                         struct ckpt_buf *path, char *diff, size_t difflen)
{
    size_t base = path->len;
    for (const cJSON *x = a->child; x; x = x->next) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        if (!y)
            continue;
        ckpt_buf_setlen(path, base);
        ckpt_buf_addf(path, "%s%s", base ? "." : "", x->string);
        if (!equal(x, y, path, diff, difflen))
            return 0;
    }
    ckpt_buf_setlen(path, base);
    return 1;
}

static int equal(const cJSON *a, const cJSON *b, struct ckpt_buf *path,
                 char *diff, size_t difflen)
{
    if (cJSON_IsObject(a) || cJSON_IsObject(b)) {
        if (cJSON_IsObject(a) && cJSON_IsObject(b))
            return objects_equal(a, b, path, diff, difflen);
    } else if (cJSON_IsArray(a) || cJSON_IsArray(b)) {
        if (cJSON_IsArray(a) && cJSON_IsArray(b) &&
            cJSON_GetArraySize(a) == cJSON_GetArraySize(b)) {
            size_t base = path->len;
            int i = 0;
            const cJSON *y = b->child;
            for (const cJSON *x = a->child; x; x = x->next, y = y->next) {
                ckpt_buf_setlen(path, base);
                ckpt_buf_addf(path, "[%d]", i++);
                if (!equal(x, y, path, diff, difflen))
                    return 0;
            }
            ckpt_buf_setlen(path, base);
            return 1;
        }
    } else if (scalar_eq(a, b)) {
        return 1;
    }
    diff_at(diff, difflen, path->ptr);
    return 0;
}

int ckpt_wandb_config_match(const cJSON *local, const cJSON *remote,
                            const char *const *ignore, size_t nignore,
                            char *diff, size_t difflen)
{
    if (diff && difflen)
        diff[0] = '\0';
    if (!cJSON_IsObject(local) || !cJSON_IsObject(remote))
        return 0;
    struct ckpt_buf path = CKPT_BUF_INIT;
    size_t common = 0;
    int ok = 1;
    for (const cJSON *x = local->child; x && ok; x = x->next) {
        if (!x->string || skip_key(x->string, ignore, nignore))
            continue;
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(remote, x->string);
        if (!y)
            continue;
        common++;
        ckpt_buf_reset(&path);
        ckpt_buf_addstr(&path, x->string);
        ok = equal(x, y, &path, diff, difflen);
    }
    ckpt_buf_release(&path);
    if (ok && !common)
        diff_at(diff, difflen, "(no key in common)");
    return ok && common > 0;
}

char *ckpt_slurm_id_of(const char *save_folder)
{
    if (!save_folder)
        return NULL;
    size_t n = strlen(save_folder);
    while (n && save_folder[n - 1] == '/')
        n--;
    size_t start = n;
    while (start && save_folder[start - 1] != '/')
        start--;
    size_t len = n - start;
    if (len == 0 || len > 20)
        return NULL;
    for (size_t i = start; i < n; i++)
        if (!isdigit((unsigned char)save_folder[i]))
            return NULL;
    return ckpt_xstrndup(save_folder + start, len);
}
