#include "train/matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/param.h"
#include "train/mm_ctx.h"
#include "weft.h"

#ifdef WEFT_HAVE_OPENBLAS
#include <cblas.h>

/* OpenBLAS's pthreads builds export this (their fork handler's): it stops
 * the library's threads, which a later threaded call would start again.
 * Weak, so that a build without it links and skips the call. */
extern int blas_thread_shutdown_(void) __attribute__((weak));
#endif

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

int train_mm_create_fixed(mm_ctx **out, int threads, int backend)
{
    if (!out || (backend != MM_PORTABLE && backend != MM_OPENBLAS))
        return WEFT_EINVAL;
#ifndef WEFT_HAVE_OPENBLAS
    if (backend == MM_OPENBLAS)
        return WEFT_ENOTSUP;
#endif
    if (threads <= 0 && (threads = train_mm_default_threads()) < 0)
        return threads;
    mm_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return WEFT_ENOMEM;
    c->backend = backend;
    c->threads = threads;
    c->round16 = train_mmb_rounder();
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
     * the cores. Its own threads, started when it loaded, spin on
     * sched_yield for about 0.1 s before they sleep (a 4-rank resume on
     * 2 cores: 343,000 calls, and a median 0.28 s of CPU in the load
     * against 0.15 s without them). Stop them (none where
     * OPENBLAS_NUM_THREADS=1, as weftrun sets). */
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_)
        blas_thread_shutdown_();
#endif
    *out = c;
    return 0;
}

mmb_round_fn train_mm_rounder(const mm_ctx *c)
{
    return c ? c->round16 : train_mmb_rounder();
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
    const char *core = train_mm_blas_core(), *b16 = train_mmp_isa_bf16(c->port);
    if (c->backend == MM_OPENBLAS && core)
        snprintf(buf, cap, "openblas %s%s%s", core, b16 ? ", bf16 " : "", b16 ? b16 : "");
    else
        snprintf(buf, cap, "portable %s%s%s", train_mmp_isa(c->port), b16 ? ", bf16 " : "",
                 b16 ? b16 : "");
}

double train_mm_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void train_mm_add_attention(mm_ctx *c, double since)
{
    if (c)
        c->attn_s += train_mm_clock() - since;
}

double train_mm_attention_s(const mm_ctx *c)
{
    return c ? c->attn_s : 0.0;
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

void train_mm_gemm_with(mm_ctx *c, int backend, int ta, int tb, int M, int N, int K,
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
    train_mm_gemm_with(c, b, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void train_mm_gemm_bf16(mm_ctx *c, int ta, int tb, int M, int N, int K,
                        const uint16_t *A, int lda, const uint16_t *B, int ldb,
                        float beta, float *C, int ldc)
{
    /* Always the portable kernel (its bf16 kernel, or widening while
     * packing): Debian's OpenBLAS declares cblas_sbgemm but is built
     * without it. */
    train_mmp_gemm_bf16(c->port, c->pl, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
