/*
 * s3.c - object storage backend (S3, R2, GCS). Until the object-storage
 * client lands, remote locations are refused with a clear message.
 */
#include "storage_int.h"

int ckpt_s3_open(struct ckpt_storage *st, struct ckpt_err *err)
{
    return ckpt_err_set(err, CKPT_EUNSUPPORTED,
                        "%s: %s locations are not supported yet",
                        st->loc.display, ckpt_scheme_prefix(st->loc.scheme));
}
