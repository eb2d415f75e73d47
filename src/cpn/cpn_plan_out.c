/* The plan written out. */
#include "cpn/cpn_plan_out.h"

#include <stdio.h>
#include <string.h>

/* The part's layout: weft-sim plan's fastest that fits, at the cluster's
 * measured peak (x its speed); all data parallel where the planner has
 * none (an MLP, or no layout of these ranks and this batch). */
static void layout(const cpn_cluster *cl, const cpn_job *job, int ranks, int batch,
                   cpn_jo *w)
{
    weft_sim_layout l;
    memset(&l, 0, sizeof l);
    l.tp = l.pp = 1;
    l.dp = ranks;
    snprintf(l.schedule, sizeof l.schedule, "1f1b");
    const char *from = "all data parallel";
    weft_sim_topo *topo = NULL;
    char err[256];
    if (job->model.type != WEFT_MODEL_MLP &&
        weft_sim_topo_load(&topo, "host", err, sizeof err) == 0) {
        weft_sim_plan_query q;
        memset(&q, 0, sizeof q);
        q.model = job->model;
        q.batch = batch;
        q.seq = job->seq;
        q.ranks = ranks;
        q.topo = topo;
        q.gflops = cpn_metric_value(cl, "peak_fp32_gflops_per_core", 20) *
                   cpn_metric_value(cl, "speed", 1);
        q.optim_bytes = 8;
        weft_sim_plan *pl = NULL;
        if (weft_sim_plan_run(&q, &pl, err, sizeof err) == 0) {
            int b = weft_sim_plan_best(pl);
            if (b >= 0 && weft_sim_plan_layout(pl, b, &l) == 0)
                from = "weft-sim plan";
            weft_sim_plan_free(pl);
        }
        weft_sim_topo_free(topo);
    }
    cpn_jo_obj(w, "layout");
    cpn_jo_int(w, "tp", l.tp);
    cpn_jo_int(w, "pp", l.pp);
    cpn_jo_int(w, "dp", l.dp);
    cpn_jo_int(w, "zero", l.zero);
    cpn_jo_str(w, "schedule", l.schedule);
    if (l.m > 0)
        cpn_jo_int(w, "micro", l.m);
    cpn_jo_str(w, "from", from);
    cpn_jo_end(w);
}

static void part(const cpn_cluster *cl, const cpn_job *job, const cpn_candidate *c, int i,
                 cpn_jo *w)
{
    cpn_jo_obj(w, NULL);
    cpn_jo_str(w, "cluster", cl->name);
    cpn_jo_str(w, "launcher", cl->launcher[0] ? cl->launcher : "local");
    if (cl->slurm_conf[0])
        cpn_jo_str(w, "slurm_conf", cl->slurm_conf);
    cpn_jo_arr(w, "hosts");
    for (int h = 0; h < cl->nhosts; h++)
        cpn_jo_str(w, NULL, cl->hosts[h].name);
    cpn_jo_end(w);
    cpn_jo_int(w, "ranks", c->ranks[i]);
    layout(cl, job, c->ranks[i], c->batch[i], w);
    cpn_jo_int(w, "batch", c->batch[i]);
    cpn_jo_num(w, "speed", cpn_metric_value(cl, "speed", 1));
    cpn_jo_end(w);
}

static void predicted(const char *key, const cpn_candidate *c, cpn_jo *w)
{
    cpn_jo_obj(w, key);
    cpn_jo_num(w, "step_s", c->step_s);
    cpn_jo_num(w, "total_s", c->total_s);
    cpn_jo_num(w, "cost", c->cost);
    cpn_jo_num(w, "carbon_g", c->carbon_g);
    cpn_jo_num(w, "compute_s", c->compute_s);
    cpn_jo_num(w, "intra_s", c->intra_s);
    cpn_jo_num(w, "wan_s", c->wan_s);
    cpn_jo_bool(w, "links_assumed", c->links_assumed);
    cpn_jo_str(w, "compute_from", c->calibrated == c->n ? "measured"
                                  : c->calibrated ? "measured and peak" : "peak");
    cpn_jo_end(w);
}

int cpn_plan_write(const cpn_cluster *cs, const cpn_job *job, const cpn_plan_result *r,
                   cpn_jo *w)
{
    const cpn_candidate *b = &r->best;
    size_t jl = strlen(job->text);
    while (jl > 0 && (job->text[jl - 1] == '\n' || job->text[jl - 1] == ' ' ||
                      job->text[jl - 1] == '\r' || job->text[jl - 1] == '\t'))
        jl--;
    cpn_jo_obj(w, NULL);
    cpn_jo_str(w, "schema", "weft-cpn-plan/1");
    cpn_jo_raw(w, "job", job->text, jl);
    cpn_jo_obj(w, "sync");
    cpn_jo_str(w, "mode", b->n ? cpn_sync_name(b->n > 1 ? b->sync : CPN_SYNC_FULL) : "none");
    if (b->H > 0)
        cpn_jo_int(w, "H", b->H);
    if (b->H > 0 && job->m.period_s > 0)
        cpn_jo_num(w, "period_s", job->m.period_s);
    if (b->n > 1 && b->sync == CPN_SYNC_STREAMING) {
        cpn_jo_int(w, "fragments", 1);
        cpn_jo_int(w, "overlap", b->T);
    }
    cpn_jo_str(w, "compress", cpn_compress_name(b->n > 1 ? b->compress : 0));
    cpn_jo_end(w);
    cpn_jo_arr(w, "parts");
    for (int i = 0; i < b->n; i++)
        part(&cs[b->idx[i]], job, b, i, w);
    cpn_jo_end(w);
    if (b->n)
        predicted("predicted", b, w);
    cpn_jo_arr(w, "rejected");
    for (int i = 0; i < r->nrejected; i++) {
        char name[256];
        cpn_candidate_name(cs, &r->rejected[i], name, sizeof name);
        cpn_jo_obj(w, NULL);
        cpn_jo_str(w, "plan", name);
        cpn_jo_str(w, "why", r->rejected[i].why);
        cpn_jo_num(w, "total_s", r->rejected[i].total_s);
        cpn_jo_num(w, "cost", r->rejected[i].cost);
        cpn_jo_num(w, "carbon_g", r->rejected[i].carbon_g);
        cpn_jo_end(w);
    }
    cpn_jo_end(w);
    cpn_jo_int(w, "evaluated", r->evaluated);
    cpn_jo_end(w);
    return w->err;
}
