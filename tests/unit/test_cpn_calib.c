/* The planner's calibrated prediction (src/cpn/cpn_calib.c, cpn_plan.c):
 * a job's model timed on this rank gives positive, finite step parts; a
 * cluster timed on the job's model is priced by them (and shares the
 * batch by them), one timed on another model by its peak; the job a
 * description was timed on survives JSON; a core shared with other
 * processes when timed stretches the step; an outer period in seconds is
 * as many of the predicted steps; a given plan is priced as it stands. */
#include "test.h"

#include "cpn/cpn_calib.h"
#include "cpn/cpn_cluster.h"
#include "cpn/cpn_job.h"
#include "cpn/cpn_plan.h"

#include <math.h>

TEST_TIMEOUT(60);

static void set(cpn_cluster *c, const char *name, double v)
{
    cpn_metric m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "%s", name);
    m.value = v;
    snprintf(m.source, sizeof m.source, "measured");
    cpn_metric_set(c, &m);
}

static const char *const spec = "gpt:vocab=32,ctx=8,layers=1,heads=2,dim=16";

/* One host of `cores`, timed on spec at seq 8 unless model is given. */
static void make(cpn_cluster *c, const char *name, int cores, double speed, double sample_s,
                 const char *model)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->hosts = calloc(1, sizeof *c->hosts);
    c->nhosts = 1;
    c->hosts[0].cores = cores;
    set(c, "peak_fp32_gflops_per_core", 100);
    set(c, "speed", speed);
    set(c, "train_sample_s", sample_s);
    set(c, "train_fixed_s", 0.002);
    set(c, "train_update_s", 0.0005);
    snprintf(c->calib_model, sizeof c->calib_model, "%s", model ? model : spec);
    c->calib_seq = 8;
    cpn_cluster_score(c);
}

static cpn_job_model job(void)
{
    cpn_job_model j;
    memset(&j, 0, sizeof j);
    weft_model_config cfg;
    weft_model_config_parse(spec, &cfg);
    weft_model_config_format(&cfg, j.model, sizeof j.model);
    j.seq = 8;
    weft_model_flops(&cfg, 1, 8, &j.flops_per_sample);
    j.grad_bytes = 4e4;
    j.global_batch = 24;
    j.steps = 100;
    return j;
}

TEST(calib_measure_gives_positive_parts)
{
    weft_model_config cfg;
    CHECK(weft_model_config_parse(spec, &cfg) == 0);
    cpn_calib c;
    CHECK(cpn_calib_measure(&cfg, 8, 8, &c) == 0);
    CHECKF(c.sample_s > 0 && isfinite(c.sample_s), "sample_s %g", c.sample_s);
    CHECKF(c.fixed_s >= 0 && isfinite(c.fixed_s), "fixed_s %g", c.fixed_s);
    CHECKF(c.update_s > 0 && isfinite(c.update_s), "update_s %g", c.update_s);
    CHECKF(c.core_share > 0 && c.core_share <= 1, "core_share %g", c.core_share);
    weft_model_config mlp;
    CHECK(weft_model_config_parse("mlp:16-8-4", &mlp) == 0);
    CHECK(cpn_calib_measure(&mlp, 1, 4, &c) == 0 && c.sample_s > 0);
}

/* Clusters a (speed 1) and b (speed 0.5), each a rank timed at 1 ms a
 * sample, and a candidate of both. */
static void two_parts(cpn_cluster cs[2], cpn_candidate *c)
{
    make(&cs[0], "a", 1, 1, 0.001, NULL);
    make(&cs[1], "b", 1, 0.5, 0.001, NULL);
    memset(c, 0, sizeof *c);
    c->n = 2;
    c->idx[0] = 0, c->idx[1] = 1;
    c->ranks[0] = c->ranks[1] = 1;
}

