/* The whole model's tensor table and the part of it a stage holds: which
 * tensors its chunks need, where they lie in its flat buffers, and their
 * initialisation, drawn in the whole model's order so that every layout
 * starts from the same weights. */
#include "train/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int train_spec_add(spec_list *l, const char *name, int block, int ndim, int d0, int d1,
                   init_kind init, float scale)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        model_spec *t = realloc(l->t, sizeof *t * (size_t)cap);
        if (!t)
            return WEFT_ENOMEM;
        l->t = t;
        l->cap = cap;
    }
    model_spec *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->block = block;
    t->ndim = ndim;
    t->d0 = d0;
    t->d1 = ndim > 1 ? d1 : 0;
    t->init = init;
    t->scale = scale;
    return 0;
}

void train_spec_split(spec_list *l, int split)
{
    if (l->n)
        l->t[l->n - 1].split = split;
}

int train_model_blocks(const weft_model_config *c)
{
    return c->type == WEFT_MODEL_MLP ? c->n_widths - 1 : c->n_layer + 2;
}

static int whole_table(const weft_model_config *c, spec_list *l)
{
    memset(l, 0, sizeof *l);
    int rc = c->type == WEFT_MODEL_MLP ? train_mlp_tensors(c, l)
           : c->type == WEFT_MODEL_LLAMA ? train_llama_tensors(c, l) : train_gpt_tensors(c, l);
    if (rc) {
        free(l->t);
        l->t = NULL;
    }
    return rc;
}

int train_chunk_has(const weft_model *m, int block)
{
    for (int k = 0; k < m->nchunk; k++)
        if (block >= m->chunk[k].first && block <= m->chunk[k].last)
            return 1;
    return 0;
}

/* How our part is cut from the whole: a Llama's k and v by kv heads, or
 * whole when there are fewer kv heads than ranks; the experts' weights
 * by experts over an expert group, else within each expert over the
 * tensor-parallel ranks. */
static int split_of(const weft_model *m, const model_spec *sp)
{
    int ex = sp->split == SPLIT_EXPERT_GU || sp->split == SPLIT_EXPERT_DOWN;
    if (ex && m->ep_size > 1 && m->tp_size > 1)
        return sp->split == SPLIT_EXPERT_GU ? SPLIT_EXPERT_GU_TP : SPLIT_EXPERT_COLS_TP;
    if (ex && m->ep_size > 1)
        return SPLIT_EXPERT;
    if (m->tp_size == 1)
        return SPLIT_NONE;
    if (sp->split == SPLIT_EXPERT_DOWN)
        return SPLIT_COLS;
    if (sp->split != SPLIT_KV)
        return sp->split;
    return m->cfg.n_kv_head % m->tp_size == 0 ? SPLIT_ROWS : SPLIT_NONE;
}

/* The shape of our part of a whole d0 x d1 tensor cut as split says. */
static void local_shape(const weft_model *m, const model_spec *sp, int *d0, int *d1)
{
    int T = m->tp_size;
    *d0 = sp->d0;
    *d1 = sp->d1;
    switch (split_of(m, sp)) {
    case SPLIT_EXPERT: *d0 = sp->d0 / m->ep_size; break;
    case SPLIT_EXPERT_GU_TP: *d0 = sp->d0 / T / m->ep_size; break;
    case SPLIT_EXPERT_COLS_TP: *d0 = sp->d0 / m->ep_size; *d1 = sp->d1 / T; break;
    case SPLIT_ROWS: case SPLIT_QKV: case SPLIT_EXPERT_GU: *d0 = sp->d0 / T; break;
    case SPLIT_COLS: *d1 = sp->d1 / T; break;
    case SPLIT_VOCAB: *d0 = (sp->d0 + T - 1) / T; break;
    }
}

/* A tensor cut in parts of equal rows, each part by rows over the
 * tensor-parallel ranks: qkv's three, the experts' gate and up. */
static long long parts_of(const weft_model *m, const model_tensor *t)
{
    return t->split == SPLIT_QKV ? 3 : 2LL * m->cfg.experts;
}

