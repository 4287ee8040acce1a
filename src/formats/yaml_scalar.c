/*
 * yaml_scalar.c - what a plain YAML scalar means, as PyYAML's YAML 1.1
 * resolver (and OmegaConf, which adds "1e-4" floats) reads it: null,
 * booleans, integers in base 2/8/10/16/60, floats, else a string.
 * libyaml (yaml.c) gives the text; the resolution is ours, as libyaml
 * leaves it to the application.
 */
#include "yaml_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"

/* ---- scalars ---- */

static int all_digits(const char *s, size_t n, const char *set)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr(set, s[i]) || !s[i])
            return 0;
    return 1;
}

/* Copy without '_' (YAML 1.1 digit separators) into buf. */
static const char *no_underscores(const char *s, size_t n, char *buf,
                                  size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++)
        if (s[i] != '_')
            buf[o++] = s[i];
    buf[o] = '\0';
    return buf;
}

static int match_word(const char *s, size_t n, const char *const *words)
{
    for (; *words; words++)
        if (strlen(*words) == n && !memcmp(*words, s, n))
            return 1;
    return 0;
}

/* Base-60 integers of YAML 1.1 ("12:30" is 750), as PyYAML reads them. */
static cJSON *resolve_sexagesimal(const char *s, size_t n)
{
    size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    if (i >= n || s[i] < '1' || s[i] > '9' || !memchr(s, ':', n))
        return NULL;
    double v = 0, part = 0;
    int digits = 0;
    for (; i <= n; i++) {
        if (i == n || s[i] == ':') {
            if (!digits || (v > 0 && part >= 60))
                return NULL;
            v = v * 60 + part;
            part = 0;
            digits = 0;
        } else if (s[i] >= '0' && s[i] <= '9') {
            part = part * 10 + (s[i] - '0');
            digits++;
        } else if (s[i] != '_') {
            return NULL;
        }
    }
    return ckpt_yaml_jcheck(cJSON_CreateNumber(s[0] == '-' ? -v : v));
}

/* Integer forms of YAML 1.1: decimal, 0x, leading-0 octal, 0b. */
static cJSON *resolve_int(const char *s, size_t n)
{
    char buf[96];
    size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    int base = 10;
    size_t d = i;
    if (n - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'b')) {
        base = s[i + 1] == 'x' ? 16 : 2;
        d = i + 2;
    } else if (n - i > 1 && s[i] == '0') {
        base = 8;
        d = i + 1;
    }
    const char *set = base == 16 ? "0123456789abcdefABCDEF_"
                    : base == 8 ? "01234567_" : base == 2 ? "01_"
                    : "0123456789_";
    if (n > 64 || !all_digits(s + d, n - d, set) || s[d] == '_')
        return resolve_sexagesimal(s, n);
    no_underscores(s + d, n - d, buf, sizeof(buf));
    double v = (double)strtoull(buf, NULL, base);
    return ckpt_yaml_jcheck(cJSON_CreateNumber(s[0] == '-' ? -v : v));
}

/* Floats: PyYAML's 1.1 forms plus OmegaConf's "1e-4" (no dot). */
static cJSON *resolve_float(const char *s, size_t n)
{
    static const char *const inf[] = { ".inf", ".Inf", ".INF", "+.inf",
                                       "+.Inf", "+.INF", NULL };
    static const char *const ninf[] = { "-.inf", "-.Inf", "-.INF", NULL };
    static const char *const nan_[] = { ".nan", ".NaN", ".NAN", NULL };
    if (match_word(s, n, inf))
        return ckpt_yaml_jcheck(cJSON_CreateNumber(INFINITY));
    if (match_word(s, n, ninf))
        return ckpt_yaml_jcheck(cJSON_CreateNumber(-INFINITY));
    if (match_word(s, n, nan_))
        return ckpt_yaml_jcheck(cJSON_CreateNumber(NAN));
    size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    int digits = 0, dot = 0, exp = 0;
    for (; i < n; i++) {
        char c = s[i];
        if ((c >= '0' && c <= '9') || (c == '_' && digits && !exp))
            digits += c != '_';
        else if (c == '.' && !dot && !exp)
            dot = 1;
        else if ((c == 'e' || c == 'E') && digits && !exp) {
            exp = 1;
            if (i + 1 < n && (s[i + 1] == '-' || s[i + 1] == '+'))
                i++;
            if (i + 1 >= n)
                return NULL;
        } else
            return NULL;
    }
    /* ".5" is a float but "-.5" is a string, as in PyYAML/OmegaConf. */
    int lead = n && (s[0] == '-' || s[0] == '+');
    if (!digits || (!dot && !exp) || n > 90 ||
        (lead && n > 1 && s[1] == '.'))
        return NULL;
    char buf[96];
    return ckpt_yaml_jcheck(cJSON_CreateNumber(
        strtod(no_underscores(s, n, buf, sizeof(buf)), NULL)));
}

/* A plain scalar's value as PyYAML's resolver sees it. */
cJSON *ckpt_yaml_resolve_plain(const char *s, size_t n)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL",
                                         NULL };
    static const char *const yes[] = { "true", "True", "TRUE", "yes", "Yes",
                                       "YES", "on", "On", "ON", NULL };
    static const char *const no[] = { "false", "False", "FALSE", "no", "No",
                                      "NO", "off", "Off", "OFF", NULL };
    if (match_word(s, n, nulls))
        return ckpt_yaml_jcheck(cJSON_CreateNull());
    if (match_word(s, n, yes))
        return ckpt_yaml_jcheck(cJSON_CreateTrue());
    if (match_word(s, n, no))
        return ckpt_yaml_jcheck(cJSON_CreateFalse());
    cJSON *num = resolve_int(s, n);
    if (!num)
        num = resolve_float(s, n);
    if (num)
        return num;
    char *t = ckpt_xstrndup(s, n);
    cJSON *j = ckpt_yaml_jcheck(cJSON_CreateString(t));
    free(t);
    return j;
}
