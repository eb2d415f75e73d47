/* config.json read into weft's model config (through the model spec
 * syntax, so it is the config weft_model_config_parse would make) and
 * written from it. */
#include "train/hf_config.h"
#include "core/errmsg.h"

#include "core/json.h"
#include "train/data_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const json_value *v;
    const char *path;
    char *err;
    size_t cap;
} conf;

/* An integer field in [1, 2^31): *out, or its default (dflt < 0: needed). */
static int get_int(const conf *c, const char *key, long long dflt, int *out)
{
    const json_value *f = json_get(c->v, key);
    long long x = dflt;
    if ((f && f->type != JSON_NULL && json_int(f, 1, 0x7fffffff, &x) != 0) || x < 1)
        return errmsg(c->err, c->cap, WEFT_EIO, "%s: \"%s\" %s", c->path, key,
                      f ? "is not a positive integer" : "is missing");
    *out = (int)x;
    return 0;
}

static int get_num(const conf *c, const char *key, double dflt, double *out)
{
    const json_value *f = json_get(c->v, key);
    if (f && f->type != JSON_NUM && f->type != JSON_NULL)
        return errmsg(c->err, c->cap, WEFT_EIO, "%s: \"%s\" is not a number", c->path, key);
    *out = f && f->type == JSON_NUM ? f->num : dflt;
    return 0;
}

/* A field weft has one value of: absent, null or that value. */
static int want_bool(const conf *c, const char *key, int want)
{
    const json_value *f = json_get(c->v, key);
    if (!f || f->type == JSON_NULL || (f->type == JSON_BOOL && f->boolean == want))
        return 0;
    return errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"%s\" must be %s for weft's model",
                  c->path, key, want ? "true" : "false");
}

static int want_str(const conf *c, const char *key, const char *a, const char *b)
{
    const json_value *f = json_get(c->v, key);
    if (!f || f->type == JSON_NULL ||
        (f->type == JSON_STR && (strcmp(f->str, a) == 0 || (b && strcmp(f->str, b) == 0))))
        return 0;
    return errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"%s\" is %s%s%s; weft's model has \"%s\"",
                  c->path, key, f->type == JSON_STR ? "\"" : "not a string",
                  f->type == JSON_STR ? f->str : "", f->type == JSON_STR ? "\"" : "", a);
}

static int gpt2_spec(const conf *c, char *spec, size_t n)
{
    int V = 0, T = 0, C = 0, L = 0, H = 0, inner = 0;
    double eps;
    int rc = get_int(c, "vocab_size", -1, &V);
    if (rc == 0 && (rc = get_int(c, "n_ctx", 1024, &T)) == 0)
        rc = get_int(c, "n_positions", T, &T);
    if (rc == 0)
        rc = get_int(c, "n_embd", -1, &C);
    if (rc == 0)
        rc = get_int(c, "n_layer", -1, &L);
    if (rc == 0)
        rc = get_int(c, "n_head", -1, &H);
    if (rc == 0 && (rc = get_int(c, "n_inner", 4LL * C, &inner)) == 0 && inner != 4 * C)
        rc = errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"n_inner\" %d: weft's GPT has 4 * n_embd "
                    "= %d", c->path, inner, 4 * C);
    if (rc == 0 && (rc = get_num(c, "layer_norm_epsilon", 1e-5, &eps)) == 0 &&
        fabs(eps - 1e-5) > 1e-12)
        rc = errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"layer_norm_epsilon\" %g: weft's GPT's "
                    "LayerNorm uses 1e-05", c->path, eps);
    if (rc == 0)
        rc = want_str(c, "activation_function", "gelu_new", "gelu_pytorch_tanh");
    if (rc == 0)
        rc = want_bool(c, "tie_word_embeddings", 1);
    if (rc == 0)
        rc = want_bool(c, "scale_attn_weights", 1);
    if (rc == 0)
        rc = want_bool(c, "scale_attn_by_inverse_layer_idx", 0);
    if (rc == 0)
        rc = want_bool(c, "add_cross_attention", 0);
    if (rc == 0)
        snprintf(spec, n, "gpt:vocab=%d,ctx=%d,layers=%d,heads=%d,dim=%d", V, T, L, H, C);
    return rc;
}

