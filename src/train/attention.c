/* Causal multi-head self-attention, forward and backward, split over
 * (batch, head) pairs on the model's thread pool, in the manner of
 * FlashAttention: the T x T probabilities are never stored. A pair's
 * queries go in blocks of QB rows; a block's scores against the keys it
 * may see are one matrix product on the portable kernel, its output
 * another, so the arithmetic runs at matmul speed rather than as one dot
 * product per (query, key). Forward saves only each row's log-sum-exp;
 * backward recomputes a block's probabilities from it (one more Q K^T, a
 * quarter more arithmetic) instead of reading B*NH*T*T floats back from
 * memory. So a head needs O(QB T) memory at any length.
 *
 * Keys and values may have fewer heads than the queries (grouped-query
 * attention): kv head g serves query heads g*NH/NKV .. (g+1)*NH/NKV - 1.
 * Backward then runs a kv head's group of query heads on one thread, in
 * order, so their sums into its dK and dV need no locks and do not depend
 * on the thread count.
 *
 * In a bf16 run (attention_prec.h) the products' operands are rounded to
 * bf16 into per-thread scratch first: a kv head's K and V once for all
 * its query blocks, a block's Q, dO, P and dS as they come; the softmax
 * and its gradient read the fp32 sums, as in an fp32 run. All but one:
 * dK = dS^T Q stays fp32. Each row of dS sums to zero (the softmax does
 * not see a shift of its scores), so the key bias's gradient, the column
 * sums of dK, is zero but for fp32 rounding; dS rounded to bf16 sums to
 * 2^-9 of its size instead, and AdamW, which divides by the gradient's
 * own scale, turned that noise into steps of the full learning rate
 * (the GPT's key bias wandered from torch's by half its norm in ten
 * steps). It is one of attention's six products. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/attention_prec.h"
#include "train/matmul_bf16.h"
#include "train/vexp.h"

/* Worth vectorising with run-time alias checks (see layers.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Query rows per block: enough rows for the micro-kernel's 6-row tiles to
 * be mostly full, few enough that a block's two score rows (QB x T floats
 * each) stay in L2 at T of some hundreds. Fixed, not chosen from the
 * thread count, so results do not depend on WEFT_THREADS. */
enum { QB = 64 };

/* The row's largest value, and row[i] = exp(a row[i] - b) over it with
 * the sum of the results: a softmax's two passes. Eight lanes where the
 * CPU has AVX2 (the same on every thread, so results still do not depend
 * on the thread count). */
static float row_max_c(const float *row, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = row[i] > mx ? row[i] : mx;
    return mx;
}

#ifdef VEXP_X86
VEXP_TARGET static float row_max_avx2(const float *row, int n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_ps(m, _mm256_loadu_ps(row + i));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float mx = _mm_cvtss_f32(h);
    for (; i < n; i++)
        mx = row[i] > mx ? row[i] : mx;
    return mx;
}

#endif

/* q, k and v (and their gradients) are rows of stride qs, ks, vs; the
 * output's rows are NH*hs wide. */
typedef struct {
    float *out, *att, *dq, *dk, *dv, *datt;
    const float *q, *k, *v, *dout, *catt;
    int qs, ks, vs, NKV, hs;
    mmp *mm;
    int avx2;
    /* per-thread scratch of 2 QB T floats, or NULL when it could not be
     * had: then blocks are one row, in each pair's slice of the caller's
     * scratch (2 T floats at datt + 2 T bh) */
    float *scr;
    /* bf16 runs: per-thread bf16 scratch of S16 elements (s16_size), or
     * NULL for fp32 products (an fp32 run, or no memory for it) */
    uint16_t *scr16;
    mmb_round_fn round;
    int B, T, C, NH;
} att_job;

/* A thread's bf16 scratch: a kv head's K and V (T x hs each), a block's
 * Q and dO (QB x hs), P and dS (QB x T). */
