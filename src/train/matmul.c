#include "train/matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/param.h"
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
#ifndef WEFT_HAVE_OPENBLAS
    if (backend == MM_OPENBLAS)
        return WEFT_ENOTSUP;
    backend = MM_PORTABLE;
#else
    if (backend == MM_AUTO) {
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
    /* the pool also runs attention, so OpenBLAS models get one too */
    int rc = train_pool_create(&c->pl, threads);
    if (rc == 0)   /* OpenBLAS models use it for bf16 */
        rc = train_mmp_create(&c->port, threads);
    if (rc) {
        train_mm_destroy(c);
        return rc;
    }
#ifdef WEFT_HAVE_OPENBLAS
    /* OpenBLAS keeps its thread count per process; set it to ours so that
     * several ranks on one host do not oversubscribe the cores. */
    if (backend == MM_OPENBLAS)
        openblas_set_num_threads(threads);
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

void train_mm_gemm(mm_ctx *c, int ta, int tb, int M, int N, int K,
                   const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc)
{
#ifdef WEFT_HAVE_OPENBLAS
    if (c->backend == MM_OPENBLAS) {
        /* OpenBLAS's count is per process: another model (or the peak
         * probe) may have changed it since this one was made */
        if (openblas_get_num_threads() != c->threads)
            openblas_set_num_threads(c->threads);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    train_mmp_gemm(c->port, c->pl, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void train_mm_gemm_bf16(mm_ctx *c, int ta, int tb, int M, int N, int K,
                        const uint16_t *A, int lda, const uint16_t *B, int ldb,
                        float beta, float *C, int ldc)
{
    /* Always the portable kernel, which widens bf16 while packing: Debian's
     * OpenBLAS declares cblas_sbgemm but is built without it. */
    train_mmp_gemm_bf16(c->port, c->pl, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
