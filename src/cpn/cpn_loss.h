/* weft-cpn run's watch on a loss's answer (cpn_loss.c): when the
 * survivors go on without a lost part, from the run's metrics. */
#ifndef WEFT_CPN_CPN_LOSS_H
#define WEFT_CPN_CPN_LOSS_H

#include "cpn/cpn_launch.h"

/* From a loss until the re-plan runs: the survivors drop the lost part
 * at their next outer step, and the job's rank 0 then writes a "shrink"
 * row to the metrics (step N, the first step over the survivors; the
 * row is flushed as written). The new plan runs from the first shrink
 * row after the loss; the loss is the kill of --kill-at or of a silent
 * part, else the moment the part's launcher reported it ended, which can
 * come after the survivors saw it (Slurm's squeue lags). Where the lost part held
 * rank 0, or the training is not elastic, no row comes and nothing is
 * said. */
typedef struct {
    double at;       /* the loss; < 0: none waiting */
    long off;        /* the metrics' bytes read so far */
    long rows;       /* shrink rows seen so far */
    long used;       /* of them, answers to earlier losses */
    double row_at;   /* when the last new one was seen */
    long row_step;   /* and its step */
    char who[64];
} loss_watch;

/* Part lost was lost at time at (now_s's clock). */
void loss_seen(loss_watch *w, const cpn_launched *ls, int lost, double at);
/* Every look: new shrink rows, and the pending loss's answer (said). */
void loss_check(loss_watch *w, const char *dir);
/* Seconds on a monotonic clock. */
double now_s(void);

#endif
