/* The run's step: this rank's part of the global batch, forward and
 * backward in --accum micro-steps (or a pipeline's schedule), the sync
 * mode's exchange and the optimiser step, then the step's row and
 * checkpoint. --elastic wraps it: joiners are admitted before it, and a
 * failure in it is recovered from (WEFT_RUN_RECOVERED) or leaves the job
 * (WEFT_RUN_LEFT). */
#include "run/run.h"

#include "run/run_ckpt.h"
#include "run/run_config.h"
#include "run/run_elastic.h"
#include "run/run_elastic_hooks.h"
#include "run/run_memory.h"
#include "run/run_pipeline.h"
#include "run/run_ps.h"
#include "run/run_report.h"
#include "run/run_sync.h"

#include "train/moe_block.h"

#include "core/clock.h"

#include <stdlib.h>

static int load_batch(weft_run *t, weft_batch *b, long step)
{
    double t0 = clock_now();
    int rc = weft_loader_next(t->loader, b);
    t->load_s += clock_now() - t0;
    if (rc != 0)
        return run_fail(t, rc, "step %ld: %s", step, weft_strerror(rc));
    return 0;
}

/* This rank's part of the batch in --accum micro-steps (weft_zero_micro
 * zeroes the gradients on the first; only the last one's backward
 * communicates). Full sync weighs the gradient by this rank's share of the
 * global batch; the other modes step on the local mean. */
static int forward_backward(weft_run *t, const weft_batch *b, train_step *st)
{
    if (t->pl) {
        st->n = b->n;
        st->global_n = b->global_n;
        st->width = t->image ? 1 : b->x_dim;
        st->seen = b->global_n;
        double t0 = clock_now();
        int rc = pipeline_step(t->pl, t->sync.z, b, t->image, st);
        t->compute_s += clock_now() - t0;
        return rc;
    }
    int accum = t->o->accum, global_n = t->sync.ops->weigh_global ? b->global_n : b->n, rc = 0;
    st->n = b->n;
    st->global_n = b->global_n;
    st->width = t->image ? 1 : b->x_dim;
    st->seen = global_n;
    double t0 = clock_now();
    for (int k = 0; k < accum && rc == 0 && !st->skip; k++) {
        int lo = (int)((long)k * b->n / accum), hi = (int)((long)(k + 1) * b->n / accum);
        size_t xo = (size_t)lo * (size_t)b->x_dim;
        const void *x = t->image ? (const void *)(b->x + xo) : (const void *)(b->tokens + xo);
        const int32_t *y = b->y + (t->image ? (size_t)lo : xo);
        float l = 0;
        rc = weft_zero_micro(t->sync.z, hi - lo, global_n, k == accum - 1);
        if (rc == 0)
            rc = weft_model_forward(t->m, x, y, hi - lo, b->x_dim, &l);
        if (rc == 0)
            st->correct += weft_model_count_correct(t->m, y);
        if (rc == 0)
            rc = weft_model_backward(t->m);
        st->loss += l * (float)(hi - lo) / (float)global_n;
    }
    t->compute_s += clock_now() - t0;
    return rc;
}

/* Full sync's replicas are one model, so the experts' balancing bias
 * steps from the step's loads summed over them: the data-parallel group
 * (with --ep its expert groups, under a pipeline the stage's replicas for
 * the stage's layers; not the tensor group, whose ranks route the same
 * rows), once a step from all its micro-batches, a lone process's run
 * likewise. The other modes' replicas differ on purpose and step their
 * own at each backward; so does --elastic, whose group changes under a
 * step. The model keeps the choice: it is made once, at the run's first
 * step. */
static void moe_share(weft_run *t)
{
    if (t->sync.cfg.mode == WEFT_SYNC_FULL && !t->o->elastic)
        train_moe_share(t->m);
}

/* The step's loads on their way to every replica: *ld the buffer (freed
 * by moe_bias_step), *req the sum. */
static int moe_loads_launch(weft_run *t, int64_t **ld, weft_request **req)
{
    size_t n = train_moe_shared(t->m);
    *ld = NULL;
    *req = NULL;
    if (!n)
        return 0;
    if (!(*ld = malloc(n * sizeof **ld)))
        return WEFT_ENOMEM;
    train_moe_share_take(t->m, *ld);
    /* a lone process too steps once a step, from all its micro-batches */
    return t->comm ? weft_iallreduce(t->comm, *ld, *ld, n, WEFT_I64, WEFT_SUM, req) : 0;
}

/* The summed loads in, the bias stepped by them (as a lone process does
 * at its backward's end: before the optimiser's step); rc: the step's. */
static int moe_bias_step(weft_run *t, int64_t *ld, weft_request *req, int rc)
{
    int wrc = req ? weft_wait(req) : 0;
    rc = rc ? rc : wrc;
    if (rc == 0 && ld)
        rc = train_moe_share_step(t->m, ld);
    free(ld);
    return rc;
}

