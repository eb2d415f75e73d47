/* Clusters of unequal size and speed in one job.
 *
 * --batch-shares S0,S1,...: cluster k (WEFT_CLUSTER) takes Sk samples of
 * every global batch (the shares add up to --batch), the clusters' parts
 * in cluster order, each split over its ranks as weft_shard_range splits a
 * batch. Full sync already weighs a rank's gradient by its samples over
 * the global batch, so the step is the mean over the same B samples as a
 * homogeneous run's: only the loader's part changes.
 *
 * --speed X: the compute of every step is stretched to 1/X of its time by
 * a sleep after backward, to emulate a slower cluster on one machine.
 *
 * DiLoCo and streaming (flat or hier) scale each cluster's period by its
 * step's time (samples / speed): the clusters with the shortest step take
 * H inner steps per outer step, one whose step takes k times as long
 * round(H / k), and as many fewer steps in all, so that every cluster
 * reaches each outer step at about the same time instead of the fast ones
 * waiting for the slow (shares in proportion to speed, a plan's, leave
 * every period at H). Streaming's overlap T scales with the period (one
 * fragment only where periods differ: several would not keep their order). The outer gradient is then a mean over
 * unequal work: each rank's pseudo-gradient is weighed by the samples it
 * saw in the period (its part times its period) over the mean of them, so
 * the outer step is the sample-weighted mean. Where every rank's weight is
 * 1 nothing changes. */
#include "run/run_shares.h"

#include "run/run_churn.h"
#include "train/sync_outer.h"

#include "core/clock.h"

#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* "6,3": the shares in cluster order; their count, or -1 when bad. */
int shares_parse(const char *v, long *out)
{
    int n = 0;
    while (*v) {
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        /* 0: a cluster out of the job (a re-plan's shares, weft-cpn run) */
        if (errno || end == v || x < 0 || n == SHARES_MAX || (*end && *end != ','))
            return -1;
        out[n++] = x;
        v = *end ? end + 1 : end;
    }
    return n;
}

/* This rank's part [*begin, *end) of every batch under the shares. */
static int part_of(train_sync *s, weft_comm *c, const long *share, int n, int *begin, int *end)
{
    weft_run *t = s->run;
    int me = c ? weft_comm_rank(c) : 0, world = c ? weft_comm_size(c) : 1;
    int mine = c ? weft_comm_cluster_of(c, me) : 0, ranks = 0, idx = 0;
    long sum = 0, before = 0;
    for (int k = 0; k < n; k++) {
        sum += share[k];
        before += k < mine ? share[k] : 0;
    }
    if (sum != s->o->r.batch)
        return run_fail(t, WEFT_ECONFIG, "--batch-shares %s: they add up to %ld, not --batch %d",
                        s->o->batch_shares, sum, s->o->r.batch);
    if (mine < 0 || mine >= n)
        return run_fail(t, WEFT_ECONFIG,
                        "--batch-shares %s: no share for this rank's cluster %d (WEFT_CLUSTER)",
                        s->o->batch_shares, mine);
    for (int r = 0; r < world; r++)
        if (!c || weft_comm_cluster_of(c, r) == mine) {
            idx += r < me;
            ranks++;
        }
    if (ranks > share[mine])
        return run_fail(t, WEFT_ECONFIG, "--batch-shares: cluster %d's %d ranks cannot share "
                        "its %ld samples", mine, ranks, share[mine]);
    uint64_t b, e;
    weft_shard_range((uint64_t)share[mine], idx, ranks, &b, &e);
    *begin = (int)(before + (long)b);
    *end = (int)(before + (long)e);
    return 0;
}

/* The loader again, over this rank's part under share[0..k) (over c), at
 * the same stream position; *n: the part's samples. */
int shares_loader_over(train_sync *s, weft_comm *c, const long *share, int k, int *n)
{
    weft_run *t = s->run;
    const opts *o = s->o;
    int begin = 0, end = 0, rc = part_of(s, c, share, k, &begin, &end);
    if (rc)
        return rc;
    if (end - begin < o->accum)
        return run_fail(t, WEFT_ECONFIG, "--batch-shares: --accum %d exceeds this rank's %d "
                        "samples", o->accum, end - begin);
    weft_loader_config lc;
    weft_loader_config_default(&lc);
    lc.global_batch = o->r.batch;
    lc.seed = o->r.seed;
    lc.part_begin = begin;
    lc.part_end = end;
    weft_loader *l = NULL;
    if ((rc = weft_loader_create(&l, t->d->train, &lc)) != 0)
        return run_fail(t, rc, "--batch-shares: cannot create the loader: %s",
                        weft_strerror(rc));
    weft_loader_seek(l, weft_loader_position(t->loader));
    weft_loader_free(t->loader);
    t->loader = l;
    *n = end - begin;
    return 0;
}

