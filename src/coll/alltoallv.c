/* All-to-all with unequal blocks (MPI_Alltoallv; torch's all_to_all_single
 * with splits): one round in which each rank sends its block to every
 * other rank and receives theirs, as a schedule, so it runs on the same
 * executor, wire fingerprints and failure path as every collective. On
 * one host, under WEFT_ALGO=direct or where the send buffers are
 * weft_mem_alloc's, each rank instead reads its blocks straight out of
 * the others' send buffers (coll/local/direct_av.c). */
#include "coll/alltoallv.h"

#include "coll/coll_args.h"
#include "coll/comm_notice.h"
#include "coll/exec/callboard.h"
#include "coll/exec/exec.h"
#include "coll/local/direct.h"
#include "coll/local/direct_av.h"

#include <stdlib.h>
#include <string.h>

/* Every block inside its buffer: checked in bytes, so a count that
 * overflows is refused, not wrapped. */
static int av_check(weft_comm *c, const coll_av_args *v)
{
    size_t es = weft_dtype_size(v->t);
    if (!es)
        return comm_fail(c, WEFT_EINVAL, "alltoallv: unknown dtype %d", (int)v->t);
    if (!v->sc || !v->sd || !v->rc || !v->rd)
        return comm_fail(c, WEFT_EINVAL, "alltoallv: NULL count or displacement array");
    for (int i = 0; i < c->size; i++) {
        size_t lim = SIZE_MAX / es;
        if (v->sc[i] > lim || v->sd[i] > lim - v->sc[i] || v->rc[i] > lim ||
            v->rd[i] > lim - v->rc[i])
            return comm_fail(c, WEFT_EINVAL, "alltoallv: block of rank %d overflows", i);
        if ((v->sc[i] && !v->send) || (v->rc[i] && !v->recv))
            return comm_fail(c, WEFT_EINVAL, "alltoallv: NULL %s buffer with count %zu",
                             v->sc[i] && !v->send ? "send" : "receive",
                             v->sc[i] && !v->send ? v->sc[i] : v->rc[i]);
    }
    if (v->send && v->send == v->recv)
        return comm_fail(c, WEFT_EINVAL, "alltoallv: send and receive buffers must differ");
    return 0;
}

/* Single copy (coll/local/direct.h) when every rank is on this host:
 * under WEFT_ALGO=direct always, under auto where every rank's blocks
 * lie in weft_mem_alloc's memory, which peers map and copy out of with
 * memcpy; decided from what every rank knows alike. Not under auto for
 * other memory: process_vm_readv copies a byte at a quarter of memcpy's
 * rate and single copy takes two rounds of messages where the schedule
 * takes one, so the shared-memory ring's two copies were as fast at the
 * expert dispatch's sizes (docs/BENCHMARKS.md, "Experts: the dispatch's
 * movement"). */
static int av_direct(weft_comm *c)
{
    if (c->size < 2 || c->nhosts != 1 || !c->shm_on || !c->params.shm_cma ||
        direct_verdict(c) < 0)
        return 0;
    return c->algo == WEFT_ALGO_DIRECT || (c->algo == WEFT_ALGO_AUTO && direct_av_auto(c));
}

static void av_sched(weft_comm *c, const coll_av_args *v, weft_sched *s)
{
    int p = c->size, r = c->rank;
    uint64_t es = weft_dtype_size(v->t);
    sched_reset(s);
    sched_copy(s, SB_RECV, v->rd[r] * es, SB_SEND, v->sd[r] * es, v->sc[r] * es);
    for (int k = 1; k < p; k++) {
        int to = (r + k) % p, from = (r - k + p) % p;
        sched_send(s, to, SB_SEND, v->sd[to] * es, v->sc[to] * es);
        sched_recv(s, from, SB_RECV, v->rd[from] * es, v->rc[from] * es);
    }
    sched_end_round(s);
}

