/* A small fixed pool of worker threads owned by one model: train_pool_run() calls
 * fn(arg, tid, n) on every thread (the caller is tid 0) and returns when
 * all are done. */
#ifndef TRAIN_POOL_H
#define TRAIN_POOL_H

#include <stddef.h>

typedef struct pool pool;
typedef void (*pool_fn)(void *arg, int tid, int nthreads);

int train_pool_create(pool **out, int nthreads);
void train_pool_destroy(pool *p);
int train_pool_size(const pool *p);
void train_pool_run(pool *p, pool_fn fn, void *arg);

/* [lo, hi) of n items for thread tid of nt, in multiples of `align`. */
void train_pool_split(int n, int align, int tid, int nt, int *lo, int *hi);

/* fn(arg, lo, hi) over [0, n) in one contiguous piece per thread (pieces
 * in multiples of align); on the caller alone when n < min_n or p is
 * NULL. Pieces never change what an element's result is, so callers stay
 * bit-identical for any thread count. */
typedef void (*pool_range_fn)(void *arg, size_t lo, size_t hi);
void train_pool_for(pool *p, size_t n, size_t align, size_t min_n, pool_range_fn fn, void *arg);

#endif
