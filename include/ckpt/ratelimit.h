/*
 * ckpt/ratelimit.h - one bandwidth limit shared by every thread of a
 * transfer (`ckpt cp --bwlimit`): a token bucket with no burst, so the
 * bytes sent over any stretch of a few seconds stay within RATE.
 */
#ifndef CKPT_RATELIMIT_H
#define CKPT_RATELIMIT_H

#include <stdint.h>

struct ckpt_rate;

/* A limit of bytes_per_s (> 0). */
struct ckpt_rate *ckpt_rate_new(uint64_t bytes_per_s);
void ckpt_rate_free(struct ckpt_rate *r);

/* Wait until n more bytes may be sent, then count them as sent: the
 * caller sends them right after. Threads queue in the order they ask.
 * 0, or -1 when interrupted while waiting (ckpt_interrupt_stops): then
 * send nothing. A NULL r never waits. */
int ckpt_rate_take(struct ckpt_rate *r, uint64_t n);

#endif
