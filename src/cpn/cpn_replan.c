/* A lost part's share goes to the survivors in proportion to their rate
 * (ranks x speed: the planner's rule, peaks being per cluster and the
 * plan keeping none), largest remainders first, every survivor at least
 * one sample per rank, so the job keeps its global batch. The result is
 * written whole (a temporary file renamed) so status never reads half. */
#include "cpn/cpn_replan.h"

#include "core/clock.h"
#include "weft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void shares(const cpn_plan *p, const int *alive, int *batch)
{
    double sum = 0, frac[64];
    int given = 0, n = p->nparts < 64 ? p->nparts : 64;
    for (int k = 0; k < n; k++)
        sum += alive[k] ? p->parts[k].ranks * p->parts[k].speed : 0;
    for (int k = 0; k < n; k++) {
        double x = alive[k] && sum > 0 ? p->global_batch * p->parts[k].ranks *
                                             p->parts[k].speed / sum : 0;
        batch[k] = (int)floor(x);
        frac[k] = alive[k] ? x - batch[k] : -2;
        given += batch[k];
    }
    while (given < p->global_batch) {
        int m = 0;
        for (int k = 1; k < n; k++)
            m = frac[k] > frac[m] ? k : m;
        batch[m]++;
        frac[m] = -1;
        given++;
    }
}

int cpn_replan(const char *dir, const cpn_plan *p, const int *alive, const char *why,
               long step, double *secs)
{
    double t0 = clock_now();
    int batch[64] = { 0 }, any = 0;
    for (int k = 0; k < p->nparts && k < 64; k++)
        any += alive[k];
    if (!any)
        return WEFT_EINVAL;
    shares(p, alive, batch);
    char path[1200], tmp[1220];
    snprintf(path, sizeof path, "%s/replan.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return WEFT_ESYS;
    *secs = clock_now() - t0;
    fprintf(f, "{\"schema\": \"weft-cpn-replan/1\", \"why\": \"%s\", \"at_step\": %ld, "
               "\"seconds\": %.6f, \"sync\": \"%s\", \"parts\": [", why, step, *secs, p->sync);
    for (int k = 0, first = 1; k < p->nparts && k < 64; k++)
        if (alive[k]) {
            fprintf(f, "%s{\"cluster\": \"%s\", \"ranks\": %d, \"batch\": %d, \"speed\": %g}",
                    first ? "" : ", ", p->parts[k].cluster, p->parts[k].ranks, batch[k],
                    p->parts[k].speed);
            first = 0;
        }
    fprintf(f, "]}\n");
    if (fclose(f) || rename(tmp, path))
        return WEFT_ESYS;
    return 0;
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
