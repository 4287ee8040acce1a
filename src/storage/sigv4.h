/*
 * sigv4.h - AWS Signature Version 4 and the hashes it needs. Private to
 * src/storage: do not expose.
 *
 * S3 flavour only: the path is percent-encoded once and never normalised
 * ("a//b/./c" stays as is), unlike other AWS services which encode twice.
 * Strings are raw (decoded) bytes; this module does all the encoding, so a
 * caller never pre-encodes a key.
 */
#ifndef CKPT_SIGV4_H
#define CKPT_SIGV4_H

#include <stddef.h>
#include <time.h>

#include "ckpt/buf.h"

#define CKPT_SHA256_EMPTY \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define CKPT_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

struct ckpt_sigv4_param {
    const char *name;   /* borrowed, raw */
    const char *value;  /* borrowed, raw; NULL or "" both sign as "name=" */
};

struct ckpt_sigv4_hdr {
    const char *name;   /* borrowed; any case */
    const char *value;  /* borrowed; trimmed and space-collapsed on signing */
};

struct ckpt_sigv4_req {
    const char *method;
    const char *path;                     /* raw, starts with '/' */
    const struct ckpt_sigv4_param *query; /* any order */
    size_t nquery;
    const struct ckpt_sigv4_hdr *headers; /* every header to sign */
    size_t nheaders;
    const char *payload_hash;             /* hex SHA-256 or UNSIGNED-PAYLOAD */
};

struct ckpt_sigv4_key {
    const char *access_key;
    const char *secret_key;
    const char *region;
    const char *service;                  /* "s3" */
};

/* Append the UriEncode() of s[0..n) to out: every byte but A-Za-z0-9-._~ as
 * %XX (uppercase); '/' kept when keep_slash (paths), encoded otherwise. */
void ckpt_sigv4_encode(struct ckpt_buf *out, const char *s, size_t n,
                       int keep_slash);
/* Append the canonical query string (sorted, encoded) to out. */
void ckpt_sigv4_query(struct ckpt_buf *out,
                      const struct ckpt_sigv4_param *q, size_t n);
/* Append the canonical request to out; *signed_headers (optional) gets the
 * "a;b;c" list appended. */
void ckpt_sigv4_canonical(struct ckpt_buf *out, struct ckpt_buf *signed_hdrs,
                          const struct ckpt_sigv4_req *req);
/* Compute the Authorization header value for req signed at amz_date
 * ("YYYYMMDDTHHMMSSZ", which must also be in req's x-amz-date header).
 * Appends to out. sts (optional) gets the string to sign. */
void ckpt_sigv4_authorization(struct ckpt_buf *out, struct ckpt_buf *sts,
                              const struct ckpt_sigv4_req *req,
                              const struct ckpt_sigv4_key *key,
                              const char *amz_date);
/* "YYYYMMDDTHHMMSSZ" for t (UTC) into out[17]. */
void ckpt_sigv4_date(time_t t, char out[17]);

/* Hashes (OpenSSL). hex outputs are lowercase and NUL-terminated. */
void ckpt_sha256_hex(const void *data, size_t len, char out[65]);
void ckpt_hmac_sha256(const void *key, size_t klen, const void *msg,
                      size_t mlen, unsigned char out[32]);
/* base64 of MD5 (Content-MD5) into out[25]; hex MD5 into hex[33] if given. */
void ckpt_md5_b64(const void *data, size_t len, char out[25], char *hex);
/* Append base64 (url: base64url without padding) of data to out. */
void ckpt_base64(struct ckpt_buf *out, const void *data, size_t len, int url);

#endif
