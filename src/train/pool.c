#include "train/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "weft.h"

struct pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;   /* bumped per job so a worker never runs one twice */
    unsigned long pending;
    int quit;
    pool_fn fn;
    void *arg;
};

typedef struct { pool *p; int tid; } worker_arg;

/* A step hands the pool a few hundred jobs (each product and element-wise
 * pass), with little serial work between them. Blocking on the condition
 * variable at once cost a futex wake-up per job and per return, tens of
 * microseconds each on a virtual machine: about 700 futex calls a step of
 * the GPT at width 512 on two threads. So a thread first looks for its
 * next job (or the others' return) for this long, yielding the core
 * between looks, and only then blocks. The words it looks at are written
 * under the mutex, atomically, and read atomically here. */
#define POOL_POLL_NS 200000L

static long elapsed_ns(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

/* Polls, with sched_yield, for at most POOL_POLL_NS until *word differs
 * from value (differ) or equals it (!differ), or *quit is set; 1 when it
 * saw that, 0 when it is time to block. */
static int poll_word(const unsigned long *word, unsigned long value, int differ, const int *quit)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if ((__atomic_load_n(word, __ATOMIC_ACQUIRE) != value) == differ ||
            (quit && __atomic_load_n(quit, __ATOMIC_ACQUIRE)))
            return 1;
        if (elapsed_ns(&t0) > POOL_POLL_NS)
            return 0;
        sched_yield();
    }
}

static void *worker(void *v)
{
    worker_arg wa = *(worker_arg *)v;
    free(v);
    pool *p = wa.p;
    unsigned long seen = 0;
    for (;;) {
        poll_word(&p->gen, seen, 1, &p->quit);
        pthread_mutex_lock(&p->mu);
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
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_RELEASE) == 0)
            pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
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
    __atomic_store_n(&p->quit, 1, __ATOMIC_RELEASE);
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
    __atomic_store_n(&p->pending, (unsigned long)p->n - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    poll_word(&p->pending, 0, 0, NULL);
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
