/* The planner's calibration (weft-sim plan --calib/--calibrate): block
 * costs, collective constants and cores from a calibration file rank the
 * layouts as those numbers imply; a missing file falls back to assumed
 * inputs and says so; a bad line is refused by number; the engine probe
 * writes the shapes a plan needs. Nothing here is timed against a clock:
 * predicted seconds are compared with the file's own numbers. */
#include "test.h"
#include "weft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL "gpt:vocab=256,ctx=32,layers=2,heads=4,dim=64"
#define KEY "gpt:v256,t32,h4,d64"

static char dir[64];

/* A calibration file: cores, weft-tune's line, and every block shape a
 * plan of up to 4 ranks at batch 16 asks for, each micro-batch of r
 * sequences costing r times the per-sequence seconds given. */
static const char *write_calib(const char *name, int cores, const char *tune, double embed,
                               double block, double head)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    fprintf(f, "# made by test_plan_calib\ncores %d\n", cores);
    if (tune)
        fprintf(f, "tune %s\n", tune);
    double per[3] = { embed, block, head };
    for (int r = 1; r <= 16; r++)
        for (int k = 0; k < 3; k++)
            fprintf(f, "block %s %d 32 %d %.9g %.9g %.9g\n", KEY, r, k, per[k] * r, per[k] * r,
                    k == 0 ? 0.0 : per[k] * r);
    fclose(f);
    return path;
}

static const char *with_lines(const char *f, const char *name, const char *lines);

typedef struct {
    weft_sim_plan *pl;
    weft_sim_layout best;
    char inputs[1024];
} plan_out;

static int plan(const char *calib, int calibrate, int ranks, plan_out *o)
{
    weft_sim_topo *t;
    char err[512];
    memset(o, 0, sizeof *o);
    if (weft_sim_topo_load(&t, "host", err, sizeof err))
        return -1;
    weft_sim_plan_query q = { .batch = 16, .ranks = ranks, .topo = t, .gflops = 10,
                              .optim_bytes = 8, .calib = calib, .calibrate = calibrate };
    int rc = weft_model_config_parse(MODEL, &q.model);
    if (!rc)
        rc = weft_sim_plan_run(&q, &o->pl, err, sizeof err);
    weft_sim_topo_free(t);
    if (rc) {
        snprintf(o->inputs, sizeof o->inputs, "%s", err);
        return rc;
    }
    weft_sim_plan_inputs(o->pl, o->inputs, sizeof o->inputs);
    return weft_sim_plan_layout(o->pl, weft_sim_plan_best(o->pl), &o->best);
}

static int layout_of(const plan_out *o, int tp, int pp, int dp, weft_sim_layout *l);

/* The predicted step of the first listed layout with tp, pp (any schedule). */
static double step_of(const plan_out *o, int tp, int pp, int dp)
{
    weft_sim_layout l;
    for (int i = 0; i < weft_sim_plan_count(o->pl); i++)
        if (weft_sim_plan_layout(o->pl, i, &l) == 0 && l.tp == tp && l.pp == pp && l.dp == dp)
            return l.step_s;
    return -1;
}

TEST(one_rank_is_the_files_block_costs)
{
    /* one rank, one micro-batch of 16: the step is the blocks' seconds
     * (embedding 2 passes, each block and the head 3), nothing else */
    const char *f = write_calib("one", 1, "alpha=1e-6,beta=1e-10,gamma=1e-10", 1e-4, 1e-3, 2e-4);
    plan_out o;
    CHECKF(plan(f, 0, 1, &o) == 0, "%s", o.inputs);
    double want = 16 * (2 * 1e-4 + 2 * 3 * 1e-3 + 3 * 2e-4);
    CHECKF(fabs(o.best.step_s - want) < 1e-9, "%.9f want %.9f", o.best.step_s, want);
    CHECKF(strstr(o.inputs, "block costs: measured") && strstr(o.inputs, "collectives: measured") &&
               strstr(o.inputs, "cores: 1 measured"),
           "%s", o.inputs);
    weft_sim_plan_free(o.pl);
}

TEST(update_is_charged_a_parameter)
{
    /* the same rank with a step's work after backward of 1 ns a parameter
     * (update 8: AdamW's, as the plan's optimiser): the step grows by the
     * model's 118528 parameters' nanoseconds (embedding 256 x 64 + 32 x
     * 64, two blocks of 12 x 64^2 + 13 x 64, the final LayerNorm 2 x 64) */
    const char *f = write_calib("upd", 1, "alpha=1e-6,beta=1e-10,gamma=1e-10", 1e-4, 1e-3, 2e-4);
    const char *path = with_lines(f, "upd2", "update 8 1e-9\n");
    plan_out o;
    CHECK(path != NULL);
    CHECKF(plan(path, 0, 1, &o) == 0, "%s", o.inputs);
    double want = 16 * (2 * 1e-4 + 2 * 3 * 1e-3 + 3 * 2e-4) + 118528 * 1e-9;
    CHECKF(fabs(o.best.step_s - want) < 1e-9, "%.9f want %.9f", o.best.step_s, want);
    CHECKF(strstr(o.inputs, "update a parameter: adamw 1 ns") != NULL, "%s", o.inputs);
    weft_sim_plan_free(o.pl);
}

