/* The run's handle: its set-up from a configuration (the layout, the
 * model, the data, the sync mode, the checkpoint it resumes), its end
 * (the last averages, saving, the summary, the evaluation), and what a
 * caller reads of it. The step itself is run_loop.c's. */
#include "run/run.h"

#include "run/run_ckpt.h"
#include "run/run_ckpt_shard.h"
#include "run/run_config.h"
#include "run/run_data.h"
#include "run/run_elastic.h"
#include "run/run_ep.h"
#include "run/run_eval.h"
#include "run/run_hf.h"
#include "run/run_layout.h"
#include "run/run_memory.h"
#include "run/run_model.h"
#include "run/run_pipeline.h"
#include "run/run_ps.h"
#include "run/run_report.h"
#include "run/run_sync.h"
#include "run/run_sync_time.h"

#include "core/clock.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int run_fail(weft_run *t, int code, const char *fmt, ...)
{
    if (!t || t->code)
        return code;
    t->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return code;
}

void run_say(const weft_run *t, int level, const char *fmt, ...)
{
    if (!t || !t->log)
        return;
    char small[2048], *text = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof small && (text = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (!text)
        text = small; /* out of memory: the line cut short */
    /* one call a line, without its end */
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        t->log(t->log_arg, level, line);
        if (!nl)
            break;
        line = nl + 1;
    }
    if (text != small)
        free(text);
}

int run_step_failed(weft_run *t, long step, int rc)
{
    return run_fail(t, rc, "step %ld: %s%s%s", step, weft_strerror(rc), t->comm ? ": " : "",
                    t->comm ? weft_comm_error(t->comm) : "");
}

/* --layout auto and --pp/--tp: the layout over the job, and the
 * data-parallel group of this rank in it. */
static int setup_layout(weft_run *t, weft_ckpt *ck)
{
    opts *o = t->o;
    weft_comm *comm = t->job;
    int rc;
    if (o->layout_auto) {
        weft_model_config cfg;
        if (ck && weft_ckpt_model_config(ck, &cfg) != 0)
            return run_fail(t, WEFT_EIO, "%s: no model config", o->resume);
        if (!ck && (rc = model_config(t, &o->r, t->d, &cfg)) != 0)
            return rc;
        if ((rc = layout_auto(t, o, &cfg, comm ? weft_comm_size(comm) : 1)) != 0)
            return rc;
    }
    /* with a pipeline, data parallelism is over the replicas of a stage */
    if ((rc = pipeline_open(t, o, comm, &t->pl)) != 0)
        return rc;
    if (t->pl)
        comm = pipeline_dp_comm(t->pl);
    t->comm = comm;
    t->rank = comm ? weft_comm_rank(comm) : 0;
    t->world = comm ? weft_comm_size(comm) : 1;
    return 0;
}

/* This rank's model (a pipeline's stage, a checkpoint's, or new) and the
 * optimiser's configuration. */
static int setup_model(weft_run *t, weft_ckpt *ck, weft_optim_config *oc)
{
    opts *o = t->o;
    int rc;
    weft_rng_seed(&t->rng, o->r.seed);
    if (!t->pl) {
        if (ck)
            return ckpt_restore_model(t, ck, o->resume, &t->m, oc, &t->rng);
        model_optim_config(&o->r, oc);
        return model_new(t, &o->r, t->d, &t->m);
    }
    weft_model_config cfg;
    if (ck && (weft_ckpt_model_config(ck, &cfg) || weft_ckpt_optim_config(ck, oc) ||
               weft_ckpt_get_rng(ck, "rng", &t->rng)))
        return run_fail(t, WEFT_EIO, "%s: not a complete checkpoint", o->resume);
    rc = ck ? model_check_fit(t, &cfg, t->d, o->resume) : model_config(t, &o->r, t->d, &cfg);
    if (rc != 0)
        return rc;
    if (!ck)
        model_optim_config(&o->r, oc);
    if ((rc = pipeline_plan(t->pl, o, &cfg, t->job)) != 0)
        return rc;
    return pipeline_model(t->pl, o, ck, &t->m);
}