/* A Llama, or (moe) Mixtral: the same blocks with a sparse MLP, its own
 * defaults (MixtralConfig's) for what config.json leaves out. */
static int llama_spec(const conf *c, char *spec, size_t n, int moe)
{
    int V = 0, T = 0, C = 0, F = 0, L = 0, H = 0, KV = 0, tied = 0;
    double theta, eps;
    int rc = get_int(c, "vocab_size", -1, &V);
    if (rc == 0)
        rc = get_int(c, "max_position_embeddings", -1, &T);
    if (rc == 0)
        rc = get_int(c, "hidden_size", -1, &C);
    if (rc == 0)
        rc = get_int(c, "intermediate_size", -1, &F);
    if (rc == 0)
        rc = get_int(c, "num_hidden_layers", -1, &L);
    if (rc == 0 && (rc = get_int(c, "num_attention_heads", -1, &H)) == 0)
        rc = get_int(c, "num_key_value_heads", H, &KV);
    int hd = H > 0 ? C / H : 0;
    if (rc == 0 && (rc = get_int(c, "head_dim", hd, &hd)) == 0 && hd * H != C)
        rc = errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"head_dim\" %d: weft's Llama has "
                    "hidden_size / num_attention_heads", c->path, hd);
    if (rc == 0)
        rc = get_num(c, "rope_theta", moe ? 1e6 : 10000.0, &theta);
    if (rc == 0)
        rc = get_num(c, "rms_norm_eps", moe ? 1e-5 : 1e-6, &eps);
    const json_value *rs = json_get(c->v, "rope_scaling"), *tw;
    if (rc == 0 && rs && rs->type != JSON_NULL)
        rc = errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"rope_scaling\" is set; weft's Llama "
                    "has plain rotary positions", c->path);
    if (rc == 0)
        rc = want_str(c, "hidden_act", "silu", NULL);
    if (rc == 0)
        rc = want_bool(c, "attention_bias", 0);
    if (rc == 0)
        rc = want_bool(c, "mlp_bias", 0);
    if (rc == 0 && (tw = json_get(c->v, "tie_word_embeddings")) && tw->type == JSON_BOOL)
        tied = tw->boolean;
    long long tp = 1;
    const json_value *ptp = json_get(c->v, "pretraining_tp");
    if (rc == 0 && ptp && ptp->type != JSON_NULL && (json_int(ptp, 1, 1 << 20, &tp) || tp != 1))
        rc = errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"pretraining_tp\" must be 1", c->path);
    int len = 0;
    if (rc == 0)
        len = snprintf(spec, n, "llama:vocab=%d,ctx=%d,layers=%d,heads=%d,kv_heads=%d,dim=%d,"
                       "ffn=%d,theta=%.9g,eps=%.9g,tied=%d", V, T, L, H, KV, C, F, theta, eps,
                       tied);
    if (rc != 0 || !moe)
        return rc;
    /* the sparse block: every token's top k of a softmax over the experts,
     * renormalised, as weft's router=softmax */
    int E = 0, K = 0, sw = 0;
    double aux, z, capf, jitter;
    if ((rc = get_int(c, "num_local_experts", 8, &E)) == 0)
        rc = get_int(c, "num_experts_per_tok", 2, &K);
    if (rc == 0)
        rc = get_num(c, "router_aux_loss_coef", 0.001, &aux);
    if (rc == 0)
        rc = get_num(c, "router_z_loss_coef", 0.0, &z);
    if (rc == 0)
        rc = get_num(c, "capacity_factor", 0.0, &capf);
    if (rc == 0 && (rc = get_num(c, "router_jitter_noise", 0.0, &jitter)) == 0 && jitter != 0)
        rc = errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"router_jitter_noise\" %g: weft's "
                    "router adds no noise", c->path, jitter);
    const json_value *w = json_get(c->v, "sliding_window");
    if (rc == 0 && w && w->type != JSON_NULL &&
        ((rc = get_int(c, "sliding_window", 1, &sw)) != 0 || sw < T))
        rc = errmsg(c->err, c->cap, WEFT_ENOTSUP, "%s: \"sliding_window\" is set below "
                    "max_position_embeddings; weft's attention sees the whole context", c->path);
    if (rc == 0 && (size_t)len < n)
        snprintf(spec + len, n - (size_t)len, ",experts=%d,topk=%d,aux=%.9g,zloss=%.9g,"
                 "capacity=%.9g", E, K, aux, z, capf);
    return rc;
}

