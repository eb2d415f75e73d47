/* A non-blocking operation's handle, shared by the two ways one runs: a
 * collective waits its turn in the communicator's FIFO (async.c), a
 * point-to-point message progresses on its own in the p2p engine (p2p.c).
 * Completion is published under the communicator's amu and announced on
 * its dcv, so weft_wait and weft_test treat both alike. */
#ifndef WEFT_COLL_EXEC_REQUEST_H
#define WEFT_COLL_EXEC_REQUEST_H

#include "coll/comm_core.h"

#define REQ_MAGIC 0x72657175u
#define REQ_DEAD 0x64656164u

enum { REQ_COLL = 0, REQ_P2P };

struct weft_request {
    uint32_t magic;   /* REQ_MAGIC until freed: catches some double waits */
    uint8_t type;     /* REQ_* */
    weft_comm *c;
    weft_coll_args a; /* p2p: kind WEFT_COLL_SEND or _RECV, root = peer */
    uint64_t flight_id;
    int rc;
    atomic_int done;  /* set under amu; read without it by a waiter's spin */
    struct weft_request *next; /* the FIFO, or one of the p2p engine's lists */
    /* p2p only, owned by the engine thread once posted */
    int32_t tag;
    uint64_t bytes;   /* payload */
    uint64_t moved;   /* payload bytes sent or received */
    uint32_t hdr;     /* sender: header bytes sent */
    frame_hdr h;      /* sender: the header; receiver: what arrived */
    char err[320];    /* why it failed, naming the peer and the message */
};

/* Publish r's result and wake its waiters. */
void req_complete(weft_request *r, int rc);

#endif