/* The elastic outcomes as weft_run_step's (step: where the run goes on). */
static int outcome(weft_run *t, int er, long step)
{
    t->prefetched = 0;
    t->next = step;
    if (er == ELASTIC_LEFT) {
        t->left = 1; /* its replica is gone: the others finish the run */
        return WEFT_RUN_LEFT;
    }
    if (er == ELASTIC_REJOIN) {
        t->left = 1;
        return WEFT_RUN_REJOIN;
    }
    return WEFT_RUN_RECOVERED;
}

/* Forward, backward, the exchange and the optimiser step; the next
 * batch loaded while the gradients travel where the mode allows. */
static int step_body(weft_run *t, long step, train_step *st, int saving, double *lr,
                     int *fatal)
{
    const opts *o = t->o;
    int64_t *ld = NULL;
    weft_request *lreq = NULL;
    int rc = sync_begin(&t->sync, &st->skip);
    if (rc == 0 && !st->skip)
        straggle(o, step, t->rank, t->world);
    if (step == t->start_step)
        moe_share(t); /* before the first backward, which would step the bias */
    if (rc == 0)
        rc = forward_backward(t, &t->b, st);
    if (rc == 0)
        rc = moe_loads_launch(t, &ld, &lreq);
    if (rc == 0)
        rc = sync_launch(&t->sync, st);
    /* While full sync (or hier's inside a cluster) reduces the gradients,
     * the next batch: the one piece of the next step that does not depend
     * on them. Not before a checkpoint, which records the loader's place. */
    if (rc == 0 && (t->sync.shared || t->sync.prefetch) && step + 1 < t->end && !saving) {
        if ((rc = load_batch(t, &t->b, step + 1)) != 0) {
            *fatal = 1; /* the data, not a peer: nothing to recover from */
            return moe_bias_step(t, ld, lreq, rc);
        }
        t->prefetched = 1;
    }
    rc = moe_bias_step(t, ld, lreq, rc);
    *lr = weft_lr_at(&t->sched, weft_optim_steps(t->opt));
    if (rc == 0)
        rc = sync_step(&t->sync, st, (float)*lr);
    if (rc == 0)
        rc = elastic_step_done(t, step);
    return rc;
}

int run_train_step(weft_run *t)
{
    const opts *o = t->o;
    long step = t->next;
    train_step st = { .gnorm = -1, .bubble = -1 };
    int eb = elastic_boundary(t, &step); /* joiners came in, or a rank went */
    if (eb < 0)
        return eb;
    if (eb != ELASTIC_NONE && eb != ELASTIC_RELOAD)
        return outcome(t, eb, step);
    if (eb == ELASTIC_RELOAD)
        t->prefetched = 0;
    t->next = step;
    int rc = t->prefetched ? 0 : load_batch(t, &t->b, step);
    t->prefetched = 0;
    if (rc == 0)
        rc = elastic_trace(t, step, &t->b);
    if (rc != 0)
        return rc;
    st.epoch = (double)weft_loader_position(t->loader) / (double)t->d->ti.n;
    int saving = o->save[0] && o->save_every > 0 && (step + 1) % o->save_every == 0;
    double lr = 0;
    int fatal = 0;
    rc = step_body(t, step, &st, saving, &lr, &fatal);
    if (rc != 0 && !fatal) {
        /* --elastic: the survivors go on from the step they agree on */
        int er = elastic_recover(t, &step, rc);
        if (er < 0)
            return er;
        if (er == ELASTIC_NONE)
            return run_step_failed(t, step, rc);
        return outcome(t, er, step);
    }
    if (rc != 0)
        return rc;
    t->last = st;
    t->last_lr = lr;
    if ((rc = report_step(t, &t->pg, step, &st, lr)) != 0 ||
        (rc = memory_check_step(t, step)) != 0)
        return rc;
    if (saving && (rc = ckpt_save_every(t, o->save, step + 1)) != 0)
        return rc;
    t->next = step + 1;
    return 0;
}

int weft_run_step(weft_run *t)
{
    if (!t)
        return WEFT_EINVAL;
    if (t->broken)
        return t->code ? t->code : WEFT_EINVAL;
    if (t->left)
        return WEFT_RUN_LEFT;
    if (t->finished)
        return WEFT_RUN_DONE;
    /* a failure recorded in a step recovered from is not the run's */
    t->code = 0;
    t->err[0] = 0;
    int rc;
    if (t->ps) {
        rc = ps_step(t);
    } else if (t->next >= t->end) {
        t->done = 1;
        rc = WEFT_RUN_DONE;
    } else {
        rc = run_train_step(t);
    }
    if (rc < 0) {
        t->broken = 1;
        run_fail(t, rc, "%s", weft_strerror(rc));
    }
    return rc;
}
