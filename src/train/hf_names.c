/* The name tables. A pattern's "%d" stands for a layer's number. */
#include "train/hf_names.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *weft, *hf;
    int transpose;
} name_pair;

/* GPT-2's Conv1D layers store [in, out]: transposed. c_attn's columns are
 * q | k | v, each head's hs columns in turn: the order of weft's qkv rows. */
static const name_pair gpt2[] = {
    { "tok_emb.weight", "transformer.wte.weight", 0 },
    { "pos_emb.weight", "transformer.wpe.weight", 0 },
    { "blocks.%d.ln1.weight", "transformer.h.%d.ln_1.weight", 0 },
    { "blocks.%d.ln1.bias", "transformer.h.%d.ln_1.bias", 0 },
    { "blocks.%d.attn.qkv.weight", "transformer.h.%d.attn.c_attn.weight", 1 },
    { "blocks.%d.attn.qkv.bias", "transformer.h.%d.attn.c_attn.bias", 0 },
    { "blocks.%d.attn.proj.weight", "transformer.h.%d.attn.c_proj.weight", 1 },
    { "blocks.%d.attn.proj.bias", "transformer.h.%d.attn.c_proj.bias", 0 },
    { "blocks.%d.ln2.weight", "transformer.h.%d.ln_2.weight", 0 },
    { "blocks.%d.ln2.bias", "transformer.h.%d.ln_2.bias", 0 },
    { "blocks.%d.mlp.fc.weight", "transformer.h.%d.mlp.c_fc.weight", 1 },
    { "blocks.%d.mlp.fc.bias", "transformer.h.%d.mlp.c_fc.bias", 0 },
    { "blocks.%d.mlp.proj.weight", "transformer.h.%d.mlp.c_proj.weight", 1 },
    { "blocks.%d.mlp.proj.bias", "transformer.h.%d.mlp.c_proj.bias", 0 },
    { "ln_f.weight", "transformer.ln_f.weight", 0 },
    { "ln_f.bias", "transformer.ln_f.bias", 0 },
};
/* buffers transformers saves that weft computes: the causal mask */
static const char *const gpt2_skip[] = { "transformer.h.%d.attn.bias",
                                         "transformer.h.%d.attn.masked_bias", "lm_head.weight" };

/* rotate_half's convention on both sides: q and k need no permutation */
static const name_pair llama[] = {
    { "tok_emb.weight", "model.embed_tokens.weight", 0 },
    { "blocks.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight", 0 },
    { "blocks.%d.attn.q.weight", "model.layers.%d.self_attn.q_proj.weight", 0 },
    { "blocks.%d.attn.k.weight", "model.layers.%d.self_attn.k_proj.weight", 0 },
    { "blocks.%d.attn.v.weight", "model.layers.%d.self_attn.v_proj.weight", 0 },
    { "blocks.%d.attn.o.weight", "model.layers.%d.self_attn.o_proj.weight", 0 },
    { "blocks.%d.mlp_norm.weight", "model.layers.%d.post_attention_layernorm.weight", 0 },
    { "blocks.%d.mlp.gate.weight", "model.layers.%d.mlp.gate_proj.weight", 0 },
    { "blocks.%d.mlp.up.weight", "model.layers.%d.mlp.up_proj.weight", 0 },
    { "blocks.%d.mlp.down.weight", "model.layers.%d.mlp.down_proj.weight", 0 },
    { "norm.weight", "model.norm.weight", 0 },
    { "lm_head.weight", "lm_head.weight", 0 },
};
static const char *const llama_skip[] = { "model.layers.%d.self_attn.rotary_emb.inv_freq" };

/* s matches pattern p, "%d" standing for a number (then *layer), within
 * layers [0, n_layer). */
static int matches(const char *p, const char *s, int n_layer, int *layer)
{
    const char *d = strstr(p, "%d");
    if (!d)
        return strcmp(p, s) == 0;
    size_t pre = (size_t)(d - p);
    if (strncmp(p, s, pre) != 0)
        return 0;
    const char *q = s + pre;
    long x = 0;
    int digits = 0;
    while (*q >= '0' && *q <= '9' && digits < 6) {
        x = x * 10 + (*q++ - '0');
        digits++;
    }
    if (!digits || (digits > 1 && s[pre] == '0') || x >= n_layer || strcmp(q, d + 2) != 0)
        return 0;
    *layer = (int)x;
    return 1;
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

static int fill(const char *pattern, int layer, char *out, size_t cap)
{
    /* the patterns are this file's constants, each with at most one %d */
    char fmt[128];
    snprintf(fmt, sizeof fmt, "%s", pattern);
    char *d = strstr(fmt, "%d");
    int n;
    if (d) {
        *d = 0;
        n = snprintf(out, cap, "%s%d%s", fmt, layer, d + 2);
    } else {
        n = snprintf(out, cap, "%s", fmt);
    }
    return n < 0 || (size_t)n >= cap ? WEFT_EINVAL : 0;
}

int hf_name_of(const weft_model_config *cfg, const char *weft, char *hf, size_t cap,
               int *transpose)
{
    size_t n;
    const name_pair *t = table(cfg, &n);
    for (size_t i = 0; t && weft && i < n; i++) {
        int layer = 0;
        if (matches(t[i].weft, weft, cfg->n_layer, &layer)) {
            if (transpose)
                *transpose = t[i].transpose;
            return fill(t[i].hf, layer, hf, cap);
        }
    }
    return WEFT_EINVAL;
}

int hf_weft_name(const weft_model_config *cfg, const char *hf, char *weft, size_t cap)
{
    size_t n;
    const name_pair *t = table(cfg, &n);
    int layer = 0;
    int tied = cfg->type == WEFT_MODEL_GPT || cfg->tied;
    for (size_t i = 0; t && hf && i < n; i++)
        if (matches(t[i].hf, hf, cfg->n_layer, &layer) &&
            !(tied && strcmp(t[i].weft, "lm_head.weight") == 0))
            return fill(t[i].weft, layer, weft, cap);
    const char *const *skip = cfg->type == WEFT_MODEL_GPT ? gpt2_skip : llama_skip;
    size_t ns = cfg->type == WEFT_MODEL_GPT ? sizeof gpt2_skip / sizeof *gpt2_skip
                                            : sizeof llama_skip / sizeof *llama_skip;
    for (size_t i = 0; t && hf && i < ns; i++)
        if (matches(skip[i], hf, cfg->n_layer, &layer))
            return 1;
    if (t && hf && tied && strcmp(hf, "lm_head.weight") == 0)
        return 1;
    return WEFT_EINVAL;
}
