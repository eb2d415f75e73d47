/* --elastic: data-parallel training that outlives a dead rank and takes in
 * new ones (docs/TRAINING.md, "Elastic training").
 *
 * A failed step is abandoned by every survivor: they shrink the job's
 * communicator, agree on the last step that any of them completed, and
 * the first survivor that completed it hands its parameters, optimiser
 * state, step and stream position to the others (a step's all-reduce that
 * returned on one rank had every rank's gradients in it, so its result is
 * a step of the whole job). The global batch stays what it was: the
 * stream of samples is the same for every world size, so the step that
 * failed is taken again over the survivors, and every sample of an epoch
 * is still seen once. Joiners (weftrun --elastic --restarts N) are
 * admitted at a step boundary by weft_comm_grow and get the same hand-over.
 *
 * With --pp/--tp (ZeRO 0) a replica is one tp x pp group, and it is whole
 * or nothing: a death drops the dead rank's replica. Its survivors leave
 * the job; the other replicas shrink the job, build the layout's groups
 * anew over dp - 1 replicas (each keeps its stage and tensor rank, so its
 * part of the model and optimiser) and take the failed step again over
 * the same stream of samples. Each rank keeps its state as of the
 * starts of this step and the one before (a copy a step), and all go back
 * to the first step that failed anywhere: a rank whose update went
 * through before a later collective failed, or that completed the step
 * and was failed by the others' leaving in the next, takes it again with
 * the others. No rank can get further ahead: a step needs every rank of
 * the replica. */
#include "run/run_elastic.h"

#include "run/run_churn.h"
#include "run/run_elastic_churn.h"
#include "run/run_elastic_hooks.h"
#include "run/run_elastic_late.h"
#include "run/run_elastic_member.h"
#include "run/run_elastic_shares.h"
#include "run/run_pipeline.h"
#include "run/run_sync.h"

#include "core/clock.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int elastic_check(weft_run *t, const opts *o, weft_comm *comm)
{
    if (!o->elastic)
        return 0;
    if (o->ps)
        return run_fail(t, WEFT_ECONFIG,
                        "--elastic is data parallel; --mode ps has its own recovery");
    if (o->layout_auto)
        return run_fail(t, WEFT_ECONFIG,
                        "--elastic with --layout auto is not supported: give --pp/--tp (ZeRO 0)");
    int g = (o->pp > 1 ? o->pp : 1) * (o->tp > 1 ? o->tp : 1);
    if (g > 1 && o->zero > 0)
        return run_fail(t, WEFT_ECONFIG,
                        "--elastic with --pp/--tp takes --zero 0: ZeRO %d shards the state over "
                        "the replicas, and a replica lost would take its shards with it",
                        o->zero);
    if (g > 1 && comm && weft_comm_size(comm) / g < 2)
        return run_fail(t, WEFT_ECONFIG,
                        "--elastic with --tp %d --pp %d needs 2 replicas at least (%d ranks): a "
                        "death in the only one leaves nothing to go on with",
                        o->tp > 1 ? o->tp : 1, o->pp > 1 ? o->pp : 1, weft_comm_size(comm));
    int rc = sync_check(t, o, comm); /* what the sync mode cannot carry over a change */
    if (rc)
        return rc;
    if (comm && weft_comm_size(comm) > o->r.batch)
        return run_fail(t, WEFT_ECONFIG, "--elastic: %d ranks cannot share a batch of %d",
                        weft_comm_size(comm), o->r.batch);
    return 0;
}

/* The kept state and the one before change places: back to the start of
 * the step before (after keep_step). */
static void back_one(elastic_state *e)
{
    float *k = e->keep;
    int64_t steps = e->keep_steps;
    e->keep = e->prev;
    e->keep_steps = e->prev_steps;
    e->prev = k;
    e->prev_steps = steps;
}

/* --pp/--tp at a step's start: the starts of this step and the one
 * before are kept (ranks may fail a step apart). */
static int keep_step(weft_run *t)
{
    back_one(&t->el);
    return member_keep_state(t);
}

/* Every member takes the state of the first one that completed the most
 * steps (done: steps this rank completed; -1: a joiner). Sets *step. */
