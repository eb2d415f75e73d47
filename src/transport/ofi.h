/* libfabric transport (WEFT_NET=ofi): one reliable-datagram endpoint
 * (FI_EP_RDM) per communicator, reached by tagged messages, so that an
 * RDMA fabric (verbs for InfiniBand and RoCE, efa, cxi, psm3) moves weft's
 * bytes without the kernel. It is developed on the tcp and shm providers,
 * and nothing here is specific to either.
 *
 * Connectionless: a peer is its address vector entry, made from the name
 * it published at rendezvous. A message from src to dst is a header (the
 * frame fingerprint of the call, as on TCP) and, when the payload is small,
 * the payload in the same tagged message; a large payload follows in
 * chunks, each its own tagged message, received straight into the
 * destination (or a staging buffer that is reduced as each chunk lands).
 * Where the provider offers RMA writes with remote data (FI_RMA,
 * cq_data_size), a body of 256 KiB or more waits for its receiver's
 * answer: the destination's registration key, then the sender writes the
 * chunks straight into it and each write's remote data tells the receiver
 * it has landed; a reducing receive answers "tagged" instead.
 * Every message of a pair and channel carries the next number of that
 * pair's count in its tag, so each receive matches exactly one send and
 * the provider's ordering does not matter.
 *
 * With a job secret, a sender's first message to a peer is a proof
 * (HMAC of the secret over both ranks, the communicator and the nonces
 * both published at rendezvous); the receiver posts no receive for data
 * until the proof has arrived and checked.
 *
 * At most one outgoing and one incoming message per peer and channel are
 * under way at a time (the executor's rule), so their state lives here,
 * per peer, and outlives the caller's round: a failure severs the net
 * (closes the endpoint), so nothing lands in a caller's buffer after it
 * has been told of the error. */
#ifndef WEFT_TRANSPORT_OFI_H
#define WEFT_TRANSPORT_OFI_H

#include <stddef.h>
#include <stdint.h>

#include "core/frame.h"

#define OFI_NAME_MAX 112                          /* endpoint name bytes */
#define OFI_ADDR_MAX (2 * OFI_NAME_MAX + 4 + 64 + 1) /* "hex(name)/hex(nonce)[/w]" */

enum { OFI_CH_COLL = 0, OFI_CH_P2P = 1, OFI_CH_COUNT };

typedef struct ofi_net ofi_net;

typedef struct {
    int rank, size;
    uint64_t comm_id;
    const char *provider; /* NULL or "": any (auto: any but tcp, sockets, udp, shm) */
    int must;             /* 1: WEFT_NET=ofi (no provider is an error); 0: auto */
    const char *bind_ip;  /* prefer the fabric with this address (sockaddr providers) */
    const char *secret;   /* NULL: no proofs */
    int loglevel;
    int no_rma;           /* 1: large messages as tagged chunks even where RMA is offered */
} ofi_opts;

/* 1 when this build has libfabric (WEFT_HAVE_LIBFABRIC). */
int ofi_compiled(void);
/* Open a fabric, domain, endpoint. 0: *out is ready and addr holds what
 * the peers need; 1: auto found nothing worth using (*out NULL); negative:
 * error, err filled. */
int ofi_open(ofi_net **out, const ofi_opts *o, char addr[OFI_ADDR_MAX], char *err,
             size_t errlen);
/* Enter peer's published address ("" for a peer without ofi: then it has
 * none, and the caller uses TCP with it). */
int ofi_set_peer(ofi_net *n, int peer, const char *addr, char *err, size_t errlen);
int ofi_has_peer(const ofi_net *n, int peer);
/* "provider tcp;ofi_rxm, fabric 127.0.0.1/32, domain lo, rma" */
const char *ofi_describe(const ofi_net *n);
/* The provider's name ("tcp;ofi_rxm"): what a second endpoint of the
 * same job names so that it lands on the same provider. */
const char *ofi_provider(const ofi_net *n);
void ofi_close(ofi_net *n);
/* After a failure: close the endpoint so no posted operation completes
 * into a buffer whose owner has moved on; every later call fails. */
void ofi_sever(ofi_net *n);

/* Read the completion queue (the provider's manual progress). 0 or a
 * negative error that is not one peer's. */
int ofi_progress(ofi_net *n);
/* A file descriptor that becomes readable when a completion may be
 * waiting, or -1 when the provider has none (then poll with a timeout). */
int ofi_wait_fd(const ofi_net *n);
/* About to sleep on the wait fd: 1 yes, 0 the queue needs reading first.
 * It is also what rearms the fd (a provider's wait object stays readable
 * from its last completion until then), and it costs the provider a full
 * progress pass, so a waiter spins on ofi_poll and calls this only when
 * it is really about to block. */
int ofi_may_sleep(ofi_net *n);
/* One read of the completion queue for a spinning waiter: 1 when an
 * operation completed (look again), 0 none, negative as ofi_progress. */
int ofi_poll(ofi_net *n);

/* Send header h and len payload bytes from buf to peer on channel ch.
 * Call again until it returns 1 (sent); 0: under way; negative: the send
 * failed (WEFT_EPEER: the peer is unreachable), err filled. The first call
 * of a message starts it; buf must stay valid until 1. */
int ofi_send(ofi_net *n, int peer, int ch, const frame_hdr *h, const void *buf, uint64_t len,
             char *err, size_t errlen);
/* The next message's header from peer: 1 with *h filled (decode and check
 * it, then take the body with ofi_recv_body), 0 not yet, negative error. */
int ofi_recv_hdr(ofi_net *n, int peer, int ch, frame_hdr *h, char *err, size_t errlen);
/* Chunks of the body: the callback gets each as it lands (off, bytes),
 * in any order, unless dst is given: then they land in dst and the
 * callback is not called. 1: the whole body is in, 0: not yet, negative:
 * error (a callback's own error is passed on). len is the header's. */
typedef int (*ofi_chunk_fn)(void *arg, uint64_t off, const void *p, size_t n);
int ofi_recv_body(ofi_net *n, int peer, int ch, void *dst, uint64_t len, ofi_chunk_fn fn,
                  void *arg, char *err, size_t errlen);

/* Registration of buf (the cache the data path uses when the provider
 * asks for local registration): *desc for a descriptor, NULL when the
 * provider needs none. Registrations made so far (for the cache's test). */
int ofi_reg(ofi_net *n, const void *buf, size_t len, void **desc);
uint64_t ofi_reg_count(const ofi_net *n);
/* Payload bytes that went through a bounce buffer, and bytes placed by
 * chunks straight from / into the caller's memory (zero-copy check). */
void ofi_copy_stats(const ofi_net *n, uint64_t *bounced, uint64_t *direct);
/* Payload bytes this end sent as RMA writes, and whether it can (the
 * provider offers RMA with remote data and the peer's endpoint took it). */
uint64_t ofi_rma_bytes(const ofi_net *n);
int ofi_rma_with(const ofi_net *n, int peer);
/* Completion-queue reads so far and the fi_trywait checks before a
 * sleep (what a small message costs besides its bytes). */
void ofi_wait_stats(const ofi_net *n, uint64_t *reads, uint64_t *trywaits);

#endif
