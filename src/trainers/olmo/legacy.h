/*
 * olmo/legacy.h - what olmo/plan_legacy.c shares with olmo/local_optim.c.
 * Private to src/.
 */
#ifndef CKPT_TRAINERS_OLMO_LEGACY_H
#define CKPT_TRAINERS_OLMO_LEGACY_H

#include "ckpt/pickle.h"
#include "ckpt/torchfmt.h"

/* Structural equality of two values from the rank files za and zb
 * (storages by record size and CRC), as legacy steps compare ranks. */
int uns_legacy_same(const struct ckpt_tzip *za, const struct ckpt_pv *a,
                const struct ckpt_tzip *zb, const struct ckpt_pv *b);

#endif
