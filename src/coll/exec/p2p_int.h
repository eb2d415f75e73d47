/* What the point-to-point engine's two files share: p2p_stream.c moves
 * and matches messages on each peer's streams, p2p.c decides who drives
 * them and sleeps when nothing can move. Internal to those two. */
#ifndef WEFT_COLL_EXEC_P2P_INT_H
#define WEFT_COLL_EXEC_P2P_INT_H

#include "coll/exec/request.h"
#include "transport/ofi.h"
#include "transport/shm.h"

#include <poll.h>
#include <pthread.h>

#define P2P_SALT 0x7032705f6d736773ull /* its connections' id: the communicator's, salted */
#define VISIT_BYTES (4u << 20)         /* per peer and direction per sweep: none starves */
#define PROBE_S 1.0                    /* how often to look for peers that never connected */
#define OFI_NAP_MS 1                   /* the longest sleep with libfabric peers (p2p.c) */

typedef struct p2p_engine p2p_engine; /* as coll/exec/p2p.h has it */

/* A message that arrived before its receive. */
typedef struct p2p_msg {
    frame_hdr h;
    char *buf;
    int drop;           /* its receive refused it: read it to keep the stream, then free */
    struct p2p_msg *next;
} p2p_msg;

typedef struct {
    weft_request *head, *tail;
} req_list;

typedef struct {
    req_list sends;            /* in posting order; the head is on the wire */
    req_list recvs;            /* posted, not matched yet */
    p2p_msg *uq_head, *uq_tail;/* arrived, not matched yet, in arrival order */
    frame_hdr h;               /* the message being read ... */
    uint32_t hdr;              /* ... its header bytes so far */
    weft_request *into;        /* ... read into this receive, or */
    p2p_msg *park;             /* ... into a buffer of its own */
    uint64_t got;
    uint64_t sent, recvd;      /* messages each way: every header carries its number */
    int readable, writable;    /* worth a try without asking poll() first */
    int wfd;                   /* when the head send cannot move: poll this ... */
    short wev;                 /* ... for this */
    int ofi;                   /* the pair talks libfabric (p2p_ofi.c), not its sockets */
    shm_link out, in;          /* same host: each way's hello, then its ring (p2p_shm.c) */
    int cma_wait;              /* the head send waits for its single copy's acknowledgement */
    int cma_rd;                /* the message being read comes by single copy, as cd says */
    shm_cma_desc cd;
    int held;                  /* its whole head is in, matched at the next pass (p2p_shm.c) */
    int reg_wait;              /* the head send waited on is a registered one (p2p_reg.h) */
    int reg_off;               /* sender: the peer refused registered regions: use the ring */
    int reg_refuse;            /* receiver: this side cannot map the peer's regions */
    int share;                 /* receiver: the single copy being read is offered to share */
    uint64_t share_mine;       /* ... and the bytes of it this side has copied */
    int share_off;             /* sender: this side cannot map the peer's regions */
    int gone;                  /* its stream ended or failed: nothing more moves */
    int gone_rc;
    char gone_why[200];
} p2p_peer;

/* What one sleeper polls: the engine's thread and a waiting caller
 * each build their own. */
typedef struct {
    struct pollfd *pf;
    int *peer;                 /* peer of each entry, or -1 */
    char *dir;                 /* 0: its incoming stream, 1: its outgoing */
    int n, ilfd, ipend, npend, ipeers;
    int nspin;                 /* entries before libfabric's wait fd */
    int ofi;                   /* a libfabric peer is live: its queue counts too */
    double spin_s;             /* how long to look before sleeping (a caller's grows: p2p_wait) */
} p2p_pollset;

struct ofi_net;

