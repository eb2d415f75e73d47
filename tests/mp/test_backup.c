/* Backup workers (sync mode backup:b): with b slow ranks, each of which
 * sleeps before computing, every step must be decided by the other ranks
 * alone:
 *   - on every rank, the step's gradient, loss and sample count are those
 *     of one process training on the union of the fast ranks' shards, so
 *     the parameters follow that process's to fp32 tolerance;
 *   - the included-rank mask names exactly the fast ranks;
 *   - the run ends (end markers consume everything posted) and every rank
 *     holds the same parameters, slow ones included.
 * Cases: a slow worker, a slow coordinator (rank 0, whose own gradient is
 * then dropped), two slow of four, and backup:0 (every rank, any world
 * size) against the full batch. */
#include "mp.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define B 12     /* global batch */
#define IN 6
#define STEPS 5
/* The slow ranks' lag: long enough that the fast ones' gradients are in
 * first even on a loaded machine, longer again under sanitizers. */
#define SLEEP_US 200000
static void lag(void)
{
    long us = mp_thin() ? 10L * SLEEP_US : SLEEP_US;
    struct timespec ts = { us / 1000000, us % 1000000 * 1000 };
    nanosleep(&ts, NULL);
}

typedef struct {
    int b, nslow, slow[2];
} bcase;

static int is_slow(const bcase *k, int r)
{
    for (int i = 0; i < k->nslow; i++)
        if (k->slow[i] == r)
            return 1;
    return 0;
}

static void batch(int step, float *x, int32_t *y)
{
    for (int i = 0; i < B; i++) {
        for (int j = 0; j < IN; j++)
            x[i * IN + j] = (float)sin(0.37 * (i * IN + j) + 1.3 * step);
        y[i] = (i + step) % 3;
    }
}

static weft_model *model(void)
{
    weft_model_config cfg;
    weft_model *m;
    if (weft_model_config_parse("mlp:6-5-3", &cfg) || weft_model_create(&m, &cfg, 3))
        return NULL;
    weft_model_set_threads(m, 1);
    return m;
}

static weft_optim *optim(size_t n)
{
    weft_optim_config oc;
    weft_optim *o;
    weft_optim_config_default(&oc, WEFT_OPTIM_SGD);
    oc.momentum = 0.9f;
    return weft_optim_create(&o, &oc, 0, n) ? NULL : o;
}

