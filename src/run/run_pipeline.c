/* --tp T --pp P: the job as tp x dp x pp (weft_layout, in the
 * order --order gives, tensor fastest by default): every tensor rank of a
 * stage holds its part of the stage's blocks, P stages make a pipeline,
 * and each (stage, tensor rank) averages over its dp replicas. Every rank
 * of a replica loads the same batch; the first stage reads its inputs,
 * the last its targets. Blocks are cut into P*V chunks (V > 1 for the
 * interleaved schedule) from measured block costs, and checkpoints are
 * assembled on job rank 0 in the whole model's layout, so they resume on
 * any layout. */
#include "run/run_pipeline.h"

#include "run/run_ckpt_agree.h"

#include "run/run_model.h"

#include "sim/pipe_costs.h"
#include "train/model.h"
#include "train/moe_split.h"
#include "train/zero_full.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pipeline {
    weft_run *run; /* where failures and lines go */
    int pp, v, k, stage, replica, replicas, job_rank, job_size;
    int tp, tp_rank;
    int elastic, m0, replicas0; /* --elastic: the launch's micro-batches and replicas */
    weft_layout layout;
    weft_comm *job, *pp_comm, *dp_comm, *tp_comm;
    pipe_spec spec;
    char schedule[32];
    sim_block_costs costs;   /* measured, the same on every rank */
    sim_pipe_plan plan;      /* the partition and its predicted step */
    weft_model_config cfg;
    weft_pipe *pipe;
    weft_model *model;       /* this rank's part */
    weft_zero *z;
    size_t nparams;
    double busy, span, share_busy; /* this stage's seconds over the run */
    long steps;
    int peak_stash;          /* most micro-batches one of our chunks held */
    double sends, send_bytes; /* this rank's pipeline messages over the run */
    uint64_t tp0_calls, tp0_bytes; /* the model's tensor-parallel collectives at the start */
    int counted;
};

/* The layout's coordinates of this rank and the schedule's shape. */
static int layout_open(pipeline *pl, const opts *o, weft_comm *job)
{
    weft_run *t = pl->run;
    int pp = o->pp > 1 ? o->pp : 1, tp = o->tp > 1 ? o->tp : 1;
    int n = job ? weft_comm_size(job) : 1;
    if (weft_layout_init(&pl->layout, n, tp, pp, o->order) != 0)
        return run_fail(t, WEFT_EINVAL,
                        "--order %s: want the three of tp, dp, pp, fastest first (tp-dp-pp)",
                        o->order);
    pl->pp = pp;
    pl->tp = tp;
    pl->job = job;
    pl->job_rank = job ? weft_comm_rank(job) : 0;
    pl->job_size = n;
    weft_layout_coords(&pl->layout, pl->job_rank, &pl->tp_rank, &pl->replica, &pl->stage);
    pl->replicas = n / (pp * tp);
    snprintf(pl->schedule, sizeof pl->schedule, "%s", o->pp_schedule[0] ? o->pp_schedule : "1f1b");
    int m = o->micro > 0 ? o->micro : pp;
    if (pipe_spec_parse(pl->schedule, pp, m, &pl->spec) != 0)
        return run_fail(t, WEFT_EINVAL,
                        "--schedule %s: want gpipe, 1f1b, interleaved:V (V >= 2, --pp 2 or "
                        "more) or zb", pl->schedule);
    pl->v = pl->spec.v;
    pl->k = pl->pp * pl->v;
    pl->elastic = o->elastic;
    pl->m0 = m;
    pl->replicas0 = pl->replicas;
    return 0;
}

int pipeline_open(weft_run *t, const opts *o, weft_comm *job, pipeline **out)
{
    int pp = o->pp > 1 ? o->pp : 1, tp = o->tp > 1 ? o->tp : 1;
    *out = NULL;
    if (pp == 1 && tp == 1)
        return 0;
    int n = job ? weft_comm_size(job) : 1;
    if (n % (pp * tp))
        return run_fail(t, WEFT_ECONFIG,
                        "--tp %d --pp %d: the job's %d ranks are not a multiple of %d", tp, pp,
                        n, tp * pp);
    pipeline *pl = calloc(1, sizeof *pl);
    if (!pl)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    pl->run = t;
    int rc = layout_open(pl, o, job);
    if (rc == 0 &&
        (rc = weft_layout_split(&pl->layout, job, &pl->tp_comm, &pl->dp_comm, &pl->pp_comm)))
        rc = run_fail(t, rc, "tensor, data and pipeline groups: %s: %s", weft_strerror(rc),
                      weft_comm_error(job));
    if (rc) {
        free(pl);
        return rc;
    }
    *out = pl;
    return 0;
}

weft_comm *pipeline_dp_comm(const pipeline *pl)
{
    return pl->replicas > 1 ? pl->dp_comm : NULL;
}

int pipeline_replica(const pipeline *pl, int *replicas)
{
    *replicas = pl->replicas;
    return pl->replica;
}

/* Rows of one micro-batch of this replica's share of the batch. */
static int micro_rows(const pipeline *pl, const run_opts *r)
{
    int local = r->batch / pl->replicas;
    int n = local / pl->spec.m;
    return n > 0 ? n : 1;
}

/* Random inputs, targets and output gradients for block b's measurement. */
static void fill_inputs(const weft_model_config *cfg, int b, size_t rows, float *x, size_t xin,
                        int32_t *y, float *g, size_t out_n)
{
    int gpt = cfg->type != WEFT_MODEL_MLP;
    weft_rng rng;
    weft_rng_seed(&rng, (uint64_t)b + 1);
    int ncls = gpt ? cfg->vocab : cfg->widths[cfg->n_widths - 1];
    for (size_t i = 0; i < rows; i++)
        y[i] = (int32_t)weft_rng_below(&rng, (uint64_t)ncls);
    if (b == 0 && gpt)
        memcpy(x, y, rows * sizeof(int32_t)); /* tokens: any valid ones */
    else
        for (size_t i = 0; i < xin; i++)
            x[i] = weft_rng_uniform(&rng) - 0.5f;
    for (size_t i = 0; i < out_n; i++)
        g[i] = 1e-3f * (weft_rng_uniform(&rng) - 0.5f);
}

/* The fastest of three passes of m's chunk, after one to warm up. */
static int time_block(weft_model *m, const float *x, const int32_t *y, float *g, size_t out_n,
                      int B, int T, double best[3])
{
    return weft_model_time_chunk(m, x, y, out_n ? g : NULL, B, T, 4, best);
}

