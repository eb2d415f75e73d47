/* One matrix-multiply interface for every layer: OpenBLAS's cblas_sgemm
 * or the portable blocked kernel (MM_AUTO's choice between them is
 * train/mm_auto.h's).
 * Row-major, alpha = 1: C[M,N] = op(A)[M,K] op(B)[K,N] + beta C, where
 * op(X) is X transposed when its flag is set. */
#ifndef TRAIN_MATMUL_H
#define TRAIN_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "train/matmul_bf16.h"
#include "train/mm_shapes.h"
#include "train/pool.h"

typedef struct mm_ctx mm_ctx;
typedef struct mmp mmp;

/* backend MM_PORTABLE or MM_OPENBLAS (WEFT_ENOTSUP without OpenBLAS). */
int train_mm_create_fixed(mm_ctx **out, int threads, int backend);
void train_mm_destroy(mm_ctx *c);
const char *train_mm_name(const mm_ctx *c);
/* The kernel in words: "portable avx2", "openblas Zen"; with ", bf16
 * avx512bf16" after it where bf16 operands have a kernel of their own. */
void train_mm_describe(const mm_ctx *c, char *buf, size_t cap);
/* OpenBLAS's core type (openblas_get_corename), NULL when not built in. */
const char *train_mm_blas_core(void);
/* The bf16 rounder train_mmb_rounder picked when c was made (c NULL: its
 * answer now). Asking it each time cost four CPUIDs, each a trap to the
 * hypervisor in a virtual machine: 41 us a call on the machine of
 * docs/BENCHMARKS.md, a few ms of every bf16 step. */
mmb_round_fn train_mm_rounder(const mm_ctx *c);
/* The worker pool, for layers other than matmul to share. */
pool *train_mm_pool(mm_ctx *c);
/* The portable kernel, whatever the backend, with one set of packing
 * buffers per pool thread (train_mmp_gemm_on). Both NULL for c NULL. */
mmp *train_mm_portable(mm_ctx *c);

void train_mm_gemm(mm_ctx *c, int ta, int tb, int M, int N, int K,
                   const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc);
/* On the given kernel whatever the context's choice (timing them). */
void train_mm_gemm_with(mm_ctx *c, int backend, int ta, int tb, int M, int N, int K,
                        const float *A, int lda, const float *B, int ldb,
                        float beta, float *C, int ldc);
/* The same with bf16 operands, fp32 accumulation and result (on the
 * portable kernel whichever the backend): its bf16 kernel where the CPU
 * has one, else widened to fp32 while packing. */
void train_mm_gemm_bf16(mm_ctx *c, int ta, int tb, int M, int N, int K,
                        const uint16_t *A, int lda, const uint16_t *B, int ldb,
                        float beta, float *C, int ldc);

/* The portable kernel on its own (matmul_portable.c), at the instruction
 * set WEFT_MATMUL_ISA allows. */
int train_mmp_create(mmp **out, int threads);
/* WEFT_MATMUL_ISA's words, in the parameter table's order. */
enum { MMP_ISA_AUTO, MMP_ISA_AMX, MMP_ISA_AVX512BF16, MMP_ISA_AVX512, MMP_ISA_AVX2, MMP_ISA_C };
/* The same at an MMP_ISA_* cap, whatever the variable says; WEFT_ECONFIG
 * (said on stderr, with the reason) for MMP_ISA_AMX or MMP_ISA_AVX512BF16
 * on a CPU (or OS) without it. */
int train_mmp_create_isa(mmp **out, int threads, int isa);
void train_mmp_destroy(mmp *p);
/* The micro-kernel's instruction set: "avx512", "avx2" or "c". */
const char *train_mmp_isa(const mmp *p);
/* bf16 operands' kernel: "amx" or "avx512bf16"; NULL where they are widened to
 * fp32 for train_mmp_isa's (no such CPU, or WEFT_MATMUL_ISA below it). */
const char *train_mmp_isa_bf16(const mmp *p);
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

/* Attention's share of a step (--phases): attention.c adds each pass's
 * wall time since `since` (a train_mm_clock reading) to the context's sum,
 * which train_mm_attention_s reads; c NULL: nothing. Only the thread
 * that runs the model's passes calls these. */
double train_mm_clock(void);
void train_mm_add_attention(mm_ctx *c, double since);
double train_mm_attention_s(const mm_ctx *c);

/* Threads to use when the caller gives none: WEFT_THREADS, else online
 * cores / ranks on this host (WEFT_LOCAL_SIZE, else LOCAL_WORLD_SIZE,
 * OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS), at least 1; WEFT_ECONFIG
 * (said on stderr) for a bad value. */
int train_mm_default_threads(void);

#endif
