#include "train/layers.h"

#include <math.h>
#include <string.h>

#include "train/matmul_bf16.h"
#include "train/vexp.h"

/* The elementwise loops here are worth vectorising with run-time alias
 * checks, which -O2's cheap cost model declines. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Bias passes split over the pool: below this many elements one thread. */
enum { BIAS_PAR_MIN = 1 << 16 };

typedef struct {
    float *out;
    const float *b;
    size_t n;
} bias_job;

static void bias_add_rows(void *arg, size_t lo, size_t hi)
{
    const bias_job *j = arg;
    for (size_t r = lo; r < hi; r++) {
        float *o = j->out + r * j->n;
        for (size_t c = 0; c < j->n; c++)
            o[c] += j->b[c];
    }
}

typedef struct {
    float *db;
    const float *dout;
    size_t rows, n;
} bgrad_job;

/* A thread's columns, each summed over the rows in row order as one
 * thread would, so the bits do not depend on the thread count. */
static void bias_grad_cols(void *arg, size_t lo, size_t hi)
{
    const bgrad_job *j = arg;
    for (size_t r = 0; r < j->rows; r++) {
        const float *d = j->dout + r * j->n;
        for (size_t c = lo; c < hi; c++)
            j->db[c] += d[c];
    }
}

typedef struct {
    uint16_t *dst;
    const float *src;
    mmb_round_fn round;
} round_job;

static void round_range(void *arg, size_t lo, size_t hi)
{
    const round_job *j = arg;
    j->round(j->dst + lo, j->src + lo, hi - lo);
}

/* dst = src rounded to bf16, split over the pool: a bf16 run rounds each
 * product's input, weight and incoming gradient, several of a step's
 * percent on one thread. Each element's rounding is its own, so the
 * split changes no bit. */
static void round16(const lin_ctx *c, uint16_t *dst, const float *src, size_t n)
{
    round_job j = { dst, src, train_mm_rounder(c->mm) };
    train_pool_for(train_mm_pool(c->mm), n, 32, BIAS_PAR_MIN, round_range, &j);
}

void train_linear_forward(const lin_ctx *c, const lin_save *save, float *out, const float *in,
                          const float *w, const float *b, int rows, int k, int n)
{
    if (c->bf16) {
        round16(c, save->x, in, (size_t)rows * k);
        round16(c, save->w, w, (size_t)n * k);
        train_mm_gemm_bf16(c->mm, 0, 1, rows, n, k, save->x, k, save->w, k, 0.0f, out, n);
    } else {
        train_mm_gemm(c->mm, 0, 1, rows, n, k, in, k, w, k, 0.0f, out, n);
    }
    if (b) {
        bias_job j = { out, b, (size_t)n };
        train_pool_for(train_mm_pool(c->mm), (size_t)rows, 1,
                       (size_t)(BIAS_PAR_MIN / (n > 0 ? n : 1)) + 1, bias_add_rows, &j);
    }
}

/* db += the column sums of dout (db may be NULL). */
static void bias_grad(const lin_ctx *c, float *db, const float *dout, int rows, int n)
{
    if (!db)
        return;
    bgrad_job j = { db, dout, (size_t)rows, (size_t)n };
    /* 16 columns a piece: two threads never write one cache line */
    train_pool_for((size_t)rows * n >= BIAS_PAR_MIN ? train_mm_pool(c->mm) : NULL, (size_t)n, 16,
                   0, bias_grad_cols, &j);
}

void train_linear_backward_input(const lin_ctx *c, const lin_save *save, float *din,
                                 const float *dout, const float *w, int rows, int k, int n)
{
    if (c->bf16) {
        uint16_t *d16 = c->scratch;
        round16(c, d16, dout, (size_t)rows * n);
        train_mm_gemm_bf16(c->mm, 0, 0, rows, k, n, d16, n, save->w, k, 0.0f, din, k);
        return;
    }
    train_mm_gemm(c->mm, 0, 0, rows, k, n, dout, n, w, k, 0.0f, din, k);
}