/* Forward, input backward and weight backward of block b alone on one
 * micro-batch, its activation, state and output bytes. */
static int measure_block(const pipeline *pl, const opts *o, int b, double *out)
{
    const weft_model_config *cfg = &pl->cfg;
    weft_block_range one = { b, 1 };
    weft_model *m;
    int rc = weft_model_create_stage(&m, cfg, 1, &one, 1, WEFT_STAGE_SPLIT_BACKWARD);
    if (rc)
        return run_fail(pl->run, rc, "measuring block %d: cannot create it", b);
    /* recomputation rebuilds a chunk's later blocks from its first one's
     * output: a block alone has none to rebuild, and the split backward
     * the planners time by refuses it, so it is timed without */
    opts plain = *o;
    plain.recompute = 0;
    rc = model_tune(pl->run, m, &plain);
    int gpt = cfg->type != WEFT_MODEL_MLP, B = micro_rows(pl, &o->r), T = gpt ? o->r.seq : 1;
    size_t in_n, out_n, rows = (size_t)B * T;
    weft_model_chunk_io(m, 0, B, T, &in_n, &out_n);
    size_t xin = b == 0 ? (gpt ? rows : (size_t)B * cfg->widths[0]) : in_n;
    float *x = calloc(xin ? xin : 1, sizeof(float)), *g = calloc(out_n ? out_n : 1, sizeof(float));
    int32_t *y = calloc(rows, sizeof(int32_t));
    double best[3];
    if (rc == 0 && (!x || !g || !y))
        rc = run_fail(pl->run, WEFT_ENOMEM, "out of memory");
    if (rc == 0) {
        fill_inputs(cfg, b, rows, x, xin, y, g, out_n);
        if ((rc = time_block(m, x, y, g, out_n, B, T, best)))
            rc = run_fail(pl->run, rc, "measuring block %d: %s", b, weft_strerror(rc));
    }
    if (rc == 0) {
        size_t np;
        weft_model_params(m, &np);
        weft_optim_config oc;
        model_optim_config(&o->r, &oc);
        int states = oc.kind == WEFT_OPTIM_ADAMW ? 2 : oc.momentum != 0.0f ? 1 : 0;
        out[0] = best[0];
        out[1] = best[1];
        out[2] = best[2];
        out[3] = (double)weft_model_activation_bytes(m);
        out[4] = (double)np * 4.0 * (2 + states);
        out[5] = (double)out_n * 4.0;
    }
    weft_model_destroy(m);
    free(x);
    free(g);
    free(y);
    return rc;
}

/* The name of block b of nb in the costs file. */
static void block_name(const pipeline *pl, int b, int nb, char *name, size_t cap)
{
    int gpt = pl->cfg.type != WEFT_MODEL_MLP;
    if (gpt)
        snprintf(name, cap, "%s", b == 0 ? "embedding" : b == nb - 1 ? "head" : "block");
    else
        snprintf(name, cap, "linear");
    if (gpt && b > 0 && b < nb - 1)
        snprintf(name, cap, "block.%d", b - 1);
    else if (!gpt)
        snprintf(name, cap, "layer.%d", b);
}

/* Every job rank measures its share of the blocks; the sum gives every
 * rank the same figures, so the same partition. */
static int measure(pipeline *pl, const opts *o, weft_comm *job)
{
    int nb = weft_model_block_count(&pl->cfg), rc = 0;
    double *v = calloc((size_t)nb * 6, sizeof(double));
    if (!v)
        return run_fail(pl->run, WEFT_ENOMEM, "out of memory");
    for (int b = pl->job_rank; b < nb && rc == 0; b += pl->job_size)
        rc = measure_block(pl, o, b, v + 6 * b);
    /* a rank that failed leaves the others in the reduction: every rank
     * measures the same blocks on the same model, so all fail alike */
    if (rc == 0 && (rc = weft_allreduce(job, v, v, (size_t)nb * 6, WEFT_F64, WEFT_SUM)))
        rc = run_fail(pl->run, rc, "sharing block costs: %s: %s", weft_strerror(rc),
                      weft_comm_error(job));
    sim_block_costs *bc = &pl->costs;
    if (rc == 0 && !(bc->b = calloc((size_t)nb, sizeof *bc->b)))
        rc = run_fail(pl->run, WEFT_ENOMEM, "out of memory");
    if (rc) {
        free(v);
        return rc;
    }
    bc->n = bc->cap = nb;
    for (int b = 0; b < nb; b++) {
        sim_block_cost *c = &bc->b[b];
        block_name(pl, b, nb, c->name, sizeof c->name);
        c->fwd = v[6 * b];
        c->bwd_i = v[6 * b + 1];
        c->bwd_w = v[6 * b + 2];
        c->act_bytes = v[6 * b + 3];
        c->state_bytes = v[6 * b + 4];
        c->out_bytes = v[6 * b + 5];
    }
    free(v);
    return 0;
}

static int write_costs(const pipeline *pl, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return run_fail(pl->run, WEFT_EIO, "--pp-costs %s: cannot write", path);
    fprintf(f, "# weft-train block costs: name fwd_s bwd_input_s bwd_weight_s act_bytes "
               "state_bytes out_bytes\n");
    for (int b = 0; b < pl->costs.n; b++) {
        const sim_block_cost *c = &pl->costs.b[b];
        fprintf(f, "%s %.9g %.9g %.9g %.0f %.0f %.0f\n", c->name, c->fwd, c->bwd_i, c->bwd_w,
                c->act_bytes, c->state_bytes, c->out_bytes);
    }
    if (fclose(f) != 0)
        return run_fail(pl->run, WEFT_EIO, "--pp-costs %s: cannot write", path);
    return 0;
}

int pipeline_plan(pipeline *pl, const opts *o, const weft_model_config *cfg, weft_comm *job)
{
    pl->cfg = *cfg;
    int nb = weft_model_block_count(cfg);
    if (nb < pl->k)
        return run_fail(pl->run, WEFT_ECONFIG,
                        "--pp %d%s: the model has %d blocks, fewer than the %d chunks", pl->pp,
                        pl->v > 1 ? " with interleaving" : "", nb, pl->k);
    int rc = measure(pl, o, job);
    if (rc)
        return rc;
    char err[256] = "";
    const char *part = o->pp_partition[0] ? o->pp_partition : "auto";
    rc = sim_pipe_plan_run(&pl->costs, &pl->spec, part, o->pp_memory_mb * 1048576.0, 0, 0,
                           &pl->plan, err, sizeof err);
    if (rc)
        return run_fail(pl->run, rc, "--pp-partition %s: %s", part,
                        err[0] ? err : weft_strerror(rc));
    if (o->pp_costs[0] && pl->job_rank == 0)
        return write_costs(pl, o->pp_costs);
    return 0;
}

