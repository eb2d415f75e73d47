/* The tuner's shortcut: cost_floor never exceeds cost_predict, and a
 * selector that skips what the floor rules out chooses what costing every
 * algorithm chooses, at ranks on one host from a few to hundreds. */
#include "coll/algo.h"
#include "coll/tune/cost.h"
#include "coll/tune/tuner.h"
#include "test.h"

#include <stdlib.h>

TEST_TIMEOUT(300);

static const int ranks[] = { 2, 3, 8, 17, 64, 130 };
static const uint64_t sizes[] = { 8, 1000, 32768, 2u << 20, 64u << 20 };

TEST(floor_below_prediction)
{
    for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++)
        for (int cores = 0; cores <= 2; cores += 2) {
            cost_params c;
            cost_default(&c);
            c.cores = cores;
            cost_layout l = { ranks[i], NULL, 1, NULL };
            for (int k = WEFT_COLL_BROADCAST; k < WEFT_COLL_KIND_COUNT; k++)
                for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b++)
                    for (int a = WEFT_ALGO_NAIVE; a < WEFT_ALGO_COUNT; a++) {
                        double lo, t;
                        if (coll_algo_of((weft_algo)a)->price ||
                            !coll_algo_does((weft_algo)a, (weft_coll_kind)k) ||
                            cost_floor(&c, &l, (weft_algo)a, (weft_coll_kind)k, sizes[b], 4,
                                       256, &lo) ||
                            cost_predict(&c, &l, (weft_algo)a, (weft_coll_kind)k, sizes[b], 4,
                                         256, &t))
                            continue;
                        CHECKF(lo >= 0 && lo <= t * (1 + 1e-12), "%s %s p=%d %llu B: floor %g > %g",
                               weft_coll_name((weft_coll_kind)k), weft_algo_name((weft_algo)a),
                               ranks[i], (unsigned long long)sizes[b], lo, t);
                    }
        }
}

/* coll_tuner_predict costs every algorithm; coll_tuner_select skips */
TEST(select_chooses_as_predict)
{
    int skipped = 0;
    for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++) {
        cost_params c;
        cost_default(&c);
        c.cores = 2;
        coll_tuner *t;
        CHECK(coll_tuner_create_with(&t, ranks[i], NULL, &c) == 0);
        for (int k = WEFT_COLL_BROADCAST; k < WEFT_COLL_KIND_COUNT; k++)
            for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b++) {
                double s[WEFT_ALGO_COUNT];
                weft_algo all = coll_tuner_predict(t, (weft_coll_kind)k, sizes[b], 4, s);
                weft_algo some = coll_tuner_select(t, (weft_coll_kind)k, sizes[b], 4);
                CHECKF(all == some, "%s p=%d %llu B: %s, skipping %s",
                       weft_coll_name((weft_coll_kind)k), ranks[i],
                       (unsigned long long)sizes[b], weft_algo_name(all), weft_algo_name(some));
                skipped += ranks[i] >= 64 && s[WEFT_ALGO_NAIVE] > 8 * s[all];
            }
        coll_tuner_destroy(t);
    }
    CHECK(skipped > 0); /* the case the shortcut is for did come up */
}
