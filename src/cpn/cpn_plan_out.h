/* A plan as weft-cpn-plan/1 JSON (docs/CPN.md): the chosen parts, each
 * with its layout from the single-cluster planner, the sync, the
 * predictions and the rejected alternatives. */
#ifndef WEFT_CPN_PLAN_OUT_H
#define WEFT_CPN_PLAN_OUT_H

#include "cpn/cpn_job.h"
#include "cpn/cpn_json_out.h"

int cpn_plan_write(const cpn_cluster *cs, const cpn_job *job, const cpn_plan_result *r,
                   cpn_jo *w);

#endif
