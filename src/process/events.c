/*
 * events.c - what every phase of a `ckpt process` run shares: its
 * events and row (through the caller's on_event, one at a time), its
 * state writes, and -n's prediction of what DEST would hold. Kept apart
 * so that the phase files (outputs.c, passes.c) depend on it and not on
 * each other or on the orchestration in run.c.
 */
#include "ckpt/process.h"

#include <pthread.h>
#include <stdlib.h>

#include "ckpt/interrupt.h"
#include "ckpt/util.h"
#include "process_int.h"

const char *ckpt_process_phase_name(enum ckpt_process_phase p)
{
    static const char *const n[] = { "judge", "lease", "map", "unshard",
                                     "upload", "verify", "delete", "run",
                                     "spool" };
    return (unsigned)p < sizeof(n) / sizeof(n[0]) ? n[p] : "?";
}

const char *ckpt_process_status_name(enum ckpt_process_status s)
{
    static const char *const n[] = { "ok", "done", "deleted", "skipped",
                                     "failed", "would" };
    return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

/* ---- events ---- */

void proc_emit(struct proc_run *o, enum ckpt_process_phase ph,
               enum ckpt_process_status st, const char *detail,
               uint64_t files, uint64_t bytes)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_process_event ev = {
        ph, st, o->r->display, o->r->id, o->ddisp, detail ? detail : "", 0,
        files, bytes, o->steps, o->freed, ckpt_now() - o->t0
    };
    if (!c->on_event)
        return;
    pthread_mutex_lock(&o->p->mu);
    c->on_event(c->ud, &ev);
    pthread_mutex_unlock(&o->p->mu);
}

/* The run's row; counts it in the totals. */
void proc_finish(struct proc_run *o, enum ckpt_process_status st,
                 const char *detail, int warn)
{
    struct ckpt_process_totals *t = o->p->t;
    const struct ckpt_process_cfg *c = &o->p->cfg;
    struct ckpt_process_event ev = {
        CKPT_PROC_RUN, st, o->r->display, o->r->id, o->ddisp,
        detail ? detail : "", warn, o->s.files, o->s.bytes, o->steps,
        o->freed, ckpt_now() - o->t0
    };
    if (st == CKPT_PROC_FAILED)
        o->failed = 1;
    pthread_mutex_lock(&o->p->mu);
    switch (st) {
    case CKPT_PROC_OK:
    case CKPT_PROC_WOULD:
        t->processed++;
        break;
    case CKPT_PROC_DONE:
        t->done++;
        break;
    case CKPT_PROC_DELETED:
        t->deleted++;
        break;
    case CKPT_PROC_SKIPPED:
        t->skipped++;
        break;
    case CKPT_PROC_FAILED:
        t->failed++;
        break;
    }
    if (st == CKPT_PROC_OK || st == CKPT_PROC_WOULD) {
        t->files += o->s.files;
        t->bytes += o->s.bytes;
    }
    t->steps += o->steps;
    t->freed += o->freed;
    if (c->on_event)
        c->on_event(c->ud, &ev);
    pthread_mutex_unlock(&o->p->mu);
}

/* "phase: reason" as a failed row. */
void proc_fail_run(struct proc_run *o, enum ckpt_process_phase ph,
                   const char *why)
{
    /* After SIGINT/SIGTERM/SIGHUP every phase in flight fails on its
     * first request: the cause is the signal, whatever the request said. */
    if (ckpt_interrupted())
        why = "interrupted";
    proc_emit(o, ph, CKPT_PROC_FAILED, why, 0, 0);
    char *d = ckpt_xasprintf("%s: %s", ckpt_process_phase_name(ph), why);
    proc_finish(o, CKPT_PROC_FAILED, d, 0);
    free(d);
}

/* ---- the state ---- */

/* The run's state written as phase ph, with its source, steps and freed
 * bytes. 0, or -1 after the run's failed row (in phase). */
int proc_save_state(struct proc_run *o, enum proc_phase ph,
                    enum ckpt_process_phase phase)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    o->s.phase = ph;
    if (!o->s.src)
        o->s.src = ckpt_xstrdup(o->r->srcid);
    o->s.steps = o->steps;
    o->s.freed = o->freed;
    if (proc_state_write(o->p->cfg.dst, o->state_key, o->r->id, &o->s,
                         &err) == 0)
        return 0;
    proc_fail_run(o, phase, err.msg);
    return -1;
}

/* ---- the prediction (-n) ---- */

/* -n: DEST would hold the file shown as disp with size bytes (the
 * later word on one name wins: an upload replaces what DEST lists). */
void proc_predict_file(struct proc_run *o, const char *disp, uint64_t size,
                       int base)
{
    pthread_mutex_lock(&o->mu);
    o->pf = ckpt_xreallocarray(o->pf, o->npf + 1, sizeof(*o->pf));
    o->pf[o->npf].disp = ckpt_xstrdup(disp);
    o->pf[o->npf].size = size;
    o->pf[o->npf].base = base;
    o->pf[o->npf].seq = o->npf;
    o->npf++;
    pthread_mutex_unlock(&o->mu);
}
