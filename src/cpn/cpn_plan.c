/* The planner's cost model and search (docs/CPN.md, "The plan's model").
 * A rank is a core; a cluster's step is timed on the job's model where
 * probe --job measured it, else priced at ranks x peak x speed x EFF; the
 * global batch is shared in proportion to the rates, so that every
 * cluster's compute takes the same time; gradients are all-reduced inside
 * each cluster (alpha-beta of the probe) and across clusters over the
 * slowest link of the subset, every step (full, hier) or every H steps
 * (diloco; streaming, one fragment, overlaps it with the next period's
 * compute and applies the outer step one period late). */
#include "cpn/cpn_plan.h"

#include "weft.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define EFF 0.5              /* sustained share of the matmul peak a step gets */
#define NOMINAL_BPS 1e9      /* a pair with no measured link */
#define NOMINAL_RTT_MS 10.0
#define NOMINAL_WATTS 10.0   /* per core, when not declared */
#define NOMINAL_GCO2 400.0   /* per kWh, when not declared */
#define MSS_BITS (1448 * 8.0)
#define SYNC_SHARE 0.1       /* H: the smallest whose sync is this share of a step */

static const int h_choices[] = { 10, 20, 50, 100, 200, 500 };

const char *cpn_sync_name(cpn_sync s)
{
    static const char *const n[] = { "full", "hier", "diloco", "streaming" };
    return s <= CPN_SYNC_STREAMING ? n[s] : "?";
}

const char *cpn_compress_name(int k)
{
    return k == 2 ? "int8" : k == 1 ? "bf16" : "none";
}

void cpn_candidate_name(const cpn_cluster *cs, const cpn_candidate *c, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s:%d", i ? "+" : "",
                                cs[c->idx[i]].name, c->ranks[i]);
    if (len < cap && c->n > 1) {
        len += (size_t)snprintf(buf + len, cap - len, " %s", cpn_sync_name(c->sync));
        if (len < cap && c->sync >= CPN_SYNC_DILOCO)
            len += (size_t)snprintf(buf + len, cap - len, " H=%d", c->H);
        if (len < cap && c->sync == CPN_SYNC_STREAMING)
            len += (size_t)snprintf(buf + len, cap - len, " T=%d", c->T);
        if (len < cap)
            snprintf(buf + len, cap - len, " %s", cpn_compress_name(c->compress));
    }
}

/* Whether cl's train_* metrics were timed on this job's model and sequence. */
static int calibrated(const cpn_cluster *cl, const cpn_job_model *job)
{
    return cl->calib_model[0] && !strcmp(cl->calib_model, job->model) &&
           cl->calib_seq == job->seq && cpn_metric_value(cl, "train_sample_s", 0) > 0;
}

/* The share of a core a rank had when the job was timed (probe --job;
 * 1 where not measured): a loaded host's steps take 1 / share as long. */
static double core_share(const cpn_cluster *cl)
{
    double s = cpn_metric_value(cl, "core_share", 1);
    return s > 0 && s <= 1 ? s : 1;
}

/* Samples a second over the cluster's ranks: measured, else from the peak. */
static double rate(const cpn_cluster *cl, const cpn_job_model *job, int ranks)
{
    double speed = cpn_metric_value(cl, "speed", 1);
    if (calibrated(cl, job))
        return ranks * speed * core_share(cl) / cpn_metric_value(cl, "train_sample_s", 0);
    double peak = cpn_metric_value(cl, "peak_fp32_gflops_per_core", 0);
    return ranks * peak * 1e9 * speed * EFF / job->flops_per_sample;
}

/* A step's compute on the cluster's busiest rank (ceil(n / ranks) samples):
 * measured forward and backward stretched by the declared speed (as the
 * training's emulation does) plus the update, over the core's share, else
 * the peak's figure. */
static double compute_time(const cpn_cluster *cl, const cpn_job_model *job, int ranks, int n,
                           int *cal)
{
    if (!calibrated(cl, job)) {
        double r = rate(cl, job, ranks);
        return r > 0 ? n / r : INFINITY;
    }
    (*cal)++;
    int mine = (n + ranks - 1) / ranks;
    double speed = cpn_metric_value(cl, "speed", 1);
    double fb = cpn_metric_value(cl, "train_fixed_s", 0) +
                mine * cpn_metric_value(cl, "train_sample_s", 0);
    return (fb / (speed > 0 ? speed : 1) + cpn_metric_value(cl, "train_update_s", 0)) /
           core_share(cl);
}

/* Shares in proportion to the rates, largest remainders first, summing
 * to the global batch. */
