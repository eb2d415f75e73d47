/* auto's measured choice (coll/tune/trial.h): which candidates a bucket tries,
 * in what turns, which calls count, how the agreed times decide; the
 * selector's pick/record/settle cycle with made-up times; and ranks running
 * auto through their trials, blocking and non-blocking, with correct
 * results and one choice per size on every rank. Never asserts a time. */
#include "coll/comm.h"
#include "coll/tune/same_bits.h"
#include "coll/tune/tuner.h"
#include "coll/tune/trial.h"
#include "mp.h"
#include "test.h"

#include <stdlib.h>

TEST(candidates)
{
    double secs[WEFT_ALGO_COUNT], pred[TRIAL_MAX_CAND];
    weft_algo cand[TRIAL_MAX_CAND];
    for (int a = 0; a < WEFT_ALGO_COUNT; a++)
        secs[a] = -1;
    CHECK(trial_candidates(secs, 8, cand, pred) == 0);
    secs[WEFT_ALGO_RING] = 10;
    CHECK(trial_candidates(secs, 8, cand, pred) == 1 && cand[0] == WEFT_ALGO_RING);
    secs[WEFT_ALGO_TREE] = 5;
    secs[WEFT_ALGO_RD] = 41;    /* beyond 8x the best */
    secs[WEFT_ALGO_NAIVE] = 40; /* exactly 8x: in */
    secs[WEFT_ALGO_FLAT] = 7;
    secs[WEFT_ALGO_DIRECT] = 7; /* equal predictions: algorithm order */
    int n = trial_candidates(secs, 8, cand, pred);
    CHECKF(n == 4, "n %d", n);
    CHECK(cand[0] == WEFT_ALGO_TREE && pred[0] == 5);
    CHECK(cand[1] == WEFT_ALGO_DIRECT && cand[2] == WEFT_ALGO_FLAT);
    CHECK(cand[3] == WEFT_ALGO_RING && pred[3] == 10); /* naive, 5th, is dropped */
    n = trial_candidates(secs, 1.5, cand, pred);
    CHECKF(n == 3 && cand[0] == WEFT_ALGO_TREE && cand[2] == WEFT_ALGO_FLAT, "n %d", n);
    n = trial_candidates(secs, 1.0, cand, pred);
    CHECK(n == 1 && cand[0] == WEFT_ALGO_TREE);
}

TEST(turns)
{
    weft_algo cand[3] = { WEFT_ALGO_RING, WEFT_ALGO_FLAT, WEFT_ALGO_DIRECT };
    double pred[3] = { 1e-3, 2e-3, 3e-3 };
    trial t;
    trial_init(&t, 7, 1 << 20, cand, pred, 3, 2);
    CHECK(t.model == WEFT_ALGO_RING && !t.settled);
    /* one untimed round, then two timed; turns interleave */
    double times[9] = { 9, 9, 9, /* warm-up: ignored */
                        5, 4, 6, 3, 8, 7 };
    int last = 0;
    for (int k = 0; k < 9; k++) {
        CHECKF(trial_turn(&t) == cand[k % 3], "call %d", k);
        last = trial_record(&t, 1 << 20, times[k]);
        CHECKF(last == (k == 8), "call %d", k);
    }
    CHECK(t.best[0] == 3 && t.best[1] == 4 && t.best[2] == 6);
    /* the ranks' agreed times: flat clearly fastest */
    double agreed[3] = { 5, 2, 6 };
    CHECK(trial_settle(&t, agreed) == WEFT_ALGO_FLAT);
    CHECK(t.settled && trial_turn(&t) == WEFT_ALGO_FLAT && trial_turn(&t) == WEFT_ALGO_FLAT);
    CHECK(trial_record(&t, 1 << 20, 1) == 0); /* settled: nothing more counts */

    /* within the margin of the model's pick: the model's pick stays */
    trial_init(&t, 7, 1 << 20, cand, pred, 3, 1);
    double close[3] = { 1.0, 0.95, 1.2 };
    CHECK(trial_settle(&t, close) == WEFT_ALGO_RING);
    trial_init(&t, 7, 1 << 20, cand, pred, 3, 1);
    double far[3] = { 1.0, 1.3, 0.85 };
    CHECK(trial_settle(&t, far) == WEFT_ALGO_DIRECT);

    /* a larger call in the bucket is scaled down to the bucket's size;
     * small calls are compared as measured */
    trial_init(&t, 7, 1 << 20, cand, pred, 1 + 1, 1);
    trial_record(&t, 1 << 20, 1); /* warm-up */
    trial_record(&t, 1 << 20, 1);
    trial_record(&t, (1 << 20) + (1 << 19), 3.0);
    CHECKF(t.best[0] > 1.99 && t.best[0] < 2.01, "scaled %g", t.best[0]);
    trial_init(&t, 7, 64, cand, pred, 2, 1);
    trial_record(&t, 64, 1);
    trial_record(&t, 64, 1);
    trial_record(&t, 72, 3.0);
    trial_record(&t, 72, 5.0);
    CHECK(t.best[0] == 3.0 && t.best[1] == 5.0);
}

