#include "ckpt/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct task {
    ckpt_task_fn fn;
    void *arg;
};

struct ckpt_pool {
    pthread_mutex_t mu;
    pthread_cond_t not_empty;  /* a task is queued, or stopping */
    pthread_cond_t not_full;   /* a queue slot is free */
    pthread_cond_t idle;       /* queue empty and nothing running */
    struct task *ring;         /* owned, cap entries */
    size_t cap, head, count;
    int running;               /* tasks being executed */
    int stop;
    int nthreads;
    pthread_t *threads;        /* owned */
};

static void *worker(void *arg)
{
    struct ckpt_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->count && !p->stop)
            pthread_cond_wait(&p->not_empty, &p->mu);
        if (!p->count && p->stop)
            break;
        struct task t = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        p->running++;
        pthread_cond_signal(&p->not_full);
        pthread_mutex_unlock(&p->mu);
        t.fn(t.arg);
        pthread_mutex_lock(&p->mu);
        p->running--;
        if (!p->count && !p->running)
            pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

struct ckpt_pool *ckpt_pool_new(int nthreads, size_t queue)
{
    if (nthreads < 1)
        nthreads = 1;
    if (queue < 1)
        queue = 1;
    struct ckpt_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->ring = calloc(queue, sizeof(*p->ring));
    p->threads = calloc((size_t)nthreads, sizeof(*p->threads));
    if (!p->ring || !p->threads) {
        free(p->ring);
        free(p->threads);
        free(p);
        return NULL;
    }
    p->cap = queue;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->not_empty, NULL);
    pthread_cond_init(&p->not_full, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0)
            break;
        p->nthreads++;
    }
    if (!p->nthreads) {
        ckpt_pool_free(p);
        return NULL;
    }
    return p;
}

int ckpt_pool_submit(struct ckpt_pool *p, ckpt_task_fn fn, void *arg)
{
    pthread_mutex_lock(&p->mu);
    while (p->count == p->cap)
        pthread_cond_wait(&p->not_full, &p->mu);
    p->ring[(p->head + p->count) % p->cap] = (struct task){ fn, arg };
    p->count++;
    pthread_cond_signal(&p->not_empty);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void ckpt_pool_wait(struct ckpt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->count || p->running)
        pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void ckpt_pool_free(struct ckpt_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->not_empty);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->not_empty);
    pthread_cond_destroy(&p->not_full);
    pthread_cond_destroy(&p->idle);
    free(p->ring);
    free(p->threads);
    free(p);
}

int ckpt_pool_threads(const struct ckpt_pool *p)
{
    return p->nthreads;
}

int ckpt_ncpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
