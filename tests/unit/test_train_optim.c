/* Optimisers, gradient clipping, learning-rate schedules and the RNG:
 * closed-form values, range (ZeRO shard) updates equal to whole-buffer
 * ones bit for bit, and argument checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "weft.h"

static int near(double a, double b, double tol)
{
    return fabs(a - b) <= tol * (1.0 + fabs(b));
}

TEST(sgd_closed_form)
{
    weft_optim_config c;
    weft_optim *o;
    float p[2] = { 1.0f, -2.0f }, g[2] = { 0.5f, 0.25f };

    weft_optim_config_default(&c, WEFT_OPTIM_SGD);
    c.momentum = 0.0f;
    CHECK(weft_optim_create(&o, &c, 0, 2) == 0);
    CHECK(weft_optim_step(o, p, g, 0.1f) == 0);
    CHECK(p[0] == 1.0f - 0.1f * 0.5f && p[1] == -2.0f - 0.1f * 0.25f);
    CHECK(weft_optim_steps(o) == 1);
    weft_optim_destroy(o);

    /* momentum 0.9, weight decay 0.1, two steps with the same gradient:
     * d = g + wd p; buf1 = d1; buf2 = 0.9 buf1 + d2 */
    weft_optim_config_default(&c, WEFT_OPTIM_SGD);
    c.weight_decay = 0.1f;
    float q = 1.0f, gq = 0.5f;
    CHECK(weft_optim_create(&o, &c, 0, 1) == 0);
    weft_optim_step(o, &q, &gq, 0.1f);
    double d1 = 0.5 + 0.1 * 1.0, q1 = 1.0 - 0.1 * d1;
    CHECK(near(q, q1, 1e-6));
    weft_optim_step(o, &q, &gq, 0.1f);
    double d2 = 0.5 + 0.1 * q1, b2 = 0.9 * d1 + d2, q2 = q1 - 0.1 * b2;
    CHECK(near(q, q2, 1e-6));
    const char *name;
    CHECK(weft_optim_state_count(o) == 1);
    CHECK(weft_optim_state(o, 0, &name) && strcmp(name, "momentum") == 0);
    CHECK(near(weft_optim_state(o, 0, NULL)[0], b2, 1e-6));
    weft_optim_destroy(o);

    /* Nesterov: step with d + mu * buf */
    weft_optim_config_default(&c, WEFT_OPTIM_SGD);
    c.nesterov = 1;
    q = 1.0f;
    CHECK(weft_optim_create(&o, &c, 0, 1) == 0);
    weft_optim_step(o, &q, &gq, 0.1f);
    weft_optim_step(o, &q, &gq, 0.1f);
    double n1 = 1.0 - 0.1 * (0.5 + 0.9 * 0.5);
    double nb2 = 0.9 * 0.5 + 0.5, n2 = n1 - 0.1 * (0.5 + 0.9 * nb2);
    CHECK(near(q, n2, 1e-6));
    weft_optim_destroy(o);

    c.momentum = 0.0f;   /* Nesterov needs momentum */
    CHECK(weft_optim_create(&o, &c, 0, 1) == WEFT_EINVAL);
    c.kind = 77;
    CHECK(weft_optim_create(&o, &c, 0, 1) == WEFT_EINVAL);
}

TEST(adamw_closed_form)
{
    weft_optim_config c;
    weft_optim *o;
    weft_optim_config_default(&c, WEFT_OPTIM_ADAMW);
    CHECK(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f && c.weight_decay == 0.01f);
    float p[3] = { 1.0f, -1.0f, 0.5f }, g[3] = { 0.3f, -2.0f, 0.0f };
    CHECK(weft_optim_create(&o, &c, 0, 3) == 0);
    weft_optim_step(o, p, g, 0.01f);
    /* first step: m_hat = g, v_hat = g^2, update = lr * g / (|g| + eps) */
    CHECK(near(p[0], 1.0 * (1 - 0.01 * 0.01) - 0.01, 1e-6));
    CHECK(near(p[1], -1.0 * (1 - 0.01 * 0.01) + 0.01, 1e-6));
    CHECK(near(p[2], 0.5 * (1 - 0.01 * 0.01), 1e-6));
    const char *n0, *n1;
    CHECK(weft_optim_state_count(o) == 2);
    CHECK(weft_optim_state(o, 0, &n0) && weft_optim_state(o, 1, &n1));
    CHECK(strcmp(n0, "exp_avg") == 0 && strcmp(n1, "exp_avg_sq") == 0);
    CHECK(near(weft_optim_state(o, 0, NULL)[1], 0.1 * -2.0, 1e-6));
    CHECK(near(weft_optim_state(o, 1, NULL)[1], 0.001 * 4.0, 1e-6));
    CHECK(weft_optim_state(o, 2, NULL) == NULL);
    weft_optim_destroy(o);
}

/* Whole-buffer steps and steps done as shards (two optimisers, each with
 * its own range, as ZeRO does) give the same bits. */
