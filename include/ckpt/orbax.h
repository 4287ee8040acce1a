/*
 * ckpt/orbax.h - Orbax (JAX) checkpoints: TensorStore's OCDBT key-value
 * store (manifest, version tree and B+tree nodes), zarr v3 array metadata
 * and chunks, and the step model on top. Layout: docs/formats/orbax.md.
 *
 * Every decoder takes untrusted bytes: sizes are checked against the
 * input before anything is allocated, decompressed sizes are capped, and
 * all parsed objects live in one arena per call (freed with
 * ckpt_arena_free on the object's arena).
 */
#ifndef CKPT_ORBAX_H
#define CKPT_ORBAX_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/err.h"
#include "ckpt/torchfmt.h"
#include "ckpt/zarr.h"

/* --- OCDBT (tensorstore/kvstore/ocdbt/index.rst) -------------------------- */

#define CKPT_OCDBT_MANIFEST_MAGIC 0x0cdb3a2au
#define CKPT_OCDBT_VTREE_MAGIC 0x0cdb1234u
#define CKPT_OCDBT_BTREE_MAGIC 0x0cdb20deu
/* Largest encoded manifest or node ckpt reads, and largest decoded body
 * (TensorStore's default max_decoded_node_bytes is 8 MiB). */
#define CKPT_OCDBT_MAX_NODE ((size_t)64 << 20)
#define CKPT_OCDBT_MAX_PATH 65535u
#define CKPT_OCDBT_MAX_ARITY (1u << 20)
/* offset == length == this: a generation without a B+tree (empty db). */
#define CKPT_OCDBT_MISSING UINT64_MAX

/* CRC-32C (Castagnoli, reflected 0x82f63b78), incremental from 0. */
uint32_t ckpt_crc32c(uint32_t crc, const void *p, size_t n);

/* A data file: full path relative to the database root (transitive base
 * path + base_path + relative_path); base_len bytes of it are the
 * transitive path children of a node read from this file inherit. */
struct ckpt_ocdbt_file {
    char *path;
    size_t len, base_len;
};

struct ckpt_ocdbt_ref {
    const struct ckpt_ocdbt_file *file;   /* NULL when missing */
    uint64_t offset, length;
};

struct ckpt_ocdbt_stats {
    uint64_t num_keys, num_tree_bytes, num_indirect_value_bytes;
};

/* A B+tree root of one generation (version tree leaf entry). */
struct ckpt_ocdbt_version {
    uint64_t generation;
    uint8_t root_height;
    struct ckpt_ocdbt_ref root;
    struct ckpt_ocdbt_stats stats;
    uint64_t commit_time;
};

/* A version tree node reference (interior entry). */
struct ckpt_ocdbt_vref {
    uint64_t generation;
    struct ckpt_ocdbt_ref loc;
    uint64_t num_generations, commit_time;
    uint8_t height;
};

struct ckpt_ocdbt_manifest {
    struct ckpt_arena *arena;
    unsigned char uuid[16];
    unsigned manifest_kind;     /* 0 single, 1 numbered (config only) */
    uint64_t max_inline_value_bytes, max_decoded_node_bytes;
    uint8_t arity_log2;
    unsigned compression;       /* 0 none, 1 zstd */
    int32_t zstd_level;
    size_t nfiles;
    struct ckpt_ocdbt_file *files;
    size_t nversions;           /* 0 for a numbered manifest */
    struct ckpt_ocdbt_version *versions;
    size_t nvnodes;
    struct ckpt_ocdbt_vref *vnodes;
};

struct ckpt_ocdbt_vtree {
    struct ckpt_arena *arena;
    uint8_t arity_log2, height;
    size_t nfiles;
    struct ckpt_ocdbt_file *files;
    size_t nversions;           /* height 0 */
    struct ckpt_ocdbt_version *versions;
    size_t nvnodes;             /* height > 0 */
    struct ckpt_ocdbt_vref *vnodes;
};

/* Keys are relative to the node's prefix (the path from the root). */
struct ckpt_ocdbt_entry {
    const unsigned char *key;
    size_t keylen;
    /* leaf */
    int indirect;
    const unsigned char *value;     /* inline value */
    struct ckpt_ocdbt_ref ref;      /* indirect value, or interior child */
    /* interior */
    size_t subtree_prefix_len;
    struct ckpt_ocdbt_stats stats;
};

struct ckpt_ocdbt_btree {
    struct ckpt_arena *arena;
    uint8_t height;
    size_t nfiles;
    struct ckpt_ocdbt_file *files;
    size_t n;
    struct ckpt_ocdbt_entry *entries;
};

/* Parse an encoded object (whole file, or the range a reference names).
 * base is the transitive path of the referencing node ("" for the
 * manifest). Fail with CKPT_EFORMAT naming name: bad magic, length,
 * version, CRC-32C, compression, truncated or trailing data, a decoded
 * body over CKPT_OCDBT_MAX_NODE, invalid tables or references.
 * On success the caller frees (*out)->arena. */
