/* --elastic across clusters (run_elastic_churn.c): the churn mode's side
 * of a membership change, called by run_elastic.c. Each returns 0 or a
 * negative code, and churn_recover an elastic_outcome (run_int.h). */
#ifndef WEFT_RUN_RUN_ELASTIC_CHURN_H
#define WEFT_RUN_RUN_ELASTIC_CHURN_H

#include "run/run_int.h"

/* ELASTIC_AGAIN (the survivors go on from *step), ELASTIC_REJOIN, or < 0. */
int churn_recover(weft_run *t, long *step, int rc);
int churn_grow_hand_over(weft_run *t, weft_comm *g, long *step);
int churn_join(weft_run *t, long *step);

#endif