static int hand_over(weft_run *t, long done, long *step)
{
    weft_comm *c = t->comm;
    int64_t most = done;
    int rc, root, me;
    if ((rc = weft_allreduce(c, &most, &most, 1, WEFT_I64, WEFT_MAX)))
        return rc;
    me = done == most ? t->rank : INT_MAX;
    if ((rc = weft_allreduce(c, &me, &root, 1, WEFT_I32, WEFT_MIN)))
        return rc;
    int64_t h[6];
    member_header(t, most, weft_optim_steps(t->opt), h);
    if ((rc = weft_broadcast(c, h, 6, WEFT_I64, root)))
        return rc;
    size_t n;
    float *p = weft_model_params(t->m, &n);
    if ((rc = weft_broadcast(c, p, n, WEFT_F32, root)))
        return rc;
    for (int i = 0; i < weft_optim_state_count(t->opt); i++)
        if ((rc = weft_broadcast(c, weft_optim_state(t->opt, i, NULL), n, WEFT_F32, root)))
            return rc;
    weft_optim_set_steps(t->opt, h[1]);
    rc = member_apply_header(t, h, step);
    return rc ? rc : shares_change(t, *step);
}

/* ZeRO 1-3: full holds this rank's part of the whole state (zeros
 * elsewhere; a joiner's is all zeros), h (rank 0's counts) the step it is
 * of. The sum over the new world is the whole state; each rank keeps its
 * new shards of it, and replicates them at once (the next failure finds
 * copies in the new layout). */
static int reshard(weft_run *t, int64_t h[6], float *full, long *step)
{
    int rc = weft_broadcast(t->comm, h, 6, WEFT_I64, 0);
    if (rc == 0)
        rc = weft_allreduce(t->comm, full, full, weft_zero_full_count(t->sync.z), WEFT_F32,
                            WEFT_SUM);
    if (rc == 0)
        rc = weft_zero_import(t->sync.z, full, h[1]);
    if (rc == 0)
        rc = weft_zero_replicate(t->sync.z, h[0]);
    if (rc)
        return rc;
    t->el.gen = h[0];
    return member_apply_header(t, h, step);
}

/* A whole-state buffer of zeros for reshard. */
static int full_new(weft_run *t, float **out)
{
    *out = calloc(weft_zero_full_count(t->sync.z), sizeof **out);
    return *out ? 0 : run_fail(t, WEFT_ENOMEM, "out of memory");
}

/* ---- the entry points ---------------------------------------------------- */

/* A joiner takes the members' state: they are in their grow's hand-over,
 * after the same sync_open. */
static int join(weft_run *t, long *step)
{
    uint64_t h;
    int same, rc;
    if (t->sync.churn) {
        rc = churn_join(t, step);
    } else if (t->o->zero == 0) {
        rc = member_keep_state(t);
        if (rc == 0)
            rc = hand_over(t, -1, step);
    } else {
        int64_t hd[6] = { 0 };
        float *full;
        if ((rc = full_new(t, &full)))
            return rc;
        rc = reshard(t, hd, full, step);
        free(full);
    }
    /* a flat late joiner that the run's end overtook is in the members'
     * finish, whose own check says whether it caught up */
    if (rc == 0 && *step < t->end)
        rc = member_params_agree(t, &h, &same);
    if (rc)
        return run_fail(t, rc, "elastic: joining: %s: %s", weft_strerror(rc),
                        weft_comm_error(t->comm));
    t->el.joined_now = 1;
    if (!t->o->quiet)
        run_say(t, WEFT_RUN_OUT, "elastic: joined as rank %d of %d at step %ld\n", t->rank,
                t->world, *step);
    return 0;
}

