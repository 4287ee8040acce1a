/*
 * unshard_int.h - state shared by the unshard phases. Private to
 * src/unshard: do not expose.
 *
 *   source.c  open the checkpoint: metadata, data files, zstd items
 *   plan.c    probe chunks, check coverage, cut tensors into bands
 *   tree.c    the output value tree (planner_data nesting, byte items)
 *   layout.c  split into output files, record/offset layout
 *   engine.c  pool tasks: assemble bands, write, checksum, verify
 *   stout.c   safetensors + JSON output
 *   unshard.c orchestration, temporary names, rename
 */
#ifndef CKPT_UNSHARD_INT_H
#define CKPT_UNSHARD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt/arena.h"
#include "ckpt/dcp.h"
#include "ckpt/pickle.h"
#include "ckpt/pool.h"
#include "ckpt/storage.h"
#include "ckpt/torchfmt.h"
#include "ckpt/unshard.h"
#include "../pickle/ptrmap.h"
#include "../torchfmt/strmap.h"

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
                                  items of this file (source.c), or NULL */
    /* crccheck.c: zip records inside, their CRCs checked as read */
    struct urec **recs;         /* kept in offset order */
    size_t nrecs, reccap;
    /* 0 until the copy starts: reads are not noted; 1: recs is final;
     * 2: records are still added while the copy reads (chunks located
     * by the copy, plan.c), so lookups take the registry's lock. */
    int recs_live;
    /* A local data file in the job's table of open files (source.c): its
     * descriptor may be closed when too many are open (fd is then -1) and
     * is reopened on the next read, checked to be the same file. NULL for
     * files that cannot be reopened (unlinked temporaries, outputs). */
    struct ujob *lru;
    int pins;                  /* reads in progress on fd, under lru->mu */
    uint64_t used;             /* lru->fd_clock at the last read */
    dev_t dev;
    ino_t ino;
    /* srcwhole.c: a small remote file fetched whole ahead, or NULL */
    struct src_pf *pf;
    struct src_whole *whole;
};

/* A stored chunk: where its elements are and how they are laid out. */
struct uchunk {
    const struct ckpt_dcp_chunk *meta;  /* offsets/sizes in the tensor */
    struct usrc *src;       /* NULL for a decoded chunk (dec) */
    uint64_t dec;           /* bytes of the full chunk j->plan.decode decodes
                               (zarr, Orbax; decode.c), or 0 */
    uint64_t item_off;      /* start of the item (its zip) within src */
    uint64_t data;          /* absolute offset of the storage data in src */
    int64_t *stride;        /* arena, ndim; element strides in storage */
    int64_t soff;           /* storage offset, elements */
    int big_endian;
    int conj, neg;          /* a conj / neg view: negate the imaginary
                               parts / every component as copied */
    int skip;               /* identical replica of an earlier chunk */
    atomic_int located;     /* src..big_endian are set (plan.c) */
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
    /* --format hf (hfexport.c): this tensor is rows [row0, row0 +
     * e->size[0]) of whole, whose chunks it shares (chunks ==
     * whole->chunks, located through whole); NULL for a tensor of its
     * own. cast: written as this dtype (hfcast.c), or NULL. */
    struct utensor *whole;
    uint64_t row0;
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
    void *out;              /* the output's state (outobj.c), or NULL */
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
                               band, hfcast.c) */
};

struct uns_out;

/* Where the bytes come from: the checkpoint's files, opened and read by
 * source.c, srcfs.c and crccheck.c. */
struct ujob_src {
    char *top;                      /* SRC as a path or key */
    char *dir;                      /* directory with metadata and data */
    struct ckpt_storage *st;        /* remote SRC, or NULL (local) */
    int st_borrowed;                /* st is opts->storage */
    struct ckpt_storage *ra;        /* read-ahead view of st for the copy
                                       (source.c), or NULL; owned */
    struct src_pf *pf;              /* small files fetched whole ahead
                                       (srcwhole.c), or NULL; owned */
    int olmo_step;                  /* src is an OLMo step */
    int accelerate;                 /* src is an accelerate FSDP step
                                       (checkpoint-N/): the model's DCP
                                       is pytorch_model_fsdp_0/ */
    int allow_replicas;             /* option, or rank-local metadata */
    int rank_check;                 /* rank-local: every dropped replica is
                                       compared as it is copied (ranks.c) */
    int rank0;                      /* rank-local with --rank-values rank0:
                                       replicas are not compared */
    const char *metaname;
    struct usrc **srcs;             /* data files and temp items */
    size_t nsrcs, srccap;
    /* Open data files, bounded so that a step of 1,024 rank files reads
     * under `ulimit -n 256` (source.c). Under ujob.mu. */
    size_t fd_open, fd_cap;
    uint64_t fd_clock;
    struct strmap srcmap;           /* relative_path -> srcs index */
    int recs_live;                  /* usrc.recs_live of sources added
                                       from now on (crccheck.c) */
};

