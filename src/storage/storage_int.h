/*
 * storage_int.h - backend vtable. Private to src/storage: do not expose.
 */
#ifndef CKPT_STORAGE_INT_H
#define CKPT_STORAGE_INT_H

#include <stdatomic.h>

#include "ckpt/storage.h"

struct ckpt_storage_ops {
    const char *name;
    int (*stat)(struct ckpt_storage *, const char *, struct ckpt_stat *,
                struct ckpt_err *);
    int (*list)(struct ckpt_storage *, const char *, unsigned, ckpt_list_fn,
                void *, struct ckpt_err *);
    int (*read)(struct ckpt_storage *, const char *, uint64_t, void *, size_t,
                size_t *, struct ckpt_err *);
    /* Optional: read only while the object's ETag is the given one. */
    int (*read_if)(struct ckpt_storage *, const char *, const char *,
                   uint64_t, void *, size_t, size_t *, struct ckpt_err *);
    int (*writer_open)(struct ckpt_storage *, const char *, uint64_t,
                       struct ckpt_writer **, struct ckpt_err *);
    int (*put_if_absent)(struct ckpt_storage *, const char *, const void *,
                         size_t, struct ckpt_err *);
    int (*del)(struct ckpt_storage *, const char *, struct ckpt_err *);
    int (*delete_tree)(struct ckpt_storage *, const char *, struct ckpt_err *);
    /* Optional: ckpt_storage_delete_keys. */
    int (*delete_keys)(struct ckpt_storage *, const char *, char *const *,
                       size_t, struct ckpt_err *);
    void (*close)(struct ckpt_storage *);
    /* Optional: transport counters (remote backends). */
    void (*stats)(const struct ckpt_storage *, struct ckpt_storage_stats *);
};

struct ckpt_storage {
    const struct ckpt_storage_ops *ops;
    struct ckpt_loc loc;          /* owned copy: scheme, bucket, display */
    struct ckpt_storage_cfg cfg;
    _Atomic uint64_t bytes_read;
    void *impl;                   /* owned by the backend */
};

/* Every writer starts with this header; backends embed it first. */
struct ckpt_writer_ops {
    int (*write)(struct ckpt_writer *, const void *, size_t, struct ckpt_err *);
    int (*commit)(struct ckpt_writer *, struct ckpt_err *);
    void (*abort)(struct ckpt_writer *);
};

struct ckpt_writer {
    const struct ckpt_writer_ops *ops;
};

int ckpt_local_open(struct ckpt_storage *st, struct ckpt_err *err);
/* Remote backends (s3.c); r2 and gs share the S3 protocol client. */
int ckpt_s3_open(struct ckpt_storage *st, struct ckpt_err *err);

#endif
