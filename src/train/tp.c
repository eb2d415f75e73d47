/* Tensor parallelism's own pieces (Megatron-LM's): the group's collectives
 * (counted, for the per-step report), the token embedding cut by
 * vocabulary, and the cross-entropy over logits that no rank holds whole:
 * one float per row three times (the row's maximum; its sum of
 * exponentials and the target's logit, which share one all-reduce)
 * instead of gathering the logits. */
#include "train/attention_cp.h"
#include "train/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int train_tp_allreduce(weft_model *m, float *buf, size_t n, weft_op op)
{
    if (m->tp_size == 1)
        return 0;
    if (!m->tp)
        return WEFT_EINVAL;
    m->tp_calls++;
    m->tp_bytes += n * sizeof(float);
    return weft_allreduce(m->tp, buf, buf, n, WEFT_F32, op);
}

int train_tp_allgather(weft_model *m, const float *mine, float *full, size_t n)
{
    if (!m->tp)
        return WEFT_EINVAL;
    m->tp_calls++;
    m->tp_bytes += n * sizeof(float) * (size_t)m->tp_size;
    return weft_allgather(m->tp, mine, full, n, WEFT_F32);
}

int train_tp_reduce_scatter(weft_model *m, const float *full, float *mine, size_t n)
{
    if (!m->tp)
        return WEFT_EINVAL;
    m->tp_calls++;
    m->tp_bytes += n * sizeof(float) * (size_t)m->tp_size;
    return weft_reduce_scatter(m->tp, full, mine, n, WEFT_F32, WEFT_SUM);
}

int train_mlp_layer_kind(const weft_model *m, int l)
{
    int L = m->cfg.n_widths - 1;
    if (m->tp_size == 1)
        return 0;
    if (l % 2 == 1)
        return 2;
    return l + 1 < L ? 1 : 0;
}

int train_tp_vocab_rows(const weft_model *m)
{
    return (m->cfg.vocab + m->tp_size - 1) / m->tp_size;
}

void train_add_bias(float *out, const float *b, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * n;
        for (int j = 0; j < n; j++)
            o[j] += b[j];
    }
}

/* Row t of T's place in the whole sequence: under context parallelism
 * this rank's rows are two chunks of it (attention_cp.h). */
static int position(const weft_model *m, int t, int T)
{
    return m->cp ? train_cp_pos(train_attn_cp_rank(m->cp), train_attn_cp_size(m->cp), T, t) : t;
}

/* Each rank adds the rows of its own words (rank 0 the positions too);
 * the sum over the group is every token's embedding, exactly: one term is
 * not zero, or two (a word of rank 0's), and adding zeros changes nothing. */
void train_tp_embedding_forward(weft_model *m, float *out, const int32_t *tok, const float *wte,
                                const float *wpe, int B, int T, int C)
{
    int V = train_tp_vocab_rows(m), lo = m->tp_rank * V;
    for (int bt = 0; bt < B * T; bt++) {
        float *o = out + (size_t)bt * C;
        int w = tok[bt] - lo;
        const float *pe = wpe + (size_t)position(m, bt % T, T) * C;
        if (w >= 0 && w < V) {
            const float *te = wte + (size_t)w * C;
            for (int i = 0; i < C; i++)
                o[i] = m->tp_rank == 0 ? te[i] + pe[i] : te[i];
        } else if (m->tp_rank == 0) {
            memcpy(o, pe, sizeof(float) * (size_t)C);
        } else {
            memset(o, 0, sizeof(float) * (size_t)C);
        }
    }
}

/* The positions' gradient is replicated (every rank has the whole dout),
 * the words' only for this rank's words. */
void train_tp_embedding_backward(const weft_model *m, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tok, int B, int T, int C)
{
    int V = train_tp_vocab_rows(m), lo = m->tp_rank * V;
    for (int bt = 0; bt < B * T; bt++) {
        const float *d = dout + (size_t)bt * C;
        float *pe = dwpe + (size_t)position(m, bt % T, T) * C;
        int w = tok[bt] - lo;
        if (w >= 0 && w < V) {
            float *te = dwte + (size_t)w * C;
            for (int i = 0; i < C; i++)
                te[i] += d[i];
        }
        for (int i = 0; i < C; i++)
            pe[i] += d[i];
    }
}

