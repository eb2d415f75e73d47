/* --ep E: the experts over expert groups (run_ep.c). */
#ifndef WEFT_RUN_RUN_EP_H
#define WEFT_RUN_RUN_EP_H

#include "run/run_int.h"

/* With --ep E > 1: checks it against the run, splits the data-parallel
 * group into expert groups of E consecutive ranks and hands t's model its
 * group. Also (tests) WEFT_TEST_MOE_SKEW and WEFT_TEST_MOE_SKEW_RANK,
 * with or without --ep. 0 when there is nothing to do. */
int run_ep_open(weft_run *t);

/* The experts' all-to-all counters for the progress line: 0 and nothing
 * written without expert parallelism. */
int run_ep_line(const weft_run *t, long steps, char *buf, size_t len);

#endif
