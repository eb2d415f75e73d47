/* weft-cpn status (cpn_status.c): each part of a run against its plan,
 * from the files weft-cpn run and the parts' first ranks keep in the run's
 * folder: part-NAME.state (the launcher's view) and progress.K (step,
 * loss, seconds; weft-train --progress). */
#ifndef WEFT_CPN_CPN_STATUS_H
#define WEFT_CPN_CPN_STATUS_H

#include "cpn/cpn_run_plan.h"

#include <stdio.h>

typedef struct {
    long step, steps;   /* 0: no progress yet */
    double loss, elapsed;
    long outer;         /* outer steps this part has taken; -1: not said */
    double wait;        /* seconds its first rank was blocked on them */
} cpn_progress;

/* Part k's last progress line; 0 when there is one. */
int status_progress(const char *dir, int k, cpn_progress *pr);
/* One line per part: cluster, launcher, ranks, share, speed, state, step,
 * loss, seconds and the plan's seconds for as many steps. */
void status_print(FILE *f, const cpn_plan *p, const char *dir);

#endif
