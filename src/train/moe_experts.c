/* The experts on their gathered rows (moe_experts.h): each expert's rows
 * in one product, gate and up together (2F rows of the weight), SwiGLU,
 * down; backward the mirror, the weight gradients added. */
#include "train/moe_experts.h"

#include "train/layers_llama.h"

void train_moe_gemm(mm_ctx *mm, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc)
{
    mmp *p = mm ? train_mm_portable(mm) : NULL;
    if (p)
        train_mmp_gemm(p, train_mm_pool(mm), ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    else
        train_mmp_gemm_on(NULL, 0, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void train_moe_experts_forward(mm_ctx *mm, const moe_dims *d, int e0, int ne,
                               const int32_t *start, const float *xe, float *gu, float *h,
                               float *ye, const float *wgu, const float *wd)
{
    int D = d->D, F = d->F;
    for (int i = 0; i < ne; i++) {
        int e = e0 + i, r0 = start[i], n = start[i + 1] - r0;
        if (n == 0)
            continue;
        train_moe_gemm(mm, 0, 1, n, 2 * F, D, xe + (size_t)r0 * D, D,
                       wgu + (size_t)e * 2 * F * D, D, 0.0f, gu + (size_t)r0 * 2 * F, 2 * F);
        train_swiglu_forward(h + (size_t)r0 * F, gu + (size_t)r0 * 2 * F, n, F);
        train_moe_gemm(mm, 0, 1, n, D, F, h + (size_t)r0 * F, F, wd + (size_t)e * D * F, F,
                       0.0f, ye + (size_t)r0 * D, D);
    }
}

void train_moe_experts_backward(mm_ctx *mm, const moe_dims *d, int e0, int ne,
                                const int32_t *start, const float *dye, const float *xe,
                                const float *gu, const float *h, float *dh, float *dgu,
                                float *dxe, float *dwgu, float *dwd, const float *wgu,
                                const float *wd)
{
    int D = d->D, F = d->F;
    for (int i = 0; i < ne; i++) {
        int e = e0 + i, r0 = start[i], n = start[i + 1] - r0;
        if (n == 0)
            continue;
        const float *dy = dye + (size_t)r0 * D, *we = wd + (size_t)e * D * F;
        float *dhe = dh + (size_t)r0 * F, *dgue = dgu + (size_t)r0 * 2 * F;
        train_moe_gemm(mm, 0, 0, n, F, D, dy, D, we, F, 0.0f, dhe, F);
        train_moe_gemm(mm, 1, 0, D, F, n, dy, D, h + (size_t)r0 * F, F, 1.0f,
                       dwd + (size_t)e * D * F, F);
        train_swiglu_backward(dgue, dhe, gu + (size_t)r0 * 2 * F, n, F);
        train_moe_gemm(mm, 0, 0, n, D, 2 * F, dgue, 2 * F, wgu + (size_t)e * 2 * F * D, D,
                       0.0f, dxe + (size_t)r0 * D, D);
        train_moe_gemm(mm, 1, 0, 2 * F, D, n, dgue, 2 * F, xe + (size_t)r0 * D, D, 1.0f,
                       dwgu + (size_t)e * 2 * F * D, D);
    }
}
