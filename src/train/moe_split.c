/* Expert memory divided (moe_split.h): the table is built again with the
 * expert group's size and rank, the stacked expert tensors then hold rows
 * rank*d0/size.. of the whole (under tensor parallelism, that block of the
 * rank's tensor-parallel cut), and every other tensor keeps its shape, so
 * the copy is one memcpy a tensor. */
#include "train/moe_split.h"

#include "train/model.h"
#include "train/moe_ep.h"

#include <stdlib.h>
#include <string.h>

/* m's table built again with the expert group's size and rank; the old
 * one in *old and *ogmap (the caller frees them), or m as it was and an
 * error. */
static int retable(weft_model *m, int size, int rank, model_tensor **old, int **ogmap)
{
    int ontensors = m->ntensors, otied = m->tied;
    size_t onparams = m->nparams;
    *old = m->tensors;
    *ogmap = m->gmap;
    m->tensors = NULL;
    m->gmap = NULL;
    m->ntensors = 0;
    m->nparams = 0;
    m->ep_size = size;
    m->ep_rank = rank;
    int rc = train_model_table(m);
    if (rc == 0 && m->ntensors != ontensors)
        rc = WEFT_EINVAL;
    if (rc) { /* as it was */
        free(m->tensors);
        free(m->gmap);
        m->tensors = *old;
        m->gmap = *ogmap;
        m->ntensors = ontensors;
        m->nparams = onparams;
        m->tied = otied;
        m->ep_size = m->ep_rank = 0;
    }
    return rc;
}

int train_moe_split(weft_model *m, int size, int rank, weft_comm *replicas)
{
    if (!m || !m->ep || size < 2 || rank < 0 || rank >= size || m->ep_size > 1 ||
        m->cfg.experts % size)
        return WEFT_EINVAL;
    model_tensor *old;
    int *ogmap, otied = m->tied;
    size_t onparams = m->nparams;
    int rc = retable(m, size, rank, &old, &ogmap);
    if (rc)
        return rc;
    float *p = train_model_vector(m->nparams), *g = train_model_vector(m->nparams);
    if (!p || !g) { /* as it was */
        free(p);
        free(g);
        free(m->tensors);
        free(m->gmap);
        m->tensors = old;
        m->gmap = ogmap;
        m->nparams = onparams;
        m->tied = otied;
        m->ep_size = m->ep_rank = 0;
        return WEFT_ENOMEM;
    }
    /* the same table in the same order: only the expert tensors' shapes
     * moved, and this rank's part of each is its block of the old one */
    for (int j = 0; j < m->ntensors; j++) {
        const model_tensor *t = &m->tensors[j], *o = &old[j];
        size_t from = SPLIT_IS_EXPERT(t->split) ? (size_t)rank * t->info.numel : 0;
        memcpy(p + t->info.offset, m->params + o->info.offset + from,
               t->info.numel * sizeof(float));
    }
    memset(g, 0, m->nparams * sizeof(float));
    free(old);
    free(ogmap);
    free(m->params);
    free(m->grads);
    free(m->w16); /* bf16 copies: laid out again at the next forward */
    m->w16 = NULL;
    m->params = p;
    m->grads = g;
    train_moe_ep_set_split(m->ep, replicas);
    return 0;
}

int train_moe_split_table(weft_model *m, int size)
{
    if (!m || size < 2 || m->ep_size > 1 || m->cfg.experts % size)
        return WEFT_EINVAL;
    model_tensor *old;
    int *ogmap;
    int rc = retable(m, size, 0, &old, &ogmap);
    if (rc == 0) {
        free(old);
        free(ogmap);
    }
    return rc;
}

void train_moe_split_rank(weft_model *m, int rank)
{
    if (m && m->ep_size > 1 && rank >= 0 && rank < m->ep_size)
        m->ep_rank = rank;
}

int train_moe_split_size(const weft_model *m)
{
    return m && m->ep_size > 1 ? m->ep_size : 1;
}

int train_moe_split_is_expert(const weft_model *m, int i)
{
    return m && i >= 0 && i < m->ntensors && m->ep_size > 1 &&
           SPLIT_IS_EXPERT(m->tensors[i].split);
}

int train_moe_grad_group(weft_model *m, int i, weft_comm **group, float *scale)
{
    if (!m || i < 0 || i >= m->ntensors || m->ep_size < 2 ||
        !SPLIT_IS_EXPERT(m->tensors[i].split))
        return 0;
    *group = train_moe_ep_replicas(m->ep);
    *scale = 1.0f / (float)m->ep_size;
    return 1;
}

int train_moe_sumsq_experts(weft_model *m, const float *g, double *ss)
{
    if (!m || m->ep_size < 2)
        return 0;
    double mine = 0.0;
    for (int i = 0; i < m->ntensors; i++)
        if (SPLIT_IS_EXPERT(m->tensors[i].split))
            mine += weft_sumsq(g + m->tensors[i].info.offset, m->tensors[i].info.numel);
    double all = mine;
    int rc = train_moe_ep_allreduce(m->ep, &all);
    if (rc == 0)
        *ss += all - mine;
    return rc;
}

int train_moe_broadcast(weft_model *m, weft_comm *c)
{
    if (!m || m->ep_size < 2)
        return 0;
    /* runs of tensors of one kind, in table order on every rank */
    int rc = 0;
    for (int i = 0; i < m->ntensors && rc == 0;) {
        int ex = SPLIT_IS_EXPERT(m->tensors[i].split), j = i;
        while (j < m->ntensors && SPLIT_IS_EXPERT(m->tensors[j].split) == ex)
            j++;
        size_t lo = m->tensors[i].info.offset;
        size_t n = m->tensors[j - 1].info.offset + m->tensors[j - 1].info.numel - lo;
        weft_comm *g = ex ? train_moe_ep_replicas(m->ep) : c;
        if (g)
            rc = weft_broadcast(g, m->params + lo, n, WEFT_F32, 0);
        i = j;
    }
    return rc ? rc : 1;
}
