/*
 * ckpt/text.h - text that reaches a terminal or a log: escaping names that
 * may hold any bytes, and redacting credentials from text a server sent.
 *
 * The escaping scheme (docs/output.md), as `ls -b` and git's core.quotePath
 * use it: backslash becomes \\, TAB \t, LF \n, CR \r, every other control
 * byte (0x01-0x1f, 0x7f), every byte of a C1 control (U+0080-U+009F,
 * which some terminals obey like ESC) and every byte that is not part of
 * valid UTF-8 becomes \xNN (lowercase hex). Valid UTF-8 is kept as it is.
 * The result is valid UTF-8 without control characters, and the original
 * bytes can be recovered from it.
 */
#ifndef CKPT_TEXT_H
#define CKPT_TEXT_H

#include <stddef.h>

#include "ckpt/buf.h"

/* 1 if s[0..n) is valid UTF-8 (no overlongs, surrogates or code points
 * above U+10FFFF: what Python's strict decoder accepts). */
int ckpt_utf8_valid(const char *s, size_t n);
/* 1 if escaping s[0..n) would change it. */
int ckpt_escape_needed(const char *s, size_t n);
/* Append s[0..n), escaped, to b. */
void ckpt_escape_add(struct ckpt_buf *b, const char *s, size_t n);
/* s escaped, malloced. */
char *ckpt_escape(const char *s);
/* The bytes behind escaped text, malloced: undoes \\ \t \n \r and \xNN;
 * any other backslash is kept as it is. \x00 is kept escaped (the result
 * is a C string). */
char *ckpt_unescape(const char *s);

/* The marker that replaces a credential. */
#define CKPT_REDACTED "[redacted]"

/*
 * Append s[0..n) to b with anything that looks like a credential replaced
 * by CKPT_REDACTED, name and value: an Authorization, Cookie or
 * X-Amz-Security-Token header with its value; "Basic X", "Bearer X"; a
 * key-like name (signature, credential, token, password, secret, key,
 * api_key, ...) followed by ':', '=' or '>' and its value; AWS access key
 * ids (AKIA/ASIA...); and any run of 32 or more base64/hex-like characters
 * with both letters and digits (secret keys, API keys, signatures). Meant
 * for text a server sent back, which may echo the request; it errs on the
 * side of hiding.
 */
void ckpt_redact_add(struct ckpt_buf *b, const char *s, size_t n);
/* Replace every occurrence of secret (when non-empty) in the
 * NUL-terminated s with CKPT_REDACTED, in place, truncating to cap bytes
 * (including the NUL). */
void ckpt_redact_secret(char *s, size_t cap, const char *secret);

/* The value of one hexadecimal digit (either case), or -1. */
int ckpt_hexval(int c);
/* d[0..n) as 2n lowercase hex digits and a NUL into out (2n+1 bytes). */
void ckpt_hex_encode(const unsigned char *d, size_t n, char *out);

#endif
