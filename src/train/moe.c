/* The mixture-of-experts MLP (moe.h). Scores: softmax over all experts
 * with the k picked renormalised to sum to 1 (Mixtral's: the same as a
 * softmax over the k picked logits), or sigmoids, the k picked normalised
 * likewise (DeepSeek-V3's). Selection reads score + bias; the combine
 * weights never see the bias. Capacity is served in token order, each
 * token's picks best first: a token past an expert's capacity skips it
 * (its other picks still count). Balancing losses (weights aux, z):
 *   aux = E * sum_i f_i P_i, f_i = picks_i / (N K), P_i = mean_t q_ti
 *         (q: the softmax, or the sigmoids normalised over all experts);
 *   z   = mean_t logsumexp(logits_t)^2. */
#include <math.h>
#include <string.h>

#include "train/layers_llama.h"
#include "train/moe.h"

int train_moe_capacity(int N, int K, int E, float C)
{
    if (!(C > 0.0f))
        return N;
    double v = ceil((double)N * K * (double)C / E);
    if (v < 1.0)
        v = 1.0;
    return v > N ? N : (int)v;
}

size_t train_moe_acts_floats(const moe_dims *d)
{
    size_t N = (size_t)d->N, E = (size_t)d->E, NK = N * (size_t)d->K, D = (size_t)d->D;
    size_t F = (size_t)d->F;
    return 2 * N * E + 4 * NK + 2 * E + 1 + NK * (2 * D + 3 * F);
}

size_t train_moe_scratch_floats(const moe_dims *d)
{
    size_t N = (size_t)d->N, E = (size_t)d->E, NK = N * (size_t)d->K, D = (size_t)d->D;
    size_t F = (size_t)d->F;
    return NK * (2 * D + 3 * F) + N * E + NK;
}

void train_moe_acts_at(moe_acts *a, const moe_dims *d, float *p)
{
    size_t N = (size_t)d->N, E = (size_t)d->E, NK = N * (size_t)d->K, D = (size_t)d->D;
    size_t F = (size_t)d->F;
    a->logits = p;
    a->score = p += N * E;
    a->sel = (int32_t *)(p += N * E);
    a->row = (int32_t *)(p += NK);
    a->gate = p += NK;
    a->tok = (int32_t *)(p += NK);
    a->start = (int32_t *)(p += NK);
    a->picks = (int32_t *)(p += E + 1);
    a->xe = p += E;
    a->gu = p += NK * D;
    a->h = p += NK * 2 * F;
    a->ye = p + NK * F;
}

void train_moe_scratch_at(moe_scratch *s, const moe_dims *d, float *p)
{
    size_t N = (size_t)d->N, E = (size_t)d->E, NK = N * (size_t)d->K, D = (size_t)d->D;
    size_t F = (size_t)d->F;
    s->dye = p;
    s->dh = p += NK * D;
    s->dgu = p += NK * F;
    s->dxe = p += NK * 2 * F;
    s->dsc = p += NK * D;
    s->dg = p + N * E;
}

/* The portable kernel (its sums do not depend on the thread count), or a
 * plain loop without a context. */
