/* --elastic with --sync diloco:H (flat; run_elastic_late.c): joiners grown
 * in at an outer boundary take the state in the background, meanwhile
 * take every outer step at weight 0, replay those once the state is in,
 * and are admitted at the next outer step after they all caught up. */
#ifndef WEFT_RUN_RUN_ELASTIC_LATE_H
#define WEFT_RUN_RUN_ELASTIC_LATE_H

#include "run/run_int.h"

/* Whether this run's joiners come in so (else the grow's hand-over). */
int late_wanted(const weft_run *t);
/* Members at the boundary of outer step k, the job grown into g: the
 * training state over g, rank 0's sends of the state posted, this rank's
 * stream as it was until outer step k+1. */
int late_grow(weft_run *t, weft_comm *g, long *step);
/* Members after each outer step while joiners catch up (t->el.late_was
 * set): whether they all have (*in 1: admitted, with the lead's report);
 * otherwise the members go on as they were. */
int late_admit(weft_run *t, long *step, int *in);
/* A joiner: the state of step k, outer steps at weight 0 until it is in
 * and replayed, the admission; *step: where it goes on from (the run's end
 * where that came first, the state replayed all the same). */
int late_join(weft_run *t, long *step);
/* Ends what a grow left in flight (after a failure, or at the end). */
void late_drop(weft_run *t);

#endif
