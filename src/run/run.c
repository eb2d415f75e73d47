/* The set-up and the end of a data-parallel run (one process is a job of
 * one): everything main.c's loop needs before its first step, and what
 * follows its last. */
#include "train_tool.h"

#include <string.h>

void trainer_open(trainer *t, opts *o, weft_comm *comm, const data_sets *d, weft_ckpt *ck,
                  long steps, long start_step)
{
    run_opts *r = &o->r;
    memset(t, 0, sizeof *t);
    t->o = o;
    t->d = d;
    t->job = comm;
    t->lead = !comm || weft_comm_rank(comm) == 0;
    if (o->layout_auto) {
        weft_model_config cfg;
        if (ck && weft_ckpt_model_config(ck, &cfg) != 0)
            die("%s: no model config", o->resume);
        if (!ck)
            model_config(r, d, &cfg);
        layout_auto(o, &cfg, comm ? weft_comm_size(comm) : 1);
    }
    /* with a pipeline, data parallelism is over the replicas of a stage */
    t->pl = pipeline_open(o, comm);
    if (t->pl)
        comm = pipeline_dp_comm(t->pl);
    t->comm = comm;
    t->rank = comm ? weft_comm_rank(comm) : 0;
    t->world = comm ? weft_comm_size(comm) : 1;
    t->image = d->ti.kind == WEFT_DATA_IMAGE;
    t->steps = steps;
    t->start_step = start_step;
    sync_pick(&t->sync, o, comm); /* before the model: DiLoCo picks its optimiser */

    weft_optim_config oc;
    weft_rng_seed(&t->rng, r->seed);
    if (t->pl) {
        weft_model_config cfg;
        if (ck && (weft_ckpt_model_config(ck, &cfg) || weft_ckpt_optim_config(ck, &oc) ||
                   weft_ckpt_get_rng(ck, "rng", &t->rng)))
            die("%s: not a complete checkpoint", o->resume);
        if (ck)
            model_check_fit(&cfg, d, o->resume);
        else
            model_config(r, d, &cfg);
        if (!ck)
            model_optim_config(r, &oc);
        pipeline_plan(t->pl, o, &cfg, t->job);
        t->m = pipeline_model(t->pl, o, ck);
    } else if (ck) {
        ckpt_restore_model(ck, o->resume, &t->m, &oc, &t->rng);
    } else {
        t->m = model_new(r, d);
        model_optim_config(r, &oc);
    }
    model_tune(t->m, o);
    t->loader = data_loader(r, d, t->rank, t->world, o->accum, "ranks");
    int rc = sync_open(&t->sync, t->m, &oc, ck);
    if (rc != 0)
        die("data parallel set-up: %s%s%s", weft_strerror(rc), comm ? ": " : "",
            comm ? weft_comm_error(comm) : "");
    t->opt = weft_zero_optim(t->sync.z);
    memory_check_start(t);
    if (t->pl)
        pipeline_attach(t->pl, t->m, t->sync.z);
    if (ck)
        ckpt_restore_data(ck, o->resume, t->loader, d);
    t->sched = model_lr_schedule(r, steps);
    weft_model_params(t->m, &t->nparams);
    if (!o->quiet)
        report_run(t);
    if (t->pl && !o->quiet)
        pipeline_describe(t->pl, r);

    FILE *csv = o->metrics[0] && t->lead ? csv_open(o->metrics, start_step != 0) : NULL;
    t->end = o->stop_at > 0 && o->stop_at < steps ? o->stop_at : steps;
    if (t->end < start_step)
        t->end = start_step;
    progress_start(&t->pg, o, steps, start_step, t->end, csv);
    progress_model(&t->pg, t->m, t->world, t->lead);
    cpu_s(&t->cpu0_all, &t->cpu0_main);
}

void trainer_finish(trainer *t)
{
    const opts *o = t->o;
    int rc;
    double t0 = now_s();
    sync_time_mark(&t->sync);
    if ((rc = sync_drain(&t->sync, &t->sched)) != 0)
        die("last gradients: %s: %s", weft_strerror(rc), weft_comm_error(t->comm));
    if ((rc = sync_finish(&t->sync)) != 0)
        die("final parameter average: %s: %s", weft_strerror(rc), weft_comm_error(t->comm));
    double end = now_s(), train_s = end - t->pg.start, cpu_all, cpu_main;
    t->sync.final_s = end - t0;
    cpu_s(&cpu_all, &cpu_main);
    /* the report's byte count is a collective across the WAN: not training */
    if ((rc = sync_count_bytes(&t->sync)) != 0)
        die("counting bytes: %s: %s", weft_strerror(rc), weft_comm_error(t->comm));
    if (!o->quiet && t->end > t->start_step) {
        sync_summary(&t->sync);
        if (t->lead && !t->pl)
            printf("activations kept for backward: %zu B%s\n", weft_model_activation_bytes(t->m),
                   o->recompute ? " (blocks recomputed in backward)" : "");
    }
    if (o->save[0]) {
        ckpt_save(t, t->end);
        if (!o->quiet)
            printf("saved %s\n", o->save);
    }
    if ((t->comm || t->pl) && !o->quiet)
        report_end(t, train_s, cpu_all, cpu_main);
    if (t->pl)
        pipeline_summary(t->pl, o); /* its memory line: the shards, before the gather */
    if ((rc = weft_zero_gather_params(t->sync.z)) != 0) /* ZeRO-3: the whole model */
        die("gathering parameters: %s", weft_strerror(rc));
    /* a pipeline evaluates the whole model, assembled on the lead */
    weft_model *whole = t->pl && !o->no_eval ? pipeline_gather(t->pl, t->m, t->sync.z, NULL) : NULL;
    if (!o->no_eval && t->lead)
        evaluate(whole ? whole : t->m, t->d, o, t->pg.csv, t->end, t->loader);
    weft_model_destroy(whole);
    if (t->pg.csv)
        fclose(t->pg.csv);
    sync_close(&t->sync); /* before the job's communicator goes */
}

void trainer_close(trainer *t)
{
    weft_loader_free(t->loader);
    weft_model_destroy(t->m);
    pipeline_close(t->pl);
}