static int shares_loader(train_sync *s, int *n)
{
    const opts *o = s->o;
    long share[SHARES_MAX];
    int k = shares_parse(o->batch_shares, share);
    if (k < 1)
        return run_fail(s->run, WEFT_ECONFIG,
                        "--batch-shares: want sample counts in cluster order (6,3), not '%s'",
                        o->batch_shares);
    if (o->pp > 1 || o->tp > 1 || o->ps)
        return run_fail(s->run, WEFT_ENOTSUP,
                        "--batch-shares: data parallelism only (no --pp, --tp or --mode ps)");
    return shares_loader_over(s, s->comm, share, k, n);
}

/* Steps of this rank when its period is h of the job's H: as many outer
 * steps as the job's, and a last short period when the job has one. */
static long scaled_steps(long steps, long H, long h)
{
    long k = steps / H, rem = steps % H, tail = rem ? lround((double)rem * h / H) : 0;
    return k * h + (rem && tail < 1 ? 1 : tail);
}

/* The samples each rank sees in a period, gathered: this rank's weight
 * (in s->cfg) and whether any rank's differs from 1. */
static int outer_weights(train_sync *s, double mine, int *uneven)
{
    weft_comm *c = s->comm;
    int w = weft_comm_size(c), me = weft_comm_rank(c);
    double *all = malloc((size_t)w * sizeof *all), total = 0, own = 0;
    if (!all)
        return WEFT_ENOMEM;
    int rc = weft_allgather(c, &mine, all, 1, WEFT_F64);
    int cl = weft_comm_cluster_of(c, me), clusters = weft_comm_cluster_count(c);
    *uneven = 0;
    for (int r = 0; rc == 0 && r < w; r++) {
        total += all[r];
        *uneven |= all[r] != all[0];
        /* hier: a cluster's ranks average inside it first, so the outer
         * mean weighs clusters */
        if (weft_comm_cluster_of(c, r) == cl)
            own += all[r];
    }
    if (rc == 0 && *uneven && total > 0)
        s->cfg.weight = (float)(s->cfg.hier ? clusters * own / total : w * mine / total);
    free(all);
    return rc;
}

/* This rank's inner steps per outer step, so that every cluster's period
 * takes about the same time: a step takes samples / speed on a rank
 * (gathered), a cluster's step its slowest rank's (its ranks step
 * together under hier), the clusters with the shortest step take the job's
 * H and one whose step is k times as long round(H / k). Shares in
 * proportion to speed (a plan's) leave every period at H; even shares
 * halve a half-speed cluster's. */
static int balanced_period(train_sync *s, double n, long H, long *h)
{
    weft_comm *c = s->comm;
    int w = weft_comm_size(c), cl = weft_comm_cluster_of(c, weft_comm_rank(c));
    double mine = n / s->o->speed, *all = malloc((size_t)w * sizeof *all), least = 0, own = 0;
    if (!all)
        return WEFT_ENOMEM;
    int rc = weft_allgather(c, &mine, all, 1, WEFT_F64);
    for (int r = 0; rc == 0 && r < w; r++) {
        double slowest = 0; /* of rank r's cluster */
        for (int q = 0; q < w; q++)
            if (weft_comm_cluster_of(c, q) == weft_comm_cluster_of(c, r) && all[q] > slowest)
                slowest = all[q];
        least = r == 0 || slowest < least ? slowest : least;
        own = weft_comm_cluster_of(c, r) == cl ? slowest : own;
    }
    free(all);
    *h = own > 0 ? lround((double)H * least / own) : H;
    *h = *h < 1 ? 1 : *h > H ? H : *h;
    return rc;
}

/* Streaming's fragments keep their order across ranks only where every
 * rank has the same period, or there is one fragment; its overlap T
 * scales with the period, so the outer step lands as late in time. */
static int scale_streaming(train_sync *s, long H, long h, int differ)
{
    if (s->cfg.mode != WEFT_SYNC_STREAMING || !differ)
        return 0;
    if (s->cfg.fragments > 1)
        return run_fail(s->run, WEFT_ENOTSUP, "--sync %s with periods that differ by rank "
                        "(--speed, --batch-shares): one fragment only (streaming:H:1:T)",
                        s->o->sync);
    long tau = s->cfg.overlap ? lround((double)s->cfg.overlap * h / H) : 0;
    s->cfg.overlap = (int)(s->cfg.overlap && tau < 1 ? 1 : tau);
    return 0;
}

/* DiLoCo's or streaming's period and steps for this rank's step time, and
 * its weight; flat diloco whose weights differ takes its outer steps as
 * streaming:H:1:0, the same steps, where a weight is applied. */
