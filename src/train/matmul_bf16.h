/* The portable GEMM's bf16 micro-kernel: VDPBF16PS (AVX512-BF16), which
 * multiplies pairs of bf16 values and adds both products to an fp32 lane.
 * Operands are packed as such pairs along k (element 2q in the low half
 * of a 32-bit word, 2q + 1 in the high half); matmul_portable.c blocks,
 * threads and calls these. The functions run only where
 * train_mmb_supported() says so: they are compiled for the instruction
 * set by target attributes, so the library still runs on any x86-64. */
#ifndef TRAIN_MATMUL_BF16_H
#define TRAIN_MATMUL_BF16_H

#include <stddef.h>
#include <stdint.h>

/* The kernel's tile: 12 rows of C by 32 columns (two vectors). */
enum { MMB_MR = 12, MMB_NR = 32 };

/* 1 when this build has the kernel and the CPU and OS can run it: CPUID
 * leaf 7 subleaf 1 EAX bit 5 (AVX512-BF16), AVX-512 F/BW/VL, and XGETBV
 * showing the OS saves the vector and mask registers. */
int train_mmb_supported(void);

/* Packs a kc-deep slice of w rows (or columns) of an operand into panels
 * W wide (MMB_MR for A, MMB_NR for B), zero-padded: panel p at
 * dst + p ceil(kc/2) W, the pair of depths 2q, 2q + 1 of index j at
 * q W + j (an odd kc's last pair has a zero high half). along: element
 * (j, k) is src[j ld + k] (A untransposed, B transposed); else
 * src[k ld + j]. */
void train_mmb_pack(uint32_t *dst, int W, int along, const uint16_t *src, int ld, int w, int kc);

/* dst (rows dld words apart) = the 16 x 16 matrix of 32-bit words at
 * src (rows sld apart), transposed in registers: the AMX kernel's A
 * tiles hold each row's pairs along k, the transpose of this packing. */
void train_mmb_tr16(uint32_t *dst, size_t dld, const uint32_t *src, size_t sld);

/* C tile (mr x nr, within MMB_MR x MMB_NR) = (C +) a packed A panel times
 * a packed B panel, kp pairs deep; fp32 sums, each element's in k order. */
void train_mmb_kern(int kp, const uint32_t *a, const uint32_t *b, float *c, int ldc, int mr,
                    int nr, int accumulate);

/* Rounds n floats to bf16 (to nearest, ties to even) into dst. Where the
 * CPU has AVX512-BF16, VCVTNEPS2BF16, 16 to an instruction: it treats
 * subnormal inputs (below 2^-126 in magnitude) as zero, which no
 * activation or weight of a training run comes near; elsewhere
 * core/half.h's half_f32_to_bf16, which rounds those too. Picked once
 * (train_mmb_rounder) so that short rows do not pay for CPUID. */
typedef void (*mmb_round_fn)(uint16_t *dst, const float *src, size_t n);
mmb_round_fn train_mmb_rounder(void);

/* matmul.h's train_mmp_gemm_on with bf16 operands (matmul_portable.c):
 * on the calling thread with pool thread tid's buffers, on the bf16
 * kernel where the portable kernel has one, else widened; p NULL: a
 * plain loop over the widened values. For attention's per-head products,
 * which are already split over the pool. */
struct mmp;
void train_mmp_gemm_bf16_on(struct mmp *p, int tid, int ta, int tb, int M, int N, int K,
                            const uint16_t *A, int lda, const uint16_t *B, int ldb,
                            float beta, float *C, int ldc);

#endif