/* The selector's side, with made-up times: the trial runs through its turns,
 * hands over this rank's times once, and the bucket keeps the winner. */
TEST(tuner)
{
    char err[256];
    coll_tuner *t, *u;
    unsetenv("WEFT_TUNE");
    unsetenv("WEFT_TUNE_FILE");
    setenv("WEFT_AUTOTUNE", "1", 1);
    CHECK(coll_tuner_create(&t, 4, NULL, err, sizeof err) == 0);
    CHECK(coll_tuner_create(&u, 4, NULL, err, sizeof err) == 0);
    if (!t || !u)
        return;
    uint64_t bytes = 256 << 10;
    double secs[WEFT_ALGO_COUNT];
    weft_algo model = coll_tuner_predict(t, WEFT_COLL_ALLREDUCE, bytes, 4, secs);
    int ticket, ticket2, n = 0, calls = 0;
    weft_algo first = coll_tuner_pick(t, WEFT_COLL_ALLREDUCE, bytes, 4, &ticket);
    CHECKF(ticket >= 0, "256 KiB on 4 ranks has close candidates (model: %s)",
           weft_algo_name(model));
    if (ticket < 0)
        goto out;
    CHECK(first == model);
    CHECK(coll_tuner_select(t, WEFT_COLL_ALLREDUCE, bytes, 4) == model); /* model while trying */
    /* another size class is another bucket and another trial */
    CHECK(coll_tuner_pick(t, WEFT_COLL_ALLREDUCE, bytes * 4, 4, &ticket2) >= 0 && ticket2 != ticket);
    weft_algo seen[TRIAL_MAX_CALLS], last = first;
    int timed[TRIAL_MAX_CALLS];
    double mine[TRIAL_MAX_CAND], other[TRIAL_MAX_CAND];
    for (;;) {
        int tk;
        weft_algo a = calls ? coll_tuner_pick(t, WEFT_COLL_ALLREDUCE, bytes + 64, 4, &tk) : first;
        if (calls)
            CHECK(tk == ticket);
        weft_algo b = coll_tuner_pick(u, WEFT_COLL_ALLREDUCE, bytes, 4, &tk);
        CHECKF(a == b, "call %d: same turns on two selectors", calls); /* as on two ranks */
        timed[calls] = coll_tuner_timed(t, ticket);
        seen[calls++] = last = a;
        /* the model's pick is made to look slow */
        n = coll_tuner_record(t, ticket, bytes, a == model ? 2e-3 : 1e-3 + calls * 1e-6, mine);
        coll_tuner_record(u, tk, bytes, 1e-3, other); /* u's times do not matter */
        if (n || calls >= TRIAL_MAX_CALLS)
            break;
    }
    CHECKF(n >= 2 && calls % n == 0 && calls <= TRIAL_MAX_CALLS, "n %d calls %d", n, calls);
    CHECK(seen[0] == model && seen[n] == model); /* rounds repeat the order */
    for (int k = 0; k < calls && n; k++)
        CHECKF(timed[k] == (k >= n), "call %d timed %d", k, timed[k]); /* first round untimed */
    (void)last;
    CHECKF(mine[0] == 2e-3, "%g", mine[0]); /* this rank's own times came back: the model's pick was 2 ms */
    double agreed[TRIAL_MAX_CAND];
    for (int i = 0; i < n; i++)
        agreed[i] = seen[i] == model ? 2e-3 : 1e-3 + (double)i * 1e-6;
    weft_algo won = coll_tuner_settle(t, ticket, agreed);
    CHECK(won == seen[1]); /* the fastest of the others */
    CHECK(coll_tuner_select(t, WEFT_COLL_ALLREDUCE, bytes, 4) == won);
    CHECK(coll_tuner_pick(t, WEFT_COLL_ALLREDUCE, bytes, 4, &ticket2) == won && ticket2 == -1);
    CHECK(coll_tuner_select(u, WEFT_COLL_ALLREDUCE, bytes, 4) == model);
out:
    coll_tuner_destroy(t);
    coll_tuner_destroy(u);

    /* off: the model alone */
    setenv("WEFT_AUTOTUNE", "0", 1);
    CHECK(coll_tuner_create(&t, 4, NULL, err, sizeof err) == 0);
    if (t) {
        CHECK(coll_tuner_pick(t, WEFT_COLL_ALLREDUCE, bytes, 4, &ticket) == model && ticket == -1);
        coll_tuner_destroy(t);
    }
    setenv("WEFT_AUTOTUNE", "yes", 1);
    CHECK(coll_tuner_create(&t, 4, NULL, err, sizeof err) == WEFT_ECONFIG && !t);
    CHECKF(strstr(err, "WEFT_AUTOTUNE") != NULL, "%s", err);
    /* one rank and point-to-point have nothing to try */
    setenv("WEFT_AUTOTUNE", "1", 1);
    CHECK(coll_tuner_create(&t, 1, NULL, err, sizeof err) == 0);
    if (t) {
        coll_tuner_pick(t, WEFT_COLL_ALLREDUCE, bytes, 4, &ticket);
        CHECK(ticket == -1);
        coll_tuner_destroy(t);
    }
    CHECK(coll_tuner_create(&t, 4, NULL, err, sizeof err) == 0);
    if (t) {
        coll_tuner_pick(t, WEFT_COLL_SEND, bytes, 4, &ticket);
        CHECK(ticket == -1);
        coll_tuner_pick(t, WEFT_COLL_ALLREDUCE, bytes, 3, &ticket); /* no such element size */
        CHECK(ticket == -1);
        coll_tuner_destroy(t);
    }
}

