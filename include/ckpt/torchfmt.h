/*
 * ckpt/torchfmt.h - torch.save files without torch: dtypes, the zip
 * container, tensors inside it, and the class allow-lists that decide what
 * a pickle may name; also safetensors headers.
 *
 * Formats: see docs/formats/dcp.md and the fact sheet (torch.save zip:
 * stored members, sizes only in the central directory, ZIP64, "FB" padding
 * so data is 64-byte aligned, optional byteorder record).
 */
#ifndef CKPT_TORCHFMT_H
#define CKPT_TORCHFMT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/arena.h"
#include "ckpt/buf.h"
#include "ckpt/err.h"
#include "ckpt/pickle.h"

/* torch allows up to 64 dimensions. */
#define CKPT_MAX_DIMS 64

/* --- dtypes ------------------------------------------------------------ */

struct ckpt_dtype {
    const char *name;      /* torch name without "torch.": "float32" */
    const char *storage;   /* typed storage class ("FloatStorage") or NULL
                              for dtypes saved only through
                              _rebuild_tensor_v3 / UntypedStorage */
    const char *st;        /* safetensors dtype ("F32") or NULL */
    unsigned itemsize;     /* bytes per element */
    unsigned swap;         /* byte-swap unit for big-endian input */
};

/* By torch name ("float32"; "torch.float32" is accepted too). NULL if
 * unknown. */
const struct ckpt_dtype *ckpt_dtype_by_name(const char *name);
/* By safetensors name ("F32", "BF16"). NULL if unknown. */
const struct ckpt_dtype *ckpt_dtype_by_st(const char *st);
/* By typed storage class name ("FloatStorage"). NULL if unknown. */
const struct ckpt_dtype *ckpt_dtype_by_storage(const char *cls);
/* The dtype that a GLOBAL node names (torch.float32), or NULL. */
const struct ckpt_dtype *ckpt_dtype_from_pv(const struct ckpt_pv *v);

/* --- class allow-lists (ckpt_pickle_allow_fn, ud unused) ---------------- */

/* Tensors: torch._utils rebuild functions, storages, dtypes, torch.Size,
 * collections.OrderedDict, torch.serialization._get_layout. */
int ckpt_torch_allow_tensor(void *ud, const char *module, const char *name);
/* DCP .metadata: the tensor list plus the DCP dataclasses (by class name,
 * any torch.distributed module), getattr for the memory-format enum,
 * torch.device and pathlib paths (StorageMeta.checkpoint_id). */
int ckpt_torch_allow_metadata(void *ud, const char *module,
                              const char *name);
/* Post-parse check for metadata graphs: builtins.getattr only on a class
 * with a public attribute name (enum members). Returns 0, or -1 with err
 * "NAME: class 'builtins.getattr' not allowed ...". */
int ckpt_torch_check_object(const struct ckpt_pv *root, const char *name,
                            struct ckpt_err *err);
/* torch.load(weights_only=True)'s default list of torch 2.6 (torch types,
 * storages, dtypes, rebuild functions, OrderedDict, Counter, set,
 * bytearray, _codecs.encode), dtypes newer than 2.6 that ckpt writes too. */
int ckpt_torch_allow_weights(void *ud, const char *module, const char *name);
/* What ckpt writes into its outputs (docs/formats/pickle.md): the weights
 * list plus pathlib paths and numpy arrays (OLMo trainer state). */
int ckpt_torch_allow_object(void *ud, const char *module, const char *name);
/* What a Megatron step's common state holds and megatron.core registers
 * with torch.serialization.add_safe_globals on import
 * (megatron/core/safe_globals.py SAFE_GLOBALS): argparse.Namespace, its
 * enums, signal.Signals, ... Written for Megatron steps only. */
int ckpt_torch_allow_megatron(void *ud, const char *module,
                              const char *name);

/* Whether globals outside ckpt_torch_allow_object may be written. */
typedef void (*ckpt_pickle_warn_fn)(void *ud, const char *item,
                                    const char *module, const char *name);
struct ckpt_pickle_gate {
    int allow_unsafe;          /* pass them through, calling warn */
    ckpt_pickle_warn_fn warn;  /* NULL: silent */
    void *ud;
    ckpt_pickle_allow_fn also; /* more globals allowed (a trainer's own,
                                  e.g. ckpt_torch_allow_megatron), or NULL */
};
/* Check every global reachable from root, a value about to be written as
 * `item` (e.g. "checkpoint.pt['extra']"). Returns 0, or -1 with err
 * (CKPT_EUNSAFE) "ITEM: pickle global 'module.name' is not allowed (use
 * --allow-unsafe-pickle to pass it through)". With g->allow_unsafe each
 * such global (once per node) goes to g->warn instead. g may be NULL. */
int ckpt_torch_check_written(const struct ckpt_pv *root, const char *item,
                             const struct ckpt_pickle_gate *g,
                             struct ckpt_err *err);

