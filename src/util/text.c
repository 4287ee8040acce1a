/*
 * text.c - escaping names for output and redacting credentials from
 * server text (see ckpt/text.h for the scheme).
 */
#include "ckpt/text.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "ckpt/util.h"

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0;      /* overlong */
    else if (c == 0xed)
        hi = 0x9f;      /* UTF-16 surrogates */
    else if (c == 0xf0)
        lo = 0x90;      /* overlong */
    else if (c == 0xf4)
        hi = 0x8f;      /* above U+10FFFF */
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

int ckpt_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(p + i, n - i);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

/* Bytes at p that are printed as they are: 0 when p[0] must be escaped;
 * a C1 control (C2 80..C2 9F) is escaped byte by byte. */
static size_t plain_len(const unsigned char *p, size_t n)
{
    if (p[0] == '\\' || p[0] < 0x20 || p[0] == 0x7f)
        return 0;
    size_t l = utf8_seq(p, n);
    if (l == 2 && p[0] == 0xc2 && p[1] < 0xa0)
        return 0;
    return l;
}

int ckpt_escape_needed(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = plain_len(p + i, n - i);
        if (!l)
            return 1;
        i += l;
    }
    return 0;
}

void ckpt_escape_add(struct ckpt_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = plain_len(p + i, n - i);
        if (l) {
            ckpt_buf_add(b, p + i, l);
            i += l;
            continue;
        }
        /* A C1 control's two bytes both come out as \xNN. */
        size_t k = p[i] == 0xc2 && i + 1 < n ? 2 : 1;
        for (size_t j = i; j < i + k; j++) {
            switch (p[j]) {
            case '\\': ckpt_buf_addstr(b, "\\\\"); break;
            case '\t': ckpt_buf_addstr(b, "\\t"); break;
            case '\n': ckpt_buf_addstr(b, "\\n"); break;
            case '\r': ckpt_buf_addstr(b, "\\r"); break;
            default: {
                char e[4] = { '\\', 'x', hex[p[j] >> 4], hex[p[j] & 15] };
                ckpt_buf_add(b, e, 4);
            }
            }
        }
        i += k;
    }
}

char *ckpt_escape(const char *s)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_escape_add(&b, s, strlen(s));
    return ckpt_buf_detach(&b, NULL);
}

void ckpt_hex_encode(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

int ckpt_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The byte an escape at s (a backslash) stands for and its length in
 * *n, or -1 when s starts no escape of the scheme. */
static int unescape_one(const char *s, size_t *n)
{
    *n = 2;
    switch (s[1]) {
    case '\\': return '\\';
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'x': break;
    default: return -1;
    }
    int hi = ckpt_hexval(s[2]);
    int lo = hi >= 0 ? ckpt_hexval(s[3]) : -1;
    *n = 4;
    return lo >= 0 && (hi || lo) ? hi << 4 | lo : -1;
}

char *ckpt_unescape(const char *s)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    while (*s) {
        size_t n;
        int c = *s == '\\' ? unescape_one(s, &n) : -1;
        if (c < 0) {
            ckpt_buf_addch(&b, *s++);
            continue;
        }
        ckpt_buf_addch(&b, (char)c);
        s += n;
    }
    return ckpt_buf_detach(&b, NULL);
}

/* ---- redaction ---- */

/* Names whose whole value (to the end of the header line or the quoted
 * string) is a credential. */
static const char *const HEADER_NAMES[] = {
    "proxy-authorization", "authorization", "set-cookie", "cookie",
    "x-amz-security-token", "x-goog-security-token", NULL
};

/* Names followed by ':', '=' or '>' whose next token is a credential. */
static const char *const KEY_NAMES[] = {
    "x-amz-signature", "x-amz-credential", "x-goog-signature",
    "x-goog-credential", "signature", "credential", "access_token",
    "refresh_token", "id_token", "session_token", "token", "password",
    "passwd", "client_secret", "secret_access_key", "secret", "private_key",
    "api_key", "apikey", "api-key", "access_key_id", "key", "sig", NULL
};

/* Authorization schemes: the token after them is a credential. */
static const char *const SCHEMES[] = {
    "aws4-hmac-sha256", "basic", "bearer", "digest", "negotiate", NULL
};

#define LONG_TOKEN 32   /* a run this long with letters and digits */
#define MIN_SCHEME_TOKEN 8

static int alnum(unsigned char c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* Characters of a credential value (base64, hex, URL-encoded, ids). */
static int token_char(unsigned char c)
{
    return alnum(c) || c == '+' || c == '/' || c == '=' || c == '_' ||
           c == '-' || c == '.' || c == '~' || c == '%';
}

/* Characters of a long secret-like run: no '=' or '.', so "NAME=value"
 * and dotted names stay separate runs. */
static int run_char(unsigned char c)
{
    return alnum(c) || c == '+' || c == '/' || c == '_' || c == '-';
}

static size_t match_word(const char *s, size_t n, size_t i,
                         const char *const *words)
{
    for (const char *const *w = words; *w; w++) {
        size_t l = strlen(*w);
        if (i + l <= n && !strncasecmp(s + i, *w, l) &&
            (i + l == n || !alnum((unsigned char)s[i + l])))
            return l;
    }
    return 0;
}

static size_t skip_quotes(const char *s, size_t n, size_t j)
{
    while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '"' ||
                     s[j] == '\''))
        j++;
    return j;
}

