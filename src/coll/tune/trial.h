/* Measured choice. The cost model ranks the algorithms well by regime but
 * can be wrong by several times between close ones (a loaded host, cache
 * effects it does not see). So when more than one algorithm is predicted
 * within reach of the best for a size bucket, the bucket's first calls run
 * the candidates in turn, several rounds, interleaved so that each sees the
 * same conditions; the ranks then agree on the times (for each candidate,
 * the slowest rank's fastest call) and the bucket keeps the winner.
 * One trial per bucket, held by the selector (coll/tune/tuner.h). */
#ifndef WEFT_COLL_TRIAL_H
#define WEFT_COLL_TRIAL_H

#include "weft.h"

#include <stddef.h>
#include <stdint.h>

#define TRIAL_MAX_CAND 4
#define TRIAL_MAX_ROUNDS 3 /* timed; one more round before them warms up */
/* The most calls one bucket spends on trials. */
#define TRIAL_MAX_CALLS (TRIAL_MAX_CAND * (TRIAL_MAX_ROUNDS + 1))
/* How much faster than the model's pick another must measure to win. */
#define TRIAL_MARGIN 0.1

typedef struct trial {
    size_t key;       /* the selector's bucket */
    uint64_t lower;   /* bytes the times are scaled to */
    int ncand, rounds;
    int calls;        /* trial calls made so far */
    int settled;      /* 0 while on trial */
    weft_algo model;  /* what the model alone would pick */
    weft_algo chosen; /* once settled */
    weft_algo cand[TRIAL_MAX_CAND]; /* in order of predicted time */
    double pred[TRIAL_MAX_CAND];    /* predicted seconds */
    double best[TRIAL_MAX_CAND];    /* this rank's fastest call, seconds at lower */
    double agreed[TRIAL_MAX_CAND];  /* the slowest rank's, once settled */
} trial;

/* Candidates out of predicted seconds per algorithm (negative: none): the
 * fastest few predicted within ratio of the best, fastest first. Returns
 * how many (at least 1 when any algorithm applies); fills cand and pred. */
int trial_candidates(const double secs[WEFT_ALGO_COUNT], double ratio,
                     weft_algo cand[TRIAL_MAX_CAND], double pred[TRIAL_MAX_CAND]);

/* A fresh trial of n >= 2 candidates, rounds timed calls each (after
 * one untimed). */
void trial_init(trial *t, size_t key, uint64_t lower, const weft_algo *cand,
                const double *pred, int n, int rounds);
/* The algorithm whose turn it is. */
weft_algo trial_turn(const trial *t);
/* The turn's call took secs for bytes; returns 1 when that was the last
 * trial call, and the ranks must now agree (trial_settle). */
int trial_record(trial *t, uint64_t bytes, double secs);
/* agreed[i]: the largest over the ranks of candidate i's best; returns the
 * candidate with the smallest, unless it beats the model's pick (cand[0])
 * by less than TRIAL_MARGIN; ties to the one predicted faster. */
weft_algo trial_settle(trial *t, const double *agreed);

#endif
