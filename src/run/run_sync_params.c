/* The modes with a whole model and optimiser per rank (weft_zero over this
 * rank alone) and a weft_sync handle that pulls the models together:
 *   local:H, diloco:H, gossip  average parameters after the step;
 *   stale:s                    applies averaged gradients s steps late;
 *   backup:b                   steps on the first N - b ranks' gradients.
 * The loss reported is this rank's own (backup: the included ranks'): a
 * collective would wait for the stragglers these modes exist to outrun. */
#include "run/run_churn.h"
#include "run/run_ckpt_sync.h"
#include "run/run_sync.h"

#include "core/clock.h"

#include <math.h>
#include <string.h>

static int params_open(train_sync *s, weft_model *m, const weft_optim_config *oc,
                       const weft_ckpt *ck)
{
    int rc = sync_zero_open(s, NULL, m, oc, ck);
    if (rc == 0)
        rc = weft_sync_create(&s->sy, s->comm, m, &s->cfg); /* rank 0's parameters */
    if (rc == 0)
        rc = ckpt_sync_restore(s, ck); /* each rank's own, where the save has them */
    return rc;
}

static void params_describe(const train_sync *s)
{
    run_say(s->run, WEFT_RUN_OUT, "data parallel: %d ranks, sync %s\n", s->world, s->o->sync);
}

/* local, gossip, stale and backup: neither a membership change nor a
 * compressor (the outer modes' or full sync's) is theirs. */
static int params_check(const opts *o, const weft_sync_config *cfg, weft_comm *comm,
                        weft_run *t)
{
    (void)cfg;
    (void)comm;
    if (o->elastic)
        return run_fail(t, WEFT_ECONFIG,
                        "--elastic takes --sync full, diloco:H or hier:full/diloco:H, not "
                        "--sync %s", o->sync);
    if (o->compress[0])
        return run_fail(t, WEFT_ECONFIG,
                        "--compress: full sync, diloco, streaming or hier, not --sync %s",
                        o->sync);
    return 0;
}

/* diloco and streaming reach here with --elastic only as streaming
 * (sync_table.h: elastic diloco is sync_churn's). */
static int outer_check(const opts *o, const weft_sync_config *cfg, weft_comm *comm,
                       weft_run *t)
{
    (void)cfg;
    (void)comm;
    if (o->elastic)
        return run_fail(t, WEFT_ENOTSUP,
                        "--elastic with --sync %s is not supported: a fragment's outer "
                        "reduction in flight when a cluster is lost would have to be undone; "
                        "take diloco:H or hier:full/diloco:H", o->sync);
    return 0;
}

/* Every rank ends with one model (diloco: after a last outer step). */
static int params_finish(train_sync *s)
{
    return weft_sync_finish(s->sy);
}

static uint64_t params_bytes(const train_sync *s)
{
    return weft_sync_bytes(s->sy);
}

/* ---- local SGD, DiLoCo, gossip -------------------------------------------- */

static int average_step(train_sync *s, train_step *st, float lr)
{
    int rc = sync_optim_step(s, lr, &st->gnorm);
    double t0 = clock_now();
    if (rc == 0)
        rc = weft_sync_after_step(s->sy);
    s->after_s += clock_now() - t0;
    return rc;
}

/* DiLoCo's inner optimiser is AdamW unless the run chose one. */
void sync_diloco_defaults(opts *o)
{
    run_opts *r = &o->r;
    if ((o->set & (1u << O_OPTIM)) || o->resume[0])
        return;
    strcpy(r->optim, "adamw");
    if (!(o->set & (1u << O_LR)))
        r->lr = 3e-3;
    if (!(o->set & (1u << O_WD)))
        r->weight_decay = 0.01;
    if (!(o->set & (1u << O_MIN_LR)))
        r->min_lr = r->lr / 10;
}

const sync_ops sync_average = {
    .accum = 1, .check = params_check,
    .open = params_open, .describe = params_describe, .step = average_step,
    .finish = params_finish, .bytes = params_bytes,
};

const sync_ops sync_diloco = {
    .accum = 1, .outer_compress = 1, .check = outer_check, .defaults = sync_diloco_defaults,
    .open = params_open, .describe = params_describe, .step = average_step,
    .finish = params_finish, .bytes = params_bytes,
};

/* ---- across clusters (hier:full/diloco:H, hier:full/streaming:H:F) ------- */