/* After a name at s[i..j): the start of its value when a separator
 * follows ("name: v", "name=v", "'name': 'v'", "<name>v"), else 0. */
static size_t value_start(const char *s, size_t n, size_t j, char *sep)
{
    j = skip_quotes(s, n, j);
    if (j >= n || (s[j] != ':' && s[j] != '=' && s[j] != '>'))
        return 0;
    *sep = s[j];
    return skip_quotes(s, n, j + 1);
}

static size_t field_end(const char *s, size_t n, size_t j)
{
    while (j < n && !strchr("\r\n\"'<>", s[j]))
        j++;
    return j;
}

static size_t token_end(const char *s, size_t n, size_t j)
{
    while (j < n && token_char((unsigned char)s[j]))
        j++;
    return j;
}

/* A credential starting at s[i] (a word boundary): sets [*vs, *ve) to the
 * part to hide and returns 1. */
static int credential_at(const char *s, size_t n, size_t i, size_t *vs,
                         size_t *ve)
{
    size_t l, v;
    char sep;
    /* A header's value runs to the end of the line; as a query
     * parameter (name=value) it is one token. */
    if ((l = match_word(s, n, i, HEADER_NAMES)) &&
        (v = value_start(s, n, i + l, &sep)) && v < n) {
        *vs = v;
        *ve = sep == '=' ? token_end(s, n, v) : field_end(s, n, v);
        return *ve > v;
    }
    if ((l = match_word(s, n, i, KEY_NAMES)) &&
        (v = value_start(s, n, i + l, &sep)) && v < n) {
        *vs = v;
        *ve = token_end(s, n, v);
        return *ve > v;
    }
    if ((l = match_word(s, n, i, SCHEMES)) && i + l < n && s[i + l] == ' ') {
        v = i + l;
        while (v < n && s[v] == ' ')
            v++;
        *vs = v;
        /* SigV4's value runs on: Credential=..., Signature=... */
        *ve = !strncasecmp(s + i, "aws4", 4) ? field_end(s, n, v)
                                              : token_end(s, n, v);
        return *ve - v >= MIN_SCHEME_TOKEN;
    }
    /* AWS access key ids: AKIA/ASIA and 16 more upper-case letters or
     * digits. */
    if (i + 20 <= n && (!strncmp(s + i, "AKIA", 4) ||
                        !strncmp(s + i, "ASIA", 4))) {
        size_t j = i + 4;
        while (j < i + 20 && (isupper((unsigned char)s[j]) ||
                              isdigit((unsigned char)s[j])))
            j++;
        if (j == i + 20 && (j == n || !alnum((unsigned char)s[j]))) {
            *vs = i;
            *ve = j;
            return 1;
        }
    }
    return 0;
}

/* A long run of secret-like characters at s[i] (a run start): its end
 * (with any '=' padding), or 0. */
static size_t long_run_at(const char *s, size_t n, size_t i)
{
    size_t j = i;
    int letters = 0, digits = 0;
    while (j < n && run_char((unsigned char)s[j])) {
        letters |= isalpha((unsigned char)s[j]) != 0;
        digits |= isdigit((unsigned char)s[j]) != 0;
        j++;
    }
    if (j - i < LONG_TOKEN || !letters || !digits)
        return 0;
    while (j < n && s[j] == '=')
        j++;
    return j;
}

void ckpt_redact_add(struct ckpt_buf *b, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char prev = i ? (unsigned char)s[i - 1] : ' ';
        size_t vs, ve;
        /* The name goes too: "Authorization: [redacted]" would still
         * say a credential was echoed, and where to look. */
        if (!alnum(prev) && credential_at(s, n, i, &vs, &ve)) {
            ckpt_buf_addstr(b, CKPT_REDACTED);
            i = ve;
            continue;
        }
        if (!run_char(prev) && (ve = long_run_at(s, n, i))) {
            ckpt_buf_addstr(b, CKPT_REDACTED);
            i = ve;
            continue;
        }
        ckpt_buf_addch(b, s[i++]);
    }
}

void ckpt_redact_secret(char *s, size_t cap, const char *secret)
{
    size_t sl = secret ? strlen(secret) : 0;
    if (!sl || !cap)
        return;
    struct ckpt_buf b = CKPT_BUF_INIT;
    const char *p = s, *hit;
    while ((hit = strstr(p, secret))) {
        ckpt_buf_add(&b, p, (size_t)(hit - p));
        ckpt_buf_addstr(&b, CKPT_REDACTED);
        p = hit + sl;
    }
    if (p == s)
        return;
    ckpt_buf_addstr(&b, p);
    size_t len = b.len < cap - 1 ? b.len : cap - 1;
    memcpy(s, b.ptr, len);
    s[len] = '\0';
    ckpt_buf_release(&b);
}
