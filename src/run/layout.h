/*
 * layout.h - private to src/run: the table of checkpoint layouts, the one
 * place that knows what a checkpoint of each format looks like. Each
 * layout_<trainer>.c recognises its checkpoints by names and files and
 * judges them with the writer's own completeness rule
 * (docs/formats/runs.md names the code it follows); judge.c holds the
 * entries of the formats ckpt started with (DCP, OLMo, Orbax, zarr,
 * unsharded files) and the helpers they share.
 * A layout that cannot tell says so (judge_unknown): never "incomplete"
 * without proof, clean would delete the run.
 */
#ifndef CKPT_RUN_LAYOUT_H
#define CKPT_RUN_LAYOUT_H

#include "ckpt/pickle.h"
#include "ckpt/torchfmt.h"
#include "run_int.h"

/* One checkpoint directory of a tree: its files are t->files[lo..hi). */
struct judge_view {
    struct ckpt_tree *t;
    const char *dir;
    size_t lo, hi;
    int one_file;   /* the checkpoint is the one file t->files[lo], in
                     * dir (Lightning's .ckpt files) */
};

struct judge_layout {
    const char *name;          /* for docs and messages */
    enum ckpt_format format;
    /* 1 if the checkpoint is this layout's, from names alone. */
    int (*recognise)(const struct judge_view *v);
    /* Set c->complete / why / unknown; -1 (err) only when files cannot
     * be read. */
    int (*judge)(const struct judge_view *v, struct ckpt_checkpoint *c,
                 struct ckpt_err *err);
    /* The format from names alone (ckpt_judge_format); NULL: format. */
    enum ckpt_format (*format_of)(const struct judge_view *v);
    /* 1 if file rel (relative to the checkpoint) is one this layout's
     * writer writes, so that its judgement covers it; NULL: every file
     * of the directory is (Orbax, zarr, Lightning). A weights-like file
     * it does not own in a checkpoint it proved incomplete is not
     * accounted for (account.c): the run is then never bad. */
    int (*owns)(const struct judge_view *v, const char *rel);
};

/* The layout of v: the first entry of the table that recognises it
 * (never NULL: the last entry, plain unsharded files, takes the rest). */
const struct judge_layout *judge_layout_find(const struct judge_view *v);

/* --- helpers shared by the layouts (judge.c) --------------------------- */

/* The file dir/rel of the checkpoint (not a directory), or NULL. */
const struct ckpt_tree_file *judge_get(const struct judge_view *v,
                                       const char *rel);
/* Path of file i relative to the checkpoint. */
const char *judge_rel(const struct judge_view *v, size_t i);
/* Proof of incompleteness: the first one is kept. */
void judge_incomplete(struct ckpt_checkpoint *c, const char *fmt,
                      const char *a);
/* Cannot tell (never deleted), unless already proven incomplete. */
void judge_unknown(struct ckpt_checkpoint *c, const char *fmt,
                   const char *a);
/* A file the writer always writes is missing: proof, except in a
 * damaged archive whose listing may miss members. */
void judge_missing(const struct judge_view *v, struct ckpt_checkpoint *c,
                   const char *rel, const char *why);
/* rel (which must exist) is a whole torch zip (st: safetensors file):
 * cut short is proof, not a zip at all is unknown. -1 on I/O error. */
int judge_whole(const struct judge_view *v, struct ckpt_checkpoint *c,
                const char *rel, int st, struct ckpt_err *err);
/* judge_whole of safetensors file rel, handing back its parsed header
 * in *hdr (free with ckpt_safetensors_free) when it was read and whole;
 * NULL when it is not, or when reading it would cost a pass over a
 * compressed archive (the archive's end check stands for it). */
int judge_whole_st(const struct judge_view *v, struct ckpt_checkpoint *c,
                   const char *rel, struct ckpt_safetensors **hdr,
                   struct ckpt_err *err);
/* Unsharded files judged by their structure (judge.c's own rule). */
int judge_plain(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err);
/* The DCP checkpoint in subdirectory mdir ("" = top): .metadata and every
 * file it names. */
int judge_dcp_dir(const struct judge_view *v, struct ckpt_checkpoint *c,
                  const char *mdir, struct ckpt_err *err);
/* The data.pkl of torch zip rel parsed into a (nothing is executed; every
 * global becomes a node). 0, 1 when it is no torch zip or the pickle is
 * not readable (*why malloced), -1 on I/O error. */
int judge_torch_pickle(const struct judge_view *v, const char *rel,
                       struct ckpt_arena *a, struct ckpt_pv **root,
                       char **why, struct ckpt_err *err);
/* "prefix<N>suffix" directly in the checkpoint: N, or -1. */
long judge_rank_of(const char *name, const char *prefix, const char *suffix);
/* rel is a file directly at the checkpoint's top (no '/') ending in one
 * of the NULL-terminated suffixes. */
int judge_top_with(const char *rel, const char *const *suffixes);
/* rel is "DIR/" + a DCP file (.metadata, __R.metadata, *.distcp) with
 * DIR dir ("" the top). */
int judge_dcp_file(const char *rel, const char *dir);

/* The layouts (layout_<trainer>.c). */
extern const struct judge_layout judge_layout_hf;
extern const struct judge_layout judge_layout_lightning;
extern const struct judge_layout judge_layout_deepspeed;
extern const struct judge_layout judge_layout_megatron;
extern const struct judge_layout judge_layout_dcp_hf;
/* judge.c's own */
extern const struct judge_layout judge_layout_orbax;
extern const struct judge_layout judge_layout_dcp;
extern const struct judge_layout judge_layout_zarr;
extern const struct judge_layout judge_layout_olmo_core;
extern const struct judge_layout judge_layout_olmo_local;
extern const struct judge_layout judge_layout_olmo_legacy;
extern const struct judge_layout judge_layout_plain;

#endif