/* The sync handle splits the job by cluster; the optimiser is a weft_zero
 * over the cluster (full sync, or ZeRO 1-2, every step) and the handle
 * takes the outer steps across clusters. Gradients are each rank's local
 * mean, averaged over the cluster. */
/* A lone process runs full sync (sync_pick): nothing of hier's to refuse. */
static int hier_check(const opts *o, const weft_sync_config *cfg, weft_comm *comm,
                      weft_run *t)
{
    int rc = outer_check(o, cfg, comm, t);
    if (rc == 0 && comm && o->zero > 2)
        rc = run_fail(t, WEFT_ECONFIG,
                      "--sync %s: ZeRO 3 shards the parameters the outer step reads; take 0-2",
                      o->sync);
    return rc;
}

static int hier_open(train_sync *s, weft_model *m, const weft_optim_config *oc,
                     const weft_ckpt *ck)
{
    int rc = weft_sync_create(&s->sy, s->comm, m, &s->cfg);
    if (rc == 0)
        rc = sync_zero_open(s, weft_sync_inner_comm(s->sy), m, oc, ck);
    if (rc == 0)
        rc = ckpt_sync_restore(s, ck); /* a warning: the outer state is not saved */
    s->prefetch = 1;
    return rc;
}

static void hier_describe(const train_sync *s)
{
    weft_comm *in = weft_sync_inner_comm(s->sy);
    run_say(s->run, WEFT_RUN_OUT, "data parallel: %d ranks in %d clusters of %d, sync %s%s%s\n",
            s->world, weft_comm_cluster_count(s->comm), in ? weft_comm_size(in) : 1, s->o->sync,
            s->o->compress[0] ? ", outer gradient compressed " : "", s->o->compress);
}

const sync_ops sync_hier = {
    .zero = 1, .accum = 1, .outer_compress = 1, .check = hier_check,
    .defaults = sync_diloco_defaults,
    .open = hier_open, .describe = hier_describe, .step = average_step,
    .finish = params_finish, .bytes = params_bytes,
};

/* ---- bounded staleness ---------------------------------------------------- */

/* The optimiser steps on the average of s steps ago, once one is due. */
static int stale_step(train_sync *s, train_step *st, float lr)
{
    int ready = 1;
    int rc = weft_sync_push_grads(s->sy, (float)s->world * (float)st->n / (float)st->global_n,
                                  &ready);
    if (rc == 0 && ready)
        rc = sync_optim_step(s, lr, &st->gnorm);
    if (rc == 0)
        rc = weft_sync_after_step(s->sy);
    return rc;
}

/* The averages still in flight after the last step. */
static int stale_drain(train_sync *s, const weft_lr_schedule *lr)
{
    weft_optim *opt = weft_zero_optim(s->z);
    for (int ready = 1; ready;) {
        int rc = weft_sync_pop_grads(s->sy, &ready);
        if (rc == 0 && ready)
            rc = weft_zero_step(s->z, weft_lr_at(lr, weft_optim_steps(opt)),
                                (float)s->o->r.clip, NULL);
        if (rc != 0)
            return rc;
    }
    return 0;
}

const sync_ops sync_stale = {
    .check = params_check, .open = params_open, .describe = params_describe, .step = stale_step,
    .drain = stale_drain, .finish = params_finish, .bytes = params_bytes,
};

/* ---- backup workers ------------------------------------------------------- */

/* A late rank skips a step already decided without it. */
static int backup_begin(train_sync *s, int *skip)
{
    return weft_sync_backup_begin(s->sy, skip);
}

/* The step's gradient: the first N - b ranks'; so are its loss and count. */
static int backup_step(train_sync *s, train_step *st, float lr)
{
    float in[2] = { st->loss, (float)st->correct }, out[3];
    int rc = weft_sync_backup_grads(s->sy, st->skip ? 0 : st->n, in, out);
    if (rc == 0) {
        st->loss = out[0];
        st->correct = (int)lrintf(out[1]);
        st->seen = (int)lrintf(out[2]);
        rc = sync_optim_step(s, lr, &st->gnorm);
    }
    if (rc == 0)
        rc = weft_sync_after_step(s->sy);
    return rc;
}

const sync_ops sync_backup = {
    .check = params_check, .open = params_open, .describe = params_describe, .begin = backup_begin,
    .step = backup_step, .finish = params_finish, .bytes = params_bytes,
};
