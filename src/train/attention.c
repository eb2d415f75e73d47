/* Causal multi-head self-attention, forward and backward, split over
 * (batch, head) pairs on the model's thread pool, in the manner of
 * FlashAttention: the T x T probabilities are never stored. Forward keeps
 * one row of scores at a time and saves only each row's log-sum-exp;
 * backward recomputes a row's probabilities from it (one more q.k per
 * pair, a quarter more arithmetic) instead of reading B*NH*T*T floats
 * back from memory. So a head needs O(T) memory at any length. */
#include <math.h>
#include <string.h>

#include "train/layers.h"

/* Worth vectorising with run-time alias checks (see layers.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Eight partial sums: independent chains, and the compiler can keep them
 * in one vector register. The order is fixed, so results are too. */
static float dot(const float *a, const float *b, int n)
{
    float acc[8] = { 0 };
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void axpy(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

typedef struct {
    float *out, *att, *dqkv, *datt;
    const float *qkv, *dout, *catt;
    int B, T, C, NH;
} att_job;

/* Scores of query row t against keys 0..t, scaled, into s; returns
 * their maximum. */
static float scores(const float *q, const float *kbase, int C3, int t, int hs, float scale,
                    float *s)
{
    float mx = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) {
        float v = dot(q, kbase + (size_t)t2 * C3, hs) * scale;
        s[t2] = v;
        mx = v > mx ? v : mx;
    }
    return mx;
}

static void att_fwd_bh(const att_job *j, int b, int h)
{
    int T = j->T, C = j->C, NH = j->NH, hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = j->qkv + (size_t)b * T * C3;
    const float *kb = base + C + h * hs, *vb = base + 2 * C + h * hs;
    size_t bh = (size_t)b * NH + h;
    float one, *lse = j->att + bh * T, *row = T >= 2 ? j->datt + bh * T : &one;
    for (int t = 0; t < T; t++) {
        float mx = scores(base + (size_t)t * C3 + h * hs, kb, C3, t, hs, scale, row);
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            row[t2] = expf(row[t2] - mx);
            sum += row[t2];
        }
        float inv = 1.0f / sum;
        float *o = j->out + ((size_t)b * T + t) * C + h * hs;
        memset(o, 0, sizeof(float) * hs);
        for (int t2 = 0; t2 <= t; t2++)
            axpy(o, row[t2] * inv, vb + (size_t)t2 * C3, hs);
        lse[t] = mx + logf(sum);
    }
}

static void att_bwd_bh(const att_job *j, int b, int h)
{
    int T = j->T, C = j->C, NH = j->NH, hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = j->qkv + (size_t)b * T * C3;
    const float *kb = base + C + h * hs, *vb = base + 2 * C + h * hs;
    float *dbase = j->dqkv + (size_t)b * T * C3;
    size_t bh = (size_t)b * NH + h;
    const float *lse = j->catt + bh * T;
    /* two rows of scratch per pair: probabilities and their gradients */
    float one[2], *p = T >= 2 ? j->datt + bh * 2 * T : one, *da = T >= 2 ? p + T : one + 1;
    for (int t = 0; t < T; t++) {
        float *dq = dbase + (size_t)t * C3 + h * hs;
        memset(dq, 0, sizeof(float) * hs);
        memset(dq + C, 0, sizeof(float) * hs);
        memset(dq + 2 * C, 0, sizeof(float) * hs);
    }
    for (int t = 0; t < T; t++) {
        const float *dout = j->dout + ((size_t)b * T + t) * C + h * hs;
        const float *q = base + (size_t)t * C3 + h * hs;
        float *dq = dbase + (size_t)t * C3 + h * hs;
        scores(q, kb, C3, t, hs, scale, p);
        /* through out = sum p v */
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            p[t2] = expf(p[t2] - lse[t]);
            float s = dot(dout, vb + (size_t)t2 * C3, hs);
            axpy(dbase + (size_t)t2 * C3 + 2 * C + h * hs, p[t2], dout, hs);
            da[t2] = s;
            sum += s * p[t2];
        }
        /* through the softmax, then q.k */
        for (int t2 = 0; t2 <= t; t2++) {
            float dp = p[t2] * (da[t2] - sum) * scale;
            axpy(dq, dp, kb + (size_t)t2 * C3, hs);
            axpy(dbase + (size_t)t2 * C3 + C + h * hs, dp, q, hs);
        }
    }
}

static void att_fwd_worker(void *v, int tid, int nt)
{
    att_job *j = v;
    int lo, hi;
    train_pool_split(j->B * j->NH, 1, tid, nt, &lo, &hi);
    for (int i = lo; i < hi; i++)
        att_fwd_bh(j, i / j->NH, i % j->NH);
}

static void att_bwd_worker(void *v, int tid, int nt)
{
    att_job *j = v;
    int lo, hi;
    train_pool_split(j->B * j->NH, 1, tid, nt, &lo, &hi);
    for (int i = lo; i < hi; i++)
        att_bwd_bh(j, i / j->NH, i % j->NH);
}

void train_attention_forward(pool *pl, float *out, float *att, const float *qkv,
                             int B, int T, int C, int NH)
{
    /* the score rows go after the saved log-sum-exps, in att's own space */
    att_job j = { .out = out, .att = att, .datt = att + (size_t)B * NH * T, .qkv = qkv,
                  .B = B, .T = T, .C = C, .NH = NH };
    train_pool_run(pl, att_fwd_worker, &j);
}

void train_attention_backward(pool *pl, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH)
{
    att_job j = { .dqkv = dqkv, .datt = datt, .dout = dout, .qkv = qkv, .catt = att,
                  .B = B, .T = T, .C = C, .NH = NH };
    train_pool_run(pl, att_bwd_worker, &j);
}
