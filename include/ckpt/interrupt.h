/*
 * ckpt/interrupt.h - SIGINT, SIGTERM and SIGHUP as a request to stop
 * (docs/deploy.md "Interrupts").
 *
 * The handler does one thing: it stores the signal in a sig_atomic_t and
 * puts the three signals back to their default action, so a second one
 * kills at once. Everything else happens in ordinary code that polls
 * ckpt_interrupted(): workers start no new work, transfers in flight are
 * cut (the HTTP layer's progress callback), temporaries are removed and
 * leases released on the usual failure paths, and the command exits
 * 128 + the signal.
 *
 * Clean-up that must still reach a service after the signal (deleting a
 * lease, a claim) runs inside ckpt_interrupt_shield/_unshield on its own
 * thread: requests made there are not cut.
 */
#ifndef CKPT_INTERRUPT_H
#define CKPT_INTERRUPT_H

#include <signal.h>

/* Catch SIGINT, SIGTERM and SIGHUP (once, before threads start). */
void ckpt_interrupt_catch(void);

/* The signal caught, or 0. */
int ckpt_interrupted(void);

/* The flag itself, for interfaces that poll a pointer (unshard's
 * cancel). */
volatile sig_atomic_t *ckpt_interrupt_flag(void);

/* Record sig as if it had been caught (tests, and the handler itself:
 * async-signal-safe). */
void ckpt_interrupt_raise(int sig);

/* Requests of this thread go on after an interrupt until the matching
 * unshield (nested calls count). */
void ckpt_interrupt_shield(void);
void ckpt_interrupt_unshield(void);

/* ckpt_interrupted(), but 0 on a shielded thread: whether work of this
 * thread should stop now. */
int ckpt_interrupt_stops(void);

#endif