/* 2 ranks on 2 cores, communication nearly free: tp 2's step is half the
 * whole blocks' seconds until the calibration has a tensor group's own
 * slices (tpblock lines, as weftrun -n 2 weft-sim sync --model measures
 * them), then exactly those slices' seconds, which the group's
 * collectives are inside of (no wait added): the embedding 1e-4 + 2e-5,
 * two blocks of 3e-3 + 4e-3 + 2e-3, the head 1e-3 + 5e-4 + 2e-4. A line
 * naming the model as weft-train does counts as its key. */
TEST(tensor_slices_measured)
{
    const char *tune = "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15,msg=0,msg_over=0";
    const char *f = write_calib("tp0", 2, tune, 1e-5, 1e-3, 1e-4);
    plan_out a, b;
    CHECKF(plan(f, 0, 2, &a) == 0, "%s", a.inputs);
    CHECKF(strstr(a.inputs, "tensor-parallel slices: not measured") != NULL, "%s", a.inputs);
    double half = 16 * (2 * 1e-5 + 2 * 3 * 1e-3 + 3 * 1e-4) / 2;
    CHECKF(fabs(step_of(&a, 2, 1, 1) - half) < 1e-5 * half, "%.9f want %.9f",
           step_of(&a, 2, 1, 1), half);
    char lines[1024];
    int at = 0;
    for (int sp = 0; sp <= 1; sp++)
        at += snprintf(lines + at, sizeof lines - (size_t)at,
                       "tpblock " KEY " 2 %d 16 32 0 1e-4 0 2e-5\n"
                       "tpblock " MODEL " 2 %d 16 32 1 3e-3 4e-3 2e-3\n"
                       "tpblock " KEY " 2 %d 16 32 2 1e-3 5e-4 2e-4\n", sp, sp, sp);
    const char *path = with_lines(f, "tp1", lines);
    CHECK(path != NULL);
    CHECKF(plan(path, 0, 2, &b) == 0, "%s", b.inputs);
    CHECKF(strstr(b.inputs, "tensor-parallel slices: 6 shapes measured") != NULL, "%s",
           b.inputs);
    double want = 1.2e-4 + 2 * 9e-3 + 1.7e-3;
    CHECKF(fabs(step_of(&b, 2, 1, 1) - want) < 1e-9, "%.9f want %.9f", step_of(&b, 2, 1, 1),
           want);
    /* one rank's layout keeps the whole blocks' seconds */
    CHECKF(fabs(step_of(&b, 1, 1, 2) - step_of(&a, 1, 1, 2)) < 1e-12, "%.9f %.9f",
           step_of(&a, 1, 1, 2), step_of(&b, 1, 1, 2));
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
    /* a later line for the same slice at the same rank count (here
     * neither says one) replaces the earlier: without sequence
     * parallelism blocks of 1e-3 each pass, 6e-3 less a block; with it,
     * as before */
    char later[2048];
    snprintf(later, sizeof later, "%stpblock " KEY " 2 0 16 32 1 1e-3 1e-3 1e-3\n", lines);
    path = with_lines(f, "tp2", later);
    CHECK(path != NULL);
    CHECKF(plan(path, 0, 2, &b) == 0, "%s", b.inputs);
    weft_sim_layout l0, l1 = { .step_s = -1 };
    for (int i = 0, n0 = 0, n1 = 0; i < weft_sim_plan_count(b.pl); i++)
        if (weft_sim_plan_layout(b.pl, i, &l0) == 0 && l0.tp == 2 && l0.pp == 1 && l0.zero == 0) {
            if (!l0.sp && !n0++)
                l1 = l0;
            if (l0.sp && !n1++)
                CHECKF(fabs(l0.step_s - want) < 1e-9, "sp 1: %.9f", l0.step_s);
        }
    CHECKF(fabs(l1.step_s - (want - 2 * 6e-3)) < 1e-9, "sp 0: %.9f want %.9f", l1.step_s,
           want - 2 * 6e-3);
    weft_sim_plan_free(b.pl);
    /* a slice line without its sp column is refused by number */
    path = with_lines(f, "tpbad", "tpblock " KEY " 2 16 32 1 3e-3 4e-3 2e-3\n");
    CHECK(path != NULL);
    CHECK(plan(path, 0, 2, &a) == WEFT_ECONFIG);
    CHECKF(strstr(a.inputs, ": tpblock") != NULL, "%s", a.inputs);
}

/* A rank's CPU for the same slice is more with more ranks sharing the
 * cores, so each slice line says the ranks of its probe and a plan takes
 * the line of its own rank count, else the nearest: 2 ranks with a block
 * of 3e-3 + 4e-3 + 2e-3 measured at 2 (or 4) ranks and of 1e-3 each pass
 * at 8 price tp 2 at the embedding 1e-4 + 2e-5, two blocks of 9e-3, the
 * head 1e-3 + 5e-4 + 2e-4, whichever line comes last. */
