/* A re-plan's shares and its two files. The shares follow the weights
 * the caller gives: for a lost part, the survivors' shares as they stood
 * (the planner made them in proportion to each cluster's measured rate,
 * so they keep that proportion); for a join, the planner's new shares.
 * Both files are written whole (a temporary file renamed) so that status
 * and the training never read half of one. */
#include "cpn/cpn_replan.h"

#include "core/apportion.h"
#include "core/clock.h"
#include "weft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpn_replan_shares(const cpn_plan *p, const double *weight, int *batch)
{
    double sum = 0;
    int need = 0, n = p->nparts < CPN_REPLAN_MAX ? p->nparts : CPN_REPLAN_MAX;
    for (int k = 0; k < n; k++) {
        sum += weight[k] > 0 ? weight[k] : 0;
        need += weight[k] > 0 ? p->parts[k].ranks : 0;
    }
    if (!(sum > 0) || need > p->global_batch)
        return WEFT_EINVAL;
    long got[CPN_REPLAN_MAX];
    apportion(p->global_batch, weight, n, got);
    for (int k = 0; k < n; k++)
        batch[k] = (int)got[k];
    /* a rank without a sample cannot step: from the largest share */
    for (int k = 0; k < n; k++)
        while (weight[k] > 0 && batch[k] < p->parts[k].ranks) {
            int m = 0;
            for (int j = 1; j < n; j++)
                m = batch[j] - p->parts[j].ranks > batch[m] - p->parts[m].ranks ? j : m;
            batch[m]--;
            batch[k]++;
        }
    return 0;
}

/* path from tmp once tmp is closed whole. */
static int finish(FILE *f, const char *tmp, const char *path)
{
    return fclose(f) || rename(tmp, path) ? WEFT_ESYS : 0;
}

/* RUNDIR/progress.shares: "GEN S0,S1,..." by part (WEFT_CLUSTER), 0 for
 * a part out of the job, and " period=H" once a drift re-planned it (every
 * re-plan after says it again: the line is the run's plan as it stands). */
static int write_shares(const char *dir, const cpn_plan *p, const int *batch, int period,
                        int gen)
{
    char path[1200], tmp[1220];
    snprintf(path, sizeof path, "%s/progress.shares", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return WEFT_ESYS;
    fprintf(f, "%d ", gen);
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX; k++)
        fprintf(f, "%s%d", k ? "," : "", batch[k]);
    if (period > 0)
        fprintf(f, " period=%d", period);
    fputc('\n', f);
    return finish(f, tmp, path);
}

int cpn_replan_write(const char *dir, const cpn_plan *p, const int *batch, int period,
                     const char *why, long step, int gen, const char *extra, double t0,
                     double *secs)
{
    char path[1200], tmp[1220];
    int rc = write_shares(dir, p, batch, period, gen);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/replan.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return WEFT_ESYS;
    *secs = clock_now() - t0;
    fprintf(f, "{\"schema\": \"weft-cpn-replan/1\", \"why\": \"%s\", \"at_step\": %ld, "
               "\"gen\": %d, \"seconds\": %.6f, \"sync\": \"%s\"%s, \"parts\": [", why, step,
            gen, *secs, p->sync, extra ? extra : "");
    for (int k = 0, first = 1; k < p->nparts && k < CPN_REPLAN_MAX; k++)
        if (batch[k] > 0) {
            fprintf(f, "%s{\"cluster\": \"%s\", \"ranks\": %d, \"batch\": %d, \"speed\": %g}",
                    first ? "" : ", ", p->parts[k].cluster, p->parts[k].ranks, batch[k],
                    p->parts[k].speed);
            first = 0;
        }
    fprintf(f, "]}\n");
    return finish(f, tmp, path);
}

int cpn_replan_line(const char *dir, char *out, size_t cap)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/replan.json", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = 0;
    out[strcspn(out, "\n")] = 0;
    return n ? 0 : -1;
}
