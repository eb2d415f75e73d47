/* Choosing a pipeline's stage partition. The exact one is two dynamic
 * programmes over contiguous cuts: the first finds the smallest possible
 * slowest-stage time M; the second, among partitions whose every stage
 * takes at most M and fits the cap, the smallest sum of squared stage
 * times (the most even one: the slowest stage alone does not say how the
 * rest are spread). Minimising (max, sum of squares) in one programme
 * would be wrong: the best prefix by that order is not always part of the
 * best whole. O(k n^2). */
#include "train/pipe_partition.h"
#include "train/pipe_sched.h"
#include "weft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int stash_of(const pipe_part_problem *pb, int j) { return pb->stash ? pb->stash[j] : 1; }

static double time_of(const pipe_part_problem *pb, int a, int b)
{
    double t = 0;
    for (int i = a; i < b; i++)
        t += pb->block[i].time;
    return t;
}

static double bytes_of(const pipe_part_problem *pb, int j, int a, int b)
{
    double s = 0, act = 0;
    for (int i = a; i < b; i++) {
        s += pb->block[i].state_bytes;
        act += pb->block[i].act_bytes;
    }
    return s + stash_of(pb, j) * act;
}

double pipe_stage_time(const pipe_part_problem *pb, const int *first, int j)
{
    return time_of(pb, first[j], first[j + 1]);
}

double pipe_stage_bytes(const pipe_part_problem *pb, const int *first, int j)
{
    return bytes_of(pb, j, first[j], first[j + 1]);
}

/* Tables indexed [stage][block boundary], (k+1) x (n+1). */
typedef struct {
    const pipe_part_problem *pb;
    int n, k;
    double *t;      /* t[a*(n+1)+b]: time of blocks a..b-1 */
    double *best;   /* phase 1 or 2 values */
    int *arg;
} dp;

#define AT(d, j, i) ((size_t)(j) * (size_t)((d)->n + 1) + (size_t)(i))

static int fits(const dp *d, int j, int a, int b)
{
    return d->pb->mem_cap <= 0 || bytes_of(d->pb, j, a, b) <= d->pb->mem_cap;
}

/* Why no partition fits: the first stage that no placement of the ones
 * before it lets fit, and the least it would need. */
static int explain(const dp *d, char *why, size_t len)
{
    int n = d->n, k = d->k;
    char *reach = calloc((size_t)(k + 1) * (size_t)(n + 1), 1);
    if (!reach)
        return WEFT_ENOMEM;
    reach[AT(d, 0, 0)] = 1;
    int j = 0;
    for (; j < k; j++) {
        int any = 0;
        for (int a = j; a <= n - (k - j); a++)
            for (int b = a + 1; reach[AT(d, j, a)] && b <= n - (k - 1 - j); b++)
                if ((j < k - 1 || b == n) && fits(d, j, a, b))
                    any = reach[AT(d, j + 1, b)] = 1;
        if (!any)
            break;
    }
    double least = INFINITY;
    int la = 0, lb = 0;
    for (int a = j; j < k && a <= n - (k - j); a++)
        if (reach[AT(d, j, a)])
            for (int b = j < k - 1 ? a + 1 : n; b <= n - (k - 1 - j); b++)
                if (bytes_of(d->pb, j, a, b) < least) {
                    least = bytes_of(d->pb, j, a, b);
                    la = a;
                    lb = b;
                }
    free(reach);
    if (j == k) /* cannot happen: the caller found no partition */
        return pipe_fail(why, len, "no partition fits the cap");
    return pipe_fail(why, len,
                "no partition of %d blocks into %d stages fits %.0f bytes a stage: stage %d "
                "needs at least %.0f bytes (blocks %d..%d, %d micro-batches stashed) even with "
                "the stages before it as short as they can be",
                n, k, d->pb->mem_cap, j, least, la, lb - 1, stash_of(d->pb, j));
}

/* One programme over suffixes, from the last stage back. limit ==
 * INFINITY: best = least slowest stage; otherwise best = least sum of
 * squares with no stage over limit, arg = where stage j then ends (the
 * smallest such cut on a tie, so the walk from the front is
 * deterministic). */
static void sweep(dp *d, double limit)
{
    int n = d->n, k = d->k;
    size_t cells = (size_t)(k + 1) * (size_t)(n + 1);
    for (size_t c = 0; c < cells; c++)
        d->best[c] = INFINITY;
    d->best[AT(d, k, n)] = 0;
    for (int j = k - 1; j >= 0; j--)
        for (int a = j; a <= n - (k - j); a++)
            for (int b = a + 1; b <= n - (k - 1 - j); b++) {
                double rest = d->best[AT(d, j + 1, b)];
                double t = d->t[(size_t)a * (size_t)(n + 1) + (size_t)b];
                if (rest == INFINITY || t > limit || !fits(d, j, a, b))
                    continue;
                double v = limit == INFINITY ? (t > rest ? t : rest) : rest + t * t;
                if (v < d->best[AT(d, j, a)]) {
                    d->best[AT(d, j, a)] = v;
                    d->arg[AT(d, j, a)] = b;
                }
            }
}