static void shares(const cpn_cluster *cs, const cpn_job_model *job, cpn_candidate *c)
{
    double r[CPN_PLAN_MAX_CLUSTERS], sum = 0, frac[CPN_PLAN_MAX_CLUSTERS];
    int given = 0;
    for (int i = 0; i < c->n; i++)
        sum += r[i] = rate(&cs[c->idx[i]], job, c->ranks[i]);
    for (int i = 0; i < c->n; i++) {
        double x = sum > 0 ? job->global_batch * r[i] / sum : 0;
        c->batch[i] = (int)floor(x);
        frac[i] = x - c->batch[i];
        given += c->batch[i];
    }
    while (given < job->global_batch && c->n > 0) {
        int m = 0;
        for (int i = 1; i < c->n; i++)
            if (frac[i] > frac[m])
                m = i;
        c->batch[m]++;
        frac[m] = -1;
        given++;
    }
}

static double intra(const cpn_cluster *cl, int ranks, double bytes)
{
    if (ranks <= 1)
        return 0;
    double alpha = cpn_metric_value(cl, "allreduce_alpha_us", 60) * 1e-6;
    double gbps = cpn_metric_value(cl, "allreduce_beta_gbps", 8);
    return 2.0 * (ranks - 1) / ranks * bytes * 8 / (gbps * 1e9) +
           2 * ceil(log2((double)ranks)) * alpha;
}

/* The subset's slowest link: least bandwidth (TCP's under loss, after
 * Mathis et al.), longest round trip. */
static void bottleneck(const cpn_cluster *cs, const cpn_link *links, int nlinks,
                       cpn_candidate *c, double *bps, double *rtt_s)
{
    *bps = INFINITY;
    *rtt_s = 0;
    for (int i = 0; i < c->n; i++)
        for (int j = 0; j < c->n; j++) {
            if (i == j)
                continue;
            const cpn_link *l = NULL;
            for (int k = 0; k < nlinks && !l; k++)
                if (!strcmp(links[k].from, cs[c->idx[i]].name) &&
                    !strcmp(links[k].to, cs[c->idx[j]].name))
                    l = &links[k];
            double b = l ? l->bandwidth_bps : NOMINAL_BPS;
            double r = (l ? l->rtt_ms : NOMINAL_RTT_MS) * 1e-3;
            c->links_assumed |= !l;
            if (l && l->loss > 0 && r > 0) {
                double mathis = MSS_BITS / (r * sqrt(l->loss)) * 1.22;
                b = b < mathis ? b : mathis;
            }
            *bps = b < *bps ? b : *bps;
            *rtt_s = r > *rtt_s ? r : *rtt_s;
        }
}

static double epoch_of(const cpn_metric *m)
{
    if (!m)
        return NAN;
    if (!m->text[0])
        return m->value;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(m->text, "%Y-%m-%dT%H:%M:%S", &tm);
    return end ? (double)timegm(&tm) : NAN;
}

/* The first QoS or availability the candidate breaks, into c->why. */
static void check(const cpn_cluster *cs, const cpn_job_model *job, cpn_candidate *c)
{
    c->why[0] = 0;
    for (int i = 0; i < c->n; i++) {
        const cpn_cluster *cl = &cs[c->idx[i]];
        double from = epoch_of(cpn_metric_find(cl, "available_from"));
        double until = epoch_of(cpn_metric_find(cl, "available_until"));
        if (c->batch[i] < 1)
            snprintf(c->why, sizeof c->why, "%s would get no sample of the batch", cl->name);
        else if (job->now > 0 && from > job->now)
            snprintf(c->why, sizeof c->why, "%s is not available before %s", cl->name,
                     cpn_metric_find(cl, "available_from")->text);
        else if (job->now > 0 && until < job->now + c->total_s)
            snprintf(c->why, sizeof c->why, "%s is available %.0f s, the run needs %.0f s",
                     cl->name, until - job->now, c->total_s);
        if (c->why[0])
            return;
    }
    if (job->min_clusters > 0 && c->n < job->min_clusters)
        snprintf(c->why, sizeof c->why, "%d cluster(s), the job wants at least %d", c->n,
                 job->min_clusters);
    else if (job->max_clusters > 0 && c->n > job->max_clusters)
        snprintf(c->why, sizeof c->why, "%d clusters, the job allows at most %d", c->n,
                 job->max_clusters);
    else if (job->deadline_s > 0 && c->total_s > job->deadline_s)
        snprintf(c->why, sizeof c->why, "takes %.0f s, past the deadline of %.0f s",
                 c->total_s, job->deadline_s);
    else if (job->budget > 0 && c->cost > job->budget)
        snprintf(c->why, sizeof c->why, "costs %.4g, over the budget of %.4g", c->cost,
                 job->budget);
    else if (job->carbon_cap_g > 0 && c->carbon_g > job->carbon_cap_g)
        snprintf(c->why, sizeof c->why, "emits %.4g gCO2, over the cap of %.4g", c->carbon_g,
                 job->carbon_cap_g);
}

/* No longer than the run: a period past the last step never syncs. A
 * period in seconds is as many of the planned steps. hidden: the compute
 * a step that an overlapped outer reduction runs beside (streaming; 0
 * for blocking DiLoCo), so that streaming takes the shortest period its
 * steps cover rather than the one a blocking reduction would need. */
