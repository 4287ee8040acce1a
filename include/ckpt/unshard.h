/*
 * ckpt/unshard.h - consolidate a sharded checkpoint into whole tensors.
 *
 * Plan first, then copy: the metadata gives every output tensor's place in
 * the output files and, for every stored chunk, the slabs it contributes
 * (any N-d box). Coverage is checked before a byte is written (every
 * element exactly once; identical replicas only with allow_replicas).
 * Pool workers then read chunk bytes with pread and write them with pwrite
 * straight to their final offsets in preallocated output files, one
 * bounded band of a tensor per task, so memory does not grow with the
 * checkpoint. Outputs are written under temporary names and renamed only
 * when complete.
 */
#ifndef CKPT_UNSHARD_H
#define CKPT_UNSHARD_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"
#include "ckpt/storage.h"

enum ckpt_unshard_layout {
    CKPT_LAYOUT_AUTO = 0,   /* olmo for OLMo steps, else single */
    CKPT_LAYOUT_SINGLE,     /* checkpoint.pt: the whole state dict */
    CKPT_LAYOUT_OLMO        /* model.pt, optim.pt, train.pt */
};

enum ckpt_unshard_format {
    CKPT_FORMAT_TORCH = 0,  /* torch.save zip files */
    CKPT_FORMAT_SAFETENSORS,
    /* A Hugging Face model directory: the model's weights under HF
     * names in model.safetensors (or shards + index), config.json,
     * generation_config.json, tokenizer files (docs/formats/hf-export.md) */
    CKPT_FORMAT_HF
};

/* Called on the calling thread, while planning, for each pickle global
 * outside the allow-list (docs/formats/pickle.md) that allow_unsafe_pickle
 * lets through: item is where it is written, e.g. "checkpoint.pt['x']". */
typedef void (*ckpt_unshard_warn_fn)(void *ud, const char *item,
                                     const char *module, const char *name);

/* Called from worker threads after each copy task (one piece of at most
 * 1 MiB) with the bytes it wrote; sum atomically. */
typedef void (*ckpt_unshard_progress_fn)(void *ud, uint64_t bytes);

struct ckpt_unshard_result;
/* Called once on the calling thread when the plan is complete, before any
 * output is written (res holds the planned files and totals). */
typedef void (*ckpt_unshard_planned_fn)(void *ud,
                                        const struct ckpt_unshard_result *res);

/* --rank-values: a key whose ranks' values differ is an error naming it
 * (default), keeps the first rank's (rank 0), or becomes one key per rank,
 * KEY.rankR (docs/commands/unshard.md). */
enum ckpt_rank_values {
    CKPT_RANK_VALUES_ERROR = 0,
    CKPT_RANK_VALUES_RANK0,
    CKPT_RANK_VALUES_PER_RANK
};

/* The --rank-values spelling name ("error", "rank0", "per-rank"; NULL:
 * the default) into *out: 0, or -1 for any other name. */
int ckpt_rank_values_parse(const char *name, int *out);

/* --weights, for DeepSpeed steps: the fp32 master weights of the ZeRO
 * optimizer's partitions, as zero_to_fp32 consolidates them (default), or
 * the module's state dict as trained (bf16/fp16 in a 16-bit run), as the
 * model-states file holds it (docs/formats/deepspeed.md). */
enum ckpt_unshard_weights {
    CKPT_WEIGHTS_MASTER = 0,
    CKPT_WEIGHTS_MODULE
};

