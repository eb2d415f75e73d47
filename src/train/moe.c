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

#include "train/moe.h"
#include "train/moe_ep.h"
#include "train/moe_experts.h"

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

int train_moe_forward(mm_ctx *mm, const moe_dims *d, moe_acts *a, float *out, const float *x,
                      const float *wr, const float *bias, const float *wgu, const float *wd,
                      int64_t *load, moe_count *cnt)
{
    int N = d->N, D = d->D, E = d->E, K = d->K, rc = 0;
    moe_dims keep;
    if (train_moe_ep_eval(d->ep)) { /* an evaluation under --ep drops nothing */
        keep = *d;
        keep.cap = N;
        d = &keep;
    }
    train_moe_gemm(mm, 0, 1, N, E, D, x, D, wr, D, 0.0f, a->logits, E);
    if (d->ep)
        train_moe_ep_skew(d->ep, a->logits, N, E);
    scores(d, a, cnt);
    route(d, a, bias, load, cnt);
    cnt->aux = aux_value(d, a);
    /* under --ep the rows are gathered where the all-to-all-v sends from */
    int ep = d->ep && train_moe_ep_size(d->ep) > 1;
    float *xe = ep ? train_moe_ep_send_rows(d->ep, (size_t)a->start[E], (size_t)D, &rc) : a->xe;
    if (!xe)
        return rc;
    for (int r = 0; r < a->start[E]; r++)
        memcpy(xe + (size_t)r * D, x + (size_t)a->tok[r] * D, sizeof(float) * (size_t)D);
    if (ep) {
        train_moe_ep_copied(d->ep, sizeof(float) * (size_t)a->start[E] * D);
        rc = train_moe_ep_forward(d->ep, mm, d, a, xe, wgu, wd);
    } else
        train_moe_experts_forward(mm, d, 0, E, a->start, a->xe, a->gu, a->h, a->ye, wgu, wd);
    if (rc)
        return rc;
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
    return 0;
}

/* The experts' backward from the gate-weighted output gradients (dye),
 * here or on their ranks, their input gradients added to dx in each
 * token's top-k order. */
static int experts_backward(mm_ctx *mm, const moe_dims *d, const moe_acts *a, moe_scratch *s,
                            const float *dye, float *dx, float *dwgu, float *dwd,
                            const float *wgu, const float *wd)
{
    int D = d->D, K = d->K, rc = 0;
    if (d->ep && train_moe_ep_size(d->ep) > 1)
        rc = train_moe_ep_backward(d->ep, mm, d, a, s, dye, dwgu, dwd, wgu, wd);
    else
        train_moe_experts_backward(mm, d, 0, d->E, a->start, dye, a->xe, a->gu, a->h, s->dh,
                                   s->dgu, s->dxe, dwgu, dwd, wgu, wd);
    if (rc)
        return rc;
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
    return 0;
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

int train_moe_backward_experts(mm_ctx *mm, const moe_dims *d, const moe_acts *a,
                               moe_scratch *s, float *dx, float *dwgu, float *dwd,
                               const float *dout, const float *wgu, const float *wd)
{
    int N = d->N, D = d->D, K = d->K, rc = 0;
    /* under --ep written where the all-to-all-v sends from */
    float *dye = d->ep && train_moe_ep_size(d->ep) > 1
                     ? train_moe_ep_send_rows(d->ep, (size_t)a->start[d->E], (size_t)D, &rc)
                     : s->dye;
    if (!dye)
        return rc;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < K; j++) {
            size_t i = (size_t)t * K + j;
            int r = a->row[i];
            float dg = 0.0f;
            const float *g = dout + (size_t)t * D, *y = a->ye + (size_t)(r < 0 ? 0 : r) * D;
            float *dy = dye + (size_t)(r < 0 ? 0 : r) * D;
            for (int c = 0; c < D && r >= 0; c++) {
                dg += g[c] * y[c];
                dy[c] = a->gate[i] * g[c];
            }
            s->dg[i] = dg;
        }
    return experts_backward(mm, d, a, s, dye, dx, dwgu, dwd, wgu, wd);
}

void train_moe_backward_router(mm_ctx *mm, const moe_dims *d, const moe_acts *a,
                               moe_scratch *s, float *dx, float *dwr, const float *x,
                               const float *wr, float weight)
{
    int N = d->N, D = d->D, E = d->E;
    score_grads(d, a, s, weight);
    logit_grads(d, a, s, weight);
    train_moe_gemm(mm, 1, 0, E, D, N, s->dsc, E, x, D, 1.0f, dwr, D);
    train_moe_gemm(mm, 0, 0, N, D, E, s->dsc, E, wr, D, 1.0f, dx, D);
}

int train_moe_backward(mm_ctx *mm, const moe_dims *d, const moe_acts *a, moe_scratch *s,
                       float *dx, float *dwr, float *dwgu, float *dwd, const float *dout,
                       const float *x, const float *wr, const float *wgu, const float *wd,
                       float weight)
{
    int rc = train_moe_backward_experts(mm, d, a, s, dx, dwgu, dwd, dout, wgu, wd);
    if (rc == 0)
        train_moe_backward_router(mm, d, a, s, dx, dwr, x, wr, weight);
    return rc;
}

void train_moe_bias_update(float *bias, const int64_t *load, int E, int rule, float rate)
{
    double mean = 0.0;
    for (int e = 0; e < E; e++)
        mean += (double)load[e] / E;
    if (rule == MOE_BIAS_PROPORTIONAL) {
        /* no tokens: no deviation to correct (and no division by zero) */
        for (int e = 0; e < E && mean > 0.0; e++)
            bias[e] += (float)((double)rate * (mean - (double)load[e]) / mean);
        return;
    }
    for (int e = 0; e < E; e++)
        bias[e] += (double)load[e] < mean ? rate : (double)load[e] > mean ? -rate : 0.0f;
}
