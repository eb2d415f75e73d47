/* A save with the experts divided (--ep without a pipeline): job rank 0
 * assembles the whole model and optimiser, its expert group's other
 * ranks sending their experts (the first expert group holds every expert
 * once; under ZeRO 2-3 each gathers its experts' state from their
 * replicas first, a tensor at a time), so the file is the one a run without --ep writes and loads at any
 * --ep or on one process. */
#include "run/run_ep.h"

#include "run/run_ckpt_agree.h"

#include "train/model.h"
#include "train/moe_ep.h"
#include "train/zero_full.h"

#include <stdlib.h>
#include <string.h>

/* Where our tensor j's values go in the whole model's buffer: its part of
 * the stacked experts (rank q's rows), else the whole tensor. */
static float *place(weft_model *w, const weft_model *m, int j, int q, float *buf)
{
    const model_tensor *t = &m->tensors[j];
    float *at = buf + w->tensors[w->gmap[t->global]].info.offset;
    return t->split == SPLIT_EXPERT ? at + (size_t)q * t->info.numel : at;
}

/* Rank q (> 0) of the first expert group: its experts' weights, then each
 * optimiser state of them, tensor by tensor, to rank 0; each state
 * gathered from its replicas first where ZeRO 2-3 shard it over them
 * (send is NULL on their other ranks, which give their shards only). */
static int send_experts(weft_run *t, weft_comm *send, int nstate)
{
    weft_model *m = t->m;
    size_t most = 0;
    for (int j = 0; j < m->ntensors; j++)
        if (m->tensors[j].split == SPLIT_EXPERT && m->tensors[j].info.numel > most)
            most = m->tensors[j].info.numel;
    float *buf = send ? malloc((most ? most : 1) * sizeof *buf) : NULL;
    int rc = send && !buf ? WEFT_ENOMEM : 0, moved = 0;
    for (int j = 0; j < m->ntensors; j++) {
        const model_tensor *x = &m->tensors[j];
        const float *w = m->params + x->info.offset;
        if (x->split != SPLIT_EXPERT)
            continue;
        if (send && moved == 0)
            moved = weft_send(send, w, x->info.numel, WEFT_F32, 0);
        /* after a failure the replicas' gathers go on, and rank 0 is sent
         * as many values (the weights stand in for a state not gathered),
         * so that none waits; the save fails at the agreement after */
        for (int i = 0; i < nstate; i++) {
            int r = train_zero_gather_range(t->sync.z, i, x->info.offset, x->info.numel, buf);
            if (r == 0 && send && ckpt_test_fail(t, "send"))
                r = WEFT_EIO;
            rc = rc ? rc : r;
            if (send && moved == 0)
                moved = weft_send(send, rc || !buf ? w : buf, x->info.numel, WEFT_F32, 0);
        }
    }
    free(buf);
    return rc ? rc : moved;
}

/* Rank 0: its own tensors into w and wo, then every other rank's experts. */
static int assemble(weft_run *t, weft_comm *g, weft_optim *full, weft_model *w,
                    weft_optim *wo, int nstate)
{
    weft_model *m = t->m;
    for (int j = 0; j < m->ntensors; j++) {
        size_t off = m->tensors[j].info.offset, n = m->tensors[j].info.numel;
        memcpy(place(w, m, j, 0, w->params), m->params + off, n * sizeof(float));
        for (int i = 0; i < nstate; i++)
            memcpy(place(w, m, j, 0, weft_optim_state(wo, i, NULL)),
                   weft_optim_state(full, i, NULL) + off, n * sizeof(float));
    }
    int rc = 0;
    for (int q = 1; q < weft_comm_size(g) && rc == 0; q++)
        for (int j = 0; j < m->ntensors && rc == 0; j++) {
            size_t n = m->tensors[j].info.numel;
            if (m->tensors[j].split != SPLIT_EXPERT)
                continue;
            rc = weft_recv(g, place(w, m, j, q, w->params), n, WEFT_F32, q);
            for (int i = 0; i < nstate && rc == 0; i++)
                rc = weft_recv(g, place(w, m, j, q, weft_optim_state(wo, i, NULL)), n, WEFT_F32,
                               q);
        }
    return rc;
}

/* Rank 0 failed before taking the others' experts: it takes them still,
 * so that no sender waits on it. */
static void drain(weft_run *t, weft_comm *g, int nstate)
{
    size_t most = 0;
    for (int j = 0; j < t->m->ntensors; j++)
        if (t->m->tensors[j].info.numel > most)
            most = t->m->tensors[j].info.numel;
    float *sink = malloc((most ? most : 1) * sizeof *sink);
    for (int q = 1; sink && q < weft_comm_size(g); q++)
        for (int j = 0; j < t->m->ntensors; j++)
            for (int i = 0; i <= nstate && t->m->tensors[j].split == SPLIT_EXPERT; i++)
                weft_recv(g, sink, t->m->tensors[j].info.numel, WEFT_F32, q);
    free(sink);
}

int run_ep_gather(weft_run *t, weft_optim **whole_opt, weft_model **whole)
{
    *whole_opt = NULL;
    *whole = NULL;
    weft_model *m = t->m;
    if (!m || m->ep_size < 2)
        return 0;
    weft_optim *full = NULL, *wo = NULL;
    weft_model *w = NULL;
    int rc = train_zero_full_optim(t->sync.z, &full); /* collective over the job */
    if (rc == 0 && ckpt_test_fail(t, "optim"))
        rc = WEFT_EIO;
    /* a rank whose gather failed sends nothing that rank 0 would wait for:
     * every rank learns of it before any sends */
    weft_comm *job = t->job ? t->job : t->comm;
    if ((rc = ckpt_agree(job, rc)) != 0) {
        weft_optim_destroy(full);
        return rc;
    }
    int nstate = weft_optim_state_count(weft_zero_optim(t->sync.z));
    weft_comm *g = train_moe_ep_group(m->ep);
    /* the first expert group holds every expert (rank 0's own gathered
     * above); the others' replicas give their shards to it; and all agree
     * again before rank 0 writes what it took */
    if (t->rank >= m->ep_size) {
        int r = m->ep_rank != 0 ? send_experts(t, NULL, nstate) : 0;
        return (r = ckpt_agree(job, r)) ? r : 1;
    }
    if (t->rank > 0) {
        int r = send_experts(t, g, nstate);
        return (r = ckpt_agree(job, r)) ? r : 1;
    }
    if ((rc = weft_model_create(&w, &m->cfg, 0)) == 0)
        rc = weft_optim_create(&wo, weft_optim_config_of(full), 0, w->nparams);
    if (rc == 0)
        rc = weft_optim_set_steps(wo, weft_optim_steps(full));
    if (rc == 0)
        rc = assemble(t, g, full, w, wo, nstate);
    else
        drain(t, g, nstate);
    weft_optim_destroy(full);
    rc = ckpt_agree(job, rc);
    if (rc != 0) {
        weft_model_destroy(w);
        weft_optim_destroy(wo);
        return rc;
    }
    *whole = w;
    *whole_opt = wo;
    return 1;
}