int elastic_open(weft_run *t, long *step, int quiet, int joined)
{
    elastic_state *e = &t->el;
    const char *slot = getenv("WEFT_RANK");
    int rc = 0;
    int64_t view = e->view; /* a resume's: the saved run's changes (run_ckpt.c) */
    memset(e, 0, sizeof *e);
    e->view = view;
    e->slot = joined ? -1 : t->job ? weft_comm_rank(t->job) : 0;
    e->world0 = t->world;
    e->accum0 = t->o->accum;
    e->quiet0 = quiet;
    e->step_base = t->start_step;
    e->pos_base = weft_loader_position(t->loader);
    e->tr.step = -1;
    e->idle_step = -1;
    e->gen = t->start_step;
    if (!t->o->elastic || !t->job)
        return 0;
    e->keep_oc = *weft_optim_config_of(t->opt);
    if (t->o->trace[0]) {
        char path[sizeof t->o->trace + 32];
        snprintf(path, sizeof path, "%s.%s", t->o->trace, slot ? slot : "0");
        if (!(e->trace = fopen(path, "a")))
            return run_fail(t, WEFT_EIO, "--trace-samples: cannot write %s", path);
    }
    if (joined)
        return join(t, step);
    /* the first copies of the shards (ZeRO 1-3) */
    if ((rc = weft_zero_replicate(t->sync.z, e->gen)))
        return run_fail(t, rc, "elastic: the first shard replicas: %s: %s", weft_strerror(rc),
                        weft_comm_error(t->comm));
    return 0;
}

/* ZeRO 1-3: the shards' copies out of the training state, which may go. */
static weft_zero_replicas *take_replicas(weft_run *t)
{
    weft_zero_replicas *r = NULL;
    if (t->o->zero > 0)
        weft_zero_take_replicas(t->sync.z, &r);
    return r;
}

/* ZeRO 1-3 members at a boundary: each gives its own shards of step *step. */
static int grow_shards(weft_run *t, weft_comm *g, long *step)
{
    weft_zero_replicas *r = take_replicas(t);
    int64_t h[6], steps = 0;
    unsigned char *gone = calloc((size_t)t->world, 1);
    float *full = NULL;
    int rc = gone ? full_new(t, &full) : run_fail(t, WEFT_ENOMEM, "out of memory");
    if (rc == 0 && (!r || weft_zero_replicas_export(r, t->el.gen, gone, full, &steps)))
        rc = run_fail(t, WEFT_EIO, "elastic: step %ld: no shard copies of step %lld to hand over",
                      *step, (long long)t->el.gen);
    weft_zero_replicas_free(r);
    free(gone);
    if (rc) {
        free(full);
        return rc;
    }
    member_header(t, *step, steps, h);
    member_leave_comm(t);
    rc = member_enter_comm(t, g, g);
    if (rc == 0)
        rc = reshard(t, h, full, step);
    free(full);
    return rc;
}

/* Members at a boundary: every one has completed step *step. */
static int grow_hand_over(weft_run *t, weft_comm *g, long *step)
{
    if (t->sync.churn)
        return churn_grow_hand_over(t, g, step);
    if (t->o->zero > 0)
        return grow_shards(t, g, step);
    int rc = member_keep_state(t);
    if (rc)
        return rc;
    member_leave_comm(t);
    rc = member_enter_comm(t, g, g);
    return rc ? rc : hand_over(t, *step, step);
}

/* Joiners came in over g (the job grew from was ranks): the hand-over and
 * the lead's report. A failure is the grow's (the caller recovers) unless
 * the run failed. */
static int admit(weft_run *t, weft_comm *g, long *step, int was, double t0)
{
    uint64_t h = 0;
    int same = 0, rc = grow_hand_over(t, g, step);
    if (rc && t->code)
        return rc;
    if (rc && t->o->zero > 0)
        return run_fail(t, rc,
                        "elastic: step %ld: a rank failed while others joined (%s); with --zero "
                        "%d the shards cannot be recovered from there: resume from the last "
                        "checkpoint", *step, weft_strerror(rc), t->o->zero);
    if (rc == 0 && t->el.late_was)
        return 0; /* admitted at the next outer step (run_elastic_late.c) */
    if (rc == 0)
        rc = member_params_agree(t, &h, &same);
    if (rc)
        return rc;
    char what[256], cl[64] = "";
    if (t->sync.churn)
        member_joined_clusters(t, was, cl, sizeof cl);
    snprintf(what, sizeof what, "%s%d rank(s) joined as rank %d..%d; parameters %s "
             "(hash %016llx)", cl, t->world - was, was, t->world - 1,
             same ? "bit-identical on every rank" : "DIFFER between ranks",
             (unsigned long long)h);
    member_report_change(t, *step, "grow", what, clock_now() - t0);
    return 0;
}