static void ranges(int kind)
{
    enum { N = 1001, CUT = 377 };
    weft_rng r;
    weft_rng_seed(&r, 3);
    float *p1 = malloc(N * 4), *p2 = malloc(N * 4), *g = malloc(N * 4);
    for (int i = 0; i < N; i++)
        p1[i] = p2[i] = weft_rng_normal(&r);
    weft_optim_config c;
    weft_optim_config_default(&c, kind);
    c.weight_decay = 0.05f;
    weft_optim *whole, *lo, *hi;
    CHECK(weft_optim_create(&whole, &c, 0, N) == 0);
    CHECK(weft_optim_create(&lo, &c, 0, CUT) == 0);
    CHECK(weft_optim_create(&hi, &c, CUT, N - CUT) == 0);
    for (int s = 0; s < 5; s++) {
        for (int i = 0; i < N; i++)
            g[i] = weft_rng_normal(&r);
        weft_optim_step(whole, p1, g, 0.01f);
        /* the lower shard in two pieces, then advance once */
        CHECK(weft_optim_update(lo, p2, g, 0, 100, 0.01f) == 0);
        CHECK(weft_optim_update(lo, p2 + 100, g + 100, 100, CUT - 100, 0.01f) == 0);
        weft_optim_advance(lo);
        CHECK(weft_optim_step(hi, p2 + CUT, g + CUT, 0.01f) == 0);
    }
    CHECKF(memcmp(p1, p2, N * 4) == 0, "kind %d: sharded update differs", kind);
    size_t base, n;
    weft_optim_range(hi, &base, &n);
    CHECK(base == CUT && n == N - CUT);
    CHECK(weft_optim_steps(hi) == 5 && weft_optim_steps(lo) == 5);
    /* outside the state's range */
    CHECK(weft_optim_update(hi, p2, g, 0, 10, 0.01f) == WEFT_EINVAL);
    CHECK(weft_optim_update(lo, p2, g, CUT - 5, 10, 0.01f) == WEFT_EINVAL);
    CHECK(weft_optim_set_steps(hi, -1) == WEFT_EINVAL);
    CHECK(weft_optim_set_steps(hi, 42) == 0 && weft_optim_steps(hi) == 42);
    weft_optim_destroy(whole);
    weft_optim_destroy(lo);
    weft_optim_destroy(hi);
    free(p1); free(p2); free(g);
}

TEST(clipping)
{
    float g[4] = { 3.0f, 4.0f, 0.0f, 0.0f }, norm;
    CHECK(weft_sumsq(g, 4) == 25.0);
    CHECK(weft_clip_grad_norm(g, 4, 10.0f, &norm) == 0);
    CHECK(norm == 5.0f && g[0] == 3.0f && g[1] == 4.0f);   /* below: unchanged */
    CHECK(weft_clip_grad_norm(g, 4, 1.0f, &norm) == 0);
    CHECK(norm == 5.0f);
    CHECK(near(sqrt(weft_sumsq(g, 4)), 1.0, 1e-5));
    CHECK(near(g[0], 0.6, 1e-5) && near(g[1], 0.8, 1e-5));
    CHECK(weft_clip_grad_norm(g, 4, 0.0f, &norm) == 0 && near(norm, 1.0, 1e-5));
    CHECK(weft_clip_scale(4.0, 2.0f) < 0.5001f && weft_clip_scale(4.0, 2.0f) > 0.4999f);
    CHECK(weft_clip_scale(1.0, 2.0f) == 1.0f);
    CHECK(weft_clip_grad_norm(NULL, 4, 1.0f, &norm) == WEFT_EINVAL);
}

TEST(schedules)
{
    weft_lr_schedule s = { WEFT_LR_CONSTANT, 0.1f, 0.0f, 0, 0 };
    CHECK(weft_lr_at(&s, 0) == 0.1f && weft_lr_at(&s, 1000000) == 0.1f);
    s.warmup = 4;
    CHECK(near(weft_lr_at(&s, 0), 0.025, 1e-6) && near(weft_lr_at(&s, 3), 0.1, 1e-6));
    CHECK(weft_lr_at(&s, 4) == 0.1f);
    weft_lr_schedule c = { WEFT_LR_COSINE, 1.0f, 0.1f, 10, 110 };
    CHECK(near(weft_lr_at(&c, 0), 0.1, 1e-6));
    CHECK(near(weft_lr_at(&c, 9), 1.0, 1e-6));
    CHECK(near(weft_lr_at(&c, 10), 1.0, 1e-6));
    CHECK(near(weft_lr_at(&c, 60), 0.55, 1e-5));                 /* halfway */
    CHECK(near(weft_lr_at(&c, 35), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.25)), 1e-5));
    CHECK(near(weft_lr_at(&c, 110), 0.1, 1e-6) && near(weft_lr_at(&c, 5000), 0.1, 1e-6));
    for (int i = 11; i < 110; i++)
        CHECK(weft_lr_at(&c, i) <= weft_lr_at(&c, i - 1));
}

TEST(rng)
{
    weft_rng a, b;
    weft_rng_seed(&a, 1);
    weft_rng_seed(&b, 1);
    int same = 1;
    for (int i = 0; i < 100; i++)
        same &= weft_rng_next(&a) == weft_rng_next(&b);
    CHECK(same);
    weft_rng_seed(&b, 2);
    CHECK(weft_rng_next(&a) != weft_rng_next(&b));
    double s = 0, s2 = 0;
    int in_range = 1;
    for (int i = 0; i < 20000; i++) {
        float u = weft_rng_uniform(&a);
        in_range &= u >= 0.0f && u < 1.0f;
        in_range &= weft_rng_below(&a, 7) < 7;
        double z = weft_rng_normal(&a);
        s += z;
        s2 += z * z;
    }
    CHECK(in_range);
    CHECK(fabs(s / 20000) < 0.05 && fabs(s2 / 20000 - 1.0) < 0.05);
}

TEST(sgd_ranges) { ranges(WEFT_OPTIM_SGD); }
TEST(adamw_ranges) { ranges(WEFT_OPTIM_ADAMW); }
