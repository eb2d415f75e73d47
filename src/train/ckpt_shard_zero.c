/* What a rank owns of its ZeRO state, as pieces for its checkpoint file
 * (train/ckpt_shard.h): stage 0's whole state is every rank's, so the
 * ranks split it evenly; stages 1-3 own their part of each bucket (ZeRO-3
 * holds only those parameters between steps); divided experts (--ep)
 * are written by the first of their replicas at stages 0-1, by each
 * replica its shard of them at stages 2-3. And the resume of stages
 * 1-3 from those pieces: a rank reads only what it owns (parameters and
 * optimiser state, its own file at the saved layout) into a model made
 * untouched, then the parameters are all-gathered (stages 1-2) or left
 * to the step's gathers (stage 3). */
#include "train/ckpt_shard.h"
#include "train/model.h"
#include "train/moe_ep.h"
#include "train/moe_split.h"
#include "train/zero_full.h"
#include "train/zero_impl.h"

#include "core/clock.h"
#include "core/huge.h"

#include <stdlib.h>

/* One piece per vector of elements [lo, lo + n) of opt's range. */
static void add_range(ckpt_piece *p, int *np, const float *params, weft_optim *opt, size_t lo,
                      size_t n)
{
    size_t base, len;
    weft_optim_range(opt, &base, &len);
    p[(*np)++] = (ckpt_piece){ .vec = 0, .lo = lo, .n = n, .src = params + lo };
    for (int i = 0; i < weft_optim_state_count(opt); i++)
        p[(*np)++] = (ckpt_piece){ .vec = i + 1, .lo = lo, .n = n,
                                   .src = weft_optim_state(opt, i, NULL) + (lo - base) };
}

/* Divided experts (--ep): every holder of a rank's experts has them whole
 * (stage 0's even split of the buffer would put this rank's experts in
 * the places of the others' that the same offsets hold on them, and
 * stage 1 keeps the experts' buckets whole on each holder). So the
 * pieces leave the expert tensors out, and the first of their replicas
 * writes them, each tensor with its optimiser state: every expert once. */
static int cut_experts(weft_zero *z, ckpt_piece **out, int *np)
{
    const weft_model *m = z->model;
    int nt = weft_model_tensor_count(m), nx = 0;
    for (int i = 0; i < nt; i++)
        nx += train_moe_split_is_expert(m, i);
    weft_comm *rep = train_moe_ep_replicas(m->ep);
    int writer = !rep || weft_comm_rank(rep) == 0, per = 1 + weft_optim_state_count(
                                                                weft_zero_optim(z));
    ckpt_piece *q = calloc((size_t)*np * (size_t)(nx + 1) + (size_t)(nx * per) + 1, sizeof *q);
    if (!q)
        return WEFT_ENOMEM;
    int nq = 0;
    for (int k = 0; k < *np; k++) {
        const ckpt_piece *p = &(*out)[k];
        size_t at = p->lo, hi = p->lo + p->n;
        /* the table's tensors lie in order in the buffer */
        for (int i = 0; i < nt && at < hi; i++) {
            const model_tensor *x = &m->tensors[i];
            size_t a = x->info.offset, b = a + x->info.numel;
            if (!train_moe_split_is_expert(m, i) || b <= at || a >= hi)
                continue;
            if (a > at)
                q[nq++] = (ckpt_piece){ .vec = p->vec, .lo = at, .n = a - at,
                                        .src = p->src + (at - p->lo) };
            at = b;
        }
        if (at < hi)
            q[nq++] = (ckpt_piece){ .vec = p->vec, .lo = at, .n = hi - at,
                                    .src = p->src + (at - p->lo) };
    }
    const float *params = m->params;
    for (int i = 0; writer && i < nt; i++) {
        size_t off = m->tensors[i].info.offset, n = m->tensors[i].info.numel;
        if (!train_moe_split_is_expert(m, i))
            continue;
        q[nq++] = (ckpt_piece){ .vec = 0, .lo = off, .n = n, .src = params + off };
        for (int s = 0; s + 1 < per; s++) {
            const float *st = train_zero_state_at(z, s, off);
            if (!st) { /* a holder of these experts without their state */
                free(q);
                return WEFT_EINVAL;
            }
            q[nq++] = (ckpt_piece){ .vec = s + 1, .lo = off, .n = n, .src = st };
        }
    }
    free(*out);
    *out = q;
    *np = nq;
    return 0;
}

int ckpt_shard_zero_pieces(weft_zero *z, ckpt_piece **out, int *np)
{
    *out = NULL;
    *np = 0;
    weft_optim *any = weft_zero_optim(z);
    if (!any)
        return WEFT_EINVAL;
    int per = 1 + weft_optim_state_count(any);
    ckpt_piece *p = calloc((size_t)(z->stage == 0 ? 1 : z->nb) * (size_t)per + 1, sizeof *p);
    if (!p)
        return WEFT_ENOMEM;
    const float *params = weft_model_params(z->model, NULL);
    if (z->stage == 0) {
        int w = z->comm ? z->world : 1, r = z->comm ? z->rank : 0;
        size_t lo = z->n * (size_t)r / (size_t)w, hi = z->n * (size_t)(r + 1) / (size_t)w;
        if (hi > lo)
            add_range(p, np, params, z->opt, lo, hi - lo);
    } else {
        for (int k = 0; k < z->nb; k++)
            if (z->b[k].mcnt && z->b[k].opt)
                add_range(p, np, params, z->b[k].opt, z->b[k].mlo, z->b[k].mcnt);
    }
    *out = p;
    /* from stage 2 the experts' buckets are sharded over their replicas:
     * each rank's share of them is its own (the replicas' shards of one
     * expert are disjoint, and no other expert rank holds that expert), as
     * it is of the rest, so the pieces as cut write every element once */
    int rc = train_moe_split_size(z->model) > 1 && z->stage < 2 ? cut_experts(z, out, np) : 0;
    if (rc) {
        free(*out);
        *out = NULL;
        *np = 0;
    }
    return rc;
}

