/* The run's model and optimiser as the run options describe them
 * (run_model.c). */
#ifndef WEFT_RUN_RUN_MODEL_H
#define WEFT_RUN_RUN_MODEL_H

#include "run/run_int.h"

int model_new(weft_run *t, const run_opts *r, const data_sets *d, weft_model **out);
int model_config(weft_run *t, const run_opts *r, const data_sets *d, weft_model_config *cfg);
/* Fails naming both shapes when cfg (from source) cannot read d's samples. */
int model_check_fit(weft_run *t, const weft_model_config *cfg, const data_sets *d,
                    const char *source);
/* Precision, threads and recomputation: the launch's, not the checkpoint's. */
int model_tune(weft_run *t, weft_model *m, const opts *o);
void model_optim_config(const run_opts *r, weft_optim_config *oc);
weft_lr_schedule model_lr_schedule(const run_opts *r, long steps);

#endif
