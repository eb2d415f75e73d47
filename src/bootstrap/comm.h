/* The communicator handle. Everything a rank knows about its job hangs off
 * it: identity, connections, the rendezvous store, sequence numbers and the
 * last error. */
#ifndef WEFT_BOOTSTRAP_COMM_H
#define WEFT_BOOTSTRAP_COMM_H

#include <pthread.h>
#include <stdatomic.h>

#include "bootstrap/store.h"
#include "coll/sched.h"
#include "transport/tcp.h"
#include "weft.h"

struct weft_comm {
    int rank, size, local_rank;
    uint64_t id;              /* same on every member, unique per communicator */
    int32_t *host;            /* host index of every rank (see sched_params) */
    int nhosts;
    weft_algo algo;
    double timeout_s;
    double connect_timeout_s;
    int loglevel;
    uint64_t seq;             /* collectives started on this communicator */
    uint64_t split_seq;
    uint64_t *p2p_sent;       /* per peer: point-to-point messages sent */
    uint64_t *p2p_recvd;
    tcp_net net;
    store_client *store;      /* world communicator only */
    store_server *server;     /* on the rank that serves the store */
    weft_sched sched;         /* reused from call to call */
    void *tmp;                /* SB_TMP scratch */
    size_t tmp_cap;
    void **stage;             /* per peer: receive staging for reductions */
    int broken;               /* first error that left the streams unusable */
    atomic_int aborted;       /* set by weft_comm_abort from any thread */
    int abort_pipe[2];        /* written on abort: wakes a rank asleep in poll */
    /* Non-blocking operations run in issue order on a worker thread that
     * starts with the first of them; while any is queued or running, a
     * blocking call waits its turn. */
    pthread_mutex_t amu;
    pthread_cond_t acv;       /* work queued, or stop */
    pthread_cond_t dcv;       /* a request finished */
    struct weft_request *qhead, *qtail;
    int worker_on, worker_busy, worker_stop;
    pthread_t worker;
    char err[512];
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int comm_fail(weft_comm *c, int code, const char *fmt, ...);

/* Close every data connection, so that peers blocked on this rank learn at
 * once (end of stream) that it has failed, and tell their own peers. */
void comm_sever(weft_comm *c);

/* Runs one collective on the calling thread (coll.c). */
int coll_run(weft_comm *c, const weft_coll_args *a);
/* Wait for queued non-blocking work, then stop the worker (async.c). */
void async_drain(weft_comm *c);
void async_stop(weft_comm *c);

#endif
