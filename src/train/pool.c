#include "train/pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "weft.h"

struct pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;   /* bumped per job so a worker never runs one twice */
    int pending;
    int quit;
    pool_fn fn;
    void *arg;
};

typedef struct { pool *p; int tid; } worker_arg;

static void *worker(void *v)
{
    worker_arg wa = *(worker_arg *)v;
    free(v);
    pool *p = wa.p;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        pool_fn fn = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(arg, wa.tid, p->n);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int train_pool_create(pool **out, int nthreads)
{
    if (!out || nthreads < 1)
        return WEFT_EINVAL;
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return WEFT_ENOMEM;
    p->n = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            train_pool_destroy(p);
            return WEFT_ENOMEM;
        }
        for (int i = 1; i < nthreads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa || (wa->p = p, wa->tid = i,
                        pthread_create(&p->threads[i - 1], NULL, worker, wa) != 0)) {
                free(wa);
                p->n = i;   /* only the started ones are joined */
                train_pool_destroy(p);
                return wa ? WEFT_ESYS : WEFT_ENOMEM;
            }
        }
    }
    *out = p;
    return 0;
}

void train_pool_destroy(pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    if (p->threads)
        for (int i = 1; i < p->n; i++)
            pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}

int train_pool_size(const pool *p)
{
    return p ? p->n : 1;
}

void train_pool_run(pool *p, pool_fn fn, void *arg)
{
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void train_pool_split(int n, int align, int tid, int nt, int *lo, int *hi)
{
    int blocks = (n + align - 1) / align;
    int per = blocks / nt, extra = blocks % nt;
    int b0 = tid * per + (tid < extra ? tid : extra);
    int b1 = b0 + per + (tid < extra ? 1 : 0);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

typedef struct {
    pool_range_fn fn;
    void *arg;
    size_t n, align;
} range_job;

static void range_worker(void *v, int tid, int nt)
{
    range_job *j = v;
    size_t blocks = (j->n + j->align - 1) / j->align;
    size_t per = blocks / (size_t)nt, extra = blocks % (size_t)nt, t = (size_t)tid;
    size_t b0 = t * per + (t < extra ? t : extra), b1 = b0 + per + (t < extra ? 1 : 0);
    size_t lo = b0 * j->align < j->n ? b0 * j->align : j->n;
    size_t hi = b1 * j->align < j->n ? b1 * j->align : j->n;
    if (lo < hi)
        j->fn(j->arg, lo, hi);
}

void train_pool_for(pool *p, size_t n, size_t align, size_t min_n, pool_range_fn fn, void *arg)
{
    if (n == 0)
        return;
    if (!p || p->n == 1 || n < min_n) {
        fn(arg, 0, n);
        return;
    }
    range_job j = { fn, arg, n, align ? align : 1 };
    train_pool_run(p, range_worker, &j);
}
