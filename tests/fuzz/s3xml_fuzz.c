/*
 * s3xml_fuzz.c - the object-storage client's readers of untrusted bytes:
 * S3 reply XML (element search, entity decoding, error fields) for every
 * reply ckpt reads: ListObjectsV2 pages (Contents, CommonPrefixes,
 * IsTruncated, NextContinuationToken), ListMultipartUploads (Upload,
 * Initiated, NextKeyMarker, NextUploadIdMarker), CreateMultipartUpload
 * (UploadId), CompleteMultipartUpload (ETag, or a 200 <Error>),
 * DeleteObjects results (Deleted, Error/Key) and <Error> documents; the
 * timestamps of LastModified / Initiated; the AWS INI files; a listing
 * page's checks (s3_list_check) and GCS's x-goog-hash header.
 * Properties: never crashes, never leaks, never reads out of bounds,
 * whatever the server or the file says; an element found lies inside the
 * document; decoded text is never longer than its source (entities only
 * shrink); a listing page accepted has every key below the prefix with
 * no empty, "." or ".." component after it, and says "more" only with a
 * continuation token it was not given before.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/buf.h"
#include "storage/s3_int.h"

static void walk(const char *x, size_t n)
{
    static const char *const tags[] = {
        "Contents", "Key", "Size", "ETag", "CommonPrefixes", "Prefix",
        "Error", "Code", "Message", "IsTruncated", "NextContinuationToken",
        "UploadId", "Upload", "Initiated", "NextKeyMarker",
        "NextUploadIdMarker", "LastModified", "Deleted",
    };
    static const char *const fields[] = { "Key", "Size", "ETag", "Prefix",
                                          "LastModified", "Initiated",
                                          "Code", "UploadId" };
    for (size_t t = 0; t < sizeof(tags) / sizeof(tags[0]); t++) {
        size_t pos = 0, len;
        const char *in;
        int guard = 0;
        while (guard++ < 10000 &&
               st_xml_next(x, n, &pos, tags[t], &in, &len) == 0) {
            if (in < x || in + len > x + n)
                __builtin_trap();
            for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
                struct ckpt_buf b = CKPT_BUF_INIT;
                if (st_xml_text(in, len, fields[f], &b) == 0) {
                    if (b.len > len)
                        __builtin_trap();
                    if (b.ptr && (!strcmp(fields[f], "LastModified") ||
                                  !strcmp(fields[f], "Initiated")))
                        s3_parse_iso8601(b.ptr);
                }
                ckpt_buf_release(&b);
            }
        }
    }
}

/* Every <Contents> key of an accepted page is below prefix and a plain
 * relative path after it. */
static void keys_ok(const struct ckpt_buf *xml, const char *prefix)
{
    size_t pos = 0, len, n = strlen(prefix);
    const char *in;
    while (st_xml_next(xml->ptr, xml->len, &pos, "Contents", &in, &len)
           == 0) {
        struct ckpt_buf k = CKPT_BUF_INIT;
        st_xml_text(in, len, "Key", &k);
        const char *c = k.ptr + n;
        if (strncmp(k.ptr, prefix, n) != 0 || *c == '/' ||
            strstr(c, "//") || !strcmp(c, ".") || !strcmp(c, "..") ||
            !strncmp(c, "./", 2) || !strncmp(c, "../", 3) ||
            strstr(c, "/./") || strstr(c, "/../"))
            __builtin_trap();
        size_t cl = strlen(c);
        if ((cl >= 2 && !strcmp(c + cl - 2, "/.")) ||
            (cl >= 3 && !strcmp(c + cl - 3, "/..")))
            __builtin_trap();
        ckpt_buf_release(&k);
    }
}

static void listing(const struct ckpt_buf *xml)
{
    static const char *const prefixes[] = { "", "run/", "a" };
    char *used[] = { "tok" };
    for (size_t i = 0; i < 3; i++) {
        struct ckpt_buf next = CKPT_BUF_INIT;
        struct ckpt_err err = CKPT_ERR_INIT;
        int rc = s3_list_check(xml, prefixes[i], used, 1, &next, "x", &err);
        if (rc >= 0)
            keys_ok(xml, prefixes[i]);
        if (rc == 1 && (!next.len || !strcmp(next.ptr, "tok")))
            __builtin_trap();
        ckpt_buf_release(&next);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exactly size bytes, not NUL-terminated: the XML reader takes a
     * length and must respect it. */
    char *x = malloc(size ? size : 1);
    if (!x)
        return 0;
    memcpy(x, data, size);
    walk(x, size);
    struct ckpt_buf body = CKPT_BUF_INIT, code = CKPT_BUF_INIT;
    struct ckpt_buf msg = CKPT_BUF_INIT;
    ckpt_buf_add(&body, x, size);
    s3_error_fields(&body, &code, &msg);
    listing(&body);
    struct ckpt_obj_meta meta;
    memset(&meta, 0, sizeof(meta));
    s3_goog_hash(body.ptr, &meta);
    if (meta.dest_md5[0] && strlen(meta.dest_md5) != 32)
        __builtin_trap();
    struct ini *ini = st_ini_parse(body.ptr);
    st_ini_get(ini, "default", NULL, "region");
    st_ini_get(ini, "services s", "s3", "endpoint_url");
    st_ini_free(ini);
    ckpt_buf_release(&body);
    ckpt_buf_release(&code);
    ckpt_buf_release(&msg);
    free(x);
    return 0;
}
