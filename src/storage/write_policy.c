/*
 * write_policy.c - one rule for how an object is written (storage.h
 * "Write policy"), shared by `ckpt upload` and the unshard output sink,
 * and the streamed single PUT it relies on for large files.
 *
 * The rule, for object storage:
 *   1. at most one part's worth of bytes: one PUT (nothing to split);
 *   2. more than CKPT_SINGLE_PUT_MAX: multipart (a failed PUT would resend
 *      it all, and one connection caps a large object's speed);
 *   3. a body its writer assembles whole in memory while it produces it
 *      (unshard outputs): one PUT when it fits the memory budget, else
 *      multipart. Its bytes come no faster than the writer's own workers
 *      make them, so parts buy little overlap, while a service that
 *      assembles multipart objects by copying pays a second write
 *      (bench/RESULTS.md "sink: one PUT": 1.6x on s3rver);
 *   4. fewer than CKPT_PUT_PARALLEL files in flight: multipart, since
 *      parts are the only way to keep several requests busy;
 *   5. a body that must be buffered whole (not streamed) and is larger
 *      than a CKPT_PUT_PARALLEL-th of the memory budget: multipart, so the
 *      budget still holds that many requests;
 *   6. otherwise one PUT: half the requests' overhead, and services that
 *      assemble multipart objects by copying (s3rver, MinIO on one disk)
 *      write every byte once instead of twice (bench/RESULTS.md "upload").
 * A local DEST writes parts as ranges of a temporary file in parallel:
 * anything above one part is split.
 */
#include "storage_int.h"
#include "s3_int.h"
#include "upload_int.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "ckpt/interrupt.h"
#include "ckpt/util.h"

#define MIB (1024ull * 1024)
#define DEFAULT_BUDGET (96 * MIB)   /* `ckpt upload`'s default --memory */
#define LOCAL_CHUNK (1 * MIB)       /* bytes per write of a local stream */

void ckpt_write_plan(int local, const struct ckpt_write_in *in,
                     struct ckpt_write_plan *out)
{
    uint64_t budget = in->mem_budget ? in->mem_budget : DEFAULT_BUDGET;
    unsigned files = in->files_in_flight ? in->files_in_flight : 1;
    memset(out, 0, sizeof(*out));
    out->part_size = s3_part_size(in->size, in->min_part);
    out->nparts = in->size ? (int)((in->size + out->part_size - 1) /
                                   out->part_size) : 1;
    if (in->size <= out->part_size)
        out->multipart = 0;
    else if (local || in->size > CKPT_SINGLE_PUT_MAX)
        out->multipart = 1;
    else if (in->assembled)
        out->multipart = in->size > budget;
    else if (files < CKPT_PUT_PARALLEL)
        out->multipart = 1;
    else
        out->multipart = !in->streamed &&
                         in->size > budget / CKPT_PUT_PARALLEL;
    if (!out->multipart)
        out->nparts = 1;
}

void ckpt_storage_write_plan(const struct ckpt_storage *st,
                             const struct ckpt_write_in *in,
                             struct ckpt_write_plan *out)
{
    ckpt_write_plan(ckpt_storage_is_local(st), in, out);
}

/* Local: the bytes go to a temporary file at their offsets (as local
 * uploads' parts do) and are hashed on the way; only the bytes md5
 * names are renamed into place. */
static int local_put_stream(struct ckpt_storage *st, const char *key,
                            uint64_t size, ckpt_body_fn body, void *ud,
                            const unsigned char md5[16],
                            const struct ckpt_obj_meta *meta,
                            struct ckpt_err *err)
{
    char *id = NULL;
    if (st_local_up_start(st, key, size, &id, err) != 0)
        return -1;
    size_t cap = size < LOCAL_CHUNK ? (size_t)size : LOCAL_CHUNK;
    char *buf = ckpt_xmalloc(cap ? cap : 1);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int rc = c && EVP_DigestInit_ex(c, EVP_md5(), NULL) == 1 ? 0
           : ckpt_err_set(err, CKPT_EUNSUPPORTED, "MD5 is not available");
    for (uint64_t off = 0; rc == 0 && off < size;) {
        size_t n = size - off < cap ? (size_t)(size - off) : cap;
        /* Interrupted: the temporary goes, nothing lands at key. */
        if (ckpt_interrupt_stops()) {
            rc = ckpt_err_set(err, CKPT_EIO, "'%s': interrupted", key);
            break;
        }
        rc = body(ud, off, buf, n, err);
        if (rc == 0)
            rc = st_local_up_part(st, id, off, buf, n, err);
        if (rc == 0)
            EVP_DigestUpdate(c, buf, n);
        off += n;
    }
    unsigned char got[16];
    unsigned int glen = 16;
    if (rc == 0 && (EVP_DigestFinal_ex(c, got, &glen) != 1 ||
                    memcmp(got, md5, 16)))
        rc = ckpt_err_set(err, CKPT_EIO, "'%s': the bytes written differ "
                          "from the bytes hashed (the source changed)", key);
    if (rc == 0)
        rc = st_local_up_finish(st, key, id, size, meta, err);
    else
        st_local_up_abort(st, id, &(struct ckpt_err)CKPT_ERR_INIT);
    EVP_MD_CTX_free(c);
    free(buf);
    free(id);
    return rc;
}

int ckpt_storage_put_stream(struct ckpt_storage *st, const char *key,
                            uint64_t size, ckpt_body_fn body, void *ud,
                            const unsigned char md5[16],
                            const struct ckpt_obj_meta *meta, unsigned flags,
                            struct ckpt_put_result *res,
                            struct ckpt_err *err)
{
    if (!ckpt_storage_is_local(st))
        return s3_up_put_stream(st, key, size, body, ud, md5, meta, flags,
                                res, err);
    if (res) {
        memset(res, 0, sizeof(*res));
        res->retry_after = -1;
    }
    return local_put_stream(st, key, size, body, ud, md5, meta, err);
}