typedef struct {
    uint16_t *k, *v, *q, *d, *p, *s;
} att_b16;

static size_t s16_size(int T, int hs)
{
    return (size_t)2 * T * hs + (size_t)2 * QB * hs + (size_t)2 * QB * T;
}

static att_b16 b16_of(const att_job *j, int tid)
{
    att_b16 b = { 0 };
    if (!j->scr16)
        return b;
    size_t th = (size_t)j->T * j->hs, qh = (size_t)QB * j->hs;
    b.k = j->scr16 + (size_t)tid * s16_size(j->T, j->hs);
    b.v = b.k + th;
    b.q = b.v + th;
    b.d = b.q + qh;
    b.p = b.d + qh;
    b.s = b.p + (size_t)QB * j->T;
    return b;
}

/* dst[r][0..cols) (row stride cols) = src's rows (stride sld), rounded. */
static void round_rows(const att_job *j, uint16_t *dst, const float *src, int sld, int rows,
                       int cols)
{
    for (int r = 0; r < rows; r++)
        j->round(dst + (size_t)r * cols, src + (size_t)r * sld, (size_t)cols);
}

/* The block's scratch and its row count; bufs: how many T-float rows a
 * one-row block needs (forward 1, backward 2). */
static float *block_scratch(const att_job *j, int tid, size_t bh, int bufs, float *local,
                            int *qb)
{
    if (j->scr) {
        *qb = QB;
        return j->scr + (size_t)tid * 2 * QB * j->T;
    }
    *qb = 1;
    return j->T >= 2 ? j->datt + bh * bufs * j->T : local;
}

static float row_max(const att_job *j, const float *row, int n)
{
#ifdef VEXP_X86
    if (j->avx2)
        return row_max_avx2(row, n);
#endif
    (void)j;
    return row_max_c(row, n);
}

static float row_exp(const att_job *j, float *row, int n, float a, float b)
{
    return vexp_row(row, n, a, b, j->avx2);
}

/* S[m x n] (row stride T) = Q[t0..t0+m) K[0..n)^T, the block's raw scores;
 * in bf16 with b16's K and this block's Q rounded into b16.q. */
static void block_scores(const att_job *j, const att_b16 *b16, int tid, const float *q,
                         const float *kb, int m, int n, float *S)
{
    if (b16->k) {
        round_rows(j, b16->q, q, j->qs, m, j->hs);
        train_mmp_gemm_bf16_on(j->mm, tid, 0, 1, m, n, j->hs, b16->q, j->hs, b16->k, j->hs,
                               0.0f, S, j->T);
        return;
    }
    train_mmp_gemm_on(j->mm, tid, 0, 1, m, n, j->hs, q, j->qs, kb, j->ks, 0.0f, S, j->T);
}

/* C = op(A) op(B) (+ C): fp32 operands (A, B) or, with b16 set, their
 * bf16 roundings (A16, B16, rows as wide as the product's own). */
typedef struct {
    const float *a;
    int lda;
    const uint16_t *a16;
    int lda16;
} att_opd;

static void att_prod(const att_job *j, int bf16, int tid, int ta, int tb, int M, int N, int K,
                     att_opd A, att_opd B, float beta, float *C, int ldc)
{
    if (bf16)
        train_mmp_gemm_bf16_on(j->mm, tid, ta, tb, M, N, K, A.a16, A.lda16, B.a16, B.lda16,
                               beta, C, ldc);
    else
        train_mmp_gemm_on(j->mm, tid, ta, tb, M, N, K, A.a, A.lda, B.a, B.lda, beta, C, ldc);
}

/* Query head h's kv head. */
static int kv_of(const att_job *j, int h)
{
    return h / (j->NH / j->NKV);
}