/* "gpt2", "llama" or "mixtral" from architectures[0], else model_type;
 * NULL. */
static const char *arch_of(const json_value *v)
{
    const json_value *a = json_get(v, "architectures"), *t = json_get(v, "model_type");
    if (a && a->type == JSON_ARR && a->n >= 1 && a->items[0].type == JSON_STR) {
        const char *s = a->items[0].str;
        return strcmp(s, "GPT2LMHeadModel") == 0    ? "gpt2"
               : strcmp(s, "LlamaForCausalLM") == 0 ? "llama"
               : strcmp(s, "MixtralForCausalLM") == 0 ? "mixtral" : s;
    }
    return t && t->type == JSON_STR ? t->str : NULL;
}

int hf_config_read(const char *dir, weft_model_config *cfg, char *err, size_t cap)
{
    if (!dir || !cfg)
        return WEFT_EINVAL;
    char path[4096], jerr[256], spec[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unsigned char *text = NULL;
    size_t len = 0;
    json_value *v = NULL;
    if (train_data_read_file(path, &text, &len) != 0)
        return errmsg(err, cap, WEFT_EIO, "%s: cannot read it", path);
    int rc = json_parse((const char *)text, len, &v, jerr, sizeof jerr);
    free(text);
    if (rc)
        return errmsg(err, cap, WEFT_EIO, "%s: %s", path, jerr);
    conf c = { v, path, err, cap };
    const char *arch = arch_of(v);
    if (v->type != JSON_OBJ || !arch)
        rc = errmsg(err, cap, WEFT_EIO, "%s: no \"architectures\" or \"model_type\"", path);
    else if (strcmp(arch, "gpt2") == 0)
        rc = gpt2_spec(&c, spec, sizeof spec);
    else if (strcmp(arch, "llama") == 0 || strcmp(arch, "mixtral") == 0)
        rc = llama_spec(&c, spec, sizeof spec, strcmp(arch, "mixtral") == 0);
    else
        rc = errmsg(err, cap, WEFT_ENOTSUP, "%s: architecture %s; weft reads GPT2LMHeadModel, "
                    "LlamaForCausalLM and MixtralForCausalLM", path, arch);
    json_free(v);
    if (rc == 0 && (weft_model_config_parse(spec, cfg) != 0 || weft_model_config_check(cfg)))
        rc = errmsg(err, cap, WEFT_ENOTSUP, "%s: weft cannot build this model (%s)", path, spec);
    return rc;
}

/* The shortest text that reads back as x. */
static void short_float(float x, char *buf, size_t cap)
{
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)x);
        if (strtof(buf, NULL) == x)
            return;
    }
}

int hf_config_supported(const weft_model_config *c, char *err, size_t cap)
{
    if (!c)
        return WEFT_EINVAL;
    if (c->type != WEFT_MODEL_GPT && c->type != WEFT_MODEL_LLAMA)
        return errmsg(err, cap, WEFT_ENOTSUP, "weft's MLP has no Hugging Face architecture");
    if (c->experts <= 0)
        return 0;
    if (c->type == WEFT_MODEL_GPT)
        return errmsg(err, cap, WEFT_ENOTSUP, "a GPT's GELU experts have no transformers "
                      "architecture (Mixtral's, which weft writes, are a Llama's SwiGLU)");
    if (c->router == 1)
        return errmsg(err, cap, WEFT_ENOTSUP, "router=sigmoid: Mixtral's router is a softmax "
                      "(transformers' sigmoid routers, DeepSeek-V3's, come with its own "
                      "attention and grouped selection); give router=softmax");
    if (c->moe_bias)
        return errmsg(err, cap, WEFT_ENOTSUP, "bias=%d: the balancing bias steers which experts "
                      "a token takes, and Mixtral's router has none (leaving it out would "
                      "route differently); give bias=0", c->moe_bias);
    if (c->shared > 0)
        return errmsg(err, cap, WEFT_ENOTSUP, "shared=%d: weft adds its shared experts' output "
                      "as it is, Qwen2-MoE scales its shared expert by sigmoid(shared_expert_gate "
                      "x) and adds q, k and v biases, so no transformers model computes weft's; "
                      "give shared=0", c->shared);
    return 0;
}

