/* A bucket's trial: whose turn it is, the fastest call of each candidate,
 * and the winner once the ranks agree. */
#include "coll/tune/trial.h"

#include <string.h>

/* Sizes in a bucket differ by up to an eighth. Above this, time is taken
 * to grow with size, and calls are scaled to the bucket's lower end; below,
 * latency dominates and times are compared as they are. */
#define TRIAL_SCALE_FROM (64u << 10)

int trial_candidates(const double secs[WEFT_ALGO_COUNT], double ratio,
                     weft_algo cand[TRIAL_MAX_CAND], double pred[TRIAL_MAX_CAND])
{
    int n = 0;
    double best = -1;
    for (int a = 0; a < WEFT_ALGO_COUNT; a++)
        if (secs[a] >= 0 && (best < 0 || secs[a] < best))
            best = secs[a];
    if (best < 0)
        return 0;
    /* insertion by predicted time; equal predictions keep algorithm order */
    for (int a = 0; a < WEFT_ALGO_COUNT; a++) {
        if (secs[a] < 0 || secs[a] > best * ratio)
            continue;
        int i = n < TRIAL_MAX_CAND ? n++ : TRIAL_MAX_CAND;
        while (i > 0 && pred[i - 1] > secs[a]) {
            if (i < TRIAL_MAX_CAND) {
                cand[i] = cand[i - 1];
                pred[i] = pred[i - 1];
            }
            i--;
        }
        if (i < TRIAL_MAX_CAND) {
            cand[i] = (weft_algo)a;
            pred[i] = secs[a];
        }
    }
    return n;
}

void trial_init(trial *t, size_t key, uint64_t lower, const weft_algo *cand,
                const double *pred, int n, int rounds)
{
    memset(t, 0, sizeof *t);
    t->key = key;
    t->lower = lower;
    t->ncand = n;
    t->rounds = rounds;
    t->model = cand[0];
    t->chosen = cand[0];
    for (int i = 0; i < n; i++) {
        t->cand[i] = cand[i];
        t->pred[i] = pred[i];
        t->best[i] = -1;
        t->agreed[i] = -1;
    }
}

weft_algo trial_turn(const trial *t)
{
    if (t->settled)
        return t->chosen;
    return t->cand[t->calls % t->ncand];
}

int trial_record(trial *t, uint64_t bytes, double secs)
{
    if (t->settled)
        return 0;
    int i = t->calls % t->ncand;
    /* the first round only warms up: a first use pays for setup (segments,
     * connections, page faults) that later calls do not */
    if (t->calls < t->ncand)
        return ++t->calls == t->ncand * (t->rounds + 1);
    if (bytes >= TRIAL_SCALE_FROM && bytes > t->lower)
        secs *= (double)t->lower / (double)bytes;
    if (t->best[i] < 0 || secs < t->best[i])
        t->best[i] = secs;
    return ++t->calls == t->ncand * (t->rounds + 1);
}

weft_algo trial_settle(trial *t, const double *agreed)
{
    int w = 0;
    for (int i = 0; i < t->ncand; i++) {
        t->agreed[i] = agreed[i];
        if (agreed[i] < agreed[w])
            w = i;
    }
    /* noise alone should not overrule the model */
    if (agreed[w] > agreed[0] * (1.0 - TRIAL_MARGIN))
        w = 0;
    t->chosen = t->cand[w];
    t->settled = 1;
    return t->chosen;
}
