/* The schedules of one simulated collective, compacted to what timing
 * needs (kind, peer, length), for every rank or, when the schedule and the
 * topology are symmetric under a shift of the ranks, for one period. */
#ifndef WEFT_SIM_PROG_H
#define WEFT_SIM_PROG_H

#include "sim/sim.h"

typedef struct {
    uint64_t len;
    int32_t peer;   /* true rank (not folded) */
    uint8_t kind;
    uint8_t pad_[3];
} sim_op;

typedef struct {
    int p, nreps;          /* ranks, ranks simulated (p, or the period) */
    int period;            /* 0: no folding */
    int exact;             /* folding exact (identical lengths) */
    uint64_t max_dlen;     /* largest length difference under the shift */
    uint32_t max_rounds;
    sim_op *ops;
    uint64_t nops, capops;
    uint64_t *op0;         /* per rep: first op (nreps + 1 entries) */
    uint32_t *rend;        /* round ends, relative to the rep's op0 */
    uint64_t nrend, caprend;
    uint64_t *rd0;         /* per rep: first round end (nreps + 1 entries) */
} sim_prog;

/* Smallest shift P (a multiple of the topology's period) under which rank
 * r+P's schedule is rank r's with peers moved by P, lengths equal within
 * tol bytes; 0 when there is none. */
int sim_find_period(const sim_job *j, uint64_t count, uint64_t tol, int *exact,
                    uint64_t *max_dlen);
int sim_prog_build(sim_prog *g, const sim_job *j, uint64_t count, int period);
void sim_prog_free(sim_prog *g);
/* Ops of rank 0's schedule at count, and the most network ops in one of
 * its rounds (to size the work). */
int64_t sim_count_ops(const sim_job *j, uint64_t count, uint32_t *widest);

#endif