int elastic_boundary(weft_run *t, long *step)
{
    elastic_state *e = &t->el;
    if (!t->o->elastic || !t->job)
        return ELASTIC_NONE;
    e->opt_steps0 = weft_optim_steps(t->opt);
    if (t->pl) { /* no joiners (elastic_open) */
        int rc = keep_step(t); /* the step may have to be taken again from here */
        if (rc)
            return rc;
        kill_point(t, *step, 0);
        return ELASTIC_NONE;
    }
    if (e->joined_now || (t->sync.churn && !churn_boundary(&t->sync))) {
        /* a joiner's members have their grow behind them; in the churn
         * mode joiners wait for the outer step */
        e->joined_now = 0;
        kill_point(t, *step, 0);
        return ELASTIC_NONE;
    }
    double t0 = clock_now();
    weft_comm *g = NULL;
    if (e->late_was) { /* joiners catching up: admitted once they all have */
        int in = 0, rc = late_admit(t, step, &in);
        if (rc && t->code)
            return rc;
        if (rc) /* as a failed grow's */
            return elastic_recover(t, step, rc);
        kill_point(t, *step, 0);
        return in ? ELASTIC_RELOAD : ELASTIC_NONE;
    }
    int rc = weft_comm_grow(t->comm, 0, &g), was = t->world;
    if (rc == WEFT_ENOTSUP && weft_comm_size(t->comm) == 1)
        rc = 0; /* a shrink that left one rank gives it no store: nobody can join it */
    if (rc == 0 && g)
        rc = admit(t, g, step, was, t0);
    if (rc && t->code)
        return rc;
    if (rc) {
        /* the others may have seen it in the step: every survivor starts
         * the step again at its boundary, with a grow */
        int er = elastic_recover(t, step, rc);
        if (er == ELASTIC_NONE)
            return run_fail(t, rc, "elastic: step %ld: %s", *step, weft_strerror(rc));
        return er;
    }
    kill_point(t, *step, 0);
    return g ? ELASTIC_RELOAD : ELASTIC_NONE;
}

int elastic_step_done(weft_run *t, long step)
{
    int rc = 0;
    if (t->o->elastic && t->comm && t->o->zero > 0) {
        if ((rc = weft_zero_replicate(t->sync.z, step + 1)))
            return rc;
        t->el.gen = step + 1;
    }
    elastic_commit(t, step + 1);
    return 0;
}

/* ZeRO 1-3 after a shrink: the survivors go back to the last step that
 * all of them completed (the copies of the step after it may be missing
 * on some), and rebuild the whole state from their shards and the dead
 * ranks' copies. */
static int recover_shards(weft_run *t, const weft_zero_replicas *r, long done,
                          const int *olds, long *step)
{
    int64_t k = done, steps = 0, h[6];
    int rc = weft_allreduce(t->comm, &k, &k, 1, WEFT_I64, WEFT_MIN), was;
    if (rc)
        return rc;
    was = weft_zero_replicas_world(r);
    unsigned char *gone = malloc((size_t)was);
    float *full = NULL;
    if (!gone || (rc = full_new(t, &full))) {
        free(gone);
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    }
    memset(gone, 1, (size_t)was);
    for (int i = 0; i < t->world; i++)
        gone[olds[i]] = 0;
    rc = weft_zero_replicas_export(r, k, gone, full, &steps);
    if (rc == WEFT_ENOTSUP)
        rc = run_fail(t, rc,
                      "elastic: two neighbouring ranks died together and took both copies of a "
                      "ZeRO-%d shard with them: resume from the last checkpoint "
                      "(--save/--resume)", t->o->zero);
    else if (rc)
        rc = run_fail(t, rc, "elastic: no shard copies of step %lld here", (long long)k);
    if (rc == 0) {
        member_header(t, (long)k, steps, h);
        rc = reshard(t, h, full, step);
    }
    free(full);
    free(gone);
    return rc;
}