TEST(tensor_slices_of_the_plans_rank_count)
{
    const char *tune = "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15,msg=0,msg_over=0";
    double want = 1.2e-4 + 2 * 9e-3 + 1.7e-3;
    static const int at_ranks[3][2] = { { 2, 8 }, { 8, 2 }, { 4, 8 } };
    for (int c = 0; c < 3; c++) {
        char lines[2048];
        int at = 0;
        for (int sp = 0; sp <= 1; sp++)
            at += snprintf(lines + at, sizeof lines - (size_t)at,
                           "tpblock " KEY " 2 %d 16 32 0 1e-4 0 2e-5\n"
                           "tpblock " KEY " 2 %d 16 32 2 1e-3 5e-4 2e-4\n", sp, sp);
        for (int i = 0; i < 2; i++)
            for (int sp = 0; sp <= 1; sp++)
                at += snprintf(lines + at, sizeof lines - (size_t)at,
                               at_ranks[c][i] == 8 ? "tpblock " KEY " 2 %d 16 32 1 1e-3 1e-3 1e-3 %d\n"
                                                   : "tpblock " KEY " 2 %d 16 32 1 3e-3 4e-3 2e-3 %d\n",
                               sp, at_ranks[c][i]);
        const char *f = write_calib("tpn0", 2, tune, 1e-5, 1e-3, 1e-4);
        const char *path = with_lines(f, "tpn1", lines);
        plan_out o;
        CHECK(path != NULL);
        CHECKF(plan(path, 0, 2, &o) == 0, "%s", o.inputs);
        CHECKF(fabs(step_of(&o, 2, 1, 1) - want) < 1e-9, "ranks %d, %d: %.9f want %.9f",
               at_ranks[c][0], at_ranks[c][1], step_of(&o, 2, 1, 1), want);
        weft_sim_plan_free(o.pl);
    }
    /* a count below the group's is refused */
    const char *f = write_calib("tpn2", 2, tune, 1e-5, 1e-3, 1e-4);
    const char *path = with_lines(f, "tpn3", "tpblock " KEY " 2 0 16 32 1 3e-3 4e-3 2e-3 1\n");
    plan_out o;
    CHECK(path != NULL);
    CHECK(plan(path, 0, 2, &o) == WEFT_ECONFIG);
}

/* 4 ranks on 2 cores with the slices of tp 2 (micro-batches of 8, dp 2)
 * and tp 4 (16) measured: a pair's collectives are inside its slices'
 * CPU, so a slower round (alpha 10 ms) leaves tp 2 x dp 2's pipeline as
 * it was; a group of 4 on 2 cores also sleeps at each round, woken, which
 * no CPU clock holds, so tp 4's rounds at alpha_over 10 ms still
 * lengthen its pipeline, by more than its 10 collectives a block pass
 * could hide. */
TEST(tensor_slices_keep_the_sleepers_waits)
{
    char lines[2048];
    int at = 0;
    for (int tp = 2; tp <= 4; tp *= 2)
        for (int sp = 0; sp <= 1; sp++)
            at += snprintf(lines + at, sizeof lines - (size_t)at,
                           "tpblock " KEY " %d %d %d 32 0 1e-5 0 1e-5\n"
                           "tpblock " KEY " %d %d %d 32 1 1e-3 1e-3 1e-3\n"
                           "tpblock " KEY " %d %d %d 32 2 1e-4 1e-4 1e-4\n", tp, sp, 4 * tp,
                           tp, sp, 4 * tp, tp, sp, 4 * tp);
    /* write_calib and with_lines return the same buffers: one at a time */
    const char *fast = write_calib("fast", 2, "alpha=1e-9,alpha_over=1e-9,beta=1e-15,"
                                   "gamma=1e-15,msg=0,msg_over=0", 1e-5, 1e-3, 1e-4);
    plan_out a, b;
    weft_sim_layout la, lb;
    const char *pf = with_lines(fast, "fast-tp", lines);
    CHECK(pf != NULL);
    CHECKF(plan(pf, 0, 4, &a) == 0, "%s", a.inputs);
    const char *slow = write_calib("slowr", 2, "alpha=1e-2,alpha_over=1e-2,beta=1e-15,"
                                   "gamma=1e-15,msg=0,msg_over=0", 1e-5, 1e-3, 1e-4);
    const char *ps = with_lines(slow, "slow-tp", lines);
    CHECK(ps != NULL);
    CHECKF(plan(ps, 0, 4, &b) == 0, "%s", b.inputs);
    CHECK(layout_of(&a, 2, 1, 2, &la) == 0 && layout_of(&b, 2, 1, 2, &lb) == 0);
    CHECKF(fabs(la.pipe_s - lb.pipe_s) < 1e-12, "tp 2: %.9f %.9f", la.pipe_s, lb.pipe_s);
    CHECK(layout_of(&a, 4, 1, 1, &la) == 0 && layout_of(&b, 4, 1, 1, &lb) == 0);
    /* fast: the node's work, 4 ranks' slices (2e-5 + 2 x 3e-3 + 3e-4) on 2 cores */
    CHECKF(fabs(la.pipe_s - 4 * 6.32e-3 / 2) < 1e-9, "tp 4: %.9f", la.pipe_s);
    CHECKF(lb.pipe_s > la.pipe_s + 10 * 1e-2, "tp 4: %.9f %.9f", la.pipe_s, lb.pipe_s);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
}

/* 8 ranks on 2 cores with tp 4's slices measured (micro-batches of 8,
 * dp 2): a group of 4 sleeps at its rounds while the other 4 ranks hold
 * the cores, so its waits are their compute, which the node's work over
 * the cores already counts: tp 4 x dp 2's pipeline is 8 ranks' slices
 * over 2 cores whatever weft-sim sync's wait (1 or 10 ms). */
