/* SGD (momentum, Nesterov, L2 weight decay) and AdamW over ranges of a flat
 * parameter buffer, with the update rules of torch.optim so that the two
 * can be compared step by step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "core/huge.h"
#include "train/matmul.h"
#include "train/pool.h"
#include "weft.h"

/* The update loops are worth vectorising with run-time alias checks,
 * which -O2's cheap cost model declines. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

struct weft_optim {
    weft_optim_config cfg;
    size_t base, n;
    int64_t steps;
    int nstate;
    float *state[2];
    /* the update's threads (threads: train_mm_default_threads unless
     * weft_optim_set_threads said otherwise), made at the first update big
     * enough to split; pool_failed: run on the caller alone */
    int threads;
    pool *pl;
    int pool_failed;
};

void weft_optim_config_default(weft_optim_config *c, weft_optim_kind kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    if (kind == WEFT_OPTIM_SGD)
        c->momentum = 0.9f;
    else
        c->weight_decay = 0.01f;
}

int weft_optim_create(weft_optim **out, const weft_optim_config *cfg, size_t base, size_t n)
{
    if (!out || !cfg)
        return WEFT_EINVAL;
    if (cfg->kind == WEFT_OPTIM_SGD) {
        if (cfg->momentum < 0.0f || cfg->weight_decay < 0.0f || (cfg->nesterov && cfg->momentum <= 0.0f))
            return WEFT_EINVAL;
    } else if (cfg->kind == WEFT_OPTIM_ADAMW) {
        if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f && cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f &&
              cfg->eps >= 0.0f && cfg->weight_decay >= 0.0f))
            return WEFT_EINVAL;
    } else {
        return WEFT_EINVAL;
    }
    weft_optim *o = calloc(1, sizeof *o);
    if (!o)
        return WEFT_ENOMEM;
    o->cfg = *cfg;
    o->base = base;
    o->n = n;
    o->nstate = cfg->kind == WEFT_OPTIM_ADAMW ? 2 : 1;
    /* a bad WEFT_THREADS fails the model's create; here it costs only speed */
    if ((o->threads = train_mm_default_threads()) < 1)
        o->threads = 1;
    for (int i = 0; i < o->nstate; i++) {
        o->state[i] = calloc(n ? n : 1, sizeof(float));
        if (!o->state[i]) {
            weft_optim_destroy(o);
            return WEFT_ENOMEM;
        }
        /* zero pages until first touched (the first step, or a load) */
        huge_advise(o->state[i], (n ? n : 1) * sizeof(float));
    }
    *out = o;
    return 0;
}

void weft_optim_destroy(weft_optim *o)
{
    if (!o)
        return;
    free(o->state[0]);
    free(o->state[1]);
    train_pool_destroy(o->pl);
    free(o);
}

const weft_optim_config *weft_optim_config_of(const weft_optim *o)
{
    return &o->cfg;
}

static void sgd_update(const weft_optim_config *c, float *restrict p, const float *restrict g,
                       float *restrict buf, size_t n, float lr, int first)
{
    /* one branch-free loop per case, so each vectorises */
    float mu = c->momentum, wd = c->weight_decay;
    if (mu == 0.0f) {
        for (size_t i = 0; i < n; i++)
            p[i] -= lr * (g[i] + wd * p[i]);
    } else if (first) {   /* torch starts the buffer at the first gradient */
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            buf[i] = d;
            p[i] -= lr * (c->nesterov ? d + mu * d : d);
        }
    } else if (c->nesterov) {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float b = mu * buf[i] + d;
            buf[i] = b;
            p[i] -= lr * (d + mu * b);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float b = mu * buf[i] + (g[i] + wd * p[i]);
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
}

/* The loop twice: plain, and compiled for AVX2 (eight lanes instead of
 * SSE's four, the sqrt and divide being what bounds it). Without FMA, so
 * both give the same bits. */
#define ADAMW_LOOP                                                       \
    for (size_t i = 0; i < n; i++) {                                     \
        p[i] *= decay;                                                   \
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];                           \
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];                    \
        p[i] -= step * m[i] / (sqrtf(v[i]) / bc2s + eps);                \
    }