struct p2p_engine {
    weft_comm *c;
    tcp_net net;
    struct ofi_net *ofi;       /* its own libfabric endpoint, or NULL (p2p_ofi.c) */
    uint64_t ofi_msgs, ofi_bytes; /* what moved through it, both ways */
    char ofi_cut[200];         /* why it was closed under the others' feet */
    p2p_peer *peer;
    int rank, size;
    pthread_mutex_t mu;        /* the post list, stop, sever_rc, started */
    pthread_cond_t idle;       /* waiters dropped to 0, or stop */
    weft_request *post_head, *post_tail;
    int stop, sever_rc, started;
    int kick;                  /* the thread has work: stop parking */
    int parked;                /* the thread waits on idle, not in poll() */
    int listening;             /* the thread polls only for connections (listen_idle) */
    atomic_int waiters;        /* callers in p2p_wait: they drive, the thread keeps out */
    int wake[2];
    pthread_t thr;
    /* Everything below belongs to whoever holds drive: the thread, or a
     * caller waiting for its message (who then moves everyone's). */
    pthread_mutex_t drive;
    uint64_t epoch;            /* +1 each time a caller drives: the thread's poll set is stale */
    int outstanding;
    int severed, aborted;
    double last, next_probe;
    int fresh;                 /* moved since the clock was last read: last is due then */
    double spin_s;
    int spin_yields;
    int shm_on;                /* WEFT_P2P_SHM and WEFT_SHM: same-host pairs offer rings */
    int cma_said;              /* a refused single copy was logged */
    struct p2p_reg *reg;       /* weft_mem_alloc's regions, peers' mapped (p2p_reg.h) */
    int reg_said;              /* a refused registered copy was logged */
    uint64_t reg_parked;       /* registered payloads copied twice: early, then at the receive */
    uint64_t share_min;        /* WEFT_P2P_SHARE: registered payloads shared from this size; 0 never */
    uint64_t shared;           /* bytes this side copied of its sends into receivers' regions */
    int share_lazy;            /* a test's: offer to share, but copy none of it on this side */
    int caller_drives;         /* a caller waiting in p2p_wait drives (not the thread) */
    int pid;
    atomic_int poked;          /* a byte is in the wake pipe */
    p2p_pollset ps[2];         /* the thread's, a waiting caller's */
};


/* Take what callers posted (*stop: the engine is being destroyed).
 * Returns 1 when there was any. */
int p2p_take_posts(p2p_engine *e, int *stop);
/* Read every readable stream and write every writable peer's oldest
 * sends. 1: something moved. */
int p2p_sweep(p2p_engine *e);
/* Fail everything outstanding (abort, destroy); the peers' streams end. */
void p2p_fail_all(p2p_engine *e, int rc, const char *why);
/* Nothing moved for timeout_s while messages wait. */
void p2p_timed_out(p2p_engine *e);
/* Peers awaited but never connected: still alive? */
void p2p_probe(p2p_engine *e);
/* Free the messages nobody received. */
void p2p_free_parked(p2p_engine *e);

/* Shared by the two ways a peer's messages move (sockets in
 * p2p_stream.c, libfabric in p2p_ofi.c). */
void p2p_peer_gone(p2p_engine *e, int q, int rc, const char *why);
/* p->h holds a whole header as it came: check it, find its receive or
 * park it. 0, or negative when the peer is gone. A socket stream with an
 * empty body is then done already. */
int p2p_header_arrived(p2p_engine *e, int q);
/* The body of the message being read is in. */
void p2p_msg_arrived(p2p_engine *e, int q);
/* The head send is out whole. */
void p2p_sent(p2p_engine *e, int q);
/* Mark r under way (its flight record). */
void p2p_started(p2p_engine *e, weft_request *r);
/* A libfabric peer's messages: read what has come, send the head sends.
 * 1: something moved. */
int p2p_ofi_read(p2p_engine *e, int q);
int p2p_ofi_send(p2p_engine *e, int q);

/* Shared memory (p2p_shm.c) for a pair on one host. Each way opens with
 * a hello on its connection; a way whose hello chose TCP goes on over the
 * sockets (p2p_shm_tcp says so), a ring's carries only doorbells. */
int p2p_local(const p2p_engine *e, int q);
int p2p_shm_tcp(const shm_link *lk);
/* Read peer q's hello, then its ring. 1: something moved. */
int p2p_shm_read(p2p_engine *e, int q);
/* Send peer q's hello, then its oldest sends into the ring. 1: moved. */
int p2p_shm_send(p2p_engine *e, int q);
/* Can a ring move now? Reads only memory (a waiter's spin). */
int p2p_shm_ready(const p2p_engine *e);
/* The same, looking again up to looks times a few ns apart first. */
int p2p_shm_glance(const p2p_engine *e, int looks);
/* How much longer than its spin a waiting caller should look before it
 * sleeps: the time the receivers' single copies of its head sends
 * should take. */
double p2p_shm_copy_s(const p2p_engine *e);
/* 1 when some peer's link in either direction is a ring (else a waiter
 * has nothing in memory to look at). */
int p2p_shm_rings(const p2p_engine *e);
/* About to block in poll(): declare every ring waited on asleep, so its
 * peer rings the doorbell. 1: something can move after all (nothing is
 * declared then). */
int p2p_shm_sleep(p2p_engine *e);
/* Awake: withdraw the declarations (under drive, so no sleeper is left
 * without its doorbell). */
void p2p_shm_wake(p2p_engine *e);
/* Peer q failed: its ring's name goes unless the peer mapped it. */
void p2p_shm_gone(p2p_engine *e, int q);
/* Unmap every ring; names addressed to this rank that nobody will read
 * go (started: the engine ever moved a message). */
void p2p_shm_close(p2p_engine *e, int started);

#endif