TEST(plan_prices_the_measured_step)
{
    cpn_cluster cs[2];
    cpn_candidate c;
    two_parts(cs, &c);
    cpn_job_model j = job();
    c.sync = CPN_SYNC_DILOCO;
    cpn_plan_price(cs, NULL, 0, &j, &c);
    /* samples a second 1000 and 500: shares 16 and 8, each rank's step
     * (0.002 + 16 x 0.001) / 1 + 0.0005 = (0.002 + 8 x 0.001) / 0.5 + 0.0005 */
    CHECKF(c.batch[0] == 16 && c.batch[1] == 8, "shares %d %d", c.batch[0], c.batch[1]);
    CHECKF(fabs(c.compute_s - 0.0205) < 1e-9, "compute %g", c.compute_s);
    CHECK(c.calibrated == 2);
    /* two ranks on a: the busiest takes 8 of its 16 */
    c.ranks[0] = 2;
    cpn_plan_price(cs, NULL, 0, &j, &c);
    CHECKF(c.batch[0] == 19 && c.batch[1] == 5, "shares %d %d", c.batch[0], c.batch[1]);
    double a = 0.002 + 10 * 0.001 + 0.0005, b = (0.002 + 5 * 0.001) / 0.5 + 0.0005;
    CHECKF(fabs(c.compute_s - (a > b ? a : b)) < 1e-9, "compute %g", c.compute_s);
    cpn_cluster_free(&cs[0]);
    cpn_cluster_free(&cs[1]);
}

/* A cluster whose ranks had half a core when timed (core_share 0.5)
 * steps half as fast: its compute doubles and its share of the batch
 * follows its rate. */
TEST(plan_prices_the_core_share)
{
    cpn_cluster cs[2];
    cpn_candidate c;
    two_parts(cs, &c);
    cpn_job_model j = job();
    c.sync = CPN_SYNC_DILOCO;
    set(&cs[0], "core_share", 0.5);
    cpn_plan_price(cs, NULL, 0, &j, &c);
    /* rates 500 and 500: shares 12 and 12; a's step (0.002 + 12 x 0.001 +
     * 0.0005) / 0.5, b's (0.002 + 12 x 0.001) / 0.5 + 0.0005 */
    CHECKF(c.batch[0] == 12 && c.batch[1] == 12, "shares %d %d", c.batch[0], c.batch[1]);
    CHECKF(fabs(c.compute_s - 0.0290) < 1e-9, "compute %g", c.compute_s);
    set(&cs[0], "core_share", 7); /* not a share: taken as a whole core */
    cpn_plan_price(cs, NULL, 0, &j, &c);
    CHECKF(c.batch[0] == 16 && fabs(c.compute_s - 0.0205) < 1e-9, "share %d compute %g",
           c.batch[0], c.compute_s);
    cpn_cluster_free(&cs[0]);
    cpn_cluster_free(&cs[1]);
}

TEST(plan_other_model_falls_back_to_peak)
{
    cpn_cluster cs[1];
    make(&cs[0], "a", 1, 1, 0.001, "gpt:vocab=64,ctx=8,layers=1,heads=2,dim=16");
    cpn_job_model j = job();
    cpn_candidate c;
    memset(&c, 0, sizeof c);
    c.n = 1;
    c.ranks[0] = 1;
    cpn_plan_price(cs, NULL, 0, &j, &c);
    CHECK(c.calibrated == 0);
    double want = 24 * j.flops_per_sample / (100e9 * 0.5);
    CHECKF(fabs(c.compute_s - want) < 1e-12 * (1 + want), "compute %g want %g", c.compute_s,
           want);
    /* the same model at another sequence length is not the job's either */
    snprintf(cs[0].calib_model, sizeof cs[0].calib_model, "%s", j.model);
    cs[0].calib_seq = 4;
    cpn_plan_price(cs, NULL, 0, &j, &c);
    CHECK(c.calibrated == 0);
    cs[0].calib_seq = 8;
    cpn_plan_price(cs, NULL, 0, &j, &c);
    CHECK(c.calibrated == 1 && fabs(c.compute_s - (0.002 + 0.024 + 0.0005)) < 1e-9);
    cpn_cluster_free(&cs[0]);
}

