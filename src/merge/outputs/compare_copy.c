/*
 * outputs/compare_copy.c - is an unsharded copy that already exists this step's? Each
 * file the step unshards to (made again in scratch) must be in the copy
 * with the same size and bytes, DEST's bytes read back: what licenses
 * `unshard --delete-sharded` to delete a step whose copy it did not make
 * in this run (docs/reliability.md, "Bytes, not records").
 */
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckpt/text.h"
#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"

/* MD5 (hex) of size bytes of key in st, read back. */
static int md5_of(struct ckpt_storage *st, const char *key, uint64_t size,
                  char hex[33], struct ckpt_err *err)
{
    size_t cap = 4u << 20;
    char *buf = ckpt_xmalloc(cap);
    unsigned char d[16];
    unsigned dl = 0;
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    int rc = m && EVP_DigestInit_ex(m, EVP_md5(), NULL) == 1 ? 0
           : ckpt_err_set(err, CKPT_ENOMEM, "MD5");
    for (uint64_t off = 0; rc == 0 && off < size;) {
        size_t n = size - off < cap ? (size_t)(size - off) : cap, got = 0;
        rc = ckpt_storage_read(st, key, off, buf, n, &got, err);
        if (rc == 0 && got != n)
            rc = ckpt_err_set(err, CKPT_EIO, "'%s': shorter than %llu "
                              "bytes", key, (unsigned long long)size);
        if (rc == 0)
            EVP_DigestUpdate(m, buf, n);
        off += n;
    }
    if (rc == 0) {
        EVP_DigestFinal_ex(m, d, &dl);
        ckpt_hex_encode(d, 16, hex);
    }
    EVP_MD_CTX_free(m);
    free(buf);
    return rc;
}

/* Each file res made is in the copy (dir in st) with its size and
 * bytes: NULL, or why not (malloced). */
char *uns_copy_differs(struct ckpt_storage *st, const char *dir,
                          const struct ckpt_unshard_result *res)
{
    char *why = NULL;
    for (size_t i = 0; i < res->nfiles && !why; i++) {
        const struct ckpt_unshard_file *f = &res->files[i];
        char *key = ckpt_path_join(dir, f->name);
        struct ckpt_stat sb;
        struct ckpt_err err = CKPT_ERR_INIT;
        char hex[33];
        if (ckpt_storage_stat(st, key, &sb, &err) != 0)
            why = ckpt_xasprintf("%s: %s", f->name, err.msg);
        else if (sb.type != CKPT_ENTRY_FILE || sb.size != f->size)
            why = ckpt_xasprintf("%s: %llu bytes there, %llu unsharded "
                                 "again", f->name,
                                 (unsigned long long)sb.size,
                                 (unsigned long long)f->size);
        else if (md5_of(st, key, sb.size, hex, &err) != 0)
            why = ckpt_xasprintf("%s: %s", f->name, err.msg);
        else if (strcasecmp(hex, f->checksum) != 0)
            why = ckpt_xasprintf("%s: MD5 %s there, %s unsharded again",
                                 f->name, hex, f->checksum);
        free(key);
    }
    return why;
}

