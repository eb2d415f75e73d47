/* The run's data (run_data.c): the datasets --data names and the loader
 * that gives each rank its part of every global batch. */
#ifndef WEFT_RUN_RUN_DATA_H
#define WEFT_RUN_RUN_DATA_H

#include "run/run_int.h"

int data_open(weft_run *t, const run_opts *r, data_sets *d);
void data_free(data_sets *d);
/* This rank's part of every global batch; who names the ranks in errors. */
int data_loader(weft_run *t, const run_opts *r, const data_sets *d, int rank, int world,
                int accum, const char *who, weft_loader **out);

#endif
