/* --mode ps (docs/TRAINING.md): the world is W workers and K servers
 * (weftrun --servers K sets each rank's role). Servers hold the parameters
 * in chunks and run the optimiser; each worker computes the gradient of its
 * part of every global batch, pushes it, ends its step (clock) and pulls
 * the parameters, which the consistency model (BSP, SSP:S, ASP) lets it see.
 * Worker 0 reports its own loss (a collective would undo SSP and ASP) and
 * evaluates the servers' final parameters. */
#include "train_tool.h"

#include <string.h>

/* A worker's run, from registering the parameters to the evaluation; frees
 * ps and workers. */
static void ps_work(opts *o, const data_sets *d, long steps, weft_ps *ps, weft_comm *workers,
                    const weft_lr_schedule *sched)
{
    run_opts *r = &o->r;
    int rc, me = weft_ps_rank(ps), nw = weft_ps_num_workers(ps);
    weft_model *m = model_new(r, d);
    model_tune(m, o);
    weft_loader *loader = data_loader(r, d, me, nw, 1, "workers");
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL);
    weft_ps_request *a, *b;
    if ((rc = weft_ps_register(ps, 0, p, n)) != 0 || (rc = weft_ps_pull(ps, 0, p, &b)) != 0 ||
        (rc = weft_ps_wait(b)) != 0)
        die("worker %d: registering the parameters: %s: %s", me, weft_strerror(rc),
            weft_ps_error(ps));
    if (!o->quiet) {
        report_model(m, r, n);
        printf("parameter server: %d workers, %d servers, consistency %s\n", nw,
               weft_ps_num_servers(ps), o->consistency);
        printf("data %s: %llu samples; optim %s lr %g (%s) on the servers; batch %d, steps %ld\n",
               d->ti.name, (unsigned long long)d->ti.n, r->optim, r->lr, r->schedule, r->batch,
               steps);
        fflush(stdout);
    }
    /* --stop-at: the first steps of the planned run (its schedule unchanged) */
    long end = o->stop_at > 0 && o->stop_at < steps ? o->stop_at : steps;
    progress pg;
    progress_start(&pg, o, steps, 0, end, o->metrics[0] && me == 0 ? csv_open(o->metrics, 0)
                                                                   : NULL);
    progress_model(&pg, m, nw, me == 0);
    int image = d->ti.kind == WEFT_DATA_IMAGE;
    for (long step = 0; step < end; step++) {
        weft_batch bt;
        train_step st = { .gnorm = -1 };
        if ((rc = weft_loader_next(loader, &bt)) != 0)
            die("step %ld: %s", step, weft_strerror(rc));
        straggle(o, step, me, nw);
        const void *x = image ? (const void *)bt.x : (const void *)bt.tokens;
        if ((rc = weft_model_zero_grad(m)) != 0 ||
            (rc = weft_model_forward(m, x, bt.y, bt.n, bt.x_dim, &st.loss)) != 0)
            die("step %ld: %s", step, weft_strerror(rc));
        st.correct = weft_model_count_correct(m, bt.y);
        if ((rc = weft_model_backward(m)) != 0)
            die("step %ld: %s", step, weft_strerror(rc));
        /* servers average over workers: weight this part by its share */
        weft_scale(g, n, (float)nw * (float)bt.n / (float)bt.global_n);
        if (r->clip > 0) /* each worker clips its own gradient */
            weft_clip_grad_norm(g, n, (float)r->clip, &st.gnorm);
        if ((rc = weft_ps_push(ps, 0, g, &a)) != 0 || (rc = weft_ps_clock(ps)) != 0 ||
            (rc = weft_ps_pull(ps, 0, p, &b)) != 0)
            die("step %ld: %s: %s", step, weft_strerror(rc), weft_ps_error(ps));
        int ra = weft_ps_wait(a), rb = weft_ps_wait(b);
        if (ra || rb)
            die("step %ld: %s: %s", step, weft_strerror(ra ? ra : rb), weft_ps_error(ps));
        st.n = st.seen = bt.n;
        st.global_n = bt.global_n;
        st.width = image ? 1 : bt.x_dim;
        st.epoch = (double)weft_loader_position(loader) / (double)d->ti.n;
        report_step(&pg, step, &st, weft_lr_at(sched, step));
    }
    double train_s = now_s() - pg.start;
    uint64_t sent = 0, recvd = 0;
    weft_ps_bytes(ps, &sent, &recvd);
    if ((rc = weft_ps_shutdown(ps)) != 0)
        die("shutdown: %s: %s", weft_strerror(rc), weft_ps_error(ps));
    if (!o->quiet)
        printf("training took %.2f s on %d workers and %d servers (consistency %s); worker 0 "
               "sent %.1f MB, received %.1f MB\n",
               train_s, nw, weft_ps_num_servers(ps), o->consistency, (double)sent / 1e6,
               (double)recvd / 1e6);
    if (!o->no_eval && me == 0)
        evaluate(m, d, o, pg.csv, steps, loader);
    if (pg.csv)
        fclose(pg.csv);
    weft_ps_destroy(ps); /* before the model whose parameters it registered */
    weft_comm_destroy(workers);
    weft_loader_free(loader);
    weft_model_destroy(m);
}

void ps_main(opts *o, const data_sets *d, long steps, weft_comm *world)
{
    if (!world)
        die("--mode ps needs workers and servers: weftrun -n W --servers K weft-train ...");
    if (o->resume[0] || o->save[0] || o->zero || o->accum > 1 || strcmp(o->sync, "full") != 0)
        die("--mode ps does not take --resume, --save, --zero, --accum or --sync");
    weft_ps_config pc;
    weft_ps *ps;
    weft_comm *workers = NULL;
    int rc;
    weft_ps_config_default(&pc);
    weft_ps_consistency_parse(o->consistency, &pc);
    model_optim_config(&o->r, &pc.optim);
    pc.lr = model_lr_schedule(&o->r, steps);
    if ((rc = weft_ps_init(&ps, world, &pc)) != 0)
        die("parameter server set-up: %s: %s", weft_strerror(rc), weft_comm_error(world));
    int worker = weft_ps_role(ps) == WEFT_PS_ROLE_WORKER;
    /* every rank, servers included, before anyone serves */
    if ((rc = weft_comm_split(world, worker ? 0 : -1, weft_comm_rank(world), &workers)) != 0)
        die("parameter server set-up: %s: %s", weft_strerror(rc), weft_comm_error(world));
    if (worker) {
        ps_work(o, d, steps, ps, workers, &pc.lr);
        return;
    }
    if ((rc = weft_ps_serve(ps)) != 0)
        die("server %d: %s: %s", weft_ps_rank(ps), weft_strerror(rc), weft_ps_error(ps));
    weft_ps_destroy(ps);
}