/* The banner, the metrics file and the progress figures. */
static int setup_report(weft_run *t)
{
    opts *o = t->o;
    int rc;
    weft_model_params(t->m, &t->nparams);
    if (!o->quiet)
        report_run(t);
    if (t->pl && !o->quiet)
        pipeline_describe(t->pl, &o->r);
    FILE *csv = NULL;
    if (o->metrics[0] && t->lead &&
        (rc = csv_open(t, o->metrics, t->start_step != 0, &csv)) != 0)
        return rc;
    t->end = o->stop_at > 0 && o->stop_at < t->steps ? o->stop_at : t->steps;
    if (t->end < t->start_step || o->eval_only)
        t->end = t->start_step;
    progress_start(&t->pg, o, t->steps, t->start_step, t->end, csv);
    if ((rc = progress_model(t, &t->pg, t->m, t->world, t->lead)) != 0)
        return rc;
    cpu_s(&t->cpu0_all, &t->cpu0_main);
    return 0;
}

/* A data-parallel run (one process is a job of one): everything the
 * first step needs. */
static int setup_train(weft_run *t, weft_ckpt *ck)
{
    opts *o = t->o;
    weft_optim_config oc;
    int rc = setup_layout(t, ck);
    t->image = t->d->ti.kind == WEFT_DATA_IMAGE;
    /* before the model: DiLoCo picks its optimiser */
    if (rc == 0)
        rc = sync_pick(&t->sync, t, o, t->comm);
    if (rc == 0)
        rc = setup_model(t, ck, &oc);
    if (rc == 0)
        rc = hf_run_load(t);
    if (rc == 0)
        rc = model_tune(t, t->m, o);
    if (rc == 0)
        rc = run_ep_open(t);
    if (rc == 0)
        rc = data_loader(t, &o->r, t->d, t->rank, t->world, o->accum, "ranks", &t->loader);
    if (rc != 0)
        return rc;
    t->opened = 1; /* the sync mode is to be closed from here on */
    if ((rc = sync_open(&t->sync, t->m, &oc, ck)) != 0)
        return run_fail(t, rc, "data parallel set-up: %s%s%s", weft_strerror(rc),
                        t->comm ? ": " : "", t->comm ? weft_comm_error(t->comm) : "");
    t->opt = weft_zero_optim(t->sync.z);
    if ((rc = memory_check_start(t)) != 0)
        return rc;
    if (t->pl && (rc = pipeline_attach(t->pl, t->m, t->sync.z)) != 0)
        return rc;
    if (ck && (rc = ckpt_restore_data(t, ck, o->resume, t->loader, t->d)) != 0)
        return rc;
    t->sched = model_lr_schedule(&o->r, t->steps);
    return setup_report(t);
}

/* Every option's value, settled in one place before any check reads one:
 * a checkpoint's saved run options (--resume; those given on the command
 * line win), then the defaults of what is still unset. *ck: the
 * checkpoint, NULL without --resume. */
static int resolve_options(weft_run *t, opts *o, long *start_step, weft_ckpt **ck)
{
    *start_step = 0;
    *ck = NULL;
    int rc = ckpt_resume(t, o, start_step, ck);
    if (rc == 0)
        rc = hf_run_options(t, o); /* the model it names picks the defaults */
    if (rc == 0)
        run_opts_defaults(&o->r);
    return rc;
}

/* Everything weft_run_open does once the handle exists. */
static int run_setup(weft_run *t, weft_comm *comm, int joined)
{
    opts *o = t->o;
    char err[1024];
    int rc = run_config_check(o, joined, err, sizeof err);
    if (rc != 0)
        return run_fail(t, rc, "%s", err);
    if (o->set & (1u << O_STEPS))
        o->r.epochs = -1;
    t->quiet0 = o->quiet;
    if (comm && weft_comm_rank(comm) != 0)
        o->quiet = 1; /* rank 0 speaks for the job */
    weft_ckpt *ck = NULL;
    rc = resolve_options(t, o, &t->start_step, &ck); /* before any check */
    if (rc == 0)
        rc = elastic_check(t, o, comm);
    if (rc == 0)
        rc = data_open(t, &o->r, &t->own_d);
    if (rc == 0) {
        const data_sets *d = t->d;
        t->steps = o->r.steps >= 0
                       ? o->r.steps
                       : (long)ceil(o->r.epochs * (double)d->ti.n / (double)o->r.batch);
        rc = o->ps ? ps_open(t, t->steps) : setup_train(t, ck);
    }
    if (rc != 0 && ck)
        ckpt_explain(t, ck);
    weft_ckpt_free(ck);
    if (rc != 0 || o->ps)
        return rc;
    long first = t->start_step;
    rc = elastic_open(t, &first, t->quiet0, joined);
    t->next = first;
    return rc == 0 ? ckpt_shard_prepare(t) : rc;
}