void train_linear_backward_weight(const lin_ctx *c, const lin_save *save, float *dw, float *db,
                                  const float *dout, const float *in, int rows, int k, int n)
{
    bias_grad(c, db, dout, rows, n);
    if (c->bf16) {
        uint16_t *d16 = c->scratch;
        round16(c, d16, dout, (size_t)rows * n);
        train_mm_gemm_bf16(c->mm, 1, 0, n, k, rows, d16, n, save->x, k, 1.0f, dw, k);
        return;
    }
    train_mm_gemm(c->mm, 1, 0, n, k, rows, dout, n, in, k, 1.0f, dw, k);
}

void train_linear_backward(const lin_ctx *c, const lin_save *save, float *din, float *dw,
                           float *db, const float *dout, const float *in, const float *w,
                           int rows, int k, int n)
{
    if (!c->bf16) {
        if (din)
            train_linear_backward_input(c, save, din, dout, w, rows, k, n);
        train_linear_backward_weight(c, save, dw, db, dout, in, rows, k, n);
        return;
    }
    /* one rounding of dout serves both products */
    bias_grad(c, db, dout, rows, n);
    uint16_t *d16 = c->scratch;
    round16(c, d16, dout, (size_t)rows * n);
    if (din)
        train_mm_gemm_bf16(c->mm, 0, 0, rows, k, n, d16, n, save->w, k, 0.0f, din, k);
    train_mm_gemm_bf16(c->mm, 1, 0, n, k, rows, d16, n, save->x, k, 1.0f, dw, k);
}

/* Branch-free forms: signs are random, so branches would mispredict half
 * the time, and these vectorise. */
void train_relu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        out[i] = x > 0.0f ? x : 0.0f;
    }
}

void train_relu_backward(float *din, const float *dout, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float d = dout[i];
        din[i] = in[i] > 0.0f ? d : 0.0f;
    }
}

#define GELU_K 0.7978845608028654f   /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* Below this many elements (or rows) a pass is not worth waking threads. */
enum { PAR_MIN_ELEMS = 1 << 15, PAR_MIN_ROWS = 64 };

typedef struct {
    float *out, *mean, *rstd, *dw, *db;
    const float *in, *dout, *w, *b, *cmean, *crstd;
    size_t rows;
    int c;
} layer_job;

/* 0.5 (1 + tanh u) is the logistic function of 2u, which costs one expf
 * where tanhf costs an expm1f and more; the two agree to float rounding.
 * With AVX2 eight at a time through vexp.h, sixteen with AVX-512 (a call
 * of expf per element was most of the time here); the last n % 8 go through the same vector
 * code, padded, so every element's value is the same wherever a thread's
 * piece starts. */
static inline float gelu_s(float x)
{
    return 1.0f / (1.0f + expf(-2.0f * GELU_K * (x + GELU_C * x * x * x)));
}

/* mode: GELU_FWD out = gelu(in); GELU_BWD out = dout gelu'(in);
 * GELU_BIAS in += b, then out = gelu(in). */
enum { GELU_FWD, GELU_BWD, GELU_BIAS };

static void gelu_c(int mode, float *out, float *in, const float *dout, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        if (mode == GELU_BIAS)
            in[i] = x = x + b[i];
        float s = gelu_s(x);
        if (mode == GELU_BWD) {
            /* with t = tanh u = 2s - 1: d/dx = s + x * 2 s (1 - s) du/dx */
            float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
            out[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
        } else {
            out[i] = x * s;
        }
    }
}

#ifdef VEXP_X86
/* gelu256 and gelu512: the formula on a vector; each lane goes through the
 * same operations in the same order at either width, so an element's bits
 * do not depend on which width takes it. */
