#include "train/flops.h"

double train_model_param_count(const weft_model_config *c)
{
    double n = 0.0;
    if (c->type == WEFT_MODEL_MLP) {
        for (int i = 0; i + 1 < c->n_widths; i++)
            n += (double)c->widths[i] * c->widths[i + 1] + c->widths[i + 1];
        return n;
    }
    double d = c->d_model, L = c->n_layer;
    if (c->type == WEFT_MODEL_LLAMA) {
        /* per block: two RMSNorm gains, q and o (d x d), k and v (kv_heads
         * heads each), gate, up and down; no biases, no positions */
        double kv = d / c->n_head * c->n_kv_head, ffn = c->ffn;
        double block = 2 * d + 2 * d * d + 2 * d * kv + 3 * d * ffn;
        if (c->experts > 0) {
            /* the router (and its bias), every expert and the shared ones */
            double fe = c->moe_ffn > 0 ? c->moe_ffn : c->ffn;
            block = 2 * d + 2 * d * d + 2 * d * kv + d * c->experts +
                    (c->moe_bias ? c->experts : 0) + 3 * d * fe * (c->experts + c->shared);
        }
        return (double)c->vocab * d * (c->tied ? 1 : 2) + L * block + d;
    }
    /* per block: two LayerNorms, qkv and proj, fc and fc-proj, with biases */
    double block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) +
                   (4 * d * d + d);
    return (double)c->vocab * d + (double)c->ctx * d + L * block + 2 * d;
}

double train_model_flops(const weft_model_config *c, int batch, int seq)
{
    if (c->type == WEFT_MODEL_MLP)
        return 6.0 * train_model_param_count(c) * batch;
    int T = seq > 0 && seq <= c->ctx ? seq : c->ctx;
    double tokens = (double)batch * T, n = train_model_param_count(c);
    if (c->type == WEFT_MODEL_LLAMA && c->experts > 0) /* a token runs topk experts */
        n -= (double)c->n_layer * (c->experts - c->topk) * 3.0 * c->d_model *
             (c->moe_ffn > 0 ? c->moe_ffn : c->ffn);
    return tokens * (6.0 * n +
                     12.0 * c->n_layer * (double)T * c->d_model);
}