static void att_fwd_bh(const att_job *j, int tid, int b, int h)
{
    int T = j->T, NH = j->NH, hs = j->hs, C = NH * hs, qb, g = kv_of(j, h);
    float scale = 1.0f / sqrtf((float)hs);
    const float *qbase = j->q + (size_t)b * T * j->qs + h * hs;
    const float *kb = j->k + (size_t)b * T * j->ks + g * hs;
    const float *vb = j->v + (size_t)b * T * j->vs + g * hs;
    size_t bh = (size_t)b * NH + h;
    float local[2], *lse = j->att + bh * T, *S = block_scratch(j, tid, bh, 1, local, &qb);
    att_b16 b16 = b16_of(j, tid);
    if (b16.k) {
        round_rows(j, b16.k, kb, j->ks, T, hs);
        round_rows(j, b16.v, vb, j->vs, T, hs);
    }
    for (int t0 = 0; t0 < T; t0 += qb) {
        int m = T - t0 < qb ? T - t0 : qb, n = t0 + m;
        block_scores(j, &b16, tid, qbase + (size_t)t0 * j->qs, kb, m, n, S);
        for (int r = 0; r < m; r++) {
            float *row = S + (size_t)r * T;
            int t = t0 + r;
            /* scale > 0, so the scaled row's largest is the raw one's, scaled */
            float mx = row_max(j, row, t + 1) * scale;
            float sum = row_exp(j, row, t + 1, scale, mx), inv = 1.0f / sum;
            for (int t2 = 0; t2 <= t; t2++)
                row[t2] *= inv;
            for (int t2 = t + 1; t2 < n; t2++)   /* the future, masked */
                row[t2] = 0.0f;
            lse[t] = mx + logf(sum);
        }
        if (b16.k)
            round_rows(j, b16.p, S, T, m, n);
        att_opd P = { S, T, b16.p, n }, V = { vb, j->vs, b16.v, hs };
        att_prod(j, b16.k != NULL, tid, 0, 0, m, hs, n, P, V, 0.0f,
                 j->out + ((size_t)b * T + t0) * C + h * hs, C);
    }
}

/* Query head h's share of dQ (written) and of its kv head's dK, dV
 * (added: the caller zeroes them once for the group, and in bf16 rounds
 * its K and V into b16). */
static void att_bwd_bh(const att_job *j, const att_b16 *b16, int tid, int b, int h)
{
    int T = j->T, NH = j->NH, hs = j->hs, C = NH * hs, qb, g = kv_of(j, h);
    int qs = j->qs, ks = j->ks, vs = j->vs;
    float scale = 1.0f / sqrtf((float)hs);
    const float *qbase = j->q + (size_t)b * T * qs + h * hs;
    const float *kb = j->k + (size_t)b * T * ks + g * hs;
    const float *vb = j->v + (size_t)b * T * vs + g * hs;
    float *dq = j->dq + (size_t)b * T * qs + h * hs;
    float *dk = j->dk + (size_t)b * T * ks + g * hs, *dv = j->dv + (size_t)b * T * vs + g * hs;
    size_t bh = (size_t)b * NH + h;
    const float *lse = j->catt + bh * T;
    float local[2], *P = block_scratch(j, tid, bh, 2, local, &qb);
    float *dP = P + (size_t)qb * T;
    for (int t0 = 0; t0 < T; t0 += qb) {
        int m = T - t0 < qb ? T - t0 : qb, n = t0 + m;
        const float *q = qbase + (size_t)t0 * qs;
        const float *dout = j->dout + ((size_t)b * T + t0) * C + h * hs;
        block_scores(j, b16, tid, q, kb, m, n, P);
        int h16 = b16->k != NULL;
        if (h16)
            round_rows(j, b16->d, dout, C, m, hs);
        att_opd DO = { dout, C, b16->d, hs }, V = { vb, vs, b16->v, hs };
        /* dP = dO V^T, the probabilities' gradient */
        att_prod(j, h16, tid, 0, 1, m, n, hs, DO, V, 0.0f, dP, T);
        for (int r = 0; r < m; r++) {
            float *p = P + (size_t)r * T, *dp = dP + (size_t)r * T;
            int t = t0 + r;
            float sum = 0.0f;
            row_exp(j, p, t + 1, scale, lse[t]);
            for (int t2 = 0; t2 <= t; t2++)
                sum += p[t2] * dp[t2];
            /* through the softmax, and the scale of q.k */
            for (int t2 = 0; t2 <= t; t2++)
                dp[t2] = p[t2] * (dp[t2] - sum) * scale;
            for (int t2 = t + 1; t2 < n; t2++)
                p[t2] = dp[t2] = 0.0f;
        }
        if (h16) {
            round_rows(j, b16->p, P, T, m, n);
            round_rows(j, b16->s, dP, T, m, n);
        }
        /* b16->q still holds this block's Q, from block_scores */
        att_opd Pm = { P, T, b16->p, n }, S = { dP, T, b16->s, n };
        att_opd K = { kb, ks, b16->k, hs }, Q = { q, qs, b16->q, hs };
        /* dV += P^T dO, dQ = dS K, dK += dS^T Q; dK's from fp32 dS (see
         * the top of the file) */
        att_prod(j, h16, tid, 1, 0, n, hs, m, Pm, DO, 1.0f, dv, vs);
        att_prod(j, h16, tid, 0, 0, m, hs, n, S, K, 0.0f, dq + (size_t)t0 * qs, qs);
        att_prod(j, 0, tid, 1, 0, n, hs, m, S, Q, 1.0f, dk, ks);
    }
}

