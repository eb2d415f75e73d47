/* The types the executor's parts share: coll/exec/exec.c runs rounds over
 * TCP, exec_shm.c moves the messages of same-host pairs through
 * shared-memory rings (transport/shm.h), exec_ofi.c those of pairs that
 * talk libfabric (transport/ofi.h), exec_hint.c tells a peer what this
 * rank waits for. Each declares its functions in its own header. */
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

#endif
