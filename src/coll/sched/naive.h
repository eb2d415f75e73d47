/* The naive generator (naive.c): every rank sends its whole contribution
 * straight to every rank that needs it. Same contract as every generator
 * (coll/sched/sched.h). */
#ifndef WEFT_COLL_SCHED_NAIVE_H
#define WEFT_COLL_SCHED_NAIVE_H

#include "coll/sched/plan.h"

int sched_naive(weft_sched *s, const sched_params *p);

#endif