/* The candidates of a bucket's trial, in turn order (its first round);
 * returns how many, 0 when nothing is tried. */
static int trial_cands(coll_tuner *t, weft_coll_kind kind, uint64_t bytes,
                       weft_algo cand[TRIAL_MAX_CALLS])
{
    double mine[TRIAL_MAX_CAND];
    for (int calls = 0; calls < TRIAL_MAX_CALLS; calls++) {
        int ticket;
        cand[calls] = coll_tuner_pick(t, kind, bytes, 4, &ticket);
        if (ticket < 0)
            return 0;
        int n = coll_tuner_record(t, ticket, bytes, 1e-3, mine);
        if (n) {
            coll_tuner_settle(t, ticket, mine);
            return n;
        }
    }
    return 0;
}

/* By default a trial runs only algorithms with the model's pick's bits, so
 * that whichever the clock favours, the results are the same;
 * WEFT_AUTO_FASTEST=1 lets every close one compete. */
TEST(same_bits_only)
{
    char err[256];
    coll_tuner *t;
    weft_algo cand[TRIAL_MAX_CALLS];
    double secs[WEFT_ALGO_COUNT];
    unsetenv("WEFT_TUNE");
    unsetenv("WEFT_TUNE_FILE");
    setenv("WEFT_AUTOTUNE", "1", 1);
    static const weft_coll_kind kinds[] = { WEFT_COLL_ALLREDUCE, WEFT_COLL_REDUCE_SCATTER,
                                            WEFT_COLL_ALLGATHER };
    for (int fastest = 0; fastest < 2; fastest++) {
        setenv("WEFT_AUTO_FASTEST", fastest ? "1" : "0", 1);
        for (int p = 2; p <= 8; p += 2) {
            CHECK(coll_tuner_create(&t, p, NULL, err, sizeof err) == 0);
            if (!t)
                continue;
            int mixed[3] = { 0 }, tried[3] = { 0 };
            for (int k = 0; k < 3; k++)
                for (uint64_t bytes = 64; bytes <= (8u << 20); bytes *= 4) {
                    weft_algo model = coll_tuner_predict(t, kinds[k], bytes, 4, secs);
                    int n = trial_cands(t, kinds[k], bytes, cand);
                    tried[k] |= n >= 2;
                    for (int i = 0; i < n; i++) {
                        /* bytes is a power of two: its bucket ends an eighth above */
                        int same =
                            tune_same_bits(cand[i], model, kinds[k], p, bytes + bytes / 8 - 1);
                        mixed[k] |= !same;
                        CHECKF(same || fastest, "%d ranks, %s %llu: %s tried beside %s", p,
                               weft_coll_name(kinds[k]), (unsigned long long)bytes,
                               weft_algo_name(cand[i]), weft_algo_name(model));
                    }
                }
            /* the model finds several close at these sizes: with the switch
             * on, some trial mixes orders; without, trials go on where
             * bits cannot differ (an all-gather; two ranks) */
            if (fastest && p > 2)
                CHECKF(mixed[0], "%d ranks: WEFT_AUTO_FASTEST=1 tried no other order", p);
            CHECKF(tried[2], "%d ranks: no all-gather trial", p);
            if (p == 2)
                CHECKF(tried[0], "fastest %d: no all-reduce trial at 2 ranks", fastest);
            coll_tuner_destroy(t);
        }
    }
    setenv("WEFT_AUTO_FASTEST", "2", 1);
    CHECK(coll_tuner_create(&t, 4, NULL, err, sizeof err) == WEFT_ECONFIG && !t);
    CHECKF(strstr(err, "WEFT_AUTO_FASTEST") != NULL, "%s", err);
    unsetenv("WEFT_AUTO_FASTEST");
}

