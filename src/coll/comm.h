/* The communicator handle. Everything a rank knows about its job hangs off
 * it: identity, connections, the rendezvous store, sequence numbers and the
 * last error. */
#ifndef WEFT_BOOTSTRAP_COMM_H
#define WEFT_BOOTSTRAP_COMM_H

#include <pthread.h>
#include <stdatomic.h>

#include "bootstrap/store.h"
#include "coll/sched/sched.h"
#include "coll/tune/tuner.h"
#include "core/flight.h"
#include "core/param.h"
#include "transport/ofi.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "weft.h"

#define COMM_MAGIC 0x7765667463u /* live communicator */
#define COMM_DEAD 0xdeadu

#define REQ_RETIRED 64

struct weft_comm {
    uint64_t magic;           /* COMM_MAGIC while alive: catches some misuse */
    int rank, size, local_rank;
    uint64_t id;              /* same on every member, unique per communicator */
    int32_t *host;            /* host index of every rank (see sched_params) */
    coll_tuner *tune;         /* cost model for WEFT_ALGO_AUTO; made on first use */
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

/* What a member of a new communicator (a split's, a shrink's) publishes
 * to the others. */
typedef struct {
    char tcp[SOCK_ADDR_MAX], p2p[SOCK_ADDR_MAX];
    int32_t shm;
    int32_t has_ofi;          /* the libfabric part below is worth sending */
    char ofi[OFI_ADDR_MAX], p2p_ofi[OFI_ADDR_MAX];
} comm_addr;

/* A new communicator of n ranks with id, this rank being rank, made from
 * parent c: its listeners opened where c's are, its store joined; *addr
 * gets what to publish. Errors recorded on c. */
int comm_child_open(weft_comm *c, int rank, int n, uint64_t id, comm_addr *addr,
                    weft_comm **out);
/* Every member's published address known: member i of child is rank
 * members[i] of c, whose address is addrs[members[i]]. Errors on c. */
int comm_child_link(weft_comm *c, weft_comm *child, const int *members,
                    const comm_addr *addrs);
/* A communicator made by comm_child_open that will not be used. */
void comm_child_free(weft_comm *child);
/* The rendezvous of weft_comm_init for a communicator made by
 * comm_child_open: publish a, learn every member's address and host. */
int comm_exchange(weft_comm *c, const comm_addr *a);
/* A new communicator's id, the same on every member that gives the same
 * parent id and salt. */
uint64_t comm_derive_id(uint64_t id, const void *salt, size_t n);

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int comm_fail(weft_comm *c, int code, const char *fmt, ...);

/* Close every data connection, so that peers blocked on this rank learn at
 * once (end of stream) that it has failed. */
void comm_sever(weft_comm *c);

/* After operation fp failed with rc (message in c->err): leave a notice in
 * the store for every other rank (unless this rank learned of the failure
 * from such a notice, or an earlier notice explains it better), dump the
 * flight recorder and sever the connections. Returns the code to report
 * (that of the notice this rank adopted, if any). */
int comm_failed(weft_comm *c, int rc, const frame_hdr *fp);
/* Yields a waiting rank makes before it may block (c->spin_yields,
 * worked out on first use). */
int comm_spin_yields(weft_comm *c);
/* The same, worked out afresh (no cache: for other threads). */
int comm_yields_for(const weft_comm *c);
/* The watch socket (poll it for POLLIN), or -1. */
int comm_watch_fd(const weft_comm *c);
/* The watch socket is readable: another rank left a failure notice. Sets
 * c->err ("rank 2 died ... [reported by rank 3; this rank (1) was in ...]")
 * and returns the notice's code; returns 0 when the store merely went away
 * (the watch is then closed). */
int comm_watch_fired(weft_comm *c, const frame_hdr *fp);

/* Runs one collective on the calling thread (coll.c); flight_id: its
 * flight-recorder record when it was queued, else 0. */
int coll_run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id);
/* Run call a with algorithm algo's schedule, built into s with scratch
 * *tmp (capacity *cap), its messages carrying fp: for algorithms that
 * fall back to a schedule. Errors recorded on c. */
int coll_run_sched(weft_comm *c, const weft_coll_args *a, weft_algo algo, weft_sched *s,
                   void **tmp, size_t *cap, const frame_hdr *fp);
/* Grow *buf (capacity *cap) to at least bytes; WEFT_ENOMEM recorded on c. */
int coll_scratch(weft_comm *c, void **buf, size_t *cap, uint64_t bytes);
/* A call on a communicator an earlier error broke: c->broken, with c->err
 * saying so and still naming that error's cause (coll.c). */
int coll_refuse_broken(weft_comm *c);
/* Arguments of a message with this tag: 0, or an error recorded on c. */
int coll_check_p2p(weft_comm *c, const weft_coll_args *a, int tag);
/* A message with tag 0 given as a collective's arguments (async.c). */
int coll_p2p(weft_comm *c, const weft_coll_args *a);
/* Wait for queued non-blocking work, then stop the worker (async.c). */
void async_drain(weft_comm *c);
void async_stop(weft_comm *c);
/* Frees the retired requests (comm teardown, after async_stop). */
void async_free_retired(weft_comm *c);

#endif
