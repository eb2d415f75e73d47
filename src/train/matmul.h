/* One matrix-multiply interface for every layer: OpenBLAS's cblas_sgemm
 * or the portable blocked kernel. MM_AUTO takes the faster of the two on
 * the model's own products (train_mm_begin/settle below), the portable
 * one when OpenBLAS is not built in.
 * Row-major, alpha = 1: C[M,N] = op(A)[M,K] op(B)[K,N] + beta C, where
 * op(X) is X transposed when its flag is set. */
#ifndef TRAIN_MATMUL_H
#define TRAIN_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "train/mm_choose.h"
#include "train/pool.h"

typedef struct mm_ctx mm_ctx;
typedef struct mmp mmp;

enum { MM_AUTO = 0, MM_PORTABLE = 1, MM_OPENBLAS = 2 };

int train_mm_create(mm_ctx **out, int threads, int backend);
void train_mm_destroy(mm_ctx *c);
const char *train_mm_name(const mm_ctx *c);
/* The kernel in words: "portable avx2", "openblas Zen". */
void train_mm_describe(const mm_ctx *c, char *buf, size_t cap);
/* OpenBLAS's core type (openblas_get_corename), NULL when not built in. */
const char *train_mm_blas_core(void);
/* The worker pool, for layers other than matmul to share. */
pool *train_mm_pool(mm_ctx *c);
/* The portable kernel, whatever the backend, with one set of packing
 * buffers per pool thread (train_mmp_gemm_on). Both NULL for c NULL. */
mmp *train_mm_portable(mm_ctx *c);

void train_mm_gemm(mm_ctx *c, int ta, int tb, int M, int N, int K,
                   const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc);
/* The same with bf16 operands, fp32 accumulation and result (on the
 * portable kernel whichever the backend). */
void train_mm_gemm_bf16(mm_ctx *c, int ta, int tb, int M, int N, int K,
                        const uint16_t *A, int lda, const uint16_t *B, int ldb,
                        float beta, float *C, int ldc);

/* MM_AUTO on the model's own products (train/mm_choose.h). A model calls
 * begin at each forward with a key that determines its products' shapes
 * (config, batch, sequence, its part of the model): a choice cached for
 * the key is taken at once; else the products are recorded, on the peak
 * probe's kernel, until settle (after the first backward) times them on
 * both kernels and takes the faster. Both do nothing once chosen, or
 * for a model told its kernel. */
void train_mm_begin(mm_ctx *c, uint64_t key);
void train_mm_settle(mm_ctx *c);
/* The choice, NULL when none was made on the model's products. */
const mm_choice *train_mm_choice(const mm_ctx *c);
/* 1 while MM_AUTO still runs the peak probe's kernel (train_mm_name's)
 * before settle decides. */
int train_mm_provisional(const mm_ctx *c);

/* The portable kernel on its own (matmul_portable.c). */
int train_mmp_create(mmp **out, int threads);
void train_mmp_destroy(mmp *p);
/* The micro-kernel's instruction set: "avx512", "avx2" or "c". */
const char *train_mmp_isa(const mmp *p);
void train_mmp_gemm(mmp *p, pool *pl, int ta, int tb, int M, int N, int K,
                    const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc);
/* On the calling thread alone, with pool thread tid's packing buffers
 * (tid below the thread count p was made with): for work that is already
 * split over the pool, such as attention's per-head products. p NULL:
 * a plain loop, for callers without a model (gradient checks). */
void train_mmp_gemm_on(mmp *p, int tid, int ta, int tb, int M, int N, int K,
                       const float *A, int lda, const float *B, int ldb,
                       float beta, float *C, int ldc);
void train_mmp_gemm_bf16(mmp *p, pool *pl, int ta, int tb, int M, int N, int K,
                         const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         float beta, float *C, int ldc);

/* Threads to use when the caller gives none: WEFT_THREADS, else online
 * cores / ranks on this host (WEFT_LOCAL_SIZE, else LOCAL_WORLD_SIZE,
 * OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS), at least 1; WEFT_ECONFIG
 * (said on stderr) for a bad value. */
int train_mm_default_threads(void);

#endif