/* --pp/--tp: the training state leaves the failed step and its groups;
 * every peer still blocked in one of them fails at once. The state kept
 * is the step's start (elastic_boundary). */
static void leave_layout(weft_run *t)
{
    pipeline_abort(t->pl);
    if (t->sync.mreq) {
        weft_wait(t->sync.mreq);
        t->sync.mreq = NULL;
    }
    sync_close(&t->sync);
    t->opt = NULL;
    pipeline_abandon(t->pl);
    t->comm = NULL;
}

/* --pp/--tp, after the shrink: whether this rank's replica is whole; the
 * whole ones split off a job of themselves (*mine; NULL for the others).
 * Rounds until one sees no death. */
static int layout_survivors(weft_run *t, long failed_at, const char *why, int *olds, int *n,
                            int *whole, int *lost, weft_comm **mine)
{
    int old = weft_comm_rank(t->job), wholes = 0, rc = 1, frc;
    weft_comm *w = t->job;
    while (rc) { /* a death during the recovery: shrink what it left */
        if ((frc = member_shrink_round(t, &w, failed_at, old, olds, n, &rc))) {
            t->job = w;
            return frc;
        }
        t->job = w;
        if (rc == 0 && (frc = pipeline_whole(t->pl, olds, *n, whole, lost, &wholes)))
            return frc;
        if (rc == 0 && wholes == 0)
            return run_fail(t, WEFT_EPEER,
                            "elastic: step %ld: every replica lost a rank (%s); none is whole "
                            "to go on with: resume from the last checkpoint (--save/--resume)",
                            failed_at, why);
        if (rc == 0)
            rc = weft_comm_split(w, *whole ? 0 : -1, 0, mine);
    }
    weft_comm_destroy(w); /* the leavers take part in its last barrier */
    t->job = *mine;
    return 0;
}

/* --pp/--tp, the whole replicas: every rank goes back to the start of the
 * first failed step: its own (also where its update went through before
 * a later collective failed), or the one before, when a rank that
 * completed the step was failed by the others' leaving in the next. */
static int layout_resume(weft_run *t, long failed_at, const char *why, long *step)
{
    weft_comm *mine = t->job;
    int64_t span[2] = { failed_at, -failed_at };
    int rc = weft_allreduce(mine, span, span, 2, WEFT_I64, WEFT_MAX);
    long first = (long)-span[1];
    if (rc == 0 && span[0] - first > 1)
        return run_fail(t, WEFT_EPEER,
                        "elastic: step %ld: ranks failed in steps %ld and %lld: resume from the "
                        "last checkpoint (--save/--resume)", failed_at, first,
                        (long long)span[0]);
    if (rc == 0 && failed_at > first)
        back_one(&t->el);
    if (rc == 0 && (rc = pipeline_reopen(t->pl, t->o, mine, &t->m)) == 0)
        rc = member_enter_comm(t, pipeline_dp_comm(t->pl), mine);
    if (rc == 0 && t->comm) {
        rc = hand_over(t, first, step); /* the replicas' states: bit-identical */
    } else if (rc == 0) {
        int64_t h[6];
        member_header(t, first, weft_optim_steps(t->opt), h);
        rc = member_apply_header(t, h, step);
    }
    if (rc) /* run_fail keeps a message already recorded */
        return run_fail(t, rc, "elastic: step %ld: a rank failed while the layout was rebuilt "
                        "(%s): %s", failed_at, weft_strerror(rc), weft_comm_error(mine));
    return 0;
}

/* --pp/--tp: the survivors of a broken replica leave the job; the whole
 * replicas go on from the failed step over a layout of themselves. */
