/* Non-blocking collectives: a FIFO of requests run by one worker thread per
 * communicator. One worker keeps the communicator's sockets and sequence
 * numbers single-threaded, and FIFO order is what makes every rank run the
 * same operations in the same order. */
#include "coll/comm.h"

#include <stdlib.h>

#define REQ_MAGIC 0x72657175u
#define REQ_DEAD 0x64656164u

struct weft_request {
    uint32_t magic;   /* REQ_MAGIC until freed: catches some double waits */
    weft_comm *c;
    weft_coll_args a;
    uint64_t flight_id;
    int rc;
    int done;
    struct weft_request *next;
};

static void *worker(void *arg)
{
    weft_comm *c = arg;
    pthread_mutex_lock(&c->amu);
    for (;;) {
        while (!c->qhead && !c->worker_stop)
            pthread_cond_wait(&c->acv, &c->amu);
        if (!c->qhead)
            break;
        struct weft_request *r = c->qhead;
        c->worker_busy = 1;
        pthread_mutex_unlock(&c->amu);
        int rc = coll_run(c, &r->a, r->flight_id);
        pthread_mutex_lock(&c->amu);
        r->rc = rc;
        r->done = 1;
        c->qhead = r->next;
        if (!c->qhead)
            c->qtail = NULL;
        c->worker_busy = 0;
        pthread_cond_broadcast(&c->dcv);
    }
    pthread_mutex_unlock(&c->amu);
    return NULL;
}

int weft_icollective(weft_comm *c, const weft_coll_args *a, weft_request **req)
{
    struct weft_request *r;
    if (!c || !a || !req || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    *req = NULL;
    if (!(r = calloc(1, sizeof *r)))
        return WEFT_ENOMEM;
    r->magic = REQ_MAGIC;
    r->c = c;
    r->a = *a;
    frame_hdr q = { .kind = (uint8_t)a->kind, .dtype = (uint8_t)a->dtype, .op = (uint8_t)a->op,
                    .algo = (uint8_t)a->algo, .root = a->root, .count = a->count };
    r->flight_id = flight_new(&c->fl, &q, FL_QUEUED)->id;
    if (!c->worker_on) {
        c->worker_stop = 0;
        if (pthread_create(&c->worker, NULL, worker, c)) {
            free(r);
            return comm_fail(c, WEFT_ESYS, "cannot start the progress thread");
        }
        c->worker_on = 1;
    }
    pthread_mutex_lock(&c->amu);
    if (c->qtail)
        c->qtail->next = r;
    else
        c->qhead = r;
    c->qtail = r;
    pthread_cond_signal(&c->acv);
    pthread_mutex_unlock(&c->amu);
    *req = r;
    return 0;
}

/* Retire rather than free: the caller's pointer stays valid for the next
 * REQ_RETIRED requests of its communicator, so a second wait or test on it
 * sees REQ_DEAD. Only the waiting thread touches the ring (under amu, as
 * waits may come from several threads). */
static void req_free(weft_request *r)
{
    weft_comm *c = r->c;
    pthread_mutex_lock(&c->amu);
    r->magic = REQ_DEAD;
    weft_request *old = c->retired[c->retired_next];
    c->retired[c->retired_next] = r;
    c->retired_next = (c->retired_next + 1) % REQ_RETIRED;
    pthread_mutex_unlock(&c->amu);
    free(old);
}

int weft_test(weft_request *r, int *done)
{
    int rc = 0;
    if (!r || !done || r->magic != REQ_MAGIC)
        return WEFT_EINVAL;
    pthread_mutex_lock(&r->c->amu);
    *done = r->done;
    pthread_mutex_unlock(&r->c->amu);
    if (*done) {
        rc = r->rc;
        req_free(r);
    }
    return rc;
}

int weft_wait(weft_request *r)
{
    int rc;
    if (!r || r->magic != REQ_MAGIC)
        return WEFT_EINVAL;
    pthread_mutex_lock(&r->c->amu);
    while (!r->done)
        pthread_cond_wait(&r->c->dcv, &r->c->amu);
    pthread_mutex_unlock(&r->c->amu);
    rc = r->rc;
    req_free(r);
    return rc;
}

int weft_wait_all(weft_request **reqs, int n)
{
    int first = 0;
    for (int i = 0; i < n; i++) {
        int rc = weft_wait(reqs[i]);
        if (rc && !first)
            first = rc;
        reqs[i] = NULL;
    }
    return first;
}

void async_drain(weft_comm *c)
{
    if (!c->worker_on)
        return;
    pthread_mutex_lock(&c->amu);
    while (c->qhead)
        pthread_cond_wait(&c->dcv, &c->amu);
    pthread_mutex_unlock(&c->amu);
}

void async_stop(weft_comm *c)
{
    if (!c->worker_on)
        return;
    pthread_mutex_lock(&c->amu);
    c->worker_stop = 1;
    pthread_cond_signal(&c->acv);
    pthread_mutex_unlock(&c->amu);
    pthread_join(c->worker, NULL);
    c->worker_on = 0;
}

void async_free_retired(weft_comm *c)
{
    for (int i = 0; i < REQ_RETIRED; i++) {
        free(c->retired[i]);
        c->retired[i] = NULL;
    }
}

#define ICOLL(...) do { weft_coll_args a_ = { __VA_ARGS__ }; return weft_icollective(c, &a_, req); } while (0)

int weft_isend(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer,
               weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_SEND, .send = buf, .count = count, .dtype = t, .root = peer);
}

int weft_irecv(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer,
               weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_RECV, .recv = buf, .count = count, .dtype = t, .root = peer);
}

int weft_ibroadcast(weft_comm *c, void *buf, size_t count, weft_dtype t, int root,
                    weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_BROADCAST, .send = buf, .recv = buf, .count = count, .dtype = t,
          .root = root);
}

int weft_ireduce(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                 weft_op op, int root, weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_REDUCE, .send = send, .recv = recv, .count = count, .dtype = t,
          .op = op, .root = root);
}

int weft_iallreduce(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                    weft_op op, weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_ALLREDUCE, .send = send, .recv = recv, .count = count, .dtype = t,
          .op = op);
}

int weft_iallgather(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                    weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .dtype = t);
}

int weft_ireduce_scatter(weft_comm *c, const void *send, void *recv, size_t count,
                         weft_dtype t, weft_op op, weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count,
          .dtype = t, .op = op);
}

int weft_ialltoall(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                   weft_request **req)
{
    ICOLL(.kind = WEFT_COLL_ALLTOALL, .send = send, .recv = recv, .count = count, .dtype = t);
}
