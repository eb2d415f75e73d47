/* Block costs for pipeline planning: the cost file and the FLOP estimate. */
#include "sim/pipe_costs.h"

#include "core/vec.h"
#include "train/flops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add(sim_block_costs *c, const sim_block_cost *b)
{
    int rc = VEC_RESERVE(c->b, c->cap, (size_t)c->n + 1);
    if (rc)
        return rc;
    c->b[c->n++] = *b;
    return 0;
}

void sim_block_costs_free(sim_block_costs *c)
{
    if (c) {
        free(c->b);
        memset(c, 0, sizeof *c);
    }
}

int sim_block_costs_load(const char *path, sim_block_costs *out, char *err, size_t len)
{
    if (!path || !out)
        return pipe_fail(err, len, "no cost file");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return pipe_fail(err, len, "%s: %s", path, strerror(errno));
    char line[512];
    int lineno = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        sim_block_cost b = { .out_bytes = -1 };
        char extra[2];
        int got = sscanf(line, "%31s %lf %lf %lf %lf %lf %lf %1s", b.name, &b.fwd, &b.bwd_i,
                         &b.bwd_w, &b.act_bytes, &b.state_bytes, &b.out_bytes, extra);
        if (got <= 0)
            continue;
        if (got < 6 || got > 7)
            rc = pipe_fail(err, len, "%s:%d: want name fwd_s bwd_input_s bwd_weight_s act_bytes "
                      "state_bytes [out_bytes]", path, lineno);
        else if (b.fwd < 0 || b.bwd_i < 0 || b.bwd_w < 0 || b.act_bytes < 0 || b.state_bytes < 0)
            rc = pipe_fail(err, len, "%s:%d: a negative cost", path, lineno);
        else
            rc = add(out, &b);
    }
    fclose(f);
    if (!rc && !out->n)
        rc = pipe_fail(err, len, "%s: no blocks", path);
    if (rc)
        sim_block_costs_free(out);
    return rc;
}

double sim_moe_record(double rows, double C, double E, double K, double F)
{
    double NK = rows * K;
    return 2 * rows * E + 4 * NK + 2 * E + 1 + NK * (2 * C + 3 * F);
}

/* One block from its FLOPs: fwd_flops includes attention; mm_flops is the
 * matmul part, which the weight backward repeats. */
static int add_est(sim_block_costs *c, const char *name, double fwd_flops, double bwd_i_flops,
                   double mm_flops, double params, double act, double out, double rate)
{
    sim_block_cost b = { .fwd = fwd_flops / rate, .bwd_i = bwd_i_flops / rate,
                         .bwd_w = mm_flops / rate, .act_bytes = act,
                         .state_bytes = 16 * params, .out_bytes = out };
    snprintf(b.name, sizeof b.name, "%s", name);
    return add(c, &b);
}

double sim_expert_width(const weft_model_config *c)
{
    if (c->experts <= 0 || (c->type != WEFT_MODEL_LLAMA && c->type != WEFT_MODEL_GPT))
        return 0;
    if (c->moe_ffn > 0)
        return c->moe_ffn;
    return c->type == WEFT_MODEL_GPT ? 4.0 * c->d_model : c->ffn;
}

double sim_expert_mats(const weft_model_config *c)
{
    return c->type == WEFT_MODEL_LLAMA ? 3 : 2;
}

/* Parameters of one transformer block, all of them (train_model_param_count's
 * count, the model's less the model without blocks, a block's share) and
 * those in the matrix products a token runs: a GPT's qkv, proj, fc and
 * fc-proj beside two LayerNorms and nine C of biases (with experts four:
 * they have none); a Llama's q and o, k and v (its kv heads' width), gate,
 * up and down beside two RMSNorm gains; with experts the router and the
 * topk experts and shared ones a token runs, not the other E - topk (nor
 * the balancing bias, no product). */
static void block_params(const weft_model_config *c, double *all, double *mm)
{
    weft_model_config none = *c;
    none.n_layer = 0;
    *all = (train_model_param_count(c) - train_model_param_count(&none)) / c->n_layer;
    double fe = sim_expert_width(c), gpt_biases = fe > 0 ? 8.0 : 13.0, C = c->d_model;
    if (fe > 0 && c->type == WEFT_MODEL_GPT) /* the count above has a GPT's dense MLP */
        *all = 4 * C * C + 8 * C + C * c->experts + (c->moe_bias ? c->experts : 0) +
               2 * C * fe * c->experts;
    *mm = *all - (c->type == WEFT_MODEL_LLAMA ? 2.0 : gpt_biases) * c->d_model;
    if (fe > 0)
        *mm -= sim_expert_mats(c) * c->d_model * fe * (c->experts - c->topk) +
               (c->moe_bias ? c->experts : 0);
}