static int pick_h(const cpn_job_model *job, double wan, double step, double hidden)
{
    int n = (int)(sizeof h_choices / sizeof h_choices[0]), h = h_choices[n - 1];
    if (job->fixed_h > 0)
        return job->fixed_h;
    if (job->period_s > 0) {
        /* the fastest part's steps in the period; the training scales a
         * slower part's period by its step's time (run_shares.c) */
        double x = step > 0 ? floor(job->period_s / step + 0.5) : 1;
        h = x < 1 ? 1 : x > (double)job->steps ? (int)job->steps : (int)x;
        return h;
    }
    for (int i = n - 1; i >= 0; i--)
        if (fmax(wan - hidden * h_choices[i], 0) / h_choices[i] <= SYNC_SHARE * step)
            h = h_choices[i];
    return h < job->steps ? h : job->steps > 1 ? (int)job->steps : 1;
}

/* Streaming with one fragment: the reduction runs beside the next T = H
 * inner steps and lands one period late (the whole period: the compute
 * model is coarse, and a T too short would leave the loop waiting); only
 * what the period's compute does not cover stands in the loop. */
static double overlapped(cpn_candidate *c, double wan)
{
    c->T = c->H;
    double left = wan - c->T * c->compute_s;
    return left > 0 ? left / c->H : 0;
}

void cpn_plan_price(const cpn_cluster *cs, const cpn_link *links, int nlinks,
                    const cpn_job_model *job, cpn_candidate *c)
{
    int total_ranks = 0;
    c->links_assumed = c->calibrated = 0;
    int H = c->given ? c->H : 0;
    if (!c->given)
        shares(cs, job, c);
    c->compute_s = c->intra_s = c->wan_s = 0;
    for (int i = 0; i < c->n; i++) {
        const cpn_cluster *cl = &cs[c->idx[i]];
        double t = compute_time(cl, job, c->ranks[i], c->batch[i], &c->calibrated);
        double a = intra(cl, c->ranks[i], job->grad_bytes);
        c->compute_s = t > c->compute_s ? t : c->compute_s;
        c->intra_s = a > c->intra_s ? a : c->intra_s;
        total_ranks += c->ranks[i];
    }
    c->H = c->T = 0;
    if (c->n > 1) {
        double bps, rtt;
        bottleneck(cs, links, nlinks, c, &bps, &rtt);
        double bytes = job->grad_bytes * (c->compress == 2 ? 0.25 : c->compress ? 0.5 : 1);
        int k = c->sync == CPN_SYNC_FULL ? total_ranks : c->n;
        double wan = (k - 1) * rtt + 2.0 * (k - 1) / k * bytes * 8 / bps;
        if (c->sync == CPN_SYNC_FULL) {
            c->intra_s = 0; /* one ring over every rank: its slowest edge sets the pace */
            c->wan_s = wan;
        } else if (c->sync == CPN_SYNC_HIER) {
            c->wan_s = wan;
        } else {
            double step = c->compute_s + c->intra_s;
            c->H = H > 0 ? H : pick_h(job, wan, step,
                                      c->sync == CPN_SYNC_STREAMING ? c->compute_s : 0);
            c->wan_s = wan / c->H;
            if (c->sync == CPN_SYNC_STREAMING)
                c->wan_s = overlapped(c, wan);
        }
    }
    c->step_s = c->compute_s + c->intra_s + c->wan_s;
    c->total_s = c->step_s * (double)job->steps;
    double hours = c->total_s / 3600;
    c->cost = c->carbon_g = 0;
    for (int i = 0; i < c->n; i++) {
        const cpn_cluster *cl = &cs[c->idx[i]];
        c->cost += cpn_metric_value(cl, "price_per_core_hour", 0) * c->ranks[i] * hours;
        double kwh = cpn_metric_value(cl, "watts_per_core", NOMINAL_WATTS) * c->ranks[i] *
                     hours / 1000;
        c->carbon_g += kwh * cpn_metric_value(cl, "gco2_per_kwh", NOMINAL_GCO2);
    }
    check(cs, job, c);
}

int cpn_plan_better(const cpn_job_model *job, const cpn_candidate *a, const cpn_candidate *b)
{
    double x = a->total_s, y = b->total_s, x2 = a->cost, y2 = b->cost;
    if (job->objective == CPN_OBJ_COST) {
        x = a->cost, y = b->cost, x2 = a->total_s, y2 = b->total_s;
    } else if (job->objective == CPN_OBJ_CARBON) {
        x = a->carbon_g, y = b->carbon_g, x2 = a->total_s, y2 = b->total_s;
    }
    double tol = 1e-9 * (fabs(x) + fabs(y));
    if (x < y - tol)
        return 1;
    if (x > y + tol)
        return 0;
    return x2 < y2;
}