#define GELU_DEF(W, TARGET)                                                              \
    TARGET static __m##W gelu##W(int mode, __m##W x, __m##W d)                          \
    {                                                                                   \
        const __m##W one = VEXP_MM(W, set1_ps)(1.0f), k = VEXP_MM(W, set1_ps)(GELU_K);   \
        __m##W x2 = VEXP_MM(W, mul_ps)(x, x);                                           \
        __m##W u = VEXP_MM(W, mul_ps)(                                                  \
            k, VEXP_MM(W, fmadd_ps)(VEXP_MM(W, mul_ps)(VEXP_MM(W, set1_ps)(GELU_C), x2), x, x)); \
        __m##W s = VEXP_MM(W, div_ps)(                                                  \
            one, VEXP_MM(W, add_ps)(                                                    \
                     one, vexp##W##_ps(VEXP_MM(W, mul_ps)(VEXP_MM(W, set1_ps)(-2.0f), u)))); \
        if (mode != GELU_BWD)                                                           \
            return VEXP_MM(W, mul_ps)(x, s);                                            \
        __m##W du = VEXP_MM(W, mul_ps)(                                                 \
            k, VEXP_MM(W, fmadd_ps)(VEXP_MM(W, set1_ps)(3.0f * GELU_C), x2, one));      \
        __m##W t = VEXP_MM(W, mul_ps)(VEXP_MM(W, mul_ps)(VEXP_MM(W, add_ps)(x, x), s),  \
                                      VEXP_MM(W, sub_ps)(one, s));                      \
        return VEXP_MM(W, mul_ps)(d, VEXP_MM(W, fmadd_ps)(t, du, s));                   \
    }                                                                                   \
    /* the whole vectors of n; returns how many it did */                              \
    TARGET static size_t gelu_loop##W(int mode, float *out, float *in, const float *dout, \
                                      const float *b, size_t n)                         \
    {                                                                                   \
        const size_t L = sizeof(__m##W) / sizeof(float);                               \
        size_t i = 0;                                                                   \
        for (; i + L <= n; i += L) {                                                    \
            __m##W x = VEXP_MM(W, loadu_ps)(in + i);                                    \
            if (mode == GELU_BIAS) {                                                    \
                x = VEXP_MM(W, add_ps)(x, VEXP_MM(W, loadu_ps)(b + i));                 \
                VEXP_MM(W, storeu_ps)(in + i, x);                                       \
            }                                                                           \
            __m##W d = mode == GELU_BWD ? VEXP_MM(W, loadu_ps)(dout + i) : x;           \
            VEXP_MM(W, storeu_ps)(out + i, gelu##W(mode, x, d));                        \
        }                                                                               \
        return i;                                                                       \
    }
GELU_DEF(256, VEXP_TARGET)
GELU_DEF(512, VEXP512_TARGET)
#undef GELU_DEF

/* Sixteens (with AVX-512), then eights; the last n % 8 go through the
 * same vector code, padded. */
VEXP_TARGET static void gelu_avx2(int mode, float *out, float *in, const float *dout,
                                  const float *b, size_t n, int avx512)
{
    size_t i = avx512 ? gelu_loop512(mode, out, in, dout, b, n) : 0;
    i += gelu_loop256(mode, out + i, in + i, dout ? dout + i : NULL, b ? b + i : NULL, n - i);
    if (i < n) {
        float x[8] = { 0 }, d[8] = { 0 }, o[8];
        for (size_t k = 0; i + k < n; k++) {
            x[k] = in[i + k] + (mode == GELU_BIAS ? b[i + k] : 0.0f);
            d[k] = mode == GELU_BWD ? dout[i + k] : 0.0f;
        }
        _mm256_storeu_ps(o, gelu256(mode, _mm256_loadu_ps(x), _mm256_loadu_ps(d)));
        for (size_t k = 0; i + k < n; k++) {
            if (mode == GELU_BIAS)
                in[i + k] = x[k];
            out[i + k] = o[k];
        }
    }
}
#endif

static void gelu_any(int mode, float *out, float *in, const float *dout, const float *b, size_t n)
{
#ifdef VEXP_X86
    if (vexp_have_avx2()) {
        gelu_avx2(mode, out, in, dout, b, n, vexp_have_avx512());
        return;
    }
#endif
    gelu_c(mode, out, in, dout, b, n);
}

static void gelu_fwd_range(void *v, size_t lo, size_t hi)
{
    layer_job *j = v;
    gelu_any(GELU_FWD, j->out + lo, (float *)j->in + lo, NULL, NULL, hi - lo);
}

static void gelu_bwd_range(void *v, size_t lo, size_t hi)
{
    layer_job *j = v;
    gelu_any(GELU_BWD, j->out + lo, (float *)j->in + lo, j->dout + lo, NULL, hi - lo);
}

static void bias_gelu_rows(void *v, size_t lo, size_t hi)
{
    layer_job *j = v;
    int n = j->c;
    float *pre = (float *)j->in;   /* written: the job's only in-place field */
    for (size_t r = lo; r < hi; r++)
        gelu_any(GELU_BIAS, j->out + r * n, pre + r * n, NULL, j->b, (size_t)n);
}

void train_bias_gelu_forward(pool *pl, float *out, float *pre, const float *b, int rows, int n)
{
    layer_job j = { .out = out, .in = pre, .b = b, .c = n };
    train_pool_for(pl, (size_t)rows, 1, (size_t)(PAR_MIN_ELEMS / (n > 0 ? n : 1)) + 1,
                   bias_gelu_rows, &j);
}

void train_gelu_forward(pool *pl, float *out, const float *in, size_t n)
{
    layer_job j = { .out = out, .in = in };
    train_pool_for(pl, n, 16, PAR_MIN_ELEMS, gelu_fwd_range, &j);
}

void train_gelu_backward(pool *pl, float *din, const float *dout, const float *in, size_t n)
{
    layer_job j = { .out = din, .dout = dout, .in = in };
    train_pool_for(pl, n, 16, PAR_MIN_ELEMS, gelu_bwd_range, &j);
}

/* A row's sums in LN_LANES interleaved partial sums, added up at the
 * end: one running sum waits an add's latency per element, which made
 * LayerNorm a few percent of a width-128 GPT's step. The order depends
 * only on c, so results do not depend on the thread count. */
enum { LN_LANES = 8 };

static double lanes_sum_d(const double *acc)
{
    double s = 0.0;
    for (int l = 0; l < LN_LANES; l++)
        s += acc[l];
    return s;
}

static float lanes_sum_f(const float *acc)
{
    float s = 0.0f;
    for (int l = 0; l < LN_LANES; l++)
        s += acc[l];
    return s;
}

static void ln_fwd_rows(void *v, size_t lo, size_t hi)
{
    layer_job *j = v;
    int c = j->c, cl = c / LN_LANES * LN_LANES;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->in + r * c;
        float *o = j->out + r * c;
        double acc[LN_LANES] = { 0 }, m, var;
        for (int i = 0; i < cl; i += LN_LANES)
            for (int l = 0; l < LN_LANES; l++)
                acc[l] += x[i + l];
        for (int i = cl; i < c; i++)
            acc[i - cl] += x[i];
        m = lanes_sum_d(acc) / c;
        for (int l = 0; l < LN_LANES; l++)
            acc[l] = 0.0;
        for (int i = 0; i < cl; i += LN_LANES)
            for (int l = 0; l < LN_LANES; l++) {
                double d = x[i + l] - m;
                acc[l] += d * d;
            }
        for (int i = cl; i < c; i++) {
            double d = x[i] - m;
            acc[i - cl] += d * d;
        }
        var = lanes_sum_d(acc) / c;
        float s = (float)(1.0 / sqrt(var + 1e-5));
        float mf = (float)m;
        for (int i = 0; i < c; i++)
            o[i] = (x[i] - mf) * s * j->w[i] + j->b[i];
        j->mean[r] = mf;
        j->rstd[r] = s;
    }
}

void train_layernorm_forward(pool *pl, float *out, float *mean, float *rstd, const float *in,
                             const float *w, const float *b, int rows, int c)
{
    layer_job j = { .out = out, .mean = mean, .rstd = rstd, .in = in, .w = w, .b = b, .c = c };
    train_pool_for(pl, (size_t)rows, 1, PAR_MIN_ROWS, ln_fwd_rows, &j);
}

/* dx = s * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w: per row. */
static void ln_bwd_rows(void *v, size_t lo, size_t hi)
{
    layer_job *j = v;
    int c = j->c, cl = c / LN_LANES * LN_LANES;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->in + r * c, *dy = j->dout + r * c;
        float *dx = j->out + r * c;
        float m = j->cmean[r], s = j->crstd[r];
        float ga[LN_LANES] = { 0 }, gxa[LN_LANES] = { 0 };
        for (int i = 0; i < cl; i += LN_LANES)
            for (int l = 0; l < LN_LANES; l++) {
                float xh = (x[i + l] - m) * s, g = dy[i + l] * j->w[i + l];
                ga[l] += g;
                gxa[l] += g * xh;
            }
        for (int i = cl; i < c; i++) {
            float xh = (x[i] - m) * s, g = dy[i] * j->w[i];
            ga[i - cl] += g;
            gxa[i - cl] += g * xh;
        }
        float gmean = lanes_sum_f(ga) / c, gxmean = lanes_sum_f(gxa) / c;
        for (int i = 0; i < c; i++) {
            float xh = (x[i] - m) * s, g = dy[i] * j->w[i];
            dx[i] += s * (g - gmean - xh * gxmean);
        }
    }
}

