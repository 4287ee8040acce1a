/*
 * ckpt/lease.h - a per-run lease: one small JSON object that says which
 * worker is processing a run, so that many `ckpt process` workers (cron,
 * GNU parallel, Slurm arrays) never work on the same run at once
 * (docs/storage.md "Conditional writes").
 *
 * The object holds {"host","pid","run","acquired","expires","token"}.
 * Acquire creates it with a conditional create (If-None-Match: * on S3/R2,
 * x-goog-if-generation-match: 0 on GCS, link(2) of a complete temp file
 * locally, so a reader never sees partial bytes). If it exists and has not
 * expired, the run is "leased" and the holder is reported. If it has
 * expired, or its holder is a process of this host that no longer exists
 * (same host name, kill(pid, 0) fails with ESRCH), it is taken over with a compare-and-swap on the version that
 * was read (If-Match: ETag; x-goog-if-generation-match: N; locally a
 * rename under flock of the sidecar KEY.lock): of several contenders
 * exactly one wins. Renew swaps in a later expiry on the holder's own
 * version; losing that swap means the lease was taken over: the holder
 * must stop before deleting anything.
 *
 * Clock: "expires" is absolute UTC seconds from the writer's local clock
 * and is judged by the reader's clock. Hosts are assumed NTP-synchronised
 * to well under the TTL (default 600 s, renewed every TTL/3): a skew of S
 * seconds lets a rival take over S seconds early, so a holder must treat
 * its lease as ending at expires - margin, with margin > S
 * (ckpt_lease_valid), and renew long before.
 *
 * Nothing is printed here; results are return values and strings.
 * Every call is thread-safe for distinct lease objects.
 */
#ifndef CKPT_LEASE_H
#define CKPT_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"
#include "ckpt/storage.h"

#define CKPT_LEASE_TTL 600      /* default seconds */

struct ckpt_lease_cfg {
    int64_t ttl;                /* seconds a lease lasts unrenewed; 0: 600 */
    const char *host;           /* recorded host; NULL: gethostname() */
    long pid;                   /* recorded pid; 0: getpid() */
    /* UTC seconds now; NULL: time(NULL). Tests move time with it. */
    int64_t (*clock)(void *ud);
    void *clock_ud;
};

/* Who holds a lease (as read from its object). */
struct ckpt_lease_holder {
    char host[256];
    long pid;
    char run[256];
    int64_t acquired, expires;  /* UTC seconds */
    char token[40];
};

enum ckpt_lease_result {
    CKPT_LEASE_ACQUIRED = 0,    /* created: ours (renew: renewed) */
    CKPT_LEASE_TAKEN_OVER,      /* an expired lease replaced: ours */
    CKPT_LEASE_LEASED,          /* held by another, unexpired: see holder */
    CKPT_LEASE_LOST             /* renew/release: no longer ours */
};

/* A lease object's bytes as read from storage (any bytes): 0 with *h, or
 * -1 when they are not a lease (every field present, a token). */
int ckpt_lease_parse(const char *data, size_t len,
                     struct ckpt_lease_holder *h);
/* The lease object of h: malloced JSON and a newline, *len bytes. */
char *ckpt_lease_format(const struct ckpt_lease_holder *h, size_t *len);

/* Stable lowercase name: "acquired", "taken-over", "leased", "lost". */
const char *ckpt_lease_result_name(int r);

struct ckpt_lease;

/* Try to take the lease at key in st (a local path or an object key) for
 * run. Returns ACQUIRED or TAKEN_OVER with *out set (free it with
 * ckpt_lease_release or ckpt_lease_free; TAKEN_OVER: *holder is the
 * holder replaced, whose expiry is still ahead when it was a dead process
 * of this host), LEASED with *holder filled
 * (holder may be NULL) and *out NULL, or -1 (err: storage failure, or
 * CKPT_EFORMAT when key holds something that is not a lease: it is never
 * overwritten). st is borrowed and must outlive the lease; cfg is copied. */
int ckpt_lease_acquire(struct ckpt_storage *st, const char *key,
                       const char *run, const struct ckpt_lease_cfg *cfg,
                       struct ckpt_lease **out,
                       struct ckpt_lease_holder *holder,
                       struct ckpt_err *err);

/* Push the expiry to now + ttl with a compare-and-swap on our version.
 * Returns ACQUIRED (renewed), LOST (taken over or removed: *holder says
 * by whom when it can be read; stop before deleting anything), or -1 (a
 * storage failure: the lease is still ours until ckpt_lease_expires;
 * retry). After LOST every later renew is LOST too. */
int ckpt_lease_renew(struct ckpt_lease *l, struct ckpt_lease_holder *holder,
                     struct ckpt_err *err);

/* Delete the lease if it is still ours, and free l (in every case).
 * Returns 0 (deleted, or already gone), LOST (another worker holds it:
 * left alone), or -1. The object is re-read and its token compared, then
 * deleted with a conditional delete on the version read. Where a service
 * ignores the condition on DELETE, a rival could only have written in
 * between after our expiry passed, so releasing with more than the clock
 * skew left (ckpt_lease_valid) never deletes a rival's lease. */
int ckpt_lease_release(struct ckpt_lease *l, struct ckpt_err *err);

/* Free without releasing (the lease then lapses at its expiry). */
void ckpt_lease_free(struct ckpt_lease *l);

/* UTC seconds at which the lease lapses unless renewed. */
int64_t ckpt_lease_expires(const struct ckpt_lease *l);
/* Seconds between renewals: ttl / 3. */
int64_t ckpt_lease_renew_interval(const struct ckpt_lease *l);
/* 1 when the lease is ours (not LOST) and lasts more than margin seconds
 * from now: check before every destructive step. */
int ckpt_lease_valid(const struct ckpt_lease *l, int64_t margin);
/* This holder's random token (32 hex digits). */
const char *ckpt_lease_token(const struct ckpt_lease *l);

/* "HOST:PID until 2026-01-02T03:04:05Z" into buf. */
void ckpt_lease_holder_str(const struct ckpt_lease_holder *h, char *buf,
                           size_t cap);

#endif
