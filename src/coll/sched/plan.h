/* A schedule as data: rounds of ops, appended by the generators (each
 * its own file in coll/sched/) and read by the executors (coll/exec/ and
 * the simulator's coll/sched/vexec.c).
 *
 * Round semantics: when a round starts, its local ops (COPY, REDUCE) run in
 * order; then its network ops (SEND, RECV, RECV_REDUCE) all proceed
 * concurrently, except that ops to the same peer in the same direction keep
 * their order (the k-th send from a to b matches b's k-th receive from a).
 * A round ends when all its ops have completed; the next round then starts.
 * A SEND completes when its bytes are handed to the transport. */
#ifndef WEFT_COLL_SCHED_PLAN_H
#define WEFT_COLL_SCHED_PLAN_H

#include "weft.h"

enum sched_buf { SB_SEND = 0, SB_RECV = 1, SB_TMP = 2, SB_COUNT };

enum sched_kind {
    SOP_SEND = 0,    /* send [buf+off, len) to peer */
    SOP_RECV,        /* receive len bytes from peer into buf+off */
    SOP_RECV_REDUCE, /* receive len bytes x from peer;
                        buf[off..] = op(src_buf[src_off..], x) */
    SOP_COPY,        /* buf[off..off+len) = src_buf[src_off..] (memmove) */
    SOP_REDUCE       /* buf[off..] = op(buf[off..], src_buf[src_off..]) */
};

typedef struct {
    uint8_t kind;     /* enum sched_kind */
    uint8_t buf;      /* enum sched_buf: source of SEND, destination otherwise */
    uint8_t src_buf;  /* second operand of RECV_REDUCE/REDUCE, source of COPY */
    uint8_t pad_;
    int32_t peer;     /* rank in the communicator; -1 for local ops */
    uint64_t off;     /* byte offsets and length */
    uint64_t src_off;
    uint64_t len;
} sched_op;

typedef struct {
    sched_op *ops;
    uint32_t nops, cap;
    uint32_t *round_end;  /* ops of round k: [k ? round_end[k-1] : 0, round_end[k]) */
    uint32_t nrounds, rcap;
    uint64_t tmp_bytes;   /* scratch size SB_TMP must have */
    int err;              /* sticky: first allocation failure */
} weft_sched;

/* What a generator is asked to build: one rank's part of one collective. */
typedef struct {
    weft_coll_kind kind;
    int rank, nranks, root;  /* root: also the peer of SEND/RECV */
    uint64_t count;          /* elements (per rank where the API says so) */
    uint32_t esize;          /* bytes per element */
    int inplace;             /* send and recv are the same buffer: use SB_RECV */
    uint64_t chunk_bytes;    /* pipelining granularity; 0: default */
    const int32_t *host;     /* host index of every rank, numbered from 0 in
                                order of first appearance; NULL: unknown */
    const int32_t *cluster;  /* cluster of every rank when they span several
                                (WEFT_CLUSTER): hier's upper level is then
                                the cluster, not the host; NULL: one */
} sched_params;

#define SCHED_DEFAULT_CHUNK (512u * 1024u)

void sched_init(weft_sched *s);
void sched_free(weft_sched *s);
void sched_reset(weft_sched *s);
/* Close the current round (no-op when it is empty). */
void sched_end_round(weft_sched *s);
void sched_send(weft_sched *s, int peer, int buf, uint64_t off, uint64_t len);
void sched_recv(weft_sched *s, int peer, int buf, uint64_t off, uint64_t len);
void sched_recv_reduce(weft_sched *s, int peer, int buf, uint64_t off,
                       int src_buf, uint64_t src_off, uint64_t len);
void sched_copy(weft_sched *s, int dst_buf, uint64_t dst_off, int src_buf,
                uint64_t src_off, uint64_t len);
void sched_reduce(weft_sched *s, int dst_buf, uint64_t dst_off, int src_buf,
                  uint64_t src_off, uint64_t len);
void sched_need_tmp(weft_sched *s, uint64_t bytes);

#endif
