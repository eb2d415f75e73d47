/* The public collectives: check arguments, choose an algorithm, build this
 * rank's schedule and run it. */
#include "coll/comm.h"
#include "coll/algo.h"
#include "coll/alltoallv.h"
#include "coll/comm_cluster.h"
#include "coll/exec/callboard.h"
#include "coll/exec/live.h"
#include "coll/exec/exec.h"
#include "coll/reduce.h"
#include "coll/tune/tuner.h"
#include "core/clock.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int is_reduction(weft_coll_kind k)
{
    return k == WEFT_COLL_ALLREDUCE || k == WEFT_COLL_REDUCE || k == WEFT_COLL_REDUCE_SCATTER;
}

static int is_rooted(weft_coll_kind k)
{
    return k == WEFT_COLL_BROADCAST || k == WEFT_COLL_REDUCE || k == WEFT_COLL_GATHER ||
           k == WEFT_COLL_SCATTER || k == WEFT_COLL_SEND || k == WEFT_COLL_RECV;
}

/* Elements of the largest buffer the call touches, as a multiple of count. */
static int span(weft_coll_kind k, int size)
{
    switch (k) {
    case WEFT_COLL_GATHER: case WEFT_COLL_SCATTER: case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_REDUCE_SCATTER: case WEFT_COLL_ALLTOALL:
        return size;
    default:
        return 1;
    }
}

static int check_args(weft_comm *c, const weft_coll_args *a)
{
    const char *name = weft_coll_name(a->kind);
    size_t es;
    if (!name)
        return comm_fail(c, WEFT_EINVAL, "unknown collective kind %d", (int)a->kind);
    if (!(es = weft_dtype_size(a->dtype)))
        return comm_fail(c, WEFT_EINVAL, "%s: unknown dtype %d", name, (int)a->dtype);
    if (is_reduction(a->kind) && (a->op < 0 || a->op >= WEFT_OP_COUNT))
        return comm_fail(c, WEFT_EINVAL, "%s: unknown reduction op %d", name, (int)a->op);
    if (a->algo < 0 || a->algo >= WEFT_ALGO_COUNT)
        return comm_fail(c, WEFT_EINVAL, "%s: unknown algorithm %d", name, (int)a->algo);
    if (is_rooted(a->kind) && (a->root < 0 || a->root >= c->size))
        return comm_fail(c, WEFT_EINVAL, "%s: %s %d out of range [0, %d)", name,
                         a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV ? "peer" : "root",
                         a->root, c->size);
    if ((a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV) && a->root == c->rank)
        return comm_fail(c, WEFT_EINVAL, "%s: rank %d cannot message itself", name, c->rank);
    if (a->count > SIZE_MAX / es / (size_t)span(a->kind, c->size))
        return comm_fail(c, WEFT_EINVAL, "%s: count %zu overflows the address space", name,
                         a->count);
    if (a->count == 0 || a->kind == WEFT_COLL_BARRIER)
        return 0;
    int root = a->root == c->rank;
    int need_send = 1, need_recv = 1;
    switch (a->kind) {
    case WEFT_COLL_SEND: need_recv = 0; break;
    case WEFT_COLL_RECV: need_send = 0; break;
    case WEFT_COLL_BROADCAST: need_send = 0; break;
    case WEFT_COLL_REDUCE: case WEFT_COLL_GATHER: need_recv = root; break;
    case WEFT_COLL_SCATTER: need_send = root; break;
    default: break;
    }
    if ((need_send && !a->send) || (need_recv && !a->recv))
        return comm_fail(c, WEFT_EINVAL, "%s: NULL %s buffer with count %zu", name,
                         need_send && !a->send ? "send" : "receive", a->count);
    return 0;
}

#define BROKEN "communicator unusable after an earlier error (destroy it): "

/* The cause stays in the message: a caller that learns of the error only
 * at its next call (a wait, a loop's next step) must still see why. */
int coll_refuse_broken(weft_comm *c)
{
    if (strncmp(c->err, BROKEN, sizeof BROKEN - 1)) {
        char cause[sizeof c->err];
        memcpy(cause, c->err, sizeof cause);
        comm_fail(c, c->broken, BROKEN "%s", cause[0] ? cause : weft_strerror(c->broken));
    }
    return c->broken;
}

int coll_check_p2p(weft_comm *c, const weft_coll_args *a, int tag)
{
    if (atomic_load(&c->aborted))
        return comm_fail(c, WEFT_EABORTED, "communicator aborted");
    if (c->broken)
        return coll_refuse_broken(c);
    if (tag < 0)
        return comm_fail(c, WEFT_EINVAL, "%s: tag %d is negative",
                         weft_coll_name(a->kind), tag);
    return check_args(c, a);
}

int coll_scratch(weft_comm *c, void **buf, size_t *cap, uint64_t bytes)
{
    if (bytes <= *cap)
        return 0;
    void *t = bytes <= SIZE_MAX ? malloc((size_t)bytes) : NULL;
    if (!t)
        return comm_fail(c, WEFT_ENOMEM, "out of memory for %llu bytes of scratch",
                         (unsigned long long)bytes);
    free(*buf);
    *buf = t;
    *cap = (size_t)bytes;
    return 0;
}

