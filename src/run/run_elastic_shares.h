/* --elastic with --batch-shares or --progress (run_elastic_shares.c):
 * each cluster's share of the batch after a membership change, and the
 * outer period a re-plan gives the running job. */
#ifndef WEFT_RUN_RUN_ELASTIC_SHARES_H
#define WEFT_RUN_RUN_ELASTIC_SHARES_H

#include "run/run_int.h"

/* After a membership change, collective over t->comm (every rank of the
 * new job): the clusters' shares from the orchestrator's re-plan (the
 * file PATH.shares beside --progress PATH) where it fits the clusters
 * present, else the launch's --batch-shares over the clusters present,
 * in proportion; else the ranks share the batch evenly, as the change
 * left them. Rank 0 reads and says, every rank remakes its loader. */
int shares_change(weft_run *t, long step);
/* The outer period of the orchestrator's last re-plan (PATH.shares'
 * "period=H", a drift's), *gen its number; 0 when it names none. Read by
 * rank 0 alone: the churn mode agrees on it at an outer step. */
long shares_replan_period(const opts *o, long *gen);

#endif
