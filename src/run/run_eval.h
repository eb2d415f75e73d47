/* The run's evaluation (run_eval.c): test accuracy for images; validation
 * loss, exact-match answers and a sample for text. */
#ifndef WEFT_RUN_RUN_EVAL_H
#define WEFT_RUN_RUN_EVAL_H

#include "run/run_int.h"

/* Lines through the run's log, a row in csv; l: how far the loader went. */
int evaluate(weft_run *t, weft_model *m, const data_sets *d, const opts *o, FILE *csv,
             long step, const weft_loader *l);

#endif
