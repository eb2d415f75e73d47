/* Data parallelism: N ranks, each with its part of every global batch, train
 * exactly like one process with the whole batch (to fp32 reduction-order
 * tolerance), and every rank ends with bit-identical parameters. */
#include "mp.h"

#include <math.h>
#include <stdlib.h>

#define IN 16
#define CLASSES 4
#define GLOBAL_BATCH 12
#define STEPS 10

/* Trains on rows [lo, hi) of each global batch; returns the losses as the
 * whole job sees them (average over ranks) in losses[]. */
static int train(weft_comm *c, int lo, int hi, float *losses, weft_model **out)
{
    weft_model_config cfg;
    weft_model *m;
    weft_optim *o;
    weft_optim_config oc;
    weft_dp *dp = NULL;
    size_t n;
    int rows = hi - lo, rc;
    float x[GLOBAL_BATCH * IN];
    int32_t y[GLOBAL_BATCH];
    if ((rc = weft_model_config_parse("mlp:16-32-4", &cfg)) ||
        (rc = weft_model_create(&m, &cfg, c ? 1000 + (uint64_t)weft_comm_rank(c) : 1000)))
        return rc;
    weft_model_set_threads(m, 1);
    weft_model_params(m, &n);
    weft_optim_config_default(&oc, WEFT_OPTIM_SGD);
    weft_optim_create(&o, &oc, 0, n);
    if (c) {
        /* different seeds per rank: the broadcast must make them equal */
        if ((rc = weft_dp_create(&dp, c, m, 256)) || (rc = weft_dp_broadcast_params(dp)))
            return rc;
    }
    for (int s = 0; s < STEPS; s++) {
        float loss;
        for (int j = 0; j < rows; j++)
            mp_sample((long)s * GLOBAL_BATCH + lo + j, x + j * IN, y + j, IN, CLASSES);
        weft_model_zero_grad(m);
        /* parts differ by one sample when p does not divide the batch; the
         * share must be known before backward starts reducing buckets */
        if (dp && (rc = weft_dp_set_share(dp, rows, GLOBAL_BATCH)))
            return rc;
        if ((rc = weft_model_forward(m, x, y, rows, 1, &loss)) || (rc = weft_model_backward(m)))
            return rc;
        if (dp) {
            loss *= (float)((double)weft_comm_size(c) * rows / GLOBAL_BATCH);
            if ((rc = weft_dp_sync_grads(dp)) || (rc = weft_dp_average(dp, &loss, 1)))
                return rc;
        }
        losses[s] = loss;
        weft_optim_step(o, weft_model_params(m, &n), weft_model_grads(m, &n), 0.1f);
    }
    weft_dp_destroy(dp);
    weft_optim_destroy(o);
    *out = m;
    return 0;
}

static float reference[STEPS];

static void body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    float losses[STEPS];
    weft_model *m = NULL;
    size_t n;
    (void)arg;
    int rc = train(c, r * GLOBAL_BATCH / p, (r + 1) * GLOBAL_BATCH / p, losses, &m);
    CHECKF(rc == 0, "train: %s %s", weft_strerror(rc), weft_comm_error(c));
    if (rc)
        return;
    for (int s = 0; s < STEPS; s++)
        CHECKF(fabsf(losses[s] - reference[s]) <= 1e-5f * fabsf(reference[s]) + 1e-6f,
               "%d ranks, step %d: loss %.9g, one process %.9g", p, s, losses[s], reference[s]);
    /* all ranks hold the same parameters, bit for bit */
    float *mine = weft_model_params(m, &n), *root = malloc(n * sizeof *root);
    memcpy(root, mine, n * sizeof *root);
    CHECK(weft_broadcast(c, root, n, WEFT_F32, 0) == 0);
    CHECK(memcmp(root, mine, n * sizeof *root) == 0);
    free(root);
    weft_model_destroy(m);
}

/* Accumulation: a held micro-step's backward launches no bucket; the
 * final one launches them all from the hook. */
static void accum_body(weft_comm *c, void *arg)
{
    weft_model_config cfg;
    weft_model *m;
    weft_dp *dp;
    float x[GLOBAL_BATCH * IN], loss;
    int32_t y[GLOBAL_BATCH];
    (void)arg;
    for (int j = 0; j < GLOBAL_BATCH; j++)
        mp_sample(j, x + j * IN, y + j, IN, CLASSES);
    CHECK(weft_model_config_parse("mlp:16-32-32-4", &cfg) == 0);
    CHECK(weft_model_create(&m, &cfg, 7) == 0);
    weft_model_set_threads(m, 1);
    CHECK(weft_dp_create(&dp, c, m, 256) == 0);
    CHECK(weft_dp_bucket_count(dp) > 1);
    weft_model_zero_grad(m);
    CHECK(weft_dp_hold(dp, 1) == 0);
    for (int k = 0; k < 2; k++) {
        CHECK(weft_model_forward(m, x, y, 4, 1, &loss) == 0);
        CHECK(weft_model_backward(m) == 0);
        CHECKF(weft_dp_launched(dp) == 0, "held micro-step %d launched %d buckets", k,
               weft_dp_launched(dp));
    }
    CHECK(weft_dp_hold(dp, 0) == 0);
    CHECK(weft_model_forward(m, x, y, 4, 1, &loss) == 0);
    CHECK(weft_model_backward(m) == 0);
    CHECKF(weft_dp_launched(dp) == weft_dp_bucket_count(dp), "last micro-step launched %d of %d",
           weft_dp_launched(dp), weft_dp_bucket_count(dp));
    CHECK(weft_dp_sync_grads(dp) == 0);
    weft_dp_destroy(dp);
    weft_model_destroy(m);
}

/* The one-process losses the jobs are held to, trained by the first case
 * that needs them. */
static void need_reference(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    weft_model *m;
    CHECK(train(NULL, 0, GLOBAL_BATCH, reference, &m) == 0);
    weft_model_destroy(m);
    CHECK(reference[STEPS - 1] < reference[0]); /* it learns */
}

TEST(one_process) { need_reference(); }

TEST(ranks_1_to_5)
{
    need_reference();
    for (int p = 1; p <= 5; p++) /* 5 does not divide the batch of 12 */
        CHECKF(mp_run(p, 60, body, NULL) == 0, "data parallel at %d ranks", p);
}

TEST(accumulation)
{
    need_reference();
    CHECK(mp_run(2, 60, accum_body, NULL) == 0);
}
