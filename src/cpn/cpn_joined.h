/* The parts that joined a running plan (cpn_joined.c): weft-cpn run
 * writes them to RUNDIR/joined.json as each cluster joins, so that
 * weft-cpn status, which reads the plan file, shows them too. */
#ifndef WEFT_CPN_CPN_JOINED_H
#define WEFT_CPN_CPN_JOINED_H

#include "cpn/cpn_run_plan.h"

/* Every part of p after its launch's (p->nlaunch on), with its index (its
 * WEFT_CLUSTER), written whole. 0 or a WEFT_E* code. */
int cpn_joined_write(const char *dir, const cpn_plan *p);
/* Appends to p the parts dir's run took in (none: 0, p as it was); err
 * says what is wrong with the file. */
int cpn_joined_read(const char *dir, cpn_plan *p, char *err, size_t cap);

#endif