static const size_t counts[] = { 2, 1024, 16384, 262144 + 3 };
#define NCOUNTS (sizeof counts / sizeof counts[0])
#define CALLS (TRIAL_MAX_CALLS + 4)

static void fill(float *x, size_t n, int rank, int call)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((rank + 1) * ((int)(i % 7) + call % 5));
}

static int sum_ok(const float *x, size_t n, int size, int call)
{
    float f = (float)(size * (size + 1) / 2);
    for (size_t i = 0; i < n; i++)
        if (x[i] != f * (float)((int)(i % 7) + call % 5))
            return 0;
    return 1;
}

/* Every size through its trial and beyond, correct at every call; then
 * every rank holds the same choice per size. */
static void ranks_blocking(weft_comm *c, void *arg)
{
    int size = weft_comm_size(c), rank = weft_comm_rank(c);
    size_t max = counts[NCOUNTS - 1];
    float *x = malloc(max * sizeof *x), *y = malloc(max * sizeof *y),
          *g = malloc(max * (size_t)size * sizeof *g);
    if (!x || !y || !g) {
        CHECK(0);
        goto out;
    }
    for (size_t k = 0; k < NCOUNTS; k++) {
        int bad = 0, failed = 0;
        for (int i = 0; i < CALLS; i++) {
            fill(x, counts[k], rank, i);
            if (i % 2) { /* in place and out of place take turns */
                failed += weft_allreduce(c, x, x, counts[k], WEFT_F32, WEFT_SUM) != 0;
                bad += !sum_ok(x, counts[k], size, i);
            } else {
                failed += weft_allreduce(c, x, y, counts[k], WEFT_F32, WEFT_SUM) != 0;
                bad += !sum_ok(y, counts[k], size, i);
            }
            /* an all-gather between, with trials of its own */
            fill(x, counts[k] / 2 + 1, rank, i);
            failed += weft_allgather(c, x, g, counts[k] / 2 + 1, WEFT_F32) != 0;
            for (int r = 0; r < size && !failed; r++)
                bad += g[(size_t)r * (counts[k] / 2 + 1)] != (float)((r + 1) * (i % 5));
        }
        CHECKF(!failed && !bad, "count %zu: %d failed, %d wrong", counts[k], failed, bad);
    }
    if (!c->tune) {
        CHECK(0);
        goto out;
    }
    int32_t mine[2 * NCOUNTS], all[2 * NCOUNTS * 16];
    for (size_t k = 0; k < NCOUNTS; k++) {
        mine[k] = coll_tuner_select(c->tune, WEFT_COLL_ALLREDUCE, counts[k] * 4, 4);
        mine[NCOUNTS + k] =
            coll_tuner_select(c->tune, WEFT_COLL_ALLGATHER, (counts[k] / 2 + 1) * 4, 4);
    }
    CHECK(size <= 16 && weft_allgather(c, mine, all, 2 * NCOUNTS, WEFT_I32) == 0);
    for (int r = 0; r < size && r < 16; r++)
        CHECKF(!memcmp(all + (size_t)r * 2 * NCOUNTS, mine, sizeof mine),
               "rank %d settled differently from rank %d", r, rank);
out:
    free(x);
    free(y);
    free(g);
}