TEST(tensor_slices_of_a_part_of_the_node)
{
    char lines[1024];
    int at = 0;
    for (int sp = 0; sp <= 1; sp++)
        at += snprintf(lines + at, sizeof lines - (size_t)at,
                       "tpblock " KEY " 4 %d 8 32 0 1e-5 0 1e-5 8\n"
                       "tpblock " KEY " 4 %d 8 32 1 1e-3 1e-3 1e-3 8\n"
                       "tpblock " KEY " 4 %d 8 32 2 1e-4 1e-4 1e-4 8\n", sp, sp, sp);
    const char *tune = "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15,msg=0,msg_over=0";
    plan_out o[2];
    weft_sim_layout l[2];
    for (int k = 0; k < 2; k++) {
        char all[1200];
        snprintf(all, sizeof all, "%ssync 8 %s\nchain 8 1\n", lines, k ? "0.01" : "0.001");
        const char *f = write_calib(k ? "part10" : "part1", 2, tune, 1e-5, 1e-3, 1e-4);
        const char *p = with_lines(f, k ? "part10-tp" : "part1-tp", all);
        CHECK(p != NULL);
        CHECKF(plan(p, 0, 8, &o[k]) == 0, "%s", o[k].inputs);
        CHECK(layout_of(&o[k], 4, 1, 2, &l[k]) == 0);
        CHECKF(fabs(l[k].pipe_s - 8 * 6.32e-3 / 2) < 1e-9, "sync %s: %.9f", k ? "10 ms" : "1 ms",
               l[k].pipe_s);
    }
    for (int k = 0; k < 2; k++)
        weft_sim_plan_free(o[k].pl);
}

TEST(communication_prices_rank_the_layouts)
{
    /* the same blocks; weft-tune's constants nearly free, then a slow
     * wire (1 MB/s): free communication makes the bubble-free data
     * parallel layout the best, a slow wire one without its gradient sum */
    const char *cheap = write_calib("cheap", 4, "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15",
                                    1e-5, 1e-3, 1e-4);
    plan_out a, b;
    CHECKF(plan(cheap, 0, 4, &a) == 0, "%s", a.inputs);
    CHECKF(a.best.pp == 1, "cheap: best tp %d pp %d dp %d", a.best.tp, a.best.pp, a.best.dp);
    double dp4 = step_of(&a, 1, 1, 4), pp4 = step_of(&a, 1, 4, 1);
    CHECKF(dp4 > 0 && pp4 > dp4, "dp4 %.6f pp4 %.6f", dp4, pp4);
    const char *slow = write_calib("slow", 4, "alpha=1e-6,alpha_over=1e-6,beta=1e-6,gamma=1e-9",
                                   1e-5, 1e-3, 1e-4);
    CHECKF(plan(slow, 0, 4, &b) == 0, "%s", b.inputs);
    CHECKF(b.best.dp == 1, "slow: best tp %d pp %d dp %d", b.best.tp, b.best.pp, b.best.dp);
    CHECK(step_of(&b, 1, 1, 4) > step_of(&b, 1, 4, 1));
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
}

TEST(ranks_share_the_cores)
{
    /* 4 ranks on 1 core do 4 ranks' compute on it: pure data parallel,
     * communication free, is 4 times slower than on 4 cores */
    const char *tune = "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15,msg=0,msg_over=0";
    plan_out a, b;
    CHECKF(plan(write_calib("c4", 4, tune, 1e-5, 1e-3, 1e-4), 0, 4, &a) == 0, "%s", a.inputs);
    CHECKF(plan(write_calib("c1", 1, tune, 1e-5, 1e-3, 1e-4), 0, 4, &b) == 0, "%s", b.inputs);
    double s4 = step_of(&a, 1, 1, 4), s1 = step_of(&b, 1, 1, 4);
    CHECKF(s1 > 3.9 * s4 && s1 < 4.1 * s4, "1 core %.6f 4 cores %.6f", s1, s4);
    CHECK(strstr(b.inputs, "cores: 1 measured") != NULL);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
}

TEST(missing_calibration_falls_back)
{
    char path[128];
    snprintf(path, sizeof path, "%s/none", dir);
    plan_out a, b;
    CHECKF(plan(path, 0, 4, &a) == 0, "%s", a.inputs);
    CHECKF(strstr(a.inputs, "no calibration") && strstr(a.inputs, "assumed"), "%s", a.inputs);
    CHECK(plan(NULL, 0, 4, &b) == 0);
    CHECK(a.best.step_s == b.best.step_s && a.best.tp == b.best.tp && a.best.pp == b.best.pp);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
    /* a file without block lines: blocks assumed, said so */
    snprintf(path, sizeof path, "%s/cores-only", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fprintf(f, "cores 2\n");
        fclose(f);
    }
    CHECKF(plan(path, 0, 4, &a) == 0, "%s", a.inputs);
    CHECKF(strstr(a.inputs, "block costs: assumed") && strstr(a.inputs, "collectives: ") &&
               strstr(a.inputs, "cores: 2 measured"),
           "%s", a.inputs);
    weft_sim_plan_free(a.pl);
}

/* A copy of calibration f with extra lines, at dir/name. */
static const char *with_lines(const char *f, const char *name, const char *lines)
{
    static char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *in = fopen(f, "r"), *out = fopen(path, "w");
    if (in && out) {
        char line[256];
        while (fgets(line, sizeof line, in))
            fputs(line, out);
        fputs(lines, out);
    }
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    return in && out ? path : NULL;
}

