/*
 * job.h - one unshard job: the state every part of the merge engine
 * (src/merge/) and every trainer's plan shares (what is read, what is planned, where it goes).
 * The functions are declared by concern:
 *
 *   sources/sources.h  open the checkpoint: metadata, data files, zstd
 *                      items, listings, prefetch, CRC checks
 *   engine/engine.h    plan chunks and bands, the output value tree, the
 *                      pool tasks that assemble, write, checksum, verify
 *   outputs/outputs.h  the output files (torch zip, safetensors) and where
 *                      they go (a local directory, object storage)
 *   hf/hf.h            --format hf: a Hugging Face model directory
 *
 * src/unshard/unshard.c orchestrates (open, plan, lay out, copy, finish,
 * verify, commit); each trainer's plan is src/trainers/<name>/plan*.c,
 * chosen by the trainer table (src/trainers/trainer.h). Nothing here
 * names a trainer. Private to src/: do not expose.
 */
#ifndef CKPT_MERGE_JOB_H
#define CKPT_MERGE_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "../pickle/ptrmap.h"
#include "../torchfmt/strmap.h"
#include "ckpt/arena.h"
#include "ckpt/dcp.h"
#include "ckpt/pickle.h"
#include "ckpt/pool.h"
#include "ckpt/storage.h"
#include "ckpt/torchfmt.h"
#include "ckpt/unshard.h"

/* One readable input: a data file, or a decompressed (zstd) item. */
struct usrc {
    char *name;         /* for messages: the path as given; owned */
    int fd;             /* local descriptor, or -1: read through st */
    uint64_t size;
    struct ckpt_storage *st;   /* borrowed; remote sources */
    const char *key;           /* borrowed (name); remote sources */
    char etag[80];             /* remote: the ETag stat saw; reads are of
                                  that version only (If-Match) */
    struct src_win *win;       /* remote: probe windows shared by the
                                  items of this file (sources/source.c), or NULL */
    /* sources/crc_check.c: zip records inside, their CRCs checked as read */
    struct urec **recs;         /* kept in offset order */
    size_t nrecs, reccap;
    /* 0 until the copy starts: reads are not noted; 1: recs is final;
     * 2: records are still added while the copy reads (chunks located
     * by the copy, engine/plan.c), so lookups take the registry's lock. */
    int recs_live;
    /* A local data file in the job's table of open files (sources/source.c): its
     * descriptor may be closed when too many are open (fd is then -1) and
     * is reopened on the next read, checked to be the same file. NULL for
     * files that cannot be reopened (unlinked temporaries, outputs). */
    struct ujob *lru;
    int pins;                  /* reads in progress on fd, under lru->mu */
    uint64_t used;             /* lru->fd_clock at the last read */
    dev_t dev;
    ino_t ino;
    /* sources/prefetch.c: a small remote file fetched whole ahead, or NULL */
    struct src_pf *pf;
    struct src_whole *whole;
};

/* A stored chunk: where its elements are and how they are laid out. */
struct uchunk {
    const struct ckpt_dcp_chunk *meta;  /* offsets/sizes in the tensor */
    struct usrc *src;       /* NULL for a decoded chunk (dec) */
    uint64_t dec;           /* bytes of the full chunk j->plan.decode decodes
                               (zarr, Orbax; engine/decode.c), or 0 */
    uint64_t item_off;      /* start of the item (its zip) within src */
    uint64_t data;          /* absolute offset of the storage data in src */
    int64_t *stride;        /* arena, ndim; element strides in storage */
    int64_t soff;           /* storage offset, elements */
    int big_endian;
    int conj, neg;          /* a conj / neg view: negate the imaginary
                               parts / every component as copied */
    int skip;               /* identical replica of an earlier chunk */
    atomic_int located;     /* src..big_endian are set (engine/plan.c) */
};

