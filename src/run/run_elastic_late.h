/* --elastic with --sync diloco:H (flat; run_elastic_late.c): joiners grown
 * in at an outer boundary take the state in the background and are
 * admitted at the next outer step, which they take at weight 0. */
#ifndef WEFT_RUN_RUN_ELASTIC_LATE_H
#define WEFT_RUN_RUN_ELASTIC_LATE_H

#include "run/run_int.h"

/* Whether this run's joiners come in so (else the grow's hand-over). */
int late_wanted(const weft_run *t);
/* Members at the boundary of outer step k, the job grown into g: the
 * training state over g, rank 0's sends of the state posted, this rank's
 * stream as it was until outer step k+1. */
int late_grow(weft_run *t, weft_comm *g, long *step);
/* Members at the boundary of outer step k+1 (t->el.late_was set): the
 * joiners' admission and the lead's report. */
int late_admit(weft_run *t, long *step);
/* A joiner: the state of step k, outer step k+1 at weight 0, the
 * admission; *step: where it goes on from. */
int late_join(weft_run *t, long *step);
/* Ends what a grow left in flight (after a failure, or at the end). */
void late_drop(weft_run *t);

#endif