/* dw and db: each column summed over rows in row order, so the split
 * (by columns) leaves every sum as it is on one thread. */
static void ln_bwd_cols(void *v, size_t lo, size_t hi)
{
    layer_job *j = v;
    int c = j->c;
    for (size_t r = 0; r < j->rows; r++) {
        const float *x = j->in + r * c, *dy = j->dout + r * c;
        float m = j->cmean[r], s = j->crstd[r];
        for (size_t i = lo; i < hi; i++) {
            j->db[i] += dy[i];
            j->dw[i] += dy[i] * ((x[i] - m) * s);
        }
    }
}

void train_layernorm_backward(pool *pl, float *din, float *dw, float *db, const float *dout,
                              const float *in, const float *w, const float *mean,
                              const float *rstd, int rows, int c)
{
    layer_job j = { .out = din, .dw = dw, .db = db, .in = in, .dout = dout, .w = w,
                    .cmean = mean, .crstd = rstd, .rows = (size_t)rows, .c = c };
    train_pool_for(pl, (size_t)rows, 1, PAR_MIN_ROWS, ln_bwd_rows, &j);
    train_pool_for(rows >= PAR_MIN_ROWS ? pl : NULL, (size_t)c, 16, 0, ln_bwd_cols, &j);
}

void train_embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                             int B, int T, int C)
{
    for (int bt = 0; bt < B * T; bt++) {
        const float *te = wte + (size_t)tok[bt] * C, *pe = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
        for (int i = 0; i < C; i++)
            o[i] = te[i] + pe[i];
    }
}