/* The schedule parameters and buffers of call a. */
static void sched_args(const weft_comm *c, const weft_coll_args *a, sched_params *p,
                       char *bufs[SB_COUNT])
{
    memset(p, 0, sizeof *p);
    p->kind = a->kind;
    p->rank = c->rank;
    p->nranks = c->size;
    p->root = a->root;
    p->count = a->count;
    p->esize = (uint32_t)weft_dtype_size(a->dtype);
    p->host = c->host;
    p->cluster = comm_cluster_index(c);
    bufs[SB_SEND] = (char *)(uintptr_t)a->send;
    bufs[SB_RECV] = a->recv;
    bufs[SB_TMP] = NULL;
    switch (a->kind) {
    case WEFT_COLL_BROADCAST:
        bufs[SB_SEND] = a->recv;
        break;
    case WEFT_COLL_ALLREDUCE: case WEFT_COLL_REDUCE: case WEFT_COLL_ALLTOALL:
        p->inplace = a->send == a->recv;
        break;
    default:
        break;
    }
}

int coll_run_sched(weft_comm *c, const weft_coll_args *a, weft_algo algo, weft_sched *s,
                   void **tmp, size_t *cap, const frame_hdr *fp)
{
    sched_params p;
    char *bufs[SB_COUNT];
    sched_args(c, a, &p, bufs);
    int rc = sched_build(s, algo, &p);
    if (rc)
        return comm_fail(c, rc, "cannot build the %s schedule: %s", weft_algo_name(algo),
                         weft_strerror(rc));
    if ((rc = coll_scratch(c, tmp, cap, s->tmp_bytes)))
        return rc;
    bufs[SB_TMP] = *tmp;
    return exec_run(c, s, bufs, fp);
}

int weft_collective(weft_comm *c, const weft_coll_args *a)
{
    if (!c || !a || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    if (a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV)
        return coll_p2p(c, a); /* never waits for the collective stream */
    async_drain(c);
    return coll_run(c, a, 0);
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
    if ((rc = check_args(c, a)))
        return rc;
    size_t es = weft_dtype_size(a->dtype);
    if (a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV)
        return comm_fail(c, WEFT_EINVAL, "point-to-point runs in the p2p engine");

    algo = a->algo != WEFT_ALGO_AUTO ? a->algo : c->algo;
    if (algo == WEFT_ALGO_AUTO) {
        if (!c->tune) {
            char err[256];
            int trc = coll_tuner_create_for(&c->tune, &c->params, c->size,
                                            c->nhosts > 1 ? c->host : NULL, err, sizeof err);
            if (trc)
                return comm_fail(c, trc, "%s", err); /* a bad WEFT_TUNE / WEFT_TUNE_FILE */
            if ((trc = comm_cluster_tune(c, c->tune)))
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
    fp.op = (uint8_t)(is_reduction(a->kind) ? a->op : 0);
    fp.algo = (uint8_t)algo;
    fp.root = is_rooted(a->kind) ? a->root : -1;
    fp.count = a->count;
    if (timed) {
        fp = *timed;
        fp.algo = (uint8_t)algo;
        fp.flags = FRAME_TRIAL;
    } else if (ticket >= 0 && coll_tuner_timed(c->tune, ticket) && (rc = trial_start(c, &fp))) {
        return rc;
    }

    sched_args(c, a, &p, bufs);

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
    if (rc) {
        /* an algorithm that runs without a schedule refuses what it does
         * not do before anything moves */
        if (rc != WEFT_EINVAL && rc != WEFT_ENOMEM && rc != WEFT_ENOTSUP) {
            finish(c, fr, rc);
            rc = comm_failed(c, rc, &fp);
            c->broken = rc;
            return rc;
        }
        return finish(c, fr, rc);
    }
    finish(c, fr, 0);
    if (ticket >= 0 && (rc = measured(c, ticket, (uint64_t)a->count * es, clock_now() - t0)))
        return rc;
    if (a->op == WEFT_AVG && is_reduction(a->kind) &&
        (a->kind != WEFT_COLL_REDUCE || a->root == c->rank))
        rc = reduce_avg_finish(a->recv, a->count, a->dtype, c->size);
    return rc;
}

#define COLL(...) do { weft_coll_args a_ = { __VA_ARGS__ }; return weft_collective(c, &a_); } while (0)

int weft_barrier(weft_comm *c)
{
    COLL(.kind = WEFT_COLL_BARRIER, .dtype = WEFT_U8);
}

int weft_broadcast(weft_comm *c, void *buf, size_t count, weft_dtype t, int root)
{
    COLL(.kind = WEFT_COLL_BROADCAST, .send = buf, .recv = buf, .count = count, .dtype = t,
         .root = root);
}

int weft_reduce(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                weft_op op, int root)
{
    COLL(.kind = WEFT_COLL_REDUCE, .send = send, .recv = recv, .count = count, .dtype = t,
         .op = op, .root = root);
}

int weft_allreduce(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                   weft_op op)
{
    COLL(.kind = WEFT_COLL_ALLREDUCE, .send = send, .recv = recv, .count = count, .dtype = t,
         .op = op);
}

int weft_gather(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                int root)
{
    COLL(.kind = WEFT_COLL_GATHER, .send = send, .recv = recv, .count = count, .dtype = t,
         .root = root);
}

int weft_scatter(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                 int root)
{
    COLL(.kind = WEFT_COLL_SCATTER, .send = send, .recv = recv, .count = count, .dtype = t,
         .root = root);
}

int weft_allgather(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t)
{
    COLL(.kind = WEFT_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .dtype = t);
}

int weft_reduce_scatter(weft_comm *c, const void *send, void *recv, size_t count,
                        weft_dtype t, weft_op op)
{
    COLL(.kind = WEFT_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count,
         .dtype = t, .op = op);
}

int weft_alltoall(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t)
{
    COLL(.kind = WEFT_COLL_ALLTOALL, .send = send, .recv = recv, .count = count, .dtype = t);
}