TEST(sync_on_shared_cores)
{
    /* 4 ranks on 2 cores: weft-sim sync's wait (a rank woken onto cores
     * that computing ranks hold) slows every pipeline message, and no
     * group's rounds: a pair fits the cores and meets spinning (tp 2,
     * dp 2), a group of all 4 meets as weft-tune measured it; its chain's
     * one core holds a pipeline's stages */
    const char *tune = "alpha=1e-6,alpha_over=1e-5,beta=1e-10,gamma=1e-10,msg=0,msg_over=0";
    const char *f = write_calib("nosync", 2, tune, 1e-5, 1e-3, 1e-4);
    plan_out a, b;
    CHECKF(plan(f, 0, 4, &a) == 0, "%s", a.inputs);
    CHECKF(strstr(a.inputs, "sync on shared cores: not measured") != NULL, "%s", a.inputs);
    const char *path = with_lines(f, "sync", "sync 4 0.001\nchain 4 1\nsync 8 0.01\n");
    CHECK(path != NULL);
    CHECKF(plan(path, 0, 4, &b) == 0, "%s", b.inputs);
    CHECKF(strstr(b.inputs, "sync on shared cores: 1 ms, a chain 1 cores at 4 ranks") != NULL,
           "%s", b.inputs);
    int same[][3] = { { 1, 1, 4 }, { 4, 1, 1 }, { 2, 1, 2 } };
    for (int i = 0; i < 3; i++)
        CHECKF(fabs(step_of(&a, same[i][0], 1, same[i][2]) -
                    step_of(&b, same[i][0], 1, same[i][2])) < 1e-12,
               "tp %d: %.9f %.9f", same[i][0], step_of(&a, same[i][0], 1, same[i][2]),
               step_of(&b, same[i][0], 1, same[i][2]));
    CHECKF(step_of(&b, 1, 2, 2) > step_of(&a, 1, 2, 2) + 1e-3, "pp 2: %.9f %.9f",
           step_of(&a, 1, 2, 2), step_of(&b, 1, 2, 2));
    /* a pipeline of 4 on the chain's one core: at least all its work */
    double work = 16 * (2 * 1e-5 + 2 * 3 * 1e-3 + 3 * 1e-4);
    CHECKF(step_of(&b, 1, 4, 1) > work && step_of(&b, 1, 4, 1) > step_of(&a, 1, 4, 1),
           "pp 4: %.9f %.9f, work %.9f", step_of(&a, 1, 4, 1), step_of(&b, 1, 4, 1), work);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
    /* 8 ranks: a group of 4 is more than the cores and fewer than the
     * node's ranks, so a member woken at each round waits for a core as
     * the probe measured (here long enough to outlast the node's work);
     * a group of all 8 does not */
    CHECKF(plan(f, 0, 8, &a) == 0, "%s", a.inputs);
    CHECKF(plan(path, 0, 8, &b) == 0, "%s", b.inputs);
    CHECKF(step_of(&b, 4, 1, 2) > step_of(&a, 4, 1, 2) + 1e-3, "tp 4: %.9f %.9f",
           step_of(&a, 4, 1, 2), step_of(&b, 4, 1, 2));
    CHECK(fabs(step_of(&a, 1, 1, 8) - step_of(&b, 1, 1, 8)) < 1e-12);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
}

/* The layout of tp, pp, dp (any schedule) as the API gives it. */
static int layout_of(const plan_out *o, int tp, int pp, int dp, weft_sim_layout *l)
{
    for (int i = 0; i < weft_sim_plan_count(o->pl); i++)
        if (weft_sim_plan_layout(o->pl, i, l) == 0 && l->tp == tp && l->pp == pp && l->dp == dp)
            return 0;
    return -1;
}

/* 4 ranks on 2 cores at dp 4 (4 sequences a rank), communication nearly
 * free: the whole blocks probed alone give the node's work 4 x 4 x (2e-5 +
 * 2 x 3e-3 + 3e-4) over 2 cores; with the blocks measured as every rank
 * of the node ran them at once (tpblock lines of TP 1, here at 8 ranks,
 * the nearest count) a rank's is 1e-4 + 2e-5, two blocks of 3 x 2e-3 and
 * the head 1e-3 + 5e-4 + 2e-4, so the step 4 x 13.82e-3 over 2 cores. With
 * a core a rank (4 cores) the lines do not apply: the blocks alone. A TP 1
 * line must say its RANKS (>= 2) and has no SP. */