static void adamw_loop(float *restrict p, const float *restrict g, float *restrict m,
                       float *restrict v, size_t n, float b1, float b2, float step,
                       float decay, float bc2s, float eps)
{
    ADAMW_LOOP
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* In intrinsics: the compiler keeps sqrtf's errno path and so leaves the
 * plain loop scalar (vsqrtss, two vdivss an element), which made AdamW
 * compute-bound at about 12 cycles an element. The same operations in the
 * same order, without FMA, so the bits are the plain loop's; eight lanes
 * with AVX2, sixteen with AVX-512 (half the instructions: where the state
 * streams from memory bandwidth bounds both, from cache the divides and
 * square roots do). Each does its whole vectors and hands the rest on. */
#define MM(W, op) _mm##W##_##op
#define ADAMW_DEF(W, TARGET, NEXT)                                                       \
    __attribute__((target(TARGET))) static void adamw_loop##W(                          \
        float *restrict p, const float *restrict g, float *restrict m, float *restrict v, \
        size_t n, float b1, float b2, float step, float decay, float bc2s, float eps)    \
    {                                                                                   \
        const __m##W vb1 = MM(W, set1_ps)(b1), vb2 = MM(W, set1_ps)(b2);                 \
        const __m##W vc1 = MM(W, set1_ps)(1.0f - b1), vc2 = MM(W, set1_ps)(1.0f - b2);   \
        const __m##W vstep = MM(W, set1_ps)(step), vdecay = MM(W, set1_ps)(decay);       \
        const __m##W vbc = MM(W, set1_ps)(bc2s), veps = MM(W, set1_ps)(eps);             \
        const size_t L = sizeof(__m##W) / sizeof(float);                                \
        size_t i = 0;                                                                   \
        for (; i + L <= n; i += L) {                                                    \
            __m##W pi = MM(W, mul_ps)(MM(W, loadu_ps)(p + i), vdecay);                   \
            __m##W gi = MM(W, loadu_ps)(g + i);                                         \
            __m##W mi = MM(W, add_ps)(MM(W, mul_ps)(vb1, MM(W, loadu_ps)(m + i)),        \
                                      MM(W, mul_ps)(vc1, gi));                          \
            __m##W vi = MM(W, add_ps)(MM(W, mul_ps)(vb2, MM(W, loadu_ps)(v + i)),        \
                                      MM(W, mul_ps)(MM(W, mul_ps)(vc2, gi), gi));       \
            __m##W den = MM(W, add_ps)(MM(W, div_ps)(MM(W, sqrt_ps)(vi), vbc), veps);    \
            pi = MM(W, sub_ps)(pi, MM(W, div_ps)(MM(W, mul_ps)(vstep, mi), den));        \
            MM(W, storeu_ps)(m + i, mi);                                                \
            MM(W, storeu_ps)(v + i, vi);                                                \
            MM(W, storeu_ps)(p + i, pi);                                                \
        }                                                                               \
        NEXT(p + i, g + i, m + i, v + i, n - i, b1, b2, step, decay, bc2s, eps);         \
    }
ADAMW_DEF(256, "avx2", adamw_loop)
ADAMW_DEF(512, "avx512f", adamw_loop256)
#undef ADAMW_DEF
#undef MM
#endif
#undef ADAMW_LOOP

static void adamw_update(const weft_optim_config *c, float *restrict p, const float *restrict g,
                         float *restrict m, float *restrict v, size_t n, float lr, int64_t t)
{
    float b1 = c->beta1, b2 = c->beta2;
    float bc1 = 1.0f - powf(b1, (float)t);
    float bc2s = sqrtf(1.0f - powf(b2, (float)t));
    float step = lr / bc1, decay = 1.0f - lr * c->weight_decay;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        adamw_loop512(p, g, m, v, n, b1, b2, step, decay, bc2s, c->eps);
        return;
    }
    if (__builtin_cpu_supports("avx2")) {
        adamw_loop256(p, g, m, v, n, b1, b2, step, decay, bc2s, c->eps);
        return;
    }
#endif
    adamw_loop(p, g, m, v, n, b1, b2, step, decay, bc2s, c->eps);
}

/* Below this many elements a split costs more than it saves. */
enum { OPT_PAR_MIN = 1 << 16 };

typedef struct {
    weft_optim *o;
    float *p;
    const float *g;
    size_t off;
    float lr;
    int64_t t;
} opt_job;

/* Each element's update reads only its own p, g and state, so pieces
 * give the same bits as one pass (and the plain and AVX2 loops agree). */
