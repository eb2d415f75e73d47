/* The ring generator (ring.c), and the dissemination barrier several
 * algorithms share. Same contract as every generator (coll/sched/sched.h). */
#ifndef WEFT_COLL_SCHED_RING_H
#define WEFT_COLL_SCHED_RING_H

#include "coll/sched/plan.h"

int sched_ring(weft_sched *s, const sched_params *p);
/* ceil(log2 p) rounds of empty messages; used by several algorithms. */
void sched_barrier_dissemination(weft_sched *s, const sched_params *p);

#endif