TEST(whole_blocks_on_shared_cores)
{
    const char *tune = "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15,msg=0,msg_over=0";
    const char *lines = "tpblock " KEY " 1 0 4 32 0 1e-4 0 2e-5 8\n"
                        "tpblock " MODEL " 1 0 4 32 1 2e-3 2e-3 2e-3 8\n"
                        "tpblock " KEY " 1 0 4 32 2 1e-3 5e-4 2e-4 8\n";
    plan_out a, b, c;
    weft_sim_layout la, lb, lc;
    const char *f = write_calib("sh0", 2, tune, 1e-5, 1e-3, 1e-4);
    CHECKF(plan(f, 0, 4, &a) == 0, "%s", a.inputs);
    const char *p2 = with_lines(f, "sh1", lines);
    CHECK(p2 != NULL);
    CHECKF(plan(p2, 0, 4, &b) == 0, "%s", b.inputs);
    CHECKF(strstr(b.inputs, "whole blocks on the shared cores: 3 shapes measured") != NULL, "%s",
           b.inputs);
    CHECK(layout_of(&a, 1, 1, 4, &la) == 0 && layout_of(&b, 1, 1, 4, &lb) == 0);
    double alone = 4 * 4 * 6.32e-3 / 2, shared = 4 * 13.82e-3 / 2;
    CHECKF(fabs(la.pipe_s - alone) < 1e-9, "alone %.9f want %.9f", la.pipe_s, alone);
    CHECKF(fabs(lb.pipe_s - shared) < 1e-9, "shared %.9f want %.9f", lb.pipe_s, shared);
    const char *f4 = write_calib("sh2", 4, tune, 1e-5, 1e-3, 1e-4);
    const char *p4 = with_lines(f4, "sh3", lines);
    CHECK(p4 != NULL);
    CHECKF(plan(p4, 0, 4, &c) == 0, "%s", c.inputs);
    CHECK(layout_of(&c, 1, 1, 4, &lc) == 0);
    CHECKF(fabs(lc.pipe_s - 4 * 6.32e-3) < 1e-9, "4 cores %.9f", lc.pipe_s);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
    weft_sim_plan_free(c.pl);
    static const char *bad[] = { "tpblock " KEY " 1 0 4 32 1 2e-3 2e-3 2e-3\n",
                                 "tpblock " KEY " 1 0 4 32 1 2e-3 2e-3 2e-3 1\n",
                                 "tpblock " KEY " 1 1 4 32 1 2e-3 2e-3 2e-3 8\n" };
    for (int i = 0; i < 3; i++) {
        const char *pb = with_lines(write_calib("sh4", 2, tune, 1e-5, 1e-3, 1e-4), "sh5", bad[i]);
        plan_out o;
        CHECK(pb != NULL);
        CHECKF(plan(pb, 0, 4, &o) == WEFT_ECONFIG, "%s", bad[i]);
    }
}

/* The pipe_s of the layout tp x pp x dp with schedule sched and m
 * micro-batches; -1 when not listed. */
static double pipe_of(const plan_out *o, int tp, int pp, int dp, const char *sched, int m)
{
    weft_sim_layout l;
    for (int i = 0; i < weft_sim_plan_count(o->pl); i++)
        if (weft_sim_plan_layout(o->pl, i, &l) == 0 && l.tp == tp && l.pp == pp && l.dp == dp &&
            !strcmp(l.schedule, sched) && l.m == m)
            return l.pipe_s;
    return -1;
}

/* 2 ranks on 1 core, communication nearly free: one core runs both
 * stages' work, so pp 2's step (1f1b, m = 2) is all of it. A message's
 * end costing 1 ms of CPU on the shared cores (msgcpu 2 1e-3) adds, for
 * each of the 2 micro-batches, the first stage's send and the second's
 * receive in the forward and the same in the backward: 8 ms. dp 2 sends
 * nothing through a pipeline and stays as it was. */
TEST(pipeline_messages_cost_cpu)
{
    const char *tune = "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15,msg=0,msg_over=0";
    plan_out a, b;
    const char *f = write_calib("msg0", 1, tune, 1e-5, 1e-3, 1e-4);
    CHECKF(plan(f, 0, 2, &a) == 0, "%s", a.inputs);
    const char *p = with_lines(f, "msg1", "msgcpu 2 1e-3\n");
    CHECK(p != NULL);
    CHECKF(plan(p, 0, 2, &b) == 0, "%s", b.inputs);
    CHECKF(strstr(b.inputs, "1e+03 us of CPU a message's end") != NULL, "%s", b.inputs);
    double pa = pipe_of(&a, 1, 2, 1, "1f1b", 2), pb = pipe_of(&b, 1, 2, 1, "1f1b", 2);
    double work = 16 * (2 * 1e-5 + 2 * 3 * 1e-3 + 3 * 1e-4);
    CHECKF(fabs(pa - work) < 1e-6, "without %.9f, the work %.9f", pa, work);
    CHECKF(fabs(pb - pa - 8e-3) < 1e-6, "with %.9f without %.9f", pb, pa);
    double da = pipe_of(&a, 1, 1, 2, "1f1b", 1), db = pipe_of(&b, 1, 1, 2, "1f1b", 1);
    CHECKF(da > 0 && fabs(da - db) < 1e-12, "dp 2: %.9f %.9f", da, db);
    /* an end's part a second of the piece waited for (msgcpu 2 0 0.5):
     * the stages are the embedding and a block, a block and the head, so
     * a micro-batch of 8 sequences sends the first's forward, 8 x (1e-5 +
     * 1e-3) s, and the second's input gradient, 8 x (1e-3 + 1e-4) s, each
     * charged half at both ends: the 2 micro-batches add 2 x (8.08 + 8.8)
     * ms */
    plan_out c;
    p = with_lines(f, "msg2", "msgcpu 2 0 0.5\n");
    CHECK(p != NULL);
    CHECKF(plan(p, 0, 2, &c) == 0, "%s", c.inputs);
    CHECKF(strstr(c.inputs, "a message's end also 0.5 of its wait at 2 ranks") != NULL, "%s",
           c.inputs);
    double pc = pipe_of(&c, 1, 2, 1, "1f1b", 2), dc = pipe_of(&c, 1, 1, 2, "1f1b", 1);
    CHECKF(fabs(pc - pa - 2 * (8.08e-3 + 8.8e-3)) < 1e-6, "with %.9f without %.9f", pc, pa);
    CHECKF(fabs(dc - da) < 1e-12, "dp 2: %.9f %.9f", dc, da);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
    weft_sim_plan_free(c.pl);
}

