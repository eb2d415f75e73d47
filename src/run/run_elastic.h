/* --elastic (run_elastic.c): data-parallel training that outlives a dead
 * rank and takes in new ones; with --pp/--tp a replica lost is dropped.
 *
 * The step loop asks elastic_boundary before each step and
 * elastic_recover after a failed one; both answer with an elastic_outcome
 * (run_int.h) or a negative WEFT_E* code (the run cannot go on; run_fail has recorded
 * why). */
#ifndef WEFT_RUN_RUN_ELASTIC_H
#define WEFT_RUN_RUN_ELASTIC_H

#include "run/run_int.h"

/* Refuses what a membership change cannot carry (the sync mode's own
 * refusals included); nothing without --elastic. */
int elastic_check(weft_run *t, const opts *o, weft_comm *comm);
/* After the run's set-up: a joiner takes the members' state here (*step:
 * where it goes on from); quiet: as configured. */
int elastic_open(weft_run *t, long *step, int quiet, int joined);
/* Before each step: admits waiting joiners. ELASTIC_NONE, ELASTIC_RELOAD,
 * ELASTIC_AGAIN (a failure there, recovered from: the step starts again
 * from *step), ELASTIC_REJOIN, or < 0. */
int elastic_boundary(weft_run *t, long *step);
/* After a failed step (rc its code): ELASTIC_NONE (not elastic),
 * ELASTIC_AGAIN (the survivors go on from *step), ELASTIC_LEFT,
 * ELASTIC_REJOIN, or < 0. */
int elastic_recover(weft_run *t, long *step, int rc);
/* After a step that went through: ZeRO 1-3 copy their shards (a failure
 * there is the step's: elastic_recover next), and the traced step is
 * written. */
int elastic_step_done(weft_run *t, long step);
void elastic_close(weft_run *t);

#endif
