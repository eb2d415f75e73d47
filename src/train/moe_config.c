/* The mixture-of-experts keys of a Llama config ("experts=8,topk=2,..."):
 * parsed, written back and checked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/moe.h"

int train_moe_parse_key(const char **sp, weft_model_config *c)
{
    static const char *const keys[] = { "experts=", "topk=", "moe_ffn=", "shared=", "bias=",
                                        "capacity=", "aux=", "zloss=" };
    enum { NKEYS = 8, FLOATS = 5 };
    int32_t *ints[] = { &c->experts, &c->topk, &c->moe_ffn, &c->shared, &c->moe_bias };
    float *floats[] = { &c->capacity, &c->aux_loss, &c->z_loss };
    const char *s = *sp;
    if (strncmp(s, "router=", 7) == 0) {
        s += 7;
        size_t n = strcspn(s, ",");
        if (n == 7 && strncmp(s, "softmax", 7) == 0)
            c->router = 0;
        else if (n == 7 && strncmp(s, "sigmoid", 7) == 0)
            c->router = 1;
        else
            return WEFT_EINVAL;
        *sp = s + n;
        return 0;
    }
    int k;
    for (k = 0; k < NKEYS; k++)
        if (strncmp(s, keys[k], strlen(keys[k])) == 0)
            break;
    if (k == NKEYS)
        return WEFT_EINVAL;
    s += strlen(keys[k]);
    char *end;
    if (k >= FLOATS) {
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || v < 0 || v > 1e6)
            return WEFT_EINVAL;
        *floats[k - FLOATS] = (float)v;
    } else {
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > (1L << 20))
            return WEFT_EINVAL;
        *ints[k] = (int32_t)v;
    }
    *sp = end;
    return 0;
}

/* The fewest digits that read back as the same float ("1.1", not
 * "1.10000002"). */
static void short_float(char *buf, size_t len, float v)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, len, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v)
            return;
    }
}

int train_moe_format(const weft_model_config *c, char *buf, size_t len)
{
    if (c->experts <= 0)
        return snprintf(buf, len, "%s", "");
    char cap[32], aux[32], z[32];
    short_float(cap, sizeof cap, c->capacity);
    short_float(aux, sizeof aux, c->aux_loss);
    short_float(z, sizeof z, c->z_loss);
    return snprintf(buf, len, ",experts=%d,topk=%d,moe_ffn=%d,shared=%d,router=%s,bias=%d,"
                    "capacity=%s,aux=%s,zloss=%s", c->experts, c->topk, c->moe_ffn, c->shared,
                    c->router ? "sigmoid" : "softmax", c->moe_bias, cap, aux, z);
}

int train_moe_check(const weft_model_config *c)
{
    if (c->experts == 0)   /* a dense MLP: no expert key may be set */
        return c->topk || c->moe_ffn || c->shared || c->router || c->moe_bias ||
                       c->capacity != 0.0f || c->aux_loss != 0.0f || c->z_loss != 0.0f
                   ? WEFT_EINVAL : 0;
    if (c->experts < 1 || c->experts > 4096 || c->topk < 1 || c->topk > c->experts ||
        c->moe_ffn < 0 || c->moe_ffn > (1 << 20) || c->shared < 0 || c->shared > 64 ||
        (c->router != 0 && c->router != 1) || c->moe_bias < 0 ||
        c->moe_bias > MOE_BIAS_PROPORTIONAL)
        return WEFT_EINVAL;
    if (!(c->capacity >= 0.0f) || !(c->capacity <= 1e6f) || !(c->aux_loss >= 0.0f) ||
        !(c->aux_loss <= 1e6f) || !(c->z_loss >= 0.0f) || !(c->z_loss <= 1e6f))
        return WEFT_EINVAL;
    return 0;
}

int train_moe_check_gpt(const weft_model_config *c)
{
    int rc = train_moe_check(c);
    /* the GPT block's experts are GELU MLPs without biases; shared experts
     * (a dense MLP beside them) are the Llama's alone */
    return rc ? rc : c->shared ? WEFT_EINVAL : 0;
}

int train_moe_tp_fits(const weft_model_config *c, int tp)
{
    if (c->experts <= 0)
        return 1;
    int gpt = c->type == WEFT_MODEL_GPT;
    int F = c->moe_ffn > 0 ? c->moe_ffn : gpt ? 4 * c->d_model : c->ffn;
    /* a GELU expert's rows are cut as two halves of F/2 (moe_experts.c) */
    return F % (gpt ? 2 * tp : tp) == 0;
}
