/* Running a call on a schedule (coll/sched/): the parameters a call
 * gives its generator, and the run itself, for the engine (coll.c) and for
 * the algorithms that fall back to a schedule (coll/local/). */
#ifndef WEFT_COLL_COLL_SCHED_H
#define WEFT_COLL_COLL_SCHED_H

#include "coll/comm_core.h"

/* The schedule parameters and buffers (SB_TMP NULL) of call a. */
void coll_sched_args(const weft_comm *c, const weft_coll_args *a, sched_params *p,
                     char *bufs[SB_COUNT]);
/* Run call a with algorithm algo's schedule, built into s with scratch
 * *tmp (capacity *cap), its messages carrying fp: for algorithms that
 * fall back to a schedule. Errors recorded on c. */
int coll_run_sched(weft_comm *c, const weft_coll_args *a, weft_algo algo, weft_sched *s,
                   void **tmp, size_t *cap, const frame_hdr *fp);
/* Grow *buf (capacity *cap) to at least bytes; WEFT_ENOMEM recorded on c. */
int coll_scratch(weft_comm *c, void **buf, size_t *cap, uint64_t bytes);

#endif
