/* The experts on their gathered rows (moe_experts.h): each expert's rows
 * in one product, gate and up together (2F rows of the weight), SwiGLU,
 * down; or (GELU, the GPT's) fc, GELU, proj; backward the mirror, the
 * weight gradients added. A GELU expert's proj is stored hidden-major
 * ([F, D], the transpose of the dense MLP's) so that tensor parallelism
 * cuts fc and proj by the same rows: each rank's hidden units are the
 * same in both. */
#include "train/moe_experts.h"

#include "train/layers.h"
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

/* One expert's rows r0..r0+n-1 (n > 0), each kind of expert. GELU: fc
 * [F,D] and proj [F,D] of expert e at e*F*D, the pre-activation kept in
 * gu (F of its 2F floats a row). SwiGLU: gate|up [2F,D] at e*2F*D, down
 * [D,F] at e*D*F. */
typedef void fwd_fn(mm_ctx *mm, const moe_dims *d, int e, int r0, int n, const float *xe,
                    float *gu, float *h, float *ye, const float *w1, const float *w2);
typedef void bwd_fn(mm_ctx *mm, const moe_dims *d, int e, int r0, int n, const float *dye,
                    const float *xe, const float *gu, const float *h, float *dh, float *dgu,
                    float *dxe, float *dw1, float *dw2, const float *w1, const float *w2);

static void gelu_forward(mm_ctx *mm, const moe_dims *d, int e, int r0, int n, const float *xe,
                         float *gu, float *h, float *ye, const float *wfc, const float *wpr)
{
    int D = d->D, F = d->F;
    float *pre = gu + (size_t)r0 * F, *he = h + (size_t)r0 * F;
    train_moe_gemm(mm, 0, 1, n, F, D, xe + (size_t)r0 * D, D, wfc + (size_t)e * F * D, D, 0.0f,
                   pre, F);
    train_gelu_forward(mm ? train_mm_pool(mm) : NULL, he, pre, (size_t)n * F);
    train_moe_gemm(mm, 0, 0, n, D, F, he, F, wpr + (size_t)e * F * D, D, 0.0f,
                   ye + (size_t)r0 * D, D);
}

static void gelu_backward(mm_ctx *mm, const moe_dims *d, int e, int r0, int n, const float *dye,
                          const float *xe, const float *gu, const float *h, float *dh,
                          float *dgu, float *dxe, float *dwfc, float *dwpr, const float *wfc,
                          const float *wpr)
{
    (void)dgu; /* the pre-activation's gradient replaces dh in place */
    int D = d->D, F = d->F;
    size_t w = (size_t)e * F * D;
    const float *dy = dye + (size_t)r0 * D;
    float *dhe = dh + (size_t)r0 * F;
    train_moe_gemm(mm, 0, 1, n, F, D, dy, D, wpr + w, D, 0.0f, dhe, F);
    train_moe_gemm(mm, 1, 0, F, D, n, h + (size_t)r0 * F, F, dy, D, 1.0f, dwpr + w, D);
    train_gelu_backward(mm ? train_mm_pool(mm) : NULL, dhe, dhe, gu + (size_t)r0 * F,
                        (size_t)n * F);
    train_moe_gemm(mm, 0, 0, n, D, F, dhe, F, wfc + w, D, 0.0f, dxe + (size_t)r0 * D, D);
    train_moe_gemm(mm, 1, 0, F, D, n, dhe, F, xe + (size_t)r0 * D, D, 1.0f, dwfc + w, D);
}

static void swiglu_forward(mm_ctx *mm, const moe_dims *d, int e, int r0, int n,
                           const float *xe, float *gu, float *h, float *ye, const float *wgu,
                           const float *wd)
{
    int D = d->D, F = d->F;
    train_moe_gemm(mm, 0, 1, n, 2 * F, D, xe + (size_t)r0 * D, D, wgu + (size_t)e * 2 * F * D,
                   D, 0.0f, gu + (size_t)r0 * 2 * F, 2 * F);
    train_swiglu_forward(h + (size_t)r0 * F, gu + (size_t)r0 * 2 * F, n, F);
    train_moe_gemm(mm, 0, 1, n, D, F, h + (size_t)r0 * F, F, wd + (size_t)e * D * F, F, 0.0f,
                   ye + (size_t)r0 * D, D);
}

static void swiglu_backward(mm_ctx *mm, const moe_dims *d, int e, int r0, int n,
                            const float *dye, const float *xe, const float *gu, const float *h,
                            float *dh, float *dgu, float *dxe, float *dwgu, float *dwd,
                            const float *wgu, const float *wd)
{
    int D = d->D, F = d->F;
    const float *dy = dye + (size_t)r0 * D, *we = wd + (size_t)e * D * F;
    float *dhe = dh + (size_t)r0 * F, *dgue = dgu + (size_t)r0 * 2 * F;
    train_moe_gemm(mm, 0, 0, n, F, D, dy, D, we, F, 0.0f, dhe, F);
    train_moe_gemm(mm, 1, 0, D, F, n, dy, D, h + (size_t)r0 * F, F, 1.0f,
                   dwd + (size_t)e * D * F, F);
    train_swiglu_backward(dgue, dhe, gu + (size_t)r0 * 2 * F, n, F);
    train_moe_gemm(mm, 0, 0, n, D, 2 * F, dgue, 2 * F, wgu + (size_t)e * 2 * F * D, D, 0.0f,
                   dxe + (size_t)r0 * D, D);
    train_moe_gemm(mm, 1, 0, 2 * F, D, n, dgue, 2 * F, xe + (size_t)r0 * D, D, 1.0f,
                   dwgu + (size_t)e * 2 * F * D, D);
}

void train_moe_experts_forward(mm_ctx *mm, const moe_dims *d, int e0, int ne,
                               const int32_t *start, const float *xe, float *gu, float *h,
                               float *ye, const float *wgu, const float *wd)
{
    fwd_fn *f = d->gelu ? gelu_forward : swiglu_forward;
    for (int i = 0; i < ne; i++)
        if (start[i + 1] > start[i])
            f(mm, d, e0 + i, start[i], start[i + 1] - start[i], xe, gu, h, ye, wgu, wd);
}

void train_moe_experts_backward(mm_ctx *mm, const moe_dims *d, int e0, int ne,
                                const int32_t *start, const float *dye, const float *xe,
                                const float *gu, const float *h, float *dh, float *dgu,
                                float *dxe, float *dwgu, float *dwd, const float *wgu,
                                const float *wd)
{
    bwd_fn *f = d->gelu ? gelu_backward : swiglu_backward;
    for (int i = 0; i < ne; i++)
        if (start[i + 1] > start[i])
            f(mm, d, e0 + i, start[i], start[i + 1] - start[i], dye, xe, gu, h, dh, dgu, dxe,
              dwgu, dwd, wgu, wd);
}
