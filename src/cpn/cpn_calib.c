/* A job's model timed on this rank: what weft-cpn probe --job records as
 * measured metrics and the planner prices a cluster's step with. One
 * thread, as the planner counts a rank a core. */
#include "cpn/cpn_calib.h"
#include "core/clock.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7
#define SLOW_S 1.0 /* a warm-up step this long: time one more, not REPS */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Inputs and targets for batch samples: tokens (GPT, Llama) or features
 * (MLP), drawn from a fixed seed; what they are does not change the time. */
typedef struct {
    void *x;
    int32_t *y;
    int seq;
} calib_batch;

static int make_batch(const weft_model_config *cfg, int seq, int batch, calib_batch *b)
{
    int mlp = cfg->type == WEFT_MODEL_MLP;
    size_t nx = (size_t)batch * (size_t)(mlp ? cfg->widths[0] : seq);
    size_t ny = (size_t)batch * (size_t)(mlp ? 1 : seq);
    b->seq = mlp ? 1 : seq;
    b->x = malloc(nx * (mlp ? sizeof(float) : sizeof(int32_t)));
    b->y = malloc(ny * sizeof(int32_t));
    if (!b->x || !b->y)
        return WEFT_ENOMEM;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int classes = mlp ? cfg->widths[cfg->n_widths - 1] : cfg->vocab;
    for (size_t i = 0; i < nx; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (mlp)
            ((float *)b->x)[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        else
            ((int32_t *)b->x)[i] = (int32_t)((s >> 33) % (uint64_t)classes);
    }
    for (size_t i = 0; i < ny; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b->y[i] = (int32_t)((s >> 33) % (uint64_t)classes);
    }
    return 0;
}

/* Seconds of this thread's own CPU: what a step costs whatever else runs. */
static double cpu_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Wall and CPU seconds of every timed step, for the core's share. */
typedef struct {
    double wall, cpu;
} calib_clock;

/* *dt: the step's CPU seconds (its wall seconds where the thread's CPU
 * clock is missing). */
static int one_step(weft_model *m, const calib_batch *b, int n, double *dt, calib_clock *cc)
{
    double t0 = clock_now(), c0 = cpu_now();
    int rc = weft_model_zero_grad(m);
    if (!rc)
        rc = weft_model_forward(m, b->x, b->y, n, b->seq, NULL);
    if (!rc)
        rc = weft_model_backward(m);
    double wall = clock_now() - t0, cpu = cpu_now() - c0;
    *dt = cpu > 0 ? cpu : wall;
    cc->wall += wall;
    cc->cpu += *dt;
    return rc;
}

/* The fastest forward and backward of lo and of hi samples in the
 * thread's CPU seconds, the two sizes taken in turn so that a change of
 * load on the host moves both alike rather than tilting the line between
 * them. CPU seconds, as a loaded host stretches every step's wall time
 * (a step outlasts the scheduler's slice, so even the fastest is
 * preempted); the load is the core's share, measured apart. */
static int time_steps(weft_model *m, const calib_batch *b, int lo, int hi, double *t_lo,
                      double *t_hi, calib_clock *cc)
{
    double tl[REPS], th[REPS], warm = 0;
    calib_clock skip = { 0, 0 }; /* the warm-up's first touches are no share */
    int reps = REPS, rc = one_step(m, b, lo, &warm, &skip);
    if (!rc)
        rc = one_step(m, b, hi, &warm, &skip);
    if (warm > SLOW_S)
        reps = 1;
    for (int i = 0; i < reps && !rc; i++) {
        rc = one_step(m, b, lo, &tl[i], cc);
        if (!rc)
            rc = one_step(m, b, hi, &th[i], cc);
    }
    if (rc)
        return rc;
    qsort(tl, (size_t)reps, sizeof tl[0], cmp_double);
    qsort(th, (size_t)reps, sizeof th[0], cmp_double);
    *t_lo = tl[0];
    *t_hi = th[0];
    return 0;
}

static int time_update(weft_model *m, double *out)
{
    size_t n = 0;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, &n);
    weft_optim_config oc;
    weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
    weft_optim *o = NULL;
    int rc = weft_optim_create(&o, &oc, 0, n);
    if (!rc)
        rc = weft_optim_set_threads(o, 1);
    double t[REPS];
    for (int i = -1; i < REPS && !rc; i++) {
        double t0 = clock_now(), c0 = cpu_now();
        rc = weft_optim_step(o, p, g, 0.0f);
        double cpu = cpu_now() - c0;
        if (i >= 0)
            t[i] = cpu > 0 ? cpu : clock_now() - t0;
    }
    weft_optim_destroy(o);
    if (rc)
        return rc;
    qsort(t, REPS, sizeof t[0], cmp_double);
    *out = t[REPS / 2];
    return 0;
}

int cpn_calib_measure(const weft_model_config *cfg, int seq, int batch, cpn_calib *out)
{
    memset(out, 0, sizeof *out);
    if (batch < 2)
        batch = 2;
    int lo = batch / 4 > 0 ? batch / 4 : 1;
    calib_batch b = { NULL, NULL, 0 };
    weft_model *m = NULL;
    int rc = make_batch(cfg, seq, batch, &b);
    if (!rc)
        rc = weft_model_create(&m, cfg, 1);
    if (!rc)
        rc = weft_model_set_threads(m, 1);
    double t_lo = 0, t_hi = 0;
    calib_clock cc = { 0, 0 };
    if (!rc)
        rc = time_steps(m, &b, lo, batch, &t_lo, &t_hi, &cc);
    if (!rc)
        rc = time_update(m, &out->update_s);
    if (!rc) {
        /* noise can tilt the line: no negative fixed part, no negative slope */
        out->sample_s = t_hi > t_lo ? (t_hi - t_lo) / (batch - lo) : t_hi / batch;
        out->fixed_s = t_hi - out->sample_s * batch;
        if (out->fixed_s < 0) {
            out->fixed_s = 0;
            out->sample_s = t_hi / batch;
        }
        /* the steps' CPU is what they cost a core; the training gets the
         * share of a core that the other processes leave, as the steps
         * did here: their CPU seconds over their wall seconds */
        out->core_share = cc.wall > 0 && cc.cpu > 0 ? cc.cpu / cc.wall : 1;
        if (out->core_share > 1)
            out->core_share = 1;
    }
    if (m)
        weft_model_destroy(m);
    free(b.x);
    free(b.y);
    return rc;
}
