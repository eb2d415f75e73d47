/* Re-planning a running job (docs/CPN.md, "Re-planning"): a part lost or
 * silent, a cluster that joins, a link slower than the plan priced. Each
 * re-plan is written to RUNDIR/replan.json for weft-cpn status and its
 * shares to RUNDIR/progress.shares, which the training reads at its next
 * membership change (run_elastic_shares.c), with a re-planned outer period,
 * which the training takes at its next outer step (run_sync_churn.c). */
#ifndef WEFT_CPN_CPN_REPLAN_H
#define WEFT_CPN_CPN_REPLAN_H

#include "cpn/cpn_run_plan.h"

#define CPN_REPLAN_MAX 64

/* The global batch over the parts with weight[k] > 0, in proportion to
 * the weights, largest remainders first, every such part at least one
 * sample a rank; batch[k] = 0 for the others. WEFT_EINVAL when none has a
 * weight or the batch is too small for their ranks. */
int cpn_replan_shares(const cpn_plan *p, const double *weight, int *batch);
/* Writes the re-plan: why (one line), the job's step, gen (1, 2, ... a
 * run), the parts with batch[k] > 0 and their shares, period (0: the
 * plan's; else the outer period a drift's re-plan gave, which the shares'
 * line carries to the training as "period=H"), extra (NULL, or more JSON
 * members, ", \"H\": 50"). *secs: from t0 (clock_now) until written. 0 or
 * a WEFT_E* code. */
int cpn_replan_write(const char *dir, const cpn_plan *p, const int *batch, int period,
                     const char *why, long step, int gen, const char *extra, double t0,
                     double *secs);
/* The last re-plan of a run, as a line for status; 0 when there is one. */
int cpn_replan_line(const char *dir, char *out, size_t cap);

#endif