struct ckpt_unshard_opts {
    enum ckpt_unshard_layout layout;
    enum ckpt_unshard_format format;
    /* SRC's enum ckpt_format (ckpt/run.h) as the run module judged it
     * (ckpt_run_load / ckpt_judge_checkpoint): picks the planner, so the
     * library never probes SRC itself. CKPT_FMT_UNKNOWN (0) and formats
     * without a planner are read as DCP (whose errors then say why). */
    int source_format;
    uint64_t max_shard_size;    /* safetensors split size; 0: 5 GiB
                                   (hf: 50e9 bytes, transformers') */
    /* CKPT_FORMAT_HF: floating weights cast to "fp32", "bf16" or "fp16"
     * (float32, bfloat16, float16 accepted too); NULL: as stored. */
    const char *dtype;
    /* CKPT_FORMAT_HF: a local directory whose config.json,
     * generation_config.json and tokenizer files are used before the
     * checkpoint's own; NULL: none. */
    const char *config_dir;
    /* CKPT_FORMAT_HF, --part I/N: this process writes part `part`
     * (0 .. nparts-1) of the shards, the last part to finish the index;
     * nparts 0 or 1: everything. Local DEST only. */
    unsigned part, nparts;
    int allow_replicas;         /* identical duplicate chunks are fine */
    /* Rank-local DCP (__R.metadata): what to do when ranks saved
     * different values under one key (enum ckpt_rank_values). */
    int rank_values;
    int weights;                /* enum ckpt_unshard_weights */
    /* Write pickled values naming globals outside the allow-list (a
     * plain torch.load of the output would call them); else such a value
     * fails the checkpoint with CKPT_EUNSAFE naming item and global. */
    int allow_unsafe_pickle;
    int verify;                 /* re-read outputs, compare with sources */
    int jobs;                   /* worker threads; <= 0: cores */
    int dry_run;                /* plan and check only; write nothing */
    int sync;                   /* fsync outputs before renaming */
    /* Remote DEST: bytes of part buffers held at once; 0: 96 MiB. */
    uint64_t memory;
    /* Remote DEST: borrowed, or NULL: the bandwidth limit every part and
     * object sent waits its turn at (ckpt/ratelimit.h; --bwlimit, shared
     * with the caller's other transfers). */
    struct ckpt_rate *rate;
    const char *tmp_dir;        /* scratch for decompressed items in a
                                   dry run; NULL: $TMPDIR or /tmp */
    const char *config_yaml;    /* copied in as config.yaml when the
                                   checkpoint has none; NULL: no copy.
                                   A key of storage when that is set,
                                   else a local file */
    /* Read SRC (then a key, not a location) through this storage, e.g.
     * a remote run's storage or the members of a plain tar, read in
     * place; borrowed. NULL: SRC is a location. */
    struct ckpt_storage *storage;
    /* How to open a remote SRC when storage is NULL (and DEST when
     * dest_storage is): the caller's storage settings (--insecure,
     * --retries, ...); their jobs is taken from .jobs. */
    struct ckpt_storage_cfg storage_cfg;
    /* Write the outputs through this storage (borrowed), DEST then being
     * a key of it: a caller that holds DEST open (its --insecure and
     * --retries applied) opens nothing again. NULL: DEST is a location. */
    struct ckpt_storage *dest_storage;
    /* Give every output's checksum (ckpt_unshard_file.checksum): a
     * remote output's costs nothing (its parts are hashed for
     * Content-MD5 anyway); a local one is read back once to hash it. */
    int checksum;
    /* Polled by the workers: non-zero stops the run, which then fails
     * with "interrupted" and removes its temporary outputs (set it from a
     * SIGINT/SIGTERM handler). NULL: never. */
    volatile sig_atomic_t *cancel;
    ckpt_unshard_planned_fn planned;
    ckpt_unshard_progress_fn progress;
    ckpt_unshard_warn_fn unsafe_pickle;  /* NULL: no warnings */
    void *progress_ud;          /* passed to planned, progress and
                                   unsafe_pickle */
};

/* One output file. */
struct ckpt_unshard_file {
    char *name;         /* relative to DEST, e.g. "checkpoint.pt"; owned */
    uint64_t size;
    uint64_t tensors;   /* tensors stored in it */
    /* With opts.checksum, the bytes written, as object storage states
     * them: the hex MD5 of the file, or for a remote output sent in N
     * parts "MD5-N", the MD5 of the parts' MD5s (S3's multipart ETag).
     * A remote output's is always given. "" if none. */
    char checksum[48];
    /* A remote output: the ETag the store stated for it (equal to
     * checksum where the store states MD5 ETags of that form; s3rver
     * states a plain MD5 for a multipart object). "" if none. */
    char etag[80];
};

struct ckpt_unshard_result {
    struct ckpt_unshard_file *files;   /* owned array */
    size_t nfiles;
    uint64_t tensors;          /* DCP tensor entries */
    uint64_t objects;          /* DCP byte items */
    uint64_t chunks;           /* stored chunks read */
    uint64_t bytes;            /* tensor bytes written */
    uint64_t pieces;           /* copy tasks (progress calls) planned */
    const char *layout;        /* "single" / "olmo" / "hf" (static) */
    const char *metadata;      /* which metadata was read (static name) */
    /* Remote DEST: most bytes of part buffers held at once (the
     * --memory bound, plus at most the parts of one band). */
    uint64_t buffers_peak;
    /* --part: 0 this part's share is in DEST and recorded, others are
     * still to come; 1 it found every part's record and wrote the files
     * beside the shards and the index (it finished the export); 2 DEST
     * held the finished export already (a part run again). */
    int part_done;
};

