/* Sampling text from a GPT, one token per full forward pass over the last
 * ctx tokens (no key/value cache: simple, and fast enough for small
 * models). */
#include <math.h>
#include <stdlib.h>

#include "train/model.h"

static int sample_row(const float *z, int v, float temperature, int top_k, weft_rng *rng)
{
    int best = 0;
    for (int i = 1; i < v; i++)
        if (z[i] > z[best])
            best = i;
    if (temperature <= 0.0f)
        return best;
    if (top_k <= 0 || top_k > v)
        top_k = v;
    /* threshold: the k-th largest logit, found by repeated maxima below the last */
    float thr = z[best];
    int taken = 1;
    while (taken < top_k) {
        float next = -INFINITY;
        int cnt = 0;
        for (int i = 0; i < v; i++)
            if (z[i] < thr && z[i] > next)
                next = z[i];
        if (next == -INFINITY)
            break;
        for (int i = 0; i < v; i++)
            cnt += z[i] == next;
        thr = next;
        taken += cnt;
    }
    double sum = 0.0;
    for (int i = 0; i < v; i++)
        if (z[i] >= thr)
            sum += exp((double)(z[i] - z[best]) / temperature);
    double u = weft_rng_uniform(rng) * sum, acc = 0.0;
    int last = best;
    for (int i = 0; i < v; i++)
        if (z[i] >= thr) {
            acc += exp((double)(z[i] - z[best]) / temperature);
            last = i;
            if (acc > u)
                return i;
        }
    return last;
}

int weft_sample_logits(const float *z, int v, float temperature, int top_k, weft_rng *rng)
{
    if (!z || v < 1 || (temperature > 0.0f && !rng))
        return WEFT_EINVAL;
    return sample_row(z, v, temperature, top_k, rng);
}

int weft_model_generate(weft_model *m, int32_t *tokens, int n_prompt, int n_total,
                        float temperature, int top_k, weft_rng *rng)
{
    if (!m || m->cfg.type == WEFT_MODEL_MLP || m->tp_size > 1 || !tokens || n_prompt < 1 ||
        n_total < n_prompt ||
        (temperature > 0.0f && !rng))
        return WEFT_EINVAL;
    int ctx = m->cfg.ctx;
    for (int pos = n_prompt; pos < n_total; pos++) {
        int start = pos > ctx ? pos - ctx : 0;
        int T = pos - start;
        int rc = weft_model_forward(m, tokens + start, NULL, 1, T, NULL);
        if (rc)
            return rc;
        tokens[pos] = sample_row(m->s->logits + (size_t)(T - 1) * m->s->cols, m->s->cols, temperature,
                                 top_k, rng);
    }
    return 0;
}
