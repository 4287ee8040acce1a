/*
 * upload.c - storage.h's uploads driven by the caller: dispatch to the
 * local (upload_local.c) or object-storage (s3_upload.c) flavour. Kept out
 * of the backend vtable so the backends' files stay as they are.
 */
#include "storage_int.h"
#include "s3_int.h"
#include "upload_int.h"

#include <string.h>

static void res_clear(struct ckpt_put_result *res)
{
    if (res) {
        memset(res, 0, sizeof(*res));
        res->retry_after = -1;
    }
}

int ckpt_storage_head(struct ckpt_storage *st, const char *key,
                      struct ckpt_stat *out, struct ckpt_obj_meta *meta,
                      struct ckpt_err *err)
{
    if (ckpt_storage_is_local(st))
        return st_local_up_head(st, key, out, meta, err);
    return s3_up_head(st, key, out, meta, err);
}

int ckpt_storage_put_object(struct ckpt_storage *st, const char *key,
                            const void *data, size_t len,
                            const unsigned char md5[16],
                            const struct ckpt_obj_meta *meta, unsigned flags,
                            struct ckpt_put_result *res,
                            struct ckpt_err *err)
{
    if (!ckpt_storage_is_local(st))
        return s3_up_put(st, key, data, len, md5, meta, flags, res, err);
    res_clear(res);
    return st_local_up_put(st, key, data, len, meta, err);
}

int ckpt_storage_put_file(struct ckpt_storage *st, const char *key,
                          const char *path, const struct ckpt_file_ver *ver,
                          const unsigned char md5[16],
                          const struct ckpt_obj_meta *meta, int *linked,
                          struct ckpt_err *err)
{
    *linked = 0;
    if (!ckpt_storage_is_local(st))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "a file is placed by "
                            "link or copy only in local storage");
    return st_local_up_file(st, key, path, ver, md5, meta, linked, err);
}

int ckpt_storage_mpu_start(struct ckpt_storage *st, const char *key,
                           uint64_t size, const struct ckpt_obj_meta *meta,
                           char **upload_id, struct ckpt_err *err)
{
    if (ckpt_storage_is_local(st))
        return st_local_up_start(st, key, size, upload_id, err);
    return s3_up_start(st, key, meta, upload_id, err);
}

int ckpt_storage_mpu_part(struct ckpt_storage *st, const char *key,
                          const char *upload_id, int num, uint64_t off,
                          const void *data, size_t len,
                          const unsigned char md5[16], unsigned flags,
                          struct ckpt_put_result *res, struct ckpt_err *err)
{
    if (!ckpt_storage_is_local(st))
        return s3_up_part(st, key, upload_id, num, data, len, md5, flags,
                          res, err);
    res_clear(res);
    return st_local_up_part(st, upload_id, off, data, len, err);
}

int ckpt_storage_mpu_finish(struct ckpt_storage *st, const char *key,
                            const char *upload_id, int nparts,
                            const char *const *etags, uint64_t size,
                            const struct ckpt_obj_meta *meta,
                            struct ckpt_put_result *res,
                            struct ckpt_err *err)
{
    if (!ckpt_storage_is_local(st))
        return s3_up_finish(st, key, upload_id, nparts, etags, size, res,
                            err);
    res_clear(res);
    return st_local_up_finish(st, key, upload_id, size, meta, err);
}

int ckpt_storage_mpu_abort(struct ckpt_storage *st, const char *key,
                           const char *upload_id, struct ckpt_err *err)
{
    if (ckpt_storage_is_local(st))
        return st_local_up_abort(st, upload_id, err);
    return s3_up_abort(st, key, upload_id, err);
}

int ckpt_storage_mpu_list(struct ckpt_storage *st, const char *prefix,
                          ckpt_upload_list_fn fn, void *ud,
                          struct ckpt_err *err)
{
    if (ckpt_storage_is_local(st))
        return ckpt_err_set(err, CKPT_EUNSUPPORTED, "local storage has no "
                            "multipart uploads to list");
    return s3_up_list(st, prefix, fn, ud, err);
}