/* kv head g of batch row b: its dK and dV gather from every later query
 * block of every query head of its group. */
static void att_bwd_group(const att_job *j, int tid, int b, int g)
{
    int T = j->T, hs = j->hs, per = j->NH / j->NKV;
    float *dk = j->dk + (size_t)b * T * j->ks + g * hs, *dv = j->dv + (size_t)b * T * j->vs + g * hs;
    for (int t = 0; t < T; t++) {
        memset(dk + (size_t)t * j->ks, 0, sizeof(float) * hs);
        memset(dv + (size_t)t * j->vs, 0, sizeof(float) * hs);
    }
    att_b16 b16 = b16_of(j, tid);
    if (b16.k) {
        round_rows(j, b16.k, j->k + (size_t)b * T * j->ks + g * hs, j->ks, T, hs);
        round_rows(j, b16.v, j->v + (size_t)b * T * j->vs + g * hs, j->vs, T, hs);
    }
    for (int h = g * per; h < (g + 1) * per; h++)
        att_bwd_bh(j, &b16, tid, b, h);
}

static void att_fwd_worker(void *v, int tid, int nt)
{
    att_job *j = v;
    int lo, hi;
    train_pool_split(j->B * j->NH, 1, tid, nt, &lo, &hi);
    for (int i = lo; i < hi; i++)
        att_fwd_bh(j, tid, i / j->NH, i % j->NH);
}

static void att_bwd_worker(void *v, int tid, int nt)
{
    att_job *j = v;
    int lo, hi;
    train_pool_split(j->B * j->NKV, 1, tid, nt, &lo, &hi);
    for (int i = lo; i < hi; i++)
        att_bwd_group(j, tid, i / j->NKV, i % j->NKV);
}

/* A block of QB rows needs scratch that the caller's 2 B NH T floats may
 * not hold; without it (no memory) the blocks are single rows, slower
 * but the same arithmetic. */
static void run(mm_ctx *mm, int bf16, pool_fn fn, att_job *j)
{
    pool *pl = train_mm_pool(mm);
    size_t per = (size_t)2 * QB * j->T, nt = (size_t)train_pool_size(pl);
    j->mm = train_mm_portable(mm);
#ifdef VEXP_X86
    j->avx2 = vexp_have_avx2();
#endif
    j->scr = malloc(sizeof(float) * per * nt);
    /* bf16 blocks are QB rows, so they need the fp32 block scratch too */
    j->round = train_mm_rounder(mm);
    j->scr16 = bf16 && j->scr ? malloc(sizeof(uint16_t) * s16_size(j->T, j->hs) * nt) : NULL;
    double t0 = train_mm_clock();   /* attention's phase, apart from the pass's */
    train_pool_run(pl, fn, j);
    train_mm_add_attention(mm, t0);
    free(j->scr16);
    free(j->scr);
}

