/* Clusters of unequal size and speed in one job (run_shares.c): uneven
 * batch shares (--batch-shares), an emulated compute speed (--speed), and
 * DiLoCo's and streaming's period per cluster scaled by its step's time
 * (samples / speed) with the outer gradient weighed by the samples each
 * rank saw. */
#ifndef WEFT_RUN_RUN_SHARES_H
#define WEFT_RUN_RUN_SHARES_H

#include "run/run_int.h"

enum { SHARES_MAX = 64 }; /* clusters */

/* Before the mode's open (collective over s->comm when the mode takes
 * outer steps): this rank's part of every batch from --batch-shares (the
 * run's loader made again over it), its period and step count scaled by
 * its step's time against the other clusters', and its pseudo-gradient's
 * weight in s->cfg. */
int shares_open(train_sync *s);
/* After forward and backward: sleeps so that the compute of the step runs
 * at --speed of this machine's (emulation; nothing when speed is 1). */
void shares_pace(train_sync *s);
/* After a step, --progress: the first rank of each cluster keeps PATH.K
 * (K its cluster) as one line, "step S of N loss L elapsed E", replaced at
 * most twice a second and after the last step, for weft-cpn status. */
void shares_progress(train_sync *s, const train_step *st);
/* The outer step's weight of this rank's pseudo-gradient: its samples n
 * over the mean of every rank's (hier: its cluster's over the mean
 * cluster's), collective over s->comm; into s->cfg, and into the churn
 * mode's outer step where it is open. */
int shares_weigh(train_sync *s, int n);
/* "6,3" (0 allowed: a cluster out of the job): their count, -1 when bad. */
int shares_parse(const char *v, long *out);
/* The loader again over this rank's part of share[0..k) among c's ranks
 * (by cluster), at the same stream position; *n: the part's samples. */
int shares_loader_over(train_sync *s, weft_comm *c, const long *share, int k, int *n);

#endif
