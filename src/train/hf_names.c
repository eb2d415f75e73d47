/* The name tables. A pattern's "%d" stands for a layer's number. */
#include "train/hf_names.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *weft, *hf;
    int transpose;
    int mlp; /* a Llama's: 1 its dense MLP's, 2 its experts' router */
} name_pair;

/* GPT-2's Conv1D layers store [in, out]: transposed. c_attn's columns are
 * q | k | v, each head's hs columns in turn: the order of weft's qkv rows. */
static const name_pair gpt2[] = {
    { "tok_emb.weight", "transformer.wte.weight", 0, 0 },
    { "pos_emb.weight", "transformer.wpe.weight", 0, 0 },
    { "blocks.%d.ln1.weight", "transformer.h.%d.ln_1.weight", 0, 0 },
    { "blocks.%d.ln1.bias", "transformer.h.%d.ln_1.bias", 0, 0 },
    { "blocks.%d.attn.qkv.weight", "transformer.h.%d.attn.c_attn.weight", 1, 0 },
    { "blocks.%d.attn.qkv.bias", "transformer.h.%d.attn.c_attn.bias", 0, 0 },
    { "blocks.%d.attn.proj.weight", "transformer.h.%d.attn.c_proj.weight", 1, 0 },
    { "blocks.%d.attn.proj.bias", "transformer.h.%d.attn.c_proj.bias", 0, 0 },
    { "blocks.%d.ln2.weight", "transformer.h.%d.ln_2.weight", 0, 0 },
    { "blocks.%d.ln2.bias", "transformer.h.%d.ln_2.bias", 0, 0 },
    { "blocks.%d.mlp.fc.weight", "transformer.h.%d.mlp.c_fc.weight", 1, 0 },
    { "blocks.%d.mlp.fc.bias", "transformer.h.%d.mlp.c_fc.bias", 0, 0 },
    { "blocks.%d.mlp.proj.weight", "transformer.h.%d.mlp.c_proj.weight", 1, 0 },
    { "blocks.%d.mlp.proj.bias", "transformer.h.%d.mlp.c_proj.bias", 0, 0 },
    { "ln_f.weight", "transformer.ln_f.weight", 0, 0 },
    { "ln_f.bias", "transformer.ln_f.bias", 0, 0 },
};
/* buffers transformers saves that weft computes: the causal mask */
static const char *const gpt2_skip[] = { "transformer.h.%d.attn.bias",
                                         "transformer.h.%d.attn.masked_bias", "lm_head.weight" };

/* rotate_half's convention on both sides: q and k need no permutation.
 * In a mixture of experts the dense MLP's three (mlp = 1) give way to
 * Mixtral's sparse block: its router (mlp = 2) and the expert stacks. */
static const name_pair llama[] = {
    { "tok_emb.weight", "model.embed_tokens.weight", 0, 0 },
    { "blocks.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight", 0, 0 },
    { "blocks.%d.attn.q.weight", "model.layers.%d.self_attn.q_proj.weight", 0, 0 },
    { "blocks.%d.attn.k.weight", "model.layers.%d.self_attn.k_proj.weight", 0, 0 },
    { "blocks.%d.attn.v.weight", "model.layers.%d.self_attn.v_proj.weight", 0, 0 },
    { "blocks.%d.attn.o.weight", "model.layers.%d.self_attn.o_proj.weight", 0, 0 },
    { "blocks.%d.mlp_norm.weight", "model.layers.%d.post_attention_layernorm.weight", 0, 0 },
    { "blocks.%d.mlp.gate.weight", "model.layers.%d.mlp.gate_proj.weight", 0, 1 },
    { "blocks.%d.mlp.up.weight", "model.layers.%d.mlp.up_proj.weight", 0, 1 },
    { "blocks.%d.mlp.down.weight", "model.layers.%d.mlp.down_proj.weight", 0, 1 },
    { "norm.weight", "model.norm.weight", 0, 0 },
    { "lm_head.weight", "lm_head.weight", 0, 0 },
    { "blocks.%d.mlp.router.weight", "model.layers.%d.block_sparse_moe.gate.weight", 0, 2 },
};
static const char *const llama_skip[] = { "model.layers.%d.self_attn.rotary_emb.inv_freq" };

/* weft stacks a block's experts in two tensors; Mixtral keeps one tensor
 * per expert and projection. Piece p of a stack is its rows
 * [p R, (p + 1) R), R = rows / pieces: expert p / nproj's projection
 * p % nproj (gate_up's expert rows are gate then up: w1 then w3). The
 * second "%d" is the expert. */
typedef struct {
    const char *weft, *hf[2];
    int nproj;
    int down; /* a piece is [dim, ffn] (else [ffn, dim]) */
} stack;
static const stack mixtral_stacks[] = {
    { "blocks.%d.mlp.experts.gate_up.weight",
      { "model.layers.%d.block_sparse_moe.experts.%d.w1.weight",
        "model.layers.%d.block_sparse_moe.experts.%d.w3.weight" }, 2, 0 },
    { "blocks.%d.mlp.experts.down.weight",
      { "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", NULL }, 1, 1 },
};

/* s matches pattern p, each "%d" standing for a number below lim[k]
 * (then val[k]); at most two of them. */
static int matches(const char *p, const char *s, const int *lim, int *val)
{
    int k = 0;
    while (*p) {
        if (p[0] == '%' && p[1] == 'd') {
            long x = 0;
            int digits = 0;
            const char *q = s;
            while (*q >= '0' && *q <= '9' && digits < 6) {
                x = x * 10 + (*q++ - '0');
                digits++;
            }
            if (!digits || (digits > 1 && *s == '0') || k >= 2 || x >= lim[k])
                return 0;
            val[k++] = (int)x;
            s = q;
            p += 2;
        } else if (*p++ != *s++) {
            return 0;
        }
    }
    return *s == 0;
}

