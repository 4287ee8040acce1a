/*
 * upload_int.h - the local backend's uploads driven by the caller
 * (upload_local.c), dispatched by upload.c. Private to src/storage: do not
 * expose.
 */
#ifndef CKPT_UPLOAD_INT_H
#define CKPT_UPLOAD_INT_H

#include "ckpt/storage.h"

int st_local_up_head(struct ckpt_storage *st, const char *key,
                     struct ckpt_stat *out, struct ckpt_obj_meta *meta,
                     struct ckpt_err *err);
int st_local_up_put(struct ckpt_storage *st, const char *key, const void *data,
                    size_t len, const struct ckpt_obj_meta *meta,
                    struct ckpt_err *err);
int st_local_up_file(struct ckpt_storage *st, const char *key,
                     const char *path, const struct ckpt_file_ver *ver,
                     const unsigned char md5[16],
                     const struct ckpt_obj_meta *meta, int *linked,
                     struct ckpt_err *err);
int st_local_up_start(struct ckpt_storage *st, const char *key, uint64_t size,
                      char **upload_id, struct ckpt_err *err);
int st_local_up_part(struct ckpt_storage *st, const char *upload_id,
                     uint64_t off, const void *data, size_t len,
                     struct ckpt_err *err);
int st_local_up_finish(struct ckpt_storage *st, const char *key,
                       const char *upload_id, uint64_t size,
                       const struct ckpt_obj_meta *meta, struct ckpt_err *err);
int st_local_up_abort(struct ckpt_storage *st, const char *upload_id,
                      struct ckpt_err *err);
int st_local_prune_dirs(struct ckpt_storage *st, const char *dir,
                        int keep_root, struct ckpt_err *err);

#endif
