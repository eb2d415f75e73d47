/* Causal multi-head self-attention, forward and backward, written as
 * plain loops (sequences here are short), split over (batch, head) pairs
 * on the model's thread pool. */
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

static void att_fwd_bh(const att_job *j, int b, int h)
{
    int T = j->T, C = j->C, NH = j->NH, hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = j->qkv + (size_t)b * T * C3;
    for (int t = 0; t < T; t++) {
        const float *q = base + (size_t)t * C3 + h * hs;
        float *a = j->att + (((size_t)b * NH + h) * T + t) * T;
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
            float s = dot(q, base + (size_t)t2 * C3 + C + h * hs, hs) * scale;
            a[t2] = s;
            mx = s > mx ? s : mx;
        }
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            a[t2] = expf(a[t2] - mx);
            sum += a[t2];
        }
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++)
            a[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++)
            a[t2] = 0.0f;
        float *o = j->out + ((size_t)b * T + t) * C + h * hs;
        memset(o, 0, sizeof(float) * hs);
        for (int t2 = 0; t2 <= t; t2++)
            axpy(o, a[t2], base + (size_t)t2 * C3 + 2 * C + h * hs, hs);
    }
}

static void att_bwd_bh(const att_job *j, int b, int h)
{
    int T = j->T, C = j->C, NH = j->NH, hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = j->qkv + (size_t)b * T * C3;
    float *dbase = j->dqkv + (size_t)b * T * C3;
    for (int t = 0; t < T; t++) {
        float *dq = dbase + (size_t)t * C3 + h * hs;
        float *dk = dq + C, *dv = dq + 2 * C;
        memset(dq, 0, sizeof(float) * hs);
        memset(dk, 0, sizeof(float) * hs);
        memset(dv, 0, sizeof(float) * hs);
    }
    for (int t = 0; t < T; t++) {
        const float *a = j->catt + (((size_t)b * NH + h) * T + t) * T;
        float *da = j->datt + (((size_t)b * NH + h) * T + t) * T;
        const float *dout = j->dout + ((size_t)b * T + t) * C + h * hs;
        const float *q = base + (size_t)t * C3 + h * hs;
        float *dq = dbase + (size_t)t * C3 + h * hs;
        /* through out = sum att * v */
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            float s = dot(dout, base + (size_t)t2 * C3 + 2 * C + h * hs, hs);
            axpy(dbase + (size_t)t2 * C3 + 2 * C + h * hs, a[t2], dout, hs);
            da[t2] = s;
            sum += s * a[t2];
        }
        /* through the softmax, then q.k */
        for (int t2 = 0; t2 <= t; t2++) {
            float dp = a[t2] * (da[t2] - sum) * scale;
            axpy(dq, dp, base + (size_t)t2 * C3 + C + h * hs, hs);
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
    att_job j = { .out = out, .att = att, .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH };
    train_pool_run(pl, att_fwd_worker, &j);
}

void train_attention_backward(pool *pl, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH)
{
    att_job j = { .dqkv = dqkv, .datt = datt, .dout = dout, .qkv = qkv, .catt = att,
                  .B = B, .T = T, .C = C, .NH = NH };
    train_pool_run(pl, att_bwd_worker, &j);
}