/* The blocks of the schedule's chunks of this stage: r, r + p, ... */
static void stage_chunks(const pipeline *pl, int stage, weft_block_range *ch)
{
    for (int j = 0; j < pl->v; j++) {
        int c = stage + j * pl->pp;
        ch[j].first = pl->plan.first[c];
        ch[j].count = pl->plan.first[c + 1] - pl->plan.first[c];
    }
}

static unsigned stage_flags(const pipeline *pl, int sp)
{
    return (pl->spec.kind == PIPE_ZB ? WEFT_STAGE_SPLIT_BACKWARD : 0) |
           (sp ? WEFT_STAGE_SEQUENCE_PARALLEL : 0);
}

/* What --sp asks of the model and the micro-batches. */
static int check_sp(const pipeline *pl, const opts *o)
{
    const run_opts *r = &o->r;
    if (!o->sp)
        return 0;
    if (pl->cfg.type == WEFT_MODEL_MLP)
        return run_fail(pl->run, WEFT_ECONFIG, "--sp splits a GPT's sequence; an MLP has none");
    int local = r->batch / pl->replicas;
    if (local % pl->spec.m || (micro_rows(pl, r) * r->seq) % pl->tp)
        return run_fail(pl->run, WEFT_ECONFIG,
                        "--sp: each micro-batch's rows (batch %d / %d replicas / %d "
                        "micro-batches, x %d tokens) must split evenly in %d", r->batch,
                        pl->replicas, pl->spec.m, r->seq, pl->tp);
    if (strcmp(r->precision, "bf16") == 0)
        return run_fail(pl->run, WEFT_ECONFIG, "--sp runs in fp32, not --precision bf16");
    return 0;
}

int pipeline_model(const pipeline *pl, const opts *o, weft_ckpt *ck, weft_model **out)
{
    weft_block_range ch[WEFT_STAGE_MAX_CHUNKS];
    stage_chunks(pl, pl->stage, ch);
    weft_model *m = NULL;
    const run_opts *r = &o->r;
    *out = NULL;
    int rc = check_sp(pl, o);
    if (rc)
        return rc;
    /* a resume's load writes every parameter of the stage */
    unsigned flags = stage_flags(pl, o->sp) | (ck ? WEFT_STAGE_NO_INIT : 0u);
    rc = weft_model_create_tp(&m, &pl->cfg, r->seed, ch, pl->v, flags,
                              pl->tp > 1 ? pl->tp_comm : NULL, 1, 0);
    if (rc == WEFT_EINVAL && pl->tp > 1)
        return run_fail(pl->run, rc,
                        "--tp %d: the model does not split in %d (a GPT needs heads divisible "
                        "by it, a Llama heads, ffn and each expert's width divisible by it "
                        "and kv_heads a multiple or a divisor of it, an MLP its hidden "
                        "widths)", pl->tp, pl->tp);
    if (rc == 0 && ck)
        rc = weft_ckpt_get_params(ck, m);
    if (rc) {
        weft_model_destroy(m);
        return run_fail(pl->run, rc, "cannot create pipeline stage %d: %s", pl->stage,
                        weft_strerror(rc));
    }
    *out = m;
    return 0;
}

/* Whole on every tensor rank (LayerNorms, row-parallel biases, positions). */
static int replicated(const weft_model *m, int i)
{
    weft_tensor_info t;
    weft_model_tensor_info(m, i, &t);
    return t.numel == t.whole_numel;
}

int pipeline_attach(pipeline *pl, weft_model *m, weft_zero *z)
{
    pl->model = m;
    pl->z = z;
    /* every micro-batch would gather each block again: a stage's
     * parameters are gathered once per step */
    weft_zero_set_layerwise(z, 0);
    weft_model_params(m, &pl->nparams);
    int rc = weft_pipe_create(&pl->pipe, pl->pp_comm, m, pl->schedule, pl->spec.m);
    if (rc)
        return run_fail(pl->run, rc, "--schedule %s with %d micro-batches: %s", pl->schedule,
                        pl->spec.m, weft_strerror(rc));
    /* the norm that clips spans the pipeline and the tensor group; the last
     * stage's copy of a tied embedding is counted by the first, a replicated
     * tensor by tensor rank 0 */
    int nt = weft_model_tensor_count(m), tied = weft_model_tied_tensor(m);
    unsigned char *skip = calloc((size_t)nt + 1, 1);
    if (!skip)
        return run_fail(pl->run, WEFT_ENOMEM, "out of memory");
    for (int i = 0; i < nt; i++)
        skip[i] = (i == tied && pl->stage != 0) || (pl->tp_rank != 0 && replicated(m, i));
    weft_comm *groups[2] = { pl->pp_comm, pl->tp_comm };
    if ((rc = weft_zero_set_norm_group(z, groups, 2, skip)))
        rc = run_fail(pl->run, rc, "pipeline norm: %s", weft_strerror(rc));
    free(skip);
    return rc;
}

static double chunk_time(const sim_pipe_plan *p, int c)
{
    return p->fwd[c] + p->bwd_i[c] + p->bwd_w[c];
}

/* A stage's share of the pipeline's compute: its chunks' sum over all. */
static double predicted_share(const pipeline *pl, int stage)
{
    double all = 0, mine = 0;
    for (int c = 0; c < pl->k; c++) {
        all += chunk_time(&pl->plan, c);
        mine += c % pl->pp == stage ? chunk_time(&pl->plan, c) : 0;
    }
    return all > 0 ? mine / all : 0;
}

