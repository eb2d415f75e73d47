/* Per-block costs of a model for pipeline planning: read from the text
 * file weft-train writes with its measured costs, or estimated from the
 * model's FLOPs; and the plan built on them (partition, replay). */
#ifndef WEFT_SIM_PIPE_COSTS_H
#define WEFT_SIM_PIPE_COSTS_H

#include <stddef.h>

#include "train/pipe_partition.h"
#include "train/pipe_sched.h"
#include "weft.h"

typedef struct {
    char name[32];
    double fwd, bwd_i, bwd_w;  /* seconds per micro-batch */
    double act_bytes;          /* stashed per micro-batch */
    double state_bytes;        /* params + grads + optimiser state */
    double out_bytes;          /* the block's output, what crosses a cut; < 0: unknown */
} sim_block_cost;

typedef struct {
    sim_block_cost *b;
    int n, cap;
} sim_block_costs;

/* The cost file: one line per block,
 *   name fwd_seconds bwd_input_seconds bwd_weight_seconds act_bytes state_bytes [out_bytes]
 * '#' starts a comment. err names the line of a fault. */
int sim_block_costs_load(const char *path, sim_block_costs *out, char *err, size_t len);
/* From FLOPs at gflops GFLOP/s for a micro-batch of batch samples (GPT or
 * Llama: of seq tokens each): forward 2 * matmul params * rows (a
 * mixture of experts': those a token runs, its topk experts, the shared
 * ones and the router) (+
 * attention's 4*B*T*T*C a layer); input backward = forward; weight
 * backward = the matmul part of the forward (embedding and norms ~0). The
 * parameters are train_model_param_count's, each block from its own shape
 * (a Llama's grouped k and v, SwiGLU, RMSNorm gains, own or tied lm_head).
 * State: 16 bytes a parameter (fp32 weight, gradient, two Adam moments). */
int sim_block_costs_estimate(const weft_model_config *cfg, int batch, int seq, double gflops,
                             sim_block_costs *out, char *err, size_t len);
void sim_block_costs_free(sim_block_costs *c);
/* Floats a mixture-of-experts layer keeps for backward over rows tokens
 * of width C, E experts of width F (a rank's share of it under tensor
 * parallelism), K picked a token, none dropped: train_moe_acts_floats's
 * count (logits and scores, picks, rows, gates, starts, and the routed
 * rows' input, gate|up, product and output). */
double sim_moe_record(double rows, double C, double E, double K, double F);
/* An expert's width (moe_ffn, else a Llama's ffn or a GPT's 4 C:
 * train_moe_expert_ffn), 0 without experts; and the C x width matrices
 * an expert has (a Llama's SwiGLU three, a GPT's GELU two). */
double sim_expert_width(const weft_model_config *c);
double sim_expert_mats(const weft_model_config *c);

typedef struct {
    pipe_spec spec;
    int k;                /* chunks, p*v */
    int *first;           /* [k+1] the partition (pipe_partition.h) */
    int *chunk_stash;     /* [k] */
    double *fwd, *bwd_i, *bwd_w, *out_bytes; /* [k] per chunk */
    double *stage_bytes;  /* [k] state + stash * activations */
    double step;          /* predicted seconds a step */
    double *busy, *bubble; /* [p] */
    int *peak_stash;      /* [p] */
} sim_pipe_plan;

/* Builds the schedule, cuts the blocks (partition: "auto", "uniform" or
 * "3,3,2"; mem_cap bytes a stage, <= 0 none), sums the chunks' costs and
 * replays the schedule over links of latency seconds and bandwidth bytes
 * a second (<= 0: free). */
int sim_pipe_plan_run(const sim_block_costs *bc, const pipe_spec *spec, const char *partition,
                      double mem_cap, double latency, double bandwidth, sim_pipe_plan *out,
                      char *err, size_t len);
void sim_pipe_plan_free(sim_pipe_plan *p);

#endif
