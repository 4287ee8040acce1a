/*
 * ckpt/run.h - run directories and the checkpoints inside them (SPEC "Run
 * directories and checkpoints").
 *
 * A run is read into a tree: a sorted snapshot of its files, taken from a
 * directory listing or from one pass over an archive. Small files that
 * classification needs (config.yaml, .metadata, .zattrs, ...) are captured
 * during that pass when the archive is compressed, so nothing is read
 * twice; plain tar members and directory files are read on demand.
 */
#ifndef CKPT_RUN_H
#define CKPT_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/archive.h"
#include "ckpt/err.h"
#include "ckpt/storage.h"

struct ckpt_tree_file {
    char *path;             /* owned; relative to the run root */
    uint64_t size;
    enum ckpt_entry_type type;
    uint64_t data_offset;   /* plain tar member offset, or CKPT_NO_OFFSET */
    char *content;          /* owned leading bytes captured from a
                               compressed archive, or NULL */
    size_t content_len;     /* < size when only a prefix was kept */
    char *tail;             /* owned: the bytes [tail_off, size) of a
                               compressed archive's torch zip member that
                               its wholeness check reads (central
                               directory and end records), or NULL */
    uint64_t tail_off;
    int64_t mtime;          /* directory runs: modification time (s; an
                               object's LastModified), else 0 */
    int64_t ctime;          /* directory runs: inode change time (s; an
                               object's LastModified), else 0 */
    char *hardlink;         /* owned: a hard link member's target as
                               stored, or NULL; resolved members take the
                               target's type FILE, size and offset */
    char *symlink;          /* owned: an archive's symbolic link member's
                               target as stored, or NULL (a directory's
                               links are read with readlink when asked) */
};

struct ckpt_tree {
    struct ckpt_storage *st;       /* borrowed */
    char *key;                     /* owned: run directory or archive */
    char *display;                 /* owned: as shown to the user */
    enum ckpt_archive_kind archive;/* NONE for a directory */
    char *strip;                   /* owned: top directory stepped into
                                      inside the archive ("run1/"), or "" */
    struct ckpt_tree_file *files;  /* owned, sorted by path */
    size_t n;
    uint64_t archive_size;         /* archive file size, or 0 */
    uint64_t fetched;              /* archive bytes read to build the tree */
    char *damage;                  /* owned: why the archive was not read
                                      to a proper end (see
                                      ckpt_archive_damage), or NULL; the
                                      listing may then miss members, so
                                      nothing may be judged missing */
    size_t mounts;                 /* local directory: mount points below
                                      it the listing found (entries with
                                      ckpt_entry.mount) */
    char *mount_first;             /* owned: the smallest of their paths,
                                      or NULL */
};

/* How many leading bytes of a member to keep while streaming a compressed
 * archive (path as stored, before stepping into a top directory); 0 keeps
 * none. */
typedef size_t (*ckpt_tree_want_fn)(const char *path, uint64_t size);
/* Keeps what run classification and W&B evidence read: config.yaml,
 * .metadata, .zattrs, ... whole (up to 64 MiB), and the first 256 KiB of
 * wandb run logs (run-ID.wandb). */
size_t ckpt_tree_want_default(const char *path, uint64_t size);

/* Snapshot the run at key: a directory, or an archive file when its name
 * has an archive extension. want may be NULL (default). */
int ckpt_tree_load(struct ckpt_tree **out, struct ckpt_storage *st,
                   const char *key, ckpt_tree_want_fn want,
                   struct ckpt_err *err);
/* With CKPT_TREE_SALVAGE an archive is read on past damage (see
 * ckpt_archive_set_salvage) and tree->damage says why it ended early;
 * without it such damage fails the load, as ckpt_tree_load does. */
#define CKPT_TREE_SALVAGE 1u
int ckpt_tree_load_flags(struct ckpt_tree **out, struct ckpt_storage *st,
                         const char *key, ckpt_tree_want_fn want,
                         unsigned flags, struct ckpt_err *err);
void ckpt_tree_free(struct ckpt_tree *t);
/* Exact path lookup (binary search). */
const struct ckpt_tree_file *ckpt_tree_find(const struct ckpt_tree *t,
                                            const char *path);
/* Index range [*lo, *hi) of the files below directory dir ("" = all). */
void ckpt_tree_range(const struct ckpt_tree *t, const char *dir, size_t *lo,
                     size_t *hi);
/* The path of file i (an index ckpt_tree_range gave for dir) relative to
 * dir; dir "" (the whole tree, a root checkpoint) leaves it whole. */
const char *ckpt_tree_rel(const struct ckpt_tree *t, size_t i,
                          const char *dir);
/* 1 if dir exists (has an entry or anything below it). */
int ckpt_tree_has_dir(const struct ckpt_tree *t, const char *dir);
/* Read a whole small file of the tree (malloced, NUL-terminated); a file
 * larger than max is an error. */
int ckpt_tree_read(struct ckpt_tree *t, const char *path, size_t max,
                   char **data, size_t *len, struct ckpt_err *err);
/* Read the first min(size, max) bytes of a file (malloced,
 * NUL-terminated); *truncated tells whether the file is longer. */
