/* Sync modes on their own: rank r's parameters set to known values, then
 * weft_sync_after_step applied as a training loop would.
 *   local:H   nothing moves for H-1 steps, then every rank holds the mean
 *   gossip    the mean is kept every round; p = 4 (a power of two) reaches
 *             the exact mean in log2 p = 2 rounds; p = 3 and 5 get closer
 *   diloco:H  the outer Nesterov step computed by hand
 *   stale:s   averages come out s steps late, none lost
 *   parsing   of the mode strings. */
#include "mp.h"

#include <math.h>
#include <stdlib.h>

static weft_model *make_model(size_t *n)
{
    weft_model_config cfg;
    weft_model *m;
    if (weft_model_config_parse("mlp:5-3-2", &cfg) || weft_model_create(&m, &cfg, 3))
        return NULL;
    weft_model_params(m, n);
    return m;
}

/* rank r's value of element i */
static float val(int r, size_t i) { return (float)(r * 10 + (int)(i % 7)); }

static double mean_of(int p, size_t i)
{
    double s = 0;
    for (int r = 0; r < p; r++)
        s += val(r, i);
    return s / p;
}

static void set_params(weft_model *m, int r)
{
    size_t n;
    float *x = weft_model_params(m, &n);
    for (size_t i = 0; i < n; i++)
        x[i] = val(r, i);
}

static void local_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    size_t n;
    weft_model *m = make_model(&n);
    weft_sync *s;
    weft_sync_config sc;
    (void)arg;
    CHECK(weft_sync_parse("local:3", &sc) == 0);
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    set_params(m, r); /* after the start-up broadcast */
    float *x = weft_model_params(m, &n);
    CHECK(weft_sync_after_step(s) == 0 && weft_sync_after_step(s) == 0);
    CHECK(x[1] == val(r, 1)); /* no exchange yet */
    CHECK(weft_sync_after_step(s) == 0);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += fabs(x[i] - mean_of(p, i)) > 1e-4;
    CHECKF(!bad, "%d elements not averaged at %d ranks", bad, p);
    CHECK(weft_sync_bytes(s) == n * sizeof(float));
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

static void gossip_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    size_t n;
    weft_model *m = make_model(&n);
    weft_sync *s;
    weft_sync_config sc;
    (void)arg;
    CHECK(weft_sync_parse("gossip", &sc) == 0);
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    set_params(m, r);
    float *x = weft_model_params(m, &n);
    double spread0 = fabs(x[0] - mean_of(p, 0));
    int rounds = 0;
    while ((1 << rounds) < p)
        rounds++;
    for (int t = 0; t < rounds; t++)
        CHECK(weft_sync_after_step(s) == 0);
    /* the mean over ranks is kept */
    float sum[2] = { x[0], x[3] };
    CHECK(weft_allreduce(c, sum, sum, 2, WEFT_F32, WEFT_AVG) == 0);
    CHECKF(fabs(sum[0] - mean_of(p, 0)) < 1e-4 && fabs(sum[1] - mean_of(p, 3)) < 1e-4,
           "mean moved at %d ranks: %g vs %g", p, sum[0], mean_of(p, 0));
    /* the spread shrinks; exact for a power of two */
    double err = fabs(x[0] - mean_of(p, 0)), worst = err;
    CHECK(weft_allreduce(c, &worst, &worst, 1, WEFT_F64, WEFT_MAX) == 0);
    double spread_all = spread0;
    CHECK(weft_allreduce(c, &spread_all, &spread_all, 1, WEFT_F64, WEFT_MAX) == 0);
    if ((p & (p - 1)) == 0)
        CHECKF(worst < 1e-4, "p = %d: off the mean by %g after %d rounds", p, worst, rounds);
    else
        CHECKF(worst < spread_all, "p = %d: spread %g not below %g", p, worst, spread_all);
    CHECK(weft_sync_finish(s) == 0);
    CHECK(fabs(x[0] - mean_of(p, 0)) < 1e-4);
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

