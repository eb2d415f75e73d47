/* --elastic's test hooks (run_elastic_hooks.c): --kill-at, launch ranks
 * that die where a test wants them to, and --trace-samples, each rank's
 * committed sample ids. */
#ifndef WEFT_RUN_RUN_ELASTIC_HOOKS_H
#define WEFT_RUN_RUN_ELASTIC_HOOKS_H

#include "run/run_int.h"

/* --kill-at and --trace-samples: 1 taken, 0 not one of them, WEFT_EINVAL
 * with the message in err. */
int elastic_option(opts *o, const char *key, const char *v, char *err, size_t cap);
/* This launch rank dies here, as kill -9 would kill it, when --kill-at
 * names it at step (recover: in a recovery's round, its :recover). */
void kill_point(const weft_run *t, long step, int recover);
/* A step's samples as they are committed (--trace-samples). */
int elastic_trace(weft_run *t, long step, const weft_batch *b);
/* The traced step is written when next lies past it, else dropped. */
void elastic_commit(weft_run *t, long next);

#endif