static int shares_outer(train_sync *s, int n)
{
    weft_run *t = s->run;
    const opts *o = s->o;
    long H = s->cfg.period, h = H;
    int rc = balanced_period(s, (double)n, H, &h), uneven = 0, differ = 0;
    if (rc == 0)
        rc = outer_weights(s, (double)h * n, &uneven);
    long same[2] = { h, -h };
    if (rc == 0)
        rc = weft_allreduce(s->comm, same, same, 2, WEFT_I64, WEFT_MAX);
    if (rc)
        return run_fail(t, rc, "batch shares: %s: %s", weft_strerror(rc),
                        weft_comm_error(s->comm));
    differ = same[0] != -same[1];
    if ((rc = scale_streaming(s, H, h, differ)))
        return rc;
    if (h != H) {
        t->steps = scaled_steps(t->steps, H, h);
        s->cfg.period = (int)h;
        run_say(t, WEFT_RUN_OUT, "speed %.3g: %ld inner steps per outer step (of %ld), %ld "
                "steps\n", o->speed, h, H, t->steps);
    }
    if (uneven && s->cfg.mode == WEFT_SYNC_DILOCO && !s->cfg.hier && !s->cfg.compressed) {
        s->cfg.mode = WEFT_SYNC_STREAMING;
        s->cfg.fragments = 1;
        s->cfg.overlap = 0;
    }
    return 0;
}

int shares_weigh(train_sync *s, int n)
{
    int uneven = 0;
    s->cfg.weight = 1;
    int rc = outer_weights(s, (double)n, &uneven);
    if (rc == 0 && s->churn)
        outer_weigh(s->churn->outer, s->cfg.weight);
    return rc;
}

int shares_open(train_sync *s)
{
    weft_run *t = s->run;
    const opts *o = s->o;
    int me = s->comm ? weft_comm_rank(s->comm) : 0, world = s->comm ? weft_comm_size(s->comm) : 1;
    uint64_t b, e;
    weft_shard_range((uint64_t)o->r.batch, me, world, &b, &e);
    int n = (int)(e - b), rc = o->batch_shares[0] ? shares_loader(s, &n) : 0;
    int outer = s->cfg.mode == WEFT_SYNC_DILOCO || s->cfg.mode == WEFT_SYNC_STREAMING;
    if (rc || !s->comm || !outer || t->pl)
        return rc;
    /* --elastic: every period is H (a membership change cannot carry a
     * scaled one); the outer step still weighs each rank by its samples */
    return o->elastic ? (o->batch_shares[0] ? shares_weigh(s, n) : 0) : shares_outer(s, n);
}

void shares_pace(train_sync *s)
{
    weft_run *t = s->run;
    double speed = s->o->speed, d = t->compute_s - s->paced_s;
    if (speed < 1 && d > 0) {
        double extra = d * (1 / speed - 1);
        struct timespec ts = { (time_t)extra, (long)((extra - floor(extra)) * 1e9) };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        t->compute_s += extra; /* the emulated compute's time */
    }
    s->paced_s = t->compute_s;
}

/* Whether this rank speaks for its cluster: the cluster's lowest rank. */
static int cluster_first(const train_sync *s)
{
    if (!s->comm)
        return 1;
    int me = weft_comm_rank(s->comm), mine = weft_comm_cluster_of(s->comm, me);
    for (int r = 0; r < me; r++)
        if (weft_comm_cluster_of(s->comm, r) == mine)
            return 0;
    return 1;
}

void shares_progress(train_sync *s, const train_step *st)
{
    weft_run *t = s->run;
    const char *path = s->o->progress;
    double now = clock_now();
    long step = t->next + 1;
    if (!path[0] || !cluster_first(s))
        return;
    if (s->progress_t0 == 0)
        s->progress_t0 = now;
    /* and just before an outer step, where a part may wait for another:
     * weft-cpn run tells the waiting from the stuck by their steps */
    int outer_next = s->churn ? churn_outer_next(s)
                              : s->cfg.period > 0 && (step + 1) % s->cfg.period == 0 && s->sy &&
                                    sync_outer_of(s->sy);
    if (now - s->progress_at < 0.5 && step < t->end && !outer_next)
        return;
    s->progress_at = now;
    int k = s->comm ? weft_comm_cluster_of(s->comm, weft_comm_rank(s->comm)) : 0;
    char name[1100], tmp[1120];
    snprintf(name, sizeof name, "%s.%d", path, k);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return; /* progress is for watching: the training goes on without it */
    /* the outer steps' blocked seconds: what weft-cpn run measures a
     * link by (a part's own sync timings, not the link's declared rate) */
    const outer_sync *os = s->churn ? s->churn->outer : s->sy ? sync_outer_of(s->sy) : NULL;
    outer_times ot = { 0, 0, 0 };
    /* the churn mode counts its own: its period may change as it runs */
    long outer = s->churn ? churn_outers(s) : os && s->cfg.period > 0 ? step / s->cfg.period : 0;
    if (os)
        outer_time(os, &ot);
    fprintf(f, "step %ld of %ld loss %.6f elapsed %.3f outer %ld wait %.6f\n", step, t->end,
            st->loss, now - s->progress_t0, outer, ot.wait_s);
    if (fclose(f) == 0)
        rename(tmp, name);
}
