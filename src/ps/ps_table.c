/* The chunks a server owns: a hash table keyed by (tensor key, chunk
 * index), each chunk with its parameters and its own optimiser state. */
#include "ps/ps_server.h"

#include <stdlib.h>
#include <string.h>

static size_t slot(const ps_server *sv, uint32_t key, uint32_t idx)
{
    uint64_t h = ((uint64_t)key << 32 | idx) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20) % sv->nbuckets;
}

ps_chunk *ps_table_find(ps_server *sv, uint32_t key, uint32_t idx)
{
    for (ps_chunk *c = sv->bucket[slot(sv, key, idx)]; c; c = c->hnext)
        if (c->key == key && c->idx == idx)
            return c;
    return NULL;
}

static void chunk_free(ps_chunk *c)
{
    weft_optim_destroy(c->opt);
    free(c->param);
    free(c->acc);
    free(c->push_id);
    free(c->push_gen);
    free(c->seq);
    free(c->dseq);
    free(c);
}

int ps_table_add(weft_ps *ps, uint32_t key, uint32_t idx, uint64_t total, size_t n,
              const float *values, ps_chunk **out)
{
    ps_server *sv = ps->srvst;
    ps_chunk *c = calloc(1, sizeof *c);
    int rc;
    if (!c)
        return WEFT_ENOMEM;
    c->key = key;
    c->idx = idx;
    c->n = n;
    c->total = total;
    c->param = malloc(n * sizeof(float));
    c->acc = ps->cfg.consistency == WEFT_PS_BSP ? calloc(n, sizeof(float)) : NULL;
    c->push_id = calloc((size_t)ps->nworkers, sizeof *c->push_id);
    c->push_gen = calloc((size_t)ps->nworkers, sizeof *c->push_gen);
    c->seq = calloc((size_t)ps->nworkers, sizeof *c->seq);
    c->dseq = calloc((size_t)ps->nworkers, sizeof *c->dseq);
    if (!c->param || !c->push_id || !c->push_gen || !c->seq || !c->dseq ||
        (ps->cfg.consistency == WEFT_PS_BSP && !c->acc)) {
        chunk_free(c);
        return WEFT_ENOMEM;
    }
    if ((rc = weft_optim_create(&c->opt, &ps->cfg.optim, 0, n))) {
        chunk_free(c);
        return rc;
    }
    memcpy(c->param, values, n * sizeof(float));
    size_t h = slot(sv, key, idx);
    c->hnext = sv->bucket[h];
    sv->bucket[h] = c;
    sv->nchunks++;
    *out = c;
    return 0;
}

int ps_table_apply(ps_chunk *c, const float *grad, float lr)
{
    int rc = weft_optim_step(c->opt, c->param, grad, lr);
    if (!rc)
        c->version++;
    return rc;
}

static int cmp(const void *a, const void *b)
{
    const ps_chunk *x = *(ps_chunk *const *)a, *y = *(ps_chunk *const *)b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

void ps_table_list(ps_server *sv, ps_chunk **out)
{
    size_t k = 0;
    for (size_t b = 0; b < sv->nbuckets; b++)
        for (ps_chunk *c = sv->bucket[b]; c; c = c->hnext)
            out[k++] = c;
    qsort(out, k, sizeof *out, cmp);
}

void ps_table_free(ps_server *sv)
{
    for (size_t b = 0; sv->bucket && b < sv->nbuckets; b++) {
        ps_chunk *c = sv->bucket[b], *next;
        for (; c; c = next) {
            next = c->hnext;
            chunk_free(c);
        }
    }
    free(sv->bucket);
    sv->bucket = NULL;
    sv->nchunks = 0;
}