/* --- random-access input ------------------------------------------------ */

/* Reads exactly len bytes at off (relative to the start of this input) or
 * fails; shorter input is an error naming `name`. Thread-safe when ctx is. */
struct ckpt_rd {
    int (*read)(void *ctx, uint64_t off, void *buf, size_t len,
                struct ckpt_err *err);
    void *ctx;
    uint64_t base;     /* added to every offset passed to read */
    uint64_t size;     /* bytes available from base */
    const char *name;  /* for messages */
};

/* Read from rd's range: checks off+len against size, then reads. */
int ckpt_rd_read(const struct ckpt_rd *rd, uint64_t off, void *buf,
                 size_t len, struct ckpt_err *err);
/* An input over memory (borrowed). */
void ckpt_rd_mem(struct ckpt_rd *rd, const void *data, size_t len,
                 const char *name);

/* --- torch.save zip ------------------------------------------------------ */

struct ckpt_tzip_entry {
    const char *name;      /* record name after the prefix ("data.pkl") */
    uint64_t data_off;     /* offset of the data within the input */
    uint64_t size;
    uint32_t crc;          /* from the central directory (may be 0) */
};

struct ckpt_tzip {
    struct ckpt_arena *arena;        /* owned; everything below lives here */
    const char *prefix;              /* "archive", "consolidated", ... */
    struct ckpt_tzip_entry *entries; /* sorted by name */
    size_t n;
    int big_endian;                  /* byteorder record says "big" */
};

/* Parse the zip in rd (torch.save's layout, any prefix, ZIP64, bytes
 * before the archive). Only stored (uncompressed) records. */
int ckpt_tzip_open(struct ckpt_tzip **out, const struct ckpt_rd *rd,
                   struct ckpt_err *err);
void ckpt_tzip_free(struct ckpt_tzip *z);
/* Record by name after the prefix, or NULL. */
const struct ckpt_tzip_entry *ckpt_tzip_find(const struct ckpt_tzip *z,
                                             const char *name);
/* Read a whole record (at most max bytes) into a malloced buffer. */
int ckpt_tzip_read(const struct ckpt_tzip *z, const struct ckpt_rd *rd,
                   const struct ckpt_tzip_entry *e, size_t max, char **data,
                   size_t *len, struct ckpt_err *err);

/* Whether the torch.save zip in rd is whole, from its tail and central
 * directory only: 0 whole; 1 cut short or broken (err says how); -1 with
 * err: CKPT_EUNSUPPORTED when rd is not a zip at all (cannot be judged),
 * else an I/O error. */
int ckpt_tzip_whole(const struct ckpt_rd *rd, struct ckpt_err *err);

/* --- tensors ----------------------------------------------------------- */

struct ckpt_tensor {
    const struct ckpt_dtype *dtype;
    int ndim;
    int64_t size[CKPT_MAX_DIMS];
    int64_t stride[CKPT_MAX_DIMS];
    int64_t storage_offset;   /* in elements */
    const char *key;          /* storage record key ("0"); borrowed */
    uint64_t storage_nbytes;  /* from the persistent id */
    int requires_grad;
    /* A conj / neg view saved unresolved (only from
     * ckpt_tensor_item_load): the values are the stored elements with
     * the imaginary parts (conj) or every component (neg) negated. */
    int conj, neg;
};

/* Interpret v as a tensor: a call of torch._utils._rebuild_tensor(_v2,
 * _v3) or _rebuild_parameter(_with_state) over a storage persistent id.
 * Returns 1 if v is one (t filled), 0 if v is not a tensor call, -1 with
 * err for a malformed or unsupported tensor (unknown dtype, conj/neg bit,
 * quantized). `name` prefixes messages. */
int ckpt_tensor_from_pv(const struct ckpt_pv *v, struct ckpt_tensor *t,
                        const char *name, struct ckpt_err *err);
/* Bytes of storage the tensor reaches: checks that offset and strides stay
 * within storage_nbytes. 0 or -1. */
int ckpt_tensor_check_bounds(const struct ckpt_tensor *t, const char *name,
                             struct ckpt_err *err);
/* Element count; 0 or -1 on overflow. */
int ckpt_tensor_numel(const struct ckpt_tensor *t, uint64_t *out);

/* A tensor stored as one torch.save zip (a DCP tensor item): where its
 * elements are in rd. */
struct ckpt_tensor_loc {
    struct ckpt_tensor t;
    char key[32];            /* t.key points here */
    uint64_t data_off;       /* storage record offset within rd */
    uint64_t data_size;      /* record size in bytes */
    uint32_t crc;            /* the record's CRC-32 (central directory) */
    char rec[128];           /* its name, "archive/data/0" (messages) */
    int big_endian;
};

/* Open the zip in rd, parse data.pkl (tensor allow-list) and locate the
 * single tensor it holds. A conj or neg view (float or complex dtypes) is
 * accepted: out->t.conj / neg say how the stored values are meant. */