void pipeline_describe(const pipeline *pl, const run_opts *r)
{
    char nm[32], ord[16], line[4096];
    size_t len = 0, cap = sizeof line;
    pipe_spec_name(&pl->spec, nm, sizeof nm);
    weft_layout_format(&pl->layout, ord, sizeof ord);
    run_line_add(line, cap, &len,
        "layout: tp %d x dp %d x pp %d (order %s); pipeline schedule %s, %d micro-batches "
        "of %d samples\n", pl->tp, pl->replicas, pl->pp, ord, nm, pl->spec.m, micro_rows(pl, r));
    run_line_add(line, cap, &len, "  partition (blocks per chunk):");
    for (int c = 0; c < pl->k; c++)
        run_line_add(line, cap, &len, "%s%d", c ? "," : " ", pl->plan.first[c + 1] - pl->plan.first[c]);
    run_line_add(line, cap, &len, "; predicted share of the work per stage:");
    for (int s = 0; s < pl->pp; s++)
        run_line_add(line, cap, &len, " %.3f", predicted_share(pl, s));
    run_line_add(line, cap, &len, "\n  predicted step %.2f ms, bubble", 1e3 * pl->plan.step);
    for (int s = 0; s < pl->pp; s++)
        run_line_add(line, cap, &len, " %.3f", pl->plan.bubble[s]);
    run_line_add(line, cap, &len, " (formula %.3f)\n",
        (double)(pl->pp - 1) / (pl->spec.v * pl->spec.m + pl->pp - 1));
    run_say(pl->run, WEFT_RUN_OUT, "%s", line);
}

static double mean_bubble(const pipeline *pl)
{
    double b = 0;
    for (int s = 0; s < pl->pp; s++)
        b += pl->plan.bubble[s] / pl->pp;
    return b;
}

/* The blocks' costs scaled by what their chunks took inside this run
 * (caches, contention), and the schedule replayed on them: the check of
 * the replay against the measured step (*replayed; 0: no replay).
 * Collective over the pipeline. */
static int calibrate(pipeline *pl, const char *costs_path, double *replayed)
{
    *replayed = 0;
    double *v = calloc((size_t)pl->k * 3, sizeof(double));
    if (!v)
        return run_fail(pl->run, WEFT_ENOMEM, "out of memory");
    for (int j = 0; j < pl->v; j++)
        weft_pipe_chunk_seconds(pl->pipe, j, &v[3 * (pl->stage + j * pl->pp)],
                                &v[3 * (pl->stage + j * pl->pp) + 1],
                                &v[3 * (pl->stage + j * pl->pp) + 2]);
    int rc = weft_allreduce(pl->pp_comm, v, v, (size_t)pl->k * 3, WEFT_F64, WEFT_SUM);
    if (rc) {
        free(v);
        return run_fail(pl->run, rc, "pipeline summary: %s", weft_strerror(rc));
    }
    char part[1024];
    int n = 0;
    for (int c = 0; c < pl->k; c++) {
        const sim_pipe_plan *p = &pl->plan;
        double f = p->fwd[c] > 0 ? v[3 * c] / p->fwd[c] : 1;
        double b = p->bwd_i[c] + p->bwd_w[c] > 0 ? (v[3 * c + 1] + v[3 * c + 2]) /
                                                       (p->bwd_i[c] + p->bwd_w[c]) : 1;
        for (int i = p->first[c]; i < p->first[c + 1]; i++) {
            pl->costs.b[i].fwd *= f;
            pl->costs.b[i].bwd_i *= b;
            pl->costs.b[i].bwd_w *= b;
        }
        n += snprintf(part + n, sizeof part - (size_t)n, "%s%d", c ? "," : "",
                      p->first[c + 1] - p->first[c]);
    }
    free(v);
    if (costs_path[0] && pl->job_rank == 0 && (rc = write_costs(pl, costs_path)))
        return rc;
    sim_pipe_plan re;
    char err[256];
    if (sim_pipe_plan_run(&pl->costs, &pl->spec, part, 0, 0, 0, &re, err, sizeof err) != 0)
        return 0;
    *replayed = re.step;
    sim_pipe_plan_free(&re);
    return 0;
}

/* The lead's lines: v holds every stage's compute seconds, span and peak
 * stash. */
static void summary_lines(const pipeline *pl, const double *v, double replayed)
{
    char line[4096];
    size_t len = 0, cap = sizeof line;
    double all = 0, bubble = 0;
    for (int s = 0; s < pl->pp; s++)
        all += v[3 * s];
    run_line_add(line, cap, &len,
        "pipeline per stage (share of the work predicted/measured, bubble, peak stash):");
    for (int s = 0; s < pl->pp; s++) {
        double b = v[3 * s + 1] > 0 ? 1 - v[3 * s] / v[3 * s + 1] : 0;
        bubble += b / pl->pp;
        run_line_add(line, cap, &len, " %d: %.3f/%.3f %.3f %d", s, predicted_share(pl, s),
            all > 0 ? v[3 * s] / all : 0, b, (int)v[3 * s + 2]);
    }
    uint64_t calls, bytes;
    weft_model_tp_stats(pl->model, &calls, &bytes);
    double ns = (double)pl->steps;
    run_line_add(line, cap, &len,
        "\nper step, rank 0: tp %.1f all-reduces (%.3f MB), pp %.1f sends (%.3f MB), "
        "dp %s (%.3f MB)", (double)(calls - pl->tp0_calls) / ns,
        (double)(bytes - pl->tp0_bytes) / ns / 1e6, pl->sends / ns, pl->send_bytes / ns / 1e6,
        pl->replicas > 1 ? "gradient reduction" : "none",
        pl->replicas > 1 ? (double)pl->nparams * 4 / 1e6 : 0.0);
    run_line_add(line, cap, &len,
        "\npipeline step: %.2f ms measured, %.2f ms predicted from the blocks alone, "
        "%.2f ms replayed with this run's compute times; bubble %.4f measured, %.4f "
        "predicted\n", 1e3 * v[1] / (double)pl->steps, 1e3 * pl->plan.step, 1e3 * replayed,
        bubble, mean_bubble(pl));
    run_say(pl->run, WEFT_RUN_OUT, "%s", line);
}

int pipeline_summary(pipeline *pl, const opts *o)
{
    int quiet = o->quiet, rc;
    double replayed = 0;
    if (pl->steps > 0 && (rc = calibrate(pl, o->pp_costs, &replayed)))
        return rc;
    /* the fullest rank's memory: state resident (mincore) against the ZeRO
     * formula, and one micro-batch's activations */
    weft_zero_mem zm;
    weft_zero_memory(pl->z, &zm);
    double mem[3] = { (double)zm.resident_bytes, zm.formula_bytes,
                      (double)weft_model_activation_bytes(pl->model) };
    if (pl->job && (rc = weft_allreduce(pl->job, mem, mem, 3, WEFT_F64, WEFT_MAX)) != 0)
        return run_fail(pl->run, rc, "pipeline summary: %s", weft_comm_error(pl->job));
    if (pl->job_rank == 0 && !quiet)
        run_say(pl->run, WEFT_RUN_OUT,
                "memory, the fullest rank: training state %.0f B resident, %.0f B by the ZeRO "
                "formula; activations of a micro-batch %.0f B\n", mem[0], mem[1], mem[2]);
    /* every stage's compute seconds, to the lead */
    double *v = calloc((size_t)pl->pp * 3, sizeof(double));
    if (!v)
        return run_fail(pl->run, WEFT_ENOMEM, "out of memory");
    v[3 * pl->stage] = pl->busy;
    v[3 * pl->stage + 1] = pl->span;
    v[3 * pl->stage + 2] = pl->peak_stash;
    rc = weft_allreduce(pl->pp_comm, v, v, (size_t)pl->pp * 3, WEFT_F64, WEFT_SUM);
    if (rc)
        rc = run_fail(pl->run, rc, "pipeline summary: %s", weft_strerror(rc));
    else if (pl->job_rank == 0 && pl->steps > 0 && !quiet)
        summary_lines(pl, v, replayed);
    free(v);
    return rc;
}