static int check_problem(const pipe_part_problem *pb, int *first, char *why, size_t len)
{
    if (!pb || !first || !pb->block || pb->n < 1 || pb->k < 1)
        return pipe_fail(why, len, "partition: no blocks or no stages");
    if (pb->k > pb->n)
        return pipe_fail(why, len, "%d blocks cannot fill %d stages", pb->n, pb->k);
    for (int j = 0; pb->stash && j < pb->k; j++)
        if (pb->stash[j] < 0)
            return pipe_fail(why, len, "stage %d: negative stash", j);
    return 0;
}

int pipe_partition_auto(const pipe_part_problem *pb, int *first, char *why, size_t len)
{
    int rc = check_problem(pb, first, why, len);
    if (rc)
        return rc;
    int n = pb->n, k = pb->k;
    size_t cells = (size_t)(k + 1) * (size_t)(n + 1);
    dp d = { .pb = pb, .n = n, .k = k };
    d.t = malloc((size_t)(n + 1) * (size_t)(n + 1) * sizeof *d.t);
    d.best = malloc(cells * sizeof *d.best);
    d.arg = malloc(cells * sizeof *d.arg);
    if (!d.t || !d.best || !d.arg) {
        rc = WEFT_ENOMEM;
        goto out;
    }
    for (int a = 0; a <= n; a++) {
        double t = 0;
        for (int b = a; b <= n; b++) {
            d.t[(size_t)a * (size_t)(n + 1) + (size_t)b] = t;
            if (b < n)
                t += pb->block[b].time;
        }
    }
    /* phase 1: best[j][a] = least slowest stage of stages j..k-1 on
     * blocks a..n-1 */
    sweep(&d, INFINITY);
    double M = d.best[AT(&d, 0, 0)];
    if (M == INFINITY) {
        rc = explain(&d, why, len);
        goto out;
    }
    /* phase 2: least sum of squares with every stage <= M */
    sweep(&d, M);
    first[0] = 0;
    for (int j = 0; j < k; j++)
        first[j + 1] = d.arg[AT(&d, j, first[j])];
out:
    free(d.t);
    free(d.best);
    free(d.arg);
    return rc;
}

int pipe_partition_uniform(int n, int k, int *first, char *why, size_t len)
{
    if (!first || k < 1 || n < k)
        return pipe_fail(why, len, "%d blocks cannot fill %d stages", n, k);
    first[0] = 0;
    for (int j = 0; j < k; j++)
        first[j + 1] = first[j] + n / k + (j >= k - n % k);
    return 0;
}

int pipe_partition_list(const char *s, int n, int k, int *first, char *why, size_t len)
{
    if (!s || !first || k < 1)
        return pipe_fail(why, len, "partition: no list");
    first[0] = 0;
    int j = 0;
    for (const char *p = s;; p++) {
        char *end;
        long c = strtol(p, &end, 10);
        if (end == p || c < 1 || c > n)
            return pipe_fail(why, len, "partition \"%s\": stage %d's count is not a number >= 1", s,
                        j);
        if (j == k)
            return pipe_fail(why, len, "partition \"%s\": more than %d stages", s, k);
        first[j + 1] = first[j] + (int)c;
        j++;
        p = end;
        if (!*p)
            break;
        if (*p != ',')
            return pipe_fail(why, len, "partition \"%s\": '%c' where a comma should be", s, *p);
    }
    if (j != k)
        return pipe_fail(why, len, "partition \"%s\": %d stages, the schedule has %d", s, j, k);
    if (first[k] != n)
        return pipe_fail(why, len, "partition \"%s\": %d blocks, the model has %d", s, first[k], n);
    return 0;
}

int pipe_partition_parse(const char *spec, const pipe_part_problem *pb, int *first, char *why,
                         size_t len)
{
    if (!spec || !pb)
        return pipe_fail(why, len, "partition: none given");
    if (!strcmp(spec, "auto"))
        return pipe_partition_auto(pb, first, why, len);
    if (!strcmp(spec, "uniform"))
        return pipe_partition_uniform(pb->n, pb->k, first, why, len);
    return pipe_partition_list(spec, pb->n, pb->k, first, why, len);
}