/* Columns of our part that are words (the last parts may hold padding). */
static int real_cols(const weft_model *m)
{
    int V = train_tp_vocab_rows(m), lo = m->tp_rank * V, n = m->cfg.vocab - lo;
    return n < 0 ? 0 : n < V ? n : V;
}

double train_tp_xent_forward(weft_model *m, float *probs, const float *logits,
                             const int32_t *targets, int rows, int *count)
{
    int V = train_tp_vocab_rows(m), lo = m->tp_rank * V, n = real_cols(m);
    float *red = calloc((size_t)rows * 2 + 1, sizeof(float));
    if (!red)
        return NAN;
    float *mx = red, *tz = red + rows;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * V;
        float v = -INFINITY;
        for (int i = 0; i < n; i++)
            v = z[i] > v ? z[i] : v;
        mx[r] = v;
    }
    int rc = train_tp_allreduce(m, mx, (size_t)rows, WEFT_MAX);
    /* then each row's sum of exponentials (in mx's place: the maximum is
     * used up by then) and its target's shifted logit, one all-reduce */
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * V;
        float *p = probs + (size_t)r * V;
        double s = 0;
        for (int i = 0; i < n; i++) {
            p[i] = expf(z[i] - mx[r]);
            s += p[i];
        }
        for (int i = n; i < V; i++)
            p[i] = 0;
        int t = targets ? targets[r] - lo : -1;
        tz[r] = t >= 0 && t < n ? z[t] - mx[r] : 0;
        red[r] = (float)s;
    }
    if (rc == 0)
        rc = train_tp_allreduce(m, red, (size_t)rows * 2, WEFT_SUM);
    double loss = 0;
    int cnt = 0;
    for (int r = 0; r < rows; r++) {
        float *p = probs + (size_t)r * V;
        float inv = (float)(1.0 / (double)red[r]);
        for (int i = 0; i < n; i++)
            p[i] *= inv;
        if (targets && targets[r] >= 0) {
            loss += log((double)red[r]) - (double)tz[r];
            cnt++;
        }
    }
    free(red);
    if (count)
        *count = cnt;
    return rc ? NAN : loss;
}

void train_tp_xent_backward(const weft_model *m, float *dlogits, const float *probs,
                            const int32_t *targets, int rows, float scale)
{
    int V = train_tp_vocab_rows(m), lo = m->tp_rank * V;
    for (int r = 0; r < rows; r++) {
        const float *p = probs + (size_t)r * V;
        float *d = dlogits + (size_t)r * V;
        int t = targets[r];
        if (t < 0) {
            memset(d, 0, sizeof(float) * (size_t)V);
            continue;
        }
        for (int i = 0; i < V; i++)
            d[i] = p[i] * scale;
        if (t - lo >= 0 && t - lo < V)
            d[t - lo] -= scale;
    }
}

/* The argmax over all parts: the largest logit, then the first word that
 * has it (as the whole model's count takes the first). */
int train_tp_count_correct(weft_model *m, const float *logits, const int32_t *targets, int rows)
{
    int V = train_tp_vocab_rows(m), lo = m->tp_rank * V, n = real_cols(m);
    float *best = calloc((size_t)rows * 2 + 1, sizeof(float));
    if (!best)
        return WEFT_ENOMEM;
    float *idx = best + rows;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * V;
        float v = -INFINITY;
        for (int i = 0; i < n; i++)
            v = z[i] > v ? z[i] : v;
        best[r] = v;
    }
    int rc = train_tp_allreduce(m, best, (size_t)rows, WEFT_MAX);
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * V;
        idx[r] = INFINITY;
        for (int i = 0; i < n; i++)
            if (z[i] == best[r]) {
                idx[r] = (float)(lo + i);
                break;
            }
    }
    if (rc == 0)
        rc = train_tp_allreduce(m, idx, (size_t)rows, WEFT_MIN);
    int ok = 0;
    for (int r = 0; r < rows; r++)
        ok += targets[r] >= 0 && idx[r] == (float)targets[r];
    free(best);
    return rc ? rc : ok;
}
