/* The α-β-γ cost of a collective, read off its schedule: a rank's time is
 * the sum over its rounds of a latency, the bytes its busiest direction
 * moves and the bytes it reduces. Costing the schedules themselves (not
 * formulas beside them) keeps the model from drifting when a generator
 * changes. docs/TUNING.md has the model and how to measure the constants. */
#ifndef WEFT_COLL_COST_H
#define WEFT_COLL_COST_H

#include "coll/sched/sched.h"
#include "core/param.h"

#include <stdio.h>

typedef struct {
    double alpha;       /* s per round on a host with a core per rank */
    double alpha_over;  /* s per round when a host has more ranks than cores:
                           every round waits for a wake-up */
    double msg;         /* s per further message in the same round */
    double msg_over;    /* the same on an oversubscribed host, where a rank
                           may wake up once per message */
    double beta;        /* s per byte between ranks on one host */
    double gamma;       /* s per byte reduced */
    double alpha_inter; /* s per round that crosses hosts */
    double beta_inter;  /* s per byte leaving a host (its uplink is shared) */
    double alpha_wan;   /* s per round that crosses clusters (negative: not
                           set, the tuner takes the emulation's or a
                           default, coll_tuner_set_clusters) */
    double beta_wan;    /* s per byte sent to another cluster */
    int cores;          /* per host; 0: do not model oversubscription */
    int shm;            /* ranks on one host share memory (WEFT_SHM); 0: they
                           talk TCP over loopback, and the one-host
                           algorithms are off */
} cost_params;

/* This kind of host: 2 cores, same-host ranks talking through shared
 * memory (shm) or TCP over loopback (docs/TUNING.md). cost_default: shm. */
void cost_default_for(cost_params *c, int shm);
void cost_default(cost_params *c);
/* "alpha=30e-6,beta=5e-10 gamma=1e-10": keys of cost_params separated by
 * commas, blanks or newlines, '#' to the end of a line is a comment. Keys
 * parsed before an error stay set. WEFT_ECONFIG for an unknown key or a
 * bad or negative number; *where (if not NULL) then points at it. */
int cost_parse(cost_params *c, const char *s, const char **where);
/* Defaults for WEFT_SHM; cores from sysconf; then the file WEFT_TUNE_FILE,
 * then WEFT_TUNE, as a parameter set holds them (read once, by the handle
 * that owns p). Every rank must see the same values (or the ranks of a job
 * may choose different algorithms and fail with WEFT_EMISMATCH). err (if
 * not NULL, cap bytes) gets a message on failure. nranks as below. */
int cost_from_params(cost_params *c, const param_set *p, int nranks, char *err, size_t cap);
/* The same, the three variables read from the environment now. */
int cost_from_env(cost_params *c, char *err, size_t cap);
/* The same for a job of nranks ranks (> 0): cores is then only looked up
 * when it can matter (nranks > 2), since that costs a file read. */
int cost_from_env_for(cost_params *c, int nranks, char *err, size_t cap);
/* One line that cost_parse reads back. */
int cost_format(const cost_params *c, char *buf, size_t cap);

/* Where the ranks are: host index of every rank (NULL: all on one host). */
typedef struct {
    int nranks;
    const int32_t *host;
    int nhosts;
    const int32_t *cluster; /* cluster of every rank; NULL: one cluster */
} cost_layout;

/* One rank's schedule, walked. */
typedef struct {
    uint32_t rounds;   /* rounds with network ops */
    uint32_t msgs;     /* sends and receives */
    uint64_t sent, recvd, reduced, sent_inter;
    double wire_inter; /* seconds its sends to other hosts hold the uplink */
    double time;       /* its own path: Σ rounds α + bytes·β + reduced·γ,
                          a stream's latency overlapping its transfer */
    double work;       /* the part of time that occupies a core */
} cost_tally;

/* over: rank's host has more ranks than cores. */
void cost_walk(const weft_sched *s, const cost_params *c, const cost_layout *l,
               int rank, int over, cost_tally *t);

/* Predicted seconds for algorithm a on the bytes-per-rank message (count
 * as the API takes it, times esize): every rank's schedule run against
 * the others' (a round starts when the rank's previous one ended; sends
 * leave one after another and arrive α later, or between hosts, when
 * they continue a stream, at the later of their transfer's end and α
 * after its start, and a message's bytes beyond a cache's worth cost
 * more (cost.c); a round ends when its last
 * send has left, its last receive has arrived and its reductions are
 * done); the slowest rank's end, or the busiest host's cores or uplink
 * when those bind, plus a thousandth of the slowest rank's end, so that of
 * two algorithms a bound makes equal the one with the shorter path wins.
 * Above max_ranks ranks, or when all the schedules together would hold
 * more than 2M ops, only ranks 0, 1, p/2 and p-1 are walked, each on its
 * own, with at least one element per rank (a walk cannot see a rank wait
 * on a chain it holds nothing of). WEFT_ENOTSUP when a has no schedule for kind. */
int cost_predict(const cost_params *c, const cost_layout *l, weft_algo a,
                 weft_coll_kind kind, uint64_t bytes, uint32_t esize, int max_ranks,
                 double *seconds);

/* A lower bound on cost_predict's answer for the same arguments, from
 * rank 0's schedule alone (one schedule, not every rank's): what the
 * tuner uses to skip costing an algorithm that cannot come near the best.
 * WEFT_ENOTSUP for ranks on several hosts or clusters, or when a has no
 * schedule for kind. */
int cost_floor(const cost_params *c, const cost_layout *l, weft_algo a, weft_coll_kind kind,
               uint64_t bytes, uint32_t esize, int max_ranks, double *seconds);

/* The closed forms of docs/ALGORITHMS.md for one host of nranks ranks (no
 * schedule is built: about a hundred nanoseconds), with the same constants
 * and the same oversubscription bound. For callers that cannot keep a
 * selector; the schedule walk is the reference. Negative when a has no
 * closed form for kind: no schedule for it, or hier, which needs hosts, or
 * an algorithm that runs without a schedule. */
double cost_closed(const cost_params *c, weft_algo a, weft_coll_kind kind, uint64_t bytes,
                   int nranks);

#endif
