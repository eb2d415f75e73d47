/* The compute power network's planner and cluster descriptions
 * (src/cpn/): the plan is the best of an exhaustive enumeration by its
 * own model, meets the QoS, shares the batch by speed; descriptions
 * survive JSON both ways; declared facts are checked. */
#include "test.h"

#include "core/json.h"
#include "cpn/cpn_cluster.h"
#include "cpn/cpn_plan.h"
#include "cpn/cpn_probe.h"

#include <math.h>

static void set(cpn_cluster *c, const char *name, double v, const char *source)
{
    cpn_metric m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "%s", name);
    m.value = v;
    snprintf(m.source, sizeof m.source, "%s", source);
    cpn_metric_set(c, &m);
}

static void make(cpn_cluster *c, const char *name, int cores, double peak, double speed,
                 double price, double gco2)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->hosts = calloc(1, sizeof *c->hosts);
    c->nhosts = 1;
    c->hosts[0].cores = cores;
    snprintf(c->hosts[0].name, sizeof c->hosts[0].name, "%s-h1", name);
    set(c, "peak_fp32_gflops_per_core", peak, "measured");
    set(c, "speed", speed, "declared");
    set(c, "price_per_core_hour", price, "declared");
    set(c, "gco2_per_kwh", gco2, "declared");
    set(c, "allreduce_alpha_us", 20, "measured");
    set(c, "allreduce_beta_gbps", 20, "measured");
    cpn_cluster_score(c);
}

/* a: fast and dear; b: half speed, cheap and green; c: one slow core */
static void three(cpn_cluster cs[3])
{
    make(&cs[0], "a", 4, 100, 1, 0.10, 500);
    make(&cs[1], "b", 4, 100, 0.5, 0.02, 50);
    make(&cs[2], "c", 1, 50, 1, 0.05, 300);
}

static const cpn_link links3[] = {
    { "a", "b", 1e8, 20, 0 }, { "b", "a", 1e8, 20, 0 }, { "a", "c", 1e9, 5, 0 },
    { "c", "a", 1e9, 5, 0 },  { "b", "c", 5e7, 40, 0.001 }, { "c", "b", 5e7, 40, 0.001 },
};

static cpn_job_model job_small(void)
{
    cpn_job_model j;
    memset(&j, 0, sizeof j);
    j.flops_per_sample = 2e9;
    j.grad_bytes = 4e6;
    j.global_batch = 32;
    j.steps = 500;
    j.max_compress = 2;
    return j;
}

static double objective(const cpn_job_model *j, const cpn_candidate *c)
{
    return j->objective == CPN_OBJ_COST ? c->cost
         : j->objective == CPN_OBJ_CARBON ? c->carbon_g : c->total_s;
}

/* The best meeting the QoS by brute force: every subset, every rank count
 * from 1 to the cores (a superset of what the search tries), every sync
 * and compression. */
static double brute(const cpn_cluster *cs, int n, const cpn_job_model *j, double *single)
{
    double best = INFINITY;
    *single = INFINITY;
    for (int mask = 1; mask < 1 << n; mask++) {
        cpn_candidate c;
        memset(&c, 0, sizeof c);
        for (int i = 0; i < n; i++)
            if (mask & 1 << i)
                c.idx[c.n++] = i;
        int r[CPN_PLAN_MAX_CLUSTERS] = { 0 };
        for (int i = 0; i < c.n; i++)
            r[i] = 1;
        for (;;) {
            for (int y = 0; y < (c.n > 1 ? 4 : 1); y++)
                for (int k = 0; k <= (c.n > 1 ? j->max_compress : 0); k++) {
                    c.sync = (cpn_sync)y;
                    c.compress = k;
                    for (int i = 0; i < c.n; i++) {
                        int cores = cpn_cluster_cores(&cs[c.idx[i]]);
                        /* the search's options: powers of two and all cores */
                        c.ranks[i] = r[i];
                        if ((r[i] & (r[i] - 1)) && r[i] != cores)
                            goto skip;
                    }
                    cpn_plan_price(cs, links3, 6, j, &c);
                    if (!c.why[0] && objective(j, &c) < best)
                        best = objective(j, &c);
                    if (c.n == 1 && !c.why[0] && c.total_s < *single)
                        *single = c.total_s;
                skip:;
                }
            int i = 0;
            while (i < c.n && ++r[i] > cpn_cluster_cores(&cs[c.idx[i]]))
                r[i++] = 1;
            if (i == c.n)
                break;
        }
    }
    return best;
}

TEST(plan_is_best_of_exhaustive_search)
{
    cpn_cluster cs[3];
    three(cs);
    for (int o = 0; o < 3; o++) {
        cpn_job_model j = job_small();
        j.objective = (cpn_objective)o;
        cpn_plan_result *r = calloc(1, sizeof *r);
        CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
        double single, best = brute(cs, 3, &j, &single);
        CHECK(r->best.n > 0);
        CHECKF(fabs(objective(&j, &r->best) - best) <= 1e-9 * best, "objective %d: %g vs %g",
               o, objective(&j, &r->best), best);
        CHECK(r->best.why[0] == 0);
        CHECK(r->nrejected > 0);
        for (int i = 0; i < r->nrejected; i++)
            CHECK(r->rejected[i].why[0] != 0);
        if (o == CPN_OBJ_TIME)
            CHECKF(r->best.total_s <= single * (1 + 1e-12), "%g slower than one cluster %g",
                   r->best.total_s, single);
        free(r);
    }
    for (int i = 0; i < 3; i++)
        cpn_cluster_free(&cs[i]);
}