int weft_run_open(const weft_run_config *cfg, weft_comm *comm, int joined, weft_run **out)
{
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    if (!cfg)
        return WEFT_EINVAL;
    weft_run *t = calloc(1, sizeof *t);
    if (!t)
        return WEFT_ENOMEM;
    *out = t;
    t->own = cfg->o;
    t->o = &t->own;
    t->d = &t->own_d;
    t->log = cfg->log;
    t->log_arg = cfg->log_arg;
    t->job = comm;
    t->lead = !comm || weft_comm_rank(comm) == 0;
    t->joined = joined;
    t->last.gnorm = -1;
    t->last.bubble = -1;
    t->pg.mfu = -1;
    int rc = run_setup(t, comm, joined);
    if (rc != 0)
        t->broken = 1;
    return rc;
}

/* The evaluation of the model as it is, in the training layout
 * (collective: run_eval_layout.c). */
static int run_evaluate(weft_run *t, long step)
{
    eval_fwd f;
    int rc = eval_layout_open(t, t->finished, &f);
    if (rc == 0)
        rc = evaluate_in(t, &f, t->d, t->o, t->pg.csv, step, t->loader);
    if (rc == 0)
        rc = eval_layout_memory(&f);
    eval_layout_close(&f);
    return rc;
}

/* The last averages and the byte counts; *train_s: the training's wall
 * time, cpu_*: the CPU seconds at its end. */
static int finish_sync(weft_run *t, double *train_s, double *cpu_all, double *cpu_main)
{
    int rc;
    double t0 = clock_now();
    sync_time_mark(&t->sync);
    if ((rc = sync_drain(&t->sync, &t->sched)) != 0)
        return run_fail(t, rc, "last gradients: %s: %s", weft_strerror(rc),
                        weft_comm_error(t->comm));
    if ((rc = sync_finish(&t->sync)) != 0)
        return run_fail(t, rc, "final parameter average: %s: %s", weft_strerror(rc),
                        weft_comm_error(t->comm));
    double end = clock_now();
    *train_s = end - t->pg.start;
    t->sync.final_s = end - t0;
    cpu_s(cpu_all, cpu_main);
    /* the report's byte count is a collective across the WAN: not training */
    if ((rc = sync_count_bytes(&t->sync)) != 0)
        return run_fail(t, rc, "counting bytes: %s: %s", weft_strerror(rc),
                        weft_comm_error(t->comm));
    return 0;
}

static int finish_train(weft_run *t)
{
    const opts *o = t->o;
    double train_s = 0, cpu_all = 0, cpu_main = 0;
    int rc = finish_sync(t, &train_s, &cpu_all, &cpu_main);
    if (rc != 0)
        return rc;
    if (!o->quiet && t->end > t->start_step) {
        sync_summary(&t->sync);
        if (t->lead && !t->pl)
            run_say(t, WEFT_RUN_OUT, "activations kept for backward: %zu B%s\n",
                    weft_model_activation_bytes(t->m),
                    o->recompute ? " (blocks recomputed in backward)" : "");
    }
    if (o->save[0]) {
        if ((rc = ckpt_save(t, o->save, t->end)) != 0)
            return rc;
        if (!o->quiet)
            run_say(t, WEFT_RUN_OUT, "saved %s\n", o->save);
        ckpt_figures(t);
    }
    if ((rc = hf_run_export(t)) != 0)
        return rc;
    if ((t->comm || t->pl) && !o->quiet && !o->eval_only)
        report_end(t, train_s, cpu_all, cpu_main);
    /* its memory line: the shards, before the gather */
    if (t->pl && (rc = pipeline_summary(t->pl, o)) != 0)
        return rc;
    if (!o->no_eval && (rc = run_evaluate(t, t->end)) != 0)
        return rc;
    /* ZeRO-3: the whole parameters for whoever reads them after the run;
     * not under --mem-limit, where they need not fit one rank */
    if (o->mem_limit <= 0 && (rc = weft_zero_gather_params(t->sync.z)) != 0)
        return run_fail(t, rc, "gathering parameters: %s", weft_strerror(rc));
    if (t->pg.csv)
        fclose(t->pg.csv);
    t->pg.csv = NULL;
    sync_close(&t->sync); /* before the job's communicator goes */
    t->opened = 0;
    return 0;
}