/* Trials run on the progress thread too: many calls in flight at once, of
 * two sizes whose trials interleave. */
static void ranks_async(weft_comm *c, void *arg)
{
    int size = weft_comm_size(c), rank = weft_comm_rank(c);
    enum { INFLIGHT = 6 };
    size_t n[2] = { 300, 70000 };
    float *x[INFLIGHT];
    weft_request *req[INFLIGHT];
    int bad = 0, failed = 0;
    for (int i = 0; i < INFLIGHT; i++)
        x[i] = malloc(n[1] * sizeof(float));
    for (int round = 0; round < CALLS / 3 + 2; round++) {
        for (int i = 0; i < INFLIGHT; i++) {
            if (!x[i])
                continue;
            fill(x[i], n[i % 2], rank, round + i);
            if (weft_iallreduce(c, x[i], x[i], n[i % 2], WEFT_F32, WEFT_SUM, &req[i])) {
                failed++;
                req[i] = NULL;
            }
        }
        for (int i = 0; i < INFLIGHT; i++)
            if (req[i]) {
                failed += weft_wait(req[i]) != 0;
                bad += !sum_ok(x[i], n[i % 2], size, round + i);
            }
    }
    CHECKF(!failed && !bad, "%d failed, %d wrong", failed, bad);
    for (int i = 0; i < INFLIGHT; i++)
        free(x[i]);
}

/* The jobs measure: trials on, no algorithm forced. */
static void autotune_env(void)
{
    setenv("WEFT_AUTOTUNE", "1", 1);
    unsetenv("WEFT_ALGO");
}

TEST(ranks_blocking)
{
    autotune_env();
    for (int p = 2; p <= 5; p += 3)
        CHECKF(mp_run(p, 60, ranks_blocking, NULL) == 0, "%d ranks", p);
}

TEST(ranks_async)
{
    autotune_env();
    CHECK(mp_run(4, 60, ranks_async, NULL) == 0);
}

/* as if on two hosts: hier among the candidates, the TCP paths between */
TEST(two_hosts)
{
    autotune_env();
    mp_ranks_per_host = 2;
    CHECK(mp_run(4, 60, ranks_blocking, NULL) == 0);
    mp_ranks_per_host = 0;
}