static int add_tensor(weft_model *m, const model_spec *sp, int global, size_t whole_offset)
{
    model_tensor *t = realloc(m->tensors, sizeof *t * (size_t)(m->ntensors + 1));
    if (!t)
        return WEFT_ENOMEM;
    m->tensors = t;
    t += m->ntensors;
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", sp->name);
    int d0, d1;
    local_shape(m, sp, &d0, &d1);
    t->global = global;
    t->info.block = sp->block;
    t->split = split_of(m, sp);
    t->wd0 = sp->d0;
    t->wd1 = sp->ndim > 1 ? sp->d1 : 1;
    t->info.offset = m->nparams;
    t->info.whole_offset = whole_offset;
    t->info.whole_numel = (size_t)t->wd0 * (size_t)t->wd1;
    t->info.ndim = sp->ndim;
    t->info.shape[0] = d0;
    t->info.shape[1] = d1;
    t->info.numel = (size_t)d0 * (sp->ndim > 1 ? (size_t)d1 : 1);
    m->nparams += t->info.numel;
    m->gmap[global] = m->ntensors++;
    return 0;
}

/* GPT's output projection is the token embedding (global tensor 0). A
 * stage with the last block but not block 0 keeps a copy of it, first in
 * its buffers: its gradient is complete only after the caller adds the
 * first stage's, and the end of the buffer is what backward finishes
 * first. */
int train_model_table(weft_model *m)
{
    spec_list l;
    int rc = whole_table(&m->cfg, &l);
    if (rc)
        return rc;
    m->nglobal = l.n;
    m->gmap = malloc(sizeof *m->gmap * (size_t)(l.n ? l.n : 1));
    if (!m->gmap) {
        free(l.t);
        return WEFT_ENOMEM;
    }
    for (int i = 0; i < l.n; i++)
        m->gmap[i] = -1;
    m->tied = -1;
    /* a GPT's output projection is always the token embedding, a Llama's when tied */
    int gpt = m->cfg.type == WEFT_MODEL_GPT || (m->cfg.type == WEFT_MODEL_LLAMA && m->cfg.tied);
    int head = m->nblocks - 1;
    int whole = train_chunk_has(m, 0) && train_chunk_has(m, head);
    size_t *at = malloc(sizeof *at * (size_t)(l.n + 1));
    if (!at) {
        free(l.t);
        return WEFT_ENOMEM;
    }
    at[0] = 0;
    for (int i = 0; i < l.n; i++)
        at[i + 1] = at[i] + (size_t)l.t[i].d0 * (l.t[i].ndim > 1 ? (size_t)l.t[i].d1 : 1);
    if (gpt && !whole && train_chunk_has(m, head)) {
        rc = add_tensor(m, &l.t[0], 0, 0);
        m->tied = 0;
    }
    for (int k = 0; k < m->nchunk && rc == 0; k++)
        for (int i = 0; i < l.n && rc == 0; i++)
            if (l.t[i].block >= m->chunk[k].first && l.t[i].block <= m->chunk[k].last)
                rc = add_tensor(m, &l.t[i], i, at[i]);
    free(at);
    if (rc == 0 && gpt && !whole && train_chunk_has(m, 0))
        m->tied = m->gmap[0];
    free(l.t);
    return rc;
}

/* Where element e of the whole tensor lies in our part, or -1 (another
 * rank's). */
static long long local_of_whole(const weft_model *m, const model_tensor *t, size_t e)
{
    int T = m->tp_size, me = t->split == SPLIT_EXPERT ? m->ep_rank : m->tp_rank;
    long long wr = (long long)(e / (size_t)t->wd1), wc = (long long)(e % (size_t)t->wd1);
    long long d0 = t->info.shape[0], d1 = t->info.ndim > 1 ? t->info.shape[1] : 1;
    long long lr = wr, lc = wc;
    switch (t->split) {
    case SPLIT_EXPERT_GU_TP: {
        long long np = parts_of(m, t), part = t->wd0 / np, per = part / T;
        long long sec = wr / part, w = wr % part, mine = np / m->ep_size;
        if (w / per != me || sec / mine != m->ep_rank)
            return -1;
        lr = (sec % mine) * per + w % per;
        break;
    }
    case SPLIT_EXPERT_COLS_TP:
        if (wr / d0 != m->ep_rank || wc / d1 != me)
            return -1;
        lr = wr % d0;
        lc = wc % d1;
        break;
    case SPLIT_ROWS: case SPLIT_VOCAB: case SPLIT_EXPERT:
        if (wr / d0 != me)
            return -1;
        lr = wr % d0;
        break;
    case SPLIT_QKV: case SPLIT_EXPERT_GU: {
        long long part = t->wd0 / parts_of(m, t), per = part / T, sec = wr / part, w = wr % part;
        if (w / per != me)
            return -1;
        lr = sec * per + w % per;
        break;
    }
    case SPLIT_COLS:
        if (wc / d1 != me)
            return -1;
        lc = wc % d1;
        break;
    }
    return lr * d1 + lc;
}