int ckpt_ocdbt_manifest_parse(const void *p, size_t n, const char *name,
                              struct ckpt_ocdbt_manifest **out,
                              struct ckpt_err *err);
int ckpt_ocdbt_vtree_parse(const void *p, size_t n, const char *base,
                           const char *name, struct ckpt_ocdbt_vtree **out,
                           struct ckpt_err *err);
int ckpt_ocdbt_btree_parse(const void *p, size_t n, const char *base,
                           const char *name, struct ckpt_ocdbt_btree **out,
                           struct ckpt_err *err);

/* The data file table alone (exposed for tests and the fuzz target):
 * parse it at p[0..n) into a, *used = bytes consumed. */
int ckpt_ocdbt_files_parse(const unsigned char *p, size_t n,
                           const char *base, struct ckpt_arena *a,
                           struct ckpt_ocdbt_file **files, size_t *nfiles,
                           size_t *used, const char *name,
                           struct ckpt_err *err);

/* --- zarr v3 (zarr-specs v3.0 core, sharding_indexed) --------------------- */

#define CKPT_ZARR3_MAX_META (1u << 20)
#define CKPT_ZARR3_MAX_CODECS 8

struct ckpt_zarr3 {
    int ndim;
    uint64_t shape[CKPT_MAX_DIMS];
    uint64_t chunks[CKPT_MAX_DIMS];     /* regular grid (outer, or shard) */
    const struct ckpt_dtype *dtype;
    int has_fill;
    unsigned char fill[16];             /* one element, little-endian */
    char sep;                           /* chunk key separator */
    int v2_keys;                        /* chunk_key_encoding "v2" */
    /* array -> bytes codecs, applied to one (inner) chunk */
    int order[CKPT_MAX_DIMS];           /* transpose; identity if none */
    int big_endian;
    int zstd;                           /* bytes -> bytes zstd */
    int crc32c;                         /* bytes -> bytes crc32c */
    /* sharding_indexed: chunks is the shard, inner the chunk */
    int sharded;
    uint64_t inner[CKPT_MAX_DIMS];
    int index_at_end;
    int index_crc32c;
    uint64_t chunk_bytes;               /* decoded inner (or only) chunk */
};

/* Parse a zarr.json array document. CKPT_EFORMAT when malformed,
 * CKPT_EUNSUPPORTED for codecs, grids or dtypes ckpt does not read. */
int ckpt_zarr3_parse(const char *json, size_t len, const char *name,
                     struct ckpt_zarr3 *z, struct ckpt_err *err);

/* Decode one stored (inner) chunk into out (z->chunk_bytes bytes, C order,
 * little-endian). scratch must hold chunk_bytes when a transpose or zstd
 * is configured. */
int ckpt_zarr3_decode(const struct ckpt_zarr3 *z, const void *in,
                      size_t inlen, void *out, void *scratch,
                      const char *name, struct ckpt_err *err);

/* Decode a shard's encoded index (index, n bytes: 16 per inner chunk,
 * plus 4 with crc32c) of a shard of shard_size bytes: for each of nchunks
 * inner chunks (C order) offset/length within the shard, or UINT64_MAX
 * both when absent. idx holds 2 * nchunks values. */
int ckpt_zarr3_shard_index(const struct ckpt_zarr3 *z, const void *index,
                           size_t n, uint64_t shard_size, uint64_t nchunks,
                           uint64_t *idx, const char *name,
                           struct ckpt_err *err);
/* Inner chunks per shard (product of shard / inner per dim). */
uint64_t ckpt_zarr3_inner_per_shard(const struct ckpt_zarr3 *z);

/* --- Orbax items ---------------------------------------------------------- */

/* One array of an item: its zarr metadata, v2 (.zarray) or v3
 * (zarr.json). Storage chunks are the zarr chunks, or the inner chunks
 * of a sharded array; decoded chunks are full-size, C order unless
 * fortran, little-endian. */
struct ckpt_orbax_array {
    char *name;                 /* pytree path, dotted */
    int v3;
    struct ckpt_zarray z2;
    struct ckpt_zarr3 z3;
    const struct ckpt_dtype *dtype;
    int ndim;
    const uint64_t *shape;
    const uint64_t *chunks;     /* storage chunk shape */
    uint64_t chunk_bytes;
    int fortran;
    int has_fill;
    const unsigned char *fill;  /* one element */
    uint64_t nbytes;            /* of the whole array */
    /* An array stored raw in the item's legacy msgpack `checkpoint` file
     * (Flax ndarray extension): C order, little-endian, at raw_off; its
     * storage chunks are runs of rows of at most CKPT_ORBAX_RAW_CHUNK. */
    int raw;
    uint64_t raw_off;
    uint64_t raw_shape[CKPT_MAX_DIMS], raw_chunks[CKPT_MAX_DIMS];
};