/* Whether table row r belongs to cfg's model: a Llama's dense MLP or its
 * experts' router, not both. */
static int row_fits(const weft_model_config *cfg, const name_pair *r)
{
    return cfg->type != WEFT_MODEL_LLAMA || !r->mlp || (r->mlp == 2) == (cfg->experts > 0);
}

static const name_pair *table(const weft_model_config *cfg, size_t *n)
{
    if (cfg->type == WEFT_MODEL_GPT)
        return (*n = sizeof gpt2 / sizeof gpt2[0]), gpt2;
    if (cfg->type == WEFT_MODEL_LLAMA)
        return (*n = sizeof llama / sizeof llama[0]), llama;
    *n = 0;
    return NULL;
}

/* The stacks of cfg's model (none without experts, and none for a GPT's:
 * no transformers model has its GELU experts). */
static const stack *stacks(const weft_model_config *cfg, size_t *n)
{
    if (cfg->type == WEFT_MODEL_LLAMA && cfg->experts > 0)
        return (*n = sizeof mixtral_stacks / sizeof *mixtral_stacks), mixtral_stacks;
    *n = 0;
    return NULL;
}

/* pattern with its "%d"s replaced by val[0], val[1] in turn */
static int fill(const char *pattern, const int *val, char *out, size_t cap)
{
    size_t at = 0;
    int k = 0;
    if (!cap)
        return WEFT_EINVAL;
    out[0] = 0;
    for (const char *p = pattern; *p; p++) {
        int n;
        if (p[0] == '%' && p[1] == 'd' && k < 2) {
            n = snprintf(out + at, cap - at, "%d", val[k++]);
            p++;
        } else {
            n = snprintf(out + at, cap - at, "%c", *p);
        }
        if (n < 0 || (size_t)n >= cap - at)
            return WEFT_EINVAL;
        at += (size_t)n;
    }
    return 0;
}

int hf_piece_name(const weft_model_config *cfg, const char *weft, int piece, char *hf,
                  size_t cap, int *transpose, int *pieces)
{
    size_t n;
    const name_pair *t = table(cfg, &n);
    int lim[2] = { cfg->n_layer, 1 }, val[2] = { 0, 0 };
    for (size_t i = 0; t && weft && i < n; i++) {
        if (row_fits(cfg, &t[i]) && matches(t[i].weft, weft, lim, val)) {
            if (transpose)
                *transpose = t[i].transpose;
            if (pieces)
                *pieces = 1;
            return piece == 0 ? fill(t[i].hf, val, hf, cap) : WEFT_EINVAL;
        }
    }
    const stack *st = stacks(cfg, &n);
    for (size_t i = 0; st && weft && i < n; i++) {
        if (!matches(st[i].weft, weft, lim, val))
            continue;
        int np = cfg->experts * st[i].nproj;
        if (transpose)
            *transpose = 0;
        if (pieces)
            *pieces = np;
        if (piece < 0 || piece >= np)
            return WEFT_EINVAL;
        val[1] = piece / st[i].nproj;
        return fill(st[i].hf[piece % st[i].nproj], val, hf, cap);
    }
    return WEFT_EINVAL;
}

int hf_piece_shape(const weft_model_config *cfg, const char *weft, int64_t *rows,
                   int64_t *cols)
{
    size_t n;
    const stack *st = stacks(cfg, &n);
    int lim[2] = { cfg->n_layer, 1 }, val[2] = { 0, 0 };
    int64_t F = cfg->moe_ffn > 0 ? cfg->moe_ffn : cfg->ffn, D = cfg->d_model;
    for (size_t i = 0; st && weft && i < n; i++)
        if (matches(st[i].weft, weft, lim, val)) {
            *rows = st[i].down ? D : F;
            *cols = st[i].down ? F : D;
            return 0;
        }
    return WEFT_EINVAL;
}

int hf_name_of(const weft_model_config *cfg, const char *weft, char *hf, size_t cap,
               int *transpose)
{
    int pieces = 0, rc = hf_piece_name(cfg, weft, 0, hf, cap, transpose, &pieces);
    return rc == 0 && pieces != 1 ? WEFT_EINVAL : rc;
}

int hf_weft_name(const weft_model_config *cfg, const char *hf, char *weft, size_t cap)
{
    size_t n;
    const name_pair *t = table(cfg, &n);
    int lim[2] = { cfg->n_layer, cfg->experts > 0 ? cfg->experts : 1 }, val[2] = { 0, 0 };
    int tied = cfg->type == WEFT_MODEL_GPT || cfg->tied;
    for (size_t i = 0; t && hf && i < n; i++)
        if (row_fits(cfg, &t[i]) && matches(t[i].hf, hf, lim, val) &&
            !(tied && strcmp(t[i].weft, "lm_head.weight") == 0))
            return fill(t[i].weft, val, weft, cap);
    const stack *st = stacks(cfg, &n);
    for (size_t i = 0; st && hf && i < n; i++)
        for (int j = 0; j < st[i].nproj; j++)
            if (matches(st[i].hf[j], hf, lim, val))
                return fill(st[i].weft, val, weft, cap);
    const char *const *skip = cfg->type == WEFT_MODEL_GPT ? gpt2_skip : llama_skip;
    size_t ns = cfg->type == WEFT_MODEL_GPT ? sizeof gpt2_skip / sizeof *gpt2_skip
                                            : sizeof llama_skip / sizeof *llama_skip;
    for (size_t i = 0; t && hf && i < ns; i++)
        if (matches(skip[i], hf, lim, val))
            return 1;
    if (t && hf && tied && strcmp(hf, "lm_head.weight") == 0)
        return 1;
    return WEFT_EINVAL;
}
