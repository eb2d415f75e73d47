/* --mode ps (docs/TRAINING.md): the world is W workers and K servers
 * (weftrun --servers K sets each rank's role). Servers hold the parameters
 * in chunks and run the optimiser; each worker computes the gradient of its
 * part of every global batch, pushes it, ends its step (clock) and pulls
 * the parameters, which the consistency model (BSP, SSP:S, ASP) lets it see.
 * Worker 0 reports its own loss (a collective would undo SSP and ASP) and
 * evaluates the servers' final parameters.
 *
 * As a weft_run: a worker's step is one step; a server's first step serves
 * until the workers shut it down and is the run's last (WEFT_RUN_DONE). */
#include "run/run_ps.h"

#include "run/run_config.h"
#include "run/run_data.h"
#include "run/run_eval.h"
#include "run/run_model.h"
#include "run/run_report.h"

#include "core/clock.h"

#include <stdlib.h>
#include <string.h>

struct run_ps {
    weft_ps *ps;
    weft_comm *workers;
    int worker, me, nw;
    weft_lr_schedule sched;
    float *p, *g; /* the model's parameters and gradients */
    size_t n;
};

/* A worker's model and loader, its parameters registered with the servers
 * and pulled, and the banner. */
static int ps_work_open(weft_run *t, struct run_ps *w, long steps)
{
    opts *o = t->o;
    const run_opts *r = &o->r;
    const data_sets *d = t->d;
    weft_ps_request *b;
    w->me = weft_ps_rank(w->ps);
    w->nw = weft_ps_num_workers(w->ps);
    int rc = model_new(t, r, d, &t->m);
    if (rc == 0)
        rc = model_tune(t, t->m, o);
    if (rc == 0)
        rc = data_loader(t, r, d, w->me, w->nw, 1, "workers", &t->loader);
    if (rc != 0)
        return rc;
    w->p = weft_model_params(t->m, &w->n);
    w->g = weft_model_grads(t->m, NULL);
    t->nparams = w->n;
    if ((rc = weft_ps_register(w->ps, 0, w->p, w->n)) != 0 ||
        (rc = weft_ps_pull(w->ps, 0, w->p, &b)) != 0 || (rc = weft_ps_wait(b)) != 0)
        return run_fail(t, rc, "worker %d: registering the parameters: %s: %s", w->me,
                        weft_strerror(rc), weft_ps_error(w->ps));
    if (!o->quiet) {
        report_model(t, t->m, r, w->n);
        run_say(t, WEFT_RUN_OUT, "parameter server: %d workers, %d servers, consistency %s\n",
                w->nw, weft_ps_num_servers(w->ps), o->consistency);
        run_say(t, WEFT_RUN_OUT,
                "data %s: %llu samples; optim %s lr %g (%s) on the servers; batch %d, steps "
                "%ld\n", d->ti.name, (unsigned long long)d->ti.n, r->optim, r->lr, r->schedule,
                r->batch, steps);
    }
    /* --stop-at: the first steps of the planned run (its schedule unchanged) */
    t->end = o->stop_at > 0 && o->stop_at < steps ? o->stop_at : steps;
    FILE *csv = NULL;
    if (o->metrics[0] && w->me == 0 && (rc = csv_open(t, o->metrics, 0, &csv)) != 0)
        return rc;
    progress_start(&t->pg, o, steps, 0, t->end, csv);
    return progress_model(t, &t->pg, t->m, w->nw, w->me == 0);
}

int ps_open(weft_run *t, long steps)
{
    opts *o = t->o;
    weft_comm *world = t->job;
    if (!world)
        return run_fail(t, WEFT_ECONFIG, "--mode ps needs workers and servers: weftrun -n W "
                        "--servers K weft-train ...");
    if (o->resume[0] || o->save[0] || o->zero || o->accum > 1 || strcmp(o->sync, "full") != 0)
        return run_fail(t, WEFT_ECONFIG,
                        "--mode ps does not take --resume, --save, --zero, --accum or --sync");
    struct run_ps *w = calloc(1, sizeof *w);
    if (!w)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    t->ps = w;
    weft_ps_config pc;
    weft_ps_config_default(&pc);
    weft_ps_consistency_parse(o->consistency, &pc);
    model_optim_config(&o->r, &pc.optim);
    pc.lr = model_lr_schedule(&o->r, steps);
    w->sched = pc.lr;
    t->steps = steps;
    int rc = weft_ps_init(&w->ps, world, &pc);
    if (rc != 0)
        return run_fail(t, rc, "parameter server set-up: %s: %s", weft_strerror(rc),
                        weft_comm_error(world));
    w->worker = weft_ps_role(w->ps) == WEFT_PS_ROLE_WORKER;
    t->pg.quiet = !w->worker || o->quiet; /* a server draws no progress */
    /* every rank, servers included, before anyone serves */
    rc = weft_comm_split(world, w->worker ? 0 : -1, weft_comm_rank(world), &w->workers);
    if (rc != 0)
        return run_fail(t, rc, "parameter server set-up: %s: %s", weft_strerror(rc),
                        weft_comm_error(world));
    t->lead = w->worker && weft_ps_rank(w->ps) == 0;
    return w->worker ? ps_work_open(t, w, steps) : 0;
}