/* The tag of rank 0's word to a part's sender (send_part), above every
 * tensor's. */
#define GO_TAG WEFT_TAG_MAX

/* Tags of the gather: tensor i's parameters (j = 0) and optimiser
 * states (j >= 1), above any schedule's. */
static int gather_tag(int i, int j, int nstate)
{
    return (1 << 30) + i * (nstate + 1) + j;
}

/* The optimiser vectors of this stage's whole range, from its data-parallel
 * group (ZeRO shards) into ck on the group's rank 0. */
static const float *state_of(const weft_ckpt *ck, const char *name)
{
    char key[256];
    weft_ckpt_entry e;
    snprintf(key, sizeof key, "optim/%s", name);
    return weft_ckpt_find(ck, key, &e) == 0 ? e.data : NULL;
}

/* A part's tensor i goes to the lead unless another part sends it: the
 * last stage's tied copy, a replicated tensor of a tensor rank but 0. */
static int sent_by_other(const weft_model *m, int i, int stage, int tp_rank)
{
    return (stage > 0 && i == weft_model_tied_tensor(m)) || (tp_rank > 0 && replicated(m, i));
}

/* Element by element into the whole tensor's place (a tensor-parallel
 * part), or as one block. */
static void place(const weft_model *part, int i, const float *src, float *whole)
{
    weft_tensor_info t;
    weft_model_tensor_info(part, i, &t);
    if (t.numel == t.whole_numel) {
        memcpy(whole + t.whole_offset, src, t.numel * sizeof(float));
        return;
    }
    for (size_t e = 0; e < t.numel; e++) {
        size_t at;
        if (weft_model_tensor_whole_elem(part, i, e, &at) == 0)
            whole[t.whole_offset + at] = src[e];
    }
}

/* What the gather moves: this rank's part m (parameters P), the
 * optimiser states of its range in ck (nstate of them, named as any's),
 * and on the lead the whole model's parameters WP and optimiser full. */
typedef struct {
    const pipeline *pl;
    weft_model *m;
    weft_zero *z;
    const float *P;
    weft_ckpt *ck;
    weft_optim *any, *full;
    int nstate;
    int E;                  /* the expert group's size the experts are divided over (1: whole) */
    float *WP, *buf;
    size_t cap;
    int missing;            /* the lead: a vector of its own part it had not */
} gather_ctx;

/* Vector j of this rank's part (0: parameters, j: optimiser state j - 1). */
static int own_vector(const gather_ctx *g, int j, const float **out)
{
    const char *sname = NULL;
    if (j)
        weft_optim_state(g->any, j - 1, &sname);
    *out = j ? state_of(g->ck, sname) : g->P;
    if (!*out)
        return run_fail(g->pl->run, WEFT_EIO, "gathering the optimiser state: no %s", sname);
    return 0;
}

/* g->buf at least n floats long. */
static int grow(gather_ctx *g, size_t n)
{
    if (n <= g->cap)
        return 0;
    free(g->buf);
    g->cap = n;
    if (!(g->buf = malloc(g->cap * sizeof(float)))) {
        g->cap = 0;
        return WEFT_ENOMEM;
    }
    return 0;
}

/* A replica past the first expert group, holding another expert rank's
 * experts: its shards of their optimiser state to the first of their
 * replicas, in send_part's order (ZeRO 2-3; nothing moves at 0-1). */
static int give_shards(gather_ctx *g)
{
    int rc = 0;
    for (int i = 0; i < weft_model_tensor_count(g->m); i++) {
        weft_tensor_info ti;
        weft_model_tensor_info(g->m, i, &ti);
        if (sent_by_other(g->m, i, g->pl->stage, g->pl->tp_rank) ||
            !train_moe_split_is_expert(g->m, i))
            continue;
        for (int j = 1; j <= g->nstate; j++) {
            int r = train_zero_gather_range(g->z, j - 1, ti.offset, ti.numel, NULL);
            rc = rc ? rc : r;
        }
    }
    return rc ? run_fail(g->pl->run, rc, "giving the experts' optimiser state: %s",
                         weft_strerror(rc)) : 0;
}

/* Not the lead: every tensor this part is the one to send, then its
 * optimiser states. */
static int send_part(gather_ctx *g)
{
    const pipeline *pl = g->pl;
    int rc = 0, bad = 0; /* bad: a vector not had, which the save fails on after */
    /* rank 0's word first: 0 where it cannot take this part (it failed
     * before it), and then nothing is sent, which it would never receive;
     * the experts' gathers below go on, their peers waiting on them */
    int32_t go = 0;
    rc = weft_recv_tag(pl->job, &go, 1, WEFT_I32, 0, GO_TAG);
    for (int i = 0; i < weft_model_tensor_count(g->m) && rc == 0; i++) {
        weft_tensor_info ti;
        weft_model_tensor_info(g->m, i, &ti);
        if (sent_by_other(g->m, i, pl->stage, pl->tp_rank) ||
            (pl->replica > 0 && !train_moe_split_is_expert(g->m, i)))
            continue;
        for (int j = 0; j <= g->nstate && rc == 0; j++) {
            const float *src = NULL;
            /* another expert rank's experts: their state is this rank's
             * own, gathered from their replicas where ZeRO 2-3 shard it
             * (their gathers go on after a failure: none of them waits) */
            if (pl->replica > 0 && j > 0) {
                int r = grow(g, ti.numel);
                int q = train_zero_gather_range(g->z, j - 1, ti.offset, ti.numel,
                                                r ? NULL : g->buf);
                r = r ? r : q;
                if (r == 0 && ckpt_test_fail(pl->run, "send"))
                    r = WEFT_EIO;
                if (r && !bad)
                    bad = run_fail(pl->run, r, "gathering the experts' optimiser state: %s",
                                   weft_strerror(r));
                src = r ? NULL : g->buf;
            } else if (own_vector(g, j, &src) == 0) {
                src += ti.offset;
            } else {
                bad = bad ? bad : WEFT_EIO;
                src = NULL;
            }
            /* rank 0 takes as many values whatever this rank had: the
             * parameters stand in for a vector it has not */
            if (!src)
                src = g->P + ti.offset;
            if (!go)
                continue;
            weft_request *rq;
            rc = weft_isend_tag(pl->job, src, ti.numel, WEFT_F32, 0,
                                gather_tag(i, j, g->nstate), &rq);
            if (rc == 0)
                rc = weft_wait(rq);
        }
    }
    if (rc)
        return run_fail(pl->run, rc, "sending stage %d (tensor rank %d) to rank 0: %s: %s",
                        pl->stage, pl->tp_rank, weft_strerror(rc), weft_comm_error(pl->job));
    return bad;
}

