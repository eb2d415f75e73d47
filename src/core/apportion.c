/* Largest-remainder apportionment (apportion.h): the rule the
 * orchestrator's re-plans and the training's membership changes both
 * follow, so that whichever sees a change first gives the same shares. */
#include "core/apportion.h"

#include <math.h>

void apportion(long total, const double *w, int n, long *out)
{
    double sum = 0, frac[APPORTION_MAX];
    long got = 0;
    n = n < APPORTION_MAX ? n : APPORTION_MAX;
    for (int k = 0; k < n; k++)
        sum += w[k] > 0 ? w[k] : 0;
    for (int k = 0; k < n; k++) {
        double x = w[k] > 0 ? (double)total * w[k] / sum : 0;
        out[k] = (long)floor(x);
        frac[k] = w[k] > 0 ? x - out[k] : -2;
        got += out[k];
    }
    while (got < total && n > 0) {
        int m = 0;
        for (int k = 1; k < n; k++)
            m = frac[k] > frac[m] ? k : m;
        out[m]++;
        frac[m] = -1;
        got++;
    }
}