/* A worker's step: the gradient of its part, pushed; the clock; the
 * parameters pulled. */
static int ps_work_step(weft_run *t, struct run_ps *w, long step)
{
    const opts *o = t->o;
    weft_batch bt;
    train_step st = { .gnorm = -1, .bubble = -1 };
    weft_ps_request *a, *b;
    int rc, image = t->d->ti.kind == WEFT_DATA_IMAGE;
    if ((rc = weft_loader_next(t->loader, &bt)) != 0)
        return run_fail(t, rc, "step %ld: %s", step, weft_strerror(rc));
    straggle(o, step, w->me, w->nw);
    const void *x = image ? (const void *)bt.x : (const void *)bt.tokens;
    if ((rc = weft_model_zero_grad(t->m)) != 0 ||
        (rc = weft_model_forward(t->m, x, bt.y, bt.n, bt.x_dim, &st.loss)) != 0)
        return run_fail(t, rc, "step %ld: %s", step, weft_strerror(rc));
    st.correct = weft_model_count_correct(t->m, bt.y);
    if ((rc = weft_model_backward(t->m)) != 0)
        return run_fail(t, rc, "step %ld: %s", step, weft_strerror(rc));
    /* servers average over workers: weight this part by its share */
    weft_scale(w->g, w->n, (float)w->nw * (float)bt.n / (float)bt.global_n);
    if (o->r.clip > 0) /* each worker clips its own gradient */
        weft_clip_grad_norm(w->g, w->n, (float)o->r.clip, &st.gnorm);
    if ((rc = weft_ps_push(w->ps, 0, w->g, &a)) != 0 || (rc = weft_ps_clock(w->ps)) != 0 ||
        (rc = weft_ps_pull(w->ps, 0, w->p, &b)) != 0)
        return run_fail(t, rc, "step %ld: %s: %s", step, weft_strerror(rc),
                        weft_ps_error(w->ps));
    int ra = weft_ps_wait(a), rb = weft_ps_wait(b);
    if (ra || rb)
        return run_fail(t, ra ? ra : rb, "step %ld: %s: %s", step, weft_strerror(ra ? ra : rb),
                        weft_ps_error(w->ps));
    st.n = st.seen = bt.n;
    st.global_n = bt.global_n;
    st.width = image ? 1 : bt.x_dim;
    st.epoch = (double)weft_loader_position(t->loader) / (double)t->d->ti.n;
    t->last = st;
    t->last_lr = weft_lr_at(&w->sched, step);
    return report_step(t, &t->pg, step, &st, t->last_lr);
}

int ps_step(weft_run *t)
{
    struct run_ps *w = t->ps;
    int rc;
    if (t->done)
        return WEFT_RUN_DONE;
    if (!w->worker) {
        if ((rc = weft_ps_serve(w->ps)) != 0)
            return run_fail(t, rc, "server %d: %s: %s", weft_ps_rank(w->ps), weft_strerror(rc),
                            weft_ps_error(w->ps));
        t->done = 1;
        return WEFT_RUN_DONE;
    }
    if (t->next >= t->end) {
        t->done = 1;
        return WEFT_RUN_DONE;
    }
    rc = ps_work_step(t, w, t->next);
    if (rc == 0)
        t->next++;
    return rc;
}

int ps_finish(weft_run *t)
{
    struct run_ps *w = t->ps;
    const opts *o = t->o;
    if (!w->worker)
        return 0;
    double train_s = clock_now() - t->pg.start;
    uint64_t sent = 0, recvd = 0;
    weft_ps_bytes(w->ps, &sent, &recvd);
    int rc = weft_ps_shutdown(w->ps);
    if (rc != 0)
        return run_fail(t, rc, "shutdown: %s: %s", weft_strerror(rc), weft_ps_error(w->ps));
    if (!o->quiet)
        run_say(t, WEFT_RUN_OUT,
                "training took %.2f s on %d workers and %d servers (consistency %s); worker 0 "
                "sent %.1f MB, received %.1f MB\n",
                train_s, w->nw, weft_ps_num_servers(w->ps), o->consistency, (double)sent / 1e6,
                (double)recvd / 1e6);
    if (!o->no_eval && w->me == 0)
        rc = evaluate(t, t->m, t->d, o, t->pg.csv, t->steps, t->loader);
    if (t->pg.csv)
        fclose(t->pg.csv);
    t->pg.csv = NULL;
    return rc;
}

void ps_close(weft_run *t)
{
    struct run_ps *w = t->ps;
    if (!w)
        return;
    weft_ps_destroy(w->ps); /* before the model whose parameters it registered */
    weft_comm_destroy(w->workers);
    free(w);
    t->ps = NULL;
}