#define CKPT_ORBAX_RAW_CHUNK ((uint64_t)16 << 20)
/* Largest legacy `checkpoint` file parsed (it is read whole). */
#define CKPT_ORBAX_MAX_MSGPACK ((uint64_t)256 << 20)

struct ckpt_orbax;

/* How an OCDBT database's files are reached; rel is relative to the
 * database directory. size: 0, or -1 with err (CKPT_EFORMAT "missing"
 * when the file does not exist). read: exactly len bytes at off. */
struct ckpt_orbax_io {
    void *ctx;
    int (*size)(void *ctx, const char *rel, uint64_t *size,
                struct ckpt_err *err);
    int (*read)(void *ctx, const char *rel, uint64_t off, uint64_t len,
                void *buf, struct ckpt_err *err);
    /* The old format: each array document ("NAME/.zarray" or
     * "NAME/zarr.json") of the item, in any order. */
    int (*list)(void *ctx, int (*fn)(void *ud, const char *rel), void *ud,
                struct ckpt_err *err);
    /* The names of the files directly in the database directory (where
     * numbered manifests are found), in any order; NULL when the files
     * cannot be listed (a numbered database is then CKPT_EUNSUPPORTED). */
    int (*names)(void *ctx, int (*fn)(void *ud, const char *name), void *ud,
                 struct ckpt_err *err);
};

/* Whether name is a numbered manifest, "manifest." and 16 hex digits
 * (TensorStore writes "manifest.%016x"), of generation *gen >= 1. */
int ckpt_ocdbt_numbered_name(const char *name, uint64_t *gen);

/* Whether an OCDBT database (named name in messages) is whole: reads the
 * manifest and every B+tree node of the latest generation through io and
 * checks each data file a node or value references exists and holds the
 * referenced range. Data files are only sized, never read. *nkeys: keys
 * found. 0 whole; 1 incomplete: a referenced data file is missing
 * (io's size fails with CKPT_ENOTFOUND) or too short, err says which;
 * -1 anything else: an undecodable manifest or node (CKPT_EFORMAT), a
 * database ckpt cannot read (CKPT_EUNSUPPORTED), I/O errors. */
int ckpt_ocdbt_check(const struct ckpt_orbax_io *io, const char *name,
                     uint64_t *nkeys, struct ckpt_err *err);

/* An item directory holds manifest.ocdbt (OCDBT) or _METADATA with one
 * zarr v2 directory per array (the old format). */
int ckpt_orbax_is_item(const char *dir);
/* Open a local item directory: read the manifest and every B+tree node
 * (checking each referenced data file exists and is long enough), or
 * scan the array directories; parse every array's metadata. */
int ckpt_orbax_open(const char *dir, struct ckpt_orbax **out,
                    struct ckpt_err *err);
/* The same for an item reached through io (named name in messages): for
 * listing; chunks are read from local items only. ocdbt: the item holds
 * manifest.ocdbt (else the old format, through io->list). */
int ckpt_orbax_open_io(const struct ckpt_orbax_io *io, const char *name,
                       int ocdbt, struct ckpt_orbax **out,
                       struct ckpt_err *err);
/* An item in object storage (or any ckpt_storage) at key prefix dir:
 * manifest, nodes, metadata and chunks by ranged reads. */
struct ckpt_storage;
int ckpt_orbax_open_storage(struct ckpt_storage *st, const char *dir,
                            struct ckpt_orbax **out, struct ckpt_err *err);
size_t ckpt_orbax_count(const struct ckpt_orbax *o);
const struct ckpt_orbax_array *ckpt_orbax_get(const struct ckpt_orbax *o,
                                              size_t i);
/* Storage chunks along each dimension of array i. */
void ckpt_orbax_grid(const struct ckpt_orbax *o, size_t i, uint64_t *grid);
/* Decode storage chunk idx of array i into out (chunk_bytes); scratch
 * holds chunk_bytes too. 0, 1 if the chunk was never written (the caller
 * fills), or -1 with err. */
int ckpt_orbax_chunk(struct ckpt_orbax *o, size_t i, const uint64_t *idx,
                     void *out, void *scratch, struct ckpt_err *err);
void ckpt_orbax_close(struct ckpt_orbax *o);

/* Every array of every item of the Orbax checkpoint at directory dir of
 * tree t (src/run/orbaxls.c): fn(ud, item, array), items and arrays in
 * name order. Reads manifests, B+tree nodes and array metadata only.
 * fn returning non-zero stops (that value is returned). */
struct ckpt_tree;
typedef int (*ckpt_orbax_array_fn)(void *ud, const char *item,
                                   const struct ckpt_orbax_array *a);
int ckpt_orbax_tree_arrays(struct ckpt_tree *t, const char *dir,
                           ckpt_orbax_array_fn fn, void *ud,
                           struct ckpt_err *err);

#endif
