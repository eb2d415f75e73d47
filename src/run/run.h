/* The run's handle (run.c) and its step (run_loop.c): what they offer the
 * other files of the run. */
#ifndef WEFT_RUN_RUN_H
#define WEFT_RUN_RUN_H

#include "run/run_int.h"

/* The failure of step on the run's group, as the old tool said it. */
int run_step_failed(weft_run *t, long step, int rc);
/* One data-parallel or pipeline step (run_loop.c). */
int run_train_step(weft_run *t);

#endif