/* What goes where: the tensors and byte items found by a format's planner
 * (plan.c, olmo/plan_legacy.c, olmo*.c, zarr/plan.c, orbax/plan.c), the output value
 * tree (tree.c) and the bands the engine assembles (layout.c). */
struct ujob_plan {
    struct ckpt_dcp_meta *meta;
    struct ckpt_arena *arena;       /* output graph, plan arrays */
    struct utensor *tensors;
    size_t ntensors;
    struct ucopy *copies;
    size_t ncopies, copycap;
    int olmo;                       /* layout olmo chosen */
    int megatron;                   /* a Megatron torch_dist step
                                       (megatron.c) */
    /* stitem.c: safetensors files inside data files, parsed once (under
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
     * reads their items anyway (plan.c uns_plan_locate), not probed
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

/* Where the bytes go: the output files laid out by layout.c and the sink
 * that writes them (out.c: outlocal.c or outobj.c). */
struct ujob_dst {
    struct uns_out *out;            /* NULL in a dry run */
    struct ufile *files;
    size_t nfiles;
    char *tmpdir;                   /* the local output's temporary
                                       directory: scratch for decoded
                                       items (source.c), or NULL */
    struct hf_part *part;           /* --part of an export: the files
                                       the last part writes (hfpart.c),
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
    pthread_mutex_t dmu;            /* decode.c: the memory gate */
    pthread_cond_t dcv;
    uint64_t dlive;                 /* bytes of decoded chunks held */
};

/* source.c */
int uns_src_open(struct ujob *j, const char *src, struct ckpt_err *err);
/* The storage settings of the job's options (--insecure, --retries). */
struct ckpt_storage_cfg uns_storage_cfg(const struct ckpt_unshard_opts *o);
int uns_src_get(struct ujob *j, const char *relpath, struct usrc **out,
            struct ckpt_err *err);
int uns_src_read(struct usrc *s, uint64_t off, void *buf, size_t len,
             struct ckpt_err *err);
/* Size of a file of the source (0), or -1 with err. */
int uns_src_stat(struct ujob *j, const char *path, uint64_t *size,
             struct ckpt_err *err);
/* Open the file at path (in SRC; with local set, a local file even when
 * SRC is remote) as *s, which borrows path; close s->fd (if >= 0) when
 * done. 0 or -1. */
int uns_src_file(struct ujob *j, const char *path, int local, struct usrc *s,
             struct ckpt_err *err);
/* src_file of a file read whole, more than once (train/rank0.pt: checked
 * while planning, then copied): remote and small, it is fetched once and
 * kept (uns_src_whole_file). */
int uns_src_file_whole(struct ujob *j, const char *path, int local,
                       struct usrc *s, struct ckpt_err *err);
/* Copy a whole source file into fd (named `to` in messages). */
/* An anonymous temporary file in the job's scratch directory (O_TMPFILE,
 * else an unlinked mkstemp file): decoded data that is read back. */
int uns_src_tmp_fd(struct ujob *j, struct ckpt_err *err);
int uns_src_copy(struct ujob *j, const char *path, int local, int fd,
             const char *to,
             uint64_t *size, struct ckpt_err *err);
/* The bytes of an item: the data file range, or for transformed items
 * (zstd) a decompressed temporary copy of at most limit bytes. */
int uns_src_item(struct ujob *j, const struct ckpt_dcp_storage *st,
             uint64_t limit, struct usrc **out, uint64_t *off,
             uint64_t *len, struct ckpt_err *err);
void uns_src_rd(struct ckpt_rd *rd, struct usrc *s, uint64_t off, uint64_t len);
/* Like src_rd, for parsing an item's structure (zip records, pickle):
 * from a remote source, small reads are served from a few windows of
 * 64 KiB fetched whole, so one item costs one or two ranged GETs
 * instead of one per record. Local sources read directly. Release the
 * cache (on the caller's stack) when done with rd. */
struct src_cache {
    struct usrc *s;
    uint64_t lo, hi;            /* the range rd may read */
    struct { uint64_t off; size_t len; char *buf; } w[4];
    int n, next;
};
void uns_src_rd_cached(struct ckpt_rd *rd, struct src_cache *c, struct usrc *s,
                   uint64_t off, uint64_t len);
void uns_src_cache_release(struct src_cache *c);
void uns_src_close_all(struct ujob *j);
/* Before the copy: remote data files are read from then on through large
 * blocks fetched ahead (ckpt_storage_open_readahead), within a memory
 * bound; probing, before, reads only what it needs. */
void uns_src_readahead(struct ujob *j);
/* Like src_get for a remote file whose size and ETag a listing gave:
 * no HEAD. */
int uns_src_get_listed(struct ujob *j, const char *relpath, uint64_t size,
                       const char *etag, struct usrc **out,
                       struct ckpt_err *err);
/* Bytes of read-ahead and whole-file memory (CKPT_READAHEAD_MB; 0: off). */
uint64_t uns_src_ra_budget(void);

struct uns_dent;
/* srcwhole.c: the file relpath (kept as a key: in the metadata arena) as
 * listing entry e found it, which the planner is about to read (call in
 * the order it reads them): registered as a source without a HEAD and,
 * when remote, small and within the memory budget, fetched whole by a
 * few threads ahead of the planner; every read of it is then served from
 * memory. e NULL (not listed) or a local source: nothing done. 0, or -1
 * with err. */
int uns_src_prefetch(struct ujob *j, const char *relpath,
                     const struct uns_dent *e, struct ckpt_err *err);
/* Serve a read of s from its whole copy: 1 done, 0 not held (read it as
 * before), -1 with err (out of the file's bounds). */
int uns_src_whole_read(struct usrc *s, uint64_t off, void *buf, size_t len,
                       struct ckpt_err *err);
/* A remote file s opened by path (src_file: size and ETag known), small
 * and within the budget: read whole on its first use, once per job, and
 * served from memory to every reader of the same path and ETag. */
void uns_src_whole_file(struct ujob *j, struct usrc *s);
/* Stop the fetches and free the copies (uns_src_close_all). */
void uns_src_whole_free(struct ujob *j);

/* Register an open file (name malloced, taken over) as a source. */
struct usrc *uns_src_add(struct ujob *j, char *name, int fd, uint64_t size);

/* crccheck.c: a zip record at [off, off+size) of s with CRC-32 crc
 * (named prefix/name in messages) is checked by the copy; thread-safe. */
void uns_src_note_record(struct usrc *s, uint64_t off, uint64_t size,
                     uint32_t crc, const char *prefix, const char *name);
/* Before the copy: makes the registered records findable. */
void uns_src_records_ready(struct ujob *j);
/* src_read that notes the CRC of what it read for the record it lies in. */
int uns_src_read_noted(struct usrc *s, uint64_t off, void *buf, size_t len,
                   struct ckpt_err *err);
/* After the copy: every record something was read from matches its CRC
 * (gaps are read now), else an error naming file and record. */
int uns_src_check_records(struct ujob *j, struct ckpt_err *err);
void uns_src_records_free(struct usrc *s);

/* srcfs.c: directories and small files of the source, read where it is
 * (local, object storage, tar members; j->src.st), for the planners. A
 * listing is kept sorted by name; with recursive, names are paths below
 * dir and only files (and local links) are listed. */
struct uns_dent {
    char *name;
    enum ckpt_entry_type type;
    uint64_t size;
    char *etag;                 /* object storage ETag, or "" */
};
struct uns_dir {
    struct uns_dent *v;
    size_t n, cap;
};
int uns_fs_list(struct ujob *j, const char *dir, int recursive,
                struct uns_dir *d, struct ckpt_err *err);
const struct uns_dent *uns_fs_find(const struct uns_dir *d, const char *name);
/* A file (or a local link, which stat() would follow) named name. */
int uns_fs_has_file(const struct uns_dir *d, const char *name);
void uns_fs_free(struct uns_dir *d);
/* path is a file of the source (stat). */
int uns_fs_is_file(struct ujob *j, const char *path);
/* A whole small file (at most max bytes; NUL-terminated) in one read, as
 * listed in e (size, ETag: a replaced object fails), or with e NULL as its
 * stat finds it. */
int uns_fs_read(struct ujob *j, const char *path, const struct uns_dent *e,
                size_t max, char **data, size_t *len, struct ckpt_err *err);

/* decode.c: acquire room for bytes of decoded chunk (waits while others
 * hold too much: more than UNS_DEC_CAP together, unless none is held),
 * release it after. */
#define UNS_DEC_CAP ((uint64_t)64 << 20)
void uns_dec_init(struct ujob *j);
void uns_dec_acquire(struct ujob *j, uint64_t bytes);
void uns_dec_release(struct ujob *j, uint64_t bytes);
/* After probing: tensors whose every chunk is decoded become chunked (one
 * task per chunk); those whose chunks are whole rows in C order (the
 * usual Orbax and zarr layout) also rows: one band per chunk. */
void uns_dec_bands(struct ujob *j);

/* grid.c: the chunks of an array stored on a regular chunk grid (zarr v2,
 * Orbax), shared by the planners of those formats: e gets one chunk per
 * grid cell (C order of the grid), edge chunks clipped to the shape;
 * each is decoded by j->plan.decode into a full chunk of chunk_bytes laid out
 * in C order (F with fortran). *strides: the element strides of such a
 * chunk (in the metadata's arena). */
struct ugrid {
    int ndim;
    const uint64_t *shape, *chunks;
    int fortran;
    uint64_t chunk_bytes;
};
int uns_grid_chunks(struct ujob *j, struct ckpt_dcp_entry *e,
                    const struct ugrid *g, int64_t **strides,
                    struct ckpt_err *err);
/* Chunk c of a grid array as a decoded chunk (a locate callback's work,
 * in a pool worker). */
void uns_grid_locate(struct uchunk *c, const struct ugrid *g,
                     const int64_t *strides, int big_endian);
/* Grid index of chunk c of a grid array. */
void uns_grid_index(const struct uchunk *c, const struct ugrid *g,
                    uint64_t *idx);
/* Fill out (chunk_bytes) with the element fill, itemsize bytes. */
void uns_grid_fill(char *out, uint64_t chunk_bytes, const void *fill,
                   size_t itemsize);

/* plan.c */
int uns_plan_tensors(struct ujob *j, struct ckpt_err *err);
/* ranks.c: before planning, a rank-local checkpoint's keys whose ranks
 * saved different values are an error, or split into KEY.rankR entries,
 * by o->rank_values; sets src.rank_check. */
int uns_rank_values(struct ujob *j, struct ckpt_err *err);
/* The error for tensor t whose replica chunk c differs from the chunk it
 * replicates (the engine's check). */
int uns_rank_tensor_error(const struct ujob *j, const struct utensor *t,
                          const struct uchunk *c, struct ckpt_err *err);
/* Chunk c of t located (its item parsed and checked against the
 * metadata, its zip record registered for the CRC check), once, from any
 * pool worker: the copy calls it before reading c. 0, or -1 with err
 * naming tensor and chunk. */
int uns_plan_locate(struct ujob *j, struct utensor *t,
                    struct uchunk *c, struct ckpt_err *err);
/* After the copy: every chunk it did not read (replicas skipped, empty
 * boxes) located too, so each item is checked as when probed up front. */
int uns_plan_locate_rest(struct ujob *j, struct ckpt_err *err);
void uns_plan_band_box(const struct utensor *t, uint64_t band, uint64_t *lo,
                   uint64_t *hi, uint64_t *dst_off, uint64_t *len);
/* Bands of t of at most target bytes (t->nbytes and t->e set). */
void uns_plan_cut_bands(struct utensor *t, uint64_t target);

/* tree.c */
int uns_tree_build(struct ujob *j, struct ckpt_pv **root, struct ckpt_err *err);

/* tree.c, for formats that build their own graph (olmo/plan_legacy.c): the output
 * node of tensor t, and e's storages in v remapped to output records. */
struct ckpt_pv *uns_tree_tensor(struct ujob *j, struct utensor *t);
int uns_tree_remap(struct ujob *j, const struct ckpt_dcp_entry *e,
               struct ckpt_pv *v, const struct ckpt_tzip *z,
               const struct ckpt_rd *rd, struct usrc *src,
               struct ckpt_err *err);

/* n elements of dtype from (little-endian) at in as float32 (Tensor.float()
 * of a buffer); exported for the unit test. */
void uns_ds_to_f32(const struct ckpt_dtype *from, const unsigned char *in,
                   uint64_t n, float *out);
/* n float32 values as little-endian bfloat16, as torch casts them. */
void uns_ds_f32_to_bf16(const float *in, uint64_t n, unsigned char *out);

/* olmo/plan_legacy.c: OLMo torch_legacy rank*.pt steps */
/* Structural equality of two values from the rank files za and zb
 * (storages by record size and CRC), as legacy steps compare ranks. */
int uns_legacy_same(const struct ckpt_tzip *za, const struct ckpt_pv *a,
                const struct ckpt_tzip *zb, const struct ckpt_pv *b);

/* unshard.c: start the job of an OLMo step that a format file plans
 * itself (olmo/plan_legacy.c, olmo/plan_local.c, olmo/plan_core.c): SRC is the step
 * directory, metaname names its metadata in messages, plan is the
 * format's state and locate finds each chunk's bytes. Output in OLMo
 * layout unless --layout single. 0, or -1 (out of memory). */
typedef int (*ujob_locate_fn)(struct ujob *j, struct utensor *t,
                              struct uchunk *c, struct ckpt_err *err);
int uns_olmo_job_init(struct ujob *j, const char *src, const char *metaname,
                  void *plan, ujob_locate_fn locate, struct ckpt_err *err);

/* flat.c: the range [start, start+count) of the row-major flattening of
 * a tensor of shape size[ndim], cut into boxes (at most 2*ndim-1; a
 * scalar is one box with no dims). Box b holds the elements of the range
 * whose indices lie in off..off+len; 'first' is the flat index of its
 * origin, so element i of the box sits at range position
 * first - start + sum(i[k] * row-major stride[k]). Returns the number of
 * boxes, or -1 if the range is out of bounds or needs more than cap. */
struct flat_box {
    uint64_t off[CKPT_MAX_DIMS], len[CKPT_MAX_DIMS];
    uint64_t first;
};
int uns_flat_boxes(int ndim, const uint64_t *size, uint64_t start,
               uint64_t count, struct flat_box *out, int cap);


/* layout.c */
int uns_layout_files(struct ujob *j, struct ckpt_pv *root,
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

/* engine.c */
void uns_job_fail(struct ujob *j, const struct ckpt_err *err);
int uns_engine_run(struct ujob *j, int verify, struct ckpt_err *err);
/* Remote output, before anything is written: tensors decoded chunk by
 * chunk whose chunks are not whole rows get bands of whole chunk rows, or
 * a scratch file (--tmp-dir) to be decoded into. 0, or -1 with err. */
int uns_engine_remote_plan(struct ujob *j, struct ckpt_err *err);
int uns_bufpool_init(struct bufpool *b, size_t size);
void uns_bufpool_release(struct bufpool *b);

/* stout.c */
int uns_st_layout(struct ujob *j, struct ckpt_pv *root, struct ckpt_err *err);

/* out.c: where the outputs go. Two kinds: a local directory (outlocal.c:
 * files in a temporary directory beside DEST, pwrite, fsync, then one
 * atomic rename) and a prefix of object storage (outobj.c: one multipart
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
    int remote;                 /* object storage: see outobj.c */
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
/* outlocal.c / outobj.c */
int uns_outlocal_open(struct ujob *j, const char *dest,
                      struct ckpt_err *err);
int uns_outobj_open(struct ujob *j, const char *dest, struct ckpt_err *err);
/* outobj.c: the memory gate of a remote output. A task that will write
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

/* verify.c: outputs read back through ckpt's own readers */
int uns_verify_outputs(struct ujob *j, struct ckpt_err *err);

/* stitem.c: locate chunk c of t when its item at off of s is a
 * safetensors file (serialization_format=SAFETENSORS): 1 done, 0 not
 * safetensors (a torch zip), -1 with err. */
int uns_st_item_locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                       struct usrc *s, uint64_t off, struct ckpt_err *err);
void uns_st_items_free(struct ujob *j);

/* megatron.c: a Megatron torch_dist step, read as DCP. After the
 * metadata is read: common.pt, when present, becomes a byte item. */
int uns_mg_open(struct ujob *j, struct ckpt_err *err);
/* The DCP source could not be opened: a legacy Megatron step (mp_rank_*
 * directories) says so in err instead. */
void uns_mg_explain(struct ujob *j, struct ckpt_err *err);
/* The tree built: the common state becomes the root, every other entry
 * merged into it (Megatron's dict_utils.merge). */
int uns_mg_merge(struct ujob *j, struct ckpt_pv **root,
                 struct ckpt_err *err);

/* copycmp.c: each file res made is in the copy below dir of st with its
 * size and MD5 (read back): NULL, or why not (malloced). */
char *uns_copy_differs(struct ckpt_storage *st, const char *dir,
                       const struct ckpt_unshard_result *res);

#endif
