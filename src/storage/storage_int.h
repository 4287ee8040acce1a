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
    /* Optional: ckpt_gate_delete_keys. */
    int (*delete_keys)(struct ckpt_storage *, const char *, char *const *,
                       size_t, struct ckpt_err *);
    void (*close)(struct ckpt_storage *);
    /* Optional: transport counters (remote backends). */
    void (*stats)(const struct ckpt_storage *, struct ckpt_storage_stats *);
    /* Optional: ckpt_storage_probe (remote backends). */
    int (*probe)(struct ckpt_storage *, const char *, struct ckpt_err *);
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

/* Which filesystem a local file is on: its device and, where statx(2)
 * tells, its mount (a bind mount of a directory of the same filesystem
 * has the same device, another mount id). */
struct st_fs {
    unsigned long long dev, mnt;
    int has_mnt;
};
/* The end of a one-shot local write: the temporary tmp (consumed)
 * renamed to key when rc is 0, else removed. rc, or -1 with err. */
int st_into_place(char *tmp, const char *key, int rc, struct ckpt_err *err);

/* name in the directory open at dfd (not followed; "" for dfd itself):
 * its filesystem, whether it is a mount's root, its st_mode. 0, or -1
 * with errno. */
int st_fs_at(int dfd, const char *name, struct st_fs *fs, int *root,
             unsigned *mode);
/* 1 when name (as st_fs_at finds it) is not on fs: another device or
 * mount, or a mount's root; -1 with errno. *mode may be NULL. */
int st_fs_other(int dfd, const char *name, const struct st_fs *fs,
                unsigned *mode);
/* The backend halves of the gate's deletes (gate_storage.c calls them,
 * with the proof held: nothing else may). */
/* The file key below root only (gate.h ckpt_gate_delete_below). */
int ckpt_local_delete_below(const char *root, const char *key,
                            struct ckpt_err *err);
/* Delete key only if its version is still `version` (storage.h). */
int st_delete_if_match(struct ckpt_storage *st, const char *key,
                       const char *version, struct ckpt_err *err);

/* Remote backends (s3.c); r2 and gs share the S3 protocol client. */
int ckpt_s3_open(struct ckpt_storage *st, struct ckpt_err *err);

#endif