void train_attention_gqa_forward_prec(mm_ctx *mm, int bf16, float *out, float *att,
                                      const float *q, const float *k, const float *v, int qs,
                                      int ks, int vs, int B, int T, int NH, int NKV, int hs)
{
    /* without a block scratch, the score rows go after the saved
     * log-sum-exps, in att's own space */
    att_job j = { .out = out, .att = att, .datt = att + (size_t)B * NH * T, .q = q, .k = k,
                  .v = v, .qs = qs, .ks = ks, .vs = vs, .NKV = NKV, .hs = hs,
                  .B = B, .T = T, .C = NH * hs, .NH = NH };
    run(mm, bf16, att_fwd_worker, &j);
}

void train_attention_gqa_backward_prec(mm_ctx *mm, int bf16, float *dq, float *dk, float *dv,
                                       float *datt, const float *dout, const float *q,
                                       const float *k, const float *v, const float *att,
                                       int qs, int ks, int vs, int B, int T, int NH, int NKV,
                                       int hs)
{
    att_job j = { .dq = dq, .dk = dk, .dv = dv, .datt = datt, .dout = dout, .q = q, .k = k,
                  .v = v, .catt = att, .qs = qs, .ks = ks, .vs = vs, .NKV = NKV, .hs = hs,
                  .B = B, .T = T, .C = NH * hs, .NH = NH };
    run(mm, bf16, att_bwd_worker, &j);
}

void train_attention_gqa_forward(mm_ctx *mm, float *out, float *att, const float *q,
                                 const float *k, const float *v, int qs, int ks, int vs,
                                 int B, int T, int NH, int NKV, int hs)
{
    train_attention_gqa_forward_prec(mm, 0, out, att, q, k, v, qs, ks, vs, B, T, NH, NKV, hs);
}

void train_attention_gqa_backward(mm_ctx *mm, float *dq, float *dk, float *dv, float *datt,
                                  const float *dout, const float *q, const float *k,
                                  const float *v, const float *att, int qs, int ks, int vs,
                                  int B, int T, int NH, int NKV, int hs)
{
    train_attention_gqa_backward_prec(mm, 0, dq, dk, dv, datt, dout, q, k, v, att, qs, ks, vs,
                                      B, T, NH, NKV, hs);
}

void train_attention_forward_prec(mm_ctx *mm, int bf16, float *out, float *att,
                                  const float *qkv, int B, int T, int C, int NH)
{
    train_attention_gqa_forward_prec(mm, bf16, out, att, qkv, qkv + C, qkv + 2 * C, 3 * C,
                                     3 * C, 3 * C, B, T, NH, NH, C / NH);
}

void train_attention_backward_prec(mm_ctx *mm, int bf16, float *dqkv, float *datt,
                                   const float *dout, const float *qkv, const float *att, int B,
                                   int T, int C, int NH)
{
    train_attention_gqa_backward_prec(mm, bf16, dqkv, dqkv + C, dqkv + 2 * C, datt, dout, qkv,
                                      qkv + C, qkv + 2 * C, att, 3 * C, 3 * C, 3 * C, B, T, NH,
                                      NH, C / NH);
}

void train_attention_forward(mm_ctx *mm, float *out, float *att, const float *qkv,
                             int B, int T, int C, int NH)
{
    train_attention_forward_prec(mm, 0, out, att, qkv, B, T, C, NH);
}

void train_attention_backward(mm_ctx *mm, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH)
{
    train_attention_backward_prec(mm, 0, dqkv, datt, dout, qkv, att, B, T, C, NH);
}
