/* What include/weft.h offers a benchmark of the engine: the matmul
 * kernels, the peak they are measured against and a step's model FLOPs,
 * over train/mm_auto.h, train/peak.h and train/flops.h. */
#include "train/flops.h"
#include "train/mm_auto.h"
#include "train/model.h"
#include "train/peak.h"
#include "weft.h"

#include <stdlib.h>
#include <string.h>

struct weft_matmul {
    mm_ctx *mm;
};

int weft_matmul_create(weft_matmul **out, const char *kernel, int threads)
{
    if (!out || !kernel)
        return WEFT_EINVAL;
    *out = NULL;
    int backend = !strcmp(kernel, "portable") ? MM_PORTABLE
                : !strcmp(kernel, "openblas") ? MM_OPENBLAS : -1;
    if (backend < 0)
        return WEFT_EINVAL;
    weft_matmul *m = malloc(sizeof *m);
    if (!m)
        return WEFT_ENOMEM;
    int rc = train_mm_create(&m->mm, threads, backend);
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void weft_matmul_destroy(weft_matmul *mm)
{
    if (!mm)
        return;
    train_mm_destroy(mm->mm);
    free(mm);
}

int weft_matmul_gemm(weft_matmul *mm, int ta, int tb, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (!mm || !A || !B || !C || M < 0 || N < 0 || K < 0)
        return WEFT_EINVAL;
    train_mm_gemm(mm->mm, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return 0;
}

static void peak_out(const train_peak *pk, weft_matmul_peak *out)
{
    memset(out, 0, sizeof *out);
    out->gflops = pk->gflops;
    out->port_gflops = pk->port_gflops;
    out->blas_gflops = pk->blas_gflops;
    out->port_mix = pk->port_mix;
    out->blas_mix = pk->blas_mix;
    snprintf(out->best, sizeof out->best, "%s", pk->best == MM_OPENBLAS ? "openblas" : "portable");
    snprintf(out->port_name, sizeof out->port_name, "%s", pk->port_name);
    snprintf(out->blas_name, sizeof out->blas_name, "%s", pk->blas_name);
    snprintf(out->source, sizeof out->source, "%s", pk->source);
}

int weft_matmul_peak_get(weft_matmul_peak *out)
{
    if (!out)
        return WEFT_EINVAL;
    train_peak pk;
    int rc = train_peak_get(&pk);
    if (!rc)
        peak_out(&pk, out);
    return rc;
}

int weft_matmul_peak_measure(weft_matmul_peak *out)
{
    if (!out)
        return WEFT_EINVAL;
    train_peak pk;
    int rc = train_peak_measure(&pk);
    if (!rc)
        peak_out(&pk, out);
    return rc;
}

int weft_matmul_peak_theory(double *gflops, double *mhz)
{
    double clock = 0, g = train_peak_theory(&clock);
    if (gflops)
        *gflops = g;
    if (mhz)
        *mhz = clock;
    return 0;
}

int weft_model_flops(const weft_model_config *cfg, int batch, int seq, double *flops)
{
    if (!cfg || !flops || batch < 0)
        return WEFT_EINVAL;
    *flops = train_model_flops(cfg, batch, seq);
    return 0;
}

int weft_model_matmul_choice(const weft_model *m, char *buf, size_t cap)
{
    if (buf && cap)
        *buf = 0;
    if (!m)
        return WEFT_EINVAL;
    const mm_choice *ch = train_mm_choice(m->mm);
    if (!ch)
        return 0;
    char text[512];
    train_mm_choice_text(ch, text, sizeof text);
    return snprintf(buf, cap, "%s", text);
}
