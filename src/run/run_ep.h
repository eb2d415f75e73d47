/* --ep E: the experts over expert groups (run_ep.c). */
#ifndef WEFT_RUN_RUN_EP_H
#define WEFT_RUN_RUN_EP_H

#include "run/run_int.h"

/* With --ep E > 1: checks it against the run, splits the data-parallel
 * group into expert groups of E consecutive ranks and hands t's model its
 * group. Also (tests) WEFT_TEST_MOE_SKEW and WEFT_TEST_MOE_SKEW_RANK,
 * with or without --ep. 0 when there is nothing to do. */
int run_ep_open(weft_run *t);

/* run_ep_save.c: with the experts divided, job rank 0's whole model and
 * optimiser for a save (*whole, *whole_opt; NULL elsewhere). Collective
 * over the job; 1 when the experts are divided (the gather done), 0
 * without a division, or an error. */
int run_ep_gather(weft_run *t, weft_optim **whole_opt, weft_model **whole);

/* An evaluation begins (on) or ends under expert parallelism: its
 * forwards keep every row. 1 when the experts are spread (every rank of
 * the group must then run every forward, generating too), else 0. */
int run_ep_eval(weft_run *t, int on);

/* The experts' all-to-all counters for the progress line: 0 and nothing
 * written without expert parallelism. */
int run_ep_line(const weft_run *t, long steps, char *buf, size_t len);

#endif