long long train_tensor_whole_elem(const weft_model *m, int j, size_t e)
{
    const model_tensor *t = &m->tensors[j];
    if (t->split == SPLIT_NONE)
        return (long long)e;
    int T = m->tp_size, me = t->split == SPLIT_EXPERT ? m->ep_rank : m->tp_rank;
    long long d0 = t->info.shape[0], d1 = t->info.ndim > 1 ? t->info.shape[1] : 1;
    long long lr = (long long)e / d1, lc = (long long)e % d1, wr = lr, wc = lc;
    switch (t->split) {
    case SPLIT_EXPERT_GU_TP: {
        long long np = parts_of(m, t), part = t->wd0 / np, per = part / T;
        wr = (m->ep_rank * (np / m->ep_size) + lr / per) * part + me * per + lr % per;
        break;
    }
    case SPLIT_EXPERT_COLS_TP:
        wr = m->ep_rank * d0 + lr;
        wc = me * d1 + lc;
        break;
    case SPLIT_ROWS: case SPLIT_VOCAB: case SPLIT_EXPERT:
        wr = me * d0 + lr;
        if (wr >= t->wd0)
            return -1; /* padding of the vocabulary */
        break;
    case SPLIT_QKV: case SPLIT_EXPERT_GU: {
        long long part = t->wd0 / parts_of(m, t), per = part / T;
        wr = (lr / per) * part + me * per + lr % per;
        break;
    }
    case SPLIT_COLS:
        wc = me * d1 + lc;
        break;
    }
    return wr * t->wd1 + wc;
}

static void skip_draws(weft_rng *r, const model_spec *sp, size_t n)
{
    /* as many draws as filling would take: normal 2, uniform 1 */
    size_t k = sp->init == INIT_NORMAL ? 2 * n : sp->init == INIT_UNIFORM ? n : 0;
    while (k--)
        weft_rng_next(r);
}

void train_model_init(weft_model *m, uint64_t seed)
{
    spec_list l;
    if (whole_table(&m->cfg, &l))
        return;
    weft_rng r;
    weft_rng_seed(&r, seed);
    for (int i = 0; i < l.n; i++) {
        const model_spec *sp = &l.t[i];
        size_t n = (size_t)sp->d0 * (sp->ndim > 1 ? (size_t)sp->d1 : 1);
        int j = m->gmap[i];
        if (j < 0) {
            skip_draws(&r, sp, n);
            continue;
        }
        const model_tensor *t = &m->tensors[j];
        float *p = m->params + t->info.offset;
        if (t->split != SPLIT_NONE)
            memset(p, 0, t->info.numel * sizeof(float)); /* vocabulary padding stays 0 */
        for (size_t k = 0; k < n; k++) {
            float v = sp->init == INIT_ZERO ? 0.0f
                    : sp->init == INIT_ONE ? 1.0f
                    : sp->init == INIT_NORMAL ? sp->scale * weft_rng_normal(&r)
                    : (2.0f * weft_rng_uniform(&r) - 1.0f) * sp->scale;
            long long at = t->split == SPLIT_NONE ? (long long)k : local_of_whole(m, t, k);
            if (at >= 0)
                p[at] = v;
        }
    }
    free(l.t);
}

int train_model_params(weft_model *m, int rc, int first, int count, int need)
{
    if (rc || !m->phook)
        return rc;
    int run = -1, len = 0;
    for (int i = first; i <= first + count && rc == 0; i++) {
        int j = i < first + count ? m->gmap[i] : -1;
        if (j >= 0 && run >= 0 && j == run + len) {
            len++;
            continue;
        }
        if (len)
            rc = m->phook(m->phook_arg, run, len, need);
        run = j;
        len = j >= 0;
    }
    return rc;
}

float *train_model_tensor_ptr(weft_model *m, float *buf, int i)
{
    return buf + m->tensors[m->gmap[i]].info.offset;
}

void train_model_grads_ready(weft_model *m, int first, int count)
{
    if (!m->hook || !m->announce)
        return;
    /* ours of the range, in runs contiguous in our buffers, but not the tied
     * copy or original */
    int run = -1, len = 0;
    for (int i = first; i < first + count; i++) {
        int j = m->gmap[i];
        if (j >= 0 && j != m->tied && run >= 0 && j == run + len) {
            len++;
            continue;
        }
        if (len)
            m->hook(m->hook_arg, run, len);
        run = j >= 0 && j != m->tied ? j : -1;
        len = run >= 0;
    }
    if (len)
        m->hook(m->hook_arg, run, len);
}
