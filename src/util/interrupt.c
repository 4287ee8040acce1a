/*
 * interrupt.c - SIGINT, SIGTERM and SIGHUP as a flag (ckpt/interrupt.h).
 * The handler only stores the signal and restores the default actions,
 * both async-signal-safe; the workers poll the flag.
 */
#include "ckpt/interrupt.h"

#include <string.h>

static volatile sig_atomic_t caught;
static _Thread_local int shielded;

static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
#define NSIGS (sizeof(sigs) / sizeof(sigs[0]))

void ckpt_interrupt_raise(int sig)
{
    if (!caught)
        caught = sig;
}

static void on_signal(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ckpt_interrupt_raise(sig);
    /* A second signal kills as it would without us. */
    for (size_t i = 0; i < NSIGS; i++)
        sigaction(sigs[i], &dfl, NULL);
}

void ckpt_interrupt_catch(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NSIGS; i++)
        sigaddset(&sa.sa_mask, sigs[i]);
    /* Restarted system calls: the flag is polled, never waited on. */
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < NSIGS; i++) {
        struct sigaction old;
        /* A signal ignored by whoever started us (nohup) stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

int ckpt_interrupted(void)
{
    return caught;
}

volatile sig_atomic_t *ckpt_interrupt_flag(void)
{
    return &caught;
}

void ckpt_interrupt_shield(void)
{
    shielded++;
}

void ckpt_interrupt_unshield(void)
{
    if (shielded > 0)
        shielded--;
}

int ckpt_interrupt_stops(void)
{
    return shielded ? 0 : caught;
}
