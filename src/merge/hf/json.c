/*
 * hf/json.c - JSON text as transformers writes its config files:
 * json.dumps(obj, indent=2, sort_keys=True) + "\n" (PretrainedConfig.
 * to_json_string, GenerationConfig.to_json_string). Python's json writes
 * keys sorted by code point, two-space indents, ", " never at a line end,
 * every non-ASCII character as \uXXXX (ensure_ascii), and floats as
 * repr() does: the shortest digits that read back, "10000.0", "1e-05".
 * cJSON keeps no int/float distinction, so a float is given as a raw
 * node made by uns_hf_json_float; other numbers are written as ints.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/buf.h"
#include "ckpt/util.h"
#include "merge/hf/hf.h"
#include "merge/job.h"

void uns_hf_py_float(double v, char *buf, size_t n)
{
    char e[40];
    int p;
    if (v == 0) {
        snprintf(buf, n, "%s", signbit(v) ? "-0.0" : "0.0");
        return;
    }
    for (p = 1; p <= 17; p++) {     /* the shortest digits that read back */
        snprintf(e, sizeof(e), "%.*e", p - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e is "-d.ddde+XX": its digits and decimal exponent. */
    char digits[24];
    size_t nd = 0;
    const char *s = e;
    int neg = *s == '-';
    s += neg;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9')
            digits[nd++] = *s;
    digits[nd] = '\0';
    int x = atoi(s + 1);
    struct ckpt_buf b = CKPT_BUF_INIT;
    if (neg)
        ckpt_buf_addch(&b, '-');
    if (x >= -4 && x < 16) {        /* fixed, at least one decimal */
        if (x < 0) {
            ckpt_buf_addstr(&b, "0.");
            for (int i = -1; i > x; i--)
                ckpt_buf_addch(&b, '0');
            ckpt_buf_addstr(&b, digits);
        } else {
            for (int i = 0; i <= x; i++)
                ckpt_buf_addch(&b, (size_t)i < nd ? digits[i] : '0');
            ckpt_buf_addch(&b, '.');
            if ((size_t)x + 1 < nd)
                ckpt_buf_addstr(&b, digits + x + 1);
            else
                ckpt_buf_addch(&b, '0');
        }
    } else {                        /* d.ddde+XX */
        ckpt_buf_addch(&b, digits[0]);
        if (nd > 1) {
            ckpt_buf_addch(&b, '.');
            ckpt_buf_addstr(&b, digits + 1);
        }
        ckpt_buf_addf(&b, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    }
    snprintf(buf, n, "%s", b.ptr);
    ckpt_buf_release(&b);
}

struct cJSON *uns_hf_json_float(double v)
{
    char t[40];
    uns_hf_py_float(v, t, sizeof(t));
    return cJSON_CreateRaw(t);
}

/* One code point at *p (UTF-8; a bad byte stands for itself). */
static unsigned long next_cp(const unsigned char **p)
{
    const unsigned char *s = *p;
    unsigned long c = *s;
    int n = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    for (int i = 1; i <= n; i++)
        if ((s[i] & 0xc0) != 0x80)
            n = 0;
    if (n)
        c &= 0x3fu >> n;
    for (int i = 1; i <= n; i++)
        c = (c << 6) | (s[i] & 0x3f);
    *p = s + 1 + n;
    return c;
}

static void add_string(struct ckpt_buf *b, const char *str)
{
    const unsigned char *p = (const unsigned char *)str;
    ckpt_buf_addch(b, '"');
    while (*p) {
        unsigned long c = next_cp(&p);
        switch (c) {
        case '"': ckpt_buf_addstr(b, "\\\""); break;
        case '\\': ckpt_buf_addstr(b, "\\\\"); break;
        case '\n': ckpt_buf_addstr(b, "\\n"); break;
        case '\r': ckpt_buf_addstr(b, "\\r"); break;
        case '\t': ckpt_buf_addstr(b, "\\t"); break;
        case '\b': ckpt_buf_addstr(b, "\\b"); break;
        case '\f': ckpt_buf_addstr(b, "\\f"); break;
        default:
            if (c >= 0x20 && c < 0x7f) {
                ckpt_buf_addch(b, (char)c);
            } else if (c >= 0x10000) {  /* a surrogate pair */
                c -= 0x10000;
                ckpt_buf_addf(b, "\\u%04lx\\u%04lx", 0xd800 + (c >> 10),
                              0xdc00 + (c & 0x3ff));
            } else {
                ckpt_buf_addf(b, "\\u%04lx", c);
            }
        }
    }
    ckpt_buf_addch(b, '"');
}

static int by_key(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string, y->string);
}

static void indent(struct ckpt_buf *b, int depth)
{
    ckpt_buf_addch(b, '\n');
    for (int i = 0; i < depth; i++)
        ckpt_buf_addstr(b, "  ");
}

static void add_value(struct ckpt_buf *b, const cJSON *v, int depth)
{
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        int obj = cJSON_IsObject(v);
        size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
        if (!n) {
            ckpt_buf_addstr(b, obj ? "{}" : "[]");
            return;
        }
        const cJSON **items = ckpt_xcalloc(n, sizeof(*items));
        for (const cJSON *c = v->child; c; c = c->next)
            items[i++] = c;
        if (obj)
            qsort(items, n, sizeof(*items), by_key);
        ckpt_buf_addch(b, obj ? '{' : '[');
        for (i = 0; i < n; i++) {
            if (i)
                ckpt_buf_addch(b, ',');
            indent(b, depth + 1);
            if (obj) {
                add_string(b, items[i]->string);
                ckpt_buf_addstr(b, ": ");
            }
            add_value(b, items[i], depth + 1);
        }
        indent(b, depth);
        ckpt_buf_addch(b, obj ? '}' : ']');
        free(items);
    } else if (cJSON_IsString(v)) {
        add_string(b, v->valuestring);
    } else if (cJSON_IsRaw(v)) {
        ckpt_buf_addstr(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) < 9.2e18) {
            ckpt_buf_addf(b, "%lld", (long long)d);
        } else {
            char t[40];
            uns_hf_py_float(d, t, sizeof(t));
            ckpt_buf_addstr(b, t);
        }
    } else if (cJSON_IsBool(v)) {
        ckpt_buf_addstr(b, cJSON_IsTrue(v) ? "true" : "false");
    } else {
        ckpt_buf_addstr(b, "null");
    }
}

char *uns_hf_json(const struct cJSON *o)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    add_value(&b, o, 0);
    ckpt_buf_addch(&b, '\n');
    return ckpt_buf_detach(&b, NULL);
}
