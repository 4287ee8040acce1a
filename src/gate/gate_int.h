/*
 * gate_int.h - private to src/gate: the thread's active proof, set while
 * the gate runs a storage backend's delete (gate_storage.c), so that the
 * backend's syscalls (ckpt_gate_held_*) go through.
 */
#ifndef CKPT_GATE_INT_H
#define CKPT_GATE_INT_H

#include "ckpt/gate.h"

/* Set the proof under which this thread now deletes; the one before is
 * returned, for gate_leave to put back (NULL: none). */
const struct ckpt_gate_proof *gate_enter(const struct ckpt_gate_proof *p);
void gate_leave(const struct ckpt_gate_proof *prev);

#endif
