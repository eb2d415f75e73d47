/* The outer state of DiLoCo across a membership change (sync_outer.c, as
 * weft-train --elastic uses it):
 *   outer_export / outer_import carry the anchor, the momentum and the
 *     last outer step to a new outer_sync: it goes on bit for bit as the
 *     old one would have
 *   outer_weigh leaves a rank out of an outer step: with weights 0 and
 *     ranks / contributors the step is the one of the contributors alone
 *     (to rounding). */
#include "mp.h"

#include "train/sync_outer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST_TIMEOUT(60);

/* Two models of one shape and seed (a's values are b's at the start). */
static int two_models(weft_model **a, weft_model **b, size_t *n)
{
    weft_model_config cfg;
    *a = *b = NULL;
    if (weft_model_config_parse("mlp:5-3-2", &cfg) || weft_model_create(a, &cfg, 7) ||
        weft_model_create(b, &cfg, 7))
        return -1;
    weft_model_params(*a, n);
    return 0;
}

/* An inner step that moves each rank's model its own way. */
static void local_progress(weft_model *m, int who, long step)
{
    size_t n;
    float *x = weft_model_params(m, &n);
    for (size_t i = 0; i < n; i++)
        x[i] += 0.003f * (float)((int)((i * 7 + (size_t)step * 3 + (size_t)who * 5) % 11) - 5);
}

static void carry_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    size_t n;
    weft_model *a, *b;
    weft_sync_config cfg;
    outer_sync *oa = NULL, *ob = NULL;
    weft_comm *c2 = NULL;
    (void)arg;
    CHECK(two_models(&a, &b, &n) == 0 && weft_sync_parse("diloco:3", &cfg) == 0);
    if (!a || !b)
        return;
    float *xa = weft_model_params(a, &n), *xb = weft_model_params(b, &n);
    CHECK(outer_create(&oa, c, a, &cfg) == 0);
    for (long t = 1; oa && t <= 4; t++) { /* one outer step (at 3), one inner step after */
        local_progress(a, r, t);
        CHECK(outer_after_step(oa, t) == 0);
    }
    /* the successor: another communicator, another model with a's values */
    float *anchor = malloc(n * sizeof *anchor), *vel = malloc(n * sizeof *vel);
    long synced = -1;
    CHECK(anchor && vel && oa);
    if (!anchor || !vel || !oa)
        goto out;
    outer_export(oa, anchor, vel, &synced);
    CHECK(synced == 3);
    CHECK(weft_comm_split(c, 0, r, &c2) == 0);
    memcpy(xb, xa, n * sizeof *xa);
    CHECK(outer_create(&ob, c2, b, &cfg) == 0);
    if (!ob)
        goto out;
    outer_import(ob, anchor, vel, synced);
    for (long t = 5; t <= 9; t++) { /* outer steps at 6 and 9 on both */
        local_progress(a, r, t);
        local_progress(b, r, t);
        CHECK(outer_after_step(oa, t) == 0 && outer_after_step(ob, t) == 0);
        CHECK(memcmp(xa, xb, n * sizeof *xa) == 0);
    }
out:
    free(anchor);
    free(vel);
    outer_destroy(oa);
    outer_destroy(ob);
    weft_comm_destroy(c2);
    weft_model_destroy(a);
    weft_model_destroy(b);
}

TEST(export_import_carries_the_outer_state)
{
    CHECK(mp_run(2, 30, carry_body, NULL) == 0);
}

/* 3 ranks, rank 2 left out of the outer step; the reference is the same
 * step over ranks 0 and 1 alone. */
static void weigh_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    size_t n;
    weft_model *a, *b;
    weft_sync_config cfg;
    outer_sync *oa = NULL, *ob = NULL;
    weft_comm *two = NULL;
    (void)arg;
    CHECK(two_models(&a, &b, &n) == 0 && weft_sync_parse("diloco:2", &cfg) == 0);
    if (!a || !b)
        return;
    float *xa = weft_model_params(a, &n), *xb = weft_model_params(b, &n);
    CHECK(weft_comm_split(c, r < 2 ? 0 : -1, r, &two) == 0);
    CHECK(outer_create(&oa, c, a, &cfg) == 0);
    if (two)
        CHECK(outer_create(&ob, two, b, &cfg) == 0);
    for (long t = 1; oa && t <= 2; t++) {
        local_progress(a, r, t);
        local_progress(b, r, t);
        if (t == 2)
            outer_weigh(oa, r < 2 ? 1.5f : 0.0f);
        CHECK(outer_after_step(oa, t) == 0);
        if (ob)
            CHECK(outer_after_step(ob, t) == 0);
    }
    if (ob) {
        double worst = 0;
        for (size_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)xa[i] - (double)xb[i]));
        CHECK(worst < 1e-6);
    }
    /* rank 2 holds the same outer result: it took part with nothing */
    float first[4];
    memcpy(first, xa, sizeof first);
    CHECK(weft_broadcast(c, first, 4, WEFT_F32, 0) == 0);
    CHECK(memcmp(first, xa, sizeof first) == 0);
    outer_destroy(oa);
    outer_destroy(ob);
    weft_comm_destroy(two);
    weft_model_destroy(a);
    weft_model_destroy(b);
}

TEST(weigh_leaves_a_rank_out)
{
    CHECK(mp_run(3, 30, weigh_body, NULL) == 0);
}
