/*
 * ckpt/pool.h - the one thread pool: N workers, a bounded queue.
 *
 * submit() blocks while the queue is full, so a producer that walks a huge
 * plan never holds more than `queue` pending tasks in memory. Tasks own their
 * buffers and error records; the coordinator reads results after wait().
 */
#ifndef CKPT_POOL_H
#define CKPT_POOL_H

#include <stddef.h>

struct ckpt_pool;

typedef void (*ckpt_task_fn)(void *arg);

/* nthreads >= 1; queue >= 1 (pending tasks). Returns NULL on failure. */
struct ckpt_pool *ckpt_pool_new(int nthreads, size_t queue);
/* Enqueue fn(arg); blocks while the queue is full. Returns 0 or -1. */
int ckpt_pool_submit(struct ckpt_pool *p, ckpt_task_fn fn, void *arg);
/* Wait until every submitted task has finished. */
void ckpt_pool_wait(struct ckpt_pool *p);
/* Wait, stop the workers and free. NULL-safe. */
void ckpt_pool_free(struct ckpt_pool *p);
int ckpt_pool_threads(const struct ckpt_pool *p);
/* Number of online CPUs (at least 1). */
int ckpt_ncpus(void);

#endif