TEST(calibrated_for_round_trips)
{
    cpn_cluster c;
    make(&c, "a", 2, 1, 0.003, NULL);
    cpn_jo w;
    cpn_jo_init(&w);
    cpn_cluster_write(&w, NULL, &c);
    int rc;
    const char *text = cpn_jo_text(&w, &rc);
    cpn_cluster *back = NULL;
    int n = 0;
    char err[256] = "";
    CHECKF(text && cpn_clusters_parse(text, strlen(text), &back, &n, err, sizeof err) == 0,
           "%s", err);
    CHECK(n == 1);
    if (n == 1) {
        CHECK(!strcmp(back[0].calib_model, spec) && back[0].calib_seq == 8);
        CHECK(cpn_metric_value(&back[0], "train_sample_s", 0) == 0.003);
        cpn_cluster_free(&back[0]);
    }
    free(back);
    cpn_jo_free(&w);
    cpn_cluster_free(&c);
}

/* qos.H "Ts": an outer period in seconds, as many of the predicted steps
 * (the fastest part's; the training scales a slower part's period). */
TEST(period_in_seconds_becomes_steps)
{
    const char *text = "{\"schema\": \"weft-cpn-job/1\", \"model\": "
                       "\"gpt:vocab=32,ctx=8,layers=1,heads=2,dim=16\", \"steps\": 1000, "
                       "\"global_batch\": 24, \"seq\": 8, \"qos\": {\"H\": \"0.41s\"}}";
    cpn_job jb;
    char err[256] = "";
    CHECKF(cpn_job_parse(text, strlen(text), &jb, err, sizeof err) == 0, "%s", err);
    CHECK(jb.m.period_s == 0.41 && jb.m.fixed_h == 0);
    cpn_cluster cs[2];
    make(&cs[0], "a", 1, 1, 0.001, NULL);
    make(&cs[1], "b", 1, 0.5, 0.001, NULL);
    jb.m.grad_bytes = 4e4;
    cpn_candidate c;
    memset(&c, 0, sizeof c);
    c.n = 2;
    c.idx[0] = 0, c.idx[1] = 1;
    c.ranks[0] = c.ranks[1] = 1;
    for (int y = CPN_SYNC_DILOCO; y <= CPN_SYNC_STREAMING; y++) {
        c.sync = (cpn_sync)y;
        cpn_plan_price(cs, NULL, 0, &jb.m, &c);
        /* a step of 0.0205 s: 0.41 s is 20 of them */
        CHECKF(c.H == 20, "%s H %d", cpn_sync_name(c.sync), c.H);
    }
    jb.m.steps = 8; /* never past the run */
    cpn_plan_price(cs, NULL, 0, &jb.m, &c);
    CHECK(c.H == 8);
    jb.m.period_s = 0.001; /* at least one step */
    cpn_plan_price(cs, NULL, 0, &jb.m, &c);
    CHECK(c.H == 1);
    cpn_job_free(&jb);
    const char *bad = "{\"model\": \"gpt:vocab=32,ctx=8,layers=1,heads=2,dim=16\", \"steps\": 10, "
                      "\"global_batch\": 4, \"qos\": {\"H\": \"30min\"}}";
    CHECK(cpn_job_parse(bad, strlen(bad), &jb, err, sizeof err) != 0 && strstr(err, "qos.H"));
    cpn_cluster_free(&cs[0]);
    cpn_cluster_free(&cs[1]);
}

/* A plan priced as it stands (weft-cpn plan --price): its shares and H
 * kept, the slowest part setting the step. */
TEST(given_plan_priced_as_it_stands)
{
    cpn_cluster cs[2];
    cpn_candidate c;
    two_parts(cs, &c);
    cpn_job_model j = job();
    c.batch[0] = c.batch[1] = 12;
    c.sync = CPN_SYNC_STREAMING;
    c.H = 7;
    c.given = 1;
    cpn_plan_price(cs, NULL, 0, &j, &c);
    CHECK(c.batch[0] == 12 && c.batch[1] == 12 && c.H == 7 && c.T == 7);
    CHECKF(fabs(c.compute_s - ((0.002 + 12 * 0.001) / 0.5 + 0.0005)) < 1e-9, "compute %g",
           c.compute_s);
    c.given = 0;
    cpn_plan_price(cs, NULL, 0, &j, &c);
    CHECK(c.batch[0] == 16 && c.batch[1] == 8);
    cpn_cluster_free(&cs[0]);
    cpn_cluster_free(&cs[1]);
}
