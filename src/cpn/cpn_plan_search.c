/* The planner's exhaustive search: every subset of the clusters, ranks in
 * each (powers of two up to the cores, and all the cores), every sync and
 * compression the job allows. Instances are small (a handful of
 * clusters); a large one keeps every cluster at all its cores. */
#include "cpn/cpn_plan.h"

#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTS 12
#define MAX_EVALS 2000000L

typedef struct {
    const cpn_cluster *cs;
    const cpn_link *links;
    int nlinks;
    const cpn_job_model *job;
    int nopt[CPN_PLAN_MAX_CLUSTERS];
    int opt[CPN_PLAN_MAX_CLUSTERS][MAX_OPTS];
    cpn_candidate subset_best[1 << CPN_PLAN_MAX_CLUSTERS];    /* meets the QoS */
    cpn_candidate subset_fastest[1 << CPN_PLAN_MAX_CLUSTERS]; /* any */
    cpn_candidate sync_best[4];  /* per sync mode, filled for the final subset */
    cpn_plan_result *out;
} search;

static void rank_options(search *s, int n, int all_cores_only)
{
    for (int i = 0; i < n; i++) {
        int cores = cpn_cluster_cores(&s->cs[i]), k = 0;
        for (int r = 1; !all_cores_only && r < cores && k < MAX_OPTS - 1; r *= 2)
            s->opt[i][k++] = r;
        s->opt[i][k++] = cores;
        s->nopt[i] = k;
    }
}

static void consider(search *s, int mask, cpn_candidate *c)
{
    cpn_plan_price(s->cs, s->links, s->nlinks, s->job, c);
    s->out->evaluated++;
    cpn_candidate *f = &s->subset_fastest[mask];
    if (f->n == 0 || c->total_s < f->total_s)
        *f = *c;
    if (c->why[0])
        return;
    cpn_candidate *b = &s->subset_best[mask];
    if (b->n == 0 || cpn_plan_better(s->job, c, b))
        *b = *c;
    if (s->out->best.n == 0 || cpn_plan_better(s->job, c, &s->out->best))
        s->out->best = *c;
}

/* Every ranks x sync x compression of one subset. */
static void subset(search *s, int mask, cpn_candidate *base, int pos)
{
    if (pos == base->n) {
        int syncs = base->n > 1 ? 4 : 1, comps = base->n > 1 ? s->job->max_compress + 1 : 1;
        for (int y = 0; y < syncs; y++)
            for (int k = 0; k < comps; k++) {
                cpn_candidate c = *base;
                c.sync = (cpn_sync)y;
                c.compress = k;
                consider(s, mask, &c);
            }
        return;
    }
    int ci = base->idx[pos];
    for (int o = 0; o < s->nopt[ci]; o++) {
        base->ranks[pos] = s->opt[ci][o];
        subset(s, mask, base, pos + 1);
    }
}

/* The chosen subset's best of each other sync mode, to say why not. */
static void sync_alternatives(search *s, int mask)
{
    const cpn_candidate *best = &s->out->best;
    for (int y = 0; y < 4 && best->n > 1; y++) {
        if ((cpn_sync)y == best->sync)
            continue;
        cpn_candidate c = *best, good;
        good.n = 0;
        for (int k = 0; k <= s->job->max_compress; k++) {
            c.sync = (cpn_sync)y;
            c.compress = k;
            cpn_plan_price(s->cs, s->links, s->nlinks, s->job, &c);
            if (good.n == 0 || cpn_plan_better(s->job, &c, &good))
                good = c;
        }
        s->sync_best[y] = good;
    }
    (void)mask;
}

static void reject(search *s, const cpn_candidate *c, const char *why_prefix)
{
    cpn_plan_result *r = s->out;
    if (r->nrejected >= CPN_PLAN_MAX_REJECTED)
        return;
    cpn_candidate *x = &r->rejected[r->nrejected++];
    *x = *c;
    if (!c->why[0]) {
        const cpn_candidate *b = &r->best;
        if (s->job->objective == CPN_OBJ_COST)
            snprintf(x->why, sizeof x->why, "%scosts %.4g against %.4g", why_prefix, c->cost,
                     b->cost);
        else if (s->job->objective == CPN_OBJ_CARBON)
            snprintf(x->why, sizeof x->why, "%semits %.4g gCO2 against %.4g", why_prefix,
                     c->carbon_g, b->carbon_g);
        else
            snprintf(x->why, sizeof x->why, "%stakes %.4g s against %.4g s", why_prefix,
                     c->total_s, b->total_s);
    }
}

static void collect_rejected(search *s, int n)
{
    int best_mask = 0;
    for (int i = 0; i < s->out->best.n; i++)
        best_mask |= 1 << s->out->best.idx[i];
    if (s->out->best.n) {
        sync_alternatives(s, best_mask);
        for (int y = 0; y < 4; y++)
            if (s->sync_best[y].n)
                reject(s, &s->sync_best[y], "");
    }
    for (int mask = 1; mask < 1 << n; mask++) {
        if (mask == best_mask)
            continue;
        const cpn_candidate *c =
            s->subset_best[mask].n ? &s->subset_best[mask] : &s->subset_fastest[mask];
        if (c->n)
            reject(s, c, "");
    }
}

int cpn_plan_search(const cpn_cluster *cs, int n, const cpn_link *links, int nlinks,
                    const cpn_job_model *job, cpn_plan_result *out)
{
    static const search zero;
    memset(out, 0, sizeof *out);
    if (n < 1 || n > CPN_PLAN_MAX_CLUSTERS || job->global_batch < 1 || job->steps < 1 ||
        job->flops_per_sample <= 0)
        return WEFT_EINVAL;
    search *s = malloc(sizeof *s);
    if (!s)
        return WEFT_ENOMEM;
    *s = zero;
    s->cs = cs;
    s->links = links;
    s->nlinks = nlinks;
    s->job = job;
    s->out = out;
    rank_options(s, n, 0);
    double combos = 1;
    for (int i = 0; i < n; i++)
        combos *= s->nopt[i] + 1;
    if (combos * 4 * (job->max_compress + 1) > MAX_EVALS)
        rank_options(s, n, 1);
    for (int mask = 1; mask < 1 << n; mask++) {
        cpn_candidate base;
        memset(&base, 0, sizeof base);
        for (int i = 0; i < n; i++)
            if (mask & 1 << i)
                base.idx[base.n++] = i;
        subset(s, mask, &base, 0);
    }
    collect_rejected(s, n);
    free(s);
    return 0;
}