/* ---- a ZeRO resume from a rank's own shard ----------------------------- */

int ckpt_shard_zero_model(const weft_model_config *cfg, weft_model **out)
{
    int nb = weft_model_block_count(cfg);
    if (nb < 0)
        return nb;
    weft_block_range all = { 0, nb };
    return weft_model_create_stage(out, cfg, 0, &all, 1,
                                   WEFT_STAGE_NO_INIT | TRAIN_STAGE_UNTOUCHED);
}

/* Bucket b's parameters all-gathered over its group, started (as the
 * step's own gathers are: the shards in place, the last rank's tail
 * broadcast); nothing where it is not sharded. */
static int gather_start(weft_zero *z, zbucket *b)
{
    if (!b->comm || b->world == 1)
        return 0;
    return train_zero_gather_launch(z, b);
}

/* This rank's parameters of every bucket, then its optimiser state: a
 * stage 1-2 bucket's all-gather starts once its part is in, so the
 * copies from the other ranks go on while the states are read. */
static int read_own(weft_zero *z, const weft_ckpt *c)
{
    ckpt_shard_reader *r;
    int rc = ckpt_shard_reader_open(c, &r), grc = 0;
    const weft_model *m = z->model;
    float *p = weft_model_params(z->model, NULL);
    int pvec = rc == 0 ? ckpt_shard_reader_vector(r, "param") : -1;
    int count = weft_optim_state_count(weft_zero_optim(z));
    /* asked for in the order read below: what is read ahead past the page
     * cache is read in that order */
    for (int k = 0; rc == 0 && k < z->nb; k++)
        if (z->b[k].mcnt && z->b[k].opt)
            ckpt_shard_prefetch_state(r, pvec, m, z->b[k].mlo, z->b[k].mcnt);
    for (int k = 0; rc == 0 && k < z->nb; k++) {
        const zbucket *b = &z->b[k];
        if (!b->mcnt || !b->opt)
            continue;
        for (int i = 0; i < count; i++) {
            const char *sname;
            weft_optim_state(b->opt, i, &sname);
            ckpt_shard_prefetch_state(r, ckpt_shard_reader_vector(r, sname), m, b->mlo,
                                      b->mcnt);
        }
    }
    /* every rank starts every gather, read or not, so that none waits on
     * one that failed: the bytes are trusted only once all agree below */
    for (int k = 0; k < z->nb; k++) {
        zbucket *b = &z->b[k];
        if (rc == 0 && b->mcnt && b->opt)
            rc = ckpt_shard_read_state(r, pvec, m, b->mlo, b->mcnt, p + b->mlo);
        if (z->stage <= 2 && grc == 0)
            grc = gather_start(z, b);
    }
    for (int k = 0; rc == 0 && k < z->nb; k++) {
        const zbucket *b = &z->b[k];
        for (int i = 0; rc == 0 && b->mcnt && b->opt && i < count; i++) {
            const char *sname;
            float *st = weft_optim_state(b->opt, i, &sname);
            rc = ckpt_shard_read_state(r, ckpt_shard_reader_vector(r, sname), m, b->mlo,
                                       b->mcnt, st);
        }
    }
    ckpt_shard_reader_close(r);
    return rc ? rc : grc;
}

int ckpt_shard_zero_finish(weft_zero *z, const weft_ckpt *c)
{
    if (!z || !c || z->stage < 1 || ckpt_shard_own_params(c) != CKPT_OWN_PENDING)
        return WEFT_EINVAL;
    ckpt_shard_own_params_set(c, CKPT_OWN_DONE);
    float *p = weft_model_params(z->model, NULL);
    int multi = z->comm && z->world > 1;
    /* the other ranks' parameters are garbage until gathered: stage 3
     * keeps none of them (as after a step: gathered block by block when a
     * pass needs them, the rest zero pages), stages 1 and 2 gather them
     * all now, as their step's end does */
    for (int k = 0; multi && z->stage == 3 && k < z->nb; k++) {
        zbucket *b = &z->b[k];
        huge_release(p + b->lo, (b->mlo - b->lo) * sizeof *p);
        huge_release(p + b->mlo + b->mcnt, (b->lo + b->n - b->mlo - b->mcnt) * sizeof *p);
        b->state = PARAMS_RELEASED;
        b->refs = 0;
    }
    z->gathered = 0;
    int rc = read_own(z, c);
    double t0 = clock_now();
    for (int k = 0; k < z->nb; k++) {
        zbucket *b = &z->b[k];
        for (int j = 0; j < 2; j++)
            if (b->greq[j]) {
                int w = weft_wait(b->greq[j]);
                rc = rc ? rc : w;
                b->greq[j] = NULL;
            }
        if (z->stage <= 2)
            b->state = PARAMS_PRESENT;
    }
    /* every rank learns whether all read their part before any trusts the
     * others' bytes */
    int32_t bad = rc != 0, any = bad;
    int arc = multi ? weft_allreduce(z->comm, &bad, &any, 1, WEFT_I32, WEFT_MAX) : 0;
    if (arc == 0 && any)
        arc = rc ? rc : WEFT_EIO;
    z->gathered = arc == 0 && z->stage <= 2;
    ckpt_shard_phase(c, CKPT_PH_GATHER, clock_now() - t0);
    return arc;
}
