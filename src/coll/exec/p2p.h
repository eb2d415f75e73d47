/* The point-to-point progress engine. Every message moves on its own:
 * any number outstanding, posted in any order, to any peers, each
 * completes once its match is posted (MPI's progress rule). One thread per
 * communicator, started by the first message, owns a set of connections
 * of its own (so point-to-point traffic never waits behind a collective,
 * nor a collective behind it) and sleeps in poll() whenever nothing can
 * move.
 *
 * Matching: a receive from peer p with tag t takes the oldest message from
 * p with tag t, as in MPI and torch.distributed. Each message carries its
 * dtype and count; a receive that expects another is refused with
 * WEFT_EMISMATCH naming both. A message that arrives before its receive
 * is read into a buffer of its own (eager, unbounded: like MPI's eager
 * protocol without a limit), so no stream ever stalls behind a message
 * nobody asked for yet. */
#ifndef WEFT_COLL_EXEC_P2P_H
#define WEFT_COLL_EXEC_P2P_H

#include "coll/exec/request.h"
#include "transport/ofi.h"

typedef struct p2p_engine p2p_engine;

/* Listen for this communicator's point-to-point connections on ip;
 * addr_out gets the address its peers connect to (exchanged with the
 * communicator's own address at rendezvous). */
int p2p_create(p2p_engine **out, weft_comm *c, const char *ip, char addr_out[SOCK_ADDR_MAX],
               char *err, size_t errlen);
/* The peers' addresses, once known. */
void p2p_set_addr(p2p_engine *e, int peer, const char *addr);
/* Where the communicator opened libfabric (c->ofi): open the engine's
 * own endpoint on its provider; addr gets what to publish ("" without).
 * Errors recorded on the communicator. */
int p2p_net_open(p2p_engine *e, const char *ip, char addr[OFI_ADDR_MAX]);
/* After the communicator entered peer (comm_net_peer): a pair whose
 * collectives talk libfabric sends its messages through it too. */
int p2p_net_peer(p2p_engine *e, int peer, const char *addr);
/* Close the endpoint (destroy does; saying what went through it). */
void p2p_net_close(p2p_engine *e);
/* Start the engine's thread once the communicator is whole (its peers'
 * addresses set): from then on it answers peers' connections and their
 * handshakes even while this rank posts nothing, so a message sent
 * before its receive is posted completes (the receiver may be in a
 * collective or computing). 0, or WEFT_ESYS. */
int p2p_start(p2p_engine *e);
/* Hand r (type REQ_P2P, fully filled) to the engine; it completes
 * through req_complete. Starts the thread if not yet. wake: the thread
 * should move it (a non-blocking post); else the caller is about to wait
 * for it and drive it itself. */
int p2p_post(p2p_engine *e, weft_request *r, int wake);
/* Block until r is done, moving every message of the engine meanwhile
 * on the calling thread (r's result then waits under amu as usual). */
void p2p_wait(p2p_engine *e, weft_request *r);
/* Move what can move now, without blocking (weft_test); nothing when
 * another thread drives. */
void p2p_progress(p2p_engine *e);
/* weft_mem_alloc's regions of this process (p2p_reg.h), which the
 * direct all-to-all-v names to its peers as point-to-point does. */
struct p2p_reg *p2p_registry(p2p_engine *e);
/* The communicator failed: close every point-to-point connection (so
 * peers learn) and fail what is outstanding and what comes, with code. */
void p2p_sever(p2p_engine *e, int code);
/* Stop the thread (outstanding messages fail with WEFT_EABORTED), close,
 * free. NULL: nothing. */
void p2p_destroy(p2p_engine *e);

#endif