int ckpt_tree_read_head(struct ckpt_tree *t, const char *path, size_t max,
                        char **data, size_t *len, int *truncated,
                        struct ckpt_err *err);
/* Read exactly len bytes at off of a file of the tree: a ranged read of
 * a directory tree's object or of a plain tar member, the bytes captured
 * while listing, or else (a member of a compressed archive) one more pass
 * over the archive up to it; *passes (may be NULL) counts those. */
int ckpt_tree_read_at(struct ckpt_tree *t, const char *path, uint64_t off,
                      void *buf, size_t len, unsigned *passes,
                      struct ckpt_err *err);
/* Whether reading [off, off+len) of path needs a pass over a compressed
 * archive. */
int ckpt_tree_read_streams(const struct ckpt_tree *t, const char *path,
                           uint64_t off, size_t len);
/* Storage key of a file of a directory tree (malloced); NULL for
 * archives. */
char *ckpt_tree_key(const struct ckpt_tree *t, const char *path);

enum ckpt_format {
    CKPT_FMT_UNKNOWN = 0,
    CKPT_FMT_DCP,
    CKPT_FMT_OLMO_LEGACY,
    CKPT_FMT_OLMO_LOCAL,
    CKPT_FMT_OLMO_CORE,
    CKPT_FMT_ZARR,
    CKPT_FMT_ORBAX,
    CKPT_FMT_UNSHARDED,
    CKPT_FMT_HF,          /* HF Trainer / accelerate FSDP (DCP subdirs) */
    CKPT_FMT_DEEPSPEED,
    CKPT_FMT_MEGATRON,
    CKPT_FMT_DCP_HF,      /* torch DCP HuggingFaceStorageWriter shards */
    CKPT_FMT_LIGHTNING    /* PyTorch Lightning .ckpt file or directory */
};

/* "dcp", "olmo-legacy", "olmo-local", "olmo-core", "zarr", "orbax",
 * "unsharded", "hf", "deepspeed", "megatron", "dcp-hf", "lightning",
 * "unknown". */
const char *ckpt_format_name(enum ckpt_format f);

struct ckpt_checkpoint {
    char *name;          /* owned: directory name, "step1000-unsharded" */
    char *dir;           /* owned: path in the run, "step1000" */
    int64_t step;
    int unsharded_name;  /* name ends in "-unsharded" */
    enum ckpt_format format;
    int complete;
    char *why;           /* owned: why not complete, or NULL */
    int unknown;         /* not complete, but not proven incomplete
                          * either: files ckpt does not recognise or
                          * cannot verify (why says which); a run is
                          * never judged bad on such a step */
    int unknown_commit;  /* the Orbax case of unknown: readable contents
                          * but no commit marker */
    uint64_t size;       /* bytes of its files */
    uint64_t nfiles;
    int root;            /* the run directory (or the archive's top
                          * directory) is itself this checkpoint: dir is
                          * "", name the directory's or archive's name */
    int named;           /* a directory at a checkpoint's place that a
                          * layout recognises by its files, under a name
                          * without a step (`final`, `best-model`, a
                          * DeepSpeed tag `latest` names): step is -1 */
    char *foreign;       /* owned: the first file of it (path in the run)
                          * that its layout does not own and that is no
                          * debris, or not a regular file; NULL if none */
    size_t nforeign;
    char *special;       /* owned: the first file of it that is not a
                          * regular file (FIFO, socket, device, link) */
    size_t nspecial;
    const char *partial; /* static: why its unsharded output cannot hold
                          * all it holds (a legacy Megatron step's is the
                          * model alone), set by its judge; NULL: the
                          * format decides (ckpt_unshard_partial) */
    char *pinned;        /* owned: why the writer pins it (HF's
                          * best_model_checkpoint, DeepSpeed's `latest`,
                          * Megatron's latest_checkpointed_iteration.txt):
                          * never pruned; NULL if it does not */
};

struct ckpt_run {
    int has_config;      /* config.yaml at the root */
    int has_wandb;       /* wandb/ directory */
    int has_train_data;  /* train_data/ directory */
    struct ckpt_checkpoint *ckpts; /* owned, sorted by step then name */
    size_t n;
    uint64_t size;       /* bytes of all files */
    uint64_t nfiles;
    char *unaccounted;   /* owned: the first file nothing accounts for
                          * (docs/reliability.md, "Delete by
                          * accounting"), or NULL: a run holding one is
                          * never bad */
    size_t nunaccounted;
    char *holds_run;     /* owned: the first directory below the top that
                          * is a run of its own, or NULL: a directory that
                          * holds runs is never judged as one run */
};

/* Recognise a checkpoint directory name: stepN, stepN-unsharded, step_N,
 * step-N, global_stepN, iter_NNNNNNN, checkpoint-N, epoch_N,
 * dist_epoch_N (torchtune) or a bare
 * integer. Returns 1 and sets *step (and *unsharded), else 0. */
int ckpt_checkpoint_name(const char *name, int64_t *step, int *unsharded);

