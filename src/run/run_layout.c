/* --layout auto: the planner (weft-sim plan, src/sim/plan.c)
 * picks tp, pp, the schedule, the micro-batches, ZeRO and sequence
 * parallelism for this job's ranks (a GPT or a Llama, tp only where its
 * heads split), at this host's measured matmul peak on the `host`
 * topology, under --mem-limit when given; the run then goes
 * on as if they had been on the command line. Every rank plans the same
 * figures, so every rank chooses the same. */
#include "run/run_layout.h"

#include "run/run_model.h"

#include "sim/plan.h"
#include "sim/topo.h"
#include "train/peak.h"

#include <string.h>

int layout_auto(weft_run *t, opts *o, const weft_model_config *cfg, int ranks)
{
    if (cfg->type == WEFT_MODEL_MLP)
        return run_fail(t, WEFT_ECONFIG,
                        "--layout auto plans a GPT or a Llama; give an MLP's --tp/--pp by hand");
    sim_topo topo;
    char err[256];
    if (sim_topo_load(&topo, "host", err, sizeof err))
        return run_fail(t, WEFT_ECONFIG, "--layout auto: %s", err);
    train_peak pk;
    weft_optim_config oc;
    model_optim_config(&o->r, &oc);
    sim_plan_query q = { .model = *cfg, .batch = o->r.batch, .seq = o->r.seq, .ranks = ranks,
                         .topo = &topo, .mem = o->mem_limit,
                         .optim_bytes = oc.kind == WEFT_OPTIM_ADAMW ? 8
                                        : oc.momentum != 0          ? 4
                                                                    : 0 };
    q.gflops = train_peak_get(&pk) == 0 && pk.gflops > 0 ? pk.gflops : 20;
    sim_plan pl;
    if (sim_plan_run(&q, &pl, err, sizeof err))
        return run_fail(t, WEFT_ECONFIG, "--layout auto: %s", err);
    if (pl.best < 0) {
        sim_plan_free(&pl);
        return run_fail(t, WEFT_ECONFIG,
                        "--layout auto: no layout of %d ranks fits --mem-limit %.0f (weft-sim "
                        "plan lists them)", ranks, o->mem_limit);
    }
    const sim_plan_entry *e = &pl.e[pl.best];
    o->tp = e->tp;
    o->pp = e->pp;
    o->zero = e->zero;
    o->sp = e->sp;
    o->micro = e->pp > 1 || e->tp > 1 ? e->spec.m : 0;
    if (e->pp > 1)
        pipe_spec_name(&e->spec, o->pp_schedule, sizeof o->pp_schedule);
    if (!o->quiet) {
        char line[256];
        sim_plan_entry_format(e, line, sizeof line);
        run_say(t, WEFT_RUN_OUT, "layout auto (of %d planned at %.1f GFLOP/s a rank): %s\n",
                pl.n, q.gflops, line);
    }
    sim_plan_free(&pl);
    return 0;
}