int coll_alltoallv(weft_comm *c, const coll_av_args *v, uint64_t flight_id)
{
    frame_hdr fp;
    flight_rec *fr = flight_get(&c->fl, flight_id);
    int rc;
    if (atomic_load(&c->aborted))
        rc = comm_fail(c, WEFT_EABORTED, "communicator aborted");
    else if (c->broken)
        rc = coll_refuse_broken(c);
    else if (!(rc = av_check(c, v)) && v->rc[c->rank] != v->sc[c->rank])
        rc = comm_fail(c, WEFT_EINVAL, "alltoallv: rank %d sends itself %zu elements but "
                       "expects %zu", c->rank, v->sc[c->rank], v->rc[c->rank]);
    if (rc) {
        if (fr)
            flight_finish(fr, rc);
        return rc;
    }
    av_sched(c, v, &c->sched);
    if (c->sched.err)
        return comm_fail(c, WEFT_ENOMEM, "alltoallv: out of memory for the schedule");
    memset(&fp, 0, sizeof fp);
    fp.magic = FRAME_MAGIC;
    fp.version = WIRE_VERSION;
    fp.kind = WEFT_COLL_ALLTOALL;
    fp.dtype = (uint8_t)v->t;
    fp.algo = av_direct(c) ? WEFT_ALGO_DIRECT : WEFT_ALGO_NAIVE;
    fp.root = -1;
    fp.op = 1; /* a plain alltoall has 0: the two are told apart as mismatched */
    fp.seq = ++c->seq;
    int prior = callboard_post(c, &fp);
    if (fr)
        flight_start(fr, &fp);
    else
        fr = flight_new(&c->fl, &fp, FL_RUNNING);
    c->cur = fr;
    c->fail_learned = 0;
    char *bufs[SB_COUNT] = { (char *)(uintptr_t)v->send, v->recv, NULL };
    rc = prior;
    if (!rc && fp.algo == WEFT_ALGO_DIRECT)
        rc = direct_alltoallv(c, v->send, v->recv, v->t,
                              (const size_t *const[4]){ v->sc, v->sd, v->rc, v->rd }, &fp);
    if (!prior && (fp.algo != WEFT_ALGO_DIRECT || rc == DIRECT_AGAIN))
        rc = exec_run(c, &c->sched, bufs, &fp);
    flight_finish(fr, rc);
    c->cur = NULL;
    if (rc) {
        rc = comm_failed(c, rc, &fp);
        c->broken = rc;
    }
    return rc;
}

int coll_alltoallv_run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id)
{
    coll_av_args *v = (coll_av_args *)(uintptr_t)a->send;
    int rc = coll_alltoallv(c, v, flight_id);
    free(v);
    return rc;
}

int coll_alltoallv_queue(weft_comm *c, const coll_av_args *probe, weft_coll_args *a)
{
    int rc;
    if ((rc = av_check(c, probe)))
        return rc;
    /* the caller's arrays need not outlive this call: copy them */
    size_t n = (size_t)c->size, *arr;
    coll_av_args *v = malloc(sizeof *v + 4 * n * sizeof *arr);
    if (!v)
        return comm_fail(c, WEFT_ENOMEM, "alltoallv: out of memory");
    arr = (size_t *)(v + 1);
    memcpy(arr, probe->sc, n * sizeof *arr);
    memcpy(arr + n, probe->sd, n * sizeof *arr);
    memcpy(arr + 2 * n, probe->rc, n * sizeof *arr);
    memcpy(arr + 3 * n, probe->rd, n * sizeof *arr);
    *v = (coll_av_args){ probe->send, probe->recv, probe->t, arr, arr + n, arr + 2 * n,
                         arr + 3 * n };
    *a = (weft_coll_args){ .kind = COLL_ALLTOALLV, .send = v, .count = COLL_ALLTOALLV_MARK,
                           .dtype = probe->t };
    return 0;
}