int ckpt_tensor_item_load(const struct ckpt_rd *rd,
                          struct ckpt_tensor_loc *out, struct ckpt_err *err);

/* --- safetensors (reader) ---------------------------------------------- *
 *
 * An 8-byte little-endian header length, a JSON header
 * {name: {"dtype", "shape", "data_offsets": [begin, end]},
 *  "__metadata__": {str: str}} and the data section, offsets relative to
 * its start. Checked as the reference reader does: header at most 100 MB,
 * starting with '{'; known dtypes; end - begin = numel * itemsize without
 * overflow; in offset order the tensors tile the data section exactly and
 * it ends the input. Names must be unique. */

struct ckpt_safetensors_tensor {
    const char *name;
    const struct ckpt_dtype *dtype;
    int ndim;
    const uint64_t *shape;      /* ndim */
    uint64_t numel;
    uint64_t offset;            /* first data byte, within the input */
    uint64_t nbytes;
};

struct ckpt_safetensors {
    struct ckpt_arena *arena;                 /* owned; everything below */
    struct ckpt_safetensors_tensor *tensors;  /* sorted by name */
    size_t n;
    uint64_t data_start;                      /* 8 + header length */
    const char *dcp_sharding;   /* __metadata__["DCP_SHARDING_INFO"] (torch
                                   DCP's safetensors writers), or NULL */
};

/* Read and check the header of the safetensors file in rd (its size is
 * the file's). *out is freed with ckpt_safetensors_free. 0, or -1 with
 * err (CKPT_EFORMAT naming rd->name; CKPT_EUNSUPPORTED for a dtype ckpt
 * does not know). */
int ckpt_safetensors_open(struct ckpt_safetensors **out,
                          const struct ckpt_rd *rd, struct ckpt_err *err);
/* The same for header bytes already in memory (header[0..len), the JSON
 * after the length field) of a file whose data section has data_len
 * bytes; name is for messages. */
int ckpt_safetensors_parse(struct ckpt_safetensors **out, const void *header,
                           size_t len, uint64_t data_len, const char *name,
                           struct ckpt_err *err);
/* Tensor by name, or NULL. */
const struct ckpt_safetensors_tensor *
ckpt_safetensors_find(const struct ckpt_safetensors *s, const char *name);
/* Where tensor t of s sits in its DCP tensor: the "saved_offsets" that
 * torch DCP's safetensors writers (FileSystemWriter with
 * serialization_format=SAFETENSORS, HuggingFaceStorageWriter) record per
 * tensor in __metadata__["DCP_SHARDING_INFO"], a JSON string
 * {name: {"saved_offsets": [int, ...]}}. off gets t->ndim values. 1 when
 * recorded, 0 when s has no sharding info at all (a whole tensor: zeros),
 * -1 with err when it is there but malformed or lacks t. */
int ckpt_safetensors_saved_offsets(const struct ckpt_safetensors *s,
                                   const struct ckpt_safetensors_tensor *t,
                                   uint64_t *off, const char *name,
                                   struct ckpt_err *err);
/* NULL-safe. */
void ckpt_safetensors_free(struct ckpt_safetensors *s);

/* --- zip writer (layout first, bytes later) ---------------------------- *
 *
 * Writers that place data with pwrite from many threads need every offset
 * before any byte is written: ckpt_zipw_layout assigns them, the data is
 * written at data_off, and once the CRCs are known the local headers and
 * the central directory are serialised. Records are stored, their data
 * 64-byte aligned through torch's "FB" padding extra field, with real
 * sizes and CRC in the local header (no data descriptors), ZIP64 extras
 * where a size or offset needs them, and the ZIP64 end records always, as
 * torch writes them. */

struct ckpt_zipw_rec {
    const char *name;     /* full name with prefix ("checkpoint/data/0") */
    uint64_t size;
    uint32_t crc;         /* set before serialising headers */
    uint64_t lho;         /* assigned: local header offset */
    uint64_t data_off;    /* assigned: data offset (multiple of 64) */
};

/* Assign lho/data_off to recs in order starting at offset 0; *cd_off is
 * where the central directory goes, *total the whole file size. */
void ckpt_zipw_layout(struct ckpt_zipw_rec *recs, size_t n,
                      uint64_t *cd_off, uint64_t *total);
/* The local header of r (data_off - lho bytes) into out (appended). */
void ckpt_zipw_local_header(const struct ckpt_zipw_rec *r,
                            struct ckpt_buf *out);
/* Central directory and end records (appended to out). */
void ckpt_zipw_central(const struct ckpt_zipw_rec *recs, size_t n,
                       uint64_t cd_off, struct ckpt_buf *out);

/* CRC-32 (zip / IEEE), incremental: crc = ckpt_crc32(crc, p, n) from 0. */
uint32_t ckpt_crc32(uint32_t crc, const void *p, size_t n);
/* CRC of A||B from crc(A), crc(B) and len(B). */
uint32_t ckpt_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