/* 4 ranks on 2 cores at tp 2 x dp 2: a group's waits in its collectives
 * hold no core, and the other group computes meanwhile, so a longer wait
 * lengthens the step by less than itself while the node's work over its
 * cores bounds it; a wait longer than that work sets the step (a rank's
 * own path: its work and its waits). */
TEST(waits_overlap_other_ranks_work)
{
    const char *f1 = write_calib("alpha1", 2, "alpha=1e-6,alpha_over=1e-6,beta=1e-10,gamma=1e-10,"
                                 "msg=0,msg_over=0", 1e-5, 1e-3, 1e-4);
    plan_out a, b, c;
    weft_sim_layout la, lb, lc;
    CHECKF(plan(f1, 0, 4, &a) == 0, "%s", a.inputs);
    const char *f2 = write_calib("alpha2", 2, "alpha=2e-5,alpha_over=1e-6,beta=1e-10,"
                                 "gamma=1e-10,msg=0,msg_over=0", 1e-5, 1e-3, 1e-4);
    CHECKF(plan(f2, 0, 4, &b) == 0, "%s", b.inputs);
    const char *f3 = write_calib("alpha3", 2, "alpha=2e-2,alpha_over=1e-6,beta=1e-10,"
                                 "gamma=1e-10,msg=0,msg_over=0", 1e-5, 1e-3, 1e-4);
    CHECKF(plan(f3, 0, 4, &c) == 0, "%s", c.inputs);
    CHECK(layout_of(&a, 2, 1, 2, &la) == 0 && layout_of(&b, 2, 1, 2, &lb) == 0 &&
          layout_of(&c, 2, 1, 2, &lc) == 0);
    double dwait = lb.tp_s - la.tp_s, dpipe = lb.pipe_s - la.pipe_s;
    CHECKF(dwait > 1e-4 && dpipe >= 0 && dpipe < 0.5 * dwait, "waits +%.9f, step +%.9f", dwait,
           dpipe);
    /* the node's work: 16 sequences' blocks over 2 cores, whatever the layout */
    double work = 16 * (1e-5 + 2 * 3 * 1e-3 + 3 * 1e-4) / 2;
    CHECKF(la.pipe_s >= work - 1e-9, "%.9f, work %.9f", la.pipe_s, work);
    CHECKF(lc.pipe_s >= lc.tp_s && lc.tp_s > work, "%.9f, waits %.9f", lc.pipe_s, lc.tp_s);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
    weft_sim_plan_free(c.pl);
}

/* The data-parallel seconds of the first listed layout with tp, pp, dp at
 * ZeRO stage zero. */
static double dp_of(const plan_out *o, int tp, int pp, int dp, int zero)
{
    weft_sim_layout l;
    for (int i = 0; i < weft_sim_plan_count(o->pl); i++)
        if (weft_sim_plan_layout(o->pl, i, &l) == 0 && l.tp == tp && l.pp == pp && l.dp == dp &&
            l.zero == zero)
            return l.dp_s;
    return -1;
}

/* 4 ranks on 2 cores at dp 4, communication nearly free: every rank sums
 * the model's 118,528 gradients at once, and a rank's CPU in that
 * all-reduce (arcpu 4 4 118528 1e-3) is work the 2 cores must do for all
 * 4: the data-parallel part is 4 x 1 ms over 2 cores = 2 ms, at ZeRO 0 and
 * for ZeRO 3's reduce-scatter and all-gather together. Measured at 59,264
 * and 237,056 floats (0.2 and 2 ms) the rank's 118,528 are a third of the
 * way: 0.8 ms, so 1.6 ms. On 4 cores (a core a rank) the line changes
 * nothing. */
