/*
 * ckpt/dcp.h - PyTorch Distributed Checkpoint (DCP) metadata.
 *
 * A DCP checkpoint directory holds `.metadata` (one pickle of
 * torch.distributed.checkpoint.metadata.Metadata) and data files
 * `__R_N.distcp` whose items are located only through the metadata's
 * storage_data: (relative_path, offset, length). Rank-local checkpoints
 * (torch >= 2.9, use_collectives=False) have one `__R.metadata` per rank
 * instead; ckpt_dcp_meta_add merges them. Layout details:
 * docs/formats/dcp.md.
 */
#ifndef CKPT_DCP_H
#define CKPT_DCP_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/err.h"
#include "ckpt/pickle.h"
#include "ckpt/torchfmt.h"

/* --- completeness (used by `ckpt clean`) ------------------------------- */

/* One data file named by the metadata and the size it needs. */
struct ckpt_dcp_filereq {
    char *name;          /* relative_path, e.g. "__0_0.distcp"; owned */
    uint64_t min_size;   /* max(offset + length) over its items */
};

/*
 * Parse `.metadata` bytes (data, len; from memory) and return, for each
 * data file it names, the minimum size the file must have. *out is a
 * malloced array of *n entries sorted by name; free it with
 * ckpt_dcp_filereqs_free. Only storage_data is interpreted, so metadata
 * with dtypes or fields this version does not know still answers.
 * Returns 0, or -1 with err (CKPT_EFORMAT: not DCP metadata / malformed;
 * CKPT_EUNSAFE: the pickle names a class outside the allow-list).
 * A checkpoint is complete when `.metadata` parses and every file exists
 * with at least min_size bytes.
 */
int ckpt_dcp_required_sizes(const void *data, size_t len,
                            struct ckpt_dcp_filereq **out, size_t *n,
                            struct ckpt_err *err);
/* NULL-safe. */
void ckpt_dcp_filereqs_free(struct ckpt_dcp_filereq *reqs, size_t n);

/* --- full metadata --------------------------------------------------- */

/* Where an item's bytes are. */
struct ckpt_dcp_storage {
    const char *file;           /* relative_path (a plain file name) */
    uint64_t offset, length;    /* within file; on-disk (transformed) */
    const char *const *transforms; /* descriptors, first = first to undo */
    size_t ntransforms;
};

struct ckpt_dcp_chunk {
    const uint64_t *offsets;    /* ndim; position in the global tensor */
    const uint64_t *sizes;      /* ndim; shape of the stored tensor */
    struct ckpt_dcp_storage st;
    unsigned part;              /* metadata file it came from, counted from
                                   0 (rank-local: the rank) */
};

/* A byte item as another metadata file stored it (rank-local: every
 * rank stores its own copy of a key). */
struct ckpt_dcp_copy {
    struct ckpt_dcp_storage st;
    unsigned part;
};

enum ckpt_dcp_kind { CKPT_DCP_TENSOR = 0, CKPT_DCP_BYTES };

struct ckpt_dcp_entry {
    const char *fqn;
    enum ckpt_dcp_kind kind;
    /* tensors */
    const struct ckpt_dtype *dtype;
    int ndim;
    const uint64_t *size;       /* ndim; global shape */
    struct ckpt_dcp_chunk *chunks;
    size_t nchunks, chunkcap;
    /* byte items */
    struct ckpt_dcp_storage st;
    unsigned part;              /* metadata file of st */
    struct ckpt_dcp_copy *copies;   /* the later files' copies, in order */
    size_t ncopies, copycap;
    /* planner_data path (TUPLE of str/int) restoring nesting, or NULL:
     * the fqn is then a top-level key. */
    const struct ckpt_pv *path;
};

struct ckpt_dcp_meta {
    struct ckpt_arena *arena;         /* owned; everything below */
    struct ckpt_dcp_entry *entries;   /* in state_dict_metadata order */
    size_t n, cap;
    int has_planner_data;
    const char *version;              /* Metadata.version or NULL */
    struct ckpt_dcp_filereq *files;   /* sorted; names in the arena */
    size_t nfiles;
    void *index;                      /* private lookup tables */
};

struct ckpt_dcp_meta *ckpt_dcp_meta_new(void);
/*
 * Parse one metadata pickle (name for messages, e.g. ".metadata") and
 * merge it into m: new fqns are appended, chunks of an fqn already seen
 * are added to it (rank-local metadata), byte items seen before stay the
 * first file's, the later files' copies listed in entry.copies. Fails on
 * unknown dtypes, chunks outside their tensor, chunks without storage,
 * unsafe relative paths. 0 or -1.
 */
int ckpt_dcp_meta_add(struct ckpt_dcp_meta *m, const void *data, size_t len,
                      const char *name, struct ckpt_err *err);
/* NULL-safe. */
void ckpt_dcp_meta_free(struct ckpt_dcp_meta *m);
/*
 * Replace entry i by one entry per metadata file that stored it, in file
 * order, each named "FQN.rankP" (P: the part; its planner path's last key
 * gets the same suffix): a byte item's own storage and copies, or a
 * tensor whose every chunk is the whole tensor, one per part. The other
 * entries keep their order. Fails (CKPT_EFORMAT) when a new name is taken
 * or the path ends in a list index. Entry pointers taken before are
 * invalid afterwards.
 */
int ckpt_dcp_split_parts(struct ckpt_dcp_meta *m, size_t i,
                         struct ckpt_err *err);
/* Entry by fqn, or NULL. */
const struct ckpt_dcp_entry *ckpt_dcp_find(const struct ckpt_dcp_meta *m,
                                           const char *fqn);

#endif
