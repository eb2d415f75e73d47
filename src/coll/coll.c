/* The collective engine: a call checked, its algorithm chosen (the cost
 * model's pick under auto, with its trials), this rank's schedule built
 * and run, its failure reported. The public calls that reach it are in
 * coll_api.c; queued ones come from the worker (coll/exec/async.c). */
#include "coll/coll.h"

#include "coll/algo.h"
#include "coll/alltoallv.h"
#include "coll/coll_args.h"
#include "coll/coll_sched.h"
#include "coll/comm_cluster.h"
#include "coll/comm_notice.h"
#include "coll/exec/callboard.h"
#include "coll/exec/live.h"
#include "coll/exec/exec.h"
#include "coll/exec/small.h"
#include "coll/reduce.h"
#include "coll/tune/tuner.h"
#include "core/clock.h"
#include "transport/wan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Tells c's selector t where the clusters are and what a wan link costs
 * where WEFT_TUNE does not say: the emulated link's delay and rate under
 * WEFT_WAN, else COMM_WAN_ALPHA and COMM_WAN_BETA. Errors are recorded on c. */
static int tune_clusters(weft_comm *c, coll_tuner *t)
{
    const cost_params *k = coll_tuner_params(t);
    double alpha = COMM_WAN_ALPHA, beta = COMM_WAN_BETA;
    wan_cfg w;
    if (wan_emulation(c->net.wan, &w)) {
        /* the emulation adds its delay to a link between hosts */
        alpha = w.delay_s + k->alpha_inter;
        beta = w.rate_Bps > 0 ? 1.0 / w.rate_Bps : k->beta_inter;
    }
    int rc = coll_tuner_set_clusters(t, comm_cluster_index(c), alpha, beta);
    return rc ? comm_fail(c, rc, "clusters: out of memory") : 0;
}

static int finish(weft_comm *c, flight_rec *r, int rc)
{
    if (r)
        flight_finish(r, rc);
    c->cur = NULL;
    return rc;
}

static int run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id,
               const frame_hdr *timed);

/* Before a timed trial call of auto's: a barrier, so that every rank
 * starts the call at about the same moment. Without it a rank's time
 * includes waiting for ranks still finishing the previous call, and as
 * the candidates take turns in a fixed order, each would carry its
 * predecessor's finish. (The untimed first round has none, so a bucket's
 * first call is the caller's own, as is any error it meets.) */
static int trial_start(weft_comm *c, const frame_hdr *timed)
{
    weft_coll_args b = { .kind = WEFT_COLL_BARRIER, .dtype = WEFT_U8,
                         .algo = coll_tuner_select(c->tune, WEFT_COLL_BARRIER, 0, 1) };
    return run(c, &b, 0, timed);
}

/* A trial call of auto's (coll/tune/trial.h) took secs. After the bucket's last
 * one, the ranks agree on each candidate's time, the slowest rank's, with
 * an all-reduce of their own: every rank reaches it at the same call. */
static int measured(weft_comm *c, int ticket, uint64_t bytes, double secs)
{
    double v[TRIAL_MAX_CAND];
    int n = coll_tuner_record(c->tune, ticket, bytes, secs, v);
    if (!n)
        return 0;
    weft_coll_args g = {
        .kind = WEFT_COLL_ALLREDUCE, .send = v, .recv = v, .count = (size_t)n,
        .dtype = WEFT_F64, .op = WEFT_MAX,
        .algo = coll_tuner_select(c->tune, WEFT_COLL_ALLREDUCE, (uint64_t)n * sizeof *v,
                                  sizeof *v),
    };
    int rc = run(c, &g, 0, NULL);
    if (rc)
        return rc;
    coll_tuner_settle(c->tune, ticket, v);
    coll_tuner_log_trial(c->tune, ticket, c->loglevel, c->rank);
    return 0;
}

/* A failed call: an error that leaves the communicator usable (refused
 * before anything moved) or one that breaks it, told to the others. */
static int failed(weft_comm *c, flight_rec *fr, int rc, const frame_hdr *fp)
{
    if (rc != WEFT_EINVAL && rc != WEFT_ENOMEM && rc != WEFT_ENOTSUP) {
        finish(c, fr, rc);
        rc = comm_failed(c, rc, fp);
        c->broken = rc;
        return rc;
    }
    return finish(c, fr, rc);
}

/* An all-reduce the small path takes (coll/exec/small.h), the board made:
 * its fingerprint on the call board and in the hints' history as any
 * call's, but no tuner, no schedule, and a flight record only for a
 * queued call (its record waits) or a wait that outlasts the spin. */
static int run_small(weft_comm *c, const weft_coll_args *a, uint64_t flight_id)
{
    frame_hdr fp;
    memset(&fp, 0, sizeof fp);
    fp.magic = FRAME_MAGIC;
    fp.version = WIRE_VERSION;
    fp.kind = WEFT_COLL_ALLREDUCE;
    fp.dtype = (uint8_t)a->dtype;
    fp.op = (uint8_t)a->op;
    fp.algo = WEFT_ALGO_FLAT;
    fp.root = -1;
    fp.count = a->count;
    fp.seq = ++c->seq;
    live_call(c, &fp);
    int rc = callboard_post(c, &fp);
    flight_rec *fr = flight_get(&c->fl, flight_id);
    if (fr)
        flight_start(fr, &fp);
    c->cur = fr;
    c->fail_learned = 0;
    if (!rc)
        rc = small_run(c, a, &fp);
    if (rc)
        return failed(c, c->cur, rc, &fp);
    finish(c, c->cur, 0);
    return a->op == WEFT_AVG ? reduce_avg_finish(a->recv, a->count, a->dtype, c->size) : 0;
}