/* Tensor i's vector j of the part shell (stage s, tensor rank t, on job
 * rank from) into the whole model or optimiser. */
static int take_vector(gather_ctx *g, const weft_model *shell, int i, int j, int from)
{
    const pipeline *pl = g->pl;
    weft_tensor_info ti;
    weft_model_tensor_info(shell, i, &ti);
    float *dst = j ? weft_optim_state(g->full, j - 1, NULL) : g->WP;
    const float *src;
    int rc = 0;
    if (from == 0) {
        /* the parts' messages are still taken, as told (take_part) */
        if ((rc = own_vector(g, j, &src))) {
            g->missing = g->missing ? g->missing : rc;
            return 0;
        }
        src += ti.offset;
    } else {
        if (grow(g, ti.numel))
            return run_fail(pl->run, WEFT_ENOMEM, "out of memory");
        weft_request *rq;
        rc = weft_irecv_tag(pl->job, g->buf, ti.numel, WEFT_F32, from,
                            gather_tag(i, j, g->nstate), &rq);
        if (rc == 0)
            rc = weft_wait(rq);
        src = g->buf;
    }
    if (rc == 0)
        place(shell, i, src, dst);
    return rc;
}

/* Tensor i of the shell, one of the divided experts: each expert rank's
 * block from the replica that holds it (replica q of the stage and
 * tensor rank holds the experts of expert rank q). */
static int take_experts(gather_ctx *g, weft_model *shell, int i, int s, int t)
{
    int rc = 0;
    for (int q = 0; q < g->E && rc == 0; q++) {
        train_moe_split_rank(shell, q);
        int from = weft_layout_rank(&g->pl->layout, t, q, s);
        for (int j = 0; j <= g->nstate && rc == 0; j++)
            rc = take_vector(g, shell, i, j, from);
    }
    train_moe_split_rank(shell, 0);
    return rc;
}

/* The lead's word to the senders of the part of stage s, tensor rank t
 * (send_part): go (1) or not (0). */
static int tell_part(gather_ctx *g, int s, int t, int32_t go)
{
    int rc = 0;
    for (int q = 0; q < g->E; q++) {
        int to = weft_layout_rank(&g->pl->layout, t, q, s);
        int r = to != 0 ? weft_send_tag(g->pl->job, &go, 1, WEFT_I32, to, GO_TAG) : 0;
        rc = rc ? rc : r;
    }
    return rc;
}

/* The lead: the part of stage s, tensor rank t, its own or received; after
 * a failure (failed), only the word not to send it. */
static int take_part(gather_ctx *g, int s, int t, int failed)
{
    const pipeline *pl = g->pl;
    weft_block_range ch[WEFT_STAGE_MAX_CHUNKS];
    stage_chunks(pl, s, ch);
    weft_model *shell = g->m;
    int from = weft_layout_rank(&pl->layout, t, 0, s), rc = 0;
    if (failed) {
        rc = tell_part(g, s, t, 0);
        return rc ? run_fail(pl->run, rc, "stopping stage %d (tensor rank %d): %s: %s", s, t,
                             weft_strerror(rc), weft_comm_error(pl->job)) : failed;
    }
    /* with divided experts a shell of its own even for the lead's part: its
     * expert rank is moved to place each replica's experts */
    if (ckpt_test_fail(pl->run, "take") && s == pl->pp - 1 && t == pl->tp - 1 && s + t > 0)
        rc = WEFT_ENOMEM;
    else if ((from != 0 || g->E > 1) &&
             (rc = weft_model_create_tp(&shell, &pl->cfg, 0, ch, pl->v, 0, NULL, pl->tp, t)) ==
                 0 &&
             g->E > 1 && (rc = train_moe_split_table(shell, g->E)) != 0)
        weft_model_destroy(shell);
    /* the buffer for the largest of the part's tensors now: once its
     * senders are told to go, every message they send is taken */
    size_t most = 0;
    for (int i = 0; rc == 0 && i < weft_model_tensor_count(shell); i++) {
        weft_tensor_info ti;
        weft_model_tensor_info(shell, i, &ti);
        most = ti.numel > most ? ti.numel : most;
    }
    if (rc == 0 && grow(g, most)) {
        rc = WEFT_ENOMEM;
        if (shell != g->m)
            weft_model_destroy(shell);
    }
    int told = tell_part(g, s, t, rc == 0);
    if (rc)
        return run_fail(pl->run, rc, "cannot assemble stage %d: %s", s, weft_strerror(rc));
    rc = told;
    for (int i = 0; i < weft_model_tensor_count(shell) && rc == 0; i++) {
        if (sent_by_other(shell, i, s, t))
            continue;
        if (train_moe_split_is_expert(shell, i)) {
            rc = take_experts(g, shell, i, s, t);
            continue;
        }
        for (int j = 0; j <= g->nstate && rc == 0; j++)
            rc = take_vector(g, shell, i, j, from);
    }
    if (shell != g->m)
        weft_model_destroy(shell);
    rc = rc ? rc : g->missing;
    if (rc) /* the first failure's message stands (run_fail) */
        rc = run_fail(pl->run, rc, "receiving stage %d (tensor rank %d): %s: %s", s, t,
                      weft_strerror(rc), weft_comm_error(pl->job));
    return rc;
}

