/* What the executor's parts share: coll/exec/exec.c runs rounds over
 * TCP, coll/exec/exec_shm.c moves the messages of same-host pairs through
 * shared-memory rings (transport/shm.h), coll/exec/exec_ofi.c those of
 * pairs that talk libfabric (transport/ofi.h). Internal to those files. */
#ifndef WEFT_COLL_EXEC_INT_H
#define WEFT_COLL_EXEC_INT_H

#include "coll/comm_core.h"

#define VISIT_BYTES (4u << 20) /* per op per sweep, so no op starves the others */
#define EXEC_NOT_SHM 2         /* the pair talks TCP: the caller moves the bytes */

typedef struct {
    frame_hdr h;
    int wfd;           /* when it could not move: the socket it waits on */
    short wev;
    uint64_t done;     /* payload bytes sent, received or reduced */
    uint32_t hdr;      /* header bytes sent or received */
    uint32_t partial;  /* RECV_REDUCE: bytes of an incomplete element staged */
    int complete;
    shm_cma_desc cd;   /* large messages over a ring: single copy or not */
    uint32_t cdone;    /* bytes of cd sent or received */
    int cma_wait;      /* sender: cd announced a single copy, not yet acknowledged */
    shm_link *lk;      /* when it could not move: the ring it waits on */
    int writer;        /* ... as its sender (1: for room, 2: for the acknowledgement of
                        * its single copy) or receiver (0: for bytes) */
    int pfi;           /* that wait's entry in the poll set */
    int ofi;           /* it moves through libfabric (exec_ofi.c) */
} opstate;

int exec_same_host(const weft_comm *c, int peer);
/* The op's bytes, when its pair shares memory; fd is the pair's ready TCP
 * connection (hello, doorbells). 1: progress, 0: none (st->wfd/wev/lk say
 * what to wait for), EXEC_NOT_SHM, or a negative error. */
int exec_shm_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp, int fd);
int exec_shm_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp, int fd);
/* Without shared memory, the hello that starts a same-host pair's
 * connection (out: send it, else read it) so that a hint may follow: 1
 * once the pair talks TCP, 0 not yet (or it uses a ring), negative error. */
int exec_shm_hello_tcp(weft_comm *c, int peer, int fd, int out, const frame_hdr *fp);

/* Hints (exec_hint.c): tell peer q, once per operation, that this rank
 * waits for it in call (0, or a negative error). */
int exec_hint_send(weft_comm *c, int q, const frame_hdr *call);
/* A hint's header h came from q: 0, or WEFT_EMISMATCH (recorded on c)
 * when this rank ran another call as that operation. */
int exec_hint_check(weft_comm *c, int q, const frame_hdr *h);
/* A whole header read from q: 1 when it is a hint (consumed, matching),
 * 0 when it is a message's, or WEFT_EMISMATCH. */
int exec_hint_take(weft_comm *c, int q, const frame_hdr *raw);

/* Of the ops st[shw[0..nsh)] that wait on rings: can any move now? */
int exec_shm_ready(const opstate *st, const int *shw, int nsh);
/* Declare them all asleep; 1: the caller may block (each peer now rings
 * on its next move), 0: one can move already (no flag is left set). */
int exec_shm_sleep(opstate *st, const int *shw, int nsh);
void exec_shm_wake(opstate *st, const int *shw, int nsh);
/* After poll(): read the doorbells that rang (noting ends of stream). */
void exec_shm_drain(opstate *st, const int *shw, int nsh, const void *pf);

/* Does the pair talk libfabric? Then these move the op's message (1:
 * progress, 0: none, st->wfd the completion queue's fd; negative error). */
int exec_ofi_pair(const weft_comm *c, int peer);
int exec_ofi_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp);
int exec_ofi_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp);
/* A header from peer q that waits while no receive of this round takes
 * it (TCP's peek at an unread header): one of this operation's number
 * that names another call is a mismatch (exec_mismatch's code); else 0. */
int exec_ofi_stray(weft_comm *c, const weft_sched *s, uint32_t b, uint32_t e,
                   const opstate *st, const frame_hdr *fp, int q);

#endif
