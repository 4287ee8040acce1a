/* run_int.h - private to src/run: do not expose. */
#ifndef CKPT_RUN_INT_H
#define CKPT_RUN_INT_H

#include "ckpt/run.h"

/* Set c->format, c->complete, c->why, c->size, c->nfiles. -1 (err) only
 * for failures to read or understand checkpoint metadata. */
int ckpt_judge_checkpoint(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          struct ckpt_err *err);

/* An -unsharded copy c of OLMo step src (same step) lacking a file the
 * writers always write for one: c made incomplete. */
void ckpt_judge_olmo_copy(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          const struct ckpt_checkpoint *src);

/* 1 when a layout recognises the directory dir of t by its files (the
 * plain entry only with a weights file at its top). */
int ckpt_judge_recognised(const struct ckpt_tree *t, const char *dir);

/* pins.c: mark the checkpoints the writer pins (c->pinned): HF's
 * best_model_checkpoint, DeepSpeed's `latest`, Megatron's
 * latest_checkpointed_iteration.txt. Directory trees only (archives are
 * never pruned). */
void ckpt_run_pins(struct ckpt_run *run, struct ckpt_tree *t);

/* account.c: set run->unaccounted / nunaccounted from the judged run. */
void ckpt_run_account(struct ckpt_run *run, const struct ckpt_tree *t);
/* account.c: directory dir of t (not the top) is a run of its own:
 * config.yaml beside wandb/ or train_data/, or a checkpoint directory
 * in it. */
int ckpt_tree_dir_is_run(const struct ckpt_tree *t, const char *dir);
/* account.c: the first directory below t's top that is a run of its own
 * (malloced), or NULL. */
char *ckpt_run_holds_run(const struct ckpt_run *run,
                         const struct ckpt_tree *t);

#endif