/* The lead: the whole model (and optimiser, with opt) from every part. */
static int assemble(gather_ctx *g, weft_optim **opt, weft_model **out)
{
    const pipeline *pl = g->pl;
    weft_model *whole = NULL;
    size_t N = 0;
    int rc = weft_model_create(&whole, &pl->cfg, 0);
    if (rc)
        rc = run_fail(pl->run, rc, "cannot assemble the whole model: %s", weft_strerror(rc));
    else
        g->WP = weft_model_params(whole, &N);
    if (opt && rc == 0) {
        uint64_t steps = 0;
        weft_ckpt_get_u64(g->ck, "optim/steps", &steps);
        if ((rc = weft_optim_create(&g->full, weft_optim_config_of(g->any), 0, N)) ||
            (rc = weft_optim_set_steps(g->full, (int64_t)steps)))
            rc = run_fail(pl->run, rc, "cannot assemble the optimiser: %s", weft_strerror(rc));
    }
    /* a failure part-way still tells every later part's senders not to
     * send: none waits for a receive that will not come */
    for (int s = 0; s < pl->pp; s++)
        for (int t = 0; t < pl->tp; t++)
            rc = take_part(g, s, t, rc);
    free(g->buf);
    if (rc) {
        weft_optim_destroy(g->full);
        weft_model_destroy(whole);
        return rc;
    }
    if (opt)
        *opt = g->full;
    *out = whole;
    return 0;
}

/* The optimiser state of the part into g->ck on replica 0 (collective
 * over the replicas); with divided experts, replica 0's own experts' (the
 * other expert ranks send theirs, send_part). */
static int put_optim(gather_ctx *g)
{
    if (g->E < 2)
        return weft_zero_put_optim(g->z, g->ck);
    weft_optim *full = NULL;
    int rc = train_zero_full_optim(g->z, &full);
    if (rc == 0 && full)
        rc = weft_ckpt_put_optim(g->ck, full);
    weft_optim_destroy(full);
    return rc;
}

int pipeline_gather(const pipeline *pl, weft_model *m, weft_zero *z, weft_optim **opt,
                    weft_model **out)
{
    gather_ctx g = { .pl = pl, .m = m, .z = z, .any = weft_zero_optim(z),
                     .E = train_moe_split_size(m) };
    g.nstate = opt ? weft_optim_state_count(g.any) : 0;
    *out = NULL;
    /* ZeRO-3 keeps only this replica's shard of the part after a step: the
     * part whole again before it is sent (collective over the replicas) */
    int rc = z ? weft_zero_gather_params(z) : 0;
    if (rc)
        return run_fail(pl->run, rc, "gathering parameters: %s", weft_strerror(rc));
    if (opt) {
        *opt = NULL;
        if (pl->replica == 0 && (rc = weft_ckpt_new(&g.ck)))
            return run_fail(pl->run, rc, "out of memory");
        rc = put_optim(&g);
        if (rc == 0 && ckpt_test_fail(pl->run, "optim"))
            rc = WEFT_EIO;
        if (rc)
            run_fail(pl->run, rc, "gathering the optimiser state: %s", weft_strerror(rc));
        /* a part not gathered would not be sent: every rank learns of it
         * before rank 0 waits for the parts */
        if ((rc = ckpt_agree(pl->job, rc)) != 0) {
            weft_ckpt_free(g.ck);
            return run_fail(pl->run, rc, "gathering the optimiser state: %s",
                            weft_strerror(rc));
        }
    }
    g.P = weft_model_params(m, NULL);
    /* with divided experts the other expert ranks of the first expert
     * group send theirs */
    if (pl->replica < g.E)
        rc = pl->job_rank != 0 ? send_part(&g) : assemble(&g, opt, out);
    else if (g.E > 1 && m->ep_rank != 0)
        rc = give_shards(&g);
    if (pl->job_rank != 0)
        free(g.buf);
    weft_ckpt_free(g.ck);
    /* a save's parts were all sent even where one failed: all agree before
     * rank 0 writes what it took */
    if (opt && (rc = ckpt_agree(pl->job, rc)) != 0) {
        if (pl->job_rank == 0) {
            weft_optim_destroy(*opt);
            weft_model_destroy(*out);
            *opt = NULL;
            *out = NULL;
        }
        rc = run_fail(pl->run, rc, "a rank failed its part of the save: %s", weft_strerror(rc));
    }
    return rc;
}

void pipeline_close(pipeline *pl)
{
    if (!pl)
        return;
    weft_pipe_destroy(pl->pipe);
    sim_pipe_plan_free(&pl->plan);
    sim_block_costs_free(&pl->costs);
    weft_comm_destroy(pl->pp_comm);
    weft_comm_destroy(pl->dp_comm);
    weft_comm_destroy(pl->tp_comm);
    free(pl);
}

void pipeline_view_of(const pipeline *pl, pipeline_view *v)
{
    v->pp_comm = pl->pp_comm;
    v->dp_comm = pl->replicas > 1 ? pl->dp_comm : NULL;
    v->tp_comm = pl->tp > 1 ? pl->tp_comm : NULL;
    v->tp = pl->tp;
    v->pp = pl->pp;
    v->v = pl->v;
    v->stage = pl->stage;
    v->tp_rank = pl->tp_rank;
    v->replica = pl->replica;
    v->replicas = pl->replicas;
    v->model = pl->model;
    v->z = pl->z;
}

int pipeline_step(pipeline *pl, weft_zero *z, const weft_batch *b, int image, train_step *st)
{
    if (!pl->counted) {
        weft_model_tp_stats(pl->model, &pl->tp0_calls, &pl->tp0_bytes);
        pl->counted = 1;
    }
    int rc = weft_zero_micro(z, b->n, b->global_n, 1);
    weft_pipe_stats ps = { 0 };
    const void *in = image ? (const void *)b->x : (const void *)b->tokens;
    if (rc == 0)
        rc = weft_pipe_step(pl->pipe, in, b->y, b->n, b->x_dim, &ps);
    if (rc && pl->elastic)
        return rc; /* the survivors rebuild the layout (run_elastic.c) */
    if (rc)
        return run_fail(pl->run, rc, "pipeline stage %d: %s: %s", pl->stage, weft_strerror(rc),
                        weft_pipe_error(pl->pipe));
    /* The last stage has the loss. The step is the longest rank's span (the
     * first stage's, which starts the step and ends it), so every stage's
     * idle share is of the same step, whatever the hosts' clocks. */
    double v[3] = { ps.loss, ps.correct, ps.busy_s }, span = ps.step_s;
    if ((rc = weft_allreduce(pl->pp_comm, v, v, 3, WEFT_F64, WEFT_SUM)) ||
        (rc = weft_allreduce(pl->pp_comm, &span, &span, 1, WEFT_F64, WEFT_MAX))) {
        if (pl->elastic)
            return rc;
        return run_fail(pl->run, rc, "pipeline stage %d: %s: %s", pl->stage, weft_strerror(rc),
                        weft_comm_error(pl->pp_comm));
    }
    /* the replica's mean, weighted as data parallelism sums it */
    st->loss = (float)(v[0] * b->n / b->global_n);
    st->correct = (int)lrint(v[1]);
    st->bubble = span > 0 ? 1.0 - v[2] / (pl->pp * span) : 0;
    pl->busy += ps.busy_s;
    pl->sends += ps.sends;
    pl->send_bytes += ps.send_bytes;
    pl->peak_stash = ps.peak_stash > pl->peak_stash ? ps.peak_stash : pl->peak_stash;
    pl->span += span;
    pl->steps++;
    return 0;
}

