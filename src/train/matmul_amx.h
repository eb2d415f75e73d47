/* The portable GEMM's bf16 products on AMX tiles (TDPBF16PS: a 16 x 16
 * fp32 tile += a 16-row tile of bf16 pairs along k times a 16-pair-deep
 * tile of 16 columns' pairs), with blocking and packing of their own:
 * matmul_portable.c hands a thread's whole product here where
 * train_mma_supported() says the CPU and the OS allow it. Nothing here
 * runs a tile instruction unless asked to by that path. */
#ifndef TRAIN_MATMUL_AMX_H
#define TRAIN_MATMUL_AMX_H

#include <stddef.h>
#include <stdint.h>

/* A block of C is 2 x 2 tiles (32 x 32): what threads split C by. The
 * blocking: k in slices of MMA_KC, C's rows in MMA_MC, its columns in
 * MMA_NC (the packed B slice, 1 MiB, in L2; a 32-column panel of it,
 * 32 KiB, in L1 across the 32-row blocks of A). */
enum { MMA_TILE = 32, MMA_MC = 128, MMA_KC = 512, MMA_NC = 1024 };

/* Sizes in bytes of the packing buffers train_mma_gemm takes: A's slice
 * (with a panel of scratch) and B's. */
size_t train_mma_abytes(void);
size_t train_mma_bbytes(void);

/* 1 when the tiles may be used: CPUID leaf 7 EDX bits 24 (AMX-TILE) and
 * 22 (AMX-BF16), tile palette 1 with 8 tiles of 16 rows of 64 bytes
 * (leaf 0x1D), the AVX-512 that the packing uses (train_mmb_supported),
 * the kernel's grant of the tile data state to this process
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); the grant is per
 * process, and asking again is harmless) and XCR0 bits 17 and 18 set.
 * Else 0, and why (cap bytes, may be NULL) says which was missing. */
int train_mma_supported(char *why, size_t cap);

/* C[M,N] (ldc) = op(A) op(B) (+ C where accumulate), bf16 operands, fp32
 * sums, each element's in k order within a slice and the slices' sums
 * added to C in k order; M, N, K >= 1. abuf and bbuf: 64-byte aligned,
 * of the sizes above. emulate: the tiles' products in plain C on the
 * same packed panels, in the same order, so that the packing and
 * blocking around the tiles can be checked on a CPU without AMX (it
 * needs train_mmb_supported(), which the packing does). */
void train_mma_gemm(void *abuf, void *bbuf, int ta, int tb, int M, int N, int K,
                    const uint16_t *A, int lda, const uint16_t *B, int ldb, int accumulate,
                    float *C, int ldc, int emulate);

#endif