/*
 * Unshard the DCP checkpoint in local directory src (the directory with
 * .metadata or __R.metadata files, or an OLMo step with model_and_optim/;
 * also an OLMo torch_legacy step of rank*.pt ShardedTensor files)
 * into directory dest (created; existing files of the same names are
 * replaced only at the end). On error nothing that looks complete is left
 * at dest. Returns 0 or -1 with err naming the file.
 */
int ckpt_unshard_dcp(const char *src, const char *dest,
                     const struct ckpt_unshard_opts *opts,
                     struct ckpt_unshard_result *res, struct ckpt_err *err);
/* Free what a result owns. NULL-safe. */
void ckpt_unshard_result_release(struct ckpt_unshard_result *res);

/* 1 when ckpt_unshard_dcp reads checkpoints of this enum ckpt_format. */
int ckpt_unshard_supported(int format);
/* NULL when the unsharded output of checkpoint c holds everything the
 * step held (so that the step may be deleted once its output is
 * verified: --delete-sharded, process --drop-sharded), else why not
 * (static): a DeepSpeed step's output is the fp32 weights alone, an
 * accelerate FSDP step's and a legacy Megatron step's the model alone. */
struct ckpt_checkpoint;
const char *ckpt_unshard_partial(const struct ckpt_checkpoint *c);

/* ---- run mode: every sharded step of a run ---- */

struct ckpt_checkpoint;
struct ckpt_tree;
struct ckpt_run;

/* One per step acted on (or per run, ckpt NULL, when the run itself
 * cannot be read or has nothing to unshard). With uo.dest_storage set,
 * dest and out are keys of it. */
struct ckpt_unshard_step_event {
    const char *action;     /* "unsharded", "would-unshard", "skip",
                               "error"; with delete_sharded also
                               "deleted", "would-delete" (a step whose
                               complete copy exists, or one a killed run
                               renamed aside); "info": a note on how the
                               step is read, followed by its own event;
                               "warning": a note for stderr */
    const char *run;        /* the run as given */
    const struct ckpt_checkpoint *ckpt;    /* or NULL */
    const char *detail;     /* why skipped, the error, or what was
                               written */
    const struct ckpt_unshard_result *res; /* unsharded: the outputs */
    const char *out;        /* the output directory (also of a "skip"
                               whose complete copy is at DEST), or NULL */
};

struct ckpt_unshard_run_cfg {
    /* For every step; config_yaml and storage are set per step. planned
     * and progress are called per step, progress_ud passed. */
    struct ckpt_unshard_opts uo;
    int latest;             /* only the newest complete sharded step */
    int has_step;           /* only step `step` */
    int64_t step;
    int skip_step0;         /* never step 0 (nothing to keep there) */
    int delete_sharded;     /* delete each sharded step once verified */
    const char *tmp_dir;    /* scratch for the steps of a compressed
                               archive (.tar.gz, .tar.zst, ...) or a zip;
                               NULL: beside the outputs */
    void (*on_step)(void *ud, const struct ckpt_unshard_step_event *ev);
    void *ud;
    /* The run at key as the caller already loaded it (ckpt_run_load,
     * CKPT_LOAD_OK): taken over and released by ckpt_unshard_run, which
     * then reads nothing twice. NULL: loaded there. */
    struct ckpt_tree *tree;
    struct ckpt_run *run;
};

/*
 * Run mode: the run at key in st (a directory or archive; src is its
 * location as given) is read into a tree
 * and classified (ckpt_run_scan); every complete sharded checkpoint whose
 * "-unsharded" sibling exists neither in the run nor complete at dest (a
 * local directory or an object storage location; with uo.dest_storage, a
 * key of that storage) becomes dest/NAME-unsharded/. Steps of a remote run or of a plain
 * tar are read in place (ranged reads, member reads); steps of a
 * compressed archive or a zip are extracted one at a time into a scratch
 * directory. Returns 0, 1 when a step (or
 * the run) failed, 2 when --delete-sharded was asked of an archive.
 */
int ckpt_unshard_run(struct ckpt_storage *st, const char *key,
                     const char *src, const char *dest,
                     const struct ckpt_unshard_run_cfg *cfg);

#endif