static void body(weft_comm *c, void *arg)
{
    const bcase *k = arg;
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    char spec[32];
    weft_sync_config sc;
    weft_sync *s = NULL;
    size_t n;
    weft_model *m = model(), *ref = model();
    CHECK(m && ref);
    if (!m || !ref)
        return;
    weft_model_params(m, &n);
    weft_optim *o = optim(n), *oref = optim(n);
    snprintf(spec, sizeof spec, "backup:%d", k->b);
    CHECK(weft_sync_parse(spec, &sc) == 0 && sc.mode == WEFT_SYNC_BACKUP && sc.period == k->b);
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    if (!s)
        return;
    float *pm = weft_model_params(m, NULL), *pr = weft_model_params(ref, NULL);
    float x[B * IN], xs[B * IN];
    int32_t y[B], ys[B];
    uint64_t want_mask = 0;
    for (int q = 0; q < p; q++)
        if (!is_slow(k, q))
            want_mask |= 1ull << q;
    int lo = r * B / p, hi = (r + 1) * B / p, bad_p = 0, bad_loss = 0, bad_mask = 0;
    for (int t = 0; t < STEPS; t++) {
        batch(t, x, y);
        int skip = -1, nr = hi - lo;
        float in[2] = { 0, 0 }, out[3];
        CHECK(weft_sync_backup_begin(s, &skip) == 0 && (skip == 0 || skip == 1));
        if (!skip) {
            if (is_slow(k, r))
                lag();
            weft_model_zero_grad(m);
            CHECK(weft_model_forward(m, x + lo * IN, y + lo, nr, 1, &in[0]) == 0);
            in[1] = (float)weft_model_count_correct(m, y + lo);
            CHECK(weft_model_backward(m) == 0);
        }
        CHECK(weft_sync_backup_grads(s, skip ? 0 : nr, in, out) == 0);
        CHECK(weft_optim_step(o, pm, weft_model_grads(m, NULL), 0.1f) == 0);
        bad_mask += weft_sync_included(s) != want_mask;

        /* the reference: one process on the fast ranks' rows */
        int ns = 0;
        for (int q = 0; q < p; q++) {
            if (is_slow(k, q))
                continue;
            for (int i = q * B / p; i < (q + 1) * B / p; i++, ns++) {
                memcpy(xs + ns * IN, x + i * IN, IN * sizeof *x);
                ys[ns] = y[i];
            }
        }
        float lref;
        weft_model_zero_grad(ref);
        weft_model_forward(ref, xs, ys, ns, 1, &lref);
        int cref = weft_model_count_correct(ref, ys);
        weft_model_backward(ref);
        weft_optim_step(oref, pr, weft_model_grads(ref, NULL), 0.1f);
        bad_loss += fabsf(out[0] - lref) > 1e-5f * (1 + fabsf(lref)) || out[1] != (float)cref ||
                    out[2] != (float)ns;
        for (size_t i = 0; i < n; i++)
            bad_p += fabsf(pm[i] - pr[i]) > 1e-5f * (1 + fabsf(pr[i]));
    }
    CHECKF(!bad_mask, "rank %d: %d steps with another set of ranks than %#llx", r, bad_mask,
           (unsigned long long)want_mask);
    CHECKF(!bad_loss, "rank %d: %d steps' loss/correct/samples differ from the reference", r,
           bad_loss);
    CHECKF(!bad_p, "rank %d: %d parameter values off the reference", r, bad_p);
    CHECK(weft_sync_finish(s) == 0);
    /* one model everywhere */
    float *mx = malloc(n * sizeof *mx), *mn = malloc(n * sizeof *mn);
    CHECK(weft_allreduce(c, pm, mx, n, WEFT_F32, WEFT_MAX) == 0);
    CHECK(weft_allreduce(c, pm, mn, n, WEFT_F32, WEFT_MIN) == 0);
    CHECK(memcmp(mx, mn, n * sizeof *mx) == 0);
    CHECK(weft_sync_bytes(s) > 0 || p == 1);
    free(mx);
    free(mn);
    weft_sync_destroy(s);
    weft_optim_destroy(o);
    weft_optim_destroy(oref);
    weft_model_destroy(m);
    weft_model_destroy(ref);
}

static void too_many(weft_comm *c, void *arg)
{
    weft_sync_config sc;
    weft_sync *s = NULL;
    weft_model *m = model();
    (void)arg;
    CHECK(weft_sync_parse("backup:2", &sc) == 0);
    CHECK(weft_sync_create(&s, c, m, &sc) == WEFT_EINVAL && !s);
    weft_model_destroy(m);
}

TEST(parse)
{
    weft_sync_config sc;
    CHECK(weft_sync_parse("backup:1", &sc) == 0 && sc.mode == WEFT_SYNC_BACKUP && sc.period == 1);
    CHECK(weft_sync_parse("backup:", &sc) == WEFT_EINVAL);
    CHECK(weft_sync_parse("backup:-1", &sc) == WEFT_EINVAL);
    CHECK(weft_sync_parse("backup:1x", &sc) == WEFT_EINVAL);
}

TEST(worker_slow)
{
    bcase worker = { 1, 1, { 2, -1 } };
    CHECKF(mp_run(3, 30, body, &worker) == 0, "3 ranks, rank 2 slow, backup:1");
}

TEST(coordinator_slow)
{
    bcase coord = { 1, 1, { 0, -1 } };
    CHECKF(mp_run(3, 30, body, &coord) == 0, "3 ranks, rank 0 slow, backup:1");
}

TEST(two_slow)
{
    bcase two = { 2, 2, { 1, 3 } };
    CHECKF(mp_run(4, 30, body, &two) == 0, "4 ranks, ranks 1 and 3 slow, backup:2");
}

TEST(no_backups)
{
    bcase none = { 0, 0, { -1, -1 } };
    for (int p = 1; p <= 3; p++)
        CHECKF(mp_run(p, 30, body, &none) == 0, "%d ranks, backup:0", p);
}

TEST(too_many) { CHECKF(mp_run(2, 30, too_many, NULL) == 0, "backup:2 at 2 ranks"); }