/* The width Mixtral's intermediate_size holds: the experts'. */
static int expert_width(const weft_model_config *c)
{
    return c->moe_ffn > 0 ? c->moe_ffn : c->ffn;
}

void hf_config_canon(weft_model_config *c)
{
    /* without shared experts the dense width is the experts' default only */
    if (c && c->type == WEFT_MODEL_LLAMA && c->experts > 0 && c->shared == 0) {
        c->ffn = expert_width(c);
        c->moe_ffn = 0;
    }
}

int hf_config_same(const weft_model_config *a, const weft_model_config *b, char *fa, char *fb,
                   size_t cap)
{
    weft_model_config x = *a, y = *b;
    hf_config_canon(&x);
    hf_config_canon(&y);
    weft_model_config_format(&x, fa, cap);
    weft_model_config_format(&y, fb, cap);
    return strcmp(fa, fb) == 0;
}

int hf_config_text(const weft_model_config *c, char *buf, size_t cap)
{
    if (!c)
        return WEFT_EINVAL;
    if (c->type == WEFT_MODEL_GPT)
        return snprintf(buf, cap,
                        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                        "  \"model_type\": \"gpt2\",\n  \"vocab_size\": %d,\n"
                        "  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
                        "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                        "  \"activation_function\": \"gelu_new\",\n"
                        "  \"layer_norm_epsilon\": 1e-05,\n  \"resid_pdrop\": 0.0,\n"
                        "  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                        "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
                        c->vocab, c->ctx, c->ctx, c->d_model, c->n_layer, c->n_head);
    if (c->type != WEFT_MODEL_LLAMA || hf_config_supported(c, NULL, 0) != 0)
        return WEFT_EINVAL;
    char theta[32], eps[32];
    short_float(c->rope_theta, theta, sizeof theta);
    short_float(c->rms_eps, eps, sizeof eps);
    if (c->experts > 0) {
        char aux[32], z[32], capf[32];
        short_float(c->aux_loss, aux, sizeof aux);
        short_float(c->z_loss, z, sizeof z);
        short_float(c->capacity, capf, sizeof capf);
        /* router_z_loss_coef and capacity_factor are weft's training keys,
         * kept so that --init-from gives back the same model; transformers
         * keeps them as attributes and never drops a token */
        return snprintf(buf, cap,
                        "{\n  \"architectures\": [\"MixtralForCausalLM\"],\n"
                        "  \"model_type\": \"mixtral\",\n  \"vocab_size\": %d,\n"
                        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                        "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
                        "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                        "  \"max_position_embeddings\": %d,\n"
                        "  \"rope_theta\": %s,\n  \"rms_norm_eps\": %s,\n"
                        "  \"hidden_act\": \"silu\",\n  \"sliding_window\": null,\n"
                        "  \"attention_dropout\": 0.0,\n  \"num_local_experts\": %d,\n"
                        "  \"num_experts_per_tok\": %d,\n  \"output_router_logits\": false,\n"
                        "  \"router_aux_loss_coef\": %s,\n  \"router_jitter_noise\": 0.0,\n"
                        "  \"router_z_loss_coef\": %s,\n  \"capacity_factor\": %s,\n"
                        "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\"\n}\n",
                        c->vocab, c->d_model, expert_width(c), c->n_layer, c->n_head,
                        c->n_kv_head, c->d_model / c->n_head, c->ctx, theta, eps, c->experts,
                        c->topk, aux, z, capf, c->tied ? "true" : "false");
    }
    return snprintf(buf, cap,
                    "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n"
                    "  \"model_type\": \"llama\",\n  \"vocab_size\": %d,\n"
                    "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
                    "  \"num_key_value_heads\": %d,\n  \"max_position_embeddings\": %d,\n"
                    "  \"rope_theta\": %s,\n  \"rms_norm_eps\": %s,\n  \"rope_scaling\": null,\n"
                    "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n"
                    "  \"mlp_bias\": false,\n  \"tie_word_embeddings\": %s,\n"
                    "  \"torch_dtype\": \"float32\"\n}\n",
                    c->vocab, c->d_model, c->ffn, c->n_layer, c->n_head, c->n_kv_head, c->ctx,
                    theta, eps, c->tied ? "true" : "false");
}
