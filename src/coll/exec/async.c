/* Non-blocking operations. Collectives: a FIFO of requests run by one
 * worker thread per communicator; one worker keeps the communicator's
 * collective sockets and sequence numbers single-threaded, and FIFO order
 * is what makes every rank run the same operations in the same order.
 * Point-to-point messages skip the FIFO: the p2p engine (p2p.h) moves
 * each on its own. Both complete through req_complete, so waiting is one
 * code path. */
#include "coll/exec/async.h"

#include "coll/coll.h"
#include "coll/coll_args.h"
#include "coll/comm_notice.h"
#include "coll/exec/p2p.h"

#include <stdlib.h>
#include <string.h>

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

/* Check and post one message; *req gets its request. now: the caller
 * waits for it at once (and so drives it itself: the engine's thread
 * need not wake). */
static int post_p2p(weft_comm *c, const weft_coll_args *a, int tag, int now,
                    weft_request **req)
{
    int rc;
    if ((rc = coll_check_p2p(c, a, tag)))
        return rc;
    weft_request *r = calloc(1, sizeof *r);
    if (!r)
        return comm_fail(c, WEFT_ENOMEM, "out of memory for a message");
    r->magic = REQ_MAGIC;
    r->type = REQ_P2P;
    r->c = c;
    r->a = *a;
    r->tag = tag;
    r->bytes = (uint64_t)a->count * weft_dtype_size(a->dtype);
    frame_hdr *h = &r->h;
    h->magic = FRAME_MAGIC;
    h->version = WIRE_VERSION;
    h->kind = WEFT_COLL_SEND;
    h->dtype = (uint8_t)a->dtype;
    h->root = tag;
    h->count = a->count;
    h->len = r->bytes;
    frame_hdr q = *h;
    q.kind = (uint8_t)a->kind;
    r->flight_id = flight_new(&c->fl, &q, FL_QUEUED)->id;
    if ((rc = p2p_post(c->p2p, r, !now))) {
        free(r);
        return comm_fail(c, rc, "cannot start the point-to-point thread");
    }
    *req = r;
    return 0;
}

int weft_isend_tag(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer,
                   int tag, weft_request **req)
{
    weft_coll_args a = { .kind = WEFT_COLL_SEND, .send = buf, .count = count, .dtype = t,
                         .root = peer };
    if (!c || !req || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    *req = NULL;
    return post_p2p(c, &a, tag, 0, req);
}

int weft_irecv_tag(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer, int tag,
                   weft_request **req)
{
    weft_coll_args a = { .kind = WEFT_COLL_RECV, .recv = buf, .count = count, .dtype = t,
                         .root = peer };
    if (!c || !req || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    *req = NULL;
    return post_p2p(c, &a, tag, 0, req);
}

/* Blocking, or collected by an open group (weft_group_start). */
static int p2p_now(weft_comm *c, const weft_coll_args *a, int tag)
{
    weft_request *r;
    if (!c || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    if (c->group_depth > 0 && c->group_n == c->group_cap) {
        int cap = c->group_cap ? 2 * c->group_cap : 16;
        weft_request **g = realloc(c->group, (size_t)cap * sizeof *g);
        if (!g)
            return comm_fail(c, WEFT_ENOMEM, "out of memory for a group");
        c->group = g;
        c->group_cap = cap;
    }
    int rc = post_p2p(c, a, tag, 1, &r); /* a group's end waits for it too */
    if (rc)
        return rc;
    if (c->group_depth > 0) {
        c->group[c->group_n++] = r;
        return 0;
    }
    return weft_wait(r);
}

int weft_send_tag(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer, int tag)
{
    weft_coll_args a = { .kind = WEFT_COLL_SEND, .send = buf, .count = count, .dtype = t,
                         .root = peer };
    return p2p_now(c, &a, tag);
}

int weft_recv_tag(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer, int tag)
{
    weft_coll_args a = { .kind = WEFT_COLL_RECV, .recv = buf, .count = count, .dtype = t,
                         .root = peer };
    return p2p_now(c, &a, tag);
}

int weft_send(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer)
{
    return weft_send_tag(c, buf, count, t, peer, 0);
}

int weft_recv(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer)
{
    return weft_recv_tag(c, buf, count, t, peer, 0);
}

int coll_p2p(weft_comm *c, const weft_coll_args *a)
{
    return p2p_now(c, a, 0);
}

int weft_group_start(weft_comm *c)
{
    if (!c || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    c->group_depth++;
    return 0;
}

int weft_group_end(weft_comm *c)
{
    if (!c || c->magic != COMM_MAGIC || c->group_depth <= 0)
        return WEFT_EINVAL;
    if (--c->group_depth > 0)
        return 0;
    int n = c->group_n;
    c->group_n = 0;
    return weft_wait_all(c->group, n);
}

int weft_icollective(weft_comm *c, const weft_coll_args *a, weft_request **req)
{
    struct weft_request *r;
    if (!c || !a || !req || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    *req = NULL;
    if (a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV)
        return post_p2p(c, a, 0, 0, req);
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

/* A finished message's failure becomes the communicator's error; one
 * that leaves its streams unusable breaks the communicator and tells the
 * other ranks, as a failed collective does, unless a collective is
 * running on the worker right now (it then meets the failure itself). */
static int finished(weft_request *r)
{
    weft_comm *c = r->c;
    int rc = r->rc;
    if (rc && r->type == REQ_P2P) {
        if (c->broken) /* the message's error is the echo of the one that broke it */
            coll_refuse_broken(c);
        else
            comm_fail(c, rc, "%s", r->err);
        int fatal = rc != WEFT_EMISMATCH && rc != WEFT_EINVAL && rc != WEFT_ENOMEM;
        pthread_mutex_lock(&c->amu);
        int idle = !c->qhead;
        pthread_mutex_unlock(&c->amu);
        if (fatal && idle && !c->broken) {
            frame_hdr fp = r->h;
            fp.kind = (uint8_t)r->a.kind;
            c->fail_peer = r->a.root;
            rc = comm_failed(c, rc, &fp);
            c->broken = rc;
        }
    }
    req_free(r);
    return rc;
}

int weft_test(weft_request *r, int *done)
{
    if (!r || !done || r->magic != REQ_MAGIC)
        return WEFT_EINVAL;
    if (r->type == REQ_P2P && !atomic_load(&r->done))
        p2p_progress(r->c->p2p);
    pthread_mutex_lock(&r->c->amu);
    *done = r->done;
    pthread_mutex_unlock(&r->c->amu);
    return *done ? finished(r) : 0;
}

int weft_wait(weft_request *r)
{
    if (!r || r->magic != REQ_MAGIC)
        return WEFT_EINVAL;
    if (r->type == REQ_P2P && !atomic_load(&r->done))
        p2p_wait(r->c->p2p, r); /* drives the engine on this thread */
    pthread_mutex_lock(&r->c->amu);
    while (!r->done)
        pthread_cond_wait(&r->c->dcv, &r->c->amu);
    pthread_mutex_unlock(&r->c->amu);
    return finished(r);
}

int weft_wait_all(weft_request **reqs, int n)
{
    int first = 0;
    if (n < 0 || (n > 0 && !reqs))
        return WEFT_EINVAL;
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
    return weft_isend_tag(c, buf, count, t, peer, 0, req);
}

int weft_irecv(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer,
               weft_request **req)
{
    return weft_irecv_tag(c, buf, count, t, peer, 0, req);
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