/* One output tensor. */
struct utensor {
    const struct ckpt_dcp_entry *e;
    struct uchunk *chunks;  /* arena; e->nchunks */
    uint64_t nbytes;
    struct ckpt_pv *keystr; /* the storage key node inside the pickle */
    int file;               /* output file index, -1 unassigned */
    size_t rec;             /* record index in that file (torch) */
    uint64_t out_off;       /* data offset in the file (safetensors) */
    const char *stname;     /* safetensors name */
    /* bands: output order pieces of at most band bytes */
    int bdim;               /* split dimension, -1 = one band */
    uint64_t bk;            /* extent along bdim per band */
    uint64_t per_prefix;    /* bands per index of the dims before bdim */
    uint64_t nbands;
    uint32_t *crcs;         /* malloced, nbands */
    atomic_uint_fast64_t left;  /* remote output: tasks not yet written */
    int chunked;            /* decoded chunks: one task per chunk */
    int rows;               /* ... each whole rows: band b is chunk b */
    /* ... not whole rows, to a remote output (uns_engine_remote_plan):
     * either bands are chunk rows (band b is chunks [b * rowchunks, (b +
     * 1) * rowchunks), decoded and laid out in memory), or the tensor is
     * decoded into scratch first and its bands read from there. */
    uint64_t rowchunks;     /* chunks per band, or 0 */
    struct usrc *scratch;   /* the decoded tensor (--tmp-dir), or NULL */
    /* --format hf (hf/export.c): this tensor is rows [row0, row0 +
     * e->size[0]) of whole, whose chunks it shares (chunks ==
     * whole->chunks, located through whole); NULL for a tensor of its
     * own. rblk, rstride: the rows are not contiguous there: row r of
     * this tensor is row row0 + (r / rblk) * rstride + r % rblk of whole
     * (Megatron's per-group q/k/v, trainers/megatron/export_hf.c); rblk 0:
     * row row0 + r. stacked: whole is layers stacked on dim 0
     * (Megatron torch_dist); this tensor is [1, rows, ...] at that index,
     * its rows along dim 1, written without the leading 1. cast: written
     * as this dtype (hf/cast.c), or NULL. */
    struct utensor *whole;
    uint64_t row0, rblk, rstride;
    int stacked;
    uint64_t layer;
    const struct ckpt_dtype *cast;
};

/* A storage record of a byte item, copied verbatim. */
struct ucopy {
    const struct ckpt_dcp_entry *e;   /* the byte item it belongs to */
    struct usrc *src;
    uint64_t off, nbytes;
    struct ckpt_pv *keystr;
    int file;
    size_t rec;
    uint64_t out_off;
    uint64_t nbands;
    uint32_t *crcs;
    atomic_uint_fast64_t left;  /* remote output: tasks not yet written */
};

/* One output file. */
struct ufile {
    char *name;             /* "checkpoint.pt"; owned */
    char *prefix;           /* archive prefix "checkpoint"; owned */
    struct ckpt_pv *root;   /* value stored (torch format) */
    struct ckpt_buf head;   /* data.pkl (torch) or header (safetensors) */
    struct ckpt_zipw_rec *recs;  /* malloced; names owned in recnames */
    char **recnames;
    size_t nrecs, reccap;
    uint64_t cd_off, size;
    uint64_t data_start;    /* safetensors: first data byte */
    uint64_t ntensors;
    char *tmp;              /* temporary path while writing; owned */
    int fd;
    int raw;                /* content is exactly head (JSON files) */
    char *copy_from;        /* train.pt copied from this file; owned */
    int copy_local;         /* copy_from is a local file, SRC or not */
    void *out;              /* the output's state (outputs/object_store.c), or NULL */
    char sum[48];           /* its checksum once closed (as
                               ckpt_unshard_file.checksum), or "" */
    char etag[80];          /* remote: the ETag the store stated */
};

struct bufpool {
    pthread_mutex_t mu;
    char **free_;           /* malloced buffers of mult * size each */
    size_t nfree, cap;
    size_t size;
    unsigned mult;          /* 3 (band, read space, verify scratch); 5
                               when tensors are cast (room for the cast
                               band, hf/cast.c) */
};

struct uns_out;

/* Where the bytes come from: the checkpoint's files, opened and read by
 * sources/source.c, sources/listing.c and sources/crc_check.c. */
struct ujob_src {
    char *top;                      /* SRC as a path or key */
    char *dir;                      /* directory with metadata and data */
    struct ckpt_storage *st;        /* remote SRC, or NULL (local) */
    int st_borrowed;                /* st is opts->storage */
    struct ckpt_storage *ra;        /* read-ahead view of st for the copy
                                       (sources/source.c), or NULL; owned */
    struct src_pf *pf;              /* small files fetched whole ahead
                                       (sources/prefetch.c), or NULL; owned */
    int olmo_step;                  /* src is an OLMo step */
    int accelerate;                 /* src is an accelerate FSDP step
                                       (checkpoint-N/): the model's DCP
                                       is pytorch_model_fsdp_0/ */
    int allow_replicas;             /* option, or rank-local metadata */
    int rank_check;                 /* rank-local: every dropped replica is
                                       compared as it is copied (engine/rank_values.c) */
    int rank0;                      /* rank-local with --rank-values rank0:
                                       replicas are not compared */
    const char *metaname;
    struct usrc **srcs;             /* data files and temp items */
    size_t nsrcs, srccap;
    /* Open data files, bounded so that a step of 1,024 rank files reads
     * under `ulimit -n 256` (sources/source.c). Under ujob.mu. */
    size_t fd_open, fd_cap;
    uint64_t fd_clock;
    struct strmap srcmap;           /* relative_path -> srcs index */
    int recs_live;                  /* usrc.recs_live of sources added
                                       from now on (sources/crc_check.c) */
};