TEST(allreduce_cpu_on_shared_cores)
{
    const char *tune = "alpha=1e-9,alpha_over=1e-9,beta=1e-15,gamma=1e-15,msg=0,msg_over=0";
    plan_out a, b, c, d, e;
    const char *f = write_calib("ar0", 2, tune, 1e-5, 1e-3, 1e-4);
    CHECKF(plan(f, 0, 4, &a) == 0, "%s", a.inputs);
    const char *p = with_lines(f, "ar1", "arcpu 4 4 118528 1e-3\n");
    CHECK(p != NULL);
    CHECKF(plan(p, 0, 4, &b) == 0, "%s", b.inputs);
    CHECKF(strstr(b.inputs, "a data-parallel all-reduce's CPU: 1 sizes measured") != NULL, "%s",
           b.inputs);
    double a0 = dp_of(&a, 1, 1, 4, 0), b0 = dp_of(&b, 1, 1, 4, 0), b3 = dp_of(&b, 1, 1, 4, 3);
    CHECKF(a0 >= 0 && a0 < 1e-4, "without: %.9f", a0);
    CHECKF(fabs(b0 - 2e-3) < 1e-9, "ZeRO 0: %.9f, want 2 ms", b0);
    CHECKF(fabs(b3 - 2e-3) < 1e-9, "ZeRO 3: %.9f, want 2 ms", b3);
    /* the step is the pipeline's, unchanged, and these seconds */
    double sa = step_of(&a, 1, 1, 4), sb = step_of(&b, 1, 1, 4);
    CHECKF(fabs(sb - sa - (b0 - a0)) < 1e-9, "steps %.9f %.9f", sb, sa);
    p = with_lines(f, "ar2", "arcpu 4 4 237056 2e-3\narcpu 4 4 59264 2e-4\n");
    CHECK(p != NULL);
    CHECKF(plan(p, 0, 4, &c) == 0, "%s", c.inputs);
    double c0 = dp_of(&c, 1, 1, 4, 0);
    CHECKF(fabs(c0 - 1.6e-3) < 1e-9, "between two sizes: %.9f, want 1.6 ms", c0);
    const char *f4 = write_calib("ar4", 4, tune, 1e-5, 1e-3, 1e-4);
    CHECKF(plan(f4, 0, 4, &d) == 0, "%s", d.inputs);
    p = with_lines(f4, "ar5", "arcpu 4 4 118528 1e-3\n");
    CHECK(p != NULL);
    CHECKF(plan(p, 0, 4, &e) == 0, "%s", e.inputs);
    double d0 = dp_of(&d, 1, 1, 4, 0), e0 = dp_of(&e, 1, 1, 4, 0);
    CHECKF(d0 >= 0 && fabs(d0 - e0) < 1e-12, "4 cores: %.9f %.9f", d0, e0);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
    weft_sim_plan_free(c.pl);
    weft_sim_plan_free(d.pl);
    weft_sim_plan_free(e.pl);
}

TEST(bad_line_refused)
{
    char path[128];
    snprintf(path, sizeof path, "%s/bad", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fprintf(f, "cores 2\nblock " KEY " 4 32 7 1 1 1\n");
        fclose(f);
    }
    plan_out o;
    CHECK(plan(path, 0, 2, &o) == WEFT_ECONFIG);
    CHECKF(strstr(o.inputs, ":2:") != NULL, "%s", o.inputs);
    if ((f = fopen(path, "w")) != NULL) {
        fprintf(f, "cores 2\nupdate 6 1e-9\n"); /* no optimiser keeps 6 bytes */
        fclose(f);
    }
    CHECK(plan(path, 0, 2, &o) == WEFT_ECONFIG);
    CHECKF(strstr(o.inputs, ":2: update") != NULL, "%s", o.inputs);
    if ((f = fopen(path, "w")) != NULL) {
        fprintf(f, "cores 2\nsync 4 1e-3\nmsgcpu 1 1e-5\n"); /* a message needs 2 ranks */
        fclose(f);
    }
    CHECK(plan(path, 0, 2, &o) == WEFT_ECONFIG);
    CHECKF(strstr(o.inputs, ":3: msgcpu") != NULL, "%s", o.inputs);
    if ((f = fopen(path, "w")) != NULL) {
        fprintf(f, "cores 2\nmsgcpu 4 1e-5 -1\n"); /* no CPU given back */
        fclose(f);
    }
    CHECK(plan(path, 0, 2, &o) == WEFT_ECONFIG);
    CHECKF(strstr(o.inputs, ":2: msgcpu") != NULL, "%s", o.inputs);
    if ((f = fopen(path, "w")) != NULL) {
        fprintf(f, "cores 2\narcpu 4 5 100 1e-3\n"); /* a group of 5 of 4 ranks */
        fclose(f);
    }
    CHECK(plan(path, 0, 2, &o) == WEFT_ECONFIG);
    CHECKF(strstr(o.inputs, ":2: arcpu") != NULL, "%s", o.inputs);
}

TEST(probe_writes_the_shapes)
{
    /* --calibrate on a file that does not exist: every shape a 2-rank plan
     * needs is measured on the engine and saved; a second plan from the
     * file probes nothing */
    char path[128];
    snprintf(path, sizeof path, "%s/probed", dir);
    plan_out a, b;
    CHECKF(plan(path, 1, 2, &a) == 0, "%s", a.inputs);
    CHECKF(strstr(a.inputs, "block costs: measured") && strstr(a.inputs, "probed now") &&
               !strstr(a.inputs, " 0 probed now"),
           "%s", a.inputs);
    CHECK(access(path, R_OK) == 0);
    CHECKF(plan(path, 0, 2, &b) == 0, "%s", b.inputs);
    CHECKF(strstr(b.inputs, " 0 probed now") != NULL, "%s", b.inputs);
    /* the optimiser's update timed once, kept in the file */
    CHECKF(strstr(a.inputs, "update a parameter: adamw ") && strstr(b.inputs, "adamw "), "%s",
           b.inputs);
    /* the file keeps 9 digits */
    CHECKF(fabs(b.best.step_s - a.best.step_s) <= 1e-6 * a.best.step_s, "%.9g %.9g", b.best.step_s,
           a.best.step_s);
    weft_sim_plan_free(a.pl);
    weft_sim_plan_free(b.pl);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

TEST_INIT
{
    snprintf(dir, sizeof dir, "/tmp/weft-plan-calib-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    atexit(cleanup);
    /* no weft-tune file of this host in the way of the files' own lines */
    setenv("WEFT_TUNE_FILE", "", 1);
}
