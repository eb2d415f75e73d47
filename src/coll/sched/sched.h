/* An algorithm is a schedule: per rank, a list of rounds, each a list of
 * sends, receives and reductions over byte ranges of three buffers
 * (coll/sched/plan.h). The library executes schedules over transports
 * (coll/exec/exec.c); the simulator executes the very same schedules over
 * a topology model (sim/). Generators know nothing of sockets, and nothing
 * else knows how an algorithm works. This header builds one by the table
 * of algorithms, and brings the generators every caller may name. */
#ifndef WEFT_COLL_SCHED_H
#define WEFT_COLL_SCHED_H

#include "coll/sched/naive.h"
#include "coll/sched/plan.h"
#include "coll/sched/ring.h"
#include "weft.h"

/* Build rank p->rank's schedule of collective p->kind with algorithm a,
 * with the generator the table of algorithms (coll/algo_table.h) names.
 * WEFT_ENOTSUP when a has no schedule for that kind. The result is closed
 * (its last round ended). */
int sched_build(weft_sched *s, weft_algo a, const sched_params *p);
/* Whether a has a schedule for kind (those that do not run without one,
 * or not at all). */
int sched_has(weft_algo a, weft_coll_kind kind);

#endif
