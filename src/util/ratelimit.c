/*
 * ratelimit.c - a bandwidth limit shared by threads (ckpt/ratelimit.h).
 *
 * Each request books the next n / rate seconds of the line, after those
 * already booked, and waits until its slot has passed: a token bucket of
 * depth zero. Time not used is not saved up, so an idle spell buys no
 * burst, and N bytes take at least N / rate seconds from the first
 * request.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "ckpt/interrupt.h"
#include "ckpt/ratelimit.h"
#include "ckpt/util.h"

struct ckpt_rate {
    double rate;            /* bytes per second */
    double next;            /* ckpt_now() when the line is free again */
    pthread_mutex_t mu;
};

struct ckpt_rate *ckpt_rate_new(uint64_t bytes_per_s)
{
    struct ckpt_rate *r = ckpt_xcalloc(1, sizeof(*r));
    r->rate = bytes_per_s ? (double)bytes_per_s : 1;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void ckpt_rate_free(struct ckpt_rate *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int ckpt_rate_take(struct ckpt_rate *r, uint64_t n)
{
    if (!r || !n)
        return 0;
    pthread_mutex_lock(&r->mu);
    double now = ckpt_now();
    if (r->next < now)
        r->next = now;
    r->next += (double)n / r->rate;
    double until = r->next;
    pthread_mutex_unlock(&r->mu);
    /* In slices, so that an interrupt is seen within 0.1 s. */
    for (double left; (left = until - ckpt_now()) > 0;) {
        if (ckpt_interrupt_stops())
            return -1;
        if (left > 0.1)
            left = 0.1;
        struct timespec ts = { 0, (long)(left * 1e9) };
        nanosleep(&ts, NULL);
    }
    return 0;
}