static void diloco_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    size_t n;
    weft_model *m = make_model(&n);
    weft_sync *s;
    weft_sync_config sc;
    (void)arg;
    CHECK(weft_sync_parse("diloco:2", &sc) == 0);
    CHECK(sc.outer_lr == 0.7f && sc.outer_momentum == 0.9f);
    set_params(m, 0); /* theta_old = val(0, i) on every rank */
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    float *x = weft_model_params(m, &n);
    /* two inner "steps" move rank r by -(r + 1) */
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++)
            x[i] -= 0.5f * (float)(r + 1);
        CHECK(weft_sync_after_step(s) == 0);
    }
    /* Delta = mean (r + 1) = (p + 1) / 2; v = Delta; step = lr (Delta + mu v) */
    double d = (p + 1) / 2.0, want = val(0, 4) - 0.7 * (d + 0.9 * d);
    CHECKF(fabs(x[4] - want) < 1e-4, "outer step 1: %g, want %g", x[4], want);
    /* a second round with the same inner move: v = 0.9 d + d */
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++)
            x[i] -= 0.5f * (float)(r + 1);
        CHECK(weft_sync_after_step(s) == 0);
    }
    double v = 0.9 * d + d;
    want -= 0.7 * (d + 0.9 * v);
    CHECKF(fabs(x[4] - want) < 1e-4, "outer step 2: %g, want %g", x[4], want);
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

/* stale:1: the first push applies nothing, the second applies the first
 * step's average, the last comes out at the end. */
static void stale_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), p = weft_comm_size(c), ready = -1;
    size_t n;
    weft_model *m = make_model(&n);
    weft_sync *s;
    weft_sync_config sc;
    (void)arg;
    CHECK(weft_sync_parse("stale:1", &sc) == 0 && sc.mode == WEFT_SYNC_STALE && sc.period == 1);
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    float *g = weft_model_grads(m, &n);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(r + 1);
    CHECK(weft_sync_push_grads(s, 1.0f, &ready) == 0 && ready == 0);
    CHECK(g[2] == (float)(r + 1)); /* untouched */
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(10 * (r + 1));
    CHECK(weft_sync_push_grads(s, 2.0f, &ready) == 0 && ready == 1);
    CHECKF(fabs(g[2] - (p + 1) / 2.0) < 1e-5, "step 1 average %g", g[2]);
    CHECK(weft_sync_pop_grads(s, &ready) == 0 && ready == 1);
    CHECKF(fabs(g[2] - 20 * (p + 1) / 2.0) < 1e-4, "step 2 average %g", g[2]);
    CHECK(weft_sync_pop_grads(s, &ready) == 0 && ready == 0);
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

TEST(parse)
{
    weft_sync_config sc;
    CHECK(weft_sync_parse("full", &sc) == 0 && sc.mode == WEFT_SYNC_FULL);
    CHECK(weft_sync_parse("local:7", &sc) == 0 && sc.mode == WEFT_SYNC_LOCAL && sc.period == 7);
    CHECK(weft_sync_parse("diloco:50", &sc) == 0 && sc.mode == WEFT_SYNC_DILOCO &&
          sc.period == 50);
    CHECK(weft_sync_parse("gossip", &sc) == 0 && sc.mode == WEFT_SYNC_GOSSIP);
    CHECK(weft_sync_parse("local:0", &sc) == WEFT_EINVAL);
    CHECK(weft_sync_parse("local:", &sc) == WEFT_EINVAL);
    CHECK(weft_sync_parse("diloco:5x", &sc) == WEFT_EINVAL);
    CHECK(weft_sync_parse("async", &sc) == WEFT_EINVAL);
    CHECK(weft_sync_parse("stale:0", &sc) == 0 && sc.mode == WEFT_SYNC_STALE && sc.period == 0);
    CHECK(weft_sync_parse("stale:-1", &sc) == WEFT_EINVAL);
}

TEST(local)
{
    for (int p = 2; p <= 4; p++)
        CHECKF(mp_run(p, 30, local_body, NULL) == 0, "local at %d", p);
}

TEST(gossip)
{
    for (int p = 2; p <= 5; p++)
        CHECKF(mp_run(p, 30, gossip_body, NULL) == 0, "gossip at %d", p);
}

TEST(diloco)
{
    for (int p = 1; p <= 3; p++)
        CHECKF(mp_run(p, 30, diloco_body, NULL) == 0, "diloco at %d", p);
}

TEST(stale)
{
    for (int p = 1; p <= 3; p++)
        CHECKF(mp_run(p, 30, stale_body, NULL) == 0, "stale at %d", p);
}
