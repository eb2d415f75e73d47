#include "train/matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "train/mm_choose.h"
#include "train/peak.h"
#include "weft.h"

#ifdef WEFT_HAVE_OPENBLAS
#include <cblas.h>
#endif

struct mm_ctx {
    int backend;   /* MM_PORTABLE or MM_OPENBLAS */
    int threads;
    pool *pl;
    mmp *port;
    /* MM_AUTO: the peak probe's kernel runs until the model's own products
     * have been seen (rec) and timed (train_mm_settle) */
    int deciding;
    uint64_t key;
    mm_shapes *rec;
    mm_choice choice;
    int chosen;   /* choice is filled */
};

int train_mm_default_threads(void)
{
    /* ranks on this host: weftrun's WEFT_LOCAL_SIZE, else torchrun's, Open
     * MPI's or MPICH's name for it (the table's aliases) */
    int t, local, rc;
    if ((rc = param_read_int(PARAM_threads, &t, NULL, 0)) ||
        (rc = param_read_int(PARAM_local_size, &local, NULL, 0)))
        return rc;
    if (t > 0)
        return t;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    if (local < 1)
        local = 1;
    t = (int)(cores / local);
    return t < 1 ? 1 : t;
}

int train_mm_create(mm_ctx **out, int threads, int backend)
{
    if (!out)
        return WEFT_EINVAL;
    if (threads <= 0 && (threads = train_mm_default_threads()) < 0)
        return threads;
    int deciding = 0;
#ifndef WEFT_HAVE_OPENBLAS
    if (backend == MM_OPENBLAS)
        return WEFT_ENOTSUP;
    backend = MM_PORTABLE;
#else
    if (backend == MM_AUTO) {
        deciding = 1;
        /* never silently the slower one: Debian's OpenBLAS may run a
         * kernel older than the CPU (train/peak.c warns and says why) */
        train_peak pk;
        int rc = train_peak_get(&pk);
        if (rc)
            return rc;
        backend = pk.best;
    }
#endif
    mm_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return WEFT_ENOMEM;
    c->backend = backend;
    c->threads = threads;
    c->deciding = deciding;
    /* the pool also runs attention, so OpenBLAS models get one too */
    int rc = train_pool_create(&c->pl, threads);
    if (rc == 0)   /* OpenBLAS models use it for bf16 */
        rc = train_mmp_create(&c->port, threads);
    if (rc) {
        train_mm_destroy(c);
        return rc;
    }
#ifdef WEFT_HAVE_OPENBLAS
    /* OpenBLAS runs on one thread per call: several threads split C over
     * the pool (blas_piece), so ranks on one host do not oversubscribe
     * the cores and OpenBLAS's own threads never spin */
    openblas_set_num_threads(1);
#endif
    *out = c;
    return 0;
}

void train_mm_destroy(mm_ctx *c)
{
    if (!c)
        return;
    train_pool_destroy(c->pl);
    train_mmp_destroy(c->port);
    free(c->rec);
    free(c);
}

const char *train_mm_name(const mm_ctx *c)
{
    return c->backend == MM_OPENBLAS ? "openblas" : "portable";
}

const char *train_mm_blas_core(void)
{
#ifdef WEFT_HAVE_OPENBLAS
    return openblas_get_corename();
#else
    return NULL;
#endif
}

void train_mm_describe(const mm_ctx *c, char *buf, size_t cap)
{
    const char *core = train_mm_blas_core();
    if (c->backend == MM_OPENBLAS && core)
        snprintf(buf, cap, "openblas %s", core);
    else
        snprintf(buf, cap, "portable %s", train_mmp_isa(c->port));
}

pool *train_mm_pool(mm_ctx *c)
{
    return c ? c->pl : NULL;
}

mmp *train_mm_portable(mm_ctx *c)
{
    return c ? c->port : NULL;
}

#ifdef WEFT_HAVE_OPENBLAS
/* Several threads' OpenBLAS: each pool thread runs single-threaded
 * cblas_sgemm on its own columns (or rows) of C. OpenBLAS's own threads
 * spin on the CPU for a while after every call (sched_yield, about 0.1 s
 * by default), where they took the second core from the pool's work
 * between products (attention, GELU, LayerNorm, the optimiser). */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, by_rows;
    const float *A, *B;
    float beta, *C;
} blas_job;

