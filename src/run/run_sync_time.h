/* Where rank 0's wall time of training went (run_sync_time.c). */
#ifndef WEFT_RUN_RUN_SYNC_TIME_H
#define WEFT_RUN_RUN_SYNC_TIME_H

#include "run/run_int.h"

/* The outer steps' times as the loop ends (before the drain and last sync). */
void sync_time_mark(train_sync *s);
/* Phase by phase, and the two utilisations: forward + backward over the
 * wall time, and the share not blocked on communication across the WAN
 * (lines to t's log). */
void sync_time_report(const weft_run *t, double train_s);

#endif
