/* The communicator's state and its failure recorder: the bottom of coll/.
 * Everything a rank knows about its job hangs off weft_comm: identity,
 * connections, the rendezvous store, sequence numbers and the last error.
 * Every part of coll/ records its errors here (comm_fail); nothing here
 * calls any other part of coll/, so that each of them can include this
 * header without reaching the ones above it. */
#ifndef WEFT_COLL_COMM_CORE_H
#define WEFT_COLL_COMM_CORE_H

#include <pthread.h>
#include <stdatomic.h>

#include "bootstrap/store.h"
#include "coll/sched/plan.h"
#include "core/flight.h"
#include "core/param.h"
#include "transport/ofi.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "weft.h"

struct coll_tuner;

#define COMM_MAGIC 0x7765667463u /* live communicator */
#define COMM_DEAD 0xdeadu

#define REQ_RETIRED 64

struct weft_comm {
    uint64_t magic;           /* COMM_MAGIC while alive: catches some misuse */
    int rank, size, local_rank;
    uint64_t id;              /* same on every member, unique per communicator */
    int32_t *host;            /* host index of every rank (see sched_params) */
    struct coll_tuner *tune;  /* cost model for WEFT_ALGO_AUTO (coll/tune/tuner.h);
                                 made on first use */
    int nhosts;
    weft_algo algo;
    double timeout_s;
    double connect_timeout_s;
    double spin_s;            /* poll-and-yield this long before blocking */
    int spin_yields;          /* and at least this many yields (-1: not yet known) */
    int loglevel;
    uint64_t seq;             /* collectives started on this communicator */
    uint64_t split_seq;
    struct p2p_engine *p2p;   /* point-to-point messages (coll/exec/p2p.h); NULL alone */
    int group_depth;          /* weft_group_start calls not yet ended */
    struct weft_request **group; /* messages posted inside the open group */
    int group_n, group_cap;
    tcp_net net;
    struct ofi_net *ofi;      /* libfabric (coll/comm_net.h); NULL: TCP between hosts */
    store_client *store;      /* every multi-rank communicator: its own connection */
    store_client *watch;      /* a parked GET on the failure key (see comm_failed) */
    char store_host[256];
    int store_port;
    int store_rank;           /* rank whose process serves the store; -1: external */
    char *secret;             /* job secret when connections authenticate; else NULL */
    int fail_peer;            /* peer the last exec error names; -1: none */
    int fail_learned;         /* the last error came from another rank's notice */
    flight fl;                /* flight recorder */
    flight_rec *cur;          /* record of the operation in progress */
    store_server *server;     /* on the rank that serves the store */
    weft_sched sched;         /* reused from call to call */
    void *tmp;                /* SB_TMP scratch */
    size_t tmp_cap;
    void **stage;             /* per peer: receive staging for reductions */
    int shm_on;               /* WEFT_SHM: same-host peers share memory */
    uint64_t shm_bytes;       /* ring capacity per ordered pair */
    shm_link *shm_out, *shm_in; /* per peer, made on first use (coll/exec/exec.c) */
    struct direct_state *direct; /* coll/local/direct.c, made on first use */
    struct flat_state *flat;     /* coll/local/flat.c, made on first use */
    struct callboard *calls;     /* coll/exec/callboard.c: same-host ranks' calls */
    struct live_state *live;     /* coll/exec/live.c: calls and waits told to the others */
    int broken;               /* first error that left the streams unusable */
    int may_lose;             /* members may die and the job go on (a parameter-server
                                 world, set by weft_ps_init): a rank that is gone by
                                 weft_comm_destroy is no failure of the others */
    atomic_int aborted;       /* set by weft_comm_abort from any thread */
    int abort_pipe[2];        /* written on abort: wakes a rank asleep in poll */
    /* Non-blocking operations run in issue order on a worker thread that
     * starts with the first of them; while any is queued or running, a
     * blocking call waits its turn. */
    pthread_mutex_t amu;
    pthread_cond_t acv;       /* work queued, or stop */
    pthread_cond_t dcv;       /* a request finished */
    struct weft_request *qhead, *qtail;
    /* The last REQ_RETIRED finished requests stay allocated, marked dead,
     * so waiting on one again is a clean WEFT_EINVAL, not a use after free. */
    struct weft_request *retired[REQ_RETIRED];
    int retired_next;
    int worker_on, worker_busy, worker_stop;
    pthread_t worker;
    char err[512];
    param_set params;         /* every WEFT_* variable, read once at init */
    int shrunk;               /* weft_comm_shrink made a communicator of this one */
    /* Tests only: called at each phase of weft_comm_shrink (SHRINK_PH_*),
     * so that a test can kill this rank exactly there. */
    void (*shrink_fault)(void *arg, int phase);
    void *shrink_fault_arg;
};

/* The phases of weft_comm_shrink's agreement (coll/shrink.c). */
enum {
    SHRINK_PH_ENTER,     /* called, nothing written yet */
    SHRINK_PH_JOINED,    /* this rank's "in" written */
    SHRINK_PH_AGREED,    /* the members known, nothing of the new communicator out */
    SHRINK_PH_PUBLISHED, /* this rank's new addresses written */
    SHRINK_PH_READY,     /* this rank's "ready" written; others' not yet read */
    SHRINK_PH_COUNT
};

/* A communicator of size ranks, this one being rank, with parameters p
 * and nothing open yet; NULL when out of memory. */
weft_comm *comm_alloc(int rank, int size, const param_set *p);

/* Records the error of the operation in progress: c->err gets the
 * message (logged at DEBUG); returns code, for "return comm_fail(...)". */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int comm_fail(weft_comm *c, int code, const char *fmt, ...);

/* A new communicator's id, the same on every member that gives the same
 * parent id and salt; id 0 starts afresh. */
uint64_t comm_derive_id(uint64_t id, const void *salt, size_t n);

/* Yields a waiting rank makes before it may block (c->spin_yields,
 * worked out on first use). */
int comm_spin_yields(weft_comm *c);
/* The same, worked out afresh (no cache: for other threads). */
int comm_yields_for(const weft_comm *c);

#endif