int coll_run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id)
{
    if (!c)
        return WEFT_EINVAL;
    if (coll_is_alltoallv(a)) /* a queued weft_ialltoallv */
        return coll_alltoallv_run(c, a, flight_id);
    int rc = run(c, a, flight_id, NULL);
    flight_rec *r = flight_get(&c->fl, flight_id);
    /* a queued operation refused before it ran (bad arguments, a broken
     * communicator) still leaves the queue in the record */
    if (r && __atomic_load_n(&r->state, __ATOMIC_RELAXED) == FL_QUEUED)
        flight_finish(r, rc ? rc : WEFT_EINVAL);
    return rc;
}

/* timed: the call a barrier of auto's trials starts (trial_start), whose
 * fingerprint its messages carry, marked FRAME_TRIAL: a rank in the call
 * itself, or in another call's trial, then sees a mismatch. */
static int run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id,
               const frame_hdr *timed)
{
    sched_params p;
    frame_hdr fp;
    char *bufs[SB_COUNT];
    weft_algo algo;
    int rc, ticket = -1;
    double t0 = 0;
    if (!c || !a)
        return WEFT_EINVAL;
    if (atomic_load(&c->aborted))
        return comm_fail(c, WEFT_EABORTED, "communicator aborted");
    if (c->broken)
        return coll_refuse_broken(c);
    if ((rc = coll_check_args(c, a)))
        return rc;
    size_t es = weft_dtype_size(a->dtype);
    if (a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV)
        return comm_fail(c, WEFT_EINVAL, "point-to-point runs in the p2p engine");

    algo = a->algo != WEFT_ALGO_AUTO ? a->algo : c->algo;
    if (algo == WEFT_ALGO_AUTO && !timed && small_fits(c, a)) {
        if (small_ready(c))
            return run_small(c, a, flight_id);
        algo = WEFT_ALGO_FLAT; /* this call makes the board */
    }
    if (algo == WEFT_ALGO_AUTO) {
        if (!c->tune) {
            char err[256];
            int trc = coll_tuner_create_for(&c->tune, &c->params, c->size,
                                            c->nhosts > 1 ? c->host : NULL, err, sizeof err);
            if (trc)
                return comm_fail(c, trc, "%s", err); /* a bad WEFT_TUNE / WEFT_TUNE_FILE */
            if ((trc = tune_clusters(c, c->tune)))
                return trc;
            coll_tuner_log(c->tune, c->loglevel, c->rank);
        }
        algo = coll_tuner_pick(c->tune, a->kind, (uint64_t)a->count * es, (uint32_t)es,
                               &ticket);
    }

    memset(&fp, 0, sizeof fp);
    fp.magic = FRAME_MAGIC;
    fp.version = WIRE_VERSION;
    fp.kind = (uint8_t)a->kind;
    fp.dtype = (uint8_t)a->dtype;
    fp.op = (uint8_t)(coll_is_reduction(a->kind) ? a->op : 0);
    fp.algo = (uint8_t)algo;
    fp.root = coll_is_rooted(a->kind) ? a->root : -1;
    fp.count = a->count;
    if (timed) {
        fp = *timed;
        fp.algo = (uint8_t)algo;
        fp.flags = FRAME_TRIAL;
    } else if (ticket >= 0 && coll_tuner_timed(c->tune, ticket) && (rc = trial_start(c, &fp))) {
        return rc;
    }

    coll_sched_args(c, a, &p, bufs);

    const coll_algo *how = coll_algo_of(algo);
    fp.seq = ++c->seq;
    if (how->run) {
        rc = 0; /* no schedule: run below */
    } else {
        rc = sched_build(&c->sched, algo, &p);
        if (rc == WEFT_ENOTSUP)
            return comm_fail(c, rc, "%s has no %s algorithm", weft_coll_name(a->kind),
                             weft_algo_name(algo));
    }
    if (rc)
        return comm_fail(c, rc, "cannot build the schedule: %s", weft_strerror(rc));
    int scheduled = !how->run;
    if (scheduled && (rc = coll_scratch(c, &c->tmp, &c->tmp_cap, c->sched.tmp_bytes)))
        return rc;
    bufs[SB_TMP] = c->tmp;
    live_call(c, &fp); /* for the hints of a rank that waits (coll/exec/live.h) */
    int prior = callboard_post(c, &fp);
    flight_rec *fr = flight_get(&c->fl, flight_id);
    if (fr) {
        flight_start(fr, &fp);
    } else {
        fr = flight_new(&c->fl, &fp, FL_RUNNING);
    }
    c->cur = fr;
    c->fail_learned = 0;
    if (ticket >= 0)
        t0 = clock_now();
    if (prior)
        rc = prior; /* a mismatch in the previous call */
    else if (scheduled)
        rc = exec_run(c, &c->sched, bufs, &fp);
    else
        rc = how->run(c, a, &fp);
    if (rc) /* an algorithm that runs without a schedule refuses what it
             * does not do before anything moves */
        return failed(c, fr, rc, &fp);
    finish(c, fr, 0);
    if (ticket >= 0 && (rc = measured(c, ticket, (uint64_t)a->count * es, clock_now() - t0)))
        return rc;
    if (a->op == WEFT_AVG && coll_is_reduction(a->kind) &&
        (a->kind != WEFT_COLL_REDUCE || a->root == c->rank))
        rc = reduce_avg_finish(a->recv, a->count, a->dtype, c->size);
    return rc;
}
