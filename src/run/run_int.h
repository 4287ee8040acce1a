/* run_int.h - private to src/run: do not expose. */
#ifndef CKPT_RUN_INT_H
#define CKPT_RUN_INT_H

#include "ckpt/run.h"

/* Set c->format, c->complete, c->why, c->size, c->nfiles. -1 (err) only
 * for failures to read or understand checkpoint metadata. */
int ckpt_judge_checkpoint(struct ckpt_tree *t, struct ckpt_checkpoint *c,
                          struct ckpt_err *err);

#endif