void train_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                              int B, int T, int C)
{
    for (int bt = 0; bt < B * T; bt++) {
        float *te = dwte + (size_t)tok[bt] * C, *pe = dwpe + (size_t)(bt % T) * C;
        const float *d = dout + (size_t)bt * C;
        for (int i = 0; i < C; i++) {
            te[i] += d[i];
            pe[i] += d[i];
        }
    }
}

void train_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

double train_softmax_xent_forward(float *probs, const float *logits, const int32_t *targets,
                                  int rows, int v, int *count)
{
    double loss = 0.0;
    int cnt = 0;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * v;
        float *p = probs + (size_t)r * v;
        float mx = z[0];
        for (int i = 1; i < v; i++)
            mx = z[i] > mx ? z[i] : mx;
        double sum = 0.0;
        for (int i = 0; i < v; i++) {
            p[i] = expf(z[i] - mx);
            sum += p[i];
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < v; i++)
            p[i] *= inv;
        if (targets && targets[r] >= 0) {
            /* log-sum-exp form: exact even when the probability underflows */
            loss += log(sum) - (double)(z[targets[r]] - mx);
            cnt++;
        }
    }
    if (count)
        *count = cnt;
    return loss;
}

void train_softmax_xent_backward(float *dlogits, const float *probs, const int32_t *targets,
                                 int rows, int v, float scale)
{
    for (int r = 0; r < rows; r++) {
        const float *p = probs + (size_t)r * v;
        float *d = dlogits + (size_t)r * v;
        int t = targets[r];
        if (t < 0) {
            memset(d, 0, sizeof(float) * v);
            continue;
        }
        for (int i = 0; i < v; i++)
            d[i] = p[i] * scale;
        d[t] -= scale;
    }
}
