/* The simulator behind include/weft.h: handles over the topology, the
 * pipeline plan and the layout planner, so that a program reaches them
 * without the simulator's own structures (which change with the model). */
#include "sim/figures.h"
#include "sim/pipe_costs.h"
#include "sim/plan.h"
#include "sim/sim.h"
#include "sim/validate.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(WEFT_SIM_LINK_CLASSES == LC_COUNT, "weft.h's link classes are the simulator's");
_Static_assert(WEFT_SIM_PROTO_AUTO == SIM_PROTO_AUTO, "weft.h's auto protocol");
_Static_assert((int)WEFT_SIM_PLAN_DIMS == (int)SIM_PLAN_DIMS &&
               (int)WEFT_SIM_PLAN_TP == (int)SIM_PLAN_TP &&
               (int)WEFT_SIM_PLAN_PP == (int)SIM_PLAN_PP &&
               (int)WEFT_SIM_PLAN_DP == (int)SIM_PLAN_DP &&
               (int)WEFT_SIM_PLAN_EP == (int)SIM_PLAN_EP &&
               (int)WEFT_SIM_PLAN_CP == (int)SIM_PLAN_CP, "weft.h's plan dimensions");

struct weft_sim_topo {
    sim_topo t;
};

int weft_sim_topo_load(weft_sim_topo **out, const char *name_or_path, char *err, size_t errlen)
{
    if (!out || !name_or_path)
        return WEFT_EINVAL;
    *out = NULL;
    weft_sim_topo *t = malloc(sizeof *t);
    if (!t)
        return WEFT_ENOMEM;
    int rc = sim_topo_load(&t->t, name_or_path, err, errlen);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void weft_sim_topo_free(weft_sim_topo *t) { free(t); }

const char *weft_sim_topo_name(const weft_sim_topo *t) { return t ? t->t.name : ""; }

const char *weft_sim_topo_note(const weft_sim_topo *t) { return t ? t->t.note : ""; }

int weft_sim_topo_ranks_per_node(const weft_sim_topo *t)
{
    return t ? t->t.ranks_per_node : WEFT_EINVAL;
}

int weft_sim_topo_write(const weft_sim_topo *t, FILE *f)
{
    if (!t || !f)
        return WEFT_EINVAL;
    sim_topo_write(&t->t, f);
    return ferror(f) ? WEFT_EIO : 0;
}

const char *weft_sim_topo_preset(int i)
{
    /* the table ends in NULL: walk it rather than trust i */
    for (int k = 0; i >= 0 && sim_topo_presets[k]; k++)
        if (k == i)
            return sim_topo_presets[k];
    return NULL;
}

int weft_sim_algo_parse(const char *s, int *algo)
{
    return s && algo ? sim_algo_parse(s, algo) : WEFT_EINVAL;
}

const char *weft_sim_algo_name(int algo) { return sim_algo_name(algo); }

int weft_sim_protocol_parse(const char *s, int *proto)
{
    return s && proto ? sim_protocol_parse(s, proto) : WEFT_EINVAL;
}

const char *weft_sim_protocol_name(int proto) { return sim_protocol_name(proto); }

const char *weft_sim_link_name(int c) { return sim_lclass_name(c); }

int weft_sim_run(const weft_sim_job *job, weft_sim_result *out, char *err, size_t errlen)
{
    if (!job || !job->topo || !out)
        return WEFT_EINVAL;
    sim_job j = { .topo = &job->topo->t, .algo = job->algo, .kind = job->kind,
                  .nranks = job->nranks, .count = job->count, .esize = job->esize,
                  .chunk_bytes = job->chunk_bytes, .ps_servers = job->ps_servers,
                  .no_fold = job->no_fold, .op_budget = job->op_budget, .proto = job->proto,
                  .channels = job->channels, .calls = job->calls };
    sim_result r;
    int rc = sim_run(&j, &r, err, errlen);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    out->time_us = r.time_us;
    out->algbw_GBps = r.algbw_GBps;
    out->busbw_GBps = r.busbw_GBps;
    for (int c = 0; c < LC_COUNT; c++) {
        out->util[c] = r.util[c];
        out->util_max[c] = r.util_max[c];
        out->bytes[c] = r.bytes[c];
    }
    out->fold = r.fold;
    out->fold_exact = r.fold_exact;
    out->fold_err_us = r.fold_err_us;
    out->extrapolated = r.extrapolated;
    out->ops = r.ops;
    out->events = r.events;
    out->max_rounds = r.max_rounds;
    out->proto = r.proto;
    return 0;
}

int weft_sim_figure_summit(FILE *f) { return f ? sim_figure_summit(f) : WEFT_EINVAL; }

int weft_sim_figure_gpt3(FILE *f) { return f ? sim_figure_gpt3(f) : WEFT_EINVAL; }

int weft_sim_validate(FILE *f, const char *set) { return f ? sim_validate(f, set) : WEFT_EINVAL; }

/* ---- pipelines ---- */

struct weft_sim_pipeline {
    sim_block_costs bc;
    sim_pipe_plan pl;
};

int weft_sim_schedule_check(const char *schedule, int p, int m)
{
    pipe_spec spec;
    if (!schedule || p < 1 || m < 1)
        return WEFT_EINVAL;
    return pipe_spec_parse(schedule, p, m, &spec) ? WEFT_EINVAL : 0;
}

int weft_sim_pipeline_run(const weft_sim_pipe_query *q, weft_sim_pipeline **out, char *err,
                          size_t errlen)
{
    if (!q || !out || !q->schedule || !q->costs == !q->model)
        return WEFT_EINVAL;
    *out = NULL;
    pipe_spec spec;
    if (q->p < 1 || q->m < 1 || pipe_spec_parse(q->schedule, q->p, q->m, &spec)) {
        snprintf(err, errlen, "unknown schedule %s", q->schedule);
        return WEFT_EINVAL;
    }
    weft_sim_pipeline *s = calloc(1, sizeof *s);
    if (!s)
        return WEFT_ENOMEM;
    int rc = q->costs ? sim_block_costs_load(q->costs, &s->bc, err, errlen)
                      : sim_block_costs_estimate(q->model, q->batch, q->seq, q->gflops, &s->bc,
                                                 err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    rc = sim_pipe_plan_run(&s->bc, &spec, q->partition ? q->partition : "auto", q->mem_cap,
                           q->latency, q->bandwidth, &s->pl, err, errlen);
    if (rc) {
        weft_sim_pipeline_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void weft_sim_pipeline_free(weft_sim_pipeline *pl)
{
    if (!pl)
        return;
    sim_pipe_plan_free(&pl->pl);
    sim_block_costs_free(&pl->bc);
    free(pl);
}

/* The textbook bubble of the schedule with every chunk at the mean cost:
 * (p-1)/(v m + p-1), and zero-bubble's idle of F + B - W a stage. */
static double formula_bubble(const sim_pipe_plan *pl)
{
    double F = 0, Bi = 0, W = 0, p = pl->spec.p, m = pl->spec.m, v = pl->spec.v;
    for (int j = 0; j < pl->k; j++) {
        F += pl->fwd[j] / pl->k;
        Bi += pl->bwd_i[j] / pl->k;
        W += pl->bwd_w[j] / pl->k;
    }
    if (pl->spec.kind == PIPE_ZB) {
        double idle = (p - 1) * (F + Bi - W > 0 ? F + Bi - W : 0);
        return idle / (m * (F + Bi + W) + idle);
    }
    return (p - 1) / (v * m + p - 1);
}

int weft_sim_pipeline_summary(const weft_sim_pipeline *pl, weft_sim_pipe_summary *out)
{
    if (!pl || !out)
        return WEFT_EINVAL;
    memset(out, 0, sizeof *out);
    pipe_spec_name(&pl->pl.spec, out->schedule, sizeof out->schedule);
    out->p = pl->pl.spec.p;
    out->m = pl->pl.spec.m;
    out->chunks = pl->pl.k;
    out->blocks = pl->bc.n;
    out->step_s = pl->pl.step;
    out->formula_bubble = formula_bubble(&pl->pl);
    return 0;
}

int weft_sim_pipeline_chunk(const weft_sim_pipeline *pl, int chunk, weft_sim_pipe_chunk *out)
{
    if (!pl || !out || chunk < 0 || chunk >= pl->pl.k)
        return WEFT_EINVAL;
    const sim_pipe_plan *p = &pl->pl;
    *out = (weft_sim_pipe_chunk){ .rank = chunk % p->spec.p, .first_block = p->first[chunk],
                                  .last_block = p->first[chunk + 1] - 1,
                                  .fwd_s = p->fwd[chunk], .bwd_input_s = p->bwd_i[chunk],
                                  .bwd_weight_s = p->bwd_w[chunk],
                                  .stash = p->chunk_stash[chunk],
                                  .mem_bytes = p->stage_bytes[chunk] };
    return 0;
}

int weft_sim_pipeline_rank(const weft_sim_pipeline *pl, int rank, weft_sim_pipe_rank *out)
{
    if (!pl || !out || rank < 0 || rank >= pl->pl.spec.p)
        return WEFT_EINVAL;
    *out = (weft_sim_pipe_rank){ .busy_s = pl->pl.busy[rank], .bubble = pl->pl.bubble[rank],
                                 .peak_stash = pl->pl.peak_stash[rank] };
    return 0;
}

const char *weft_sim_pipeline_block_name(const weft_sim_pipeline *pl, int block)
{
    return pl && block >= 0 && block < pl->bc.n ? pl->bc.b[block].name : "";
}

/* ---- layouts ---- */

struct weft_sim_plan {
    sim_plan p;
    char inputs[1024]; /* sim_calib_describe's line */
};

int weft_sim_plan_calib_path(char *buf, size_t len)
{
    return sim_calib_default_path(buf, len);
}

/* The calibration the query names: loaded, completed from this host and
 * probing when asked to; *use 0 when there is none to use. */
static int plan_calib_open(const weft_sim_plan_query *q, sim_calib *c, int *use, char *err,
                           size_t errlen)
{
    int found = 0;
    *use = 0;
    int rc = sim_calib_load(c, q->calib, &found, err, errlen);
    if (rc || (!found && !q->calibrate))
        return rc;
    *use = 1;
    sim_calib_measure_host(c); /* what the file leaves out: cheap to read */
    c->probe = q->calibrate;
    return 0;
}

int weft_sim_plan_run(const weft_sim_plan_query *q, weft_sim_plan **out, char *err,
                      size_t errlen)
{
    if (!q || !q->topo || !out)
        return WEFT_EINVAL;
    *out = NULL;
    sim_calib cal;
    int use = 0;
    int rc = plan_calib_open(q, &cal, &use, err, errlen);
    if (rc)
        return rc;
    sim_plan_query sq = { .model = q->model, .batch = q->batch, .seq = q->seq,
                          .ranks = q->ranks, .topo = &q->topo->t, .gflops = q->gflops,
                          .mem = q->mem, .optim_bytes = q->optim_bytes,
                          .calib = use ? &cal : NULL, .ep = q->ep, .cp = q->cp };
    weft_sim_plan *s = calloc(1, sizeof *s);
    if (!s)
        rc = WEFT_ENOMEM;
    if (!rc)
        rc = sim_plan_run(&sq, &s->p, err, errlen);
    if (!rc && q->calibrate && q->calib && *q->calib)
        rc = sim_calib_save(&cal, q->calib, err, errlen);
    if (!rc && use)
        sim_calib_describe(&cal, s->inputs, sizeof s->inputs);
    else if (!rc)
        snprintf(s->inputs, sizeof s->inputs, "no calibration%s%s: every input assumed (FLOPs "
                 "at --gflops, the topology's links and cores; --calibrate measures them)",
                 q->calib ? " at " : "", q->calib ? q->calib : "");
    sim_calib_free(&cal);
    if (rc) {
        if (s)
            sim_plan_free(&s->p);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int weft_sim_plan_inputs(const weft_sim_plan *pl, char *buf, size_t len)
{
    if (!pl)
        return WEFT_EINVAL;
    return snprintf(buf, len, "%s", pl->inputs);
}

void weft_sim_plan_free(weft_sim_plan *pl)
{
    if (!pl)
        return;
    sim_plan_free(&pl->p);
    free(pl);
}

int weft_sim_plan_count(const weft_sim_plan *pl) { return pl ? pl->p.n : 0; }

int weft_sim_plan_best(const weft_sim_plan *pl) { return pl ? pl->p.best : -1; }

int weft_sim_plan_smallest(const weft_sim_plan *pl) { return pl ? pl->p.smallest : -1; }

int weft_sim_plan_layout(const weft_sim_plan *pl, int i, weft_sim_layout *out)
{
    if (!pl || !out || i < 0 || i >= pl->p.n)
        return WEFT_EINVAL;
    const sim_plan_entry *e = &pl->p.e[i];
    memset(out, 0, sizeof *out);
    out->tp = e->tp;
    out->pp = e->pp;
    out->dp = e->dp;
    out->sp = e->sp;
    out->zero = e->zero;
    pipe_spec_name(&e->spec, out->schedule, sizeof out->schedule);
    out->m = e->spec.m;
    out->step_s = e->step_s;
    out->pipe_s = e->pipe_s;
    out->tp_s = e->tp_s;
    out->dp_s = e->dp_s;
    out->ep = e->ep;
    out->cp = e->cp;
    out->ep_s = e->ep_s;
    out->cp_s = e->cp_s;
    out->bubble = e->bubble;
    out->state_bytes = e->state_bytes;
    out->act_bytes = e->act_bytes;
    out->mem_bytes = e->mem_bytes;
    for (int d = 0; d < SIM_PLAN_DIMS; d++) {
        out->bytes[d] = e->bytes[d];
        out->link[d] = e->link[d];
    }
    out->fits = e->fits;
    return 0;
}

int weft_sim_plan_format(const weft_sim_plan *pl, int i, char *buf, size_t len)
{
    if (!pl || i < 0 || i >= pl->p.n)
        return WEFT_EINVAL;
    return sim_plan_entry_format(&pl->p.e[i], buf, len);
}
