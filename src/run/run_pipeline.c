/* weft-train --tp T --pp P: the job as tp x dp x pp (weft_layout, in the
 * order --order gives, tensor fastest by default): every tensor rank of a
 * stage holds its part of the stage's blocks, P stages make a pipeline,
 * and each (stage, tensor rank) averages over its dp replicas. Every rank
 * of a replica loads the same batch; the first stage reads its inputs,
 * the last its targets. Blocks are cut into P*V chunks (V > 1 for the
 * interleaved schedule) from measured block costs, and checkpoints are
 * assembled on job rank 0 in the whole model's layout, so they resume on
 * any layout. */
#include "train_tool.h"

#include "sim/pipe_costs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pipeline {
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

pipeline *pipeline_open(const opts *o, weft_comm *job)
{
    int pp = o->pp > 1 ? o->pp : 1, tp = o->tp > 1 ? o->tp : 1;
    if (pp == 1 && tp == 1)
        return NULL;
    int n = job ? weft_comm_size(job) : 1;
    if (n % (pp * tp))
        die("--tp %d --pp %d: the job's %d ranks are not a multiple of %d", tp, pp, n, tp * pp);
    pipeline *pl = calloc(1, sizeof *pl);
    if (!pl)
        die("out of memory");
    if (weft_layout_init(&pl->layout, n, tp, pp, o->order) != 0)
        die("--order %s: want the three of tp, dp, pp, fastest first (tp-dp-pp)", o->order);
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
        die("--schedule %s: want gpipe, 1f1b, interleaved:V (V >= 2, --pp 2 or more) or zb",
            pl->schedule);
    pl->v = pl->spec.v;
    pl->k = pl->pp * pl->v;
    pl->elastic = o->elastic;
    pl->m0 = m;
    pl->replicas0 = pl->replicas;
    int rc = weft_layout_split(&pl->layout, job, &pl->tp_comm, &pl->dp_comm, &pl->pp_comm);
    if (rc)
        die("tensor, data and pipeline groups: %s: %s", weft_strerror(rc), weft_comm_error(job));
    return pl;
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

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rows of one micro-batch of this replica's share of the batch. */
static int micro_rows(const pipeline *pl, const run_opts *r)
{
    int local = r->batch / pl->replicas;
    int n = local / pl->spec.m;
    return n > 0 ? n : 1;
}

/* Forward, input backward and weight backward of block b alone on one
 * micro-batch: the fastest of three, after one to warm up. */
static void measure_block(const pipeline *pl, const opts *o, int b, double *out)
{
    const weft_model_config *cfg = &pl->cfg;
    weft_block_range one = { b, 1 };
    weft_model *m;
    if (weft_model_create_stage(&m, cfg, 1, &one, 1, WEFT_STAGE_SPLIT_BACKWARD) != 0)
        die("measuring block %d: cannot create it", b);
    model_tune(m, o);
    int gpt = cfg->type == WEFT_MODEL_GPT, B = micro_rows(pl, &o->r), T = gpt ? o->r.seq : 1;
    size_t in_n, out_n, rows = (size_t)B * T;
    weft_model_chunk_io(m, 0, B, T, &in_n, &out_n);
    size_t xin = b == 0 ? (gpt ? rows : (size_t)B * cfg->widths[0]) : in_n;
    float *x = calloc(xin ? xin : 1, sizeof(float)), *g = calloc(out_n ? out_n : 1, sizeof(float));
    int32_t *y = calloc(rows, sizeof(int32_t));
    if (!x || !g || !y)
        die("out of memory");
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
    double best[3] = { 1e30, 1e30, 1e30 };
    for (int rep = 0; rep < 4; rep++) {
        double t0 = now_mono();
        int rc = weft_model_chunk_forward(m, 0, 0, x, y, B, T, NULL);
        double t1 = now_mono();
        if (rc == 0)
            rc = weft_model_chunk_backward(m, 0, 0, out_n ? g : NULL, 1.0f, WEFT_BACKWARD_INPUT, 0);
        double t2 = now_mono();
        if (rc == 0)
            rc = weft_model_chunk_backward(m, 0, 0, NULL, 1.0f, WEFT_BACKWARD_WEIGHT, 0);
        double t3 = now_mono();
        if (rc)
            die("measuring block %d: %s", b, weft_strerror(rc));
        double d[3] = { t1 - t0, t2 - t1, t3 - t2 };
        for (int j = 0; rep > 0 && j < 3; j++)
            best[j] = d[j] < best[j] ? d[j] : best[j];
    }
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
    weft_model_destroy(m);
    free(x);
    free(g);
    free(y);
}

/* Every job rank measures its share of the blocks; the sum gives every
 * rank the same figures, so the same partition. */
static void measure(pipeline *pl, const opts *o, weft_comm *job)
{
    int nb = weft_model_block_count(&pl->cfg);
    double *v = calloc((size_t)nb * 6, sizeof(double));
    if (!v)
        die("out of memory");
    for (int b = pl->job_rank; b < nb; b += pl->job_size)
        measure_block(pl, o, b, v + 6 * b);
    int rc = weft_allreduce(job, v, v, (size_t)nb * 6, WEFT_F64, WEFT_SUM);
    if (rc)
        die("sharing block costs: %s: %s", weft_strerror(rc), weft_comm_error(job));
    sim_block_costs *bc = &pl->costs;
    bc->b = calloc((size_t)nb, sizeof *bc->b);
    if (!bc->b)
        die("out of memory");
    bc->n = bc->cap = nb;
    for (int b = 0; b < nb; b++) {
        sim_block_cost *c = &bc->b[b];
        int gpt = pl->cfg.type == WEFT_MODEL_GPT;
        if (gpt)
            snprintf(c->name, sizeof c->name, "%s", b == 0 ? "embedding" : b == nb - 1 ? "head"
                                                                                   : "block");
        else
            snprintf(c->name, sizeof c->name, "linear");
        if (gpt && b > 0 && b < nb - 1)
            snprintf(c->name, sizeof c->name, "block.%d", b - 1);
        else if (!gpt)
            snprintf(c->name, sizeof c->name, "layer.%d", b);
        c->fwd = v[6 * b];
        c->bwd_i = v[6 * b + 1];
        c->bwd_w = v[6 * b + 2];
        c->act_bytes = v[6 * b + 3];
        c->state_bytes = v[6 * b + 4];
        c->out_bytes = v[6 * b + 5];
    }
    free(v);
}

static void write_costs(const pipeline *pl, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("--pp-costs %s: cannot write", path);
    fprintf(f, "# weft-train block costs: name fwd_s bwd_input_s bwd_weight_s act_bytes "
               "state_bytes out_bytes\n");
    for (int b = 0; b < pl->costs.n; b++) {
        const sim_block_cost *c = &pl->costs.b[b];
        fprintf(f, "%s %.9g %.9g %.9g %.0f %.0f %.0f\n", c->name, c->fwd, c->bwd_i, c->bwd_w,
                c->act_bytes, c->state_bytes, c->out_bytes);
    }
    if (fclose(f) != 0)
        die("--pp-costs %s: cannot write", path);
}

void pipeline_plan(pipeline *pl, const opts *o, const weft_model_config *cfg, weft_comm *job)
{
    pl->cfg = *cfg;
    int nb = weft_model_block_count(cfg);
    if (nb < pl->k)
        die("--pp %d%s: the model has %d blocks, fewer than the %d chunks", pl->pp,
            pl->v > 1 ? " with interleaving" : "", nb, pl->k);
    measure(pl, o, job);
    char err[256] = "";
    const char *part = o->pp_partition[0] ? o->pp_partition : "auto";
    int rc = sim_pipe_plan_run(&pl->costs, &pl->spec, part, o->pp_memory_mb * 1048576.0, 0, 0,
                               &pl->plan, err, sizeof err);
    if (rc)
        die("--pp-partition %s: %s", part, err[0] ? err : weft_strerror(rc));
    if (o->pp_costs[0] && pl->job_rank == 0)
        write_costs(pl, o->pp_costs);
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

weft_model *pipeline_model(const pipeline *pl, const opts *o, weft_ckpt *ck)
{
    weft_block_range ch[WEFT_STAGE_MAX_CHUNKS];
    stage_chunks(pl, pl->stage, ch);
    weft_model *m;
    const run_opts *r = &o->r;
    if (o->sp && pl->cfg.type != WEFT_MODEL_GPT)
        die("--sp splits a GPT's sequence; an MLP has none");
    int local = r->batch / pl->replicas;
    if (o->sp && (local % pl->spec.m || (micro_rows(pl, r) * r->seq) % pl->tp))
        die("--sp: each micro-batch's rows (batch %d / %d replicas / %d micro-batches, x %d "
            "tokens) must split evenly in %d", r->batch, pl->replicas, pl->spec.m, r->seq, pl->tp);
    if (o->sp && strcmp(r->precision, "bf16") == 0)
        die("--sp runs in fp32, not --precision bf16");
    int rc = weft_model_create_tp(&m, &pl->cfg, r->seed, ch, pl->v, stage_flags(pl, o->sp),
                                  pl->tp > 1 ? pl->tp_comm : NULL, 1, 0);
    if (rc == WEFT_EINVAL && pl->tp > 1)
        die("--tp %d: the model does not split in %d (a GPT needs heads divisible by it, an "
            "MLP its hidden widths)", pl->tp, pl->tp);
    if (rc == 0 && ck)
        rc = weft_ckpt_get_params(ck, m);
    if (rc)
        die("cannot create pipeline stage %d: %s", pl->stage, weft_strerror(rc));
    return m;
}

/* Whole on every tensor rank (LayerNorms, row-parallel biases, positions). */
static int replicated(const weft_model *m, int i)
{
    weft_tensor_info t;
    weft_model_tensor_info(m, i, &t);
    return t.numel == t.whole_numel;
}

void pipeline_attach(pipeline *pl, weft_model *m, weft_zero *z)
{
    pl->model = m;
    pl->z = z;
    /* every micro-batch would gather each block again: a stage's
     * parameters are gathered once per step */
    weft_zero_set_layerwise(z, 0);
    weft_model_params(m, &pl->nparams);
    int rc = weft_pipe_create(&pl->pipe, pl->pp_comm, m, pl->schedule, pl->spec.m);
    if (rc)
        die("--schedule %s with %d micro-batches: %s", pl->schedule, pl->spec.m,
            weft_strerror(rc));
    /* the norm that clips spans the pipeline and the tensor group; the last
     * stage's copy of a tied embedding is counted by the first, a replicated
     * tensor by tensor rank 0 */
    int nt = weft_model_tensor_count(m), tied = weft_model_tied_tensor(m);
    unsigned char *skip = calloc((size_t)nt + 1, 1);
    if (!skip)
        die("out of memory");
    for (int i = 0; i < nt; i++)
        skip[i] = (i == tied && pl->stage != 0) || (pl->tp_rank != 0 && replicated(m, i));
    weft_comm *groups[2] = { pl->pp_comm, pl->tp_comm };
    if ((rc = weft_zero_set_norm_group(z, groups, 2, skip)))
        die("pipeline norm: %s", weft_strerror(rc));
    free(skip);
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
    char nm[32];
    pipe_spec_name(&pl->spec, nm, sizeof nm);
    char ord[16];
    weft_layout_format(&pl->layout, ord, sizeof ord);
    printf("layout: tp %d x dp %d x pp %d (order %s); pipeline schedule %s, %d micro-batches "
           "of %d samples\n", pl->tp, pl->replicas, pl->pp, ord, nm, pl->spec.m,
           micro_rows(pl, r));
    printf("  partition (blocks per chunk):");
    for (int c = 0; c < pl->k; c++)
        printf("%s%d", c ? "," : " ", pl->plan.first[c + 1] - pl->plan.first[c]);
    printf("; predicted share of the work per stage:");
    for (int s = 0; s < pl->pp; s++)
        printf(" %.3f", predicted_share(pl, s));
    printf("\n  predicted step %.2f ms, bubble", 1e3 * pl->plan.step);
    for (int s = 0; s < pl->pp; s++)
        printf(" %.3f", pl->plan.bubble[s]);
    printf(" (formula %.3f)\n", (double)(pl->pp - 1) /
           (pl->spec.v * pl->spec.m + pl->pp - 1));
    fflush(stdout);
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
 * the replay against the measured step. Collective over the pipeline. */
static double calibrate(pipeline *pl, const char *costs_path)
{
    double *v = calloc((size_t)pl->k * 3, sizeof(double));
    if (!v)
        die("out of memory");
    for (int j = 0; j < pl->v; j++)
        weft_pipe_chunk_seconds(pl->pipe, j, &v[3 * (pl->stage + j * pl->pp)],
                                &v[3 * (pl->stage + j * pl->pp) + 1],
                                &v[3 * (pl->stage + j * pl->pp) + 2]);
    int rc = weft_allreduce(pl->pp_comm, v, v, (size_t)pl->k * 3, WEFT_F64, WEFT_SUM);
    if (rc)
        die("pipeline summary: %s", weft_strerror(rc));
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
    if (costs_path[0] && pl->job_rank == 0)
        write_costs(pl, costs_path);
    sim_pipe_plan re;
    char err[256];
    if (sim_pipe_plan_run(&pl->costs, &pl->spec, part, 0, 0, 0, &re, err, sizeof err) != 0)
        return 0;
    double step = re.step;
    sim_pipe_plan_free(&re);
    return step;
}

void pipeline_summary(pipeline *pl, const opts *o)
{
    int quiet = o->quiet;
    double replayed = pl->steps > 0 ? calibrate(pl, o->pp_costs) : 0;
    /* the fullest rank's memory: state resident (mincore) against the ZeRO
     * formula, and one micro-batch's activations */
    weft_zero_mem zm;
    weft_zero_memory(pl->z, &zm);
    double mem[3] = { (double)zm.resident_bytes, zm.formula_bytes,
                      (double)weft_model_activation_bytes(pl->model) };
    if (pl->job && weft_allreduce(pl->job, mem, mem, 3, WEFT_F64, WEFT_MAX) != 0)
        die("pipeline summary: %s", weft_comm_error(pl->job));
    if (pl->job_rank == 0 && !quiet)
        printf("memory, the fullest rank: training state %.0f B resident, %.0f B by the ZeRO "
               "formula; activations of a micro-batch %.0f B\n", mem[0], mem[1], mem[2]);
    /* every stage's compute seconds, to the lead */
    double *v = calloc((size_t)pl->pp * 3, sizeof(double));
    if (!v)
        die("out of memory");
    v[3 * pl->stage] = pl->busy;
    v[3 * pl->stage + 1] = pl->span;
    v[3 * pl->stage + 2] = pl->peak_stash;
    int rc = weft_allreduce(pl->pp_comm, v, v, (size_t)pl->pp * 3, WEFT_F64, WEFT_SUM);
    if (rc)
        die("pipeline summary: %s", weft_strerror(rc));
    if (pl->job_rank == 0 && pl->steps > 0 && !quiet) {
        double all = 0, bubble = 0;
        for (int s = 0; s < pl->pp; s++)
            all += v[3 * s];
        printf("pipeline per stage (share of the work predicted/measured, bubble, peak stash):");
        for (int s = 0; s < pl->pp; s++) {
            double b = v[3 * s + 1] > 0 ? 1 - v[3 * s] / v[3 * s + 1] : 0;
            bubble += b / pl->pp;
            printf(" %d: %.3f/%.3f %.3f %d", s, predicted_share(pl, s),
                   all > 0 ? v[3 * s] / all : 0, b, (int)v[3 * s + 2]);
        }
        uint64_t calls, bytes;
        weft_model_tp_stats(pl->model, &calls, &bytes);
        double ns = (double)pl->steps;
        printf("\nper step, rank 0: tp %.1f all-reduces (%.3f MB), pp %.1f sends (%.3f MB), "
               "dp %s (%.3f MB)", (double)(calls - pl->tp0_calls) / ns,
               (double)(bytes - pl->tp0_bytes) / ns / 1e6, pl->sends / ns,
               pl->send_bytes / ns / 1e6, pl->replicas > 1 ? "gradient reduction" : "none",
               pl->replicas > 1 ? (double)pl->nparams * 4 / 1e6 : 0.0);
        printf("\npipeline step: %.2f ms measured, %.2f ms predicted from the blocks alone, "
               "%.2f ms replayed with this run's compute times; bubble %.4f measured, %.4f "
               "predicted\n", 1e3 * v[1] / (double)pl->steps, 1e3 * pl->plan.step,
               1e3 * replayed, bubble, mean_bubble(pl));
    }
    free(v);
}

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

weft_model *pipeline_gather(const pipeline *pl, weft_model *m, weft_zero *z, weft_optim **opt)
{
    weft_ckpt *ck = NULL;
    weft_optim *any = weft_zero_optim(z);
    int nstate = opt ? weft_optim_state_count(any) : 0, rc = 0;
    if (opt) {
        *opt = NULL;
        if (pl->replica == 0 && (rc = weft_ckpt_new(&ck)))
            die("out of memory");
        if ((rc = weft_zero_put_optim(z, ck)))
            die("gathering the optimiser state: %s", weft_strerror(rc));
    }
    if (pl->replica != 0) {
        weft_ckpt_free(ck);
        return NULL;
    }
    const float *P = weft_model_params(m, NULL);
    if (pl->job_rank != 0) {
        /* every tensor this part is the one to send, then its optimiser states */
        for (int i = 0; i < weft_model_tensor_count(m) && rc == 0; i++) {
            weft_tensor_info ti;
            weft_model_tensor_info(m, i, &ti);
            if (sent_by_other(m, i, pl->stage, pl->tp_rank))
                continue;
            for (int j = 0; j <= nstate && rc == 0; j++) {
                const char *sname = NULL;
                if (j)
                    weft_optim_state(any, j - 1, &sname);
                const float *src = j ? state_of(ck, sname) : P;
                if (!src)
                    die("gathering the optimiser state: no %s", sname);
                weft_request *rq;
                rc = weft_isend_tag(pl->job, src + ti.offset, ti.numel, WEFT_F32, 0,
                                    gather_tag(i, j, nstate), &rq);
                if (rc == 0)
                    rc = weft_wait(rq);
            }
        }
        if (rc)
            die("sending stage %d (tensor rank %d) to rank 0: %s: %s", pl->stage, pl->tp_rank,
                weft_strerror(rc), weft_comm_error(pl->job));
        weft_ckpt_free(ck);
        return NULL;
    }
    weft_model *whole;
    weft_optim *full = NULL;
    if ((rc = weft_model_create(&whole, &pl->cfg, 0)))
        die("cannot assemble the whole model: %s", weft_strerror(rc));
    size_t N;
    float *WP = weft_model_params(whole, &N);
    if (opt) {
        uint64_t steps = 0;
        weft_ckpt_get_u64(ck, "optim/steps", &steps);
        if ((rc = weft_optim_create(&full, weft_optim_config_of(any), 0, N)) ||
            (rc = weft_optim_set_steps(full, (int64_t)steps)))
            die("cannot assemble the optimiser: %s", weft_strerror(rc));
    }
    float *buf = NULL;
    size_t cap = 0;
    for (int s = 0; s < pl->pp; s++)
        for (int t = 0; t < pl->tp; t++) {
            weft_block_range ch[WEFT_STAGE_MAX_CHUNKS];
            stage_chunks(pl, s, ch);
            weft_model *shell = m;
            int from = weft_layout_rank(&pl->layout, t, 0, s);
            if (from != 0 &&
                (rc = weft_model_create_tp(&shell, &pl->cfg, 0, ch, pl->v, 0, NULL, pl->tp, t)))
                die("cannot assemble stage %d: %s", s, weft_strerror(rc));
            for (int i = 0; i < weft_model_tensor_count(shell) && rc == 0; i++) {
                weft_tensor_info ti;
                weft_model_tensor_info(shell, i, &ti);
                if (sent_by_other(shell, i, s, t))
                    continue;
                for (int j = 0; j <= nstate && rc == 0; j++) {
                    const char *sname = NULL;
                    float *dst = j ? weft_optim_state(full, j - 1, &sname) : WP;
                    const float *src;
                    if (from == 0) {
                        src = (j ? state_of(ck, sname) : P);
                        if (!src)
                            die("gathering the optimiser state: no %s", sname);
                        src += ti.offset;
                    } else {
                        if (ti.numel > cap) {
                            free(buf);
                            cap = ti.numel;
                            if (!(buf = malloc(cap * sizeof(float))))
                                die("out of memory");
                        }
                        weft_request *rq;
                        rc = weft_irecv_tag(pl->job, buf, ti.numel, WEFT_F32, from,
                                            gather_tag(i, j, nstate), &rq);
                        if (rc == 0)
                            rc = weft_wait(rq);
                        src = buf;
                    }
                    if (rc == 0)
                        place(shell, i, src, dst);
                }
            }
            if (rc)
                die("receiving stage %d (tensor rank %d): %s: %s", s, t, weft_strerror(rc),
                    weft_comm_error(pl->job));
            if (shell != m)
                weft_model_destroy(shell);
        }
    free(buf);
    weft_ckpt_free(ck);
    if (opt)
        *opt = full;
    return whole;
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
        return rc; /* the survivors rebuild the layout (elastic.c) */
    if (rc)
        die("pipeline stage %d: %s: %s", pl->stage, weft_strerror(rc), weft_pipe_error(pl->pipe));
    /* The last stage has the loss. The step is the longest rank's span (the
     * first stage's, which starts the step and ends it), so every stage's
     * idle share is of the same step, whatever the hosts' clocks. */
    double v[3] = { ps.loss, ps.correct, ps.busy_s }, span = ps.step_s;
    if ((rc = weft_allreduce(pl->pp_comm, v, v, 3, WEFT_F64, WEFT_SUM)) ||
        (rc = weft_allreduce(pl->pp_comm, &span, &span, 1, WEFT_F64, WEFT_MAX))) {
        if (pl->elastic)
            return rc;
        die("pipeline stage %d: %s: %s", pl->stage, weft_strerror(rc),
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

int pipeline_whole(const pipeline *pl, const int *olds, int n, int *lost, int *wholes)
{
    int g = pl->pp * pl->tp, *count = calloc((size_t)pl->replicas, sizeof *count);
    if (!count)
        die("out of memory");
    for (int i = 0; i < n; i++) {
        int t, d, s;
        weft_layout_coords(&pl->layout, olds[i], &t, &d, &s);
        count[d]++;
    }
    *wholes = 0;
    for (int d = 0; d < pl->replicas; d++)
        *wholes += count[d] == g;
    int whole = count[pl->replica] == g;
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
    return whole;
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
        die("elastic: rank %d would move from stage %d, tensor rank %d to stage %d, tensor "
            "rank %d", weft_comm_rank(job), pl->stage, pl->tp_rank, s, t);
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
    weft_model *nm = pipeline_model(pl, o, NULL);
    size_t a, b;
    float *src = weft_model_params(*m, &a), *dst = weft_model_params(nm, &b);
    if (a != b)
        die("elastic: stage %d's part changed size (%zu, %zu)", pl->stage, a, b);
    memcpy(dst, src, a * sizeof *dst);
    model_tune(nm, o);
    weft_model_destroy(*m);
    *m = nm;
    pl->model = nm;
    pl->counted = 0;
    return 0;
}
