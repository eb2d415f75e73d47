/* A model's mixture-of-experts blocks (moe_block.h): the parts the GPT
 * and the Llama share around the layer itself (moe.c). */
#include "train/moe_block.h"

#include <stdio.h>
#include <string.h>

/* The aux-loss-free bias's step: bias=1 DeepSeek-V3's gamma, each bias
 * moved by it every step; bias=2 the step at a load off the mean by all
 * of the mean, so 1e-3 (bias=1's) at 10% off, more when far off (a
 * router that collapsed onto few experts), less near balance. */
#define MOE_BIAS_RATE 1e-3f
#define MOE_BIAS_PROP_RATE 1e-2f
#define MOE_BIAS_NAME "blocks.%d.mlp.router.bias"

/* The bias (tensor ix) moved by the step's loads. */
static int bias_step(weft_model *m, int ix, const int64_t *ld)
{
    const weft_model_config *c = &m->cfg;
    int rc = train_model_params(m, 0, ix, 1, 1);
    if (rc == 0)
        train_moe_bias_update(train_model_tensor_ptr(m, m->params, ix), ld, c->experts,
                              c->moe_bias, c->moe_bias == MOE_BIAS_PROPORTIONAL
                                               ? MOE_BIAS_PROP_RATE : MOE_BIAS_RATE);
    return train_model_params(m, rc, ix, 1, 0);
}

/* Block l's bias in the whole model's table (its name is
 * train_moe_tensors's), -1 where this model does not hold it. */
static int bias_of(const weft_model *m, int l)
{
    char name[MODEL_NAME_MAX];
    snprintf(name, sizeof name, MOE_BIAS_NAME, l);
    for (int i = 0; i < m->nglobal; i++)
        if (m->gmap[i] >= 0 && strcmp(m->tensors[m->gmap[i]].name, name) == 0)
            return i;
    return -1;
}

int train_moe_expert_ffn(const weft_model_config *c)
{
    if (c->moe_ffn > 0)
        return c->moe_ffn;
    return c->type == WEFT_MODEL_GPT ? 4 * c->d_model : c->ffn;
}

size_t train_moe_book_bytes(const weft_model_config *c)
{
    size_t L = (size_t)c->n_layer, E = c->experts > 0 ? (size_t)c->experts : 0;
    return E ? sizeof(int64_t) * (3 * L * E + 4 * L) + sizeof(double) * 2 * L : 0;
}

void train_moe_book_at(moe_book *b, const weft_model_config *c, void *p)
{
    size_t L = (size_t)c->n_layer, E = (size_t)c->experts;
    b->load = p;
    b->last_load = b->load + L * E;
    b->routed = b->last_load + L * E;
    b->dropped = b->routed + L;
    b->last_routed = b->dropped + L;
    b->last_dropped = b->last_routed + L;
    b->pending = b->last_dropped + L;
    b->aux = (double *)(b->pending + L * E);
    b->z = b->aux + L;
}

int train_moe_tensors(const weft_model_config *c, spec_list *l, int k, float proj_sd)
{
    int D = c->d_model, E = c->experts, F = train_moe_expert_ffn(c);
    int gpt = c->type == WEFT_MODEL_GPT;
    char name[MODEL_NAME_MAX];
    snprintf(name, sizeof name, "blocks.%d.mlp.router.weight", k);
    int rc = train_spec_add(l, name, 1 + k, 2, E, D, INIT_NORMAL, 0.02f);
    snprintf(name, sizeof name, "blocks.%d.mlp.experts.%s.weight", k, gpt ? "fc" : "gate_up");
    rc = rc ? rc : train_spec_add(l, name, 1 + k, 2, E * (gpt ? F : 2 * F), D, INIT_NORMAL,
                                  0.02f);
    train_spec_split(l, SPLIT_EXPERT_GU);
    snprintf(name, sizeof name, "blocks.%d.mlp.experts.%s.weight", k, gpt ? "proj" : "down");
    rc = rc ? rc : train_spec_add(l, name, 1 + k, 2, E * (gpt ? F : D), gpt ? D : F,
                                  INIT_NORMAL, proj_sd);
    train_spec_split(l, gpt ? SPLIT_EXPERT_GU : SPLIT_EXPERT_DOWN);
    snprintf(name, sizeof name, MOE_BIAS_NAME, k);
    if (c->moe_bias)
        rc = rc ? rc : train_spec_add(l, name, 1 + k, 1, E, 0, INIT_ZERO, 0);
    return rc;
}

