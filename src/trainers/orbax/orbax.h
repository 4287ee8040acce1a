/* orbax.h - private to src/trainers/orbax/ (list.c, judge.c). */
#ifndef CKPT_TRAINERS_ORBAX_H
#define CKPT_TRAINERS_ORBAX_H

#include "ckpt/run.h"

/* An Orbax item (OCDBT database or old-format directory) of a
 * tree as a ckpt_orbax_io: sizes from the listing, bytes by ranged reads
 * (directory trees, plain tar members), from what the listing captured
 * (manifests), or by passes over a compressed archive, a bounded number
 * (beyond: CKPT_EUNSUPPORTED). x must outlive io. */
struct ckpt_orbax_io;
struct orbax_tio {
    struct ckpt_tree *t;
    const char *db;     /* item directory in the tree */
    unsigned passes;    /* over a compressed archive, so far */
};
void orbax_tree_io(struct orbax_tio *x, struct ckpt_orbax_io *io,
                   struct ckpt_tree *t, const char *db);

#endif
