/*
 * yaml_fuzz - the YAML reader (libyaml's parser and src/formats/yaml.c's
 * tree building) on arbitrary bytes: config.yaml files come from run
 * directories nobody vetted.
 * Properties: never crashes, never leaks, bounded work (alias expansion
 * and nesting are capped); and parse, print, parse reaches a fixed point:
 * a tree it accepts, printed in YAML's flow style (JSON-like, every string
 * double-quoted with the characters YAML may not hold raw escaped,
 * numbers as %.17g or .inf/.nan), parses back to the same tree: the same
 * types, numbers, strings, keys and order. So the scalar resolution reads
 * every number it produces as that number and every quoted string as a
 * string, and quoting and escapes decode as libyaml encodes them.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/buf.h"
#include "wandb/wandb_int.h"

#define MAX_PRINT (1u << 20)  /* alias-expanded trees: checked up to this */

/* YAML 1.1 printable: #x9 #xA #xD [#x20-#x7E] #x85 [#xA0-#xD7FF]
 * [#xE000-#xFFFD] [#x10000-#x10FFFF]; the BOM escaped as well. */
static int printable(uint32_t c)
{
    return c == 0x9 || c == 0xA || c == 0xD || (c >= 0x20 && c <= 0x7E) ||
           c == 0x85 || (c >= 0xA0 && c <= 0xD7FF) ||
           (c >= 0xE000 && c <= 0xFFFD && c != 0xFEFF) ||
           (c >= 0x10000 && c <= 0x10FFFF);
}

/* One UTF-8 sequence at s (valid: libyaml checked it); its length. */
static size_t utf8(const unsigned char *s, uint32_t *c)
{
    if (s[0] < 0x80) {
        *c = s[0];
        return 1;
    }
    size_t n = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
    *c = s[0] & (0x3F >> (n - 1));
    for (size_t i = 1; i < n && s[i]; i++)
        *c = *c << 6 | (s[i] & 0x3F);
    return n;
}

static void print_str(struct ckpt_buf *b, const char *s)
{
    ckpt_buf_addch(b, '"');
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t c;
        size_t n = utf8(p, &c);
        if (c == '"' || c == '\\')
            ckpt_buf_addf(b, "\\%c", (char)c);
        else if (c == 0x9 || c == 0xA || c == 0xD || !printable(c))
            ckpt_buf_addf(b, c > 0xFFFF ? "\\U%08X" : "\\u%04X",
                          (unsigned)c);
        else
            ckpt_buf_add(b, p, n);
        p += n;
    }
    ckpt_buf_addch(b, '"');
}

static void print_node(struct ckpt_buf *b, const cJSON *j)
{
    if (cJSON_IsNull(j))
        ckpt_buf_addstr(b, "null");
    else if (cJSON_IsTrue(j))
        ckpt_buf_addstr(b, "true");
    else if (cJSON_IsFalse(j))
        ckpt_buf_addstr(b, "false");
    else if (cJSON_IsNumber(j)) {
        double v = j->valuedouble;
        if (isnan(v))
            ckpt_buf_addstr(b, ".nan");
        else if (isinf(v))
            ckpt_buf_addstr(b, v < 0 ? "-.inf" : ".inf");
        else
            ckpt_buf_addf(b, "%.17g", v);
    } else if (cJSON_IsString(j))
        print_str(b, j->valuestring);
    else {
        int obj = cJSON_IsObject(j);
        ckpt_buf_addch(b, obj ? '{' : '[');
        for (const cJSON *c = j->child; c; c = c->next) {
            if (c != j->child)
                ckpt_buf_addstr(b, ", ");
            if (obj) {
                print_str(b, c->string ? c->string : "");
                ckpt_buf_addstr(b, ": ");
            }
            print_node(b, c);
        }
        ckpt_buf_addch(b, obj ? '}' : ']');
    }
}

static int same(const cJSON *a, const cJSON *b)
{
    if ((a->type & 0xFF) != (b->type & 0xFF))
        return 0;
    if (cJSON_IsNumber(a))
        return a->valuedouble == b->valuedouble ||
               (isnan(a->valuedouble) && isnan(b->valuedouble));
    if (cJSON_IsString(a))
        return !strcmp(a->valuestring, b->valuestring);
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
        if ((cJSON_IsObject(a) &&
             strcmp(x->string ? x->string : "", y->string ? y->string : ""))
            || !same(x, y))
            return 0;
    return !x && !y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = NULL, *k = NULL;
    struct ckpt_err err;
    if (ckpt_yaml_parse((const char *)data, size, "fuzz.yaml", &j, &err))
        return 0;
    if (j) {
        struct ckpt_buf b = CKPT_BUF_INIT;
        print_node(&b, j);
        if (b.len <= MAX_PRINT) {
            if (ckpt_yaml_parse(b.ptr, b.len, "printed.yaml", &k, &err) ||
                !k || !same(j, k)) {
                fprintf(stderr, "not a fixed point: %s\n%.*s\n",
                        k ? "another tree" : err.msg,
                        (int)(b.len < 4096 ? b.len : 4096), b.ptr);
                __builtin_trap();
            }
            cJSON_Delete(k);
        }
        ckpt_buf_release(&b);
    }
    cJSON_Delete(j);
    return 0;
}