moe_dims train_moe_dims_of(const weft_model *m, int N)
{
    const weft_model_config *c = &m->cfg;
    moe_dims md = { N, c->d_model, c->experts, c->topk, train_moe_expert_ffn(c) / m->tp_size,
                    train_moe_capacity(N, c->topk, c->experts, c->capacity), c->router == 1,
                    c->aux_loss, c->z_loss, m->ep, c->type == WEFT_MODEL_GPT };
    return md;
}

int train_moe_block_forward(weft_model *m, int l, int rix, moe_acts *mo, float *out,
                            const float *x)
{
    const weft_model_config *c = &m->cfg;
    moe_book *k = m->s->arch;
    moe_dims md = train_moe_dims_of(m, m->s->B * m->s->T);
    moe_count cnt;
    float *P = m->params;
#define W(j) train_model_tensor_ptr(m, P, rix + (j))
    int rc = train_moe_forward(m->mm, &md, mo, out, x, W(0), c->moe_bias ? W(3) : NULL, W(1),
                               W(2), k->replay ? NULL : k->load + (size_t)l * c->experts, &cnt);
#undef W
    if (!k->replay) {
        k->routed[l] += cnt.routed;
        k->dropped[l] += cnt.dropped;
    }
    k->aux[l] = cnt.aux;
    k->z[l] = cnt.z;
    return rc;
}

int train_moe_block_step_end(weft_model *m, int l, int rix)
{
    const weft_model_config *c = &m->cfg;
    if (c->experts <= 0 || !m->announce)
        return 0;
    int E = c->experts;
    model_chunk *ck = m->ck;
    moe_book *cur = m->s->arch;
    int64_t *ld = cur->last_load + (size_t)l * E, routed = 0, dropped = 0;
    memset(ld, 0, sizeof(int64_t) * (size_t)E);
    for (int i = 0; i < ck->nslot; i++) {
        moe_book *x = ck->slot[i].arch;
        if (!x)
            continue;
        for (int e = 0; e < E; e++) {
            ld[e] += x->load[(size_t)l * E + e];
            x->load[(size_t)l * E + e] = 0;
        }
        routed += x->routed[l];
        dropped += x->dropped[l];
        x->routed[l] = x->dropped[l] = 0;
    }
    for (int i = 0; i < ck->nslot; i++) {
        moe_book *x = ck->slot[i].arch;
        if (!x)
            continue;
        memcpy(x->last_load + (size_t)l * E, ld, sizeof(int64_t) * (size_t)E);
        x->last_routed[l] = routed;
        x->last_dropped[l] = dropped;
        x->stepped = 1;
    }
    if (!c->moe_bias)
        return 0;
    if (m->moe_shared) {
        /* the run steps the bias from the loads of all its replicas */
        for (int i = 0; i < ck->nslot; i++) {
            moe_book *x = ck->slot[i].arch;
            for (int e = 0; x && e < E; e++)
                x->pending[(size_t)l * E + e] += ld[e];
        }
        return 0;
    }
    return bias_step(m, rix + 3, ld);
}

size_t train_moe_share(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    if (c->type == WEFT_MODEL_MLP || c->experts <= 0 || !c->moe_bias)
        return 0;
    m->moe_shared = 1;
    return train_moe_shared(m);
}

