/*
 * outputs.h - what an unshard writes: the output files laid out as torch
 * zips (torch_layout.c) or safetensors + JSON (safetensors_layout.c), and
 * where they go (out.c: local_dir.c or object_store.c); compare_copy.c
 * checks a copy of them. Private to src/.
 */
#ifndef CKPT_MERGE_OUTPUTS_H
#define CKPT_MERGE_OUTPUTS_H

#include "merge/job.h"

/* outputs/torch_layout.c: the planned tensors as torch zips (--format
 * torch); which layout a step gets is its trainer's call
 * (trainer_layout, src/trainers/trainers.c). */
int uns_torch_layout(struct ujob *j, struct ckpt_pv *root,
                     struct ckpt_err *err);
int uns_layout_finish(struct ujob *j, struct ckpt_err *err);
/* Remote output (the parts holding a record's local header are sent
 * when it is written): the records whose CRC is known before the copy
 * (data.pkl, version, byteorder, empty ones) written whole at once. */
int uns_layout_early(struct ujob *j, struct ufile *f, struct ckpt_err *err);
/* The local header of the record of tensor t or copy c (one of them),
 * once all its bands are written. */
int uns_layout_record_done(struct ujob *j, struct utensor *t,
                           struct ucopy *c, struct ckpt_err *err);

int uns_layout_choose(struct ujob *j, struct ckpt_pv *root, const char *ext,
                  struct ckpt_err *err);

/* outputs/safetensors_layout.c */
int uns_st_layout(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err);

/* outputs/out.c: where the outputs go. Two kinds: a local directory (outputs/local_dir.c:
 * files in a temporary directory beside DEST, pwrite, fsync, then one
 * atomic rename) and a prefix of object storage (outputs/object_store.c: one multipart
 * upload per output, each part a fixed byte range of the planned file,
 * sent as soon as all its bytes are written). Writes come from pool
 * workers concurrently, at any offsets; every byte of every output is
 * written exactly once. */
struct uns_out_ops {
    /* DEST against the plan: an output name DEST holds as a directory is
     * refused; remote: the -unfinished marker is written. */
    int (*begin)(struct ujob *j, struct ckpt_err *err);
    /* Output f of the plan (f->size known) starts. */
    int (*create)(struct ujob *j, struct ufile *f, struct ckpt_err *err);
    int (*write)(struct ujob *j, struct ufile *f, const void *p, size_t n,
                 uint64_t off, struct ckpt_err *err);
    /* Every byte written: local fsync and close, remote completes the
     * uploads (the objects appear). */
    int (*close)(struct ujob *j, struct ckpt_err *err);
    /* The outputs become DEST: local rename, remote marker removed. */
    int (*commit)(struct ujob *j, struct ckpt_err *err);
    /* Failure: temporary files or unfinished uploads go. */
    void (*abort)(struct ujob *j);
    void (*release)(struct ujob *j);
};

struct uns_out {
    const struct uns_out_ops *ops;
    int remote;                 /* object storage: see outputs/object_store.c */
    void *impl;
};

/* Open DEST: a local directory or an object storage location. */
int uns_out_open(struct ujob *j, const char *dest, struct ckpt_err *err);
static inline int uns_out_write(struct ujob *j, struct ufile *f,
                                const void *p, size_t n, uint64_t off,
                                struct ckpt_err *err)
{
    return j->dst.out->ops->write(j, f, p, n, off, err);
}
/* A reader of output f as written (verify): local, the temporary file;
 * remote, the completed object. */
void uns_out_reader(struct ujob *j, struct ufile *f, struct usrc *s);
/* outputs/local_dir.c / outputs/object_store.c */
int uns_outlocal_open(struct ujob *j, const char *dest,
                      struct ckpt_err *err);
int uns_outobj_open(struct ujob *j, const char *dest, struct ckpt_err *err);
/* outputs/object_store.c: the memory gate of a remote output. A task that will write
 * [off, off+len) of f first reserves the part buffers it needs: it waits
 * while they would exceed --memory unless it is the oldest task not yet
 * done (seq order is output order), which always goes on, so the parts
 * it and its elders fill complete and free memory: no deadlock. done
 * marks a task finished (also when skipped). Returns -1 when the job
 * failed meanwhile. */
int uns_outobj_reserve(struct ujob *j, struct ufile *f, uint64_t off,
                       uint64_t len, uint64_t seq);
void uns_outobj_done(struct ujob *j, uint64_t seq);
/* Tasks of the run about to start (seq 0..n-1). */
void uns_outobj_tasks(struct ujob *j, uint64_t n);
void uns_outobj_wake(struct ujob *j);
void uns_outobj_reader(struct ujob *j, struct ufile *f, struct usrc *s);
/* Peak bytes of part buffers held (tests, --debug). */
uint64_t uns_outobj_peak(const struct ujob *j);
/* The bound on part buffers held: --memory, or its default. */
uint64_t uns_outobj_budget(const struct ujob *j);

/* outputs/compare_copy.c: each file res made is in the copy below dir of st with its
 * size and MD5 (read back): NULL, or why not (malloced). */
char *uns_copy_differs(struct ckpt_storage *st, const char *dir,
                       const struct ckpt_unshard_result *res);

#endif