/* What goes where: the tensors and byte items found by a format's planner
 * (engine/plan.c, olmo/plan_legacy.c, olmo*.c, zarr/plan.c, orbax/plan.c), the output value
 * tree (engine/tree.c) and the bands the engine assembles (outputs/torch_layout.c). */
struct ujob_plan {
    struct ckpt_dcp_meta *meta;
    struct ckpt_arena *arena;       /* output graph, plan arrays */
    struct utensor *tensors;
    size_t ntensors;
    struct ucopy *copies;
    size_t ncopies, copycap;
    int olmo;                       /* layout olmo chosen */
    int megatron;                   /* a Megatron torch_dist step
                                       (megatron/plan.c) */
    int mg_legacy;                  /* a Megatron legacy step, its ranks
                                       merged (megatron/plan_legacy.c) */
    /* sources/safetensors_items.c: safetensors files inside data files, parsed once (under
     * ujob.mu) */
    struct uns_stblob *stblobs;
    size_t nstblobs, stblobcap;
    struct ckpt_pv **values;        /* per metadata entry; malloced */
    const struct ckpt_pv **paths;   /* per entry: where it was placed */
    uint64_t band;                  /* band bytes */
    uint64_t objects;
    /* Formats whose chunks are located while planning (olmo/plan_legacy.c): NULL
     * means probe the DCP item. */
    int (*locate)(struct ujob *j, struct utensor *t, struct uchunk *c,
                  struct ckpt_err *err);
    /* DCP from object storage: chunks are located by the copy, which
     * reads their items anyway (engine/plan.c uns_plan_locate), not probed
     * while planning. */
    int lazy;
    void *fmtplan;                  /* olmo/plan_legacy.c, zarr/plan.c plan state */
    /* Formats whose chunks are decoded by the engine (zarr/plan.c,
     * orbax/plan.c): decode chunk c of t into out (c->dec->bytes, element
     * strides c->stride, little-endian unless c->big_endian); called from
     * pool workers concurrently. fmtfree releases fmtplan with the job. */
    int (*decode)(struct ujob *j, const struct utensor *t,
                  const struct uchunk *c, char *out, struct ckpt_err *err);
    void (*fmtfree)(void *fmtplan);
};

/* Where the bytes go: the output files laid out by outputs/torch_layout.c and the sink
 * that writes them (outputs/out.c: outputs/local_dir.c or outputs/object_store.c). */
struct ujob_dst {
    struct uns_out *out;            /* NULL in a dry run */
    struct ufile *files;
    size_t nfiles;
    char *tmpdir;                   /* the local output's temporary
                                       directory: scratch for decoded
                                       items (sources/source.c), or NULL */
    struct hf_part *part;           /* --part of an export: the files
                                       the last part writes (hf/part.c),
                                       or NULL; owned */
};

/* One unshard: its three parts, and the engine's shared state (pool
 * workers, memory, first error). */
struct ujob {
    const struct ckpt_unshard_opts *o;
    struct ujob_src src;
    struct ujob_plan plan;
    struct ujob_dst dst;
    struct ckpt_pool *pool;
    struct bufpool bufs;
    pthread_mutex_t mu;
    atomic_int failed;
    struct ckpt_err err;            /* first worker error, under mu */
    pthread_mutex_t dmu;            /* engine/decode.c: the memory gate */
    pthread_cond_t dcv;
    uint64_t dlive;                 /* bytes of decoded chunks held */
};

/* engine/plan.c: start the job of a step that its trainer plans itself
 * (src/trainers/olmo/plan_{legacy,local,core}.c, deepspeed/plan.c): SRC
 * is the step directory, metaname names its metadata in messages, plan is
 * the trainer's state and locate finds each chunk's bytes. Output in OLMo
 * layout unless --layout single. 0, or -1 (out of memory). */
typedef int (*ujob_locate_fn)(struct ujob *j, struct utensor *t,
                              struct uchunk *c, struct ckpt_err *err);
int uns_plan_own_init(struct ujob *j, const char *src, const char *metaname,
                       void *plan, ujob_locate_fn locate, struct ckpt_err *err);

#endif