size_t train_moe_shared(const weft_model *m)
{
    return m->moe_shared ? (size_t)m->cfg.n_layer * (size_t)m->cfg.experts : 0;
}

/* The chunk's first book and its layers lo..hi. */
static moe_book *chunk_book(const weft_model *m, const model_chunk *ck, int *lo, int *hi)
{
    int L = m->cfg.n_layer;
    *lo = ck->first > 1 ? ck->first - 1 : 0;
    *hi = ck->last < L ? ck->last - 1 : L - 1;
    for (int i = 0; i < ck->nslot; i++)
        if (ck->slot[i].arch)
            return ck->slot[i].arch;
    return NULL;
}

void train_moe_share_take(weft_model *m, int64_t *load)
{
    size_t E = (size_t)m->cfg.experts;
    memset(load, 0, sizeof(int64_t) * E * (size_t)m->cfg.n_layer);
    for (int k = 0; k < m->nchunk; k++) {
        const model_chunk *ck = &m->chunk[k];
        int lo, hi;
        const moe_book *a = chunk_book(m, ck, &lo, &hi);
        if (a && hi >= lo)
            memcpy(load + (size_t)lo * E, a->pending + (size_t)lo * E,
                   sizeof(int64_t) * E * (size_t)(hi - lo + 1));
        for (int i = 0; i < ck->nslot; i++) {
            moe_book *x = ck->slot[i].arch;
            if (x && hi >= lo)
                memset(x->pending + (size_t)lo * E, 0, sizeof(int64_t) * E * (size_t)(hi - lo + 1));
        }
    }
}

int train_moe_share_step(weft_model *m, const int64_t *load)
{
    int rc = 0;
    size_t E = (size_t)m->cfg.experts;
    for (int k = 0; k < m->nchunk && rc == 0; k++) {
        const model_chunk *ck = &m->chunk[k];
        int lo, hi;
        const moe_book *a = chunk_book(m, ck, &lo, &hi);
        for (int l = lo; a && l <= hi && rc == 0; l++) {
            int ix = bias_of(m, l);
            if (ix >= 0)
                rc = bias_step(m, ix, load + (size_t)l * E);
            /* the counters report what the bias stepped from */
            for (int i = 0; i < ck->nslot; i++) {
                moe_book *x = ck->slot[i].arch;
                if (x)
                    memcpy(x->last_load + (size_t)l * E, load + (size_t)l * E,
                           sizeof(int64_t) * E);
            }
        }
    }
    return rc;
}

int weft_model_moe_stats(const weft_model *m, weft_moe_stats *out)
{
    if (!m || !out || m->cfg.type == WEFT_MODEL_MLP || m->cfg.experts <= 0)
        return WEFT_EINVAL;
    int L = m->cfg.n_layer, E = m->cfg.experts;
    double worst = -1.0;
    memset(out, 0, sizeof *out);
    for (int k = 0; k < m->nchunk; k++) {
        const model_chunk *ck = &m->chunk[k];
        const moe_book *a = NULL;
        for (int i = 0; i < ck->nslot && !a; i++)
            a = ck->slot[i].arch;
        int lo = ck->first > 1 ? ck->first - 1 : 0, hi = ck->last < L ? ck->last - 1 : L - 1;
        for (int l = lo; a && l <= hi; l++) {
            const int64_t *ld = a->last_load + (size_t)l * E;
            int64_t mx = 0, sum = 0;
            for (int e = 0; e < E; e++) {
                mx = ld[e] > mx ? ld[e] : mx;
                sum += ld[e];
            }
            double mean = (double)sum / E;
            if (a->stepped && mean > 0 && (double)mx / mean > worst) {
                worst = (double)mx / mean;
                out->load_max = (double)mx;
                out->load_mean = mean;
            }
            out->routed += a->last_routed[l];
            out->dropped += a->last_dropped[l];
            out->aux += a->aux[l];
            out->z += a->z[l];
        }
    }
    return 0;
}
