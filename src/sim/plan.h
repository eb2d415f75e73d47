/* The layout planner behind `weft-sim plan`: for a GPT or a Llama and a
 * machine it lists every tp x cp x dp x pp of the ranks (tp only where the
 * model's heads split; cp, context parallelism, where asked for), with
 * expert parallelism (ep, inside dp) for a mixture of experts where asked
 * for, each pipeline schedule, micro-batch count, ZeRO stage and sequence
 * parallelism that applies,
 * predicts each one's step time, memory per rank and bytes per parallel
 * dimension, and picks the fastest that fits the memory of a rank.
 *
 * Ranks are placed as weft_layout's default order (tp-cp-dp-pp, tensor
 * fastest): a tensor group is neighbouring ranks, a context group strides
 * tp, a data group strides tp*cp (an expert group is ep consecutive
 * ranks of it), a pipeline strides tp*cp*dp. Compute comes from FLOPs
 * (sim_block_costs_estimate) divided by tp; each collective a layout
 * calls is priced by the simulator's own schedules (sim_run) on the
 * group's links; the pipeline is the library's schedule replayed
 * (sim_pipe_plan_run). docs/SIMULATION.md, "Planning a layout". */
#ifndef WEFT_SIM_PLAN_H
#define WEFT_SIM_PLAN_H

#include <stddef.h>

#include "sim/plan_calib.h"
#include "sim/topo.h"
#include "train/pipe_sched.h"
#include "weft.h"

typedef struct {
    weft_model_config model;  /* a GPT or a Llama */
    int batch;                /* global sequences a step (weft-train --batch) */
    int seq;                  /* tokens a sequence; 0: the model's ctx */
    int ranks;
    const sim_topo *topo;
    double gflops;            /* sustained GFLOP/s of a rank; of a core where the
                                 topology has a cpu line (its ranks share them) */
    double mem;               /* bytes a rank may hold; <= 0: no limit */
    int optim_bytes;          /* K, optimiser bytes a parameter: 8 AdamW, 4 SGD */
    sim_calib *calib;         /* measured inputs (plan_calib.h); NULL: all assumed.
                                 Its shapes probed during the plan are added */
    int ep, cp;               /* expert and context parallelism: 0 none (1 only),
                                 -1 every degree that applies, N > 0 that one */
} sim_plan_query;

enum sim_plan_dim { SIM_PLAN_TP = 0, SIM_PLAN_PP, SIM_PLAN_DP, SIM_PLAN_EP, SIM_PLAN_CP,
                    SIM_PLAN_DIMS };

typedef struct {
    int tp, pp, dp, sp, zero;
    int ep, cp;               /* dp counts neither cp (ranks = tp cp dp pp) nor
                                 divides by ep (expert groups of ep dp ranks) */
    pipe_spec spec;           /* the schedule; p = pp, m micro-batches a step */
    int micro_rows;           /* a rank's tokens a micro-batch: (batch / dp / m) * seq / cp */
    double step_s;            /* predicted seconds a step */
    double pipe_s;            /* the replayed pipeline, tensor collectives inside */
    double dp_s;              /* data-parallel time the backward does not hide */
    double tp_s;              /* tensor-parallel collectives of the busiest rank */
    double ep_s;              /* its experts' all-to-alls (and their counts) */
    double cp_s;              /* its context ring's waits the products do not hide */
    double bubble;            /* the pipeline's mean idle share */
    double state_bytes;       /* params + grads + optimiser of the fullest rank */
    double act_bytes;         /* its stashed activations */
    double mem_bytes;         /* state + activations (the fullest rank) */
    double bytes[SIM_PLAN_DIMS]; /* a rank's payload a step, the busiest */
    int link[SIM_PLAN_DIMS];  /* enum sim_lclass the dimension's traffic tops out
                                 at; -1: no traffic */
    int fits;                 /* mem_bytes <= query mem (always 1 without a limit) */
} sim_plan_entry;

typedef struct {
    sim_plan_entry *e;        /* sorted by step_s, fastest first */
    int n, cap;
    int best;                 /* the fastest that fits; -1: none fits */
    int smallest;             /* the least mem_bytes (when none fits) */
} sim_plan;

/* Every layout of q (docs/SIMULATION.md lists the enumeration), predicted
 * and sorted. WEFT_EINVAL with a reason in err for a query that makes no
 * sense (an MLP, no ranks, batch < 1, ...); no layout fitting the
 * memory is not an error (best = -1). */
int sim_plan_run(const sim_plan_query *q, sim_plan *out, char *err, size_t len);
void sim_plan_free(sim_plan *p);

/* Bytes a rank holds for parameters, gradients and optimiser state at a
 * ZeRO stage over dp ranks: include/weft.h's weft_zero_mem formulas for
 * psi parameters and K optimiser bytes each. */
double sim_plan_zero_bytes(double psi, int zero, int dp, int optim_bytes);

/* "tp=2 pp=2 dp=2 sp=0 schedule=1f1b m=8 zero=1 step_ms=12.345
 * mem_bytes=123456" (then " ep=E" and " cp=C" where above 1): the line `weft-sim plan` ends with, and what
 * weft-train --layout auto reads back. Returns as snprintf. */
int sim_plan_entry_format(const sim_plan_entry *e, char *buf, size_t len);

#endif