static void opt_range(void *arg, size_t lo, size_t hi)
{
    opt_job *j = arg;
    weft_optim *o = j->o;
    size_t at = j->off + lo, n = hi - lo;
    if (o->cfg.kind == WEFT_OPTIM_SGD)
        sgd_update(&o->cfg, j->p + lo, j->g + lo, o->state[0] + at, n, j->lr, j->t == 1);
    else
        adamw_update(&o->cfg, j->p + lo, j->g + lo, o->state[0] + at, o->state[1] + at, n,
                     j->lr, j->t);
}

static pool *opt_pool(weft_optim *o, size_t n)
{
    if (o->pl || o->pool_failed || n < OPT_PAR_MIN)
        return o->pl;
    if (o->threads <= 1 || train_pool_create(&o->pl, o->threads) != 0) {
        o->pl = NULL;
        o->pool_failed = 1;
    }
    return o->pl;
}

int weft_optim_set_threads(weft_optim *o, int n)
{
    if (!o || n < 0)
        return WEFT_EINVAL;
    if (n == 0 && (n = train_mm_default_threads()) < 0)
        return n;
    if (n != o->threads || o->pool_failed) {
        train_pool_destroy(o->pl);
        o->pl = NULL;
        o->pool_failed = 0;
        o->threads = n;
    }
    return 0;
}

int weft_optim_threads(const weft_optim *o)
{
    if (!o)
        return 0;
    if (o->pl)   /* what the last update split over */
        return train_pool_size(o->pl);
    return o->pool_failed ? 1 : o->threads;
}

int weft_optim_update(weft_optim *o, float *params, const float *grads,
                      size_t lo, size_t n, float lr)
{
    if (!o || (n && (!params || !grads)) || lo < o->base || lo - o->base > o->n ||
        n > o->n - (lo - o->base))
        return WEFT_EINVAL;
    opt_job j = { o, params, grads, lo - o->base, lr, o->steps + 1 };
    /* pieces of whole cache lines, so two threads never write one */
    train_pool_for(opt_pool(o, n), n, 16, OPT_PAR_MIN, opt_range, &j);
    return 0;
}

int weft_optim_advance(weft_optim *o)
{
    if (!o)
        return WEFT_EINVAL;
    o->steps++;
    return 0;
}

int weft_optim_step(weft_optim *o, float *params, const float *grads, float lr)
{
    if (!o)
        return WEFT_EINVAL;
    int rc = weft_optim_update(o, params, grads, o->base, o->n, lr);
    if (rc == 0)
        o->steps++;
    return rc;
}

int64_t weft_optim_steps(const weft_optim *o)
{
    return o->steps;
}

int weft_optim_set_steps(weft_optim *o, int64_t steps)
{
    if (!o || steps < 0)
        return WEFT_EINVAL;
    o->steps = steps;
    return 0;
}

void weft_optim_range(const weft_optim *o, size_t *base, size_t *n)
{
    if (base)
        *base = o->base;
    if (n)
        *n = o->n;
}

int weft_optim_state_count(const weft_optim *o)
{
    return o->nstate;
}

float *weft_optim_state(weft_optim *o, int i, const char **name)
{
    static const char *const names[2][2] = { { "momentum", NULL }, { "exp_avg", "exp_avg_sq" } };
    if (!o || i < 0 || i >= o->nstate)
        return NULL;
    if (name)
        *name = names[o->cfg.kind == WEFT_OPTIM_ADAMW][i];
    return o->state[i];
}

double weft_sumsq(const float *g, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

float weft_clip_scale(double norm, float max_norm)
{
    /* torch's clip_grad_norm_: max / (norm + 1e-6), only when below 1 */
    if (max_norm <= 0.0f)
        return 1.0f;
    double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

void weft_scale(float *g, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        g[i] *= s;
}

int weft_clip_grad_norm(float *g, size_t n, float max_norm, float *norm)
{
    if (n && !g)
        return WEFT_EINVAL;
    double nm = sqrt(weft_sumsq(g, n));
    if (norm)
        *norm = (float)nm;
    float s = weft_clip_scale(nm, max_norm);
    if (s < 1.0f)
        weft_scale(g, n, s);
    return 0;
}

float weft_lr_at(const weft_lr_schedule *s, int64_t step)
{
    if (!s)
        return 0.0f;
    if (s->warmup > 0 && step < s->warmup)
        return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind != WEFT_LR_COSINE)
        return s->lr;
    if (step >= s->total || s->total <= s->warmup)
        return s->min_lr;
    double r = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    double c = 0.5 * (1.0 + cos(3.141592653589793 * r));
    return (float)(s->min_lr + c * (s->lr - s->min_lr));
}