int weft_run_finish(weft_run *t)
{
    if (!t)
        return WEFT_EINVAL;
    if (t->broken)
        return t->code ? t->code : WEFT_EINVAL;
    if (t->left || t->finished)
        return 0;
    t->finished = 1;
    int rc = t->ps ? ps_finish(t) : finish_train(t);
    if (rc < 0)
        t->broken = 1;
    return rc;
}

int weft_run_eval(weft_run *t)
{
    if (!t || t->broken || t->left || !t->opened || t->ps)
        return t && t->broken && t->code ? t->code : WEFT_EINVAL;
    int rc = run_evaluate(t, t->next);
    if (rc < 0)
        t->broken = 1;
    return rc;
}

int weft_run_save(weft_run *t, const char *path)
{
    if (!t || !path || !path[0] || t->broken || t->left || !t->opened || t->ps)
        return t && t->broken && t->code ? t->code : WEFT_EINVAL;
    int rc = ckpt_save(t, path, t->next);
    if (rc < 0)
        t->broken = 1;
    return rc;
}

int weft_run_close(weft_run *t)
{
    if (!t)
        return 0;
    ps_close(t);
    ckpt_shard_close(t); /* its writer reads the model */
    if (!t->o->ps) {
        elastic_close(t);
        /* a rank that left closed its training state as it went */
        if (t->opened && !t->left)
            sync_close(&t->sync);
    }
    if (t->pg.csv)
        fclose(t->pg.csv);
    weft_loader_free(t->loader);
    weft_model_destroy(t->m);
    pipeline_close(t->pl);
    data_free(&t->own_d);
    free(t);
    return 0;
}

const char *weft_run_error(const weft_run *t)
{
    if (!t)
        return "no run";
    if (t->err[0])
        return t->err;
    return t->code ? weft_strerror(t->code) : "";
}

int weft_run_info_get(const weft_run *t, weft_run_info *out)
{
    if (!t || !out)
        return WEFT_EINVAL;
    const opts *o = t->o;
    memset(out, 0, sizeof *out);
    out->step = t->next;
    out->steps = t->steps;
    out->first_step = t->start_step;
    out->end = t->end;
    out->epoch = t->last.epoch;
    out->loss = t->last.loss;
    out->gnorm = t->last.gnorm;
    out->lr = t->last_lr;
    out->correct = t->last.correct;
    out->seen = t->last.seen * (t->last.width > 0 ? t->last.width : 1);
    out->skip = t->last.skip;
    out->bubble = t->last.bubble;
    out->rank = t->job ? weft_comm_rank(t->job) : 0;
    out->world = t->job ? weft_comm_size(t->job) : 1;
    out->lead = t->lead;
    out->global_batch = o->r.batch;
    out->mfu = t->pg.mfu;
    out->elapsed = t->pg.elapsed;
    out->rate = t->pg.rate;
    out->quiet = t->pg.quiet;
    out->log_every = o->log_every > 0 ? o->log_every : (t->steps / 20 > 0 ? t->steps / 20 : 1);
    return 0;
}

weft_comm *weft_run_comm(const weft_run *t)
{
    return t ? t->job : NULL;
}

weft_model *weft_run_model(const weft_run *t)
{
    return t ? t->m : NULL;
}

void run_line_add(char *line, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (*len < cap) {
        int n = vsnprintf(line + *len, cap - *len, fmt, ap);
        *len += n > 0 ? (size_t)n : 0;
    }
    va_end(ap);
}
