/* The experts' SwiGLU MLPs on rows gathered by expert (moe_experts.c),
 * for the layer on one rank (moe.c) and for a rank's own experts under
 * expert parallelism (moe_ep.c), and the product both use. */
#ifndef TRAIN_MOE_EXPERTS_H
#define TRAIN_MOE_EXPERTS_H

#include "train/matmul.h"
#include "train/moe_types.h"

/* C = A(^T) B(^T) + beta C with the portable kernel, whose sums do not
 * depend on the thread count (a plain loop without a context). */
void train_moe_gemm(mm_ctx *mm, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);

/* Experts e0..e0+ne-1 on their gathered rows: expert e0+i's rows are
 * start[i]..start[i+1]-1 of xe (input [D]), gu ([2F]), h ([F]), ye
 * (output [D]). Forward fills gu, h and ye; backward, from dye, fills dh,
 * dgu and dxe and ADDS the experts' weight gradients. Expert e0+i's
 * weights (and weight gradients) are at index e0+i of wgu and wd: give e0
 * 0 when they hold these ne experts alone. */
void train_moe_experts_forward(mm_ctx *mm, const moe_dims *d, int e0, int ne,
                               const int32_t *start, const float *xe, float *gu, float *h,
                               float *ye, const float *wgu, const float *wd);
void train_moe_experts_backward(mm_ctx *mm, const moe_dims *d, int e0, int ne,
                                const int32_t *start, const float *dye, const float *xe,
                                const float *gu, const float *h, float *dh, float *dgu,
                                float *dxe, float *dwgu, float *dwd, const float *wgu,
                                const float *wd);

#endif