static void gemm(mm_ctx *mm, int ta, int tb, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc)
{
    mmp *p = mm ? train_mm_portable(mm) : NULL;
    if (p)
        train_mmp_gemm(p, train_mm_pool(mm), ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    else
        train_mmp_gemm_on(NULL, 0, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

static float row_lse(const float *l, int E)
{
    float mx = l[0];
    for (int e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    double s = 0.0;
    for (int e = 0; e < E; e++)
        s += exp((double)(l[e] - mx));
    return mx + (float)log(s);
}

static void scores(const moe_dims *d, moe_acts *a, moe_count *c)
{
    int E = d->E;
    double z = 0.0;
    for (int t = 0; t < d->N; t++) {
        const float *l = a->logits + (size_t)t * E;
        float *s = a->score + (size_t)t * E, lse = row_lse(l, E);
        z += (double)lse * lse;
        for (int e = 0; e < E; e++)
            s[e] = d->sigmoid ? 1.0f / (1.0f + expf(-l[e])) : expf(l[e] - lse);
    }
    c->z = z / d->N;
}

/* Token t's k best by score + bias (ties: the lower expert), best first,
 * and their combine weights. */
static void pick(const moe_dims *d, moe_acts *a, const float *bias, int t)
{
    int E = d->E, K = d->K;
    const float *s = a->score + (size_t)t * E;
    int32_t *sel = a->sel + (size_t)t * K;
    float *gate = a->gate + (size_t)t * K, sum = 0.0f;
    for (int j = 0; j < K; j++) {
        int best = -1;
        float bk = 0.0f;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++)
                taken |= sel[i] == e;
            float key = s[e] + (bias ? bias[e] : 0.0f);
            if (!taken && (best < 0 || key > bk)) {
                best = e;
                bk = key;
            }
        }
        sel[j] = best;
        sum += s[best];
    }
    for (int j = 0; j < K; j++)
        gate[j] = sum > 0.0f ? s[sel[j]] / sum : 1.0f / (float)K;
}

static void route(const moe_dims *d, moe_acts *a, const float *bias, int64_t *load, moe_count *c)
{
    int N = d->N, E = d->E, K = d->K;
    memset(a->start, 0, sizeof(int32_t) * (size_t)(E + 1));
    memset(a->picks, 0, sizeof(int32_t) * (size_t)E);
    c->routed = c->dropped = 0;
    for (int t = 0; t < N; t++) {
        pick(d, a, bias, t);
        for (int j = 0; j < K; j++) {
            int e = a->sel[(size_t)t * K + j];
            a->picks[e]++;
            c->routed++;
            if (a->start[e] < d->cap) {
                a->row[(size_t)t * K + j] = a->start[e]++;
            } else {
                a->row[(size_t)t * K + j] = -1;
                c->dropped++;
            }
        }
    }
    int32_t run = 0;
    for (int e = 0; e <= E; e++) {
        int32_t n = e < E ? a->start[e] : 0;
        a->start[e] = run;
        run += n;
    }
    for (size_t i = 0; i < (size_t)N * K; i++)
        if (a->row[i] >= 0) {
            a->row[i] += a->start[a->sel[i]];
            a->tok[a->row[i]] = (int32_t)(i / (size_t)K);
        }
    if (load)
        for (int e = 0; e < E; e++)
            load[e] += a->picks[e];
}

/* q_ti: what the aux loss averages (the softmax, or the normalised sigmoids). */
static double aux_value(const moe_dims *d, const moe_acts *a)
{
    int N = d->N, E = d->E;
    double sum = 0.0;
    for (int t = 0; t < N; t++) {
        const float *s = a->score + (size_t)t * E;
        double norm = 1.0;
        if (d->sigmoid) {
            norm = 0.0;
            for (int e = 0; e < E; e++)
                norm += s[e];
        }
        for (int e = 0; e < E; e++)
            sum += (double)a->picks[e] / ((double)N * d->K) * (s[e] / norm);
    }
    return E * sum / N;
}

void train_moe_forward(mm_ctx *mm, const moe_dims *d, moe_acts *a, float *out, const float *x,
                       const float *wr, const float *bias, const float *wgu, const float *wd,
                       int64_t *load, moe_count *cnt)
{
    int N = d->N, D = d->D, E = d->E, K = d->K, F = d->F;
    gemm(mm, 0, 1, N, E, D, x, D, wr, D, 0.0f, a->logits, E);
    scores(d, a, cnt);
    route(d, a, bias, load, cnt);
    cnt->aux = aux_value(d, a);
    for (int e = 0; e < E; e++) {
        int r0 = a->start[e], n = a->start[e + 1] - r0;
        if (n == 0)
            continue;
        for (int r = r0; r < r0 + n; r++)
            memcpy(a->xe + (size_t)r * D, x + (size_t)a->tok[r] * D, sizeof(float) * (size_t)D);
        gemm(mm, 0, 1, n, 2 * F, D, a->xe + (size_t)r0 * D, D, wgu + (size_t)e * 2 * F * D, D,
             0.0f, a->gu + (size_t)r0 * 2 * F, 2 * F);
        train_swiglu_forward(a->h + (size_t)r0 * F, a->gu + (size_t)r0 * 2 * F, n, F);
        gemm(mm, 0, 1, n, D, F, a->h + (size_t)r0 * F, F, wd + (size_t)e * D * F, F, 0.0f,
             a->ye + (size_t)r0 * D, D);
    }
    for (int t = 0; t < N; t++)
        for (int j = 0; j < K; j++) {
            int r = a->row[(size_t)t * K + j];
            if (r < 0)
                continue;
            float g = a->gate[(size_t)t * K + j], *o = out + (size_t)t * D;
            const float *y = a->ye + (size_t)r * D;
            for (int i = 0; i < D; i++)
                o[i] += g * y[i];
        }
}

/* The experts' backward from the gate-weighted output gradients (dye),
 * their input gradients added to dx in each token's top-k order. */
static void experts_backward(mm_ctx *mm, const moe_dims *d, const moe_acts *a, moe_scratch *s,
                             float *dx, float *dwgu, float *dwd, const float *wgu,
                             const float *wd)
{
    int D = d->D, F = d->F, K = d->K;
    for (int e = 0; e < d->E; e++) {
        int r0 = a->start[e], n = a->start[e + 1] - r0;
        if (n == 0)
            continue;
        const float *dye = s->dye + (size_t)r0 * D, *we = wd + (size_t)e * D * F;
        float *dh = s->dh + (size_t)r0 * F, *dgu = s->dgu + (size_t)r0 * 2 * F;
        gemm(mm, 0, 0, n, F, D, dye, D, we, F, 0.0f, dh, F);
        gemm(mm, 1, 0, D, F, n, dye, D, a->h + (size_t)r0 * F, F, 1.0f, dwd + (size_t)e * D * F,
             F);
        train_swiglu_backward(dgu, dh, a->gu + (size_t)r0 * 2 * F, n, F);
        gemm(mm, 0, 0, n, D, 2 * F, dgu, 2 * F, wgu + (size_t)e * 2 * F * D, D, 0.0f,
             s->dxe + (size_t)r0 * D, D);
        gemm(mm, 1, 0, 2 * F, D, n, dgu, 2 * F, a->xe + (size_t)r0 * D, D, 1.0f,
             dwgu + (size_t)e * 2 * F * D, D);
    }
    for (int t = 0; t < d->N; t++)
        for (int j = 0; j < K; j++) {
            int r = a->row[(size_t)t * K + j];
            if (r < 0)
                continue;
            float *o = dx + (size_t)t * D;
            const float *g = s->dxe + (size_t)r * D;
            for (int i = 0; i < D; i++)
                o[i] += g[i];
        }
}

/* Score gradients (into s->dsc) from the combine weights' and the aux
 * loss's. */
static void score_grads(const moe_dims *d, const moe_acts *a, moe_scratch *s, float weight)
{
    int N = d->N, E = d->E, K = d->K;
    memset(s->dsc, 0, sizeof(float) * (size_t)N * E);
    for (int t = 0; t < N; t++) {
        const float *sc = a->score + (size_t)t * E, *gate = a->gate + (size_t)t * K;
        const float *dg = s->dg + (size_t)t * K;
        const int32_t *sel = a->sel + (size_t)t * K;
        float *ds = s->dsc + (size_t)t * E, sum = 0.0f, sdg = 0.0f;
        for (int j = 0; j < K; j++) {
            sum += sc[sel[j]];
            sdg += dg[j] * gate[j];
        }
        /* g_j = s_j / sum over the picked */
        for (int j = 0; j < K && sum > 0.0f; j++)
            ds[sel[j]] += (dg[j] - sdg) / sum;
        if (!(d->aux > 0.0f))
            continue;
        double c0 = (double)weight * d->aux * E / ((double)N * N * K), norm = 0.0, cq = 0.0;
        for (int e = 0; e < E && d->sigmoid; e++) {
            norm += sc[e];
            cq += c0 * a->picks[e] * sc[e];
        }
        for (int e = 0; e < E; e++)
            ds[e] += d->sigmoid ? (float)((c0 * a->picks[e] - cq / norm) / norm)
                                : (float)(c0 * a->picks[e]);
    }
}

/* Logit gradients, in place of the score gradients, with the z-loss's. */
static void logit_grads(const moe_dims *d, const moe_acts *a, moe_scratch *s, float weight)
{
    int N = d->N, E = d->E;
    for (int t = 0; t < N; t++) {
        const float *sc = a->score + (size_t)t * E, *l = a->logits + (size_t)t * E;
        float *ds = s->dsc + (size_t)t * E;
        if (d->sigmoid) {
            for (int e = 0; e < E; e++)
                ds[e] *= sc[e] * (1.0f - sc[e]);
        } else {
            float dot = 0.0f;
            for (int e = 0; e < E; e++)
                dot += sc[e] * ds[e];
            for (int e = 0; e < E; e++)
                ds[e] = sc[e] * (ds[e] - dot);
        }
        if (!(d->z > 0.0f))
            continue;
        float lse = row_lse(l, E), coef = weight * d->z * 2.0f * lse / (float)N;
        for (int e = 0; e < E; e++)
            ds[e] += coef * expf(l[e] - lse);
    }
}

void train_moe_backward(mm_ctx *mm, const moe_dims *d, const moe_acts *a, moe_scratch *s,
                        float *dx, float *dwr, float *dwgu, float *dwd, const float *dout,
                        const float *x, const float *wr, const float *wgu, const float *wd,
                        float weight)
{
    int N = d->N, D = d->D, E = d->E, K = d->K;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < K; j++) {
            size_t i = (size_t)t * K + j;
            int r = a->row[i];
            float dg = 0.0f;
            const float *g = dout + (size_t)t * D, *y = a->ye + (size_t)(r < 0 ? 0 : r) * D;
            float *dy = s->dye + (size_t)(r < 0 ? 0 : r) * D;
            for (int c = 0; c < D && r >= 0; c++) {
                dg += g[c] * y[c];
                dy[c] = a->gate[i] * g[c];
            }
            s->dg[i] = dg;
        }
    experts_backward(mm, d, a, s, dx, dwgu, dwd, wgu, wd);
    score_grads(d, a, s, weight);
    logit_grads(d, a, s, weight);
    gemm(mm, 1, 0, E, D, N, s->dsc, E, x, D, 1.0f, dwr, D);
    gemm(mm, 0, 0, N, D, E, s->dsc, E, wr, D, 1.0f, dx, D);
}

void train_moe_bias_update(float *bias, const int64_t *load, int E, float rate)
{
    double mean = 0.0;
    for (int e = 0; e < E; e++)
        mean += (double)load[e] / E;
    for (int e = 0; e < E; e++)
        bias[e] += (double)load[e] < mean ? rate : (double)load[e] > mean ? -rate : 0.0f;
}