/* The head's own parameters: the final norm, and a Llama's lm_head unless
 * tied; a tied head's weight gradient goes to the embedding's table, its
 * state counted there. */
static double head_params(const weft_model_config *c)
{
    double C = c->d_model;
    if (c->type == WEFT_MODEL_LLAMA)
        return C + (c->tied ? 0 : (double)c->vocab * C);
    return 2 * C;
}

/* Floats a block stashes per micro-batch of B sequences of T tokens. A
 * GPT: llm.c's per-layer count, ~16 C a token plus two T x T maps a head
 * (with experts the MLP's 8 C give way to the router's record).
 * A Llama (train_llama_layout): each norm's input scale and output, q, k,
 * v, attention's output, the residuals, gate|up and their product (the
 * shared experts' under experts), and 2 floats a row a head of
 * attention's statistics; with experts also the router's record
 * (train_moe_acts_floats, every token's topk rows routed). */
static double block_stash(const weft_model_config *c, double B, double T)
{
    double C = c->d_model, H = c->n_head, rows = B * T, fe = sim_expert_width(c);
    if (c->type != WEFT_MODEL_LLAMA)
        return fe > 0 ? 8 * rows * C + 2 * B * H * T * T +
                            sim_moe_record(rows, C, c->experts, c->topk, fe)
                      : 16 * rows * C + 2 * B * H * T * T;
    double kv = C / H * c->n_kv_head;
    double F = fe > 0 ? c->shared * fe : c->ffn;
    double st = rows * (6 * C + 2 * kv + 3.0 * F + 2 + 2 * H);
    if (fe > 0)
        st += sim_moe_record(rows, C, c->experts, c->topk, fe);
    return st;
}

/* A GPT's or a Llama's blocks: the embedding, n_layer blocks, the head. */
static int estimate_seq(const weft_model_config *cfg, double B, double T, double rate,
                        sim_block_costs *out)
{
    weft_model_config none = *cfg;
    none.n_layer = 0;
    double C = cfg->d_model, V = cfg->vocab, rows = B * T, act_out = 4 * rows * C;
    double head = head_params(cfg), embed = train_model_param_count(&none) - head, all, mmp;
    block_params(cfg, &all, &mmp);
    /* embedding: a lookup (and a GPT's position add); its weight gradient
     * a scatter */
    int rc = add_est(out, "embed", rows * C, 0, rows * C, embed, act_out, act_out, rate);
    double mm = 2 * mmp * rows, att = 2 * 2 * B * T * T * C, act = 4 * block_stash(cfg, B, T);
    char name[32];
    for (int l = 0; l < cfg->n_layer && !rc; l++) {
        snprintf(name, sizeof name, "blocks.%d", l);
        rc = add_est(out, name, mm + att, mm + att, mm, all, act, act_out, rate);
    }
    if (!rc) {
        /* final norm and the logits' product, tied or not */
        double hm = 2 * V * C * rows;
        rc = add_est(out, "head", hm, hm, hm, head, 4 * rows * (2 * C + 2 * V), 0, rate);
    }
    return rc;
}

int sim_block_costs_estimate(const weft_model_config *cfg, int batch, int seq, double gflops,
                             sim_block_costs *out, char *err, size_t len)
{
    if (!cfg || !out || weft_model_config_check(cfg))
        return pipe_fail(err, len, "bad model");
    if (batch < 1 || gflops <= 0)
        return pipe_fail(err, len, "need --batch >= 1 and --gflops > 0");
    if (cfg->type != WEFT_MODEL_MLP && seq > cfg->ctx)
        return pipe_fail(err, len, "--seq %d is longer than the model's ctx %d", seq, cfg->ctx);
    memset(out, 0, sizeof *out);
    double rate = gflops * 1e9, B = batch;
    int rc = 0;
    if (cfg->type == WEFT_MODEL_MLP) {
        char name[32];
        for (int l = 0; l + 1 < cfg->n_widths && !rc; l++) {
            double in = cfg->widths[l], o = cfg->widths[l + 1], mm = 2 * in * o * B;
            /* stashed: the input, the pre-activation, and the activation's
             * output (or the probabilities at the loss) */
            snprintf(name, sizeof name, "layers.%d", l);
            rc = add_est(out, name, mm, mm, mm, in * o + o, 4 * B * (in + 2 * o),
                         4 * B * o, rate);
        }
    } else
        rc = estimate_seq(cfg, B, seq > 0 ? seq : cfg->ctx, rate, out);
    if (rc)
        sim_block_costs_free(out);
    return rc;
}
