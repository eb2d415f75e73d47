/* MM_AUTO (mm_auto.h): the peak probe's kernel until the model's own
 * products have been recorded and timed on both kernels. */
#include "train/mm_auto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "train/mm_choose.h"
#include "train/mm_ctx.h"
#include "train/peak.h"
#include "weft.h"

int train_mm_create(mm_ctx **out, int threads, int backend)
{
    if (!out)
        return WEFT_EINVAL;
    int deciding = 0;
    if (backend == MM_OPENBLAS && !train_mm_blas_core())
        return WEFT_ENOTSUP;
    if (backend == MM_AUTO && !train_mm_blas_core())
        backend = MM_PORTABLE; /* nothing to choose between */
    if (backend == MM_AUTO) {
        deciding = 1;
        /* never silently the slower one: Debian's OpenBLAS may run a
         * kernel older than the CPU (train/peak.c warns and says why) */
        train_peak pk;
        int rc = train_peak_get(&pk);
        if (rc)
            return rc;
        backend = pk.best;
    }
    int rc = train_mm_create_fixed(out, threads, backend);
    if (rc == 0)
        (*out)->deciding = deciding;
    return rc;
}

/* A model whose step's products are fewer FLOPs than this (a few
 * milliseconds) keeps the peak probe's kernel. */
#define MM_TIME_MIN_FLOPS 1e8

/* "portable avx2, openblas Zen, 2 threads": what a cached choice was
 * measured with, so another ISA cap, OpenBLAS core or thread count is
 * measured again. */
static void kernels_of(const mm_ctx *c, char *buf, size_t cap)
{
    const char *core = train_mm_blas_core();
    snprintf(buf, cap, "portable %s, openblas %s, %d threads", train_mmp_isa(c->port),
             core ? core : "-", c->threads);
}

static void announce(const mm_ctx *c)
{
    char text[512];
    train_mm_choice_text(&c->choice, text, sizeof text);
    log_msg(log_level_from_env(), LOG_INFO, 0, "matmul auto: %s", text);
}

void train_mm_begin(mm_ctx *c, uint64_t key)
{
    if (!c || !c->deciding || c->rec)
        return;
    char kern[128];
    kernels_of(c, kern, sizeof kern);
    /* a tiny model's line (written before such models went untimed) is
     * not taken */
    if (train_mm_choice_load(key, kern, &c->choice) == 0 && c->choice.flops >= MM_TIME_MIN_FLOPS) {
        c->backend = c->choice.backend;
        c->chosen = 1;
        c->deciding = 0;
        announce(c);
        return;
    }
    memset(&c->choice, 0, sizeof c->choice);
    c->key = key;
    if (!(c->rec = calloc(1, sizeof *c->rec)))
        c->deciding = 0;   /* keeps the probe's kernel */
}

/* A timed product is at most this many FLOPs (its largest side halved
 * until it is), so that a large model's choice stays well under a second;
 * its time is scaled back up to the full shape's. */
#define MM_TIME_FLOPS 0.6e9

typedef struct {
    mm_ctx *c;
    float *a, *b, *o;
} timer_arg;

static void capped(const mm_shape *s, int *M, int *N, int *K)
{
    *M = s->M;
    *N = s->N;
    *K = s->K;
    while (2.0 * *M * *N * *K > MM_TIME_FLOPS) {
        int *big = *M >= *N && *M >= *K ? M : *N >= *K ? N : K;
        *big = (*big + 1) / 2;
    }
}

static double time_shape(void *arg, int backend, const mm_shape *s)
{
    timer_arg *t = arg;
    int M, N, K;
    capped(s, &M, &N, &K);
    double t0 = clock_now();
    train_mm_gemm_with(t->c, backend, s->ta, s->tb, M, N, K, t->a, s->ta ? M : K, t->b, s->tb ? K : N,
            s->acc ? 1.0f : 0.0f, t->o, N);
    double dt = clock_now() - t0;
    return dt * ((double)s->M * s->N * s->K) / ((double)M * N * K);
}

void train_mm_settle(mm_ctx *c)
{
    if (!c || !c->deciding || !c->rec || c->rec->n == 0)
        return;
    mm_shapes *t = c->rec;
    c->rec = NULL;
    c->deciding = 0;
    if (train_mm_shapes_flops(t) < MM_TIME_MIN_FLOPS) {
        /* timing would be noise, and would choose differently for models
         * of one family (a pipeline stage and the whole model), whose
         * results then differ in their last bits */
        memset(&c->choice, 0, sizeof c->choice);
        c->choice.backend = c->backend;
        c->choice.flops = train_mm_shapes_flops(t);
        c->choice.shapes = t->n;
        snprintf(c->choice.source, sizeof c->choice.source,
                 "a step's products are %.3g GFLOP, under %.2g: the peak probe's kernel, untimed",
                 c->choice.flops / 1e9, MM_TIME_MIN_FLOPS / 1e9);
        c->chosen = 1;
        announce(c);
        free(t);
        return;
    }
    size_t most = 1;
    double distinct = 0.0;
    for (int i = 0; i < t->n; i++) {
        int M, N, K;
        capped(&t->s[i], &M, &N, &K);
        size_t sz[3] = { (size_t)M * K, (size_t)K * N, (size_t)M * N };
        for (int j = 0; j < 3; j++)
            most = sz[j] > most ? sz[j] : most;
        distinct += 2.0 * M * N * K;
    }
    timer_arg ta = { c, malloc(most * sizeof(float)), malloc(most * sizeof(float)),
                     calloc(most, sizeof(float)) };
    if (ta.a && ta.b && ta.o) {
        for (size_t i = 0; i < most; i++) {
            ta.a[i] = (float)(i % 17) * 0.01f;
            ta.b[i] = (float)(i % 13) * 0.01f;
        }
        /* three runs of each where that is cheap, two for big models */
        int reps = distinct > 1e9 ? 2 : 3;
        double t0 = clock_now();
        train_mm_choose(t, MM_AUTO, train_mm_blas_core() != NULL, reps, time_shape, &ta,
                        &c->choice);
        char kern[128];
        kernels_of(c, kern, sizeof kern);
        c->choice.took_s = clock_now() - t0;
        (void)train_mm_choice_store(c->key, kern, &c->choice);
        c->backend = c->choice.backend;
        c->chosen = 1;
        announce(c);
    }
    free(ta.a);
    free(ta.b);
    free(ta.o);
    free(t);
}

const mm_choice *train_mm_choice(const mm_ctx *c)
{
    return c && c->chosen ? &c->choice : NULL;
}

int train_mm_provisional(const mm_ctx *c)
{
    return c && c->deciding;
}