static void blas_piece(void *arg, int tid, int nt)
{
    const blas_job *j = arg;
    int lo, hi;
    train_pool_split(j->by_rows ? j->M : j->N, 16, tid, nt, &lo, &hi);
    if (lo >= hi)
        return;
    const float *A = j->A, *B = j->B;
    float *C = j->C;
    int M = j->M, N = j->N;
    if (j->by_rows) {
        A += j->ta ? (size_t)lo : (size_t)lo * j->lda;
        C += (size_t)lo * j->ldc;
        M = hi - lo;
    } else {
        B += j->tb ? (size_t)lo * j->ldb : (size_t)lo;
        C += lo;
        N = hi - lo;
    }
    cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans,
                M, N, j->K, 1.0f, A, j->lda, B, j->ldb, j->beta, C, j->ldc);
}

/* Below this many FLOPs a product runs on the caller alone: waking a
 * thread costs more than it saves. */
#define BLAS_SPLIT_FLOPS 4e6
#endif

static void gemm_on(mm_ctx *c, int backend, int ta, int tb, int M, int N, int K,
                    const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc)
{
#ifdef WEFT_HAVE_OPENBLAS
    if (backend == MM_OPENBLAS) {
        /* OpenBLAS's count is per process: another model (or the peak
         * probe) may have changed it since this one was made */
        if (openblas_get_num_threads() != 1)
            openblas_set_num_threads(1);
        if (c->threads > 1 && 2.0 * M * N * K >= BLAS_SPLIT_FLOPS && (M >= 32 || N >= 32)) {
            blas_job j = { ta, tb, M, N, K, lda, ldb, ldc, M > N, A, B, beta, C };
            train_pool_run(c->pl, blas_piece, &j);
            return;
        }
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    train_mmp_gemm(c->port, c->pl, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void train_mm_gemm(mm_ctx *c, int ta, int tb, int M, int N, int K,
                   const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc)
{
    if (c->rec)
        train_mm_shapes_add(c->rec, ta, tb, M, N, K, beta != 0.0f);
    int b = c->choice.mixed ? train_mm_choice_route(&c->choice, ta, tb, M, N, K, beta != 0.0f)
                            : c->backend;
    gemm_on(c, b, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void train_mm_gemm_bf16(mm_ctx *c, int ta, int tb, int M, int N, int K,
                        const uint16_t *A, int lda, const uint16_t *B, int ldb,
                        float beta, float *C, int ldc)
{
    /* Always the portable kernel, which widens bf16 while packing: Debian's
     * OpenBLAS declares cblas_sbgemm but is built without it. */
    train_mmp_gemm_bf16(c->port, c->pl, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

/* A model whose step's products are fewer FLOPs than this (a few
 * milliseconds) keeps the peak probe's kernel. */
#define MM_TIME_MIN_FLOPS 1e8

/* "portable avx2, openblas Zen, 2 threads": what a cached choice was
 * measured with, so another ISA cap, OpenBLAS core or thread count is
 * measured again. */
static void kernels_of(const mm_ctx *c, char *buf, size_t cap)
{
    const char *core = train_mm_blas_core();
    snprintf(buf, cap, "portable %s, openblas %s, %d threads", train_mmp_isa(c->port),
             core ? core : "-", c->threads);
}

static void announce(const mm_ctx *c)
{
    char text[512];
    train_mm_choice_text(&c->choice, text, sizeof text);
    log_msg(log_level_from_env(), LOG_INFO, 0, "matmul auto: %s", text);
}

void train_mm_begin(mm_ctx *c, uint64_t key)
{
    if (!c || !c->deciding || c->rec)
        return;
    char kern[128];
    kernels_of(c, kern, sizeof kern);
    /* a tiny model's line (written before such models went untimed) is
     * not taken */
    if (train_mm_choice_load(key, kern, &c->choice) == 0 && c->choice.flops >= MM_TIME_MIN_FLOPS) {
        c->backend = c->choice.backend;
        c->chosen = 1;
        c->deciding = 0;
        announce(c);
        return;
    }
    memset(&c->choice, 0, sizeof c->choice);
    c->key = key;
    if (!(c->rec = calloc(1, sizeof *c->rec)))
        c->deciding = 0;   /* keeps the probe's kernel */
}

/* A timed product is at most this many FLOPs (its largest side halved
 * until it is), so that a large model's choice stays well under a second;
 * its time is scaled back up to the full shape's. */
#define MM_TIME_FLOPS 0.6e9

typedef struct {
    mm_ctx *c;
    float *a, *b, *o;
} timer_arg;

static void capped(const mm_shape *s, int *M, int *N, int *K)
{
    *M = s->M;
    *N = s->N;
    *K = s->K;
    while (2.0 * *M * *N * *K > MM_TIME_FLOPS) {
        int *big = *M >= *N && *M >= *K ? M : *N >= *K ? N : K;
        *big = (*big + 1) / 2;
    }
}

static double time_shape(void *arg, int backend, const mm_shape *s)
{
    timer_arg *t = arg;
    int M, N, K;
    capped(s, &M, &N, &K);
    double t0 = clock_now();
    gemm_on(t->c, backend, s->ta, s->tb, M, N, K, t->a, s->ta ? M : K, t->b, s->tb ? K : N,
            s->acc ? 1.0f : 0.0f, t->o, N);
    double dt = clock_now() - t0;
    return dt * ((double)s->M * s->N * s->K) / ((double)M * N * K);
}

void train_mm_settle(mm_ctx *c)
{
    if (!c || !c->deciding || !c->rec || c->rec->n == 0)
        return;
    mm_shapes *t = c->rec;
    c->rec = NULL;
    c->deciding = 0;
    if (train_mm_shapes_flops(t) < MM_TIME_MIN_FLOPS) {
        /* timing would be noise, and would choose differently for models
         * of one family (a pipeline stage and the whole model), whose
         * results then differ in their last bits */
        memset(&c->choice, 0, sizeof c->choice);
        c->choice.backend = c->backend;
        c->choice.flops = train_mm_shapes_flops(t);
        c->choice.shapes = t->n;
        snprintf(c->choice.source, sizeof c->choice.source,
                 "a step's products are %.3g GFLOP, under %.2g: the peak probe's kernel, untimed",
                 c->choice.flops / 1e9, MM_TIME_MIN_FLOPS / 1e9);
        c->chosen = 1;
        announce(c);
        free(t);
        return;
    }
    size_t most = 1;
    double distinct = 0.0;
    for (int i = 0; i < t->n; i++) {
        int M, N, K;
        capped(&t->s[i], &M, &N, &K);
        size_t sz[3] = { (size_t)M * K, (size_t)K * N, (size_t)M * N };
        for (int j = 0; j < 3; j++)
            most = sz[j] > most ? sz[j] : most;
        distinct += 2.0 * M * N * K;
    }
    timer_arg ta = { c, malloc(most * sizeof(float)), malloc(most * sizeof(float)),
                     calloc(most, sizeof(float)) };
    if (ta.a && ta.b && ta.o) {
        for (size_t i = 0; i < most; i++) {
            ta.a[i] = (float)(i % 17) * 0.01f;
            ta.b[i] = (float)(i % 13) * 0.01f;
        }
        /* three runs of each where that is cheap, two for big models */
        int reps = distinct > 1e9 ? 2 : 3;
        double t0 = clock_now();
        train_mm_choose(t, MM_AUTO, train_mm_blas_core() != NULL, reps, time_shape, &ta,
                        &c->choice);
        char kern[128];
        kernels_of(c, kern, sizeof kern);
        c->choice.took_s = clock_now() - t0;
        (void)train_mm_choice_store(c->key, kern, &c->choice);
        c->backend = c->choice.backend;
        c->chosen = 1;
        announce(c);
    }
    free(ta.a);
    free(ta.b);
    free(ta.o);
    free(t);
}

const mm_choice *train_mm_choice(const mm_ctx *c)
{
    return c && c->chosen ? &c->choice : NULL;
}

int train_mm_provisional(const mm_ctx *c)
{
    return c && c->deciding;
}