TEST(plan_meets_constraints)
{
    cpn_cluster cs[3];
    three(cs);
    cpn_plan_result *r = calloc(1, sizeof *r);
    cpn_job_model j = job_small();
    CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
    double fastest = r->best.total_s;
    j.max_clusters = 1;
    CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
    CHECK(r->best.n == 1);
    j.max_clusters = 0;
    j.min_clusters = 3;
    CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
    CHECK(r->best.n == 3);
    j.min_clusters = 0;
    j.budget = 0.6 * r->best.cost;
    j.carbon_cap_g = 1e9;
    CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
    CHECK(r->best.n == 0 || r->best.cost <= j.budget);
    j.budget = 0;
    j.deadline_s = fastest * 0.5; /* nothing is that fast */
    CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
    CHECK(r->best.n == 0);
    CHECK(r->nrejected > 0 && strstr(r->rejected[0].why, "deadline") != NULL);
    free(r);
    for (int i = 0; i < 3; i++)
        cpn_cluster_free(&cs[i]);
}

TEST(plan_half_speed_gets_half_share)
{
    cpn_cluster cs[2];
    make(&cs[0], "a", 4, 100, 1, 0.1, 400);
    make(&cs[1], "b", 4, 100, 0.5, 0.1, 400);
    cpn_job_model j = job_small();
    j.global_batch = 30;
    cpn_candidate c;
    memset(&c, 0, sizeof c);
    c.n = 2;
    c.idx[1] = 1;
    c.ranks[0] = c.ranks[1] = 4;
    c.sync = CPN_SYNC_DILOCO;
    cpn_plan_price(cs, links3, 2, &j, &c);
    CHECKF(c.batch[0] == 20 && c.batch[1] == 10, "%d %d", c.batch[0], c.batch[1]);
    /* odd batches: the shares still add up */
    j.global_batch = 31;
    cpn_plan_price(cs, links3, 2, &j, &c);
    CHECK(c.batch[0] + c.batch[1] == 31 && c.batch[0] >= 20 && c.batch[1] >= 10);
    for (int i = 0; i < 2; i++)
        cpn_cluster_free(&cs[i]);
}

TEST(plan_cost_objective_cheaper_within_deadline)
{
    cpn_cluster cs[3];
    three(cs);
    cpn_plan_result *r = calloc(1, sizeof *r);
    cpn_job_model j = job_small();
    CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
    cpn_candidate fast = r->best;
    j.objective = CPN_OBJ_COST;
    j.deadline_s = fast.total_s * 3;
    CHECK(cpn_plan_search(cs, 3, links3, 6, &j, r) == 0);
    CHECK(r->best.n > 0);
    CHECK(r->best.total_s <= j.deadline_s);
    CHECKF(r->best.cost < fast.cost, "cost plan %g, fastest %g", r->best.cost, fast.cost);
    free(r);
    for (int i = 0; i < 3; i++)
        cpn_cluster_free(&cs[i]);
}

TEST(cluster_json_round_trip)
{
    cpn_cluster c;
    make(&c, "x\"y", 2, 123.5, 0.75, 0.03, 250);
    char err[256];
    CHECK(cpn_probe_declare(&c, "available_until=2030-01-01T00:00:00Z", err, sizeof err) == 0);
    CHECK(cpn_probe_declare(&c, "speed=1.5", err, sizeof err) != 0);
    CHECK(cpn_probe_declare(&c, "colour=blue", err, sizeof err) != 0);
    CHECK(cpn_probe_declare(&c, "watts_per_core=12", err, sizeof err) == 0);
    cpn_jo w;
    cpn_jo_init(&w);
    cpn_cluster_write(&w, NULL, &c);
    int rc;
    const char *text = cpn_jo_text(&w, &rc);
    CHECK(rc == 0 && text);
    cpn_cluster *back = NULL;
    int n = 0;
    CHECKF(text && cpn_clusters_parse(text, strlen(text), &back, &n, err, sizeof err) == 0,
           "%s", err);
    CHECK(n == 1);
    if (n == 1) {
        CHECK(!strcmp(back[0].name, "x\"y"));
        CHECK(cpn_metric_value(&back[0], "peak_fp32_gflops_per_core", 0) == 123.5);
        CHECK(!strcmp(cpn_metric_find(&back[0], "peak_fp32_gflops_per_core")->source,
                      "measured"));
        CHECK(!strcmp(cpn_metric_find(&back[0], "watts_per_core")->source, "declared"));
        CHECK(!strcmp(cpn_metric_find(&back[0], "available_until")->text,
                      "2030-01-01T00:00:00Z"));
        CHECK(fabs(back[0].l2 - c.l2) < 1e-6 && c.l2 > 0 && c.l2 <= 1);
        cpn_cluster_free(&back[0]);
    }
    free(back);
    cpn_jo_free(&w);
    cpn_cluster_free(&c);
    /* a description without hosts is refused with a reason */
    const char *bad = "{\"schema\":\"weft-cpn-cluster/1\",\"name\":\"z\",\"hosts\":[]}";
    CHECK(cpn_clusters_parse(bad, strlen(bad), &back, &n, err, sizeof err) != 0);
    CHECK(strstr(err, "hosts") != NULL);
}
