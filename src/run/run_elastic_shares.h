/* --elastic with --batch-shares or --progress (run_elastic_shares.c):
 * each cluster's share of the batch after a membership change, and the
 * outer period and shares a re-plan gives the running job at an outer
 * step. */
#ifndef WEFT_RUN_RUN_ELASTIC_SHARES_H
#define WEFT_RUN_RUN_ELASTIC_SHARES_H

#include "run/run_churn.h"
#include "run/run_shares.h"

/* After a membership change, collective over t->comm (every rank of the
 * new job): the clusters' shares from the orchestrator's re-plan (the
 * file PATH.shares beside --progress PATH) where it fits the clusters
 * present, else the launch's --batch-shares over the clusters present,
 * in proportion; else the ranks share the batch evenly, as the change
 * left them. Rank 0 reads and says, every rank remakes its loader. */
int shares_change(weft_run *t, long step);
/* The churn mode's record of its shares at the launch (--batch-shares). */
void shares_launch(struct sync_churn *ch, const opts *o);
/* After an outer step, rank 0 (--progress): the orchestrator's last
 * re-plan as h[SHARES_LOOK] = { its period (0: none), its number, whether
 * the job takes its shares here (0 no, 1 yes, 2 the shares it holds), the
 * shares by cluster }; they are taken where they are new, fit the
 * clusters present, and no joiner is catching up. The caller broadcasts
 * h; every rank then calls shares_take. */
enum { SHARES_LOOK = 3 + SHARES_MAX };
void shares_look(const train_sync *s, int64_t *h);
/* Every rank, with rank 0's h: the new shares from the next step on (the
 * loader, the outer step's sample weights); rank 0 says. */
int shares_take(train_sync *s, const int64_t *h);

#endif