/* ---- --elastic: a replica lost, the layout rebuilt without it ------------ */

int pipeline_micro(const pipeline *pl)
{
    return pl->spec.m;
}

int pipeline_traces(const pipeline *pl)
{
    return pl->stage == 0 && pl->tp_rank == 0;
}

int pipeline_whole(const pipeline *pl, const int *olds, int n, int *whole, int *lost,
                   int *wholes)
{
    int g = pl->pp * pl->tp, *count = calloc((size_t)pl->replicas, sizeof *count);
    if (!count)
        return run_fail(pl->run, WEFT_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        int t, d, s;
        weft_layout_coords(&pl->layout, olds[i], &t, &d, &s);
        count[d]++;
    }
    *wholes = 0;
    for (int d = 0; d < pl->replicas; d++)
        *wholes += count[d] == g;
    *whole = count[pl->replica] == g;
    free(count);
    *lost = -1;
    for (int s = 0; s < pl->pp && *lost < 0; s++)
        for (int t = 0; t < pl->tp && *lost < 0; t++) {
            int r = weft_layout_rank(&pl->layout, t, pl->replica, s), in = 0;
            for (int i = 0; i < n; i++)
                in |= olds[i] == r;
            if (!in)
                *lost = r;
        }
    return 0;
}

/* Aborted, a group's destruction waits for no member (some are gone).
 * Its peers still blocked in it must fail too, so that the whole job
 * leaves the step: between ranks of one host (shared memory) nothing but
 * a failure notice tells them, and an operation that an abort fails in
 * progress leaves one (a few ms to let it start; without it the peers
 * wait out the timeout). */
static void abort_group(weft_comm *c)
{
    int32_t v = 0;
    weft_request *rq = NULL;
    int done = 0;
    if (c && weft_comm_size(c) > 1 && weft_iallreduce(c, &v, &v, 1, WEFT_I32, WEFT_SUM, &rq))
        rq = NULL;
    for (int i = 0; rq && i < 20; i++) {
        struct timespec ms = { 0, 1000000 };
        weft_test(rq, &done);
        if (done) {
            rq = NULL;
            break;
        }
        nanosleep(&ms, NULL);
    }
    weft_comm_abort(c);
    if (rq)
        weft_wait(rq);
}

void pipeline_abort(pipeline *pl)
{
    abort_group(pl->pp_comm);
    abort_group(pl->dp_comm);
    abort_group(pl->tp_comm);
}

void pipeline_abandon(pipeline *pl)
{
    pipeline_abort(pl);
    weft_pipe_destroy(pl->pipe);
    weft_comm_destroy(pl->pp_comm);
    weft_comm_destroy(pl->dp_comm);
    weft_comm_destroy(pl->tp_comm);
    pl->pipe = NULL;
    pl->pp_comm = pl->dp_comm = pl->tp_comm = NULL;
}

/* Micro-batches for this many replicas: the launch's, times the replicas
 * lost where that divides, so a micro-batch keeps its rows (and memory). */
static int micro_for(const pipeline *pl, int replicas)
{
    long m = (long)pl->m0 * pl->replicas0;
    return m % replicas == 0 ? (int)(m / replicas) : pl->m0;
}

int pipeline_reopen(pipeline *pl, const opts *o, weft_comm *job, weft_model **m)
{
    int n = weft_comm_size(job), t, d, s;
    weft_layout l;
    if (weft_layout_init(&l, n, pl->tp, pl->pp, o->order) != 0)
        return WEFT_EINVAL;
    weft_layout_coords(&l, weft_comm_rank(job), &t, &d, &s);
    /* whole replicas dropped from a layout keep every other rank's stage and
     * tensor rank: its part of the model stays what it was */
    if (t != pl->tp_rank || s != pl->stage)
        return run_fail(pl->run, WEFT_EINVAL,
                        "elastic: rank %d would move from stage %d, tensor rank %d to stage "
                        "%d, tensor rank %d", weft_comm_rank(job), pl->stage, pl->tp_rank, s, t);
    pl->layout = l;
    pl->job = job;
    pl->job_rank = weft_comm_rank(job);
    pl->job_size = n;
    pl->replica = d;
    pl->replicas = n / (pl->pp * pl->tp);
    if (pipe_spec_parse(pl->schedule, pl->pp, micro_for(pl, pl->replicas), &pl->spec) != 0)
        pipe_spec_parse(pl->schedule, pl->pp, pl->m0, &pl->spec);
    int rc = weft_layout_split(&pl->layout, job, &pl->tp_comm, &pl->dp_comm, &pl->pp_comm);
    if (rc || pl->tp == 1)
        return rc;
    /* the model's tensor-parallel collectives run on the old group: the
     * same part anew over the new one, with the parameters it had */
    weft_model *nm;
    if ((rc = pipeline_model(pl, o, NULL, &nm)))
        return rc;
    size_t a, b;
    float *src = weft_model_params(*m, &a), *dst = weft_model_params(nm, &b);
    if (a != b) {
        weft_model_destroy(nm);
        return run_fail(pl->run, WEFT_EINVAL, "elastic: stage %d's part changed size (%zu, %zu)",
                        pl->stage, a, b);
    }
    memcpy(dst, src, a * sizeof *dst);
    if ((rc = model_tune(pl->run, nm, o))) {
        weft_model_destroy(nm);
        return rc;
    }
    weft_model_destroy(*m);
    *m = nm;
    pl->model = nm;
    pl->counted = 0;
    return 0;
}