static int layout_recover(weft_run *t, long *step, int rc)
{
    double t0 = clock_now();
    long failed_at = *step;
    int was = weft_comm_size(t->job), old = weft_comm_rank(t->job), lost = -1;
    int n = was, whole = 0;
    char why[160];
    snprintf(why, sizeof why, "%s", weft_strerror(rc));
    int *olds = calloc((size_t)was, sizeof *olds);
    if (!olds)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    leave_layout(t);
    weft_comm *mine = NULL;
    rc = layout_survivors(t, failed_at, why, olds, &n, &whole, &lost, &mine);
    if (rc == 0 && !whole) { /* the job goes on without this rank: nothing of it is lost */
        run_say(t, WEFT_RUN_OUT, "elastic: rank %d leaves: its replica lost rank %d (step %ld, "
                "%s)\n", old, lost, failed_at, why);
        if (t->pg.csv)
            fclose(t->pg.csv);
        t->pg.csv = NULL;
        free(olds);
        return ELASTIC_LEFT;
    }
    if (rc == 0)
        rc = layout_resume(t, failed_at, why, step);
    if (rc == 0)
        rc = member_take_lead(t);
    if (rc == 0)
        rc = member_count_idle(t, n == was, failed_at, why);
    if (rc == 0) {
        char what[256];
        int left = n - weft_comm_size(mine);
        size_t len = member_gone_ranks(what, sizeof what, olds, n, was, why, failed_at);
        if (len < sizeof what)
            snprintf(what + len, sizeof what - len, ", %d left with their replica(s)", left);
        member_report_change(t, *step, "shrink", what, clock_now() - t0);
    }
    free(olds);
    return rc ? rc : ELASTIC_AGAIN;
}

/* Data parallel: the survivors shrink the job, rounds until one sees no
 * death, and take the state of the one that completed the most steps
 * (ZeRO 1-3: rebuild it from the shards and their copies). */
static int dp_survivors(weft_run *t, const weft_zero_replicas *r, long failed_at, long done,
                        int *olds, long *step, int rc)
{
    int old_rank = t->rank;
    while (rc) { /* a death during the recovery: shrink what it left */
        weft_comm *s;
        int src = weft_comm_shrink(t->comm, &s);
        if (src)
            return run_fail(t, src, "elastic: step %ld: no agreement on the survivors (%s): %s",
                            failed_at, weft_strerror(src), weft_comm_error(t->comm));
        member_leave_comm(t);
        kill_point(t, failed_at, 1);
        rc = member_enter_comm(t, s, s);
        if (rc == 0)
            rc = weft_allgather(t->comm, &old_rank, olds, 1, WEFT_I32);
        if (rc == 0)
            rc = r ? recover_shards(t, r, done, olds, step) : hand_over(t, done, step);
        if (rc && t->code)
            return rc; /* the run failed: no round mends it */
    }
    return 0;
}

int elastic_recover(weft_run *t, long *step, int rc)
{
    elastic_state *e = &t->el;
    if (!t->o->elastic || !t->job)
        return ELASTIC_NONE;
    if (t->pl)
        return layout_recover(t, step, rc);
    if (t->sync.churn)
        return churn_recover(t, step, rc);
    double t0 = clock_now();
    long failed_at = *step, done = *step + (weft_optim_steps(t->opt) > e->opt_steps0);
    int was = t->world;
    char why[160];
    snprintf(why, sizeof why, "%s", weft_strerror(rc));
    /* who is gone, in the ranks of the world before the failure */
    int *olds = calloc((size_t)was, sizeof *olds);
    if (!olds)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    weft_zero_replicas *r = take_replicas(t);
    int frc = 0;
    if (t->o->zero == 0)
        frc = member_keep_state(t);
    else
        done = (long)e->gen; /* a step counts once its shards are copied */
    if (frc == 0)
        frc = dp_survivors(t, r, failed_at, done, olds, step, rc);
    weft_zero_replicas_free(r);
    if (frc == 0)
        frc = member_take_lead(t);
    if (frc == 0)
        frc = member_count_idle(t, t->world == was, failed_at, why);
    if (frc == 0) {
        char what[256];
        member_gone_ranks(what, sizeof what, olds, t->world, was, why, failed_at);
        member_report_change(t, *step, "shrink", what, clock_now() - t0);
    }
    free(olds);
    return frc ? frc : ELASTIC_AGAIN;
}

void elastic_close(weft_run *t)
{
    elastic_state *e = &t->el;
    late_drop(t);
    if (e->trace)
        fclose(e->trace);
    free(e->tr.ids);
    free(e->keep);
    free(e->prev);
    memset(e, 0, sizeof *e);
}