/* Classify the run held by tree. I/O failures and checkpoint metadata that
 * cannot be understood are errors (-1): a run is never judged on bytes we
 * could not read. */
int ckpt_run_scan(struct ckpt_run *run, struct ckpt_tree *tree,
                  struct ckpt_err *err);
void ckpt_run_release(struct ckpt_run *run);
void ckpt_checkpoint_release(struct ckpt_checkpoint *c);
/* Why checkpoint c may not be deleted as a whole, whatever licenses its
 * delete (a prune, a drop, unshard --delete-sharded), malloced: it holds
 * a file its layout does not own (foreign) or one that is not a regular
 * file; NULL when it may. */
char *ckpt_checkpoint_unowned(const struct ckpt_checkpoint *c);
/* config.yaml with wandb/ or train_data/, or at least one checkpoint
 * directory (a root checkpoint alone does not make a run), and no run
 * below the top (holds_run). */
int ckpt_run_looks_like_run(const struct ckpt_run *run);

/* Files below this size that are not weights-like are run debris,
 * wherever they are (docs/reliability.md, "Delete by accounting"). */
#define CKPT_DEBRIS_MAX ((uint64_t)64 << 20)
/* A name that may hold weights or a checkpoint (*.safetensors, *.pt,
 * *.bin, *.distcp, .metadata, archives, ...): never debris. */
int ckpt_weights_like(const char *path);
/* Each file of the judged run nothing accounts for, in order: a file
 * outside its checkpoints; the first one a checkpoint proven incomplete
 * does not own, with n the number of such files in it. A non-zero
 * return stops and is returned. */
typedef int (*ckpt_unaccounted_fn)(void *ud, const char *path, uint64_t size,
                                   size_t n);
int ckpt_run_unaccounted_each(const struct ckpt_run *run,
                              const struct ckpt_tree *t,
                              ckpt_unaccounted_fn fn, void *ud);
/* File f at path (in the run) is run debris: a regular file, not
 * weights-like, small, or in wandb/, train_data/, logs/ or log-like. */
int ckpt_debris(const char *path, const struct ckpt_tree_file *f);
/* The newest complete checkpoint with step > 0 (or a complete root
 * checkpoint, whatever its name), or NULL: a run without one is bad. */
const struct ckpt_checkpoint *ckpt_run_best(const struct ckpt_run *run);
/* The newest checkpoint with step other than 0 (or root: a step it could
 * not read, -1, counts) that ckpt cannot judge
 * (unknown), or NULL: a run without a best one but with such a step is an
 * error, never bad. */
const struct ckpt_checkpoint *ckpt_run_unknown(const struct ckpt_run *run);

/* The format of the checkpoint at dir of t ("" the root) from its file
 * names alone (nothing is read); CKPT_FMT_UNKNOWN when it has no files. */
enum ckpt_format ckpt_judge_format(const struct ckpt_tree *t,
                                   const char *dir);
/* The format of t's root checkpoint when t is one checkpoint (no
 * checkpoint directories, checkpoint files at its top), by name alone,
 * for a tree ckpt_run_scan could not judge; -1 when t is not one. */
int ckpt_run_root_format(const struct ckpt_tree *t);
/* 1 when t's top holds files that ls judges a complete unsharded
 * checkpoint (model.pt, model.safetensors, ...: already whole), else 0. */
int ckpt_run_root_whole(struct ckpt_tree *t);

/* The entries of directory key that may be runs, sorted and unique
 * (malloced, each malloced): directories and archives, not hidden; a
 * hidden `.NAME.ckpt-del-HOST-PID` (a delete a killed process left
 * renamed aside) stands for key/NAME. keep (may be NULL) vetoes one by
 * returning 0. *any (may be NULL): key holds anything at all. */
int ckpt_run_children(struct ckpt_storage *st, const char *key,
                      int (*keep)(void *ud, const char *key), void *ud,
                      char ***keys, size_t *n, int *any, struct ckpt_err *err);

enum ckpt_load_status {
    CKPT_LOAD_OK = 0,
    CKPT_LOAD_TOO_LARGE,   /* archive above the size limit: not opened */
    CKPT_LOAD_NOT_RUN_FILE /* a file that is not an archive */
};

/* Stat key, snapshot it and scan it. An archive larger than max_archive
 * (0: no limit) is not opened; st->size reports its size. On
 * CKPT_LOAD_OK the caller owns *tree (ckpt_tree_free) and *run
 * (ckpt_run_release). */
int ckpt_run_load(struct ckpt_storage *st, const char *key,
                  uint64_t max_archive, struct ckpt_stat *sb,
                  enum ckpt_load_status *status, struct ckpt_tree **tree,
                  struct ckpt_run *run, struct ckpt_err *err);
/* The same with ckpt_tree_load_flags flags (CKPT_TREE_SALVAGE). */
int ckpt_run_load_flags(struct ckpt_storage *st, const char *key,
                        uint64_t max_archive, unsigned flags,
                        struct ckpt_stat *sb, enum ckpt_load_status *status,
                        struct ckpt_tree **tree, struct ckpt_run *run,
                        struct ckpt_err *err);

#endif
