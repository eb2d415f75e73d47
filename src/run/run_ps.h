/* --mode ps (run_ps.c): the run as a parameter server's worker or server. */
#ifndef WEFT_RUN_RUN_PS_H
#define WEFT_RUN_RUN_PS_H

#include "run/run_int.h"

/* Sets the parameter server up over the job (weft_run_open). */
int ps_open(weft_run *t, long steps);
/* A worker: one step; a server: serves until the workers are done, then
 * WEFT_RUN_DONE. */
int ps_step(weft_run *t);
/* A worker's end: the shutdown, the summary and the evaluation. */
int ps_finish(weft_run *t);
void ps_close(weft_run *t);

#endif
