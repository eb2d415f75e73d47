/* Re-planning a running job when a part is lost (docs/CPN.md, "A lost
 * cluster"): the survivors' shares of the global batch in proportion to
 * their ranks times speed, written to RUNDIR/replan.json for weft-cpn
 * status. */
#ifndef WEFT_CPN_CPN_REPLAN_H
#define WEFT_CPN_CPN_REPLAN_H

#include "cpn/cpn_run_plan.h"

/* alive[k]: part k still runs or ended well; why: what changed (one
 * line). *secs: how long the re-plan took. 0 or a WEFT_E* code
 * (WEFT_EINVAL when no part survives). */
int cpn_replan(const char *dir, const cpn_plan *p, const int *alive, const char *why,
               long step, double *secs);
/* The last re-plan of a run, as a line for status; 0 when there is one. */
int cpn_replan_line(const char *dir, char *out, size_t cap);

#endif
