/*
 * judge.h - what a trainer's judge (src/trainers/<name>/judge.c) works
 * with: the view of one checkpoint directory, and the helpers that
 * every judge shares (src/trainers/judge.c). Each judge recognises its
 * trainer's checkpoints by names and files and judges them with the
 * writer's own completeness rule (docs/formats/runs.md names the code it
 * follows); the trainer table (trainer.h) asks them in order.
 * A judge that cannot tell says so (judge_unknown): never "incomplete"
 * without proof, clean would delete the run. Private to src/.
 */
#ifndef CKPT_TRAINERS_JUDGE_H
#define CKPT_TRAINERS_JUDGE_H

#include <cjson/cJSON.h>

#include "ckpt/pickle.h"
#include "ckpt/torchfmt.h"
#include "ckpt/run.h"

/* One checkpoint directory of a tree: its files are t->files[lo..hi). */
struct judge_view {
    struct ckpt_tree *t;
    const char *dir;
    size_t lo, hi;
    int one_file;   /* the checkpoint is the one file t->files[lo], in
                     * dir (Lightning's .ckpt files) */
};

/* --- helpers shared by the judges (src/trainers/judge.c) ---------------- */

/* The most bytes of a metadata file a judge reads. */
#define JUDGE_META_MAX (256u << 20)

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
/* Unsharded files judged by their structure (plain/judge.c). */
int judge_plain(const struct judge_view *v, struct ckpt_checkpoint *c,
                struct ckpt_err *err);
/* The DCP checkpoint in subdirectory mdir ("" = top): .metadata and every
 * file it names (dcp/judge.c). */
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

/* rel's path relative to the checkpoint for file i; NULL for a directory
 * (an archive lists nested ones, a directory's listing only those at its
 * top). */
const char *judge_file_rel(const struct judge_view *v, size_t i);
/* The last component of path p. */
const char *judge_base(const char *p);
/* c is incomplete for why (replacing an earlier why); returns 0. */
int judge_set_why(struct ckpt_checkpoint *c, const char *fmt, const char *a);
/* Not judged: ckpt cannot tell (never "incomplete": clean would delete
 * it); returns 0. */
int judge_set_unknown(struct ckpt_checkpoint *c, const char *fmt,
                      const char *a);
/* Ranks found in subdirectory sub ("" = top) as prefix<N>suffix: checks
 * they are 0..N-1 with no gaps and non-empty. Returns N (0 if none), or
 * -1 after setting c->why. */
long judge_rank_set(const struct judge_view *v, struct ckpt_checkpoint *c,
                    const char *sub, const char *prefix, const char *suffix);
/* The JSON file rel of the checkpoint parsed into *out (NULL when it is
 * not JSON); -1 when it cannot be read. */
int judge_json(const struct judge_view *v, const char *rel, cJSON **out,
               struct ckpt_err *err);
/* Whether file rel (a torch zip, or safetensors when st) is whole, from
 * its tail or header: JW_WHOLE, JW_CUT or JW_UNKNOWN with *msg (malloced),
 * or -1 (err); with hdr, a parsed safetensors header is handed back. */
enum { JW_WHOLE = 0, JW_CUT, JW_UNKNOWN };
int judge_file_whole(const struct judge_view *v, const char *rel, int st,
                     char **msg, struct ckpt_safetensors **hdr,
                     struct ckpt_err *err);
/* A file directly in sub ("" = top) named prefix<N>suffix (ranked: N is a
 * number) or prefix*suffix. */
int judge_has_file_like(const struct judge_view *v, const char *sub,
                        const char *prefix, const char *suffix, int ranked);
/* judge_has_file_like, ranked. */
int judge_has_ranked(const struct judge_view *v, const char *sub,
                     const char *prefix, const char *suffix);
/* rel is sub/prefix<N>suffix. */
int judge_ranked_in(const char *rel, const char *sub, const char *prefix,
                    const char *suffix);

#endif
