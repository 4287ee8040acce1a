/*
 * s3xml.c - just enough XML for S3 replies: find an element by tag, decode
 * its text. S3, R2, GCS and s3rver answer with flat documents of known
 * shape; the namespace is ignored (s3rver's is wrong).
 */
#include "s3_int.h"

#include <stdlib.h>
#include <string.h>

/* Position of "<tag>" or "<tag " at or after pos, or -1. */
static long find_open(const char *xml, size_t len, size_t pos,
                      const char *tag, size_t *content)
{
    size_t tl = strlen(tag);
    while (pos + tl + 2 <= len) {
        const char *lt = memchr(xml + pos, '<', len - pos);
        if (!lt)
            return -1;
        size_t at = (size_t)(lt - xml);
        if (at + tl + 2 > len)
            return -1;
        char after = lt[tl + 1];
        if (!memcmp(lt + 1, tag, tl) &&
            (after == '>' || after == ' ' || after == '/')) {
            const char *gt = memchr(lt, '>', len - at);
            if (!gt)
                return -1;
            *content = (size_t)(gt - xml) + 1;
            /* <Tag/> is an empty element: content is empty. */
            return gt[-1] == '/' ? -2 - (long)at : (long)at;
        }
        pos = at + 1;
    }
    return -1;
}

int st_xml_next(const char *xml, size_t len, size_t *pos, const char *tag,
                const char **in, size_t *in_len)
{
    size_t c;
    long at = find_open(xml, len, *pos, tag, &c);
    if (at == -1)
        return -1;
    if (at < -1) {
        *in = xml + c;
        *in_len = 0;
        *pos = c;
        return 0;
    }
    /* Elements we read never nest in themselves (Contents, Key, Error...),
     * so the first closing tag ends this one. */
    size_t tl = strlen(tag);
    for (size_t p = c; p + tl + 3 <= len; p++) {
        if (xml[p] == '<' && xml[p + 1] == '/' &&
            !memcmp(xml + p + 2, tag, tl) && xml[p + 2 + tl] == '>') {
            *in = xml + c;
            *in_len = p - c;
            *pos = p + tl + 3;
            return 0;
        }
    }
    return -1;
}

static void put_utf8(struct ckpt_buf *out, unsigned long cp)
{
    if (cp < 0x80) {
        ckpt_buf_addch(out, (char)cp);
    } else if (cp < 0x800) {
        ckpt_buf_addch(out, (char)(0xC0 | (cp >> 6)));
        ckpt_buf_addch(out, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        ckpt_buf_addch(out, (char)(0xE0 | (cp >> 12)));
        ckpt_buf_addch(out, (char)(0x80 | ((cp >> 6) & 0x3F)));
        ckpt_buf_addch(out, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x110000) {
        ckpt_buf_addch(out, (char)(0xF0 | (cp >> 18)));
        ckpt_buf_addch(out, (char)(0x80 | ((cp >> 12) & 0x3F)));
        ckpt_buf_addch(out, (char)(0x80 | ((cp >> 6) & 0x3F)));
        ckpt_buf_addch(out, (char)(0x80 | (cp & 0x3F)));
    }
}

static const struct {
    const char *name;
    char c;
} entities[] = {
    { "amp;", '&' }, { "lt;", '<' }, { "gt;", '>' }, { "quot;", '"' },
    { "apos;", '\'' },
};

/* Decode one entity at s (after '&'); returns bytes consumed or 0. */
static size_t entity(struct ckpt_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof(entities) / sizeof(entities[0]); i++) {
        size_t l = strlen(entities[i].name);
        if (n >= l && !memcmp(s, entities[i].name, l)) {
            ckpt_buf_addch(out, entities[i].c);
            return l;
        }
    }
    if (n < 3 || s[0] != '#')
        return 0;
    const char *semi = memchr(s, ';', n < 12 ? n : 12);
    if (!semi)
        return 0;
    int hex = s[1] == 'x' || s[1] == 'X';
    char *end;
    unsigned long cp = strtoul(s + 1 + hex, &end, hex ? 16 : 10);
    if (end != semi)
        return 0;
    put_utf8(out, cp);
    return (size_t)(semi - s) + 1;
}

static void xml_decode(struct ckpt_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '&') {
            size_t used = entity(out, s + i + 1, n - i - 1);
            if (used) {
                i += used;
                continue;
            }
        }
        ckpt_buf_addch(out, s[i]);
    }
}

int st_xml_text(const char *xml, size_t len, const char *tag,
                struct ckpt_buf *out)
{
    size_t pos = 0, n;
    const char *in;
    if (st_xml_next(xml, len, &pos, tag, &in, &n) != 0)
        return -1;
    xml_decode(out, in, n);
    return 0;
}

void st_xml_escape(struct ckpt_buf *out, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': ckpt_buf_addstr(out, "&amp;"); break;
        case '<': ckpt_buf_addstr(out, "&lt;"); break;
        case '>': ckpt_buf_addstr(out, "&gt;"); break;
        case '"': ckpt_buf_addstr(out, "&quot;"); break;
        case '\'': ckpt_buf_addstr(out, "&apos;"); break;
        /* Control characters must be character references in XML 1.0
         * bodies (S3 documents this for keys). */
        case '\r': ckpt_buf_addstr(out, "&#13;"); break;
        case '\n': ckpt_buf_addstr(out, "&#10;"); break;
        case '\t': ckpt_buf_addstr(out, "&#9;"); break;
        default: ckpt_buf_addch(out, *s); break;
        }
    }
}
